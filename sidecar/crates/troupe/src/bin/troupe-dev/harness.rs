//! The benchmarks' shared scaffolding: a scratch data dir, a daemon started as a child process
//! (killed if a run fails half-way), a registered session, the daemon's RSS and CPU from
//! `/proc`, and medians and percentiles.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::json;

use troupe::client::{self, Client};
use troupe_api::layout::Layout;

/// Kills the benchmarked daemon if a run fails half-way.
pub(crate) struct DaemonGuard(pub(crate) Child);

impl Drop for DaemonGuard {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _already_gone = self.0.kill();
            let _reaped = self.0.wait();
        }
    }
}

/// A scratch directory with a fresh data dir and runtime dir in it.
pub(crate) fn scratch_layout(prefix: &str) -> anyhow::Result<(tempfile::TempDir, Layout)> {
    let scratch = tempfile::Builder::new().prefix(prefix).tempdir()?;
    let layout = Layout {
        data_dir: scratch.path().join("data"),
        runtime_dir: scratch.path().join("run"),
    };
    layout.prepare_dirs()?;
    Ok((scratch, layout))
}

/// Starts a daemon on `layout` as a child process; returns it, a client, and the time from
/// spawning it to its first answered call (ms).
pub(crate) async fn start_daemon(layout: &Layout) -> anyhow::Result<(DaemonGuard, Client, f64)> {
    start_daemon_with(layout, &[]).await
}

/// `start_daemon` with extra environment (`TROUPE_NATS` makes it a hub).
pub(crate) async fn start_daemon_with(
    layout: &Layout,
    env: &[(&str, &str)],
) -> anyhow::Result<(DaemonGuard, Client, f64)> {
    let spawned = Instant::now();
    let child = Command::new(crate::troupe_exe()?)
        .args(["serve", "--data-dir"])
        .arg(&layout.data_dir)
        .env("TROUPE_RUNTIME_DIR", &layout.runtime_dir)
        .envs(env.iter().copied())
        .env(
            "TROUPE_LOG",
            std::env::var("TROUPE_DAEMON_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .context("cannot start the daemon")?;
    let daemon = DaemonGuard(child);
    let client = loop {
        if let Ok(client) = client::connect(layout, false).await
            && client.call("daemon_status", json!({})).await.is_ok()
        {
            break client;
        }
        if spawned.elapsed() > Duration::from_secs(10) {
            bail!("the daemon did not become ready within 10 s");
        }
        tokio::time::sleep(Duration::from_micros(200)).await;
    };
    Ok((daemon, client, spawned.elapsed().as_secs_f64() * 1000.0))
}

pub(crate) async fn register(client: &Client, cwd: &str) -> anyhow::Result<String> {
    let r = client
        .call("register_session", json!({ "cli": "bench", "cwd": cwd }))
        .await?;
    r["session_id"]
        .as_str()
        .map(str::to_string)
        .context("no session_id")
}

pub(crate) fn rss_kib(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .context("no VmRSS in /proc status")
}

/// utime + stime of a process, in clock ticks.
pub(crate) fn cpu_ticks(pid: u32) -> anyhow::Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name (which may contain spaces) start after the last ')'.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .context("bad /proc stat")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |i: usize| -> anyhow::Result<u64> {
        fields
            .get(i)
            .context("short /proc stat")?
            .parse()
            .context("bad /proc stat field")
    };
    // utime and stime are fields 14 and 15 of stat(5); `rest` starts at field 3.
    Ok(field(11)? + field(12)?)
}

/// A process's CPU time in nanoseconds per thread name (`/proc/<pid>/task/*/comm` and the
/// first field of `schedstat`, the time the scheduler ran it): threads of one name are summed
/// (`tokio-rt-worker`: the async workers, and tokio's blocking threads, which share the name).
/// A thread that ended is not counted.
pub(crate) fn thread_cpu_ns(pid: u32) -> anyhow::Result<std::collections::BTreeMap<String, u64>> {
    let mut by_name = std::collections::BTreeMap::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let dir = task?.path();
        // A thread that ended meanwhile has no files left to read.
        let (Ok(name), Ok(stat)) = (
            std::fs::read_to_string(dir.join("comm")),
            std::fs::read_to_string(dir.join("schedstat")),
        ) else {
            continue;
        };
        let ns = stat
            .split_whitespace()
            .next()
            .and_then(|ns| ns.parse::<u64>().ok())
            .context("bad schedstat")?;
        *by_name.entry(name.trim().to_string()).or_insert(0) += ns;
    }
    Ok(by_name)
}

/// A process's CPU time in nanoseconds: the sum over its threads (`thread_cpu_ns`), or its
/// clock ticks (`/proc/<pid>/stat`, 10 ms each) on a kernel without `schedstat`.
pub(crate) fn cpu_ns(pid: u32) -> anyhow::Result<u64> {
    let threads = thread_cpu_ns(pid)?;
    if threads.is_empty() {
        return Ok((cpu_ticks(pid)? as f64 * 1e9 / ticks_per_second()) as u64);
    }
    Ok(threads.values().sum())
}

pub(crate) fn ticks_per_second() -> f64 {
    rustix::param::clock_ticks_per_second() as f64
}

pub(crate) fn percentiles(samples: &mut [Duration]) -> (f64, f64) {
    samples.sort_unstable();
    let at = |q: f64| {
        let idx = ((samples.len() as f64 - 1.0) * q).round() as usize;
        samples.get(idx).map_or(0.0, |d| d.as_secs_f64() * 1e6)
    };
    (at(0.50), at(0.99))
}

pub(crate) fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => 0.0,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

/// The function list a release build links first (`link/order.txt`, see the troupe crate's
/// `build.rs`).
const LINK_ORDER: &str = include_str!("../../../link/order.txt");

/// How much of the link order the measured binary holds, as a line for a bench's report; `None`
/// when `nm` (binutils) is missing. A list made before the code changed names functions the build
/// no longer has: the linker skips them, and the daemon maps more of its code (idle RSS grows;
/// `scripts/link-order` remakes the list).
pub(crate) fn link_order_coverage() -> Option<String> {
    let exe = crate::troupe_exe().ok()?;
    let out = Command::new("nm")
        .args(["--defined-only", "--format=just-symbols"])
        .arg(&exe)
        .stderr(Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    let names: std::collections::HashSet<&[u8]> = out.stdout.split(|b| *b == b'\n').collect();
    let listed: Vec<&str> = LINK_ORDER
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let found = listed
        .iter()
        .filter(|l| names.contains(l.as_bytes()))
        .count();
    let share = found as f64 / listed.len().max(1) as f64;
    let verdict = if share >= 0.95 {
        "current"
    } else {
        "stale: run scripts/link-order, then build again"
    };
    Some(format!(
        "link order: {found} of {} listed functions in {} ({:.0} %, {verdict})",
        listed.len(),
        exe.display(),
        share * 100.0
    ))
}
