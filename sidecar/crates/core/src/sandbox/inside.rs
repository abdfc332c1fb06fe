//! What runs inside a box before the member's command: `troupe box-exec --spec <json> -- argv`.
//! Under Landlock it restricts itself and becomes the command. In a bubblewrap box (no network
//! of its own) it is the relay: it listens on the box's loopback, on the proxy port the
//! command's `HTTP(S)_PROXY` names and on each allowed loopback port (a local model server),
//! carries each connection to the daemon's egress proxy over the Unix socket bound into the
//! box, starts the command and ends with its status. It decides nothing: the daemon's proxy
//! (the `egress` module) allows or refuses.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// What `box-exec` sets up before it runs the command.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Spec {
    /// Landlock's policy, applied to itself (and so to the command and its children).
    pub landlock: Option<super::landlock::Policy>,
    /// The relay to the egress proxy (a bubblewrap box).
    pub relay: Option<Relay>,
    /// Environment set for the command.
    pub env: Vec<(String, String)>,
    /// Environment taken away from it.
    #[serde(default)]
    pub unset: Vec<String>,
}

/// The egress relay of a bubblewrap box.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Relay {
    /// The daemon's proxy, bound into the box.
    pub socket: PathBuf,
    /// The loopback port the command's proxy variables name.
    pub port: u16,
    /// Loopback ports relayed as tunnels to the same port on the host (allowed by the proxy).
    pub forwards: Vec<u16>,
}

impl Spec {
    /// As one command-line argument.
    pub fn to_arg(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| "{}".into())
    }
}

/// Runs `argv` as `spec` says; returns the exit code to end with (the command's, or 126 when
/// the box could not be made, saying why on stderr).
pub fn main(spec: &str, argv: &[String]) -> i32 {
    let spec: Spec = match serde_json::from_str(spec) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("troupe box-exec: the box's spec does not read: {e}");
            return 126;
        }
    };
    let Some((program, args)) = argv.split_first() else {
        eprintln!("troupe box-exec: no command");
        return 126;
    };
    if let Some(relay) = &spec.relay
        && let Err(e) = start_relay(relay)
    {
        eprintln!("troupe box-exec: the egress relay cannot start: {e}");
        return 126;
    }
    if let Err(e) = drop_capabilities() {
        eprintln!("troupe box-exec: the box's capabilities cannot be dropped: {e}");
        return 126;
    }
    let mut cmd = std::process::Command::new(program);
    cmd.args(args).envs(spec.env.iter().map(|(k, v)| (k, v)));
    for k in &spec.unset {
        cmd.env_remove(k);
    }
    if let Some(policy) = &spec.landlock {
        if let Err(e) = super::landlock::restrict_self(policy) {
            eprintln!("troupe box-exec: Landlock cannot make the box: {e}");
            return 126;
        }
        if spec.relay.is_none() {
            use std::os::unix::process::CommandExt;
            let e = cmd.exec();
            eprintln!("troupe box-exec: cannot run {program:?}: {e}");
            return 127;
        }
    }
    match cmd.status() {
        Ok(status) => {
            use std::os::unix::process::ExitStatusExt;
            status
                .code()
                .or_else(|| status.signal().map(|s| 128 + s))
                .unwrap_or(1)
        }
        Err(e) => {
            eprintln!("troupe box-exec: cannot run {program:?}: {e}");
            127
        }
    }
}

/// Leaves the process (and so the command) no capability at all: a root member could
/// otherwise read raw devices, use raw sockets or make device nodes around Landlock's rules.
/// The bounding set goes first (it needs `CAP_SETPCAP`, which only root has: for anyone else
/// there is nothing to drop), then the effective, permitted, inheritable and ambient sets.
#[allow(unsafe_code)]
fn drop_capabilities() -> std::io::Result<()> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
    for cap in 0..64 {
        // SAFETY: prctl with integer arguments only; an unknown or unheld capability is an
        // error that changes nothing.
        unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) };
    }
    // SAFETY: as above.
    unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        );
    }
    let header = Header {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let none = [Data {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: capset reads one header and two data structs of the kernel's v3 layout, which
    // these are, and only lowers this thread's own sets.
    let r = unsafe { libc::syscall(libc::SYS_capset, &header, none.as_ptr()) };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn start_relay(relay: &Relay) -> std::io::Result<()> {
    let proxy = TcpListener::bind(("127.0.0.1", relay.port))?;
    let socket = relay.socket.clone();
    std::thread::spawn(move || accept(proxy, socket, None));
    for port in &relay.forwards {
        let listener = TcpListener::bind(("127.0.0.1", *port))?;
        let socket = relay.socket.clone();
        let port = *port;
        std::thread::spawn(move || accept(listener, socket, Some(port)));
    }
    Ok(())
}

/// Carries each connection to the proxy: as it is, or (a forwarded port) as a tunnel to the
/// same port on the host's loopback.
fn accept(listener: TcpListener, socket: PathBuf, tunnel: Option<u16>) {
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        let socket = socket.clone();
        std::thread::spawn(move || {
            if let Err(e) = carry(conn, &socket, tunnel) {
                tracing::debug!(error = %e, "a relayed connection ended");
            }
        });
    }
}

fn carry(conn: TcpStream, socket: &std::path::Path, tunnel: Option<u16>) -> std::io::Result<()> {
    let mut up = UnixStream::connect(socket)?;
    if let Some(port) = tunnel {
        write!(
            up,
            "CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n"
        )?;
        let head = read_head(&mut up)?;
        let ok = head
            .split(|b| *b == b'\r')
            .next()
            .is_some_and(|line| String::from_utf8_lossy(line).contains(" 200"));
        if !ok {
            // Refused: the proxy said why in its answer, which a tunnel's client cannot read;
            // the connection closes (dropped).
            return Ok(());
        }
    }
    let (mut down_r, mut down_w) = (conn.try_clone()?, conn);
    let (mut up_r, mut up_w) = (up.try_clone()?, up);
    // Each way until its sender closes, then the close passed on; either side going away
    // early ends the copy with an error that only ends this connection.
    let t = std::thread::spawn(move || {
        std::io::copy(&mut down_r, &mut up_w)
            .and_then(|_| up_w.shutdown(Shutdown::Write))
            .err()
    });
    let back = std::io::copy(&mut up_r, &mut down_w).and_then(|_| down_w.shutdown(Shutdown::Write));
    let there = t.join().ok().flatten();
    match back.err().or(there) {
        Some(e) if e.kind() != std::io::ErrorKind::NotConnected => Err(e),
        _ => Ok(()),
    }
}

/// An HTTP answer's head, up to its blank line (at most 16 KiB).
fn read_head(s: &mut UnixStream) -> std::io::Result<Vec<u8>> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() > 16 * 1024 || s.read(&mut byte)? == 0 {
            return Err(std::io::Error::other("the proxy's answer ended early"));
        }
        head.push(byte[0]);
    }
    Ok(head)
}
