//! `troupe serve`: the per-user daemon's process. Takes the data dir's lock, opens the store,
//! writes the token, binds the Unix socket (0600) and the loopback WebSocket, starts the core
//! (`troupe_core::boot`), serves the JSON-RPC and MCP doors until asked to stop, then drains the
//! connections and stops the core. Operation logic lives in `troupe_core`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use jsonrpsee::server::stop_channel;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use troupe_api::layout::{Endpoint, current_uid, write_private_file};
use troupe_core::Config;
use troupe_core::boot;

use crate::doors::rpc;

/// How long open connections get to finish when the daemon stops.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(3);

/// Runs the daemon until it is asked to stop (operation, SIGTERM or SIGINT); with `nats` (or `nats`
/// in `<data dir>/config.toml`), it is also the hub of remote workers (a NATS it cannot reach is an
/// error at start).
pub async fn serve(config: Config, nats: Option<String>) -> anyhow::Result<()> {
    let started = Instant::now();
    if !config.ws_addr.ip().is_loopback() && !config.allow_non_loopback {
        bail!(
            "refusing to listen on {}: it is not a loopback address (pass --allow-non-loopback to do it anyway)",
            config.ws_addr
        );
    }
    let layout = config.layout.clone();
    layout.prepare_dirs()?;
    let _lock = boot::take_lock(&layout)?;

    let store = boot::open_store(&layout)?;
    let nats = crate::remote::nats_url(nats, &layout.data_dir)?;
    let hub = match &nats {
        Some(url) => Some(crate::remote::hub::connect(url, &layout).await?),
        None => None,
    };
    let token = crate::auth::new_token()?;
    write_private_file(&layout.token_path(), token.as_bytes())?;

    let socket_path = layout.socket_path();
    let unix = crate::socket::bind_private_socket(&socket_path)?;
    let our_socket = file_id(&socket_path);
    let tcp = TcpListener::bind(config.ws_addr)
        .await
        .with_context(|| format!("cannot listen on {}", config.ws_addr))?;
    let ws_addr = tcp.local_addr()?;

    let pools = hub.as_ref().map(|h| h.pools());
    let daemon = boot::start(store, config.clone(), ws_addr, started, pools).await?;
    if let Some(hub) = &hub {
        hub.attach(&daemon).await?;
    }
    // Notifications away from the desk (desktop, webhook) of what comes to wait in the inbox.
    let away = crate::away::start(&daemon);
    let mut shutdown_rx = daemon.shutdown_requested();
    let methods = rpc::build_module(&daemon)?;
    let server_config = rpc::server_config(config.max_message_bytes);
    let token: Arc<str> = token.into();
    let gate = crate::auth::Gate::Daemon {
        token: token.clone(),
        daemon: Arc::downgrade(&daemon),
    };

    // MCP over streamable HTTP: its own loopback port, the same token.
    let mcp_listener = TcpListener::bind((ws_addr.ip(), 0))
        .await
        .context("cannot listen for MCP")?;
    let mcp_addr = mcp_listener.local_addr()?;
    tokio::spawn({
        let shutdown = daemon.shutdown_requested();
        let daemon = Arc::downgrade(&daemon);
        let gate = gate.clone();
        async move {
            if let Err(e) =
                crate::doors::mcp::serve_http(daemon, mcp_listener, gate, shutdown).await
            {
                tracing::error!(error = %e, "the MCP endpoint stopped");
            }
        }
    });
    start_webhook(&daemon, &config);
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
    // Made once: `ctrl_c()` in the loop would register a listener at every connection.
    let mut sigint = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    loop {
        tokio::select! {
            accepted = unix.accept() => match accepted {
                Ok((stream, _)) => {
                    match stream.peer_cred() {
                        Ok(cred) if cred.uid() == current_uid() => rpc::serve_connection(
                            &mut connections, stream, methods.clone(), server_config.clone(),
                            gate.clone(), stop_handle.clone()),
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
                        server_config.clone(), gate.clone(), stop_handle.clone());
                }
                Err(e) => tracing::warn!(error = %e, "accept on the WebSocket port failed"),
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            _ = shutdown_rx.changed() => break,
            _ = sigterm.recv() => { tracing::info!("SIGTERM: stopping"); break }
            _ = sigint.recv() => { tracing::info!("SIGINT: stopping"); break }
        }
    }

    // Stop accepting, let open connections finish, then flush the store.
    drop(unix);
    drop(tcp);
    drop(away);
    // Only our own: a daemon whose data dir was deleted may find a newer daemon's files here.
    let endpoint_ours =
        crate::client::read_endpoint(&layout).is_ok_and(|e| e.pid == std::process::id());
    if endpoint_ours {
        crate::socket::remove_if_present(&layout.endpoint_path())?;
    }
    if our_socket.is_some() && file_id(&socket_path) == our_socket {
        crate::socket::remove_if_present(&socket_path)?;
    }
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
    // Agents that cannot be adopted by the next daemon go now, with every process of theirs;
    // then the store is flushed and closed.
    boot::stop(&daemon).await?;
    if std::fs::read(layout.token_path()).is_ok_and(|t| t == token.as_bytes()) {
        crate::socket::remove_if_present(&layout.token_path())?;
    }
    tracing::info!("troupe daemon stopped");
    Ok(())
}

/// A file's device and inode (to know it is still the one we made).
fn file_id(path: &std::path::Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// The forge's webhook receiver, when the person's `[forge] webhook_listen` asks for one. A
/// setting that cannot be served is logged, and the daemon serves its other doors.
fn start_webhook(daemon: &Arc<troupe_core::daemon::Daemon>, config: &Config) {
    let settings = match troupe_core::forge::Settings::load(&config.layout.data_dir) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "the forge settings are unreadable: no webhook receiver");
            return;
        }
    };
    let Some(listen) = settings.webhook_listen else {
        return;
    };
    let addr: std::net::SocketAddr = match listen.parse() {
        Ok(a) => a,
        Err(e) => {
            tracing::error!(%listen, error = %e, "[forge] webhook_listen is not an address: no webhook receiver");
            return;
        }
    };
    if !addr.ip().is_loopback() && !config.allow_non_loopback {
        tracing::error!(%addr, "[forge] webhook_listen is not a loopback address (a tunnel forwards to loopback): no webhook receiver");
        return;
    }
    let Some(file) = settings.webhook_secret_file else {
        tracing::error!("[forge] webhook_listen needs webhook_secret_file: no webhook receiver");
        return;
    };
    let secret = match crate::doors::webhook::read_secret(&file) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "no webhook receiver");
            return;
        }
    };
    let weak = Arc::downgrade(daemon);
    let shutdown = daemon.shutdown_requested();
    tokio::spawn(async move {
        if let Err(e) = crate::doors::webhook::serve(weak, addr, secret, shutdown).await {
            tracing::error!(error = %e, "the webhook receiver stopped");
        }
    });
}
