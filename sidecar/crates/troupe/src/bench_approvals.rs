//! `troupe bench approvals`: the approval round trip without the human — a worker asks
//! (`request_permission`), the diagnostic reaches an editor (a real `troupe lsp` process driven
//! over stdio as an LSP client), the editor decides (`workspace/executeCommand`), and the worker's
//! call returns. Reports p50/p99 of ask → diagnostic and of the whole round trip.

use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{ChildStdin, ChildStdout};

use crate::bench::{percentiles, start_daemon};

#[derive(Debug, Args)]
pub struct ApprovalArgs {
    /// Round trips measured (after a few warm-up ones).
    #[arg(long, default_value_t = 300)]
    pub rounds: usize,
}

struct Lsp {
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next_id: i64,
}

impl Lsp {
    async fn send(&mut self, msg: Value) -> anyhow::Result<()> {
        let body = serde_json::to_vec(&msg)?;
        self.stdin
            .write_all(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes())
            .await?;
        self.stdin.write_all(&body).await?;
        self.stdin.flush().await?;
        Ok(())
    }

    async fn request(&mut self, method: &str, params: Value) -> anyhow::Result<i64> {
        self.next_id += 1;
        let id = self.next_id;
        self.send(json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }))
            .await?;
        Ok(id)
    }

    async fn read(&mut self) -> anyhow::Result<Value> {
        let v = self.read_inner().await?;
        if std::env::var_os("TROUPE_BENCH_TRACE").is_some() {
            eprintln!("<- {v}");
        }
        Ok(v)
    }

    async fn read_inner(&mut self) -> anyhow::Result<Value> {
        let mut len = None;
        loop {
            let mut line = String::new();
            if self.stdout.read_line(&mut line).await? == 0 {
                bail!("troupe lsp closed its output");
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some(v) = line.strip_prefix("Content-Length: ") {
                len = Some(v.parse::<usize>()?);
            }
        }
        let mut body = vec![0; len.context("a message without Content-Length")?];
        self.stdout.read_exact(&mut body).await?;
        Ok(serde_json::from_slice(&body)?)
    }

    /// Reads until `pred` matches a message (answering the server's own requests on the way).
    async fn until(&mut self, mut pred: impl FnMut(&Value) -> bool) -> anyhow::Result<Value> {
        loop {
            let msg = self.read().await?;
            if pred(&msg) {
                return Ok(msg);
            }
            if msg.get("method").is_some() && msg.get("id").is_some() {
                let id = msg["id"].clone();
                self.send(json!({ "jsonrpc": "2.0", "id": id, "result": null }))
                    .await?;
            }
        }
    }
}

pub async fn run(args: ApprovalArgs, json_out: bool) -> anyhow::Result<()> {
    let (scratch, layout) = crate::bench::scratch_layout("troupe-bench-approvals-")?;
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

    let mut child = tokio::process::Command::new(std::env::current_exe()?)
        .arg("lsp")
        .env("TROUPE_HOME", &layout.data_dir)
        .env("TROUPE_RUNTIME_DIR", &layout.runtime_dir)
        .env(
            "TROUPE_LOG",
            std::env::var("TROUPE_LSP_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .context("cannot start troupe lsp")?;
    let mut lsp = Lsp {
        stdin: child.stdin.take().context("no stdin")?,
        stdout: BufReader::new(child.stdout.take().context("no stdout")?),
        next_id: 0,
    };
    let root = format!("file://{}", project.display());
    let init = lsp
        .request(
            "initialize",
            json!({ "processId": null, "rootUri": root, "capabilities": {},
            "workspaceFolders": [{ "uri": root, "name": "project" }] }),
        )
        .await?;
    lsp.until(|m| m["id"] == init).await?;
    lsp.send(json!({ "jsonrpc": "2.0", "method": "initialized", "params": {} }))
        .await?;
    let target = format!("{root}/main.rs");

    let warmup = 20;
    // A publish can still show a request decided a moment ago: wait for a new one.
    let mut decided = std::collections::HashSet::new();
    let (mut to_diag, mut round) = (Vec::new(), Vec::new());
    for i in 0..args.rounds + warmup {
        let asked = Instant::now();
        let c2 = crate::client::connect(&layout, false).await?;
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
    let _bye = lsp.request("shutdown", json!(null)).await;
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
