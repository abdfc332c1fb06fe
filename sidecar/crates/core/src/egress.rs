//! The members' egress proxy: a member's box has no network of its own, so every connection it
//! makes comes here (over a Unix socket bound into a bubblewrap box, or a loopback TCP port a
//! Landlock box may connect to, one per run). It speaks HTTP proxying (`CONNECT host:port`, and
//! absolute-form requests for plain `http://`), lets through the hosts of the run's allow list,
//! asks the person about any other through the inbox (a `network` permission request: allow
//! once for the run, approve a pattern for always, deny), and refuses with a 403 naming why —
//! recorded on the timeline as `egress_refused`. The person's loopback services are refused
//! unless the list names one (`127.0.0.1:PORT`), whatever name resolves to them.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use troupe_api::types::{ApprovalStatus, RequestPermissionParams};
use troupe_store::{NewEvent, Store};

use crate::runners::host::Host;

/// The longest request head read.
const MAX_HEAD: usize = 16 * 1024;
/// How long a client has to send its request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a connection to an allowed host may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);

/// Who a run's egress is, and what it may reach.
pub struct Gate {
    pub run_id: String,
    pub session_id: String,
    pub project_id: Option<String>,
    pub party_id: Option<String>,
    pub agent: String,
    /// `host`, `host:port`, `*.domain`.
    pub allow: Vec<String>,
    /// How long a connection to a new host waits for the person.
    pub ask_for: Duration,
    pub store: Store,
    /// The daemon, to ask the person (none: a new host is refused without asking).
    pub host: Option<Host>,
    /// The person's answers for this run, by `host:port`.
    answered: Mutex<HashMap<String, bool>>,
}

impl Gate {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        run_id: String,
        session_id: String,
        project_id: Option<String>,
        party_id: Option<String>,
        agent: String,
        allow: Vec<String>,
        ask_for: Duration,
        store: Store,
        host: Option<Host>,
    ) -> Gate {
        Gate {
            run_id,
            session_id,
            project_id,
            party_id,
            agent,
            allow,
            ask_for,
            store,
            host,
            answered: Mutex::new(HashMap::new()),
        }
    }

    /// Whether the allow list names `host:port` (loopback hosts only by an entry with their port).
    pub fn listed(&self, host: &str, port: u16) -> bool {
        listed(&self.allow, host, port)
    }

    /// Whether a connection to `host:port` may go: listed, or the person allowed it.
    async fn decide(&self, host: &str, port: u16) -> Result<(), String> {
        if self.listed(host, port) {
            return Ok(());
        }
        if is_loopback_name(host) {
            return Err(format!(
                "{host}:{port} is a service on the person's own machine, not in agent {}'s allow list",
                self.agent
            ));
        }
        let key = format!("{host}:{port}");
        let known = self
            .answered
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
            .copied();
        if let Some(allowed) = known {
            return if allowed {
                Ok(())
            } else {
                Err(format!("the person denied {key} for this run"))
            };
        }
        let Some(daemon) = self.host.as_ref().and_then(|h| h.upgrade()) else {
            return Err(format!("{key} is not in agent {}'s allow list", self.agent));
        };
        let asked = daemon.request_permission_decided(RequestPermissionParams {
            session_id: self.session_id.clone(),
            approval_id: None,
            tool_name: Some("network".into()),
            input: Some(json!({ "url": key, "host": host, "port": port,
                                "why": format!("agent {} connects to a host not in its allow list", self.agent) })),
            file_path: None,
            start_line: None,
            end_line: None,
            diff: None,
            is_dangerous: false,
            danger_reason: None,
            request_key: Some(format!("egress:{}:{key}", self.run_id)),
            wait_ms: Some(u64::try_from(self.ask_for.as_millis()).unwrap_or(u64::MAX)),
        });
        let answer = match tokio::time::timeout(self.ask_for, asked).await {
            Ok(Ok(r)) => match r.status {
                ApprovalStatus::Approved => Some(true),
                ApprovalStatus::Pending => None,
                _ => Some(false),
            },
            Ok(Err(e)) => {
                return Err(format!("asking the person about {key} failed: {e}"));
            }
            Err(_) => None,
        };
        match answer {
            Some(allowed) => {
                self.answered
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(key.clone(), allowed);
                if allowed {
                    Ok(())
                } else {
                    Err(format!("the person denied {key}"))
                }
            }
            None => Err(format!(
                "{key} is not in agent {}'s allow list and the person has not answered yet (the inbox asks them)",
                self.agent
            )),
        }
    }

    async fn refused(&self, target: &str, why: &str) {
        let event = NewEvent {
            kind: "egress_refused".into(),
            project_id: self.project_id.clone(),
            session_id: Some(self.session_id.clone()),
            party_id: self.party_id.clone(),
            data: json!({ "run_id": self.run_id, "agent": self.agent, "target": target, "reason": why }),
        };
        if let Err(e) = self.store.append_event(event).await {
            tracing::warn!(error = %e, "an egress refusal was not recorded");
        }
    }
}

