//! A mock model that does not know the scenario: it decides each answer from the request alone
//! — the tools the agent CLI offers, the playbook's text and the party's state in the prompt,
//! the task's words, and the results of the calls made so far in the conversation. It plays the
//! part its playbook names (leader, step owner, reviewer) the way the playbook says, and it
//! understands the task only in a few plain forms a capable model would read the same way:
//! - "In `F`, replace `A` with `B`." — a change to make (one step each);
//! - "Every change adds its note `DIR/<step>.md`." — a project rule the leader puts into each
//!   step's acceptance;
//! - "Decide whether … `X` or `Y`." — a choice the leader puts to the developers as a decision.
//!
//! Like a hurried model, a developer does what its step's description says and no more; a
//! reviewer checks the step's acceptance against the member's diff (every path the acceptance
//! names must be in it) and reopens the step with the reason when it is not; the developer
//! then does what the reason asks.
//!
//! Tools are found by the operation's name, whatever prefix the CLI gives MCP tools
//! (`mcp__troupe__get_plan`, `troupe__get_plan`, `get_plan`); the shell by the CLI's own name
//! for it (`Bash`, `exec_command`, `run_shell_command`, `shell`).

use std::sync::Arc;

use serde_json::{Value, json};

use crate::mock_llm::convo::{Convo, Item};
use crate::mock_llm::{Brain, Reply};

/// How long a member waits for its messages per `poll_messages`.
const WAIT_MS: u64 = 5000;

pub fn brain() -> Brain {
    Arc::new(|c: &Convo| decide(c))
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Part {
    Leader,
    Developer,
    Reviewer,
}

struct Me {
    role: String,
    party: String,
    part: Part,
    /// The team's developers (roles whose part is `developer`).
    developers: Vec<String>,
}

/// A call the model made, by operation, with its arguments and its result's text.
struct Call {
    op: String,
    args: Value,
    result: Option<String>,
}

fn between<'a>(text: &'a str, start: &str, end: &str) -> Option<&'a str> {
    let from = text.find(start)? + start.len();
    let len = text[from..].find(end)?;
    Some(&text[from..from + len])
}

impl Me {
    fn of(said: &str) -> Option<Me> {
        let line = said.lines().find(|l| l.contains(" of a Troupe party"))?;
        let role = between(line, ", the ", " of a Troupe party")?.to_string();
        let party = between(line, "(`party_id` ", ")")?
            .trim_matches('`')
            .to_string();
        let part = if said.contains("# The leader") {
            Part::Leader
        } else if said.contains("# The reviewer") {
            Part::Reviewer
        } else if said.contains("# A step owner") {
            Part::Developer
        } else {
            return None;
        };
        let team = between(said, "The team: ", ".\n").unwrap_or_default();
        let developers = team
            .split(", ")
            .filter_map(|t| t.strip_suffix(" (developer)"))
            .map(str::to_string)
            .collect();
        Some(Me {
            role,
            party,
            part,
            developers,
        })
    }
}

/// The operation a tool name stands for (`mcp__troupe__get_plan`, `mcp__troupe::get_plan`,
/// `get_plan`).
fn op_of(name: &str) -> &str {
    // Gemini CLI: `mcp_<server>_<tool>`.
    if let Some(op) = name.strip_prefix("mcp_troupe_") {
        return op;
    }
    let name = name.rsplit("::").next().unwrap_or(name);
    name.rsplit("__").next().unwrap_or(name)
}

fn tool(c: &Convo, op: &str) -> Option<String> {
    c.tools
        .iter()
        .find(|t| op_of(t) == op || t.rsplit('.').next() == Some(op))
        .cloned()
}

fn call(c: &Convo, op: &str, args: Value) -> Reply {
    if tool(c, op).is_none() && c.tools.iter().any(|t| t == "ToolSearch") {
        // Claude Code defers MCP tools: their names are listed in the prompt, and
        // `ToolSearch` with `select:<names>` loads them for the next request.
        let said = c.said();
        let deferred: Vec<&str> = said
            .split(|ch: char| ch.is_whitespace() || ch == ',' || ch == '"')
            .filter(|w| w.starts_with("mcp__") && w.contains("__troupe__"))
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        if let Some(wanted) = deferred.iter().find(|w| op_of(w) == op) {
            let _ = wanted;
            return Reply::tool(
                "ToolSearch",
                json!({ "query": format!("select:{}", deferred.join(",")), "max_results": deferred.len() }),
            );
        }
    }
    match tool(c, op) {
        Some(name) => Reply::tool(name, args),
        None => Reply::text(format!(
            "I cannot play my part: no `{op}` tool is offered (only {}).",
            c.tools.join(", ")
        )),
    }
}

