//! The process table (`/proc`): finding every process a run left — anything carrying its
//! `TROUPE_RUN_ID` in its environment (every process of a run inherits it, children that left
//! the group included), and its process group while the recorded leader still leads it — and
//! ending them (SIGTERM, a grace, SIGKILL). A group whose leader is gone is never signalled as a
//! whole: its number may belong to someone else by now. Only processes of our own user are
//! looked at, never the daemon itself. It knows nothing of runs beyond their ids.

use std::collections::HashSet;
use std::time::Duration;

use rustix::process::{Pid, Signal, kill_process, kill_process_group};

/// How often the table is read again while waiting for processes to go.
const POLL: Duration = Duration::from_millis(20);

/// The environment variable every process of a run carries (inherited by its children).
pub use troupe_api::layout::RUN_MARKER;

/// What identifies a run's processes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunProcesses {
    pub run_id: String,
    /// Its process group (the group leader's pid), if it has one of its own.
    pub pgid: Option<u32>,
    /// The group leader's start time (clock ticks since boot): the group counts as the run's
    /// only while a process with the leader's pid and this start time leads it.
    pub since: Option<i64>,
}

/// One process, as `/proc/<pid>/stat` and `environ` describe it.
#[derive(Debug, Clone)]
struct Proc {
    pid: u32,
    pgid: u32,
    start: i64,
    /// Its `TROUPE_RUN_ID`, if it has one.
    run: Option<String>,
}

/// The live (not zombie) processes of our user, the daemon excepted.
fn table() -> Vec<Proc> {
    let me = std::process::id();
    let uid = rustix::process::getuid().as_raw();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == me {
            continue;
        }
        use std::os::unix::fs::MetadataExt;
        if entry.metadata().map(|m| m.uid()).ok() != Some(uid) {
            continue;
        }
        let Some((state, pgid, start)) = stat(pid) else {
            continue;
        };
        if state == 'Z' || state == 'X' {
            continue;
        }
        out.push(Proc {
            pid,
            pgid,
            start,
            run: marker(pid),
        });
    }
    out
}

/// State, process group and start time from `/proc/<pid>/stat`.
fn stat(pid: u32) -> Option<(char, u32, i64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields start after the last ')'.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let state = fields.first()?.chars().next()?;
    let pgid = fields.get(2)?.parse().ok()?;
    let start = fields.get(19)?.parse().ok()?;
    Some((state, pgid, start))
}

/// The process's `TROUPE_RUN_ID`, if its environment carries one.
fn marker(pid: u32) -> Option<String> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    let prefix = format!("{RUN_MARKER}=");
    env.split(|b| *b == 0)
        .find_map(|var| var.strip_prefix(prefix.as_bytes()))
        .map(|v| String::from_utf8_lossy(v).into_owned())
}

/// The recorded groups whose leader is still the recorded process (same pid, same start time).
/// Only such a group is surely the run's: once its leader is gone its number may be reused by
/// an unrelated group (pid_max may be as low as 32768), so a group with a dead leader is never
/// signalled as a whole, and its processes count only by their marker.
fn verified_groups(table: &[Proc], runs: &[RunProcesses]) -> Vec<u32> {
    runs.iter()
        .filter_map(|r| {
            let g = r.pgid?;
            let since = r.since?;
            table
                .iter()
                .any(|p| p.pid == g && p.pgid == g && p.start == since)
                .then_some(g)
        })
        .collect()
}

/// The live processes of these runs (by marker, or in a verified group), and the verified
/// groups.
fn scan(runs: &[RunProcesses]) -> (Vec<u32>, Vec<u32>) {
    if runs.is_empty() {
        return (Vec::new(), Vec::new());
    }
    let table = table();
    let groups = verified_groups(&table, runs);
    let pids = table
        .iter()
        .filter(|p| {
            groups.contains(&p.pgid)
                || p.run
                    .as_deref()
                    .is_some_and(|id| runs.iter().any(|r| r.run_id == id))
        })
        .map(|p| p.pid)
        .collect();
    (pids, groups)
}

/// The pids of the live processes of these runs: those carrying one of their run ids, and those
/// in a run's group while its recorded leader still lives.
pub fn find(runs: &[RunProcesses]) -> Vec<u32> {
    scan(runs).0
}

/// The run ids carried by live processes of our user (to find what runs left behind).
pub fn marked_runs() -> HashSet<String> {
    table().into_iter().filter_map(|p| p.run).collect()
}

fn signal_all(groups: &[u32], pids: &[u32], signal: Signal) {
    for g in groups {
        if let Some(g) = i32::try_from(*g).ok().and_then(Pid::from_raw) {
            // ESRCH: the group is already gone.
            let _gone = kill_process_group(g, signal);
        }
    }
    for pid in pids {
        if let Some(p) = i32::try_from(*pid).ok().and_then(Pid::from_raw) {
            let _gone = kill_process(p, signal);
        }
    }
}

/// Ends every process of these runs: SIGTERM to each verified group and each process found, up
/// to `grace` for them to go, then SIGKILL to whatever is left. Returns how many processes had
/// to be killed with SIGKILL.
pub async fn end(runs: &[RunProcesses], grace: Duration) -> usize {
    let (pids, groups) = scan(runs);
    if pids.is_empty() {
        return 0;
    }
    signal_all(&groups, &pids, Signal::TERM);
    let deadline = tokio::time::Instant::now() + grace;
    loop {
        let (left, groups) = scan(runs);
        if left.is_empty() {
            return 0;
        }
        if tokio::time::Instant::now() >= deadline {
            signal_all(&groups, &left, Signal::KILL);
            // Wait (briefly) until the kernel has taken them, so callers see a clean table.
            let gone_by = tokio::time::Instant::now() + Duration::from_secs(5);
            while !find(runs).is_empty() && tokio::time::Instant::now() < gone_by {
                tokio::time::sleep(POLL).await;
            }
            return left.len();
        }
        tokio::time::sleep(POLL).await;
    }
}

#[cfg(test)]
mod tests;
