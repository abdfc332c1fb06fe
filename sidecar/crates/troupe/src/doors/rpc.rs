//! The JSON-RPC door: builds the jsonrpsee module from the operation registry and serves it
//! on the Unix socket and the loopback WebSocket, refusing any connection without a credential
//! (and, on the socket, any peer of another uid). Who a connection is (`crate::auth::Gate`)
//! travels with each of its calls to the registry, which admits them. No operation logic here.
//! An unknown method's error names it (in a batch too), and a subscription sent over plain HTTP
//! or in a batch gets a typed refusal (jsonrpsee's own answer is a bare "Internal error").

use std::sync::Arc;

use jsonrpsee::server::{
    HttpBody, HttpRequest, HttpResponse, Methods, RpcModule, Server, ServerConfig, StopHandle,
    serve_with_graceful_shutdown,
};
use jsonrpsee::types::ErrorObjectOwned;
use jsonrpsee_core::middleware::{
    Batch, BatchEntry, BatchEntryErr, Notification, Request, RpcServiceT,
};
use jsonrpsee_core::server::MethodResponse;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::task::JoinSet;
use tower::Service;
use troupe_api::{OPERATIONS, SUBSCRIPTIONS};
use troupe_core::Daemon;

/// An API error as the JSON-RPC error object sent on the wire: its stable code, its message,
/// and `data` (its kind, and what was not found). The one place errors get their wire shape.
trait ToRpc {
    fn to_rpc(&self) -> ErrorObjectOwned;
}

impl ToRpc for troupe_api::ApiError {
    fn to_rpc(&self) -> ErrorObjectOwned {
        let (code, _) = self.code_and_kind();
        ErrorObjectOwned::owned(code, self.to_string(), Some(self.data()))
    }
}

/// The JSON-RPC error for a connection without a valid token (sent with HTTP 401).
fn unauthorized(reason: &str) -> ErrorObjectOwned {
    ErrorObjectOwned::owned(
        troupe_api::error::codes::UNAUTHORIZED,
        format!("unauthorized: {reason}"),
        Some(serde_json::json!({ "kind": "unauthorized" })),
    )
}

/// Connections served at once (each CLI call, editor and agent holds one).
const MAX_CONNECTIONS: u32 = 4096;

/// A call's params as JSON (none when it sent none), or the parse error to answer.
fn json_params(raw: Option<&str>) -> Result<Option<Value>, ErrorObjectOwned> {
    raw.map(serde_json::from_str).transpose().map_err(|e| {
        ErrorObjectOwned::owned(
            troupe_api::error::codes::PARSE_ERROR,
            format!("params are not JSON: {e}"),
            None::<()>,
        )
    })
}

/// Registers every operation and subscription of the registry.
pub fn build_module(daemon: &Arc<Daemon>) -> anyhow::Result<Methods> {
    let mut module = RpcModule::new(());
    for op in OPERATIONS {
        let call = troupe_core::registry::handler(op.name)
            .ok_or_else(|| anyhow::anyhow!("operation {} has no handler", op.name))?;
        let daemon = daemon.clone();
        module.register_async_method(op.name, move |params, _, extensions| {
            let daemon = daemon.clone();
            let caller = extensions.get::<troupe_core::Caller>().cloned();
            async move {
                let params = json_params(params.as_str())?;
                let caller = caller.ok_or_else(|| unauthorized("no credential"))?;
                call(daemon, caller, params).await.map_err(|e| e.to_rpc())
            }
        })?;
    }
    for sub in SUBSCRIPTIONS {
        let daemon = daemon.clone();
        module.register_subscription(
            sub.name,
            sub.notification,
            sub.unsubscribe,
            move |params, pending, _, _| {
                let daemon = daemon.clone();
                async move {
                    let raw: Option<Value> = match params.as_str() {
                        None => None,
                        Some(raw) => match serde_json::from_str(raw) {
                            Ok(v) => Some(v),
                            Err(e) => {
                                let e = troupe_api::ApiError::invalid(sub.name, e.to_string());
                                return pending.reject(e.to_rpc()).await;
                            }
                        },
                    };
                    let mut feed = match troupe_core::feeds::open(&daemon, sub.name, raw) {
                        Ok(feed) => feed,
                        Err(e) => return pending.reject(e.to_rpc()).await,
                    };
                    let Ok(sink) = pending.accept().await else {
                        return;
                    };
                    loop {
                        let items = tokio::select! {
                            items = feed.next() => items,
                            _ = sink.closed() => return,
                        };
                        let Some(items) = items else { return };
                        for item in items {
                            let Ok(json) = serde_json::value::to_raw_value(&item) else {
                                return;
                            };
                            if sink.send(json).await.is_err() {
                                return; // the subscriber went away
                            }
                        }
                    }
                }
            },
        )?;
    }
    Ok(module.into())
}

