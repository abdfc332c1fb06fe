//! `troupe-dev bench messaging`: measures a real daemon (a child process on a scratch data dir)
//! through its public API — start → ready, idle RSS, durable sends from 1 and from N concurrent
//! clients, and send → subscriber delivery latency — and, in the same run on the same disk, the
//! floor: the same rows group-committed straight through rusqlite (`troupe_store::
//! group_commit_floor`), so the daemon's throughput is reported as a share of what the disk and
//! SQLite allow. Medians over several runs.

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use serde::Serialize;
use serde_json::json;

use troupe::client::{self, Client};
use troupe_api::layout::Layout;

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Durable sends, delivery latency, start-up time and memory of the daemon.
    Messaging(MessagingArgs),
    /// A party of many roles and members (trivial real processes): scheduling overhead.
    Parties(PartiesArgs),
    /// The approval round trip through a real `troupe lsp`, excluding the human.
    Approvals(crate::bench_approvals::ApprovalArgs),
    /// What admitting a call costs: the policy check per call, against a round trip.
    Authority(crate::bench_authority::AuthorityArgs),
    /// MCP tool call round trips over stdio (`troupe mcp`).
    Mcp(crate::bench_agents::McpArgs),
    /// ACP member spawn → first update (the scripted agent, or any ACP command).
    Acp(crate::bench_agents::AcpArgs),
    /// `troupe acp` for ACP editors: prompt → first update, and the permission round trip.
    AcpDoor(crate::bench_acp_door::AcpDoorArgs),
    /// Remote workers over NATS: dispatch latency and the calls per second of 8 remote members.
    Remote(crate::bench_remote::RemoteArgs),
    /// The pattern layer's overhead per hop: a handoff chain and an advisor fan-out.
    Patterns(crate::bench_patterns::PatternArgs),
    /// The conflict radar's cost: N members × M changed files on a real repository.
    Radar(crate::bench_radar::RadarArgs),
    /// `troupe ui` in a real terminal: status change → screen, beside a bare subscriber; idle CPU.
    Ui(crate::bench_ui::UiArgs),
    /// A store that does not grow forever: size and send rate after a million messages and
    /// after `gc`.
    Gc(crate::bench_gc::GcArgs),
    /// kill -9 soaks: keyed sends (nothing acknowledged lost or doubled) and parties (no rerun,
    /// no double spawn, no orphan process).
    #[command(subcommand)]
    Soak(crate::bench_soak::SoakCommand),
}

#[derive(Debug, Args)]
pub struct PartiesArgs {
    /// Roles in the party.
    #[arg(long, default_value_t = 200)]
    pub roles: usize,
    /// Members per role (count).
    #[arg(long, default_value_t = 5)]
    pub per_role: u32,
    /// DAG layers: each role depends on two roles of the layer before.
    #[arg(long, default_value_t = 10)]
    pub layers: usize,
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Party sizes in members (e.g. `100,1000,5000`): runs the benchmark once per size, with
    /// `size / per-role` roles, and prints the curve. Overrides `--roles`.
    #[arg(long, value_delimiter = ',')]
    pub sizes: Vec<usize>,
    /// Measure only the engine (no daemon, no processes).
    #[arg(long)]
    pub engine_only: bool,
}

#[derive(Debug, Args)]
pub struct MessagingArgs {
    /// Concurrent clients in the throughput run.
    #[arg(long, default_value_t = 64)]
    pub clients: usize,
    /// Messages sent in the concurrent run (split across the clients).
    #[arg(long, default_value_t = 64_000)]
    pub messages: usize,
    /// Messages sent by the single sequential client.
    #[arg(long, default_value_t = 5_000)]
    pub sequential: usize,
    /// Round trips measured for send → subscriber delivery.
    #[arg(long, default_value_t = 2_000)]
    pub deliveries: usize,
    /// Independent runs (fresh daemon each); medians are reported.
    #[arg(long, default_value_t = 5)]
    pub runs: usize,
    /// Send without idempotency keys (by default every send carries one, the costlier path).
    #[arg(long)]
    pub no_keys: bool,
    /// Content size in bytes.
    #[arg(long, default_value_t = 256)]
    pub size: usize,
}

/// One run's figures.
#[derive(Debug, Clone, Serialize)]
pub struct RunFigures {
    pub start_to_ready_ms: f64,
    pub idle_rss_kib: u64,
    pub seq_msgs_per_s: f64,
    pub seq_p50_us: f64,
    pub seq_p99_us: f64,
    pub conc_msgs_per_s: f64,
    pub conc_p50_us: f64,
    pub conc_p99_us: f64,
    /// Daemon CPU time (user + system) per message in the concurrent run.
    pub conc_daemon_cpu_us_per_msg: f64,
    pub delivery_p50_us: f64,
    pub delivery_p99_us: f64,
    pub rss_after_load_kib: u64,
    /// The floor: the concurrent run's rows, group-committed straight through rusqlite.
    pub floor_rows_per_s: f64,
    /// The store's whole `send` SQL, group-committed the same way.
    pub floor_store_sql_per_s: f64,
    /// `conc_msgs_per_s / floor_rows_per_s`.
    pub share_of_floor: f64,
}

