//! Where a daemon keeps things: the data dir (database, lock, log, token) and the runtime dir
//! (socket, endpoint file), with their ownership and permission checks, and what the
//! endpoint file says. It is the contract between a daemon and its clients. No IO beyond
//! creating and checking those directories and files.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

/// The environment variable that marks every process of an agent run with the run's id (the
/// daemon finds a run's processes by it; a client starting a daemon strips it).
pub const RUN_MARKER: &str = "TROUPE_RUN_ID";

/// The environment variable that carries a run's own credential: its processes present it
/// instead of the person's token (which they are never given), and a client holding it never
/// starts a daemon.
pub const RUN_TOKEN: &str = "TROUPE_RUN_TOKEN";

/// What `endpoint.json` in the runtime dir says about a running daemon.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Endpoint {
    pub pid: u32,
    pub version: String,
    pub socket_path: String,
    pub ws_url: String,
    /// The MCP endpoint (streamable HTTP, same token), e.g. `http://127.0.0.1:PORT/mcp`.
    #[serde(default)]
    pub mcp_url: Option<String>,
}

/// Longest Unix socket path we use (the kernel's limit is 107 bytes).
const MAX_SOCKET_PATH: usize = 100;

/// The files of one daemon instance, derived from its data dir.
#[derive(Debug, Clone)]
pub struct Layout {
    pub data_dir: PathBuf,
    pub runtime_dir: PathBuf,
}

impl Layout {
    /// Resolves the data dir (`--data-dir` > `TROUPE_HOME` > `$XDG_DATA_HOME/troupe` >
    /// `~/.local/share/troupe`) and its runtime dir (`TROUPE_RUNTIME_DIR` >
    /// `$XDG_RUNTIME_DIR/troupe-<hash>` > `<data dir>/run`).
    pub fn resolve(data_dir: Option<&Path>) -> anyhow::Result<Layout> {
        let data_dir = match data_dir {
            Some(dir) => dir.to_path_buf(),
            None => default_data_dir()?,
        };
        let data_dir = absolute(&data_dir)?;
        let runtime_dir = match std::env::var_os("TROUPE_RUNTIME_DIR") {
            Some(dir) if !dir.is_empty() => absolute(Path::new(&dir))?,
            _ => default_runtime_dir(&data_dir),
        };
        Ok(Layout {
            data_dir,
            runtime_dir,
        })
    }

    pub fn db_path(&self) -> PathBuf {
        self.data_dir.join("troupe.db")
    }
    pub fn lock_path(&self) -> PathBuf {
        self.data_dir.join("troupe.lock")
    }
    pub fn log_path(&self) -> PathBuf {
        self.data_dir.join("daemon.log")
    }
    pub fn socket_path(&self) -> PathBuf {
        self.runtime_dir.join("troupe.sock")
    }
    /// The person's token: in the data dir, which members' sandbox hides (the runtime dir, with
    /// the socket they call through, stays visible to them).
    pub fn token_path(&self) -> PathBuf {
        self.data_dir.join("token")
    }
    /// JSON with the daemon's pid, version and WebSocket address.
    pub fn endpoint_path(&self) -> PathBuf {
        self.runtime_dir.join("endpoint.json")
    }

    /// Creates both directories (0700) if needed and checks they are ours and private.
    pub fn prepare_dirs(&self) -> anyhow::Result<()> {
        ensure_private_dir(&self.data_dir)?;
        ensure_private_dir(&self.runtime_dir)?;
        let socket = self.socket_path();
        if socket.as_os_str().len() > MAX_SOCKET_PATH {
            bail!(
                "socket path {} is longer than {MAX_SOCKET_PATH} bytes; set TROUPE_RUNTIME_DIR to a shorter directory",
                socket.display()
            );
        }
        Ok(())
    }
}

fn absolute(path: &Path) -> anyhow::Result<PathBuf> {
    std::path::absolute(path).with_context(|| format!("cannot make {} absolute", path.display()))
}

fn default_data_dir() -> anyhow::Result<PathBuf> {
    if let Some(home) = std::env::var_os("TROUPE_HOME").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(home));
    }
    if let Some(xdg) = std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(xdg).join("troupe"));
    }
    match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        Some(home) => Ok(PathBuf::from(home).join(".local/share/troupe")),
        None => bail!("cannot find a data dir: set --data-dir, TROUPE_HOME or HOME"),
    }
}

fn default_runtime_dir(data_dir: &Path) -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR").filter(|v| !v.is_empty()) {
        Some(xdg) => {
            let candidate = PathBuf::from(xdg).join(format!(
                "troupe-{:016x}",
                fnv1a(data_dir.as_os_str().as_encoded_bytes())
            ));
            if candidate.join("troupe.sock").as_os_str().len() <= MAX_SOCKET_PATH {
                candidate
            } else {
                data_dir.join("run")
            }
        }
        None => data_dir.join("run"),
    }
}

/// FNV-1a: a stable hash (unlike std's) so every build maps a data dir to the same runtime dir.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The uid this process runs as.
pub fn current_uid() -> u32 {
    rustix::process::getuid().as_raw()
}

fn ensure_private_dir(dir: &Path) -> anyhow::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("cannot create {}", dir.display()))?;
    let meta = fs::metadata(dir).with_context(|| format!("cannot stat {}", dir.display()))?;
    if meta.uid() != current_uid() {
        bail!(
            "{} belongs to uid {}, not to you (uid {}): refusing to use it",
            dir.display(),
            meta.uid(),
            current_uid()
        );
    }
    if meta.mode() & 0o077 != 0 {
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
            .with_context(|| format!("cannot make {} private (0700)", dir.display()))?;
    }
    Ok(())
}

/// Checks that `path` (a socket or token file) belongs to us and is not readable by others.
pub fn check_private_file(path: &Path) -> anyhow::Result<()> {
    let meta =
        fs::symlink_metadata(path).with_context(|| format!("cannot stat {}", path.display()))?;
    if meta.uid() != current_uid() {
        bail!(
            "{} belongs to uid {}, not to you (uid {}): refusing to use it",
            path.display(),
            meta.uid(),
            current_uid()
        );
    }
    if meta.mode() & 0o077 != 0 {
        bail!(
            "{} has mode {:o}: it must not be accessible to other users (0600)",
            path.display(),
            meta.mode() & 0o777
        );
    }
    Ok(())
}

/// Atomically writes `contents` to `path` with mode 0600.
pub fn write_private_file(path: &Path, contents: &[u8]) -> anyhow::Result<()> {
    let tmp = path.with_extension("tmp");
    // A leftover from a crash may exist; it is ours to replace.
    match fs::remove_file(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("cannot remove {}", tmp.display())),
    }
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .with_context(|| format!("cannot create {}", tmp.display()))?;
    file.write_all(contents)
        .and_then(|()| file.sync_all())
        .with_context(|| format!("cannot write {}", tmp.display()))?;
    fs::rename(&tmp, path).with_context(|| format!("cannot rename {} into place", tmp.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_is_stable() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
