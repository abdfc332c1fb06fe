//! `troupe-dev bench acp-door`: `troupe acp` driven over stdio as an ACP editor would (raw
//! newline-delimited JSON-RPC). Two figures, each beside a floor measured in the same run:
//! - prompt → first `session/update` for a party of one process member (`/party`), against the
//!   floor of a plain `launch_party` call over JSON-RPC (what the door does before it speaks);
//! - the permission round trip: a worker's `request_permission` → the editor gets
//!   `session/request_permission` → answers at once → the worker's call returns (the time the
//!   editor held it subtracted), against the floor of the same request decided over JSON-RPC
//!   (`subscribe_approvals` → `decide_approval`).

use std::time::{Duration, Instant};

use crate::bench_agents::StdioPeer;
use crate::harness::{percentiles, scratch_layout, start_daemon};
use anyhow::{Context, bail};
use clap::Args;
use serde_json::{Value, json};

#[derive(Debug, Args)]
pub struct AcpDoorArgs {
    /// Prompts measured (after 3 warm-up ones).
    #[arg(long, default_value_t = 30)]
    pub prompts: usize,
    /// Permission round trips measured (after 5 warm-up ones).
    #[arg(long, default_value_t = 100)]
    pub asks: usize,
}

/// `troupe acp` on a child's stdio, numbering its requests.
struct Editor {
    peer: StdioPeer,
    next: u64,
}

impl Editor {
    async fn send(&mut self, msg: &Value) -> anyhow::Result<()> {
        self.peer.send(msg).await
    }

    async fn recv(&mut self) -> anyhow::Result<Value> {
        self.peer.recv().await
    }

    /// Sends a request; its id.
    async fn request(&mut self, method: &str, params: Value) -> anyhow::Result<u64> {
        self.next += 1;
        let id = self.next;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await?;
        Ok(id)
    }

    async fn answer(&mut self, id: u64) -> anyhow::Result<Value> {
        self.peer.answer(id, "request").await
    }
}

