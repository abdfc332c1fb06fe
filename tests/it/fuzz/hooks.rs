//! Fuzz target for Claude Code's hooks: arbitrary and schema-shaped hook input (the JSON Claude
//! Code sends: `session_id`, `cwd`, `hook_event_name`, `tool_name`/`tool_input`, …, and bytes
//! that are not JSON) on the stdin of a real `troupe hook <Event>`, and posted to the daemon's
//! `/hooks/<Event>` (the `http` hook form). A hook never blocks Claude Code on Troupe's account:
//! it ends in time with exit 0 (1 for input that is not a JSON object; never 2, which would block
//! the tool call), without a panic, printing nothing or one JSON object of the fields Claude Code
//! reads; the HTTP form answers 200, or a 4xx naming the problem; the daemon keeps serving.

use std::process::Stdio;

use proptest::prelude::*;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use troupe_fuzz::proptest;

use super::{HANG, World, assert_serving, deny_every_request, runtime, world};
use crate::support::{BIN, define};

/// The events Claude Code sends, and some it does not.
const EVENTS: &[&str] = &[
    "SessionStart",
    "UserPromptSubmit",
    "PreToolUse",
    "PostToolUse",
    "Stop",
    "SubagentStop",
    "Notification",
    "SessionEnd",
    "PreCompact",
    "Unknown",
];

/// Claude Code's hook input, as a JSON Schema for [`troupe_fuzz::shaped`].
fn hook_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "session_id": { "type": "string" },
            "transcript_path": { "type": "string" },
            "cwd": { "type": "string" },
            "permission_mode": { "enum": ["default", "plan", "acceptEdits", "bypassPermissions"] },
            "hook_event_name": { "enum": EVENTS },
            "source": { "enum": ["startup", "resume", "clear", "compact"] },
            "prompt": { "type": "string" },
            "tool_name": { "enum": ["Bash", "Edit", "Write", "Read", "WebFetch", "NotebookEdit",
                                    "mcp__troupe__send_message", "Task"] },
            "tool_input": {
                "type": "object",
                "properties": {
                    "command": { "type": "string" },
                    "file_path": { "type": "string" },
                    "path": { "type": "string" },
                    "notebook_path": { "type": "string" },
                    "content": { "type": "string" },
                    "old_string": { "type": "string" },
                    "new_string": { "type": "string" },
                    "url": { "type": "string" }
                }
            },
            "tool_use_id": { "type": "string" },
            "tool_response": { "type": "object" },
            "stop_hook_active": { "type": "boolean" },
            "message": { "type": "string" },
            "notification_type": { "type": "string" },
            "reason": { "type": "string" },
            "trigger": { "enum": ["manual", "auto"] }
        },
        "required": ["session_id", "transcript_path", "cwd", "hook_event_name"]
    })
}

/// Where the hook's input goes.
#[derive(Debug, Clone)]
enum Door {
    /// `troupe hook <event>` with the input on stdin, as a `command` hook.
    Cli,
    /// POST `/hooks/<event>` on the daemon's MCP endpoint, as an `http` hook.
    Http,
}

#[derive(Debug, Clone)]
struct HookCase {
    door: Door,
    event: String,
    input: Vec<u8>,
    /// TROUPE_SESSION_ID (`X-Troupe-Session`): none (an interactive session), one of ours (a
    /// run's, an interactive one's) or anything.
    session: Option<String>,
    parent: Option<String>,
}

fn hook_case(pool: Vec<String>) -> BoxedStrategy<HookCase> {
    let input = prop_oneof![
        6 => troupe_fuzz::shaped(&hook_schema(), pool.clone())
            .prop_map(|v| v.to_string().into_bytes()),
        1 => troupe_fuzz::json_from(pool.clone()).prop_map(|v| v.to_string().into_bytes()),
        1 => troupe_fuzz::bytes(),
        1 => Just(Vec::new()),
    ];
    // Not a flag: Claude Code's settings name the event, no one types it.
    let event = prop_oneof![
        4 => proptest::sample::select(EVENTS).prop_map(str::to_string),
        1 => "[A-Za-z0-9_]{1,20}",
    ];
    // The environment cannot carry a NUL, nor a variable over 128 KiB (what no CLI could be
    // started with is not an input).
    let id = prop_oneof![
        3 => proptest::sample::select(pool),
        1 => troupe_fuzz::string().prop_map(|s| s.replace('\0', "").chars().take(8192).collect()),
    ];
    (
        prop_oneof![3 => Just(Door::Cli), 1 => Just(Door::Http)],
        event,
        input,
        proptest::option::weighted(0.5, id.clone()),
        proptest::option::weighted(0.2, id),
    )
        .prop_map(|(door, event, input, session, parent)| HookCase {
            door,
            event,
            input,
            session,
            parent,
        })
        .boxed()
}