pub async fn run(cmd: BenchCommand, json: bool) -> anyhow::Result<()> {
    let args = match cmd {
        BenchCommand::Messaging(args) => args,
        BenchCommand::Parties(args) => return crate::bench_parties::run(args, json).await,
        BenchCommand::Approvals(args) => return crate::bench_approvals::run(args, json).await,
        BenchCommand::Authority(args) => return crate::bench_authority::run(args, json).await,
        BenchCommand::Mcp(args) => return crate::bench_agents::mcp(args, json).await,
        BenchCommand::Acp(args) => return crate::bench_agents::acp(args, json).await,
        BenchCommand::AcpDoor(args) => return crate::bench_acp_door::run(args, json).await,
        BenchCommand::Remote(args) => return crate::bench_remote::run(args, json).await,
        BenchCommand::Soak(cmd) => return crate::bench_soak::run(cmd, json).await,
        BenchCommand::Patterns(args) => return crate::bench_patterns::run(args, json).await,
        BenchCommand::Radar(args) => return crate::bench_radar::run(args, json).await,
        BenchCommand::Ui(args) => return crate::bench_ui::run(args, json).await,
        BenchCommand::Gc(args) => return crate::bench_gc::run(args, json).await,
    };
    if args.clients == 0 || args.runs == 0 {
        bail!("--clients and --runs must be at least 1");
    }
    let mut runs = Vec::new();
    for i in 0..args.runs {
        let figures = one_run(&args)
            .await
            .with_context(|| format!("run {}", i + 1))?;
        if !json {
            eprintln!("run {}: {figures:?}", i + 1);
        }
        runs.push(figures);
    }
    let med = |f: fn(&RunFigures) -> f64| median(runs.iter().map(f).collect());
    let summary = json!({
        "runs": args.runs,
        "clients": args.clients,
        "content_bytes": args.size,
        "idempotency_keys": !args.no_keys,
        "start_to_ready_ms": med(|r| r.start_to_ready_ms),
        "idle_rss_mib": med(|r| r.idle_rss_kib as f64) / 1024.0,
        "rss_after_load_mib": med(|r| r.rss_after_load_kib as f64) / 1024.0,
        "sequential": { "msgs_per_s": med(|r| r.seq_msgs_per_s), "p50_us": med(|r| r.seq_p50_us), "p99_us": med(|r| r.seq_p99_us) },
        "concurrent": { "msgs_per_s": med(|r| r.conc_msgs_per_s), "p50_us": med(|r| r.conc_p50_us), "p99_us": med(|r| r.conc_p99_us), "daemon_cpu_us_per_msg": med(|r| r.conc_daemon_cpu_us_per_msg) },
        "delivery": { "p50_us": med(|r| r.delivery_p50_us), "p99_us": med(|r| r.delivery_p99_us) },
        "floor": { "rows_per_s": med(|r| r.floor_rows_per_s), "store_sql_per_s": med(|r| r.floor_store_sql_per_s), "share_of_floor": med(|r| r.share_of_floor) },
        "per_run": runs,
    });
    if json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        println!(
            "medians of {} runs ({} B messages):\n  start → ready        {:>9.2} ms\n  idle RSS             {:>9.2} MiB (after load {:.2} MiB)\n  1 client sequential  {:>9.0} msgs/s  p50 {:.0} µs  p99 {:.0} µs\n  {} clients           {:>9.0} msgs/s  p50 {:.0} µs  p99 {:.0} µs  (daemon CPU {:.1} µs/msg)\n  send → subscriber    p50 {:.0} µs  p99 {:.0} µs\n  floor (same rows, bare rusqlite group commit, same disk) {:>9.0} sends/s; store SQL alone {:.0} sends/s\n  {} clients / floor   {:>9.1} %",
            args.runs,
            args.size,
            summary["start_to_ready_ms"].as_f64().unwrap_or(0.0),
            summary["idle_rss_mib"].as_f64().unwrap_or(0.0),
            summary["rss_after_load_mib"].as_f64().unwrap_or(0.0),
            summary["sequential"]["msgs_per_s"].as_f64().unwrap_or(0.0),
            summary["sequential"]["p50_us"].as_f64().unwrap_or(0.0),
            summary["sequential"]["p99_us"].as_f64().unwrap_or(0.0),
            args.clients,
            summary["concurrent"]["msgs_per_s"].as_f64().unwrap_or(0.0),
            summary["concurrent"]["p50_us"].as_f64().unwrap_or(0.0),
            summary["concurrent"]["p99_us"].as_f64().unwrap_or(0.0),
            summary["concurrent"]["daemon_cpu_us_per_msg"]
                .as_f64()
                .unwrap_or(0.0),
            summary["delivery"]["p50_us"].as_f64().unwrap_or(0.0),
            summary["delivery"]["p99_us"].as_f64().unwrap_or(0.0),
            summary["floor"]["rows_per_s"].as_f64().unwrap_or(0.0),
            summary["floor"]["store_sql_per_s"].as_f64().unwrap_or(0.0),
            args.clients,
            summary["floor"]["share_of_floor"].as_f64().unwrap_or(0.0) * 100.0,
        );
    }
    Ok(())
}

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

