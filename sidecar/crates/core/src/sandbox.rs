//! The box around what members run: every process Troupe starts for a run (process members, ACP
//! agents with their own file tools and MCP servers, the commands an ACP agent runs through
//! `terminal/*` and an executor through `run_command`, setup commands, the merge queue's test
//! command) runs in it, whichever vendor's CLI it is. Inside, the whole filesystem is read-only
//! but for the run's own checkout, a private `/tmp` and the state dirs its agent declares; the
//! person's secrets (`plan::DEFAULT_SECRETS`, other vendors' credentials, the data dir) are not
//! there at all; and there is no network but the daemon's egress proxy (the `egress` module),
//! reached through a relay inside the box (`inside`).
//!
//! Two layers make it: bubblewrap (Debian's `bwrap`; mount, pid, ipc and network namespaces),
//! else, where the kernel has it, Landlock (`landlock`: the filesystem parts and TCP connects
//! to the proxy's port only). Where neither can be made, members do not start (fail closed)
//! unless the person turned the box off (`[sandbox] enabled = false` in the data dir's
//! `config.toml`). It does not decide what a member may call (`crate::authority` does).

pub mod inside;
pub mod landlock;
pub mod plan;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use troupe_api::layout::Layout;

pub use plan::RunBox;
use plan::canonical;

/// What the daemon's own environment holds that a member must not inherit (where the hub's
/// NATS is, which may name its server and account).
pub const WITHHELD_ENV: &[&str] = &["TROUPE_NATS"];

/// The environment variable a boxed process finds its layer in (`bubblewrap`, `landlock`).
pub const BOX_MARKER: &str = "TROUPE_SANDBOX";

/// How members are started.
#[derive(Debug, Clone)]
pub struct Sandbox {
    layer: Layer,
    status: Arc<str>,
    /// The person's secrets and the data dir: never there for a member.
    base: Arc<plan::Base>,
    /// The run this box is for (its paths, its egress); none for a command of no run's (the
    /// merge queue's tests), which gets the defaults and no network at all.
    run: Option<Arc<RunBox>>,
}

#[derive(Debug, Clone)]
enum Layer {
    Bwrap(Arc<PathBuf>),
    /// Landlock, applied by `troupe box-exec` (this binary) before it runs the command.
    Landlock(Arc<PathBuf>),
    /// The person turned the box off.
    Off,
    /// No layer could be made: members do not start.
    Missing,
}

/// Which layer makes the box, for `troupe doctor` and `daemon_status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerKind {
    Bubblewrap,
    Landlock,
    Off,
    Unavailable,
}

impl LayerKind {
    pub fn as_str(self) -> &'static str {
        match self {
            LayerKind::Bubblewrap => "bubblewrap",
            LayerKind::Landlock => "landlock",
            LayerKind::Off => "off",
            LayerKind::Unavailable => "unavailable",
        }
    }
}

impl Sandbox {
    /// No box (tests of the engine, a throwaway daemon), saying why.
    pub fn off(why: &str) -> Sandbox {
        Sandbox {
            layer: Layer::Off,
            status: format!("off: {why}").into(),
            base: Arc::new(plan::Base::default()),
            run: None,
        }
    }

    /// Whether members are boxed.
    pub fn is_on(&self) -> bool {
        matches!(self.layer, Layer::Bwrap(_) | Layer::Landlock(_))
    }

    /// Which layer makes the box.
    pub fn layer(&self) -> LayerKind {
        match self.layer {
            Layer::Bwrap(_) => LayerKind::Bubblewrap,
            Layer::Landlock(_) => LayerKind::Landlock,
            Layer::Off => LayerKind::Off,
            Layer::Missing => LayerKind::Unavailable,
        }
    }

    /// What `daemon_status` and the start-up log say of it.
    pub fn status(&self) -> &str {
        &self.status
    }

    /// The paths no member may read (the person's secrets, the data dir).
    pub fn secrets(&self) -> &[PathBuf] {
        &self.base.hidden
    }

    /// The person's side of the box (secrets, config), for `plan::plan`.
    pub fn base(&self) -> &plan::Base {
        &self.base
    }

    /// This box, for one run.
    pub fn for_run(&self, run: RunBox) -> Sandbox {
        Sandbox {
            run: Some(Arc::new(run)),
            ..self.clone()
        }
    }

    /// The run this box is for, if any.
    pub fn run(&self) -> Option<&RunBox> {
        self.run.as_deref()
    }

