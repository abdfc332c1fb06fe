//! `troupe demo-member`: the process the built-in demo agents run. It does a small, real piece
//! of its role's work through the same API any member uses (messages, tasks, escalation,
//! `complete`), in the directory and with the environment the daemon gave it. Developer #1 crashes
//! on its first attempt so the demo shows a restart.

use std::time::Duration;

use anyhow::Context;
use serde_json::json;

use crate::client;
use troupe_api::layout::Layout;

fn env(name: &str) -> anyhow::Result<String> {
    std::env::var(name)
        .with_context(|| format!("{name} is not set: demo-member runs inside a party"))
}

pub async fn run() -> anyhow::Result<()> {
    let session = env("TROUPE_SESSION_ID")?;
    let role = env("TROUPE_ROLE")?;
    let index: u32 = env("TROUPE_INSTANCE")?.parse().context("TROUPE_INSTANCE")?;
    let attempt: u32 = env("TROUPE_ATTEMPT")?.parse().context("TROUPE_ATTEMPT")?;
    let party = env("TROUPE_PARTY_ID")?;
    let workdir = std::path::PathBuf::from(env("TROUPE_WORKDIR")?);
    let layout = Layout::resolve(None)?;
    let c = client::connect(&layout, false).await?;
    // Pretend to think, so progress is visible.
    tokio::time::sleep(Duration::from_millis(300)).await;

    let (output, files) = match role.as_str() {
        "leader" => {
            c.call(
                "create_task",
                json!({ "party_id": party, "title": "Review the feature", "role_name": "qa" }),
            )
            .await?;
            (
                "Plan: developer#0 writes the parser, developer#1 the tests; QA reviews."
                    .to_string(),
                vec![],
            )
        }
        "developer" => {
            if index == 1 && attempt == 1 {
                std::fs::write(workdir.join("half-done.txt"), "work in progress\n")?;
                eprintln!("developer#1: simulated crash on the first attempt");
                std::process::exit(3);
            }
            let file = format!("part-{index}.txt");
            std::fs::write(
                workdir.join(&file),
                format!("written by developer#{index}, attempt {attempt}\n"),
            )?;
            let commit =
                troupe_worktree::commit_all(&workdir, &format!("developer#{index}: {file}"))?;
            (
                format!(
                    "wrote {file} and committed it ({})",
                    commit.as_deref().map_or("-", |c| &c[..8])
                ),
                vec![file],
            )
        }
        "qa" => {
            let tasks = c.call("list_tasks", json!({ "party_id": party })).await?;
            if let Some(task) = tasks["tasks"].as_array().and_then(|t| t.first()) {
                c.call(
                    "escalate_task",
                    json!({ "task_id": task["task_id"], "reason": "a human should look at the parser's error messages", "session_id": session }),
                )
                .await?;
            }
            (
                "reviewed both parts; escalated one question to you".to_string(),
                vec![],
            )
        }
        _ => ("landed the work".to_string(), vec![]),
    };
    c.call(
        "complete",
        json!({ "session_id": session, "output": output, "files_modified": files }),
    )
    .await?;
    Ok(())
}