async fn one_run(args: &MessagingArgs) -> anyhow::Result<RunFigures> {
    let (scratch, layout) = crate::bench::scratch_layout("troupe-bench-")?;
    let cwd = scratch.path().display().to_string();

    let (mut daemon, first, start_to_ready_ms) = start_daemon(&layout).await?;
    let pid = daemon.0.id();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let idle_rss_kib = rss_kib(pid)?;

    let content = "x".repeat(args.size);

    // 1 client, sequential.
    let a = register(&first, &cwd).await?;
    let b = register(&first, &cwd).await?;
    let mut seq_lat = Vec::with_capacity(args.sequential);
    let t = Instant::now();
    for i in 0..args.sequential {
        let s = Instant::now();
        first
            .call("send_message", json!({ "from_session_id": a, "to_session_id": b, "content": content, "idempotency_key": (!args.no_keys).then(|| format!("s{i}")) }))
            .await?;
        seq_lat.push(s.elapsed());
    }
    let seq_msgs_per_s = args.sequential as f64 / t.elapsed().as_secs_f64();

    // N clients, each on its own connection, concurrently.
    let mut clients = Vec::with_capacity(args.clients);
    for _ in 0..args.clients {
        let c = client::connect(&layout, false).await?;
        let from = register(&c, &cwd).await?;
        let to = register(&c, &cwd).await?;
        clients.push((Arc::new(c), from, to));
    }
    let per_client = args.messages.div_ceil(args.clients);
    let cpu_before = cpu_ticks(pid)?;
    let t = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for (c, from, to) in clients {
        let content = content.clone();
        let no_keys = args.no_keys;
        tasks.spawn(async move {
            let mut lat = Vec::with_capacity(per_client);
            for i in 0..per_client {
                let s = Instant::now();
                let key = (!no_keys).then(|| format!("c{i}"));
                c.call("send_message", json!({ "from_session_id": from, "to_session_id": to, "content": content, "idempotency_key": key }))
                    .await?;
                lat.push(s.elapsed());
            }
            anyhow::Ok(lat)
        });
    }
    let mut conc_lat = Vec::with_capacity(per_client * args.clients);
    while let Some(done) = tasks.join_next().await {
        conc_lat.extend(done??);
    }
    let conc_msgs_per_s = conc_lat.len() as f64 / t.elapsed().as_secs_f64();
    let conc_daemon_cpu_us_per_msg =
        (cpu_ticks(pid)? - cpu_before) as f64 * 1e6 / ticks_per_second() / conc_lat.len() as f64;

    // Send → subscriber delivery, one message in flight at a time.
    let listener = client::connect(&layout, false).await?;
    let mut sub = listener
        .subscribe_messages(json!({ "session_id": b }))
        .await?;
    let mut delivery = Vec::with_capacity(args.deliveries);
    for _ in 0..args.deliveries {
        let s = Instant::now();
        first
            .call(
                "send_message",
                json!({ "from_session_id": a, "to_session_id": b, "content": content }),
            )
            .await?;
        // The clock starts before the send, so this bounds delivery from above.
        tokio::time::timeout(Duration::from_secs(5), sub.next())
            .await
            .context("no delivery within 5 s")?
            .context("subscription closed")??;
        delivery.push(s.elapsed());
    }
    let rss_after_load_kib = rss_kib(pid)?;
    let _answer_or_hangup = first.call("shutdown_daemon", json!({})).await;
    let _reaped = daemon.0.wait();

    // The floor, on the same disk, with the daemon gone: the concurrent run's sends, one per
    // client per group commit.
    let (dir, clients, sends, keys) = (
        scratch.path().to_path_buf(),
        args.clients,
        conc_lat.len(),
        !args.no_keys,
    );
    let floor = tokio::task::spawn_blocking(move || {
        troupe_store::group_commit_floor(&dir, clients, sends, &content, keys)
    })
    .await??;

    let (seq_p50_us, seq_p99_us) = percentiles(&mut seq_lat);
    let (conc_p50_us, conc_p99_us) = percentiles(&mut conc_lat);
    let (delivery_p50_us, delivery_p99_us) = percentiles(&mut delivery);
    Ok(RunFigures {
        start_to_ready_ms,
        idle_rss_kib,
        seq_msgs_per_s,
        seq_p50_us,
        seq_p99_us,
        conc_msgs_per_s,
        conc_p50_us,
        conc_p99_us,
        conc_daemon_cpu_us_per_msg,
        delivery_p50_us,
        delivery_p99_us,
        rss_after_load_kib,
        floor_rows_per_s: floor.rows_per_s,
        floor_store_sql_per_s: floor.store_sql_per_s,
        share_of_floor: conc_msgs_per_s / floor.rows_per_s,
    })
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
