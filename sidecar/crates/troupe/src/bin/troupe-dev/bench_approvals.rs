//! `troupe-dev bench approvals`: the approval round trip without the human — a worker asks
//! (`request_permission`), the diagnostic reaches an editor (a real `troupe lsp` process driven
//! over stdio as an LSP client), the editor decides (`workspace/executeCommand`), and the worker's
//! call returns. Reports p50/p99 of ask → diagnostic and of the whole round trip.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use serde_json::json;

use crate::harness::{percentiles, start_daemon};
use crate::lsp_client::LspClient;

#[derive(Debug, Args)]
pub struct ApprovalArgs {
    /// Round trips measured (after a few warm-up ones).
    #[arg(long, default_value_t = 300)]
    pub rounds: usize,
}

pub async fn run(args: ApprovalArgs, json_out: bool) -> anyhow::Result<()> {
    let (scratch, layout) = crate::harness::scratch_layout("troupe-bench-approvals-")?;
    let project = scratch.path().join("project");
    std::fs::create_dir_all(project.join(".git"))?;
    std::fs::write(project.join("main.rs"), "fn main() {}\n")?;
    let project = std::fs::canonicalize(&project)?;
    let (mut daemon, c, _) = start_daemon(&layout).await?;
    let worker = c
        .call(
            "register_session",
            json!({ "cli": "codex", "cwd": project.display().to_string() }),
        )
        .await?["session_id"]
        .as_str()
        .context("no session_id")?
        .to_string();

    let log = std::env::var("TROUPE_LSP_LOG").unwrap_or_else(|_| "warn".into());
    let mut lsp = LspClient::start(&crate::troupe_exe()?, &layout, &project, &log).await?;
    let root = format!("file://{}", project.display());
    let target = format!("{root}/main.rs");

    let warmup = 20;
    // A publish can still show a request decided a moment ago: wait for a new one.
    let mut decided = std::collections::HashSet::new();
    let (mut to_diag, mut round) = (Vec::new(), Vec::new());
    for i in 0..args.rounds + warmup {
        let asked = Instant::now();
        let c2 = troupe::client::connect(&layout, false).await?;
        let ask = {
            let worker = worker.clone();
            tokio::spawn(async move {
                c2.call(
                    "request_permission",
                    json!({ "session_id": worker, "tool_name": "write_file",
                    "file_path": "main.rs", "start_line": 1, "end_line": 1, "wait_ms": 10000 }),
                )
                .await
            })
        };
        let diag = lsp
            .until(|m| {
                m["method"] == "textDocument/publishDiagnostics"
                    && m["params"]["uri"] == target
                    && m["params"]["diagnostics"]
                        .as_array()
                        .is_some_and(|d| !d.is_empty())
            })
            .await?;
        let seen = asked.elapsed();
        let approval = diag["params"]["diagnostics"][0]["code"].clone();
        decided.insert(approval.to_string());
        let decide = lsp
            .request(
                "workspace/executeCommand",
                json!({ "command": "troupe.decide_approval",
                "arguments": [{ "approval_id": approval, "decision": "approve" }] }),
            )
            .await?;
        let answer = tokio::time::timeout(Duration::from_secs(10), ask).await??;
        let done = asked.elapsed();
        if answer?["status"] != "approved" {
            bail!("round {i}: the worker was not approved");
        }
        lsp.until(|m| m["id"] == decide).await?;
        if i >= warmup {
            to_diag.push(seen);
            round.push(done);
        }
    }
    lsp.stop().await?;
    let _answer_or_hangup = c.call("shutdown_daemon", json!({})).await;
    let _reaped = daemon.0.wait();
    let (d50, d99) = percentiles(&mut to_diag);
    let (r50, r99) = percentiles(&mut round);
    if json_out {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "rounds": args.rounds,
                "ask_to_diagnostic_us": { "p50": d50, "p99": d99 },
                "round_trip_us": { "p50": r50, "p99": r99 },
            }))?
        );
    } else {
        println!(
            "{} approval round trips (excluding the human), worker ↔ daemon ↔ troupe lsp:\n  ask → diagnostic published   p50 {:.2} ms  p99 {:.2} ms\n  ask → decided → worker back  p50 {:.2} ms  p99 {:.2} ms",
            args.rounds,
            d50 / 1000.0,
            d99 / 1000.0,
            r50 / 1000.0,
            r99 / 1000.0
        );
    }
    Ok(())
}
