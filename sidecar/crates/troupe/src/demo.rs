//! `troupe demo`: starts a real daemon on a throwaway data dir, registers a small troupe of
//! sessions and shows messages flowing between them, then stops the daemon and cleans up.
//! It drives the daemon only through its public JSON-RPC API, like any client.

use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{Value, json};

use crate::client::short;
use crate::client::{self, Client};
use troupe_api::layout::Layout;
use troupe_api::types::Message;

pub async fn run() -> anyhow::Result<()> {
    let scratch = tempfile::Builder::new()
        .prefix("troupe-demo-")
        .tempdir()
        .context("cannot create a scratch directory")?;
    let layout = Layout {
        data_dir: scratch.path().join("data"),
        runtime_dir: scratch.path().join("run"),
    };
    let project = scratch.path().join("project");
    std::fs::create_dir_all(project.join(".git")).context("cannot create the demo project")?;
    let project = project.display().to_string();

    println!(
        "== troupe demo: a daemon on a throwaway data dir ({})",
        scratch.path().display()
    );
    let started = Instant::now();
    let client = client::connect(&layout, true).await?;
    let status = client.call("daemon_status", json!({})).await?;
    println!(
        "daemon pid {} ready in {:.0} ms — socket {} (0600), websocket {}",
        status["pid"],
        started.elapsed().as_secs_f64() * 1000.0,
        status["socket_path"].as_str().unwrap_or("?"),
        status["ws_url"].as_str().unwrap_or("?"),
    );

    let result = async {
        run_demo(&client, &project).await?;
        run_party(&client, scratch.path(), &layout).await
    }
    .await;
    // Whatever happened, stop the daemon we started.
    let _answer_or_hangup = client.call("shutdown_daemon", json!({})).await;
    drop(client);
    let stopped = crate::client::wait_until_unlocked(&layout).await;
    result?;
    stopped?;
    println!("\n== daemon stopped; scratch directory removed");
    Ok(())
}

async fn register(
    client: &Client,
    cli: &str,
    cwd: &str,
    parent: Option<&str>,
) -> anyhow::Result<String> {
    let r = client
        .call(
            "register_session",
            json!({ "cli": cli, "cwd": cwd, "parent_session_id": parent }),
        )
        .await?;
    let id = r["session_id"]
        .as_str()
        .context("no session_id")?
        .to_string();
    println!(
        "  {:<7} session …{}  depth {}  project {}",
        cli,
        short(&id),
        r["session"]["agent_depth"],
        r["project_root"].as_str().unwrap_or("?")
    );
    Ok(id)
}

