//! `troupe-dev bench patterns`: the overhead of the pattern layer (seed 002) per hop, excluding
//! the agents' own time. A handoff chain of `--hops` trivial agents (real processes that just call
//! `complete`) and a fan-out of `--advisors` advisors (+ the agent they advise) run in a real
//! daemon. Wall overhead: the pattern run's wall time minus its steps' own run times (from each
//! step's recorded start and end), per hop. CPU: the daemon's CPU time (schedstat, ns) for the
//! pattern run against the same number of plain runs driven by a client, one after the other,
//! or together then one. Medians over fresh daemons.

use std::time::Instant;

use anyhow::{Context, bail};
use clap::Args;
use serde_json::{Value, json};
use troupe::client::Client;

use crate::harness::{cpu_ns, median, register, scratch_layout, start_daemon};

#[derive(Debug, Args)]
pub struct PatternArgs {
    /// Hops of the handoff chain.
    #[arg(long, default_value_t = 10)]
    pub hops: usize,
    /// Advisors of the fan-out.
    #[arg(long, default_value_t = 16)]
    pub advisors: usize,
    /// Independent runs (fresh daemon each); medians are reported.
    #[arg(long, default_value_t = 5)]
    pub runs: usize,
}

/// Wall ms, daemon CPU ms and the agents' own ms (the critical path of its runs) of one
/// measured piece.
#[derive(Debug, Clone, Copy)]
struct Cost {
    wall_ms: f64,
    cpu_ms: f64,
    agents_ms: f64,
}

pub async fn run(args: PatternArgs, json_out: bool) -> anyhow::Result<()> {
    if args.hops == 0 || args.advisors == 0 || args.runs == 0 {
        bail!("--hops, --advisors and --runs must be at least 1");
    }
    let mut rows = Vec::new();
    for i in 0..args.runs {
        let row = one_run(&args).await?;
        eprintln!("run {}: {row:?}", i + 1);
        rows.push(row);
    }
    let med = |f: &dyn Fn(&[Cost; 4]) -> f64| median(rows.iter().map(f).collect());
    let hops = args.hops as f64;
    let fan = (args.advisors + 1) as f64;
    let figures = json!({
        "hops": args.hops,
        "advisors": args.advisors,
        "runs": args.runs,
        "chain_wall_ms": med(&|r: &[Cost; 4]| r[1].wall_ms),
        "plain_sequence_wall_ms": med(&|r: &[Cost; 4]| r[0].wall_ms),
        "chain_agents_ms": med(&|r: &[Cost; 4]| r[1].agents_ms),
        "chain_overhead_wall_ms_per_hop": med(&|r: &[Cost; 4]| (r[1].wall_ms - r[1].agents_ms) / hops),
        "chain_overhead_cpu_ms_per_hop": med(&|r: &[Cost; 4]| (r[1].cpu_ms - r[0].cpu_ms) / hops),
        "chain_cpu_ratio_to_plain": med(&|r: &[Cost; 4]| r[1].cpu_ms / r[0].cpu_ms.max(0.001)),
        "fanout_wall_ms": med(&|r: &[Cost; 4]| r[3].wall_ms),
        "plain_parallel_wall_ms": med(&|r: &[Cost; 4]| r[2].wall_ms),
        "fanout_agents_ms": med(&|r: &[Cost; 4]| r[3].agents_ms),
        "fanout_overhead_wall_ms_per_run": med(&|r: &[Cost; 4]| (r[3].wall_ms - r[3].agents_ms) / fan),
        "fanout_overhead_cpu_ms_per_run": med(&|r: &[Cost; 4]| (r[3].cpu_ms - r[2].cpu_ms) / fan),
        "fanout_cpu_ratio_to_plain": med(&|r: &[Cost; 4]| r[3].cpu_ms / r[2].cpu_ms.max(0.001)),
    });
    if json_out {
        println!("{}", serde_json::to_string_pretty(&figures)?);
        return Ok(());
    }
    let f = |k: &str| figures[k].as_f64().unwrap_or(0.0);
    println!(
        "medians of {} runs (trivial process agents; the difference is the pattern layer):",
        args.runs
    );
    println!(
        "  {}-hop handoff chain   {:>8.1} ms wall   vs {} plain runs in sequence {:>8.1} ms",
        args.hops,
        f("chain_wall_ms"),
        args.hops,
        f("plain_sequence_wall_ms")
    );
    println!(
        "    agents' own time (sum of the steps' runs) {:.1} ms",
        f("chain_agents_ms")
    );
    println!(
        "    per hop: {:.2} ms wall outside the agents; daemon CPU {:+.3} ms vs a plain run (chain/plain daemon CPU {:.2}x)",
        f("chain_overhead_wall_ms_per_hop"),
        f("chain_overhead_cpu_ms_per_hop"),
        f("chain_cpu_ratio_to_plain")
    );
    println!(
        "  {}-advisor fan-out     {:>8.1} ms wall   vs {} plain runs together, then 1 {:>8.1} ms",
        args.advisors,
        f("fanout_wall_ms"),
        args.advisors,
        f("plain_parallel_wall_ms")
    );
    println!(
        "    agents' own time (slowest advisor + the lead) {:.1} ms",
        f("fanout_agents_ms")
    );
    println!(
        "    per run: {:.2} ms wall outside the agents; daemon CPU {:+.3} ms vs a plain run (fan-out/plain daemon CPU {:.2}x)",
        f("fanout_overhead_wall_ms_per_run"),
        f("fanout_overhead_cpu_ms_per_run"),
        f("fanout_cpu_ratio_to_plain")
    );
    Ok(())
}