/// A shell command with the CLI's own shell tool.
fn shell(c: &Convo, command: &str) -> Reply {
    let has = |n: &str| c.tools.iter().any(|t| t == n);
    if has("Bash") {
        Reply::tool(
            "Bash",
            json!({ "command": command, "description": "Make the change and commit it" }),
        )
    } else if has("exec_command") {
        Reply::tool("exec_command", json!({ "cmd": command }))
    } else if has("run_shell_command") {
        Reply::tool(
            "run_shell_command",
            json!({ "command": command, "description": "Make the change and commit it" }),
        )
    } else if has("shell") {
        Reply::tool("shell", json!({ "command": ["bash", "-lc", command] }))
    } else {
        Reply::text("I cannot change files: no shell tool is offered.")
    }
}

fn calls(c: &Convo) -> Vec<Call> {
    let mut out: Vec<Call> = Vec::new();
    for item in &c.items {
        match item {
            Item::Call { name, args } => {
                let op = match name.as_str() {
                    "Bash" | "exec_command" | "run_shell_command" | "shell" => "shell",
                    n => op_of(n),
                };
                out.push(Call {
                    op: op.to_string(),
                    args: args.clone(),
                    result: None,
                });
            }
            Item::Result { text } => {
                if let Some(last) = out.iter_mut().rev().find(|c| c.result.is_none()) {
                    last.result = Some(text.clone());
                }
            }
            _ => {}
        }
    }
    out
}

/// The JSON a tool's result carries, however the CLI wrapped it (Claude Code: the text; Codex:
/// `Wall time…\nOutput:\n[{"type":"text","text":"…"}]`; Gemini: `{"output": "…"}`).
fn json_of(text: &str) -> Option<Value> {
    let text = text.trim();
    let v: Value = serde_json::from_str(text).ok().or_else(|| {
        let start = text.find(['{', '['])?;
        let end = text.rfind(['}', ']'])?;
        serde_json::from_str(text.get(start..=end)?).ok()
    })?;
    unwrap_json(v)
}

fn unwrap_json(v: Value) -> Option<Value> {
    match v {
        Value::Array(parts) => parts.into_iter().find_map(|p| match p {
            Value::Object(_) => unwrap_json(p),
            Value::String(s) => json_of(&s),
            _ => None,
        }),
        Value::Object(ref o) => {
            if let Some(s) = o.get("structuredContent").filter(|s| s.is_object()) {
                return Some(s.clone());
            }
            if let Some(parts) = o.get("content").and_then(Value::as_array) {
                return unwrap_json(Value::Array(parts.clone()));
            }
            for key in ["text", "output"] {
                if let Some(inner) = o.get(key).and_then(Value::as_str) {
                    return json_of(inner);
                }
            }
            Some(v)
        }
        Value::String(s) => json_of(&s),
        _ => None,
    }
}

/// The latest result of `op`, as JSON.
fn last_result(calls: &[Call], op: &str) -> Option<Value> {
    calls
        .iter()
        .rev()
        .find(|c| c.op == op)
        .and_then(|c| c.result.as_deref())
        .and_then(json_of)
}

/// The task's changes: (file, from, to).
fn edits(said: &str) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    let mut rest = said;
    while let Some(at) = rest.find("In `") {
        rest = &rest[at + 4..];
        let parts: Vec<&str> = rest.splitn(7, '`').collect();
        if parts.len() == 7 && parts[1] == ", replace " && parts[3] == " with " {
            let edit = (parts[0].into(), parts[2].into(), parts[4].into());
            if !out.contains(&edit) {
                out.push(edit);
            }
        }
    }
    out
}

/// The project's note rule: the note's directory.
fn note_dir(said: &str) -> Option<String> {
    let path = between(said, "Every change adds its note `", "/<step>.md`")?;
    Some(path.to_string())
}

/// A choice the task leaves to the team: (topic, options).
fn choice(said: &str) -> Option<(String, Vec<String>)> {
    let sentence = between(said, "Decide whether ", ".")?;
    let topic = sentence.replace('`', "");
    let options: Vec<String> = sentence
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect();
    (options.len() >= 2).then_some((topic, options))
}

