//! A shell command run to its end for the daemon's own purposes (a landing's tests, a member's
//! setup): `sh -c` in a directory, in its own process group (all of it killed on timeout), with
//! the tail of its output kept.

use std::path::Path;
use std::time::Duration;

/// How a command went.
#[derive(Debug, Clone)]
pub struct ShellRun {
    pub passed: bool,
    pub exit_code: Option<i32>,
    /// The last `tail` bytes of stdout then stderr, or why it did not run to its end.
    pub output: String,
}

/// Runs `command` with `sh -c` in `dir` with `env` added, for at most `timeout`.
pub async fn run(
    command: &str,
    dir: &Path,
    env: &[(String, String)],
    timeout: Duration,
    tail: usize,
) -> ShellRun {
    let mut cmd = tokio::process::Command::new("sh");
    cmd.arg("-c")
        .arg(command)
        .current_dir(dir)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .process_group(0);
    let failed = |output: String| ShellRun {
        passed: false,
        exit_code: None,
        output,
    };
    let child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return failed(format!("could not start sh: {e}")),
    };
    let pid = child.id();
    match tokio::time::timeout(timeout, child.wait_with_output()).await {
        Ok(Ok(out)) => {
            let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
            text.push_str(&String::from_utf8_lossy(&out.stderr));
            let cut = text.len().saturating_sub(tail);
            let cut = (cut..=text.len())
                .find(|i| text.is_char_boundary(*i))
                .unwrap_or(text.len());
            ShellRun {
                passed: out.status.success(),
                exit_code: out.status.code(),
                output: text[cut..].to_string(),
            }
        }
        Ok(Err(e)) => failed(format!("it failed to run: {e}")),
        Err(_) => {
            // The whole group: what the command started too.
            if let Some(pid) = pid
                .and_then(|p| i32::try_from(p).ok())
                .and_then(rustix::process::Pid::from_raw)
                && let Err(e) =
                    rustix::process::kill_process_group(pid, rustix::process::Signal::KILL)
            {
                tracing::debug!(error = %e, "killing a timed-out command's group");
            }
            failed(format!("it did not finish within {} s", timeout.as_secs()))
        }
    }
}
