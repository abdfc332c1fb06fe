//! The daemon's client side, used by the CLI, the demo, the benchmark and the tests: finds the
//! daemon of a data dir (starting it when asked and needed), checks the socket and token belong
//! to us, and speaks JSON-RPC over the Unix socket or the WebSocket.

use std::fs;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};
use jsonrpsee_core::client::{ClientT, Subscription, SubscriptionClientT};
use jsonrpsee_core::traits::ToRpcParams;
use jsonrpsee_ws_client::{HeaderMap, HeaderValue, WsClient, WsClientBuilder};
use serde_json::Value;
use serde_json::value::RawValue;
use tokio::net::UnixStream;

use troupe_api::layout::Endpoint;
use troupe_api::layout::{Layout, check_private_file};

/// Longest a call may take (a long-poll waits up to 300 s).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(330);
/// Longest we wait for a daemon we started to accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(15);
/// Longest a member's call waits for its daemon to be back (a restart adopting the run); a
/// member never starts one.
const MEMBER_WAIT: Duration = Duration::from_secs(10);

/// Which door this process is, as its calls tell the daemon.
#[derive(Debug, Clone, Copy)]
struct DoorName {
    name: &'static str,
    /// Calls for an agent CLI the person runs (`troupe mcp`, hooks): an agent's rights.
    agent: bool,
}

static DOOR: std::sync::OnceLock<DoorName> = std::sync::OnceLock::new();

/// Names the door this process's calls come through (`cli` when never named): the person's
/// decisions record it. `agent`: this process serves an agent CLI (`troupe mcp`, a hook), whose
/// calls get an agent's rights even with the person's token. Set once, at start.
pub fn set_door(name: &'static str, agent: bool) {
    if DOOR.set(DoorName { name, agent }).is_err() {
        tracing::debug!(door = name, "the door was already named");
    }
}

/// Whether this process is (a process of) a member Troupe started: it calls with its run's
/// credential.
pub fn is_member() -> bool {
    run_token().is_some()
}

/// This process's run credential, when it is (a process of) a member Troupe started.
fn run_token() -> Option<String> {
    std::env::var(troupe_api::layout::RUN_TOKEN)
        .ok()
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
}

/// A failed call: the daemon's JSON-RPC error, or a transport failure.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("{message} (error {code})")]
    Rpc {
        code: i32,
        message: String,
        data: Option<Value>,
    },
    #[error("cannot reach the daemon: {0}")]
    Transport(String),
}

impl CallError {
    /// The error's `data.kind` (`not_found`, `invalid_params`, …), when the daemon sent one.
    pub fn kind(&self) -> Option<&str> {
        match self {
            CallError::Rpc {
                data: Some(data), ..
            } => data.get("kind")?.as_str(),
            _ => None,
        }
    }

    pub fn code(&self) -> Option<i32> {
        match self {
            CallError::Rpc { code, .. } => Some(*code),
            CallError::Transport(_) => None,
        }
    }
}

impl From<jsonrpsee_core::ClientError> for CallError {
    fn from(e: jsonrpsee_core::ClientError) -> Self {
        match e {
            jsonrpsee_core::ClientError::Call(obj) => CallError::Rpc {
                code: obj.code(),
                message: obj.message().to_string(),
                data: obj.data().and_then(|d| serde_json::from_str(d.get()).ok()),
            },
            other => CallError::Transport(other.to_string()),
        }
    }
}

/// Params already in JSON form.
struct Params(Option<Box<RawValue>>);

impl ToRpcParams for Params {
    fn to_rpc_params(self) -> Result<Option<Box<RawValue>>, serde_json::Error> {
        Ok(self.0)
    }
}

fn params(value: &Value) -> Result<Params, CallError> {
    serde_json::value::to_raw_value(value)
        .map(|raw| Params(Some(raw)))
        .map_err(|e| CallError::Transport(format!("cannot encode params: {e}")))
}

/// A connection to the daemon.
#[derive(Debug)]
pub struct Client {
    rpc: WsClient,
}

impl Client {
    /// Whether the connection to the daemon is still up.
    pub fn is_connected(&self) -> bool {
        self.rpc.is_connected()
    }

    /// Calls an operation with JSON params.
    pub async fn call(&self, op: &str, args: Value) -> Result<Value, CallError> {
        Ok(self.rpc.request::<Value, _>(op, params(&args)?).await?)
    }

