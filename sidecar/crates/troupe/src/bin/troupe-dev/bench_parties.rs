//! `troupe-dev bench parties`: one party of many roles and members (trivial real processes that
//! just call `complete`) run by a real daemon — scheduling overhead per member, wall time
//! against the sum of member run times, daemon CPU and memory — plus the pure engine's cost per
//! scheduling step, measured in-process. Medians over several runs.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};
use troupe_engine::{Action, Input, Party, PartyDefinition};

use clap::Args;

use crate::harness::{cpu_ns, cpu_ticks, median, start_daemon, thread_cpu_ns, ticks_per_second};

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

/// The benchmark party: `layers` layers of roles; each role waits for two of the layer before.
fn definition(role_count: usize, per_role: u32, layers: usize) -> Value {
    let per_layer = role_count.div_ceil(layers.max(1));
    let mut roles = serde_json::Map::new();
    let mut flow = serde_json::Map::new();
    for r in 0..role_count {
        let (layer, slot) = (r / per_layer, r % per_layer);
        let name = format!("r{r}");
        roles.insert(
            name.clone(),
            json!({ "agent": "trivial", "count": per_role }),
        );
        if layer > 0 {
            let prev = (layer - 1) * per_layer;
            let deps: Vec<String> = [slot, (slot + 1) % per_layer]
                .iter()
                .map(|s| format!("r{}", prev + s))
                .filter(|d| d != &name)
                .collect();
            flow.insert(name, json!(deps));
        }
    }
    json!({ "name": "bench", "roles": roles, "flow": flow, "recovery": { "on_crash": "abort" } })
}

/// The engine alone: whole runs of the party with every member completing at once, repeated
/// for at least 100 ms; returns µs per step (launch included) and steps per run.
fn engine_cost(def: &Value) -> anyhow::Result<(f64, usize)> {
    let def: PartyDefinition = serde_json::from_value(def.clone())?;
    def.validate(|_| true).map_err(|e| anyhow::anyhow!("{e}"))?;
    let started = Instant::now();
    let (mut steps, mut total) = (0, 0);
    while total == 0 || started.elapsed() < Duration::from_millis(100) {
        let mut party = Party::new(def.clone());
        steps = 1;
        let mut queue = party
            .step(Input::Launch, 0)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        while let Some(action) = queue.pop() {
            if let Action::Spawn { role, index, .. } = action {
                steps += 1;
                let more = party
                    .step(Input::Completed { role, index }, steps as u64)
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
                queue.extend(more);
            }
        }
        if !party.status.is_over() {
            bail!("the engine benchmark's party did not finish");
        }
        total += steps;
    }
    Ok((started.elapsed().as_secs_f64() * 1e6 / total as f64, steps))
}

pub async fn run(args: PartiesArgs, json_out: bool) -> anyhow::Result<()> {
    if args.roles == 0 || args.per_role == 0 || args.runs == 0 || args.sizes.contains(&0) {
        bail!("--roles, --per-role, --runs and --sizes must be at least 1");
    }
    if args.sizes.is_empty() {
        let summary = measure(&args, args.roles, json_out).await?;
        return report(&args, args.roles, &summary, json_out);
    }
    // The curve: one party size after the other.
    let mut curve = Vec::new();
    for size in &args.sizes {
        let roles = size.div_ceil(args.per_role as usize);
        let summary = measure(&args, roles, json_out).await?;
        if !json_out {
            report(&args, roles, &summary, false)?;
        }
        curve.push(json!({ "roles": roles, "medians": summary }));
    }
    if json_out {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({ "runs": args.runs, "curve": curve }))?
        );
        return Ok(());
    }
    println!(
        "\n  members  roles  daemon CPU/member  floor (spawn)  ×floor  engine/step  wall     decided → running  peak RSS"
    );
    for point in &curve {
        let m = &point["medians"];
        let f = |k: &str| m[k].as_f64().unwrap_or(f64::NAN);
        println!(
            "  {:>7}  {:>5}  {:>12.3} ms  {:>10.3} ms  {:>5.2}  {:>8.2} µs  {:>6.2} s  {:>9.2} ms       {:>6.1} MiB",
            f("members"),
            point["roles"],
            f("daemon_cpu_ms_per_member"),
            f("floor_spawn_cpu_ms"),
            f("cpu_over_floor"),
            f("engine_us_per_step"),
            f("wall_s"),
            f("spawn_latency_ms"),
            f("daemon_peak_rss_mib"),
        );
    }
    if let Some(line) = crate::harness::link_order_coverage() {
        println!("  {line}");
    }
    Ok(())
}

