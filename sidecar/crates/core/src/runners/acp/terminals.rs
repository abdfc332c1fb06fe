//! `terminal/*` for an ACP agent: commands it runs in the run's directory (checked by the
//! caller), each in its own process group, output kept up to its byte limit (the oldest bytes
//! dropped first, as the protocol asks), killed when released or when the run ends.

use std::collections::HashMap;
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rustix::process::Signal;
use tokio::io::AsyncReadExt;
use tokio::sync::watch;

use super::adapter::{BoxFuture, TerminalExit, TerminalOutput, TerminalSpec};

/// Output kept when the agent sets no limit.
const DEFAULT_LIMIT: u64 = 1024 * 1024;
/// Terminals one run may hold at once.
const MAX_TERMINALS: usize = 16;

#[derive(Default)]
pub struct Terminals {
    next: AtomicU64,
    all: Mutex<HashMap<String, Terminal>>,
}

struct Terminal {
    pid: Option<u32>,
    output: Arc<Mutex<Buffer>>,
    exit: watch::Receiver<Option<TerminalExit>>,
}

/// The newest `limit` bytes of a command's output (a ring: dropping the oldest costs what is
/// dropped, not what is kept).
#[derive(Default)]
struct Buffer {
    bytes: std::collections::VecDeque<u8>,
    limit: usize,
    truncated: bool,
}

impl Buffer {
    fn push(&mut self, chunk: &[u8]) {
        self.bytes.extend(chunk);
        if self.bytes.len() > self.limit {
            let cut = self.bytes.len() - self.limit;
            self.bytes.drain(..cut);
            // Start on a character boundary.
            while self.bytes.front().is_some_and(|b| (b & 0xC0) == 0x80) {
                self.bytes.pop_front();
            }
            self.truncated = true;
        }
    }

    fn text(&self) -> String {
        let (a, b) = self.bytes.as_slices();
        let mut all = Vec::with_capacity(a.len() + b.len());
        all.extend_from_slice(a);
        all.extend_from_slice(b);
        String::from_utf8_lossy(&all).into_owned()
    }
}

impl Terminals {
    fn all(&self) -> std::sync::MutexGuard<'_, HashMap<String, Terminal>> {
        self.all.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Commands still running.
    pub fn running(&self) -> usize {
        self.all()
            .values()
            .filter(|t| t.exit.borrow().is_none())
            .count()
    }

    pub fn create(&self, spec: TerminalSpec, cwd: &Path) -> Result<String, String> {
        if self.all().len() >= MAX_TERMINALS {
            return Err(format!(
                "at most {MAX_TERMINALS} terminals at once: release one first"
            ));
        }
        // The run's marker comes in `spec.env`.
        let mut child = crate::spawn::command(&spec.command, crate::spawn::Group::Session, None)
            .args(&spec.args)
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .current_dir(cwd)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot run {:?}: {e}", spec.command))?;
        let pid = child.id();
        let limit = spec
            .output_byte_limit
            .unwrap_or(DEFAULT_LIMIT)
            .min(DEFAULT_LIMIT * 16);
        let output = Arc::new(Mutex::new(Buffer {
            limit: usize::try_from(limit).unwrap_or(usize::MAX),
            ..Buffer::default()
        }));
        let (exit_tx, exit_rx) = watch::channel(None);
        let (out, err) = (child.stdout.take(), child.stderr.take());
        let (o1, o2) = (output.clone(), output.clone());
        tokio::spawn(async move {
            let (_, _, status) = tokio::join!(pump(out, o1), pump(err, o2), child.wait());
            let exit = match status {
                Ok(s) => {
                    use std::os::unix::process::ExitStatusExt;
                    TerminalExit {
                        code: s.code().and_then(|c| u32::try_from(c).ok()),
                        signal: s.signal().map(signal_name),
                    }
                }
                Err(_) => TerminalExit::default(),
            };
            exit_tx.send_replace(Some(exit));
        });
        let id = format!("term-{}", self.next.fetch_add(1, Ordering::Relaxed) + 1);
        self.all().insert(
            id.clone(),
            Terminal {
                pid,
                output,
                exit: exit_rx,
            },
        );
        Ok(id)
    }

    pub fn output(&self, id: &str) -> Result<TerminalOutput, String> {
        let all = self.all();
        let t = all.get(id).ok_or_else(|| unknown(id))?;
        let buf = t.output.lock().unwrap_or_else(|p| p.into_inner());
        Ok(TerminalOutput {
            output: buf.text(),
            truncated: buf.truncated,
            exit: t.exit.borrow().clone(),
        })
    }

    pub fn wait(&self, id: &str) -> BoxFuture<Result<TerminalExit, String>> {
        let exit = self.all().get(id).map(|t| t.exit.clone());
        let id = id.to_string();
        Box::pin(async move {
            let mut exit = exit.ok_or_else(|| unknown(&id))?;
            let done = exit
                .wait_for(Option::is_some)
                .await
                .map_err(|_| format!("terminal {id} was released"))?;
            Ok(done.clone().unwrap_or_default())
        })
    }

    pub fn kill(&self, id: &str) -> Result<(), String> {
        let all = self.all();
        let t = all.get(id).ok_or_else(|| unknown(id))?;
        if t.exit.borrow().is_none()
            && let Some(pid) = t.pid
        {
            crate::runners::process::signal_group(pid, Signal::KILL);
        }
        Ok(())
    }

    pub fn release(&self, id: &str) -> Result<(), String> {
        self.kill(id)?;
        self.all().remove(id);
        Ok(())
    }

    /// Kills every command still running (the run is over).
    pub fn kill_all(&self) {
        for t in self.all().drain().map(|(_, t)| t) {
            if t.exit.borrow().is_none()
                && let Some(pid) = t.pid
            {
                crate::runners::process::signal_group(pid, Signal::KILL);
            }
        }
    }
}

fn unknown(id: &str) -> String {
    format!("no terminal {id:?}")
}

fn signal_name(signal: i32) -> String {
    match signal {
        1 => "SIGHUP".into(),
        2 => "SIGINT".into(),
        9 => "SIGKILL".into(),
        15 => "SIGTERM".into(),
        other => format!("signal {other}"),
    }
}

async fn pump(pipe: Option<impl tokio::io::AsyncRead + Unpin>, into: Arc<Mutex<Buffer>>) {
    let Some(mut pipe) = pipe else {
        return;
    };
    let mut buf = [0u8; 8192];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => into
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(&buf[..n]),
        }
    }
}

#[cfg(test)]
mod tests;
