//! `troupe-dev bench gc`: a store that does not grow forever, measured. A real daemon (child
//! process, scratch data dir) is sent `--messages` messages by `--clients` concurrent clients
//! (each send also writes its timeline event), which are then read; the database's size and the
//! send rate (`--probe` concurrent sends, median of `--probes`) are measured fresh, after the
//! fill, and after `gc` (age 0: every read message and the timeline go), with how long `gc`
//! took and the latency of sends made while it ran (its `VACUUM` holds writes).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use anyhow::{Context, bail};
use clap::Args;
use serde::Serialize;
use serde_json::{Value, json};

use troupe::client::{self, Client};
use troupe_api::layout::Layout;

use crate::harness::{median, percentiles, register, scratch_layout, start_daemon};

#[derive(Debug, Args)]
pub struct GcArgs {
    /// Messages sent (and read) before `gc`.
    #[arg(long, default_value_t = 1_000_000)]
    pub messages: usize,
    /// Concurrent clients, each on its own connection, sending to its own recipient.
    #[arg(long, default_value_t = 64)]
    pub clients: usize,
    /// Sends per probe of the send rate (split across the clients).
    #[arg(long, default_value_t = 32_000)]
    pub probe: usize,
    /// Probes at each point; the median is reported.
    #[arg(long, default_value_t = 3)]
    pub probes: usize,
    /// Content size in bytes.
    #[arg(long, default_value_t = 256)]
    pub size: usize,
    /// Send without idempotency keys (by default every send carries one).
    #[arg(long)]
    pub no_keys: bool,
}

/// The database at one point.
#[derive(Debug, Clone, Serialize)]
struct Point {
    /// `page_count × page_size`.
    db_mib: f64,
    /// The files on disk: the database and its WAL.
    file_mib: f64,
    /// Median sends per second of the probes.
    msgs_per_s: f64,
    probes: Vec<f64>,
}

struct Sender {
    client: Arc<Client>,
    from: String,
    to: String,
}

