//! The executor's only way out: `wasi:http` requests pass this gate, which checks the origin
//! against the manifest and the user's grants, refuses private addresses unless granted, adds
//! the provider key (the guest can neither see nor set auth headers), clamps timeouts and
//! enforces the run's request and response-byte budgets.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http::HeaderName;
use http::uri::Scheme;
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use wasmtime_wasi_http::{
    DEFAULT_FORBIDDEN_HEADERS, Error as HttpError, ForbiddenHeaderFilter, RequestOptions, WasiBody,
    WasiHttpHooks,
};

use crate::grants::{Origin, is_private};

/// Per-run budgets, shared by every request of the run.
#[derive(Debug)]
pub struct Budget {
    pub requests_left: AtomicU64,
    pub bytes_left: AtomicU64,
}

impl Budget {
    pub fn new(requests: u64, bytes: u64) -> Arc<Budget> {
        Arc::new(Budget {
            requests_left: AtomicU64::new(requests),
            bytes_left: AtomicU64::new(bytes),
        })
    }

    fn take(counter: &AtomicU64, n: u64) -> bool {
        counter
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |left| {
                left.checked_sub(n)
            })
            .is_ok()
    }
}

/// The gate for one plugin store.
pub struct HttpGate {
    pub(crate) label: String,
    /// Manifest hosts (`*` = any granted).
    pub(crate) manifest_hosts: Vec<String>,
    pub(crate) granted: Vec<Origin>,
    pub(crate) allow_private: bool,
    /// (header, full value) added to every allowed request.
    pub(crate) key: Option<(HeaderName, String)>,
    pub(crate) budget: Arc<Budget>,
    /// Requests refused so far, for the run's error message.
    pub(crate) denied: Arc<std::sync::Mutex<Vec<String>>>,
}

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(300);
const BETWEEN_BYTES_TIMEOUT: Duration = Duration::from_secs(120);

/// Headers a guest may never set: credentials are the host's business.
fn forbidden(name: &HeaderName, key_header: Option<&HeaderName>) -> bool {
    matches!(
        name.as_str(),
        "authorization"
            | "proxy-authorization"
            | "x-api-key"
            | "api-key"
            | "x-goog-api-key"
            | "cookie"
    ) || key_header == Some(name)
        || DEFAULT_FORBIDDEN_HEADERS.contains(name)
}

impl HttpGate {
    /// Why a request to this origin is refused, or None.
    fn refusal(&self, https: bool, host: &str, port: u16) -> Option<String> {
        let asked = self
            .manifest_hosts
            .iter()
            .any(|h| h == "*" || h.eq_ignore_ascii_case(host));
        if !asked {
            return Some(format!(
                "{host} is not among the hosts its manifest asks for"
            ));
        }
        if !self.granted.iter().any(|o| o.matches(https, host, port)) {
            let scheme = if https { "https" } else { "http" };
            return Some(format!(
                "{scheme}://{host}:{port} is not granted (troupe plugin grant {} --http ...)",
                self.label.split('@').next().unwrap_or(&self.label)
            ));
        }
        None
    }

    fn deny(&self, why: String) -> HttpError {
        note_denied(&self.denied, &self.label, why);
        HttpError::HttpRequestDenied
    }
}

type SendResult = Result<
    (
        http::Response<WasiBody>,
        Box<dyn Future<Output = Result<(), HttpError>> + Send>,
    ),
    HttpError,
>;

impl WasiHttpHooks for HttpGate {
    fn forbidden_header_filter(&mut self) -> ForbiddenHeaderFilter {
        let key = self.key.as_ref().map(|(h, _)| h.clone());
        Arc::new(move |name| forbidden(name, key.as_ref()))
    }

