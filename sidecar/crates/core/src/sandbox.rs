//! The kernel boundary around what members run: every process Troupe starts for a run (process
//! members, ACP agents and their children, setup commands, shell commands of executors) is
//! wrapped in bubblewrap (Debian's `bwrap`, the sandbox Claude Code uses on Linux) so that the
//! data dir — the person's token, the database, other runs' checkouts — is not there for it: the
//! data dir is covered by an empty tmpfs, and only the run's own checkout and the runtime dir
//! (the socket it calls through) are bound back. Everything else is left as it is. A pid
//! namespace of its own keeps it from other runs' processes (and their credentials). Where
//! bubblewrap is missing or cannot make namespaces, the daemon says so and runs members without
//! it; `[sandbox] enabled = false` in the data dir's `config.toml` turns it off. It does not
//! decide what a member may call (`crate::authority` does).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use troupe_api::layout::Layout;

/// What the daemon's own environment holds that a member must not inherit (where the hub's
/// NATS is, which may name its server and account).
pub const WITHHELD_ENV: &[&str] = &["TROUPE_NATS"];

/// How members are started.
#[derive(Debug, Clone)]
pub struct Sandbox {
    bwrap: Option<Arc<Bwrap>>,
    status: Arc<str>,
}

#[derive(Debug)]
struct Bwrap {
    program: PathBuf,
    data_dir: PathBuf,
    runtime_dir: PathBuf,
}

impl Sandbox {
    /// No sandbox (tests of the engine, a throwaway daemon), saying why.
    pub fn off(why: &str) -> Sandbox {
        Sandbox {
            bwrap: None,
            status: format!("off: {why}").into(),
        }
    }

    /// Whether members are sandboxed.
    pub fn is_on(&self) -> bool {
        self.bwrap.is_some()
    }

    /// What `daemon_status` and the start-up log say of it.
    pub fn status(&self) -> &str {
        &self.status
    }

    /// Finds bubblewrap and checks it can make the namespaces it needs (a trial run), unless the
    /// data dir's `config.toml` turns the sandbox off.
    pub fn detect(layout: &Layout) -> Sandbox {
        match configured(&layout.data_dir) {
            Ok(true) => {}
            Ok(false) => {
                tracing::warn!(
                    "the member sandbox is turned off ([sandbox] enabled = false in config.toml): members can read the person's token and the database"
                );
                return Sandbox::off("turned off in config.toml ([sandbox] enabled = false)");
            }
            Err(e) => {
                tracing::warn!(error = %e, "config.toml's [sandbox] is unreadable: the sandbox stays on");
            }
        }
        let Some(program) = find_bwrap() else {
            let s = Sandbox::off(
                "bubblewrap (bwrap) is not installed: members can read the person's token and the database (Debian: apt install bubblewrap)",
            );
            tracing::warn!("{}", s.status());
            return s;
        };
        let trial = std::process::Command::new(&program)
            .args(["--dev-bind", "/", "/", "--unshare-pid", "--proc", "/proc"])
            .args(["--", "true"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .output();
        match trial {
            Ok(out) if out.status.success() => {
                let runtime_dir = canonical(&layout.runtime_dir);
                let data_dir = canonical(&layout.data_dir);
                Sandbox {
                    status: format!(
                        "on: bubblewrap ({}) hides {} from members",
                        program.display(),
                        data_dir.display()
                    )
                    .into(),
                    bwrap: Some(Arc::new(Bwrap {
                        program,
                        data_dir,
                        runtime_dir,
                    })),
                }
            }
            Ok(out) => {
                let s = Sandbox::off(&format!(
                    "bubblewrap cannot make namespaces here ({}): members can read the person's token and the database",
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
                tracing::warn!("{}", s.status());
                s
            }
            Err(e) => {
                let s = Sandbox::off(&format!("bubblewrap does not start ({e})"));
                tracing::warn!("{}", s.status());
                s
            }
        }
    }

    /// The command line that runs `argv` for a run working in `workdir`: `argv` itself when the
    /// sandbox is off.
    /// Whether `argv` runs the command in a pid namespace of its own (all of its processes end
    /// with the sandbox).
    pub fn isolates_pids(&self) -> bool {
        self.bwrap.is_some()
    }

    pub fn argv(&self, argv: Vec<String>, workdir: &Path) -> Vec<String> {
        let Some(b) = &self.bwrap else {
            return argv;
        };
        let s = |p: &Path| p.display().to_string();
        let mut out = vec![
            s(&b.program),
            "--dev-bind".into(),
            "/".into(),
            "/".into(),
            "--tmpfs".into(),
            s(&b.data_dir),
        ];
        if b.runtime_dir.starts_with(&b.data_dir) {
            out.extend(["--bind".into(), s(&b.runtime_dir), s(&b.runtime_dir)]);
        }
        let workdir = canonical(workdir);
        if workdir.starts_with(&b.data_dir) && workdir != b.data_dir {
            out.extend(["--bind".into(), s(&workdir), s(&workdir)]);
        }
        out.extend([
            "--unshare-pid".into(),
            "--proc".into(),
            "/proc".into(),
            "--chdir".into(),
            s(&workdir),
            "--".into(),
        ]);
        out.extend(argv);
        out
    }
}

fn canonical(p: &Path) -> PathBuf {
    p.canonicalize().unwrap_or_else(|_| p.to_path_buf())
}

/// `[sandbox] enabled` of the data dir's `config.toml` (on when absent).
fn configured(data_dir: &Path) -> Result<bool, String> {
    let path = data_dir.join("config.toml");
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(true),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    let table: toml::Table =
        toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    match table.get("sandbox").and_then(|s| s.get("enabled")) {
        None => Ok(true),
        Some(toml::Value::Boolean(b)) => Ok(*b),
        Some(other) => Err(format!(
            "{}: [sandbox] enabled must be true or false, not {other}",
            path.display()
        )),
    }
}

/// `bwrap` on the PATH, or where Debian puts it.
fn find_bwrap() -> Option<PathBuf> {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .chain([PathBuf::from("/usr/bin")])
        .map(|d| d.join("bwrap"))
        .find(|p| p.is_file())
}