/// Checks what a hook printed for Claude Code: nothing, or one JSON object of the fields it
/// reads, with a decision it knows.
fn check_output(out: &str) -> Result<(), TestCaseError> {
    if out.trim().is_empty() {
        return Ok(());
    }
    let v: Value = serde_json::from_str(out)
        .map_err(|e| TestCaseError::fail(format!("the hook printed {out:?}, not JSON: {e}")))?;
    let known = [
        "hookSpecificOutput",
        "decision",
        "reason",
        "continue",
        "stopReason",
        "suppressOutput",
        "systemMessage",
    ];
    let fields = v
        .as_object()
        .ok_or_else(|| TestCaseError::fail(format!("the hook printed {v}, not an object")))?;
    for key in fields.keys() {
        prop_assert!(known.contains(&key.as_str()), "unknown field {key}: {v}");
    }
    if let Some(d) = v.get("decision") {
        prop_assert_eq!(d, &json!("block"), "{}", v);
    }
    if let Some(d) = v["hookSpecificOutput"].get("permissionDecision") {
        prop_assert!(
            ["allow", "deny", "ask"].contains(&d.as_str().unwrap_or_default()),
            "{v}"
        );
    }
    Ok(())
}

async fn run_cli(w: &World, c: &HookCase) -> Result<(), TestCaseError> {
    let mut cmd = tokio::process::Command::new(BIN);
    cmd.arg("--data-dir")
        .arg(&w.daemon.layout.data_dir)
        .args(["hook", &c.event])
        .env("TROUPE_RUNTIME_DIR", &w.daemon.layout.runtime_dir)
        .env("TROUPE_LOG", "warn")
        .env("RUST_BACKTRACE", "0")
        .env_remove("TROUPE_SESSION_ID")
        .env_remove("TROUPE_PARENT_SESSION_ID")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if let Some(s) = &c.session {
        cmd.env("TROUPE_SESSION_ID", s);
    }
    if let Some(p) = &c.parent {
        cmd.env("TROUPE_PARENT_SESSION_ID", p);
    }
    let mut child = cmd.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let input = c.input.clone();
    // Written beside the wait: a hook that answers before reading everything must not block us.
    tokio::spawn(async move {
        let _ = stdin.write_all(&input).await;
    });
    let out = tokio::time::timeout(HANG, child.wait_with_output())
        .await
        .map_err(|_| TestCaseError::fail(format!("troupe hook {} hung on {c:?}", c.event)))?
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    prop_assert!(
        !stderr.contains("panicked"),
        "troupe hook panicked: {stderr}"
    );
    let object = serde_json::from_slice::<Value>(&c.input).is_ok_and(|v| v.is_object());
    match out.status.code() {
        Some(0) => {}
        // Input Claude Code never sends: a non-blocking error, said on stderr.
        Some(1) if !object => prop_assert!(stderr.contains("troupe: "), "{stderr}"),
        _ => {
            return Err(TestCaseError::fail(format!(
                "troupe hook {} ended {} (stderr: {stderr}) on {c:?}",
                c.event, out.status
            )));
        }
    }
    check_output(&stdout)
}

fn run_http(w: &World, c: &HookCase) -> Result<(), TestCaseError> {
    let url = troupe::client::read_endpoint(&w.daemon.layout)
        .unwrap()
        .mcp_url
        .unwrap();
    let addr = url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_string();
    let bearer = format!("Bearer {}", w.daemon.token());
    let mut headers = vec![("Authorization", bearer.as_str())];
    // A header carries no control characters.
    let clean = |s: &str| !s.chars().any(char::is_control) && s.is_ascii();
    if let Some(s) = c.session.as_deref().filter(|s| clean(s)) {
        headers.push(("X-Troupe-Session", s));
    }
    if let Some(p) = c.parent.as_deref().filter(|s| clean(s)) {
        headers.push(("X-Troupe-Parent-Session", p));
    }
    let path = format!("/hooks/{}", c.event);
    let (status, body) = crate::support::http_post_to(&addr, &path, &headers, &c.input);
    match status {
        200 => check_output(&body),
        400 | 413 | 422 => {
            let v: Value = serde_json::from_str(&body).map_err(|e| {
                TestCaseError::fail(format!("HTTP {status} with {body:?}, not JSON: {e}"))
            })?;
            prop_assert!(v["error"].is_string(), "HTTP {status}: {body}");
            Ok(())
        }
        _ => Err(TestCaseError::fail(format!(
            "HTTP {status} ({body}) on {c:?}"
        ))),
    }
}

#[test]
fn fuzz_claude_hooks() {
    let rt = runtime();
    let mut w = world(&rt);
    let project = w.pool[2].clone();
    // A run Troupe started (its PreToolUse asks a person through approvals; every request is
    // denied at once) whose workflow blocks WebFetch.
    let run_session = rt.block_on(async {
        let c = w.daemon.client().await;
        deny_every_request(w.daemon.client().await);
        define(
            &c,
            "agent",
            json!({ "name": "claude-worker", "command": ["sleep", "600"],
                    "workflow": { "blocked_tools": ["WebFetch"] } }),
        )
        .await;
        let run = c
            .call(
                "start_agent",
                json!({ "agent": "claude-worker", "prompt": "work",
                        "parent_session_id": w.pool[0] }),
            )
            .await
            .unwrap();
        run["session_id"].as_str().unwrap().to_string()
    });
    let mut pool = w.pool.clone();
    pool.extend([
        run_session,
        format!("{project}/src/../../escape.rs"),
        "3f1c9a52-claude".into(),
    ]);
    troupe_fuzz::run("claude_hooks", 64, hook_case(pool), |c| match c.door {
        Door::Cli => rt.block_on(run_cli(&w, &c)),
        Door::Http => run_http(&w, &c),
    });
    assert_serving(&rt, &mut w).unwrap();
}