async fn run_demo(client: &Client, project: &str) -> anyhow::Result<()> {
    println!("\n== 1. sessions register in the project of their working directory");
    let you = register(client, "human", project, None).await?;
    let leader = register(client, "claude", project, Some(&you)).await?;
    let dev1 = register(client, "codex", project, Some(&leader)).await?;
    let dev2 = register(client, "gemini", project, Some(&leader)).await?;

    println!("\n== 2. the leader watches its inbox (a live subscription)");
    let mut inbox = client
        .subscribe_messages(json!({ "session_id": leader }))
        .await?;

    println!("\n== 3. the leader broadcasts the plan to its children");
    let b = client
        .call(
            "broadcast_to_children",
            json!({ "session_id": leader, "content": "Plan: codex writes the parser, gemini the tests." }),
        )
        .await?;
    println!(
        "  stored {} messages, durable before this reply",
        b["message_ids"].as_array().map_or(0, Vec::len)
    );

    for (name, id) in [("codex", &dev1), ("gemini", &dev2)] {
        let polled = client
            .call(
                "poll_messages",
                json!({ "session_id": id, "wait_ms": 1000 }),
            )
            .await?;
        for m in messages(&polled)? {
            println!("  {name} polled: {}", m.content);
        }
    }

    println!("\n== 4. peers talk directly (no hierarchy check), and report to their parent");
    let sent = Instant::now();
    client
        .call(
            "send_message",
            json!({ "from_session_id": dev2, "to_session_id": dev1, "content": "Which module is the parser in?", "priority": "high" }),
        )
        .await?;
    let reply = client
        .call(
            "poll_messages",
            json!({ "session_id": dev1, "wait_ms": 1000 }),
        )
        .await?;
    for m in messages(&reply)? {
        println!(
            "  codex got from gemini ({}): {}",
            m.priority.as_str(),
            m.content
        );
    }
    for (id, text) in [
        (&dev1, "Parser done: src/parse.rs"),
        (&dev2, "Tests done: 12 passing"),
    ] {
        client
            .call(
                "send_to_parent",
                json!({ "session_id": id, "content": text }),
            )
            .await?;
    }
    for _ in 0..2 {
        let item = tokio::time::timeout(Duration::from_secs(5), inbox.next())
            .await
            .context("the leader's subscription went quiet")?
            .context("the subscription closed")?
            .context("bad notification")?;
        let m: Message = serde_json::from_value(item)?;
        println!(
            "  leader's subscription pushed #{} from …{}: {}  ({:.2} ms after the first send)",
            m.seq,
            short(&m.from_session_id),
            m.content,
            sent.elapsed().as_secs_f64() * 1000.0
        );
    }

    println!("\n== 5. a retried send with the same idempotency key is stored once");
    for attempt in 1..=2 {
        let r = client
            .call(
                "send_message",
                json!({ "from_session_id": dev1, "to_session_id": leader, "content": "PR ready", "idempotency_key": "pr-1" }),
            )
            .await?;
        println!(
            "  attempt {attempt}: message …{} duplicate={}",
            short(r["message_id"].as_str().unwrap_or("?")),
            r["duplicate"]
        );
    }

    println!("\n== 6. bad input gets a clear, typed error");
    for (op, params) in [
        (
            "send_message",
            json!({ "from_session_id": dev1, "to_session_id": "nope", "content": "hi" }),
        ),
        (
            "send_message",
            json!({ "from_session_id": dev1, "content": "hi" }),
        ),
        (
            "send_message",
            json!({ "from_session_id": dev1, "to_session_id": dev2, "content": "x".repeat(300 * 1024) }),
        ),
        ("no_such_operation", json!({})),
    ] {
        match client.call(op, params).await {
            Ok(v) => println!("  {op}: unexpectedly fine: {v}"),
            Err(e) => println!("  {op}: {e}"),
        }
    }

    println!("\n== 7. siblings, discovery and the durable timeline");
    let siblings = client
        .call("list_siblings", json!({ "session_id": dev1 }))
        .await?;
    println!("  codex's siblings: {}", ids(&siblings["sessions"]));
    let found = client
        .call("discover_agents", json!({ "cwd": project }))
        .await?;
    println!(
        "  active sessions in the project: {}",
        ids(&found["sessions"])
    );
    let events = client.call("list_events", json!({ "limit": 1000 })).await?;
    for e in events["events"].as_array().into_iter().flatten() {
        println!(
            "  {:>3} {} {:<18} session …{}",
            e["seq"],
            e["at"].as_str().unwrap_or("?"),
            e["kind"].as_str().unwrap_or("?"),
            short(e["session_id"].as_str().unwrap_or("")),
        );
    }
    Ok(())
}

