//! `troupe serve`: the per-user daemon. Takes the data dir's lock, opens the store, writes the
//! token, binds the Unix socket (0600) and the loopback WebSocket, serves the JSON-RPC door
//! until asked to stop, then drains and cleans up. Operation logic lives in `crate::ops`.

pub mod rpc;

use std::fs::{self, File};
use std::io::Write;
use std::net::SocketAddr;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use jsonrpsee::server::stop_channel;
use serde::{Deserialize, Serialize};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::watch;
use tokio::task::JoinSet;
use troupe_store::{NewEvent, Store};

use crate::hub::Hub;
use crate::paths::{Layout, current_uid, write_private_file};

/// Default limit on one message's content.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 256 * 1024;
/// How long open connections get to finish when the daemon stops.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(3);

/// How to run the daemon.
#[derive(Debug, Clone)]
pub struct Config {
    pub layout: Layout,
    /// Where the WebSocket listens; loopback unless `allow_non_loopback`.
    pub ws_addr: SocketAddr,
    pub allow_non_loopback: bool,
    pub max_message_bytes: usize,
}

/// What `endpoint.json` in the runtime dir says about a running daemon.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Endpoint {
    pub pid: u32,
    pub version: String,
    pub socket_path: String,
    pub ws_url: String,
    /// The MCP endpoint (streamable HTTP, same token), e.g. `http://127.0.0.1:PORT/mcp`.
    #[serde(default)]
    pub mcp_url: Option<String>,
}

/// Whether `presented` is the daemon's token (constant time).
pub fn token_matches(presented: &str, token: &str) -> bool {
    rpc::constant_time_eq(presented.as_bytes(), token.as_bytes())
}

/// The state every operation handler sees.
pub struct Daemon {
    pub store: Store,
    pub hub: Arc<Hub>,
    pub orchestrator: crate::orchestrator::Orchestrator,
    pub plugins: Arc<crate::plugins::Plugins>,
    pub config: Config,
    pub layout: Layout,
    pub ws_addr: SocketAddr,
    pub started: Instant,
    shutdown: watch::Sender<bool>,
}

impl Daemon {
    /// Asks the daemon to stop once the current requests are answered.
    pub fn request_shutdown(&self) {
        self.shutdown.send_replace(true);
    }
}

/// Another daemon already holds this data dir.
#[derive(Debug, thiserror::Error)]
#[error("a troupe daemon is already running for {data_dir} (pid {pid})")]
pub struct AlreadyRunning {
    pub data_dir: String,
    pub pid: String,
}

