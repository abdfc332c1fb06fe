//! `troupe-dev bench remote`: remote workers over NATS JetStream, with a real `nats-server` (from
//! PATH or `/usr/sbin`) on loopback, a hub (`troupe serve` with `TROUPE_NATS`) and two
//! `troupe worker`s. Two figures, medians:
//! - dispatch: `start_agent` of a remote member → the run claimed by a worker (`remote_started`
//!   on the timeline) and → its member's one call recorded (its run finished), against the same
//!   member run on the hub's machine (the floor);
//! - calls per second into the hub from 8 remote members at once, each making `--calls`
//!   `troupe call heartbeat`s (a durable write each), against the same 8 members run on the hub's
//!   machine (the floor: the same calls without NATS in between).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use serde_json::{Value, json};

use crate::harness::{median, scratch_layout, start_daemon_with};

#[derive(Debug, Args)]
pub struct RemoteArgs {
    /// Dispatches measured (after 2 warm-up ones).
    #[arg(long, default_value_t = 20)]
    pub runs: usize,
    /// Calls each of the 8 members makes.
    #[arg(long, default_value_t = 25)]
    pub calls: usize,
}

/// A child process killed on drop.
struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn nats_server() -> anyhow::Result<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin")])
        .map(|d| d.join("nats-server"))
        .find(|p| p.is_file())
        .context("nats-server is not installed (Debian: apt install nats-server)")
}

fn start_nats(dir: &Path) -> anyhow::Result<(Kill, String)> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let child = Command::new(nats_server()?)
        .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let guard = Kill(child);
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            bail!("nats-server did not start");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok((guard, format!("nats://127.0.0.1:{port}")))
}