/// One fresh daemon: plain sequence, chain, plain fan, pattern fan.
async fn one_run(args: &PatternArgs) -> anyhow::Result<[Cost; 4]> {
    let (scratch, layout) = scratch_layout("troupe-bench-patterns-")?;
    let project = scratch.path().join("project");
    std::fs::create_dir_all(&project)?;
    let (daemon, c, _) = start_daemon(&layout).await?;
    let pid = daemon.0.id();
    let exe = crate::troupe_exe()?.display().to_string();
    let trivial = |name: String, extra: Value| {
        let mut def =
            json!({ "name": name, "command": [exe, "call", "complete", "{\"output\":\"ok\"}"] });
        if let (Some(d), Some(e)) = (def.as_object_mut(), extra.as_object()) {
            d.extend(e.clone());
        }
        def
    };
    let define = |def: Value| {
        let c = &c;
        async move {
            c.call("create_agent_definition", json!({ "definition": def }))
                .await
        }
    };
    define(trivial("plain".into(), json!({}))).await?;
    for i in (0..args.hops).rev() {
        let extra = if i + 1 < args.hops {
            json!({ "handoff": format!("hop{}", i + 1) })
        } else {
            json!({})
        };
        define(trivial(format!("hop{i}"), extra)).await?;
    }
    let advisors: Vec<String> = (0..args.advisors).map(|i| format!("adv{i}")).collect();
    for a in &advisors {
        define(trivial(a.clone(), json!({}))).await?;
    }
    define(trivial("lead".into(), json!({ "advisors": advisors }))).await?;
    let me = register(&c, &project.display().to_string()).await?;

    // Warm up: the first process spawns pay for the page cache.
    let ended = Ended::default();
    finish(&c, &me, &start(&c, &me, "plain").await?, &ended).await?;

    let plain_sequence = measure(pid, || async {
        for _ in 0..args.hops {
            let run = start(&c, &me, "plain").await?;
            finish(&c, &me, &run, &ended).await?;
        }
        Ok(0.0)
    })
    .await?;
    let mut chain_root = String::new();
    let mut chain = measure(pid, || async {
        chain_root = start(&c, &me, "hop0").await?;
        finish(&c, &me, &chain_root, &ended).await?;
        Ok(0.0)
    })
    .await?;
    for (run, _) in steps(&c, &chain_root).await? {
        chain.agents_ms += own_ms(&c, &run).await?;
    }
    let plain_fan = measure(pid, || async {
        let mut runs = Vec::new();
        for _ in 0..args.advisors {
            runs.push(start(&c, &me, "plain").await?);
        }
        for run in runs {
            finish(&c, &me, &run, &ended).await?;
        }
        let run = start(&c, &me, "plain").await?;
        finish(&c, &me, &run, &ended).await?;
        Ok(0.0)
    })
    .await?;
    let mut fan_root = String::new();
    let mut fan = measure(pid, || async {
        fan_root = start(&c, &me, "lead").await?;
        finish(&c, &me, &fan_root, &ended).await?;
        Ok(0.0)
    })
    .await?;
    // The critical path: the slowest advisor, then the lead.
    let (mut slowest, mut lead) = (0.0f64, 0.0);
    for (run, trigger) in steps(&c, &fan_root).await? {
        let own = own_ms(&c, &run).await?;
        if trigger == "advisor" {
            slowest = slowest.max(own);
        } else {
            lead += own;
        }
    }
    fan.agents_ms = slowest + lead;
    drop(daemon);
    Ok([plain_sequence, chain, plain_fan, fan])
}

