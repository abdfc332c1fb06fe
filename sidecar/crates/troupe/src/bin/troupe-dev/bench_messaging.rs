//! `troupe-dev bench messaging`: measures a real daemon (a child process on a scratch data dir)
//! through its public API — start → ready, idle RSS, durable sends from 1 and from N concurrent
//! clients, and send → subscriber delivery latency — and, in the same run on the same disk, the
//! floor: the same rows group-committed straight through rusqlite (`troupe_store::
//! group_commit_floor`), so the daemon's throughput is reported as a share of what the disk and
//! SQLite allow. Medians over several runs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use serde::Serialize;
use serde_json::json;

use troupe::client;

use crate::harness::{
    cpu_ticks, median, percentiles, register, rss_kib, start_daemon, ticks_per_second,
};

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

pub async fn run(args: MessagingArgs, json: bool) -> anyhow::Result<()> {
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
        if let Some(line) = crate::harness::link_order_coverage() {
            println!("  {line}");
        }
    }
    Ok(())
}

async fn one_run(args: &MessagingArgs) -> anyhow::Result<RunFigures> {
    let (scratch, layout) = crate::harness::scratch_layout("troupe-bench-")?;
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