fn decide(c: &Convo) -> Reply {
    let said = c.said();
    let Some(me) = Me::of(&said) else {
        return Reply::text("I was given no part in a Troupe party.");
    };
    let calls = calls(c);
    // Once `complete` is taken, the turn ends.
    if let Some(done) = calls
        .iter()
        .rev()
        .find(|c| c.op == "complete" && c.result.is_some())
        .filter(|c| c.result.as_deref().is_some_and(|r| r.contains("success")))
    {
        return Reply::text(done.args["output"].as_str().unwrap_or("Done.").to_string());
    }
    let reply = match me.part {
        Part::Leader => leader(c, &me, &said, &calls),
        Part::Developer => developer(c, &me, &calls),
        Part::Reviewer => reviewer(c, &me, &calls),
    };
    // With TROUPE_BRAIN_LOG=<file>, each decision is logged (to study a CLI's requests).
    if let Some(path) = std::env::var_os("TROUPE_BRAIN_LOG") {
        use std::io::Write as _;
        let last = calls.last().map(|l| {
            let result: String = l
                .result
                .as_deref()
                .unwrap_or("-")
                .chars()
                .take(400)
                .collect();
            format!("{} -> {result}", l.op)
        });
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = writeln!(
                f,
                "{} [{} calls] last: {last:?}\n  => {reply:?}",
                me.role,
                calls.len()
            );
        }
    }
    reply
}

/// Between actions: read the plan, or, having just read it, wait for messages.
fn watch(c: &Convo, me: &Me, calls: &[Call]) -> Reply {
    match calls.last() {
        Some(last) if last.op == "get_plan" => {
            call(c, "poll_messages", json!({ "wait_ms": WAIT_MS }))
        }
        _ => call(c, "get_plan", json!({ "party_id": me.party })),
    }
}

fn all_done(plan: &Value) -> bool {
    plan["committed"].is_object()
        && plan["steps"]
            .as_array()
            .is_some_and(|s| !s.is_empty() && s.iter().all(|s| s["state"] == "done"))
}

fn leader(c: &Convo, me: &Me, said: &str, calls: &[Call]) -> Reply {
    let did = |op: &str| calls.iter().any(|c| c.op == op && c.result.is_some());
    if !did("propose_plan") {
        let edits = edits(said);
        let devs = if me.developers.is_empty() {
            vec![me.role.clone()]
        } else {
            me.developers.clone()
        };
        let steps: Vec<Value> = edits
            .iter()
            .enumerate()
            .map(|(i, (file, from, to))| {
                let id = format!("s{}", i + 1);
                let mut acceptance = format!("`{file}` has `{to}` instead of `{from}`");
                if let Some(dir) = note_dir(said) {
                    acceptance.push_str(&format!("; the change adds its note `{dir}/{id}.md`"));
                }
                json!({
                    "id": id,
                    "title": format!("{file}: {from} to {to}"),
                    "owner_role": devs[i % devs.len()],
                    "description": format!("In `{file}`, replace `{from}` with `{to}`."),
                    "acceptance": acceptance,
                })
            })
            .collect();
        return call(
            c,
            "propose_plan",
            json!({ "party_id": me.party, "summary": "One step per change the task asks for.",
                    "steps": steps }),
        );
    }
    if !did("commit_plan") {
        let approved = last_result(calls, "get_plan").is_some_and(|p| {
            p["draft"]["reviews"]
                .as_array()
                .is_some_and(|r| r.iter().any(|r| r["verdict"] == "approve"))
        });
        if approved && calls.last().is_some_and(|l| l.op == "get_plan") {
            return call(c, "commit_plan", json!({ "party_id": me.party }));
        }
        return watch(c, me, calls);
    }
    if let Some((topic, options)) = choice(said)
        && !did("propose_decision")
    {
        return call(
            c,
            "propose_decision",
            json!({ "party_id": me.party, "topic": topic, "options": options,
                    "evidence": "Both would do; the developers should agree on one.",
                    "voters": me.developers }),
        );
    }
    let plan = last_result(calls, "get_plan");
    let last = calls.last().map(|c| c.op.as_str());
    if plan.as_ref().is_some_and(all_done) {
        if choice(said).is_some() {
            let decided = last_result(calls, "list_decisions").is_some_and(|d| {
                d["decisions"]
                    .as_array()
                    .is_some_and(|d| !d.is_empty() && d.iter().all(|d| d["status"] == "committed"))
            });
            if !decided {
                return match last {
                    Some("list_decisions") => {
                        call(c, "poll_messages", json!({ "wait_ms": WAIT_MS }))
                    }
                    _ => call(c, "list_decisions", json!({ "party_id": me.party })),
                };
            }
        }
        return call(
            c,
            "complete",
            json!({ "output": "The plan is done: every step was reviewed and accepted.",
                    "status": "success" }),
        );
    }
    watch(c, me, calls)
}