    /// Calls an operation with typed params and result.
    pub async fn call_typed<P: serde::Serialize, R: serde::de::DeserializeOwned>(
        &self,
        op: &str,
        args: &P,
    ) -> Result<R, CallError> {
        let args = serde_json::to_value(args)
            .map_err(|e| CallError::Transport(format!("cannot encode params: {e}")))?;
        let value = self.call(op, args).await?;
        serde_json::from_value(value)
            .map_err(|e| CallError::Transport(format!("unexpected reply to {op}: {e}")))
    }

    /// Subscribes to any subscription of the registry; items arrive as JSON.
    pub async fn subscribe(
        &self,
        name: &str,
        args: Value,
        unsubscribe: &str,
    ) -> Result<Subscription<Value>, CallError> {
        Ok(self
            .rpc
            .subscribe::<Value, _>(name, params(&args)?, unsubscribe)
            .await?)
    }

    /// Subscribes to a session's messages; each item is a `Message` as JSON.
    pub async fn subscribe_messages(&self, args: Value) -> Result<Subscription<Value>, CallError> {
        Ok(self
            .rpc
            .subscribe::<Value, _>("subscribe_messages", params(&args)?, "unsubscribe_messages")
            .await?)
    }
}

/// Connects to the daemon of `layout` over its Unix socket, starting it first if it is not
/// running and `autostart` is set.
pub async fn connect(layout: &Layout, autostart: bool) -> anyhow::Result<Client> {
    let reached = reach(layout, autostart).await?;
    let rpc = builder(&reached.token)?
        .build_with_stream("ws://localhost/", reached.stream)
        .await
        .context("the daemon refused the connection")?;
    Ok(Client { rpc })
}

/// Calls one operation in a single HTTP request on the daemon's Unix socket, starting the
/// daemon as `connect` does: what a one-shot call needs (`troupe call`, a member's
/// `complete`), without a WebSocket's handshake and the daemon's tasks for it.
pub async fn call_once(
    layout: &Layout,
    autostart: bool,
    op: &str,
    args: Value,
) -> anyhow::Result<Value> {
    let reached = reach(layout, autostart).await?;
    Ok(post(reached, op, args).await?)
}

/// A socket the daemon listens on, connected, and the credential to present there.
struct Reached {
    stream: UnixStream,
    token: String,
}

