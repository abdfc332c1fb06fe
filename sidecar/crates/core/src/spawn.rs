//! The one way the daemon starts a process for an agent: a member's command, an ACP agent and
//! the terminals it asks for, an executor's shell command, a test command run for a member's
//! work. The daemon's private environment (`sandbox::WITHHELD_ENV`: where the hub's NATS is) is
//! withheld; the process gets a process group of its own (or a session), so it and its children
//! are signalled and found as one; and a run's process carries the run's marker (`RUN_MARKER`),
//! so a daemon started after a kill -9 finds and ends what it left. `clippy.toml` disallows
//! `tokio::process::Command::new` everywhere else.

use std::ffi::OsStr;

use troupe_api::layout::RUN_MARKER;

/// How a started process is grouped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    /// A process group of its own.
    Own,
    /// A session of its own (and so a group), made in the child before it runs the program:
    /// every boxed command starts so, with no controlling terminal a member could type into
    /// (TIOCSTI) when the daemon was started from one. A
    /// session rather than only a group: when the daemon dies (kill -9) the kernel sends SIGHUP
    /// to a group that it leaves orphaned with a stopped member, which would kill a member the
    /// person held (`pause_party`); a session's own group has no parent in its session, so it is
    /// never "left orphaned".
    Session,
    /// The program makes its own session: it is `setsid(1)`, which lets the daemon spawn
    /// without a fork.
    ByProgram,
}

/// A command for `program`, grouped as `group`, marked with `run_id` when it is a run's (a
/// process that inherits the run's environment may leave the marker out: it has it).
#[allow(clippy::disallowed_methods)] // The one place processes for agents are made.
pub fn command(
    program: impl AsRef<OsStr>,
    group: Group,
    run_id: Option<&str>,
) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(program);
    for name in crate::sandbox::WITHHELD_ENV {
        cmd.env_remove(name);
    }
    if let Some(run) = run_id {
        cmd.env(RUN_MARKER, run);
    }
    match group {
        Group::Own => {
            cmd.process_group(0);
        }
        Group::Session => new_session(&mut cmd),
        Group::ByProgram => {}
    }
    cmd
}

fn new_session(cmd: &mut tokio::process::Command) {
    // SAFETY: `setsid` is async-signal-safe and touches no memory of the parent's; it is all
    // that runs between fork and exec.
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(|| {
            rustix::process::setsid()
                .map(|_| ())
                .map_err(std::io::Error::from)
        });
    }
}

#[cfg(test)]
mod tests;
