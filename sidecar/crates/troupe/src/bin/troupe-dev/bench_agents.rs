//! `troupe-dev bench mcp` and `troupe-dev bench acp`: the doors agent CLIs use. `mcp` drives a real
//! `troupe mcp` process over stdio as an MCP client would (initialize, then `tools/call` round
//! trips of a cheap tool) and reports p50/p99. `acp` starts ACP members through the daemon
//! (`start_agent`) and reports spawn → first `session/update` (the daemon's
//! `agent_first_update` event) for our scripted agent or any ACP command, e.g. real Claude Code.

use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::harness::{median, percentiles, scratch_layout, start_daemon};

#[derive(Debug, Args)]
pub struct McpArgs {
    /// Tool calls measured (after 50 warm-up ones).
    #[arg(long, default_value_t = 2000)]
    pub calls: usize,
    /// The tool called (default a read: no writes, no waiting; `poll_messages` marks read, a
    /// durable write).
    #[arg(long, default_value = "list_agents")]
    pub tool: String,
}

#[derive(Debug, Args)]
pub struct AcpArgs {
    /// Members started, one after another.
    #[arg(long, default_value_t = 20)]
    pub runs: usize,
    /// The ACP agent's argv (default: the scripted agent, `troupe-dev scripted-acp-agent`).
    #[arg(long, num_args = 1.., allow_hyphen_values = true)]
    pub command: Vec<String>,
    /// Extra environment for the agent, NAME=VALUE.
    #[arg(long = "env")]
    pub env: Vec<String>,
    /// `gateway` base URL to authenticate with (claude-agent-acp): the model server.
    #[arg(long)]
    pub gateway: Option<String>,
}

/// One newline-delimited JSON-RPC peer on a child's stdio: a stdio door of `troupe`.
pub(crate) struct StdioPeer {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

impl StdioPeer {
    /// Starts `troupe --data-dir … <door>` on `layout` with `env`.
    pub(crate) fn start(
        layout: &troupe_api::layout::Layout,
        door: &str,
        env: &[(&str, &str)],
    ) -> anyhow::Result<StdioPeer> {
        let mut child = tokio::process::Command::new(crate::troupe_exe()?)
            .arg("--data-dir")
            .arg(&layout.data_dir)
            .arg(door)
            .env("TROUPE_RUNTIME_DIR", &layout.runtime_dir)
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("cannot start troupe {door}"))?;
        Ok(StdioPeer {
            stdin: child.stdin.take().context("no stdin")?,
            lines: BufReader::new(child.stdout.take().context("no stdout")?).lines(),
            child,
        })
    }

    /// The next message (waits at most 60 s).
    pub(crate) async fn recv(&mut self) -> anyhow::Result<Value> {
        let line = tokio::time::timeout(Duration::from_secs(60), self.lines.next_line())
            .await
            .context("the door said nothing for 60 s")??
            .context("the door closed its output")?;
        serde_json::from_str(&line).context("a line from the door")
    }

    pub(crate) async fn send(&mut self, msg: &Value) -> anyhow::Result<()> {
        let mut line = msg.to_string();
        line.push('\n');
        self.stdin.write_all(line.as_bytes()).await?;
        self.stdin.flush().await?;
        Ok(())
    }

    /// Sends a request and waits for the answer with its id.
    pub(crate) async fn call(
        &mut self,
        id: u64,
        method: &str,
        params: Value,
    ) -> anyhow::Result<Value> {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await?;
        self.answer(id, method).await
    }

    /// The answer to request `id` (what comes before it is dropped).
    pub(crate) async fn answer(&mut self, id: u64, method: &str) -> anyhow::Result<Value> {
        loop {
            let msg = self.recv().await?;
            if msg["id"] == json!(id) && msg.get("method").is_none() {
                if let Some(e) = msg.get("error") {
                    bail!("{method}: {e}");
                }
                return Ok(msg["result"].clone());
            }
        }
    }
}