/// What answers an operation somewhere else (a remote worker's way to the hub): name, params →
/// the result, or a JSON-RPC error (code, message, data).
pub type Forward = Arc<
    dyn Fn(
            &'static str,
            Option<Value>,
        )
            -> futures_util::future::BoxFuture<'static, Result<Value, (i32, String, Option<Value>)>>
        + Send
        + Sync,
>;

/// Registers every operation as a call of `forward`; subscriptions are refused (they need the
/// daemon itself).
pub fn build_forwarding_module(forward: Forward) -> anyhow::Result<Methods> {
    let mut module = RpcModule::new(());
    for op in OPERATIONS {
        let forward = forward.clone();
        let name = op.name;
        module.register_async_method(name, move |params, _, _| {
            let forward = forward.clone();
            async move {
                let params = json_params(params.as_str())?;
                forward(name, params)
                    .await
                    .map_err(|(code, message, data)| ErrorObjectOwned::owned(code, message, data))
            }
        })?;
    }
    Ok(module.into())
}

/// Server limits: the request body must hold the largest allowed message, JSON-escaped.
pub fn server_config(max_message_bytes: usize) -> ServerConfig {
    let body = max_message_bytes
        .saturating_mul(6)
        .saturating_add(64 * 1024)
        .min(u32::MAX as usize) as u32;
    ServerConfig::builder()
        .max_request_body_size(body)
        .max_response_body_size(u32::MAX)
        .max_connections(MAX_CONNECTIONS)
        .build()
}

/// Serves one accepted connection (socket or TCP) until it closes or the daemon stops.
pub fn serve_connection<S>(
    tasks: &mut JoinSet<()>,
    io: S,
    methods: Methods,
    config: ServerConfig,
    gate: crate::auth::Gate,
    stop: StopHandle,
) where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let svc = Server::builder()
        .set_config(config)
        .set_rpc_middleware(
            jsonrpsee::server::middleware::rpc::RpcServiceBuilder::new()
                .layer_fn(NameUnknownMethods),
        )
        .to_service_builder()
        .build(methods, stop.clone());
    let svc = tower::service_fn(move |mut req: HttpRequest<hyper::body::Incoming>| {
        let mut svc = svc.clone();
        let verdict = gate.admit(req.headers());
        async move {
            // An error type with a `'static` bound spelled out, or the spawn below does not
            // type-check (the same trick as jsonrpsee's own service example).
            let response: anyhow::Result<HttpResponse> = match verdict {
                Ok(caller) => {
                    if let Some(caller) = caller {
                        req.extensions_mut().insert(caller);
                    }
                    svc.call(req).await.map_err(|e| anyhow::anyhow!("{e}"))
                }
                Err(reason) => Ok(refusal(&reason)),
            };
            response
        }
    });
    tasks.spawn(async move {
        if let Err(e) = serve_with_graceful_shutdown(io, svc, stop.shutdown()).await {
            tracing::debug!(error = %e, "connection ended with an error");
        }
    });
}

/// HTTP 401 carrying a JSON-RPC error body, so HTTP and WebSocket clients both learn why.
fn refusal(reason: &str) -> HttpResponse {
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": unauthorized(reason),
    });
    let mut response = HttpResponse::new(HttpBody::from(body.to_string()));
    *response.status_mut() = http::StatusCode::UNAUTHORIZED;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