async fn measure<F, Fut>(pid: u32, f: F) -> anyhow::Result<Cost>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<f64>>,
{
    let cpu = cpu_ns(pid)?;
    let started = Instant::now();
    let agents_ms = f().await?;
    Ok(Cost {
        wall_ms: started.elapsed().as_secs_f64() * 1000.0,
        cpu_ms: (cpu_ns(pid)? - cpu) as f64 / 1e6,
        agents_ms,
    })
}

/// Milliseconds of a stored timestamp (`2026-11-24T14:35:26.752Z`) since the day began.
fn ms_of_day(t: &str) -> Option<f64> {
    let time = t.split_once('T')?.1.trim_end_matches('Z');
    let mut parts = time.split(':');
    let h: f64 = parts.next()?.parse().ok()?;
    let m: f64 = parts.next()?.parse().ok()?;
    let s: f64 = parts.next()?.parse().ok()?;
    Some(((h * 60.0 + m) * 60.0 + s) * 1000.0)
}

/// A run's own time: from its recorded start to its end.
async fn own_ms(c: &Client, run: &str) -> anyhow::Result<f64> {
    let r = c.call("get_agent_result", json!({ "run_id": run })).await?;
    let at = |k: &str| {
        r["run"][k]
            .as_str()
            .and_then(ms_of_day)
            .context("no timestamp")
    };
    let mut d = at("completed_at")? - at("started_at")?;
    if d < 0.0 {
        d += 86_400_000.0; // across midnight
    }
    Ok(d)
}

/// The pattern run's steps (not the root itself).
async fn steps(c: &Client, root: &str) -> anyhow::Result<Vec<(String, String)>> {
    let tree = c.call("get_run_tree", json!({ "run_id": root })).await?;
    Ok(tree["runs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["run_id"] != root)
        .map(|r| {
            (
                r["run_id"].as_str().unwrap_or_default().to_string(),
                r["trigger"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect())
}

async fn start(c: &Client, me: &str, agent: &str) -> anyhow::Result<String> {
    let r = c
        .call(
            "start_agent",
            json!({ "agent": agent, "prompt": "go", "parent_session_id": me }),
        )
        .await?;
    Ok(r["run_id"].as_str().context("no run_id")?.to_string())
}

/// Waits for the run's end, as its parent hears of it: the daemon's message to the parent
/// session (a long poll, so the wait costs the daemon nothing while it lasts). Messages about
/// other runs are kept in `ended` for their own wait.
async fn finish(c: &Client, me: &str, run: &str, ended: &Ended) -> anyhow::Result<()> {
    loop {
        if ended
            .lock()
            .map_err(|_| anyhow::anyhow!("poisoned"))?
            .remove(run)
        {
            let r = c.call("get_agent_result", json!({ "run_id": run })).await?;
            if r["run"]["status"] != "success" {
                bail!(
                    "bench run {run} ended {}: {}",
                    r["run"]["status"],
                    r["run"]["error"]
                );
            }
            return Ok(());
        }
        let got = c
            .call(
                "poll_messages",
                json!({ "session_id": me, "wait_ms": 10_000 }),
            )
            .await?;
        let mut last = None;
        for m in got["messages"].as_array().into_iter().flatten() {
            last = m["seq"].as_i64();
            // "agent <name> (<run id>) finished …"
            if let Some(id) = m["content"]
                .as_str()
                .and_then(|t| t.split_once('(').and_then(|(_, r)| r.split_once(')')))
                .map(|(id, _)| id.to_string())
            {
                ended
                    .lock()
                    .map_err(|_| anyhow::anyhow!("poisoned"))?
                    .insert(id);
            }
        }
        if let Some(seq) = last {
            c.call("mark_read", json!({ "session_id": me, "up_to_seq": seq }))
                .await?;
        }
    }
}

/// Runs whose end was heard but not yet waited for.
type Ended = std::sync::Mutex<std::collections::HashSet<String>>;