/// A decision this member was asked to vote on and has not: (id, options).
fn vote_asked(calls: &[Call]) -> Option<(String, Vec<String>)> {
    for text in calls.iter().filter_map(|c| c.result.as_deref()) {
        let mut rest = text;
        while let Some(at) = rest.find("raised decision ") {
            rest = &rest[at + "raised decision ".len()..];
            let id: String = rest
                .chars()
                .take_while(|ch| ch.is_ascii_alphanumeric() || *ch == '-' || *ch == '_')
                .collect();
            let options: Vec<String> = between(rest, "Options: ", ". Vote")
                .map(|o| o.split(" | ").map(str::to_string).collect())
                .unwrap_or_default();
            let voted = calls
                .iter()
                .any(|c| c.op == "vote" && c.args["decision_id"] == id.as_str());
            if !id.is_empty() && !options.is_empty() && !voted {
                return Some((id, options));
            }
        }
    }
    None
}

fn developer(c: &Convo, me: &Me, calls: &[Call]) -> Reply {
    if let Some((id, options)) = vote_asked(calls) {
        return call(
            c,
            "vote",
            json!({ "decision_id": id, "option": options[0],
                    "rationale": format!("{} is the plainer word.", options[0]) }),
        );
    }
    let Some(at) = calls.iter().rposition(|c| c.op == "get_plan") else {
        return call(c, "get_plan", json!({ "party_id": me.party }));
    };
    let Some(plan) = calls[at].result.as_deref().and_then(json_of) else {
        return call(c, "get_plan", json!({ "party_id": me.party }));
    };
    let since: Vec<&Call> = calls[at + 1..].iter().collect();
    if !plan["committed"].is_object() {
        return watch(c, me, calls);
    }
    let steps = plan["steps"].as_array().cloned().unwrap_or_default();
    let done = |id: &Value| {
        steps
            .iter()
            .any(|s| s["step_id"] == *id && s["state"] == "done")
    };
    let mine: Vec<&Value> = steps
        .iter()
        .filter(|s| s["owner_role"] == me.role.as_str())
        .collect();
    let ready = mine.iter().find(|s| {
        matches!(
            s["state"].as_str(),
            Some("pending" | "reopened" | "in_progress")
        ) && s["spec"]["depends_on"]
            .as_array()
            .is_none_or(|d| d.iter().all(done))
    });
    if let Some(step) = ready {
        let id = step["step_id"].as_str().unwrap_or_default();
        let started = since.iter().any(|c| c.op == "start_step");
        let changed = since.iter().any(|c| c.op == "shell" && c.result.is_some());
        let submitted = since.iter().any(|c| c.op == "submit_step");
        if step["state"] != "in_progress" && !started {
            return call(
                c,
                "start_step",
                json!({ "party_id": me.party, "step_id": id }),
            );
        }
        if !changed {
            let title = step["spec"]["title"].as_str().unwrap_or(id);
            let command = if step["state"] == "reopened"
                || step["reason"].as_str().is_some_and(|r| r.contains('`'))
            {
                // Do what the reason asks: add the files it names.
                let reason = step["reason"].as_str().unwrap_or_default();
                let paths: Vec<&str> = reason
                    .split('`')
                    .skip(1)
                    .step_by(2)
                    .filter(|p| p.contains('/') || p.contains('.'))
                    .collect();
                let mut cmd = String::new();
                for p in paths {
                    if let Some((dir, _)) = p.rsplit_once('/') {
                        cmd.push_str(&format!("mkdir -p '{dir}' && "));
                    }
                    cmd.push_str(&format!("printf '%s\\n' '{title}' > '{p}' && "));
                }
                format!("{cmd}git add -A && git commit -qm 'Add what the review asked for'")
            } else {
                let description = step["spec"]["description"].as_str().unwrap_or_default();
                let [_, file, _, from, _, to, ..] = description.split('`').collect::<Vec<_>>()[..]
                else {
                    return Reply::text(format!("I do not understand step {id}."));
                };
                format!(
                    "sed -i 's|{from}|{to}|' '{file}' && git add -A && git commit -qm '{title}'"
                )
            };
            return shell(c, &command);
        }
        if !submitted {
            return call(
                c,
                "submit_step",
                json!({ "party_id": me.party, "step_id": id,
                        "summary": format!("Did what step {id} says and committed it.") }),
            );
        }
        return call(c, "get_plan", json!({ "party_id": me.party }));
    }
    if !mine.is_empty() && mine.iter().all(|s| s["state"] == "done") {
        return call(
            c,
            "complete",
            json!({ "output": "My steps are done and accepted.", "status": "success" }),
        );
    }
    watch(c, me, calls)
}

