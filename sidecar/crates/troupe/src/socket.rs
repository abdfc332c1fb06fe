//! Private Unix sockets: bound so that only their owner may use them, for the daemon's door and
//! a remote worker's per-run endpoint alike. A socket is bound 0600 under a temporary name and
//! then moved into place, so no client ever sees it with another mode.

use std::fs;
use std::os::unix::fs::PermissionsExt;

use anyhow::Context;
use tokio::net::UnixListener;

/// Binds a Unix socket at `path` that only its owner may use: bound under a temporary name, made
/// private, then renamed into place, so a client never sees it with any other mode.
pub fn bind_private_socket(socket_path: &std::path::Path) -> anyhow::Result<UnixListener> {
    remove_if_present(socket_path)?;
    let staging = socket_path.with_extension("sock.new");
    remove_if_present(&staging)?;
    let unix = UnixListener::bind(&staging)
        .with_context(|| format!("cannot listen on {}", staging.display()))?;
    fs::set_permissions(&staging, fs::Permissions::from_mode(0o600))
        .with_context(|| format!("cannot chmod {}", staging.display()))?;
    fs::rename(&staging, socket_path)
        .with_context(|| format!("cannot move the socket to {}", socket_path.display()))?;
    Ok(unix)
}

pub fn remove_if_present(path: &std::path::Path) -> anyhow::Result<()> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("cannot remove {}", path.display())),
    }
}