/// The error for a call of an unknown method: it names the method.
fn unknown_method(method: &str) -> ErrorObjectOwned {
    ErrorObjectOwned::owned(
        troupe_api::error::codes::METHOD_NOT_FOUND,
        format!("unknown operation {method:?} (`troupe api list` lists them)"),
        Some(serde_json::json!({ "kind": "method_not_found", "method": method })),
    )
}

/// Answers a call to an unknown method with an error that names it (jsonrpsee's own says only
/// "Method not found").
#[derive(Debug, Clone)]
struct NameUnknownMethods<S>(S);

fn is_known(method: &str) -> bool {
    troupe_api::operation(method).is_some()
        || SUBSCRIPTIONS
            .iter()
            .any(|s| s.name == method || s.unsubscribe == method)
}

impl<S> RpcServiceT for NameUnknownMethods<S>
where
    S: RpcServiceT<MethodResponse = MethodResponse> + Send + Sync + Clone + 'static,
{
    type MethodResponse = MethodResponse;
    type NotificationResponse = S::NotificationResponse;
    type BatchResponse = S::BatchResponse;

    fn call<'a>(
        &self,
        request: Request<'a>,
    ) -> impl Future<Output = Self::MethodResponse> + Send + 'a {
        use futures_util::future::Either;
        let method = request.method_name();
        if let Some(sub) = SUBSCRIPTIONS
            .iter()
            .find(|s| s.name == method || s.unsubscribe == method)
        {
            // jsonrpsee answers a subscription over plain HTTP with a bare "Internal error"
            // (found by fuzzing): say what is wrong instead.
            let id = request.id.clone().into_owned();
            let name = if sub.name == method {
                sub.name
            } else {
                sub.unsubscribe
            };
            let inner = self.0.call(request);
            Either::Left(Either::Right(async move {
                let response = inner.await;
                if response.as_error_code() != Some(troupe_api::error::codes::INTERNAL)
                    || !response.as_json().get().contains("\"Internal error\"")
                {
                    return response;
                }
                MethodResponse::error(
                    id,
                    ErrorObjectOwned::owned(
                        troupe_api::error::codes::INVALID_REQUEST,
                        format!(
                            "{name} is a subscription: it needs a WebSocket connection, not a plain HTTP request"
                        ),
                        Some(serde_json::json!({ "kind": "invalid_request", "method": name })),
                    ),
                )
            }))
        } else if is_known(method) {
            Either::Left(Either::Left(self.0.call(request)))
        } else {
            let error = unknown_method(method);
            Either::Right(std::future::ready(MethodResponse::error(request.id, error)))
        }
    }

    fn batch<'a>(
        &self,
        mut requests: Batch<'a>,
    ) -> impl Future<Output = Self::BatchResponse> + Send + 'a {
        // Entries that would not be served are refused here, each with an error that says why:
        // unknown methods (named), and subscriptions, which jsonrpsee answers inside a batch
        // over HTTP with a bare "Internal error" (found by fuzzing).
        for entry in requests.iter_mut() {
            let refusal = match entry {
                Ok(BatchEntry::Call(req)) => {
                    let method = req.method_name();
                    let error = if !is_known(method) {
                        Some(unknown_method(method))
                    } else if SUBSCRIPTIONS
                        .iter()
                        .any(|s| s.name == method || s.unsubscribe == method)
                    {
                        Some(ErrorObjectOwned::owned(
                            troupe_api::error::codes::INVALID_REQUEST,
                            format!(
                                "{method} is a subscription: send it alone over a WebSocket connection, not in a batch"
                            ),
                            Some(
                                serde_json::json!({ "kind": "invalid_request", "method": method }),
                            ),
                        ))
                    } else {
                        None
                    };
                    error.map(|e| (req.id.clone(), e))
                }
                _ => None,
            };
            if let Some((id, error)) = refusal {
                *entry = Err(BatchEntryErr::new(id, error));
            }
        }
        self.0.batch(requests)
    }

    fn notification<'a>(
        &self,
        n: Notification<'a>,
    ) -> impl Future<Output = Self::NotificationResponse> + Send + 'a {
        self.0.notification(n)
    }
}