pub async fn run(args: AcpDoorArgs, json_out: bool) -> anyhow::Result<()> {
    if args.prompts == 0 || args.asks == 0 {
        bail!("--prompts and --asks must be at least 1");
    }
    let (scratch, layout) = scratch_layout("troupe-bench-acp-door-")?;
    let project = scratch.path().join("project");
    std::fs::create_dir_all(&project)?;
    let git = std::process::Command::new("git")
        .args(["init", "-q"])
        .current_dir(&project)
        .status()?;
    if !git.success() {
        bail!("git init failed");
    }
    let project = std::fs::canonicalize(&project)?.display().to_string();
    let (_daemon, c, _) = start_daemon(&layout).await?;
    c.call(
        "create_agent_definition",
        json!({ "definition": { "name": "bench-waiter", "runner": "process",
                                "command": ["sleep", "600"], "isolation": "none",
                                "timeout_secs": 600 } }),
    )
    .await?;
    c.call(
        "create_party_definition",
        json!({ "definition": { "name": "bench-door",
                                "roles": { "member": { "agent": "bench-waiter" } } } }),
    )
    .await?;

    let mut ed = Editor {
        peer: StdioPeer::start(&layout, "acp", &[])?,
        next: 0,
    };
    let id = ed
        .request(
            "initialize",
            json!({ "protocolVersion": 1, "clientCapabilities": {} }),
        )
        .await?;
    ed.answer(id).await?;
    let id = ed
        .request("session/new", json!({ "cwd": project, "mcpServers": [] }))
        .await?;
    let session = ed.answer(id).await?["sessionId"]
        .as_str()
        .context("no sessionId")?
        .to_string();

    // Prompt → first update, each turn cancelled once it spoke.
    let (mut first, mut floor) = (Vec::new(), Vec::new());
    for i in 0..args.prompts + 3 {
        let t0 = Instant::now();
        let prompt = ed
            .request(
                "session/prompt",
                json!({ "sessionId": session,
                        "prompt": [{ "type": "text", "text": "/party bench-door go" }] }),
            )
            .await?;
        loop {
            let msg = ed.recv().await?;
            if msg["method"] == "session/update"
                && msg["params"]["update"]["sessionUpdate"] != "available_commands_update"
            {
                break;
            }
        }
        let spoke = t0.elapsed();
        ed.send(&json!({ "jsonrpc": "2.0", "method": "session/cancel",
                          "params": { "sessionId": session } }))
            .await?;
        let end = ed.answer(prompt).await?;
        if end["stopReason"] != "cancelled" {
            bail!("prompt {i}: ended {end}, not cancelled");
        }
        // The floor: the same launch over JSON-RPC.
        let t0 = Instant::now();
        let launched = c
            .call(
                "launch_party",
                json!({ "name": "bench-door", "cwd": project, "inputs": { "task": "go" } }),
            )
            .await?;
        let direct = t0.elapsed();
        c.call("cancel_party", json!({ "party_id": launched["party_id"] }))
            .await?;
        if i >= 3 {
            first.push(spoke);
            floor.push(direct);
        }
    }

    // Permission round trips inside one running turn.
    let prompt = ed
        .request(
            "session/prompt",
            json!({ "sessionId": session,
                    "prompt": [{ "type": "text", "text": "/party bench-door ask" }] }),
        )
        .await?;
    // Its party is launched once the turn speaks.
    while ed.recv().await?["method"] != "session/update" {}
    let party = c
        .call("list_parties", json!({ "created_by_session_id": session }))
        .await?["parties"][0]["party_id"]
        .clone();
    let worker = loop {
        let s = c
            .call("get_party_status", json!({ "party_id": party }))
            .await?;
        if let Some(w) = s["members"][0]["session_id"].as_str() {
            break w.to_string();
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let ask = |n: usize| {
        let layout = layout.clone();
        let worker = worker.clone();
        tokio::spawn(async move {
            let c = troupe::client::connect(&layout, false).await?;
            let t0 = Instant::now();
            let r = c
                .call(
                    "request_permission",
                    json!({ "session_id": worker, "tool_name": "run_command",
                            "input": { "command": format!("echo {n}") }, "wait_ms": 30000 }),
                )
                .await?;
            anyhow::Ok((t0.elapsed(), r))
        })
    };
    let (mut door_trip, mut direct_trip) = (Vec::new(), Vec::new());
    let mut approvals = c
        .subscribe("subscribe_approvals", json!({}), "unsubscribe_approvals")
        .await?;
    for i in 0..args.asks + 5 {
        // Through the door: the editor answers as soon as it is asked.
        let worker_call = ask(2 * i);
        let held = loop {
            let msg = ed.recv().await?;
            if msg["method"] != "session/request_permission" {
                continue;
            }
            if msg["params"]["toolCall"]["rawInput"]["command"] != format!("echo {}", 2 * i) {
                // The floor's request, decided over JSON-RPC already.
                ed.send(&json!({ "jsonrpc": "2.0", "id": msg["id"],
                                  "result": { "outcome": { "outcome": "cancelled" } } }))
                    .await?;
                continue;
            }
            {
                let got = Instant::now();
                ed.send(&json!({ "jsonrpc": "2.0", "id": msg["id"],
                                  "result": { "outcome": { "outcome": "selected", "optionId": "approve" } } }))
                    .await?;
                break got.elapsed();
            }
        };
        let (took, r) = worker_call.await??;
        if r["status"] != "approved" {
            bail!("ask {i}: {r}");
        }
        // The floor: the same request decided over JSON-RPC.
        let worker_call = ask(2 * i + 1);
        let approval = loop {
            let pushed = approvals
                .next()
                .await
                .context("the approvals feed ended")??;
            let pending = pushed["approvals"].as_array().cloned().unwrap_or_default();
            if let Some(a) = pending
                .iter()
                .find(|a| a["input"]["command"] == format!("echo {}", 2 * i + 1))
            {
                break a["approval_id"].clone();
            }
        };
        // The door asks the editor about this one too: withdrawn once decided here.
        c.call(
            "decide_approval",
            json!({ "approval_id": approval, "decision": "approve" }),
        )
        .await?;
        let (direct, r) = worker_call.await??;
        if r["status"] != "approved" {
            bail!("direct ask {i}: {r}");
        }
        if i >= 5 {
            door_trip.push(took.saturating_sub(held));
            direct_trip.push(direct);
        }
    }
    ed.send(&json!({ "jsonrpc": "2.0", "method": "session/cancel",
                      "params": { "sessionId": session } }))
        .await?;
    ed.answer(prompt).await?;

    let ms = |(p50, p90): (f64, f64)| (p50 / 1000.0, p90 / 1000.0);
    let p = |v: &mut Vec<Duration>| ms(percentiles90(v));
    let (f50, f90) = p(&mut first);
    let (l50, l90) = p(&mut floor);
    let (d50, d90) = p(&mut door_trip);
    let (r50, r90) = p(&mut direct_trip);
    let summary = json!({
        "prompts": args.prompts, "asks": args.asks,
        "prompt_to_first_update_ms": { "median": f50, "p90": f90 },
        "launch_party_floor_ms": { "median": l50, "p90": l90 },
        "prompt_ratio_to_floor": f50 / l50,
        "permission_round_trip_ms": { "median": d50, "p90": d90 },
        "json_rpc_decision_floor_ms": { "median": r50, "p90": r90 },
        "permission_ratio_to_floor": d50 / r50,
    });
    if json_out {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        println!(
            "troupe acp, {} prompts and {} permission round trips (excluding the human):\n  \
             prompt → first session/update   median {f50:.2} ms  p90 {f90:.2} ms  \
             (launch_party over JSON-RPC: {l50:.2} ms, ×{:.2})\n  \
             worker ask → editor → worker    median {d50:.2} ms  p90 {d90:.2} ms  \
             (decided over JSON-RPC: {r50:.2} ms, ×{:.2})",
            args.prompts,
            args.asks,
            f50 / l50,
            d50 / r50
        );
    }
    Ok(())
}

/// Median and p90, in µs.
fn percentiles90(samples: &mut [Duration]) -> (f64, f64) {
    let (p50, _) = percentiles(samples);
    let idx = ((samples.len() as f64 - 1.0) * 0.9).round() as usize;
    let p90 = samples.get(idx).map_or(0.0, |d| d.as_secs_f64() * 1e6);
    (p50, p90)
}