/// Medians of `args.runs` runs of a party of `roles` roles.
async fn measure(
    args: &PartiesArgs,
    roles: usize,
    quiet: bool,
) -> anyhow::Result<serde_json::Map<String, Value>> {
    let def = definition(roles, args.per_role, args.layers);
    let mut rows: Vec<BTreeMap<&str, f64>> = Vec::new();
    for i in 0..args.runs {
        let row = if args.engine_only {
            let (engine_us, steps) = engine_cost(&def)?;
            BTreeMap::from([
                ("members", steps.saturating_sub(1) as f64),
                ("engine_us_per_step", engine_us),
            ])
        } else {
            one_run(&def)
                .await
                .with_context(|| format!("{roles} roles, run {}", i + 1))?
        };
        if !quiet {
            eprintln!("run {}: {row:?}", i + 1);
        }
        rows.push(row);
    }
    let med = |k: &str| median(rows.iter().filter_map(|r| r.get(k).copied()).collect());
    let keys = [
        "members",
        "wall_s",
        "sum_member_run_s",
        "mean_member_run_ms",
        "parallelism",
        "spawn_latency_ms",
        "daemon_cpu_ms_per_member",
        "floor_spawn_cpu_ms",
        "cpu_over_floor",
        "writer_cpu_ms_per_member",
        "workers_cpu_ms_per_member",
        "call_cpu_ms",
        "engine_us_per_step",
        "daemon_peak_rss_mib",
    ];
    Ok(keys
        .iter()
        .filter(|k| rows.iter().any(|r| r.contains_key(**k)))
        .map(|k| (k.to_string(), json!(med(k))))
        .collect())
}

fn report(
    args: &PartiesArgs,
    roles: usize,
    summary: &serde_json::Map<String, Value>,
    json_out: bool,
) -> anyhow::Result<()> {
    if json_out {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({ "runs": args.runs, "medians": summary }))?
        );
        return Ok(());
    }
    let med = |k: &str| summary.get(k).and_then(Value::as_f64).unwrap_or(f64::NAN);
    println!(
        "medians of {} runs: {} roles x {} = {} members in {} layers",
        args.runs,
        roles,
        args.per_role,
        med("members"),
        args.layers
    );
    if !args.engine_only {
        println!("  wall time               {:>9.2} s", med("wall_s"));
        println!(
            "  sum of member run times {:>9.2} s (mean {:.1} ms per member)",
            med("sum_member_run_s"),
            med("mean_member_run_ms")
        );
        println!("  sum / wall              {:>9.2}x", med("parallelism"));
        println!(
            "  decided → running       {:>9.2} ms per member (median: the scheduler's decision to the process running)",
            med("spawn_latency_ms")
        );
        println!(
            "  daemon CPU              {:>9.2} ms per member",
            med("daemon_cpu_ms_per_member")
        );
        println!(
            "  floor: bare spawn+wait  {:>9.3} ms CPU per member (same command, same run) → {:.2}× the floor",
            med("floor_spawn_cpu_ms"),
            med("cpu_over_floor")
        );
        println!(
            "    of the daemon's CPU   {:>9.3} ms on the store's writer thread, {:.3} ms on the async workers (per member)",
            med("writer_cpu_ms_per_member"),
            med("workers_cpu_ms_per_member")
        );
        println!(
            "  one call alone          {:>9.3} ms daemon CPU per authenticated call on a fresh connection (as a member's `complete` makes; same run) → {:.2}× the floor",
            med("call_cpu_ms"),
            med("call_cpu_ms") / med("floor_spawn_cpu_ms")
        );
    }
    println!(
        "  engine alone            {:>9.2} µs per scheduling step",
        med("engine_us_per_step")
    );
    if !args.engine_only {
        println!(
            "  daemon peak RSS         {:>9.2} MiB",
            med("daemon_peak_rss_mib")
        );
    }
    Ok(())
}