    fn send_request(
        &mut self,
        mut request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        fut: Box<dyn Future<Output = Result<(), HttpError>> + Send>,
    ) -> Box<dyn Future<Output = SendResult> + Send> {
        drop(fut);
        let uri = request.uri().clone();
        let https = uri.scheme() == Some(&Scheme::HTTPS);
        let Some(host) = uri
            .host()
            .map(|h| h.trim_matches(['[', ']']).to_ascii_lowercase())
        else {
            return Box::new(async { Err(HttpError::HttpRequestUriInvalid) });
        };
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        // Refused requests count too: a guest cannot spin on them for free.
        if !Budget::take(&self.budget.requests_left, 1) {
            let err = self.deny("the run's HTTP request budget is spent".into());
            return Box::new(async move { Err(err) });
        }
        if let Some(why) = self.refusal(https, &host, port) {
            let err = self.deny(why);
            return Box::new(async move { Err(err) });
        }
        // The guest could not set these (forbidden), so anything here is ours.
        if let Some((name, value)) = &self.key
            && let Ok(v) = http::HeaderValue::from_str(value)
        {
            let mut v = v;
            v.set_sensitive(true);
            request.headers_mut().insert(name.clone(), v);
        }
        let options = Some(RequestOptions {
            connect_timeout: Some(clamp(
                options.and_then(|o| o.connect_timeout),
                CONNECT_TIMEOUT,
            )),
            first_byte_timeout: Some(clamp(
                options.and_then(|o| o.first_byte_timeout),
                FIRST_BYTE_TIMEOUT,
            )),
            between_bytes_timeout: Some(clamp(
                options.and_then(|o| o.between_bytes_timeout),
                BETWEEN_BYTES_TIMEOUT,
            )),
        });
        let literal = host.parse::<std::net::IpAddr>().is_ok();
        let allow_private = self.allow_private || literal || host == "localhost";
        let budget = self.budget.clone();
        let label = self.label.clone();
        let denied = self.denied.clone();
        Box::new(async move {
            // A granted name must not lead somewhere private unless that was granted too (a
            // literal or `localhost` origin is itself the grant). The connection resolves the
            // name again; a rebinding answer cannot get further than the TLS handshake, since a
            // remote origin is always https and verified against the granted name.
            if !allow_private {
                match public_only(&host, port).await {
                    Ok(()) => {}
                    Err(None) => return Err(HttpError::DestinationNotFound),
                    Err(Some(why)) => {
                        note_denied(&denied, &label, why);
                        return Err(HttpError::DestinationIpProhibited);
                    }
                }
            }
            let (response, io) = wasmtime_wasi_http::default_send_request(request, options).await?;
            let response = response.map(|body| {
                Counted {
                    inner: body.boxed_unsync(),
                    budget,
                }
                .boxed_unsync()
            });
            Ok((
                response,
                Box::new(io) as Box<dyn Future<Output = Result<(), HttpError>> + Send>,
            ))
        })
    }
}

/// Most refusals remembered (and logged) per store.
const MAX_DENIED: usize = 8;

fn note_denied(denied: &std::sync::Mutex<Vec<String>>, label: &str, why: String) {
    if let Ok(mut d) = denied.lock()
        && d.len() < MAX_DENIED
    {
        tracing::warn!(plugin = %label, "http request refused: {why}");
        d.push(why);
    }
}

/// Resolves `host`; refuses it when any address is private (`Err(Some(why))`) or when it
/// does not resolve (`Err(None)`).
pub(crate) async fn public_only(host: &str, port: u16) -> Result<(), Option<String>> {
    let addrs = tokio::net::lookup_host((host, port))
        .await
        .map_err(|_| None)?;
    for a in addrs {
        if is_private(&a.ip()) {
            return Err(Some(format!(
                "{host} resolves to the private address {}",
                a.ip()
            )));
        }
    }
    Ok(())
}

fn clamp(asked: Option<Duration>, max: Duration) -> Duration {
    asked.map_or(max, |d| d.min(max))
}

/// A response body that stops when the run's byte budget is spent.
struct Counted {
    inner: WasiBody,
    budget: Arc<Budget>,
}

impl Body for Counted {
    type Data = Bytes;
    type Error = HttpError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, HttpError>>> {
        let frame = ready!(Pin::new(&mut self.inner).poll_frame(cx));
        if let Some(Ok(f)) = &frame
            && let Some(data) = f.data_ref()
            && !Budget::take(&self.budget.bytes_left, data.len() as u64)
        {
            return Poll::Ready(Some(Err(HttpError::HttpResponseBodySize(None))));
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }
}
