//! The person's side of a party's collaboration from a terminal: `troupe inbox` (everything
//! waiting for you, and an answer to one item with one of its choices), `troupe plan
//! show|review|commit`, `troupe decision list|vote`, `troupe conflicts` (the radar) and `troupe
//! worktrees`. Each is the operation of the same name; `--json` prints its result as it is.

use anyhow::{Context as _, bail};
use clap::Subcommand;
use serde_json::{Value, json};
use troupe_api::layout::Layout;

use super::{cwd_string, print_json, print_line};
use crate::client;

#[derive(Debug, Subcommand)]
pub enum InboxCommand {
    /// Everything waiting for you in this directory's project (every project's with `--all`).
    List {
        #[arg(long)]
        all: bool,
    },
    /// Answer one item: one of its choices (or your words, for a question without choices).
    Answer {
        item_id: String,
        #[arg(required = true)]
        words: Vec<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum PlanCommand {
    /// A party's plan: the committed one with its steps, the draft and its reviews.
    Show { party_id: String },
    /// Review the draft as the person.
    Review {
        party_id: String,
        #[arg(value_parser = ["approve", "request_changes"])]
        verdict: String,
        #[arg(long)]
        comments: Option<String>,
    },
    /// Commit the draft (`--force` past a request for changes).
    Commit {
        party_id: String,
        #[arg(long)]
        force: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum DecisionCommand {
    /// A party's decisions, or every one still open.
    List { party_id: Option<String> },
    /// Vote on one, as the person.
    Vote {
        decision_id: String,
        option: String,
        #[arg(long)]
        rationale: Option<String>,
    },
}

fn line(args: std::fmt::Arguments<'_>) {
    print_line(args);
}

pub async fn inbox(layout: &Layout, cmd: InboxCommand, json: bool) -> anyhow::Result<()> {
    let client = client::connect(layout, true).await?;
    match cmd {
        InboxCommand::List { all } => {
            let params = if all {
                json!({})
            } else {
                json!({ "cwd": cwd_string()? })
            };
            let result = client.call("list_inbox", params).await?;
            if json {
                return print_json(&result);
            }
            let items = result["items"].as_array().cloned().unwrap_or_default();
            if items.is_empty() {
                line(format_args!("nothing is waiting for you"));
            }
            for item in items {
                let choices: Vec<String> = item["answer"]["choices"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|c| c.as_str().map_or_else(|| c.to_string(), str::to_string))
                    .collect();
                line(format_args!(
                    "{}  {:<14} {}",
                    item["item_id"].as_str().unwrap_or("?"),
                    item["kind"].as_str().unwrap_or("?"),
                    item["title"].as_str().unwrap_or("")
                ));
                if !choices.is_empty() {
                    line(format_args!("    answer: {}", choices.join(" | ")));
                }
            }
            Ok(())
        }
        InboxCommand::Answer { item_id, words } => {
            let all = client.call("list_inbox", json!({})).await?;
            let item = all["items"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|i| i["item_id"] == item_id.as_str())
                .cloned()
                .with_context(|| {
                    format!("no inbox item {item_id} (answered already? `troupe inbox list`)")
                })?;
            let answer = &item["answer"];
            let op = answer["op"]
                .as_str()
                .context("the item names no operation to answer it with")?;
            let mut params = answer["params"].clone();
            let said = words.join(" ");
            let choices = answer["choices"].as_array().cloned().unwrap_or_default();
            let value = if choices.is_empty() {
                Value::String(said.clone())
            } else {
                match choices
                    .iter()
                    .find(|c| c.as_str() == Some(said.as_str()) || c.to_string() == said)
                {
                    Some(c) => c.clone(),
                    None => {
                        let offered: Vec<String> = choices
                            .iter()
                            .map(|c| c.as_str().map_or_else(|| c.to_string(), str::to_string))
                            .collect();
                        bail!(
                            "{said:?} is not one of its answers: {}",
                            offered.join(" | ")
                        );
                    }
                }
            };
            let field = answer["choice_field"].as_str().unwrap_or("answer");
            if let Value::Object(map) = &mut params {
                map.insert(field.to_string(), value);
            }
            let result = client.call(op, params).await?;
            if json {
                return print_json(&result);
            }
            line(format_args!("answered {item_id} ({op})"));
            Ok(())
        }
    }
}

pub async fn plan(layout: &Layout, cmd: PlanCommand, json: bool) -> anyhow::Result<()> {
    let client = client::connect(layout, true).await?;
    let (op, params) = match cmd {
        PlanCommand::Show { party_id } => ("get_plan", json!({ "party_id": party_id })),
        PlanCommand::Review {
            party_id,
            verdict,
            comments,
        } => (
            "review_plan",
            json!({ "party_id": party_id, "verdict": verdict, "comments": comments }),
        ),
        PlanCommand::Commit { party_id, force } => (
            "commit_plan",
            json!({ "party_id": party_id, "force": force }),
        ),
    };
    let result = client.call(op, params).await?;
    if json {
        return print_json(&result);
    }
    let plan = if op == "get_plan" {
        result.clone()
    } else {
        json!({ "draft": result["plan"] })
    };
    for (name, version) in [("committed", &plan["committed"]), ("draft", &plan["draft"])] {
        if !version.is_object() {
            continue;
        }
        line(format_args!(
            "{name} plan v{} by {}",
            version["version"],
            version["proposed_by"].as_str().unwrap_or("?")
        ));
        for r in version["reviews"].as_array().into_iter().flatten() {
            line(format_args!(
                "  review by {}: {}{}",
                r["reviewer"].as_str().unwrap_or("?"),
                r["verdict"].as_str().unwrap_or("?"),
                r["comments"]
                    .as_str()
                    .map(|c| format!(" — {c}"))
                    .unwrap_or_default()
            ));
        }
    }
    for s in plan["steps"].as_array().into_iter().flatten() {
        line(format_args!(
            "  {:<8} {:<12} {:<14} {}",
            s["step_id"].as_str().unwrap_or("?"),
            s["state"].as_str().unwrap_or("?"),
            s["owner_role"].as_str().unwrap_or("?"),
            s["spec"]["title"].as_str().unwrap_or("")
        ));
    }
    Ok(())
}

pub async fn decision(layout: &Layout, cmd: DecisionCommand, json: bool) -> anyhow::Result<()> {
    let client = client::connect(layout, true).await?;
    match cmd {
        DecisionCommand::List { party_id } => {
            let result = client
                .call("list_decisions", json!({ "party_id": party_id }))
                .await?;
            if json {
                return print_json(&result);
            }
            for d in result["decisions"].as_array().into_iter().flatten() {
                let options: Vec<&str> = d["options"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .collect();
                line(format_args!(
                    "{}  {:<9} {}  [{}]{}",
                    d["decision_id"].as_str().unwrap_or("?"),
                    d["status"].as_str().unwrap_or("?"),
                    d["topic"].as_str().unwrap_or(""),
                    options.join(" | "),
                    d["chosen"]
                        .as_str()
                        .map(|o| format!(" → {o}"))
                        .unwrap_or_default()
                ));
            }
            Ok(())
        }
        DecisionCommand::Vote {
            decision_id,
            option,
            rationale,
        } => {
            let result = client
                .call(
                    "vote",
                    json!({ "decision_id": decision_id, "option": option, "rationale": rationale }),
                )
                .await?;
            if json {
                return print_json(&result);
            }
            line(format_args!(
                "{}  {}",
                result["decision"]["decision_id"].as_str().unwrap_or("?"),
                result["decision"]["status"].as_str().unwrap_or("?")
            ));
            Ok(())
        }
    }
}

pub async fn conflicts(
    layout: &Layout,
    party_id: Option<String>,
    json: bool,
) -> anyhow::Result<()> {
    let client = client::connect(layout, true).await?;
    let params = match party_id {
        Some(p) => json!({ "party_id": p }),
        None => json!({ "cwd": cwd_string()? }),
    };
    let result = client.call("list_conflicts", params).await?;
    if json {
        return print_json(&result);
    }
    let conflicts = result["conflicts"].as_array().cloned().unwrap_or_default();
    if conflicts.is_empty() {
        line(format_args!("no conflict predicted"));
    }
    for c in conflicts {
        line(format_args!(
            "{} and {} will conflict ({})",
            c["a"].as_str().unwrap_or("?"),
            c["b"].as_str().unwrap_or("?"),
            c["party_id"].as_str().unwrap_or("?")
        ));
        for r in c["ranges"].as_array().into_iter().flatten() {
            line(format_args!(
                "  {}:{}-{}",
                r["path"].as_str().unwrap_or("?"),
                r["start_line"],
                r["end_line"]
            ));
        }
    }
    Ok(())
}

pub async fn worktrees(
    layout: &Layout,
    party_id: Option<String>,
    json: bool,
) -> anyhow::Result<()> {
    let client = client::connect(layout, true).await?;
    let result = client
        .call("list_worktrees", json!({ "party_id": party_id }))
        .await?;
    if json {
        return print_json(&result);
    }
    for w in result["worktrees"].as_array().into_iter().flatten() {
        line(format_args!(
            "{}#{}  {:<10} {} ahead, {} behind{}  {}  {}",
            w["role"].as_str().unwrap_or("?"),
            w["index"],
            w["status"].as_str().unwrap_or("?"),
            w["ahead"],
            w["behind"],
            if w["dirty"] == true { ", dirty" } else { "" },
            w["branch"].as_str().unwrap_or("?"),
            w["workdir"].as_str().unwrap_or("?")
        ));
    }
    Ok(())
}