fn start_worker(dir: &Path, url: &str, name: &str) -> anyhow::Result<Kill> {
    let child = Command::new(crate::troupe_exe()?)
        .arg("--data-dir")
        .arg(dir)
        .args([
            "worker", "--nats", url, "--pool", "bench", "--name", name, "--slots", "8",
        ])
        .env("TROUPE_RUNTIME_DIR", dir.join("run"))
        .env("TROUPE_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    Ok(Kill(child))
}

async fn run_end(c: &troupe::client::Client, run: &str) -> anyhow::Result<Value> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let r = c.call("get_agent_result", json!({ "run_id": run })).await?;
        let status = r["run"]["status"].as_str().unwrap_or_default().to_string();
        if status != "running" && status != "pending" {
            return Ok(r);
        }
        if Instant::now() > deadline {
            bail!("run {run} did not end within 120 s");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

pub async fn run(args: RemoteArgs, json_out: bool) -> anyhow::Result<()> {
    if args.runs == 0 || args.calls == 0 {
        bail!("--runs and --calls must be at least 1");
    }
    let (scratch, layout) = scratch_layout("troupe-bench-remote-")?;
    let (_nats, url) = start_nats(&scratch.path().join("nats"))?;
    let (_hub, c, _) = start_daemon_with(&layout, &[("TROUPE_NATS", &url)]).await?;
    let _w1 = start_worker(&scratch.path().join("w1"), &url, "w1")?;
    let _w2 = start_worker(&scratch.path().join("w2"), &url, "w2")?;
    let project = scratch.path().join("project");
    std::fs::create_dir_all(&project)?;
    for cmd in [
        vec!["init", "-q"],
        vec![
            "-c",
            "user.name=b",
            "-c",
            "user.email=b@b",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "init",
        ],
    ] {
        if !Command::new("git")
            .args(&cmd)
            .current_dir(&project)
            .status()?
            .success()
        {
            bail!("git {cmd:?} failed");
        }
    }
    let project = std::fs::canonicalize(&project)?.display().to_string();
    let parent = c
        .call(
            "register_session",
            json!({ "cli": "bench", "cwd": project }),
        )
        .await?["session_id"]
        .as_str()
        .context("no session")?
        .to_string();
    let calls = format!(
        "i=0; while [ $i -lt {} ]; do troupe call heartbeat \"{{\\\"session_id\\\":\\\"$TROUPE_SESSION_ID\\\"}}\" >/dev/null || exit 1; i=$((i+1)); done; troupe call complete '{{\"output\":\"done\"}}' >/dev/null",
        args.calls
    );
    let first_call = "troupe call complete '{\"output\":\"ran\"}' >/dev/null";
    for (name, pool, script) in [
        ("remote-one", Some("bench"), first_call.to_string()),
        ("local-one", None, first_call.to_string()),
        ("remote-calls", Some("bench"), calls.clone()),
        ("local-calls", None, calls),
    ] {
        let mut def = json!({ "name": name, "command": ["sh", "-c", script],
                              "isolation": "clone", "timeout_secs": 300 });
        if let Some(p) = pool {
            def["pool"] = json!(p);
        }
        c.call("create_agent_definition", json!({ "definition": def }))
            .await?;
    }

    // Dispatch: start → claimed, start → the member's call (its `complete`) recorded; the
    // same member run here is the floor.
    let (mut claimed, mut ran, mut floor) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..args.runs + 2 {
        for agent in ["remote-one", "local-one"] {
            let t0 = Instant::now();
            let started = c
                .call(
                    "start_agent",
                    json!({ "agent": agent, "prompt": "go", "parent_session_id": parent }),
                )
                .await?;
            let session = started["session_id"]
                .as_str()
                .context("no session")?
                .to_string();
            let run = started["run_id"].as_str().context("no run")?.to_string();
            let mut seen_claim = None;
            let seen_call = loop {
                let e = c
                    .call(
                        "list_events",
                        json!({ "session_id": session, "limit": 100 }),
                    )
                    .await?;
                let kinds: Vec<&str> = e["events"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|e| e["kind"].as_str())
                    .collect();
                if seen_claim.is_none() && kinds.contains(&"remote_started") {
                    seen_claim = Some(t0.elapsed());
                }
                if kinds.contains(&"agent_run_finished") {
                    break t0.elapsed();
                }
                if t0.elapsed() > Duration::from_secs(60) {
                    bail!("dispatch {i} of {agent}: the member did not run within 60 s");
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            };
            run_end(&c, &run).await?;
            if i < 2 {
                continue;
            }
            let ms = |d: Duration| d.as_secs_f64() * 1000.0;
            if agent == "local-one" {
                floor.push(ms(seen_call));
            } else {
                claimed.push(ms(seen_claim.unwrap_or(seen_call)));
                ran.push(ms(seen_call));
            }
        }
    }

    // Calls per second from 8 members at once, remote then local.
    let rate = |agent: &'static str| {
        let (c, parent) = (&c, parent.clone());
        async move {
            let t0 = Instant::now();
            let mut runs = Vec::new();
            for _ in 0..8 {
                let r = c
                    .call(
                        "start_agent",
                        json!({ "agent": agent, "prompt": "go", "parent_session_id": parent }),
                    )
                    .await?;
                runs.push(r["run_id"].as_str().context("no run")?.to_string());
            }
            for run in &runs {
                let r = run_end(c, run).await?;
                if r["run"]["status"] != "success" {
                    bail!("{agent} run ended {}", r["run"]["status"]);
                }
            }
            anyhow::Ok((8 * (args.calls + 1)) as f64 / t0.elapsed().as_secs_f64())
        }
    };
    let remote_rate = rate("remote-calls").await?;
    let local_rate = rate("local-calls").await?;

    let summary = json!({
        "runs": args.runs, "calls_per_member": args.calls,
        "dispatch_to_claimed_ms": median(claimed.clone()),
        "dispatch_to_member_call_ms": median(ran.clone()),
        "local_start_to_member_call_ms": median(floor.clone()),
        "dispatch_ratio_to_local": median(ran.clone()) / median(floor.clone()),
        "remote_calls_per_s_8_members": remote_rate,
        "local_calls_per_s_8_members": local_rate,
        "remote_to_local_ratio": remote_rate / local_rate,
    });
    if json_out {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        println!(
            "remote workers over NATS ({} dispatches; 8 members × {} calls):\n  \
             start_agent → claimed by a worker     median {:.1} ms\n  \
             start_agent → the member's call in     median {:.1} ms  (the same member here: {:.1} ms)\n  \
             calls/s into the hub, 8 remote members {remote_rate:.0}  (the same 8 local: {local_rate:.0}, ×{:.2})",
            args.runs,
            args.calls,
            median(claimed),
            median(ran),
            median(floor),
            remote_rate / local_rate
        );
    }
    Ok(())
}