/// Runs the daemon until it is asked to stop (operation, SIGTERM or SIGINT).
pub async fn serve(config: Config) -> anyhow::Result<()> {
    let started = Instant::now();
    if !config.ws_addr.ip().is_loopback() && !config.allow_non_loopback {
        bail!(
            "refusing to listen on {}: it is not a loopback address (pass --allow-non-loopback to do it anyway)",
            config.ws_addr
        );
    }
    let layout = config.layout.clone();
    layout.prepare_dirs()?;
    let _lock = take_lock(&layout)?;

    let store = Store::open(&layout.db_path())
        .with_context(|| format!("cannot open the database {}", layout.db_path().display()))?;
    let token = new_token()?;
    write_private_file(&layout.token_path(), token.as_bytes())?;

    let socket_path = layout.socket_path();
    remove_if_present(&socket_path)?;
    // Bind under a temporary name, make it private, then rename it into place: a client never
    // sees the socket with any other mode.
    let staging = socket_path.with_extension("sock.new");
    remove_if_present(&staging)?;
    let unix = UnixListener::bind(&staging)
        .with_context(|| format!("cannot listen on {}", staging.display()))?;
    fs::set_permissions(&staging, fs::Permissions::from_mode(0o600))
        .with_context(|| format!("cannot chmod {}", staging.display()))?;
    fs::rename(&staging, &socket_path)
        .with_context(|| format!("cannot move the socket to {}", socket_path.display()))?;
    let tcp = TcpListener::bind(config.ws_addr)
        .await
        .with_context(|| format!("cannot listen on {}", config.ws_addr))?;
    let ws_addr = tcp.local_addr()?;

    let (shutdown, mut shutdown_rx) = watch::channel(false);
    let hub = Arc::new(Hub::default());
    crate::builtin::seed(&store).await?;
    let cell: crate::orchestrator::DaemonCell = Arc::default();
    let (orchestrator, boot) =
        crate::orchestrator::create(store.clone(), hub.clone(), layout.clone(), cell.clone());
    let plugins = crate::plugins::Plugins::new(&layout);
    let daemon = Arc::new(Daemon {
        store: store.clone(),
        hub,
        orchestrator,
        plugins: plugins.clone(),
        config: config.clone(),
        layout: layout.clone(),
        ws_addr,
        started,
        shutdown,
    });
    let _ = cell.set(Arc::downgrade(&daemon));
    boot.start().await?;
    plugins.watch();
    if plugins.any_installed() {
        // Build the engine and load the plugins off the start-up path.
        tokio::task::spawn_blocking(move || {
            if let Err(e) = plugins.host() {
                tracing::error!("plugin host unavailable: {e}");
            }
        });
    }
    let methods = rpc::build_module(&daemon)?;
    let server_config = rpc::server_config(config.max_message_bytes);
    let token: Arc<str> = token.into();

    // MCP over streamable HTTP: its own loopback port, the same token.
    let mcp_listener = TcpListener::bind((ws_addr.ip(), 0))
        .await
        .context("cannot listen for MCP")?;
    let mcp_addr = mcp_listener.local_addr()?;
    tokio::spawn({
        let shutdown = daemon.shutdown.subscribe();
        let daemon = Arc::downgrade(&daemon);
        let token = token.clone();
        async move {
            if let Err(e) = crate::mcp::serve_http(daemon, mcp_listener, token, shutdown).await {
                tracing::error!(error = %e, "the MCP endpoint stopped");
            }
        }
    });
    let endpoint = Endpoint {
        pid: std::process::id(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        socket_path: socket_path.display().to_string(),
        ws_url: format!("ws://{ws_addr}"),
        mcp_url: Some(format!("http://{mcp_addr}/mcp")),
    };
    write_private_file(
        &layout.endpoint_path(),
        &serde_json::to_vec_pretty(&endpoint)?,
    )?;
    tracing::info!(
        data_dir = %layout.data_dir.display(),
        socket = %socket_path.display(),
        ws = %ws_addr,
        ready_ms = started.elapsed().as_secs_f64() * 1000.0,
        "troupe daemon ready"
    );

    let (stop_handle, server_handle) = stop_channel();
    let mut connections = JoinSet::new();
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut started_event = Some(tokio::spawn({
        let store = store.clone();
        let data =
            serde_json::json!({ "pid": std::process::id(), "version": env!("CARGO_PKG_VERSION") });
        async move {
            store
                .append_event(NewEvent {
                    kind: "daemon_started".into(),
                    data,
                    ..NewEvent::default()
                })
                .await
        }
    }));

    loop {
        tokio::select! {
            accepted = unix.accept() => match accepted {
                Ok((stream, _)) => {
                    match stream.peer_cred() {
                        Ok(cred) if cred.uid() == current_uid() => rpc::serve_connection(
                            &mut connections, stream, methods.clone(), server_config.clone(),
                            token.clone(), stop_handle.clone()),
                        Ok(cred) => tracing::warn!(uid = cred.uid(), "refused a socket peer of another user"),
                        Err(e) => tracing::warn!(error = %e, "cannot read a socket peer's credentials"),
                    }
                }
                Err(e) => tracing::warn!(error = %e, "accept on the Unix socket failed"),
            },
            accepted = tcp.accept() => match accepted {
                Ok((stream, _)) => {
                    // Small requests and replies: do not wait to coalesce them.
                    if let Err(e) = stream.set_nodelay(true) {
                        tracing::debug!(error = %e, "cannot set TCP_NODELAY");
                    }
                    rpc::serve_connection(&mut connections, stream, methods.clone(),
                        server_config.clone(), token.clone(), stop_handle.clone());
                }
                Err(e) => tracing::warn!(error = %e, "accept on the WebSocket port failed"),
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            _ = shutdown_rx.changed() => break,
            _ = sigterm.recv() => { tracing::info!("SIGTERM: stopping"); break }
            _ = tokio::signal::ctrl_c() => { tracing::info!("SIGINT: stopping"); break }
        }
    }

    // Stop accepting, let open connections finish, then flush the store.
    drop(unix);
    drop(tcp);
    remove_if_present(&layout.endpoint_path())?;
    remove_if_present(&socket_path)?;
    if server_handle.stop().is_err() {
        tracing::debug!("server already stopped");
    }
    if tokio::time::timeout(DRAIN_TIMEOUT, async {
        while connections.join_next().await.is_some() {}
    })
    .await
    .is_err()
    {
        tracing::warn!(
            left = connections.len(),
            "connections did not finish in time; dropping them"
        );
        connections.shutdown().await;
    }
    // Agents that cannot be adopted by the next daemon go now, with every process of theirs.
    if let Err(e) = daemon.orchestrator.shutdown().await {
        tracing::warn!(error = %e, "runs not ended at shutdown");
    }
    if let Some(started_event) = started_event.take() {
        log_write_failure(started_event.await);
    }
    log_write_failure(Ok(store
        .append_event(NewEvent {
            kind: "daemon_stopped".into(),
            ..NewEvent::default()
        })
        .await));
    store.close().await?;
    remove_if_present(&layout.token_path())?;
    tracing::info!("troupe daemon stopped");
    Ok(())
}

fn log_write_failure(
    result: Result<Result<i64, troupe_store::StoreError>, tokio::task::JoinError>,
) {
    match result {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => tracing::warn!(error = %e, "cannot record a daemon event"),
        Err(e) => tracing::warn!(error = %e, "daemon event task failed"),
    }
}

/// Takes the data dir's lock (held until the returned file is dropped) and records our pid.
fn take_lock(layout: &Layout) -> anyhow::Result<File> {
    let path = layout.lock_path();
    let mut file = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("cannot open the lock file {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(fs::TryLockError::WouldBlock) => {
            let pid = fs::read_to_string(&path).unwrap_or_default();
            return Err(AlreadyRunning {
                data_dir: layout.data_dir.display().to_string(),
                pid: pid.trim().to_string(),
            }
            .into());
        }
        Err(fs::TryLockError::Error(e)) => {
            return Err(e).with_context(|| format!("cannot lock {}", path.display()));
        }
    }
    file.set_len(0)?;
    writeln!(file, "{}", std::process::id())?;
    Ok(file)
}

fn remove_if_present(path: &std::path::Path) -> anyhow::Result<()> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("cannot remove {}", path.display())),
    }
}

/// 256 random bits, hex-encoded.
fn new_token() -> anyhow::Result<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| anyhow::anyhow!("cannot get random bytes: {e}"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}