/// The daemon's socket, connected (the daemon started first when allowed).
async fn reach(layout: &Layout, autostart: bool) -> anyhow::Result<Reached> {
    // A member never starts a daemon (Troupe stopped means stopped), nor does a remote
    // member, whose endpoint is its worker's: it waits a while for one to be back.
    let member = run_token().is_some();
    let autostart = autostart
        && !member
        && std::env::var_os("TROUPE_NO_AUTOSTART").is_none_or(|v| v.is_empty());
    match try_reach(layout).await {
        Ok(reached) => return Ok(reached),
        Err(NotRunning::Refused(e)) => return Err(e),
        Err(NotRunning::Absent(_)) if member => return wait_for_daemon(layout).await,
        Err(NotRunning::Absent(reason)) if !autostart => {
            bail!(
                "no troupe daemon is running for {} ({reason})",
                layout.data_dir.display()
            )
        }
        Err(NotRunning::Absent(_)) => {}
    }
    let mut child = spawn_daemon(layout)?;
    let deadline = std::time::Instant::now() + START_TIMEOUT;
    loop {
        match try_reach(layout).await {
            Ok(reached) => return Ok(reached),
            Err(NotRunning::Refused(e)) => return Err(e),
            Err(NotRunning::Absent(reason)) => {
                if let Some(status) = child.try_wait()? {
                    // Losing a start race to another daemon is fine: keep trying to connect.
                    if status.code() != Some(crate::EXIT_ALREADY_RUNNING) {
                        bail!(
                            "the troupe daemon exited during start-up ({status}); its log {} ends with:\n{}",
                            layout.log_path().display(),
                            log_tail(&layout.log_path())
                        );
                    }
                }
                if std::time::Instant::now() > deadline {
                    bail!(
                        "the troupe daemon did not start within {START_TIMEOUT:?} ({reason}); see {}",
                        layout.log_path().display()
                    );
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// A member's wait for its daemon: it may be restarting (and adopting the run); if it does not
/// come back, the member is told Troupe was stopped.
async fn wait_for_daemon(layout: &Layout) -> anyhow::Result<Reached> {
    let deadline = std::time::Instant::now() + MEMBER_WAIT;
    loop {
        match try_reach(layout).await {
            Ok(reached) => return Ok(reached),
            Err(NotRunning::Refused(e)) => return Err(e),
            Err(NotRunning::Absent(reason)) if std::time::Instant::now() > deadline => {
                bail!(
                    "no troupe daemon is running for {} ({reason}); a member's call never starts one (Troupe was stopped, or its daemon did not come back within {MEMBER_WAIT:?})",
                    layout.data_dir.display()
                )
            }
            Err(NotRunning::Absent(_)) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// Connects to a daemon's WebSocket (the endpoint file says where) with the token.
pub async fn connect_ws(layout: &Layout) -> anyhow::Result<Client> {
    let endpoint = read_endpoint(layout)?;
    let token = read_token(layout)?;
    let rpc = builder(&token)?
        .build(&endpoint.ws_url)
        .await
        .with_context(|| format!("cannot connect to {}", endpoint.ws_url))?;
    Ok(Client { rpc })
}

/// Connects to a running daemon's Unix socket presenting `token` (a run's credential, say):
/// what a member's process does, for tests and tools.
pub async fn connect_with_token(layout: &Layout, token: &str) -> anyhow::Result<Client> {
    let socket = layout.socket_path();
    let stream = UnixStream::connect(&socket)
        .await
        .with_context(|| format!("cannot connect to {}", socket.display()))?;
    let rpc = builder(token)?
        .build_with_stream("ws://localhost/", stream)
        .await
        .context("the daemon refused the connection")?;
    Ok(Client { rpc })
}

/// Reads the running daemon's endpoint file.
pub fn read_endpoint(layout: &Layout) -> anyhow::Result<Endpoint> {
    let path = layout.endpoint_path();
    let text = fs::read_to_string(&path)
        .with_context(|| format!("cannot read {} (is the daemon running?)", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{} is not valid", path.display()))
}

enum NotRunning {
    /// Nothing listens: the daemon may be started.
    Absent(String),
    /// Something is there but must not be used (wrong owner, bad token file, …).
    Refused(anyhow::Error),
}

async fn try_reach(layout: &Layout) -> Result<Reached, NotRunning> {
    let socket = layout.socket_path();
    match fs::symlink_metadata(&socket) {
        Ok(_) => check_private_file(&socket).map_err(NotRunning::Refused)?,
        Err(e) => return Err(NotRunning::Absent(format!("{}: {e}", socket.display()))),
    }
    let stream = match UnixStream::connect(&socket).await {
        Ok(stream) => stream,
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
            ) =>
        {
            return Err(NotRunning::Absent(format!("{}: {e}", socket.display())));
        }
        Err(e) => {
            return Err(NotRunning::Refused(
                anyhow::Error::new(e).context(format!("cannot connect to {}", socket.display())),
            ));
        }
    };
    // The daemon writes its token before it listens, so a listening socket has a token.
    let token = read_token(layout).map_err(NotRunning::Refused)?;
    Ok(Reached { stream, token })
}

/// One JSON-RPC request as an HTTP POST on a reached socket; its reply or error as a
/// WebSocket call returns them.
async fn post(reached: Reached, op: &str, args: Value) -> Result<Value, CallError> {
    use http_body_util::{BodyExt, Full};
    let transport =
        |what: &str, e: &dyn std::fmt::Display| CallError::Transport(format!("{what}: {e}"));
    let mut request = serde_json::json!({ "jsonrpc": "2.0", "id": 0, "method": op });
    if !args.is_null() {
        request["params"] = args;
    }
    let body = serde_json::to_vec(&request).map_err(|e| transport("cannot encode params", &e))?;
    let mut headers = headers(&reached.token).map_err(|e| transport("bad credential", &e))?;
    headers.insert(http::header::HOST, HeaderValue::from_static("localhost"));
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    let mut http_request = http::Request::new(Full::new(hyper::body::Bytes::from(body)));
    *http_request.method_mut() = http::Method::POST;
    *http_request.headers_mut() = headers;
    let exchange = async {
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(reached.stream))
                .await
                .map_err(|e| transport("the daemon refused the connection", &e))?;
        let driver = tokio::spawn(connection);
        let response = sender
            .send_request(http_request)
            .await
            .map_err(|e| transport("the daemon did not answer", &e))?;
        let status = response.status();
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(|e| transport("the daemon's answer broke off", &e))?
            .to_bytes();
        drop(sender);
        driver.abort();
        Ok::<_, CallError>((status, bytes))
    };
    let (status, bytes) = tokio::time::timeout(REQUEST_TIMEOUT, exchange)
        .await
        .map_err(|_| {
            CallError::Transport(format!("no answer to {op} within {REQUEST_TIMEOUT:?}"))
        })??;
    reply_of(status, &bytes)
}

/// The result or error of an HTTP reply, read as jsonrpsee reads one: a JSON-RPC error (also
/// under a refusal's 401) is the daemon's, mapped as a WebSocket call's is; anything else that
/// is not JSON-RPC is the transport's, named with its status.
fn reply_of(status: http::StatusCode, body: &[u8]) -> Result<Value, CallError> {
    use jsonrpsee::types::{Response, ResponsePayload};
    match serde_json::from_slice::<Response<Value>>(body).map(|r| r.payload) {
        Ok(ResponsePayload::Error(e)) => {
            Err(jsonrpsee_core::ClientError::Call(e.into_owned()).into())
        }
        Ok(ResponsePayload::Success(result)) if status.is_success() => Ok(result.into_owned()),
        _ => Err(CallError::Transport(format!(
            "the daemon answered HTTP {status}: {}",
            String::from_utf8_lossy(&body[..body.len().min(500)]).trim()
        ))),
    }
}

/// The credential to present: a member's own (it is never given the person's), else the
/// person's token from the runtime dir.
fn read_token(layout: &Layout) -> anyhow::Result<String> {
    if let Some(token) = run_token() {
        return Ok(token);
    }
    let path = layout.token_path();
    check_private_file(&path)?;
    let token = fs::read_to_string(&path)
        .with_context(|| format!("cannot read the token {}", path.display()))?;
    Ok(token.trim().to_string())
}

/// A client builder presenting `token`.
pub fn builder(token: &str) -> anyhow::Result<WsClientBuilder> {
    Ok(WsClientBuilder::default()
        .set_headers(headers(token)?)
        .request_timeout(REQUEST_TIMEOUT)
        .max_request_size(u32::MAX)
        .max_response_size(u32::MAX)
        .max_concurrent_requests(4096))
}

/// The headers a call presents: `token`, the door, and an agent's session.
fn headers(token: &str) -> anyhow::Result<HeaderMap> {
    let mut headers = HeaderMap::new();
    headers.insert(
        http::header::AUTHORIZATION,
        HeaderValue::from_str(&format!("Bearer {token}")).context("the token is not ASCII")?,
    );
    let door = DOOR.get().copied().unwrap_or(DoorName {
        name: "cli",
        agent: false,
    });
    headers.insert(
        crate::auth::DOOR_HEADER,
        HeaderValue::from_static(door.name),
    );
    if door.agent {
        headers.insert(crate::auth::AGENT_HEADER, HeaderValue::from_static("1"));
        if let Some(session) = std::env::var("TROUPE_SESSION_ID")
            .ok()
            .and_then(|s| HeaderValue::from_str(s.trim()).ok())
            .filter(|s| !s.is_empty())
        {
            headers.insert(crate::auth::SESSION_HEADER, session);
        }
    }
    Ok(headers)
}

fn spawn_daemon(layout: &Layout) -> anyhow::Result<Child> {
    layout.prepare_dirs()?;
    // $TROUPE_BIN lets a program other than `troupe` that links this library start the daemon.
    let exe = match std::env::var_os("TROUPE_BIN") {
        Some(bin) => std::path::PathBuf::from(bin),
        None => {
            std::env::current_exe().context("cannot find the troupe binary to start the daemon")?
        }
    };
    let log = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(layout.log_path())
        .with_context(|| format!("cannot open {}", layout.log_path().display()))?;
    use std::os::unix::process::CommandExt;
    Command::new(exe)
        .arg("serve")
        .arg("--data-dir")
        .arg(&layout.data_dir)
        .env("TROUPE_RUNTIME_DIR", &layout.runtime_dir)
        // Started from inside a run (a member's CLI call), the daemon is not part of that run.
        .env_remove(troupe_api::layout::RUN_MARKER)
        .env_remove("TROUPE_SESSION_ID")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        // Its own process group: a Ctrl-C meant for this CLI must not stop the daemon.
        .process_group(0)
        .spawn()
        .context("cannot start the troupe daemon")
}

fn log_tail(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(10)..].join("\n")
}

/// The last 8 characters of an id: enough to tell sessions apart on screen.
pub fn short(id: &str) -> &str {
    &id[id.len().saturating_sub(8)..]
}

/// Waits until no daemon holds the data dir's lock (it has fully exited).
pub async fn wait_until_unlocked(layout: &Layout) -> anyhow::Result<()> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .open(layout.lock_path())
            .with_context(|| format!("cannot open {}", layout.lock_path().display()))?;
        match file.try_lock_shared() {
            Ok(()) => return Ok(()),
            Err(std::fs::TryLockError::WouldBlock) if std::time::Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
            Err(std::fs::TryLockError::WouldBlock) => bail!("the daemon did not stop within 10 s"),
            Err(std::fs::TryLockError::Error(e)) => return Err(e.into()),
        }
    }
}