/// Whether `allow` names `host:port`.
pub fn listed(allow: &[String], host: &str, port: u16) -> bool {
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase();
    let loopback = is_loopback_name(&host);
    allow.iter().any(|entry| {
        let entry = entry.trim().to_ascii_lowercase();
        let (name, want_port) = split_port(&entry);
        if want_port.is_some_and(|p| p != port) {
            return false;
        }
        // The person's own machine only by an entry with its port.
        if loopback {
            return want_port.is_some() && is_loopback_name(name);
        }
        match name.strip_prefix("*.") {
            Some(domain) => host.ends_with(&format!(".{domain}")),
            None => name == host,
        }
    })
}

/// The loopback ports `allow` names (`127.0.0.1:PORT`, `localhost:PORT`): relayed from a box's
/// own loopback.
pub fn loopback_ports(allow: &[String]) -> Vec<u16> {
    let mut ports: Vec<u16> = allow
        .iter()
        .filter_map(|e| match split_port(e.trim()) {
            (host, Some(port)) if is_loopback_name(host) => Some(port),
            _ => None,
        })
        .collect();
    ports.sort_unstable();
    ports.dedup();
    ports
}

fn split_port(entry: &str) -> (&str, Option<u16>) {
    if let Some(rest) = entry.strip_prefix('[')
        && let Some((h, p)) = rest.split_once("]:")
    {
        return (h, p.parse().ok());
    }
    match entry.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') => match p.parse() {
            Ok(port) => (h, Some(port)),
            Err(_) => (entry, None),
        },
        _ => (entry, None),
    }
}

fn is_loopback_name(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host == "localhost"
        || host.ends_with(".localhost")
        || host.parse::<IpAddr>().is_ok_and(own_machine)
}

/// Whether `ip` is the machine itself (`::ffff:127.0.0.1` too).
fn own_machine(ip: IpAddr) -> bool {
    let ip = ip.to_canonical();
    ip.is_loopback() || ip.is_unspecified()
}

/// A run's open egress: closed (its listeners stopped, its socket removed) when dropped.
pub struct Endpoint {
    pub socket: PathBuf,
    pub tcp_port: Option<u16>,
    tasks: Vec<tokio::task::AbortHandle>,
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
        if let Err(e) = std::fs::remove_file(&self.socket)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::debug!(socket = %self.socket.display(), error = %e, "an egress socket was not removed");
        }
    }
}

/// Opens a run's egress: a Unix socket at `socket` and, for a Landlock box, a loopback TCP port.
pub fn open(gate: Arc<Gate>, socket: &Path, tcp: bool) -> std::io::Result<Endpoint> {
    if let Some(dir) = socket.parent() {
        std::fs::create_dir_all(dir)?;
    }
    match std::fs::remove_file(socket) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let unix = tokio::net::UnixListener::bind(socket)?;
    let mut tasks = vec![tokio::spawn(serve_all(unix, gate.clone())).abort_handle()];
    let mut tcp_port = None;
    if tcp {
        let std_listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
        std_listener.set_nonblocking(true)?;
        tcp_port = Some(std_listener.local_addr()?.port());
        let listener = tokio::net::TcpListener::from_std(std_listener)?;
        tasks.push(tokio::spawn(serve_all(listener, gate)).abort_handle());
    }
    Ok(Endpoint {
        socket: socket.to_path_buf(),
        tcp_port,
        tasks,
    })
}

/// A listener the proxy serves: the Unix socket of a bubblewrap box, the loopback port of a
/// Landlock box.
trait Accept: Send + 'static {
    type Conn: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    fn next(&self) -> impl std::future::Future<Output = std::io::Result<Self::Conn>> + Send;
}

impl Accept for tokio::net::UnixListener {
    type Conn = tokio::net::UnixStream;
    async fn next(&self) -> std::io::Result<Self::Conn> {
        self.accept().await.map(|(c, _)| c)
    }
}

impl Accept for tokio::net::TcpListener {
    type Conn = tokio::net::TcpStream;
    async fn next(&self) -> std::io::Result<Self::Conn> {
        self.accept().await.map(|(c, _)| c)
    }
}

