//! A member's setup (`setup` in its agent definition): shell commands run once in a new
//! worktree or clone before the member starts (installing dependencies, seed 001). They run off
//! the orchestrator's loop; each command's outcome goes on the timeline (`member_setup`), and
//! the loop hears back (`Command::SetupDone`): it starts the member, or a failure is the
//! member's crash, so its recovery applies. Stopping the member (its party cancelled) ends the
//! command running. A marker beside the checkout says setup is done, so a restarted member (or
//! daemon) does not run it again.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;
use tokio::sync::mpsc;
use troupe_engine::AgentDefinition;
use troupe_store::{AgentRun, NewEvent, Store};

use super::Command;

/// Longest one setup command may take when the agent has no `timeout_secs`.
const DEFAULT_SETUP_SECS: u64 = 600;
/// Output of each command kept on the timeline.
const OUTPUT_TAIL: usize = 4 * 1024;

/// Where the marker of a checkout's finished setup is: beside it, never inside it.
fn marker(workdir: &Path) -> Option<PathBuf> {
    let name = workdir.file_name()?.to_string_lossy().into_owned();
    Some(workdir.parent()?.join(format!(".{name}.setup-done")))
}

/// Forgets that a checkout was set up (it was removed).
pub fn forget_setup(workdir: &Path) {
    if let Some(m) = marker(workdir)
        && let Err(e) = std::fs::remove_file(&m)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::debug!(marker = %m.display(), error = %e, "setup marker left");
    }
}

/// Whether the run must set its checkout up before it starts.
pub(super) fn needed(run: &AgentRun, agent: &AgentDefinition) -> bool {
    if agent.setup.is_empty() || agent.isolation == troupe_engine::Isolation::None {
        return false;
    }
    let Some(workdir) = run.workdir.as_deref().map(Path::new) else {
        return false;
    };
    marker(workdir).is_some_and(|m| !m.exists())
}

/// Runs the setup commands in order, then tells the loop.
pub(super) async fn run(
    store: Store,
    commands: mpsc::UnboundedSender<Command>,
    run: AgentRun,
    agent: AgentDefinition,
    env: Vec<(String, String)>,
    sandbox: crate::sandbox::Sandbox,
    mut stopped: tokio::sync::oneshot::Receiver<()>,
) {
    let workdir = PathBuf::from(run.workdir.clone().unwrap_or_default());
    let timeout = agent
        .timeout_secs
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .unwrap_or(Duration::from_secs(DEFAULT_SETUP_SECS));
    let mut env = env;
    env.extend(agent.env.iter().map(|(k, v)| (k.clone(), v.clone())));
    let mut error = None;
    for command in &agent.setup {
        let outcome = tokio::select! {
            outcome = crate::shell::run(command, &workdir, &env, timeout, OUTPUT_TAIL, &sandbox) => outcome,
            // Its member was stopped: the command's processes end with the dropped future.
            _ = &mut stopped => {
                error = Some(format!("stopped during setup command `{command}`"));
                break;
            }
        };
        let event = NewEvent {
            kind: "member_setup".into(),
            project_id: Some(run.project_id.clone()),
            session_id: Some(run.session_id.clone()),
            party_id: run.party_id.clone(),
            data: json!({ "run_id": run.run_id, "role": run.role_name, "index": run.instance_index,
                          "command": command, "passed": outcome.passed,
                          "exit_code": outcome.exit_code, "output": outcome.output }),
        };
        if let Err(e) = store.append_event(event).await {
            tracing::warn!(run = %run.run_id, error = %e, "setup event lost");
        }
        if !outcome.passed {
            let code = outcome
                .exit_code
                .map_or_else(|| "no exit code".to_string(), |c| format!("exit {c}"));
            let last = outcome
                .output
                .lines()
                .last()
                .unwrap_or_default()
                .to_string();
            error = Some(format!("setup command `{command}` failed ({code}): {last}"));
            break;
        }
    }
    if error.is_none()
        && let Some(m) = marker(&workdir)
        && let Err(e) = std::fs::write(&m, "")
    {
        error = Some(format!(
            "setup done, but its marker {} could not be written: {e}",
            m.display()
        ));
    }
    let done = Command::SetupDone {
        run: Box::new(run),
        definition: Box::new(agent),
        error,
    };
    if commands.send(done).is_err() {
        tracing::debug!("setup finished after the daemon stopped");
    }
}