fn reviewer(c: &Convo, me: &Me, calls: &[Call]) -> Reply {
    let Some(at) = calls.iter().rposition(|c| c.op == "get_plan") else {
        return call(c, "get_plan", json!({ "party_id": me.party }));
    };
    let Some(plan) = calls[at].result.as_deref().and_then(json_of) else {
        return call(c, "get_plan", json!({ "party_id": me.party }));
    };
    let since = &calls[at + 1..];
    if let Some(draft) = plan["draft"].as_object() {
        let reviewed = draft["reviews"]
            .as_array()
            .is_some_and(|r| r.iter().any(|r| r["reviewer"] == me.role.as_str()))
            || since.iter().any(|c| c.op == "review_plan");
        if !reviewed {
            let checkable = draft["steps"].as_array().is_some_and(|s| {
                s.iter()
                    .all(|s| s["acceptance"].as_str().is_some_and(|a| !a.is_empty()))
            });
            return call(
                c,
                "review_plan",
                json!({ "party_id": me.party,
                        "verdict": if checkable { "approve" } else { "request_changes" },
                        "comments": if checkable { "Every step has an owner and a checkable acceptance." }
                                    else { "Give every step an acceptance a reviewer can check." } }),
            );
        }
    }
    let steps = plan["steps"].as_array().cloned().unwrap_or_default();
    if let Some(step) = steps
        .iter()
        .find(|s| s["state"] == "in_review" && s["owner_role"] != me.role.as_str())
    {
        let id = step["step_id"].as_str().unwrap_or_default();
        let owner = step["owner_role"].as_str().unwrap_or_default();
        if since.iter().any(|c| c.op == "review_step") {
            return call(c, "get_plan", json!({ "party_id": me.party }));
        }
        let diff = since
            .iter()
            .rev()
            .find(|c| c.op == "get_member_diff" && c.args["role"] == owner)
            .and_then(|c| c.result.as_deref())
            .and_then(json_of);
        let Some(diff) = diff else {
            return call(
                c,
                "get_member_diff",
                json!({ "party_id": me.party, "role": owner, "index": 0 }),
            );
        };
        let changed: Vec<&str> = diff["files"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|f| f["path"].as_str())
            .collect();
        let acceptance = step["spec"]["acceptance"].as_str().unwrap_or_default();
        let missing: Vec<&str> = acceptance
            .split('`')
            .skip(1)
            .step_by(2)
            .filter(|p| p.contains('/') || p.ends_with(".txt") || p.ends_with(".md"))
            .filter(|p| !changed.contains(p))
            .collect();
        return if missing.is_empty() {
            call(
                c,
                "review_step",
                json!({ "party_id": me.party, "step_id": id, "verdict": "accept",
                        "reason": "The diff meets the acceptance." }),
            )
        } else {
            let names: Vec<String> = missing.iter().map(|p| format!("`{p}`")).collect();
            call(
                c,
                "review_step",
                json!({ "party_id": me.party, "step_id": id, "verdict": "reopen",
                        "reason": format!("the acceptance asks for {}, which the diff does not touch", names.join(", ")) }),
            )
        };
    }
    if all_done(&plan) && calls.last().is_some_and(|l| l.op == "get_plan") {
        return call(
            c,
            "complete",
            json!({ "output": "Every step meets its acceptance.", "status": "success" }),
        );
    }
    watch(c, me, calls)
}