pub async fn mcp(args: McpArgs, json_out: bool) -> anyhow::Result<()> {
    if args.calls == 0 {
        bail!("--calls must be at least 1");
    }
    let (scratch, layout) = scratch_layout("troupe-bench-mcp-")?;
    let (_daemon, c, _) = start_daemon(&layout).await?;
    let cwd = scratch.path().display().to_string();
    let session = c
        .call("register_session", json!({ "cli": "bench", "cwd": cwd }))
        .await?["session_id"]
        .as_str()
        .context("no session_id")?
        .to_string();
    let mut peer = StdioPeer::start(&layout, "mcp", &[("TROUPE_SESSION_ID", &session)])?;
    let started = Instant::now();
    peer.call(
        0,
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {},
               "clientInfo": {"name": "troupe-bench", "version": env!("CARGO_PKG_VERSION")}}),
    )
    .await?;
    let init_ms = started.elapsed().as_secs_f64() * 1000.0;
    peer.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await?;
    let warmup = 50;
    let mut samples = Vec::with_capacity(args.calls);
    for i in 0..warmup + args.calls {
        let t = Instant::now();
        let r = peer
            .call(
                1 + i as u64,
                "tools/call",
                json!({"name": args.tool, "arguments": {}}),
            )
            .await?;
        if r["isError"] == json!(true) {
            bail!("{} failed: {r}", args.tool);
        }
        if i >= warmup {
            samples.push(t.elapsed());
        }
    }
    drop(peer.stdin);
    let _ = tokio::time::timeout(Duration::from_secs(2), peer.child.wait()).await;
    let (p50, p99) = percentiles(&mut samples);
    let summary = json!({
        "tool": args.tool, "calls": args.calls,
        "spawn_to_initialized_ms": init_ms, "p50_us": p50, "p99_us": p99,
    });
    if json_out {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        println!(
            "MCP over stdio (troupe mcp → daemon), {} calls of {}:\n  spawn → initialized  {init_ms:>8.1} ms\n  tool call round trip p50 {p50:.0} µs  p99 {p99:.0} µs",
            args.calls, args.tool
        );
    }
    Ok(())
}

pub async fn acp(args: AcpArgs, json_out: bool) -> anyhow::Result<()> {
    if args.runs == 0 {
        bail!("--runs must be at least 1");
    }
    let (scratch, layout) = scratch_layout("troupe-bench-acp-")?;
    let project = scratch.path().join("project");
    std::fs::create_dir_all(project.join(".git"))?;
    let (_daemon, c, _) = start_daemon(&layout).await?;
    let parent = c
        .call(
            "register_session",
            json!({ "cli": "bench", "cwd": project.display().to_string() }),
        )
        .await?["session_id"]
        .as_str()
        .context("no session_id")?
        .to_string();
    let (command, scripted) = if args.command.is_empty() {
        let exe = std::env::current_exe()?.display().to_string();
        (vec![exe, "scripted-acp-agent".to_string()], true)
    } else {
        (args.command.clone(), false)
    };
    let mut env = serde_json::Map::new();
    if scripted {
        env.insert("TROUPE_ACP_SCRIPT".into(), json!("wait"));
    }
    for pair in &args.env {
        let (k, v) = pair
            .split_once('=')
            .with_context(|| format!("--env {pair}: expected NAME=VALUE"))?;
        env.insert(k.into(), json!(v));
    }
    let mut acp = json!({ "mcp": true });
    if let Some(url) = &args.gateway {
        acp = json!({ "mcp": true, "auth_method": "gateway", "base_url": url });
    }
    c.call(
        "create_agent_definition",
        json!({ "definition": { "name": "bench-acp", "runner": "acp:bench", "command": command,
                                "env": env, "acp": acp, "timeout_secs": 120 } }),
    )
    .await?;
    let mut firsts = Vec::new();
    for i in 0..args.runs {
        let r = c
            .call(
                "start_agent",
                json!({ "agent": "bench-acp", "prompt": "Say hello.", "parent_session_id": parent }),
            )
            .await?;
        let run_id = r["run_id"].as_str().context("no run_id")?.to_string();
        let session = r["session_id"]
            .as_str()
            .context("no session_id")?
            .to_string();
        let deadline = Instant::now() + Duration::from_secs(60);
        let ms = loop {
            let e = c
                .call(
                    "list_events",
                    json!({ "session_id": session, "kind": "agent_first_update", "limit": 1 }),
                )
                .await?;
            if let Some(ms) = e["events"][0]["data"]["ms_since_spawn"].as_f64() {
                break ms;
            }
            if Instant::now() > deadline {
                let run = c
                    .call("get_agent_result", json!({ "run_id": run_id }))
                    .await?;
                bail!("run {} sent no update within 60 s: {run}", i + 1);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        if !json_out {
            eprintln!("run {}: spawn → first update {ms:.1} ms", i + 1);
        }
        firsts.push(ms);
        c.call("cancel_agent", json!({ "run_id": run_id })).await?;
    }
    let mut sorted = firsts.clone();
    sorted.sort_by(f64::total_cmp);
    let p90 = sorted
        .get(((sorted.len() as f64 - 1.0) * 0.9).round() as usize)
        .copied()
        .unwrap_or(0.0);
    let summary = json!({
        "agent": command.join(" "), "runs": args.runs,
        "spawn_to_first_update_ms": { "median": median(firsts.clone()), "p90": p90,
                                      "min": sorted.first(), "max": sorted.last() },
    });
    if json_out {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        println!(
            "ACP member spawn → first session/update, {} runs of {}:\n  median {:.1} ms  p90 {p90:.1} ms",
            args.runs,
            command.join(" "),
            median(firsts)
        );
    }
    Ok(())
}