async fn run_party(
    client: &Client,
    scratch: &std::path::Path,
    layout: &Layout,
) -> anyhow::Result<()> {
    println!(
        "\n== 8. a party: the built-in feature-development template in a scratch git repository"
    );
    let repo = scratch.join("webapp");
    std::fs::create_dir_all(&repo)?;
    std::fs::write(repo.join("README.md"), "# webapp\n")?;
    troupe_worktree::init_repo(&repo, "initial commit")
        .context("cannot create the demo repository")?;
    let repo_str = repo.display().to_string();
    let you = client
        .call(
            "register_session",
            json!({ "cli": "human", "cwd": repo_str }),
        )
        .await?["session_id"]
        .as_str()
        .context("no session_id")?
        .to_string();
    let def = client
        .call(
            "get_party_definition",
            json!({ "name": "feature-development" }),
        )
        .await?;
    for (role, r) in def["definition"]["definition"]["roles"]
        .as_object()
        .into_iter()
        .flatten()
    {
        println!(
            "  role {:<10} agent {:<17} count {}  on_crash {}",
            role,
            r["agent"].as_str().unwrap_or("?"),
            r["count"],
            r["on_crash"].as_str().unwrap_or("(party default)")
        );
    }
    let launched = client
        .call(
            "launch_party",
            json!({ "name": "feature-development", "cwd": repo_str, "created_by_session_id": you }),
        )
        .await?;
    let party = launched["party_id"]
        .as_str()
        .context("no party_id")?
        .to_string();
    println!("  launched party …{} — live progress:", short(&party));

    let started = Instant::now();
    let mut since = 0;
    let status = loop {
        let events = client
            .call(
                "list_events",
                json!({ "party_id": party, "since": since, "limit": 1000 }),
            )
            .await?;
        for e in events["events"].as_array().into_iter().flatten() {
            let d = &e["data"];
            let who = format!("{}#{}", d["role"].as_str().unwrap_or(""), d["index"]);
            let line = match e["kind"].as_str().unwrap_or("") {
                "member_spawning" if d["attempt"] == 1 => format!("start    {who}"),
                "member_spawning" => format!("restart  {who} (attempt {})", d["attempt"]),
                "member_completed" => format!("done     {who}"),
                "member_crashed" => {
                    format!("crashed  {who}: {}", d["reason"].as_str().unwrap_or(""))
                }
                "role_completed" => format!("role {} complete", d["role"].as_str().unwrap_or("")),
                "notification" => format!(
                    "notify {}: {}",
                    d["target"].as_str().unwrap_or(""),
                    d["text"].as_str().unwrap_or("")
                ),
                "party_finished" => format!(
                    "party {}: {}",
                    d["status"].as_str().unwrap_or(""),
                    d["reason"].as_str().unwrap_or("")
                ),
                "task_escalated" => format!("escalated: {}", d["reason"].as_str().unwrap_or("")),
                _ => continue,
            };
            println!("  {:>6.2}s  {line}", started.elapsed().as_secs_f64());
        }
        since = events["next_since"].as_i64().unwrap_or(since);
        let s = client
            .call("get_party_status", json!({ "party_id": party }))
            .await?;
        if !matches!(s["party"]["status"].as_str(), Some("running" | "pending")) {
            break s;
        }
        if started.elapsed() > Duration::from_secs(60) {
            anyhow::bail!("the demo party did not finish within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    println!("\n  member         status     attempts  where");
    for m in status["members"].as_array().into_iter().flatten() {
        println!(
            "  {:<14} {:<10} {:<9} {}",
            format!("{}#{}", m["role"].as_str().unwrap_or(""), m["index"]),
            m["status"].as_str().unwrap_or(""),
            m["attempts"],
            m["branch"].as_str().map_or_else(
                || "the main checkout".to_string(),
                |b| format!("branch {b}")
            ),
        );
        if let Some(out) = m["output"].as_str() {
            println!("  {:<14} └ {out}", "");
        }
    }
    let notes = client
        .call("list_notifications", json!({ "party_id": party }))
        .await?;
    println!("\n  notifications for you:");
    for n in notes["notifications"].as_array().into_iter().flatten() {
        println!(
            "    [{}] {}",
            n["kind"].as_str().unwrap_or(""),
            n["text"].as_str().unwrap_or("")
        );
    }
    let mirror = std::fs::read_to_string(repo.join(".troupe/agents.jsonl")).unwrap_or_default();
    println!(
        "\n  .troupe/agents.jsonl has one line per isolated agent run ({} lines); their checkouts live under {} (worktrees/, and clones/: a sandboxed member's worktree is a clone of its own)",
        mirror.lines().count(),
        layout.data_dir.display()
    );
    let cleanup = client
        .call("cleanup_party", json!({ "party_id": party }))
        .await?;
    println!(
        "  cleanup_party: removed {} checkouts, kept {} with unmerged work (cleanup never drops work unless forced)",
        cleanup["removed"].as_array().map_or(0, Vec::len),
        cleanup["kept"].as_array().map_or(0, Vec::len)
    );
    Ok(())
}

fn messages(poll: &Value) -> anyhow::Result<Vec<Message>> {
    Ok(serde_json::from_value(poll["messages"].clone())?)
}

fn ids(sessions: &Value) -> String {
    sessions
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            format!(
                "{} …{}",
                s["cli"].as_str().unwrap_or("?"),
                short(s["session_id"].as_str().unwrap_or(""))
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}
