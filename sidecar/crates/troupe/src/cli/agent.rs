//! `troupe agent`: the person's agents from a terminal — start one (and follow its output),
//! list them, read a result or a log (live with `--follow`), take one over (`tell`), cancel one.
//! Each is the operation of the same name; `--json` prints its result as it is. A result's exit
//! code says how the run ended: 0 success, 1 ended otherwise, 2 still running (`QuietExit`).

use anyhow::Context as _;
use clap::Subcommand;
use serde_json::{Value, json};
use troupe_api::layout::Layout;

use super::{QuietExit, cwd_string, print_json, print_line};
use crate::client::{self, Client};

#[derive(Debug, Subcommand)]
pub enum AgentCommand {
    /// Start an agent definition on a task, as a child of your terminal's session in this
    /// directory's project. With `--follow`, its output is shown as it writes it, then its
    /// result; the exit code says whether it succeeded (0) or not (1).
    Start {
        agent: String,
        /// The task.
        #[arg(required = true)]
        words: Vec<String>,
        /// Another model for this run.
        #[arg(long)]
        model: Option<String>,
        /// Seconds (0: no limit).
        #[arg(long)]
        timeout: Option<f64>,
        #[arg(long)]
        follow: bool,
    },
    /// Agent runs: the ones your terminal started, or all with `--all`.
    List {
        #[arg(long)]
        all: bool,
    },
    /// One run's status and result; the exit code is 0 if it succeeded, 1 if it ended
    /// otherwise, 2 while it runs.
    Result { run_id: String },
    /// A run's output (its log); `--follow` keeps showing it until the run ends.
    Log {
        run_id: String,
        #[arg(long, short)]
        follow: bool,
    },
    /// Take a running agent over (ACP agents): your words go into its own session as its next
    /// turn, its answer is printed, then it goes on with its task.
    Tell {
        run_id: String,
        #[arg(required = true)]
        words: Vec<String>,
    },
    /// Stop a run.
    Cancel { run_id: String },
}