    /// Finds a layer that works here (bubblewrap, else Landlock), with a trial run, unless the
    /// data dir's `config.toml` turns the box off. `troupe_exe` is this binary (Landlock is
    /// applied by its `box-exec`, and bubblewrap's relay is it too).
    pub fn detect(layout: &Layout) -> Sandbox {
        let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("troupe"));
        Sandbox::detect_with(layout, &exe, None)
    }

    /// `detect` with the binary that runs `box-exec`, and a layer forced (`TROUPE_SANDBOX_LAYER`
    /// does the same: `bubblewrap`, `landlock`), for tests.
    pub fn detect_with(layout: &Layout, troupe_exe: &Path, force: Option<LayerKind>) -> Sandbox {
        let config = match plan::PersonConfig::load(&layout.data_dir) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "config.toml's [sandbox] is unreadable: the box stays on with its defaults");
                plan::PersonConfig::default()
            }
        };
        let base = Arc::new(plan::Base::new(layout, &config, troupe_exe));
        if !config.enabled {
            tracing::warn!(
                "the member box is turned off ([sandbox] enabled = false in config.toml): members can write anywhere, read the person's secrets, the token and the database"
            );
            return Sandbox {
                layer: Layer::Off,
                status: "off: turned off in config.toml ([sandbox] enabled = false)".into(),
                base,
                run: None,
            };
        }
        let force = force.or_else(
            || match std::env::var("TROUPE_SANDBOX_LAYER").ok().as_deref() {
                Some("bubblewrap") => Some(LayerKind::Bubblewrap),
                Some("landlock") => Some(LayerKind::Landlock),
                _ => None,
            },
        );
        let exe = Arc::new(base.troupe_exe.clone());
        let mut misses = Vec::new();
        if force != Some(LayerKind::Landlock) {
            match try_bwrap() {
                Ok(program) => {
                    return Sandbox {
                        status: format!(
                            "on: bubblewrap ({}): members write only their checkout, see none of the person's secrets, reach the network only through the egress proxy",
                            program.display()
                        )
                        .into(),
                        layer: Layer::Bwrap(Arc::new(program)),
                        base,
                        run: None,
                    };
                }
                Err(why) => misses.push(why),
            }
        }
        if force != Some(LayerKind::Bubblewrap) {
            match landlock::probe() {
                Ok(abi) if abi >= 4 => {
                    return Sandbox {
                        status: format!(
                            "on: landlock (ABI {abi}; no bubblewrap): members write only their checkout and see none of the person's secrets; TCP only to the egress proxy's port"
                        )
                        .into(),
                        layer: Layer::Landlock(exe),
                        base,
                        run: None,
                    };
                }
                Ok(abi) => misses.push(format!(
                    "Landlock ABI {abi} cannot limit TCP connections (4 is needed)"
                )),
                Err(why) => misses.push(format!("no Landlock: {why}")),
            }
        }
        let status = format!(
            "unavailable: {}; members do not start. Run `troupe doctor`: install bubblewrap (Debian: apt install bubblewrap), or turn the box off with [sandbox] enabled = false in {}",
            misses.join("; "),
            layout.data_dir.join("config.toml").display()
        );
        tracing::error!("{status}");
        Sandbox {
            layer: Layer::Missing,
            status: status.into(),
            base,
            run: None,
        }
    }

    /// Whether `argv` runs the command in a pid namespace of its own (all of its processes end
    /// with the box).
    pub fn isolates_pids(&self) -> bool {
        matches!(self.layer, Layer::Bwrap(_))
    }

    /// The command line that runs `argv` for a run working in `workdir`, in the box: `argv`
    /// itself when the person turned the box off; an error naming the fix when no box can be
    /// made here.
    pub fn argv(&self, argv: Vec<String>, workdir: &Path) -> Result<Vec<String>, String> {
        match &self.layer {
            Layer::Off => Ok(argv),
            Layer::Missing => Err(format!(
                "members cannot start: the member box is {}",
                self.status
            )),
            Layer::Bwrap(program) => {
                let exe = self.relay_exe();
                Ok(plan::bwrap_argv(
                    program,
                    exe.as_deref(),
                    &self.base,
                    self.run.as_deref(),
                    argv,
                    &canonical(workdir),
                ))
            }
            Layer::Landlock(exe) => plan::landlock_argv(
                exe,
                &self.base,
                self.run.as_deref(),
                argv,
                &canonical(workdir),
            ),
        }
    }

    /// The binary that relays the egress proxy inside a bubblewrap box.
    fn relay_exe(&self) -> Option<PathBuf> {
        let run = self.run.as_deref()?;
        run.egress.as_ref()?;
        Some(run.troupe_exe.clone())
    }
}

/// Bubblewrap, checked by a trial run with the namespaces and mounts the box uses.
fn try_bwrap() -> Result<PathBuf, String> {
    let program = find_bwrap().ok_or_else(|| "bubblewrap (bwrap) is not installed".to_string())?;
    let trial = std::process::Command::new(&program)
        .args(["--ro-bind", "/", "/", "--dev", "/dev", "--tmpfs", "/tmp"])
        .args(["--unshare-pid", "--unshare-net", "--unshare-ipc"])
        .args(["--proc", "/proc", "--", "true"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .output();
    match trial {
        Ok(out) if out.status.success() => Ok(program),
        Ok(out) => Err(format!(
            "bubblewrap cannot make namespaces here ({})",
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Err(e) => Err(format!("bubblewrap does not start ({e})")),
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

#[cfg(test)]
mod tests;
