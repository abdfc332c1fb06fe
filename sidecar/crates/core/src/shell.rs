//! A shell command run to its end for the daemon's own purposes (a landing's tests, a member's
//! setup): `sh -c` in a directory, in its own process group — all of it killed on timeout or
//! when the caller stops waiting (the future is dropped) — with only the tail of its output
//! kept, however much it writes.

use std::path::Path;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};

/// How a command went.
#[derive(Debug, Clone)]
pub struct ShellRun {
    pub passed: bool,
    pub exit_code: Option<i32>,
    /// The last `tail` bytes of stdout then stderr, or why it did not run to its end.
    pub output: String,
}

/// Kills the command's whole process group when dropped (its work is over, or abandoned).
struct Group(Option<i32>);

impl Drop for Group {
    fn drop(&mut self) {
        if let Some(pid) = self.0.and_then(rustix::process::Pid::from_raw)
            && let Err(e) = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL)
        {
            // ESRCH: every process of it has exited already.
            tracing::trace!(error = %e, "ending a command's process group");
        }
    }
}

/// Reads `from` to its end, keeping the last `tail` bytes.
async fn tail_of(from: Option<impl AsyncRead + Unpin>, tail: usize) -> Vec<u8> {
    let Some(mut from) = from else {
        return Vec::new();
    };
    let mut kept = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => return kept,
            Ok(n) => {
                kept.extend_from_slice(&buf[..n]);
                if kept.len() > tail {
                    kept.drain(..kept.len() - tail);
                }
            }
        }
    }
}

fn text_tail(bytes: &[u8], tail: usize) -> String {
    let text = String::from_utf8_lossy(bytes);
    let cut = text.len().saturating_sub(tail);
    let cut = (cut..=text.len())
        .find(|i| text.is_char_boundary(*i))
        .unwrap_or(text.len());
    text[cut..].to_string()
}

/// Runs `command` with `sh -c` in `dir` with `env` added, for at most `timeout`, in the
/// members' sandbox (it is a member's, or runs what members wrote).
pub async fn run(
    command: &str,
    dir: &Path,
    env: &[(String, String)],
    timeout: Duration,
    tail: usize,
    sandbox: &crate::sandbox::Sandbox,
) -> ShellRun {
    let argv = match sandbox.argv(vec!["sh".into(), "-c".into(), command.into()], dir) {
        Ok(argv) => argv,
        Err(why) => {
            return ShellRun {
                passed: false,
                exit_code: None,
                output: why,
            };
        }
    };
    let Some((program, args)) = argv.split_first() else {
        return ShellRun {
            passed: false,
            exit_code: None,
            output: "no command".into(),
        };
    };
    let mut cmd = crate::spawn::command(program, crate::spawn::Group::Session, None);
    cmd.args(args)
        .current_dir(dir)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let failed = |output: String| ShellRun {
        passed: false,
        exit_code: None,
        output,
    };
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return failed(format!("could not start sh: {e}")),
    };
    let _group = Group(child.id().and_then(|p| i32::try_from(p).ok()));
    let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
    let finished = async {
        let (out, err, status) =
            tokio::join!(tail_of(stdout, tail), tail_of(stderr, tail), child.wait());
        (out, err, status)
    };
    match tokio::time::timeout(timeout, finished).await {
        Ok((mut out, err, Ok(status))) => {
            out.extend_from_slice(&err);
            ShellRun {
                passed: status.success(),
                exit_code: status.code(),
                output: text_tail(&out, tail),
            }
        }
        Ok((_, _, Err(e))) => failed(format!("it failed to run: {e}")),
        // `_group` ends what the command started as this returns.
        Err(_) => failed(format!("it did not finish within {} s", timeout.as_secs())),
    }
}