async fn one_run(def: &Value) -> anyhow::Result<BTreeMap<&'static str, f64>> {
    let (scratch, layout) = crate::harness::scratch_layout("troupe-bench-party-")?;
    let project = scratch.path().join("project");
    std::fs::create_dir_all(&project)?;
    let (mut daemon, c, _) = start_daemon(&layout).await?;
    let pid = daemon.0.id();
    let exe = crate::troupe_exe()?.display().to_string();
    c.call(
        "create_agent_definition",
        json!({ "definition": { "name": "trivial", "command": [exe, "call", "complete", "{\"output\":\"ok\"}"] } }),
    )
    .await?;
    c.call("create_party_definition", json!({ "definition": def }))
        .await?;
    let threads_before = thread_cpu_ns(pid)?;
    let cpu_before = cpu_ticks(pid)?;
    let launched = c
        .call(
            "launch_party",
            json!({ "name": "bench", "cwd": project.display().to_string() }),
        )
        .await?;
    let party = launched["party_id"]
        .as_str()
        .context("no party_id")?
        .to_string();
    // Poll the cheap summary (the full status reads every member's run and session).
    loop {
        let s = c
            .call(
                "list_parties",
                json!({ "cwd": project.display().to_string() }),
            )
            .await?;
        let p = &s["parties"][0];
        match p["status"].as_str() {
            Some("completed") => break,
            Some("running" | "pending") => tokio::time::sleep(Duration::from_millis(100)).await,
            other => bail!("the bench party ended {other:?}: {}", p["status_reason"]),
        }
    }
    let cpu_ms = (cpu_ticks(pid)? - cpu_before) as f64 * 1000.0 / ticks_per_second();
    let threads = thread_cpu_ns(pid)?;
    let spent = |name: &str| {
        let ns = |m: &BTreeMap<String, u64>| m.get(name).copied().unwrap_or(0);
        ns(&threads).saturating_sub(ns(&threads_before)) as f64 / 1e6
    };
    let (writer_ms, workers_ms) = (spent("troupe-store-wr"), spent("tokio-rt-worker"));
    let peak = std::fs::read_to_string(format!("/proc/{pid}/status"))?
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .context("no VmHWM")?;
    let status = c
        .call("get_party_status", json!({ "party_id": party }))
        .await?;
    let runs_json = c.call("list_agents", json!({ "party_id": party })).await?;
    let runs = runs_json["runs"].as_array().cloned().unwrap_or_default();
    let call_ms = call_cost(&layout, pid, &project).await?;
    let _answer_or_hangup = c.call("shutdown_daemon", json!({})).await;
    let _reaped = daemon.0.wait();

    let members = status["members"].as_array().context("no members")?;
    let decided: BTreeMap<String, f64> = members
        .iter()
        .filter_map(|m| {
            Some((
                m["run_id"].as_str()?.to_string(),
                m["started_at_ms"].as_f64()?,
            ))
        })
        .collect();
    let mut spawn_latency = Vec::new();
    let mut run_ms = Vec::new();
    let (mut first, mut last) = (f64::MAX, 0.0f64);
    for r in &runs {
        let (Some(started), Some(done)) = (
            r["started_at"].as_str().and_then(epoch_ms),
            r["completed_at"].as_str().and_then(epoch_ms),
        ) else {
            continue;
        };
        if let Some(decision) = decided.get(r["run_id"].as_str().unwrap_or("")) {
            spawn_latency.push(started - decision);
        }
        run_ms.push(done - started);
        first = first.min(started);
        last = last.max(done);
    }
    let sum: f64 = run_ms.iter().sum();
    let (engine_us, _) = engine_cost(def)?;
    let n = members.len() as f64;
    let floor = spawn_floor(&exe, scratch.path(), members.len().clamp(50, 300)).await?;
    Ok(BTreeMap::from([
        ("members", n),
        ("wall_s", (last - first) / 1000.0),
        ("sum_member_run_s", sum / 1000.0),
        ("mean_member_run_ms", sum / n),
        ("parallelism", sum / (last - first).max(1.0)),
        ("spawn_latency_ms", median(spawn_latency)),
        ("daemon_cpu_ms_per_member", cpu_ms / n),
        ("floor_spawn_cpu_ms", floor),
        ("cpu_over_floor", cpu_ms / n / floor.max(1e-6)),
        ("writer_cpu_ms_per_member", writer_ms / n),
        ("workers_cpu_ms_per_member", workers_ms / n),
        ("call_cpu_ms", call_ms),
        ("engine_us_per_step", engine_us),
        ("daemon_peak_rss_mib", peak / 1024.0),
    ]))
}