pub async fn run(args: GcArgs, json_out: bool) -> anyhow::Result<()> {
    if args.clients == 0 || args.probes == 0 || args.probe == 0 {
        bail!("--clients, --probe and --probes must be at least 1");
    }
    let (scratch, layout) = scratch_layout("troupe-bench-gc-")?;
    let cwd = scratch.path().display().to_string();
    let (mut daemon, first, _) = start_daemon(&layout).await?;
    let content = "x".repeat(args.size);
    let mut senders = Vec::with_capacity(args.clients);
    for _ in 0..args.clients {
        let c = client::connect(&layout, false).await?;
        let from = register(&c, &cwd).await?;
        let to = register(&c, &cwd).await?;
        senders.push(Sender {
            client: Arc::new(c),
            from,
            to,
        });
    }
    let senders = Arc::new(senders);
    let keys = !args.no_keys;
    let probes = |at: &'static str| {
        let (senders, content) = (senders.clone(), content.clone());
        async move {
            let mut rates = Vec::new();
            for i in 0..args.probes {
                let prefix = format!("{at}{i}-");
                rates.push(send_all(senders.clone(), args.probe, prefix, &content, keys).await?);
            }
            anyhow::Ok(rates)
        }
    };

    let fresh = point(&first, &layout, probes("fresh").await?).await?;
    if !json_out {
        eprintln!("fresh: {fresh:?}");
    }

    // The fill, a tenth at a time (each tenth's rate said as it goes).
    let t = Instant::now();
    let tenth = args.messages.div_ceil(10);
    let mut fill_rates = Vec::new();
    for i in 0..10 {
        let rate = send_all(senders.clone(), tenth, format!("f{i}-"), &content, keys).await?;
        if !json_out {
            eprintln!("fill {}/10: {rate:.0} msgs/s", i + 1);
        }
        fill_rates.push(rate);
    }
    let fill_secs = t.elapsed().as_secs_f64();
    let full = point(&first, &layout, probes("full").await?).await?;
    if !json_out {
        eprintln!("after {} messages: {full:?}", args.messages);
    }
    // Everything read.
    for s in senders.iter() {
        first
            .call("mark_read", json!({ "session_id": s.to }))
            .await?;
    }

    // gc, with a sender timing its sends meanwhile.
    let running = Arc::new(AtomicBool::new(true));
    let watcher = {
        let (c, running) = (senders[0].client.clone(), running.clone());
        let (from, to, content) = (
            senders[0].from.clone(),
            senders[0].to.clone(),
            content.clone(),
        );
        tokio::spawn(async move {
            let mut lat = Vec::new();
            while running.load(Ordering::Relaxed) {
                let s = Instant::now();
                c.call(
                    "send_message",
                    json!({ "from_session_id": from, "to_session_id": to, "content": content }),
                )
                .await?;
                lat.push(s.elapsed());
            }
            anyhow::Ok(lat)
        })
    };
    let t = Instant::now();
    let gc = first.call("gc", json!({ "max_age_days": 0 })).await?;
    let gc_secs = t.elapsed().as_secs_f64();
    running.store(false, Ordering::Relaxed);
    let mut during = watcher.await??;
    let during_max_ms = during.iter().max().map_or(0.0, |d| d.as_secs_f64() * 1e3);
    let during_sends = during.len();
    let (during_p50_us, during_p99_us) = percentiles(&mut during);
    if !json_out {
        eprintln!("gc: {gc_secs:.1} s: {gc}");
    }

    let after = point(&first, &layout, probes("after").await?).await?;
    let _answer_or_hangup = first.call("shutdown_daemon", json!({})).await;
    let _reaped = daemon.0.wait();

    let summary = json!({
        "messages": args.messages,
        "clients": args.clients,
        "content_bytes": args.size,
        "idempotency_keys": !args.no_keys,
        "fill": { "secs": fill_secs, "msgs_per_s_by_tenth": fill_rates },
        "fresh": fresh,
        "after_fill": full,
        "gc": {
            "secs": gc_secs,
            "removed_messages": gc["messages"], "removed_events": gc["events"],
            "vacuumed": gc["vacuumed"],
            "sends_meanwhile": during_sends,
            "send_p50_us": during_p50_us, "send_p99_us": during_p99_us,
            "send_max_ms": during_max_ms,
        },
        "after_gc": after,
    });
    if json_out {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        println!(
            "{} messages ({} B, {} clients): database (page_count × page_size), files on disk (database + WAL), send rate (median of {} probes of {} sends)\n  \
             fresh          {:>9.1} MiB  {:>9.1} MiB  {:>7.0} msgs/s\n  \
             after the fill {:>9.1} MiB  {:>9.1} MiB  {:>7.0} msgs/s  (fill {:.0} s: {:.0} → {:.0} msgs/s first to last tenth)\n  \
             after gc       {:>9.1} MiB  {:>9.1} MiB  {:>7.0} msgs/s\n  \
             gc took {:.1} s (removed {} messages, {} events; vacuumed {}); {} sends meanwhile: p50 {:.0} µs, p99 {:.0} µs, max {:.0} ms",
            args.messages,
            args.size,
            args.clients,
            args.probes,
            args.probe,
            fresh.db_mib,
            fresh.file_mib,
            fresh.msgs_per_s,
            full.db_mib,
            full.file_mib,
            full.msgs_per_s,
            fill_secs,
            fill_rates.first().copied().unwrap_or(0.0),
            fill_rates.last().copied().unwrap_or(0.0),
            after.db_mib,
            after.file_mib,
            after.msgs_per_s,
            gc_secs,
            gc["messages"],
            gc["events"],
            gc["vacuumed"],
            during_sends,
            during_p50_us,
            during_p99_us,
            during_max_ms,
        );
    }
    drop(scratch);
    Ok(())
}

/// Sends `total` messages split across the senders, concurrently; sends per second.
async fn send_all(
    senders: Arc<Vec<Sender>>,
    total: usize,
    prefix: String,
    content: &str,
    keys: bool,
) -> anyhow::Result<f64> {
    let per = total.div_ceil(senders.len());
    let t = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..senders.len() {
        let (senders, prefix, content) = (senders.clone(), prefix.clone(), content.to_string());
        tasks.spawn(async move {
            let s = &senders[i];
            for n in 0..per {
                let key = keys.then(|| format!("{prefix}{n}"));
                s.client
                    .call(
                        "send_message",
                        json!({ "from_session_id": s.from, "to_session_id": s.to,
                                "content": content, "idempotency_key": key }),
                    )
                    .await?;
            }
            anyhow::Ok(())
        });
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    Ok((per * senders.len()) as f64 / t.elapsed().as_secs_f64())
}

/// The database's size now (a dry `gc` reads it) and the files', with the probes' rates.
async fn point(c: &Client, layout: &Layout, probes: Vec<f64>) -> anyhow::Result<Point> {
    let dry: Value = c
        .call("gc", json!({ "dry_run": true, "max_age_days": 36_500 }))
        .await?;
    let db = layout.db_path();
    let file = |p: std::path::PathBuf| std::fs::metadata(p).map_or(0, |m| m.len());
    let mut wal = db.clone().into_os_string();
    wal.push("-wal");
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    Ok(Point {
        db_mib: mib(dry["db_bytes_before"]
            .as_u64()
            .context("no db_bytes_before")?),
        file_mib: mib(file(db) + file(wal.into())),
        msgs_per_s: median(probes.clone()),
        probes,
    })
}
