//! `troupe schedule list|pause|resume|run-now`: the schedules that start parties
//! (`[schedules.<name>]` of `.troupe/config.toml`), this directory's project's (every project's
//! with `list --all`). Each is the operation of the same name; `--json` prints its result as it is.

use clap::Subcommand;
use serde_json::{Value, json};
use troupe_api::layout::Layout;

use super::{cwd_string, print_json, print_line};
use crate::client;

#[derive(Debug, Subcommand)]
pub enum ScheduleCommand {
    /// The schedules (their config read again now): cron (UTC), party, next due time, paused,
    /// the last run and any error.
    List {
        /// Every project's schedules, not only this directory's project's.
        #[arg(long)]
        all: bool,
    },
    /// Pause a schedule: it fires no more until resumed.
    Pause { name: String },
    /// Resume a paused schedule: it fires next at its cron's next time from now.
    Resume { name: String },
    /// Launch a schedule's party now (its cron's next time is unchanged).
    RunNow { name: String },
}

pub async fn run(layout: &Layout, cmd: ScheduleCommand, json: bool) -> anyhow::Result<()> {
    let client = client::connect(layout, true).await?;
    let cwd = cwd_string()?;
    let (op, params) = match &cmd {
        ScheduleCommand::List { all: true } => ("list_schedules", json!({})),
        ScheduleCommand::List { all: false } => ("list_schedules", json!({ "cwd": cwd })),
        ScheduleCommand::Pause { name } => ("pause_schedule", json!({ "cwd": cwd, "name": name })),
        ScheduleCommand::Resume { name } => {
            ("resume_schedule", json!({ "cwd": cwd, "name": name }))
        }
        ScheduleCommand::RunNow { name } => {
            ("run_schedule_now", json!({ "cwd": cwd, "name": name }))
        }
    };
    let result = client.call(op, params).await?;
    if json {
        return print_json(&result);
    }
    match cmd {
        ScheduleCommand::List { all } => {
            let schedules = result["schedules"].as_array().cloned().unwrap_or_default();
            if schedules.is_empty() {
                print_line(format_args!(
                    "no schedule: add [schedules.NAME] with cron, party and task to .troupe/config.toml"
                ));
            }
            for s in &schedules {
                for line in describe(s, all) {
                    print_line(format_args!("{line}"));
                }
            }
        }
        ScheduleCommand::Pause { name } => {
            print_line(format_args!("paused schedule {name}"));
        }
        ScheduleCommand::Resume { name } => print_line(format_args!(
            "resumed schedule {name}: next {}",
            result["schedule"]["next_due_at"]
                .as_str()
                .unwrap_or("never")
        )),
        ScheduleCommand::RunNow { name } => print_line(format_args!(
            "schedule {name} launched party {}",
            result["party_id"].as_str().unwrap_or("?")
        )),
    }
    Ok(())
}

/// A schedule in a few lines: name, state and next due time; cron, party and task; the last run
/// and any error.
fn describe(s: &Value, with_project: bool) -> Vec<String> {
    let text = |k: &str| s[k].as_str().unwrap_or("").to_string();
    let state = if s["error"].is_string() {
        "broken".to_string()
    } else if s["paused"] == true {
        "paused".to_string()
    } else {
        format!("next {}", s["next_due_at"].as_str().unwrap_or("never"))
    };
    let mut out = vec![format!("{}  {state}", text("name"))];
    if with_project {
        out.push(format!("    project {}", text("project_root")));
    }
    out.push(format!(
        "    cron {} (UTC) · party {} · missed runs: {} · task: {}",
        text("cron"),
        text("party"),
        text("missed"),
        text("task")
    ));
    if let Some(at) = s["last_run_at"].as_str() {
        out.push(format!(
            "    last run {at}{}",
            s["last_party_id"]
                .as_str()
                .map(|p| format!(" · party {p}"))
                .unwrap_or_default()
        ));
    }
    if let Some(e) = s["error"].as_str() {
        out.push(format!("    error: {e}"));
    }
    if let Some(e) = s["last_error"].as_str() {
        out.push(format!("    its last launch failed: {e}"));
    }
    out
}