/// The floor: this process's CPU (ms) per bare spawn-and-wait of the same trivial member
/// command, the way the daemon starts one (tokio, a process group of its own), `count` times.
/// The command finds no daemon and ends at once; only the spawner's own CPU is counted.
async fn spawn_floor(exe: &str, scratch: &std::path::Path, count: usize) -> anyhow::Result<f64> {
    // In nanoseconds (the scheduler's clock of each thread), not in 10 ms ticks: 300 spawns of
    // ~0.2 ms are 6 ticks, and the floor moved by a sixth from one run to the next.
    let before = cpu_ns(std::process::id())?;
    for _ in 0..count {
        let status = tokio::process::Command::new(exe)
            .arg("--data-dir")
            .arg(scratch.join("no-daemon"))
            .args(["call", "complete", "{\"output\":\"ok\"}"])
            .env("TROUPE_NO_AUTOSTART", "1")
            .env("TROUPE_RUNTIME_DIR", scratch.join("no-daemon"))
            .env("TROUPE_LOG", "off")
            .current_dir(scratch)
            .process_group(0)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .await?;
        let _ended_either_way = status;
    }
    Ok(cpu_ns(std::process::id())?.saturating_sub(before) as f64 / 1e6 / count as f64)
}

/// The daemon's CPU (ms) per call of a light operation (the project's parties: one indexed
/// read), each on a fresh connection in one HTTP request, as a member's `troupe call complete`
/// makes it: what the door alone costs a member (connection, request, credential, dispatch,
/// answer).
async fn call_cost(
    layout: &troupe_api::layout::Layout,
    pid: u32,
    project: &std::path::Path,
) -> anyhow::Result<f64> {
    const CALLS: usize = 300;
    let args = json!({ "cwd": project.display().to_string() });
    let before = cpu_ns(pid)?;
    for _ in 0..CALLS {
        troupe::client::call_once(layout, false, "list_parties", args.clone()).await?;
    }
    Ok(cpu_ns(pid)?.saturating_sub(before) as f64 / 1e6 / CALLS as f64)
}

/// Milliseconds since the epoch of a UTC timestamp as the store writes them
/// (`2026-11-22T16:05:30.123Z`): the dashboard's parser (`troupe::ui::parse_ms`).
fn epoch_ms(ts: &str) -> Option<f64> {
    troupe::ui::parse_ms(ts).map(|ms| ms as f64)
}

#[cfg(test)]
mod tests {
    #[test]
    fn epoch_ms_parses_store_timestamps() {
        assert_eq!(super::epoch_ms("1970-01-01T00:00:01.500Z"), Some(1500.0));
        assert_eq!(
            super::epoch_ms("2026-11-22T16:05:30.123Z"),
            Some(1_795_363_530_123.0)
        );
    }
}