/// Serves each connection of `listener` in a task of its own, until aborted: the connections
/// (one waiting for the person, say) end with it, when the run's box closes.
async fn serve_all(listener: impl Accept, gate: Arc<Gate>) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        // Finished connections leave the set as new ones come.
        while connections.try_join_next().is_some() {}
        match listener.next().await {
            Ok(conn) => {
                connections.spawn(serve(gate.clone(), conn));
            }
            Err(e) => {
                // Out of descriptors, say: a pause, then on.
                tracing::debug!(error = %e, "egress accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// What a client asked for.
struct Request {
    /// `CONNECT` (a tunnel) or an absolute-form request (rewritten to origin form).
    connect: bool,
    host: String,
    port: u16,
    /// For a plain request: its head rewritten for the origin server.
    head: Vec<u8>,
}

fn parse(head: &[u8]) -> Result<Request, String> {
    let text = std::str::from_utf8(head).map_err(|_| "the request is not text".to_string())?;
    let (line, rest) = text.split_once("\r\n").unwrap_or((text, ""));
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(format!("a malformed request line: {line:?}"));
    };
    if method.eq_ignore_ascii_case("CONNECT") {
        let (host, port) = split_port(target);
        let port = port.ok_or_else(|| format!("CONNECT {target} names no port"))?;
        return Ok(Request {
            connect: true,
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string(),
            port,
            head: Vec::new(),
        });
    }
    let after = target.strip_prefix("http://").ok_or_else(|| {
        format!("only http:// requests and CONNECT tunnels go through the proxy, not {target:?}")
    })?;
    let (authority, path) = match after.find('/') {
        Some(i) => (&after[..i], &after[i..]),
        None => (after, "/"),
    };
    let (host, port) = split_port(authority);
    let head = format!("{method} {path} {version}\r\n{rest}").into_bytes();
    Ok(Request {
        connect: false,
        host: host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string(),
        port: port.unwrap_or(80),
        head,
    })
}

async fn read_head<S: AsyncRead + Unpin>(s: &mut S) -> std::io::Result<(Vec<u8>, Vec<u8>)> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 2048];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = buf.split_off(end + 4);
            return Ok((buf, rest));
        }
        if buf.len() > MAX_HEAD {
            return Err(std::io::Error::other("the request head is over 16 KiB"));
        }
        let n = s.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::Error::other(
                "the client closed before its request",
            ));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

async fn answer<S: AsyncWrite + Unpin>(s: &mut S, status: &str, body: &str) {
    let text = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nX-Troupe-Egress: refused\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    if let Err(e) = s.write_all(text.as_bytes()).await {
        tracing::debug!(error = %e, "an egress answer was not sent");
    }
}

/// Why a connection is not carried: the answer's status and its text.
struct Refusal(&'static str, String);

/// Serves one connection of a run's box.
async fn serve<S: AsyncRead + AsyncWrite + Unpin>(gate: Arc<Gate>, mut conn: S) {
    let Ok(read) = tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut conn)).await else {
        return;
    };
    let opened = match read {
        Ok((head, rest)) => open_upstream(&gate, &head).await.map(|o| (o, rest)),
        Err(e) => Err(Refusal("400 Bad Request", format!("troupe egress: {e}\n"))),
    };
    let ((req, mut upstream), rest) = match opened {
        Ok(o) => o,
        Err(Refusal(status, body)) => return answer(&mut conn, status, &body).await,
    };
    let head = if req.connect {
        conn.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            .await
    } else {
        upstream.write_all(&req.head).await
    };
    if head.is_err() || (!rest.is_empty() && upstream.write_all(&rest).await.is_err()) {
        return;
    }
    if let Err(e) = tokio::io::copy_bidirectional(&mut conn, &mut upstream).await {
        tracing::debug!(host = %req.host, port = req.port, error = %e, "an egress connection ended");
    }
}

/// The request of `head`, decided, resolved and connected; or why not (a refusal is on the
/// timeline).
async fn open_upstream(
    gate: &Gate,
    head: &[u8],
) -> Result<(Request, tokio::net::TcpStream), Refusal> {
    let req =
        parse(head).map_err(|e| Refusal("400 Bad Request", format!("troupe egress: {e}\n")))?;
    let target = format!("{}:{}", req.host, req.port);
    let refuse = |status: &'static str, why: String| {
        let target = target.clone();
        async move {
            gate.refused(&target, &why).await;
            Refusal(
                status,
                format!(
                    "troupe egress: {target} refused: {why}. The person may allow it (troupe inbox), or list it in the agent's sandbox.allow_hosts\n"
                ),
            )
        }
    };
    if let Err(why) = gate.decide(&req.host, req.port).await {
        return Err(refuse("403 Forbidden", why).await);
    }
    // Resolved here: a name that leads to the person's loopback is refused unless the list
    // names the loopback service itself.
    let addrs: Vec<SocketAddr> = match tokio::net::lookup_host((req.host.as_str(), req.port)).await
    {
        Ok(a) => a.collect(),
        Err(e) => {
            let why = format!("its name does not resolve ({e})");
            return Err(refuse("502 Bad Gateway", why).await);
        }
    };
    let explicit_loopback = gate.listed(&req.host, req.port) && is_loopback_name(&req.host);
    if !explicit_loopback && addrs.iter().any(|a| own_machine(a.ip())) {
        let why = "it resolves to the person's own machine".to_string();
        return Err(refuse("403 Forbidden", why).await);
    }
    let connect = tokio::net::TcpStream::connect(addrs.as_slice());
    match tokio::time::timeout(CONNECT_TIMEOUT, connect).await {
        Ok(Ok(upstream)) => Ok((req, upstream)),
        Ok(Err(e)) => Err(Refusal(
            "502 Bad Gateway",
            format!("troupe egress: {target} cannot be reached: {e}\n"),
        )),
        Err(_) => Err(Refusal(
            "504 Gateway Timeout",
            format!("troupe egress: {target} did not answer\n"),
        )),
    }
}

#[cfg(test)]
mod tests;