/// The session your terminal acts as in this directory's project: the active one a previous
/// `troupe agent` registered, else a new one.
async fn terminal_session(client: &Client) -> anyhow::Result<String> {
    let cwd = cwd_string()?;
    let sessions = client
        .call("list_sessions", json!({ "cwd": cwd, "status": "active" }))
        .await?;
    if let Some(id) = sessions["sessions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s["cli"] == "terminal" && s["agent_depth"] == 0)
        .and_then(|s| s["session_id"].as_str())
    {
        return Ok(id.to_string());
    }
    let made = client
        .call("register_session", json!({ "cli": "terminal", "cwd": cwd }))
        .await?;
    made["session_id"]
        .as_str()
        .map(str::to_string)
        .context("register_session answered no session_id")
}

/// Writes text as it came (a log's pieces), ending quietly when the reader went away.
fn print_text(text: &str) {
    super::print_raw(text.as_bytes());
}

/// Shows a run's log from the start until the run ends.
async fn follow(client: &Client, run_id: &str) -> anyhow::Result<()> {
    let mut sub = client
        .subscribe(
            "subscribe_run_log",
            json!({ "run_id": run_id, "offset": 0 }),
            "unsubscribe_run_log",
        )
        .await?;
    while let Some(chunk) = sub.next().await {
        let chunk = chunk.context("a piece of the log was unreadable")?;
        print_text(chunk["text"].as_str().unwrap_or_default());
        if chunk["ended"] == true {
            break;
        }
    }
    Ok(())
}

fn run_line(run: &Value) -> String {
    let who = match (run["role_name"].as_str(), run["instance_index"].as_i64()) {
        (Some(role), Some(i)) => format!("{role}#{i}"),
        _ => run["agent_name"].as_str().unwrap_or("?").to_string(),
    };
    format!(
        "{}  {:<16} {:<10} {}",
        run["run_id"].as_str().unwrap_or("?"),
        who,
        run["status"].as_str().unwrap_or("?"),
        run["created_at"].as_str().unwrap_or("")
    )
}

/// What a run's result says; the command exits 0 if it succeeded, 1 if it ended otherwise, 2
/// while it runs.
fn show_result(r: &Value, json: bool) -> anyhow::Result<()> {
    let status = r["run"]["status"].as_str().unwrap_or("?");
    let code = match status {
        "pending" | "running" => 2,
        "success" => 0,
        _ => 1,
    };
    let done = |code: u8| match code {
        0 => Ok(()),
        n => Err(QuietExit(n).into()),
    };
    if json {
        print_json(r)?;
        return done(code);
    }
    print_line(format_args!(
        "{}  {status}",
        r["run"]["run_id"].as_str().unwrap_or("?")
    ));
    if let Some(output) = r["run"]["result"]["output"].as_str() {
        print_line(format_args!("{output}"));
    }
    if let Some(error) = r["run"]["error"].as_str() {
        print_line(format_args!("error: {error}"));
    }
    done(code)
}

pub async fn run(layout: &Layout, cmd: AgentCommand, json: bool) -> anyhow::Result<()> {
    let client = client::connect(layout, true).await?;
    match cmd {
        AgentCommand::Start {
            agent,
            words,
            model,
            timeout,
            follow: follow_it,
        } => {
            let parent = terminal_session(&client).await?;
            let mut params = json!({
                "agent": agent, "prompt": words.join(" "), "parent_session_id": parent,
            });
            if let Some(t) = timeout {
                params["timeout"] = json!(t);
            }
            if let Some(m) = model {
                params["overrides"] = json!({ "model": m });
            }
            let started = client.call("start_agent", params).await?;
            let run_id = started["run_id"].as_str().unwrap_or_default().to_string();
            if !follow_it {
                if json {
                    print_json(&started)?;
                } else {
                    print_line(format_args!("{run_id}"));
                }
                return Ok(());
            }
            if !json {
                follow(&client, &run_id).await?;
            }
            let r = wait_result(&client, &run_id).await?;
            show_result(&r, json)
        }
        AgentCommand::List { all } => {
            let params = if all {
                json!({})
            } else {
                json!({ "parent_session_id": terminal_session(&client).await? })
            };
            let result = client.call("list_agents", params).await?;
            if json {
                print_json(&result)?;
            } else {
                for run in result["runs"].as_array().into_iter().flatten() {
                    print_line(format_args!("{}", run_line(run)));
                }
            }
            Ok(())
        }
        AgentCommand::Result { run_id } => {
            let r = client
                .call("get_agent_result", json!({ "run_id": run_id }))
                .await?;
            show_result(&r, json)
        }
        AgentCommand::Log {
            run_id,
            follow: follow_it,
        } => {
            if follow_it && !json {
                follow(&client, &run_id).await?;
                return Ok(());
            }
            // The whole log, a range at a time.
            let mut offset = 0u64;
            loop {
                let part = client
                    .call(
                        "get_run_log",
                        json!({ "run_id": run_id, "offset": offset, "limit": 1_048_576 }),
                    )
                    .await?;
                if json {
                    print_json(&part)?;
                } else {
                    print_text(part["text"].as_str().unwrap_or_default());
                }
                let next = part["next_offset"].as_u64().unwrap_or(offset);
                if next <= offset || next >= part["size"].as_u64().unwrap_or(0) {
                    break;
                }
                offset = next;
            }
            Ok(())
        }
        AgentCommand::Tell { run_id, words } => {
            let r = client
                .call(
                    "prompt_agent",
                    json!({ "run_id": run_id, "text": words.join(" ") }),
                )
                .await?;
            if json {
                print_json(&r)?;
            } else if r["answered"] == true {
                print_line(format_args!("{}", r["answer"].as_str().unwrap_or_default()));
            } else {
                print_line(format_args!(
                    "no answer yet: `troupe agent log {run_id}` shows it when it comes"
                ));
            }
            Ok(())
        }
        AgentCommand::Cancel { run_id } => {
            let r = client
                .call("cancel_agent", json!({ "run_id": run_id }))
                .await?;
            if json {
                print_json(&r)?;
            } else {
                print_line(format_args!("{}", run_line(&r["run"])));
            }
            Ok(())
        }
    }
}

/// The run's result once it ended (its log feed ended with it; a few reads cover the moment its
/// status is written).
async fn wait_result(client: &Client, run_id: &str) -> anyhow::Result<Value> {
    let mut events = client
        .subscribe(
            "subscribe_run_log",
            json!({ "run_id": run_id, "offset": u64::MAX / 2 }),
            "unsubscribe_run_log",
        )
        .await?;
    // The log feed's last chunk comes once the run has ended.
    while let Some(chunk) = events.next().await {
        if chunk.map(|c| c["ended"] == true).unwrap_or(true) {
            break;
        }
    }
    Ok(client
        .call("get_agent_result", json!({ "run_id": run_id }))
        .await?)
}
