//! Claude Code hooks: `troupe hook <event>` is fed the JSON Claude Code sends (its documented
//! schema: `session_id`, `transcript_path`, `cwd`, `hook_event_name`, and per event
//! `source`, `tool_name`/`tool_input`/`tool_use_id`, `stop_hook_active`, `message`) and its
//! stdout is checked against what Claude Code reads.

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::{Value, json};
use troupe::client::Client;
use troupe_api::layout::Layout;

use crate::support::{BIN, TestDaemon, http_post_to, pending_approval, register};

/// Runs `troupe hook <event>` with `payload` on stdin; its stdout as JSON (`{}` when silent).
fn hook(d: &TestDaemon, event: &str, payload: Value, session: Option<&str>) -> Value {
    hook_at(&d.layout, event, payload, session)
}

/// `hook`, for a daemon known by its layout (usable from another thread).
fn hook_at(layout: &Layout, event: &str, payload: Value, session: Option<&str>) -> Value {
    let mut cmd = Command::new(BIN);
    cmd.arg("--data-dir")
        .arg(&layout.data_dir)
        .args(["hook", event])
        .env("TROUPE_RUNTIME_DIR", &layout.runtime_dir)
        .env("TROUPE_LOG", "warn")
        .env_remove("TROUPE_SESSION_ID")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(s) = session {
        cmd.env("TROUPE_SESSION_ID", s);
    }
    let mut child = cmd.spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(payload.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    if text.trim().is_empty() {
        json!({})
    } else {
        serde_json::from_str(&text).unwrap()
    }
}

/// A run of Troupe's (a stand-in for Claude Code that sleeps) whose workflow blocks WebFetch;
/// the run and its session.
async fn claude_worker(c: &Client, project: &str) -> (Value, String) {
    let parent = register(c, "human", project, None).await;
    c.call(
        "create_agent_definition",
        json!({ "definition": { "name": "claude-worker", "command": ["sleep", "60"],
                                "workflow": { "blocked_tools": ["WebFetch"] } } }),
    )
    .await
    .unwrap();
    let run = c
        .call(
            "start_agent",
            json!({ "agent": "claude-worker", "prompt": "work", "parent_session_id": parent }),
        )
        .await
        .unwrap();
    let me = run["session_id"].as_str().unwrap().to_string();
    (run, me)
}

fn base(event: &str, cwd: &str) -> Value {
    json!({
        "session_id": "3f1c9a52-claude",
        "transcript_path": "/home/u/.claude/projects/p/3f1c9a52-claude.jsonl",
        "cwd": cwd,
        "hook_event_name": event,
    })
}

fn with(mut v: Value, extra: Value) -> Value {
    for (k, x) in extra.as_object().unwrap() {
        v[k] = x.clone();
    }
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interactive_claude_session_registers_reads_messages_and_keeps_its_prompts() {
    let d = TestDaemon::start();
    let c = d.client().await;
    let project = d.project("proj");
    let other = register(&c, "codex", &project, None).await;

    let out = hook(
        &d,
        "SessionStart",
        with(
            base("SessionStart", &project),
            json!({ "source": "startup" }),
        ),
        None,
    );
    let context = out["hookSpecificOutput"]["additionalContext"]
        .as_str()
        .unwrap();
    assert_eq!(out["hookSpecificOutput"]["hookEventName"], "SessionStart");
    let me = context
        .strip_prefix("You are Troupe session ")
        .unwrap()
        .split(':')
        .next()
        .unwrap()
        .to_string();
    let s = c
        .call("get_session", json!({ "session_id": me }))
        .await
        .unwrap();
    assert_eq!(s["session"]["cli"], "claude");
    assert_eq!(s["session"]["external_id"], "3f1c9a52-claude");
    // The same Claude session is the same Troupe session.
    let again = hook(
        &d,
        "SessionStart",
        with(
            base("SessionStart", &project),
            json!({ "source": "resume" }),
        ),
        None,
    );
    assert!(again.to_string().contains(&me));

    // A message waits for the next hook that can carry it, once.
    c.call(
        "send_message",
        json!({ "from_session_id": other, "to_session_id": me, "content": "please rebase" }),
    )
    .await
    .unwrap();
    let out = hook(
        &d,
        "UserPromptSubmit",
        with(
            base("UserPromptSubmit", &project),
            json!({ "prompt": "go on" }),
        ),
        None,
    );
    let context = out["hookSpecificOutput"]["additionalContext"]
        .as_str()
        .unwrap();
    assert!(
        context.contains(&format!("from {other}: please rebase")),
        "{context}"
    );
    let out = hook(
        &d,
        "UserPromptSubmit",
        with(
            base("UserPromptSubmit", &project),
            json!({ "prompt": "more" }),
        ),
        None,
    );
    assert_eq!(out, json!({}));

    // No rule covers the call and a person is at the terminal: Claude asks them itself.
    let pre = with(
        base("PreToolUse", &project),
        json!({ "tool_name": "Bash", "tool_input": { "command": "cargo test" }, "tool_use_id": "toolu_01" }),
    );
    let out = hook(&d, "PreToolUse", pre.clone(), None);
    assert_eq!(
        out["hookSpecificOutput"]["permissionDecision"], "ask",
        "{out}"
    );

    // A stop with an unread message keeps Claude going to read it; a second stop ends.
    c.call(
        "send_message",
        json!({ "from_session_id": other, "to_session_id": me, "content": "one more thing" }),
    )
    .await
    .unwrap();
    let out = hook(
        &d,
        "Stop",
        with(base("Stop", &project), json!({ "stop_hook_active": false })),
        None,
    );
    assert_eq!(out["decision"], "block");
    assert!(out["reason"].as_str().unwrap().contains("one more thing"));
    let out = hook(
        &d,
        "Stop",
        with(base("Stop", &project), json!({ "stop_hook_active": true })),
        None,
    );
    assert_eq!(out, json!({}));
    let out = hook(
        &d,
        "Notification",
        with(
            base("Notification", &project),
            json!({ "message": "Claude needs your permission to use Bash" }),
        ),
        None,
    );
    assert_eq!(out, json!({}));
    let notes = c.call("list_notifications", json!({})).await.unwrap();
    assert!(
        notes
            .to_string()
            .contains("Claude needs your permission to use Bash"),
        "{notes}"
    );
    let events = c
        .call("list_events", json!({ "session_id": me, "limit": 100 }))
        .await
        .unwrap();
    let kinds: Vec<&str> = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert!(
        kinds.contains(&"agent_stopped") && kinds.contains(&"agent_notification"),
        "{kinds:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claude_member_started_by_troupe_asks_troupe_before_its_tools() {
    let d = TestDaemon::start();
    let c = d.client().await;
    let project = d.project("proj");
    let (run, me) = claude_worker(&c, &project).await;
    let pre = |tool: &str, input: Value, id: &str| {
        with(
            base("PreToolUse", &project),
            json!({ "tool_name": tool, "tool_input": input, "tool_use_id": id }),
        )
    };

    // The workflow's policy first.
    let out = hook(
        &d,
        "PreToolUse",
        pre("WebFetch", json!({ "url": "https://x.test" }), "t1"),
        Some(&me),
    );
    assert_eq!(out["hookSpecificOutput"]["permissionDecision"], "deny");
    assert!(
        out["hookSpecificOutput"]["permissionDecisionReason"]
            .as_str()
            .unwrap()
            .contains("tool WebFetch is blocked by this agent's workflow"),
        "{out}"
    );
    // Then a person, through Troupe's approvals (as the editor shows them).
    for (decision, want) in [("deny", "deny"), ("approve_pattern", "allow")] {
        let id = format!("toolu_{decision}");
        let input = json!({ "file_path": format!("{project}/src/{decision}.rs"), "content": "x" });
        let asking = {
            let payload = pre("Write", input, &id);
            let layout = d.layout.clone();
            let me = me.clone();
            std::thread::spawn(move || hook_at(&layout, "PreToolUse", payload, Some(&me)))
        };
        let pending = pending_approval(&c).await;
        assert_eq!(pending["tool_name"], "Write");
        assert_eq!(pending["session_id"], me.as_str());
        let mut decide = json!({ "approval_id": pending["approval_id"], "decision": decision });
        if decision == "approve_pattern" {
            decide["pattern"] = json!(format!("{project}/src/*.rs"));
        }
        c.call("decide_approval", decide).await.unwrap();
        let out = asking.join().unwrap();
        assert_eq!(
            out["hookSpecificOutput"]["permissionDecision"], want,
            "{out}"
        );
        if decision == "approve_pattern" {
            // The rule now answers matching calls at once, without a person.
            let out = hook(
                &d,
                "PreToolUse",
                pre(
                    "Write",
                    json!({ "file_path": format!("{project}/src/other.rs") }),
                    "t9",
                ),
                Some(&me),
            );
            assert_eq!(
                out["hookSpecificOutput"]["permissionDecision"], "allow",
                "{out}"
            );
        }
    }
    c.call("cancel_agent", json!({ "run_id": run["run_id"] }))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_codes_http_hook_form_gets_the_same_answers_from_the_daemon() {
    let d = TestDaemon::start();
    let c = d.client().await;
    let project = d.project("proj");
    let (run, me) = claude_worker(&c, &project).await;
    let url = troupe::client::read_endpoint(&d.layout)
        .unwrap()
        .mcp_url
        .unwrap();
    let addr = url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_string();
    let bearer = format!("Bearer {}", d.token());
    let payload = with(
        base("PreToolUse", &project),
        json!({ "tool_name": "WebFetch", "tool_input": { "url": "https://x.test" }, "tool_use_id": "t1" }),
    );
    let body = payload.to_string();

    // The member's session in a header, the token as for every door.
    let (status, answer) = http_post_to(
        &addr,
        "/hooks/PreToolUse",
        &[("Authorization", &bearer), ("X-Troupe-Session", &me)],
        body.as_bytes(),
    );
    assert_eq!(status, 200, "{answer}");
    let answer: Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(answer, hook(&d, "PreToolUse", payload.clone(), Some(&me)));
    assert_eq!(answer["hookSpecificOutput"]["permissionDecision"], "deny");

    // Without the token nothing is read; garbage is named.
    let (status, _) = http_post_to(&addr, "/hooks/PreToolUse", &[], body.as_bytes());
    assert_eq!(status, 401);
    let (status, answer) = http_post_to(
        &addr,
        "/hooks/PreToolUse",
        &[("Authorization", &bearer)],
        b"{not json",
    );
    assert_eq!(status, 400);
    assert!(answer.contains("not JSON"), "{answer}");

    // An interactive session registers through SessionStart (an empty answer).
    let start = with(
        base("SessionStart", &project),
        json!({ "source": "startup" }),
    );
    let (status, answer) = http_post_to(
        &addr,
        "/hooks/SessionStart",
        &[("Authorization", &bearer)],
        start.to_string().as_bytes(),
    );
    assert_eq!(status, 200, "{answer}");
    let sessions = c
        .call("list_sessions", json!({ "cwd": project }))
        .await
        .unwrap();
    assert!(
        sessions["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["external_id"] == "3f1c9a52-claude"),
        "{sessions}"
    );
    c.call("cancel_agent", json!({ "run_id": run["run_id"] }))
        .await
        .unwrap();
}

#[test]
fn init_writes_each_clis_config_once_and_keeps_the_rest() {
    let d = TestDaemon::start();
    let project = d.project("proj");
    let root = std::path::Path::new(&project);
    std::fs::create_dir_all(root.join(".claude")).unwrap();
    std::fs::write(
        root.join(".claude/settings.json"),
        r#"{"model": "opus", "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "say done"}]}]}}"#,
    )
    .unwrap();
    let run = |cli: &str| {
        let out = crate::support::cli(&d.layout, &["init", cli], Some(root));
        assert!(out.status.success(), "{}", crate::support::stderr(&out));
        crate::support::stdout(&out)
    };

    let said = run("claude");
    assert!(said.contains(".mcp.json: mcpServers.troupe = "), "{said}");
    assert!(
        said.contains(".claude/settings.json: hooks.PreToolUse += "),
        "{said}"
    );
    let mcp: Value =
        serde_json::from_str(&std::fs::read_to_string(root.join(".mcp.json")).unwrap()).unwrap();
    assert_eq!(mcp["mcpServers"]["troupe"]["args"], json!(["mcp"]));
    assert!(
        mcp["mcpServers"]["troupe"]["command"]
            .as_str()
            .unwrap()
            .ends_with("troupe")
    );
    let settings: Value =
        serde_json::from_str(&std::fs::read_to_string(root.join(".claude/settings.json")).unwrap())
            .unwrap();
    assert_eq!(settings["model"], "opus");
    let stop = settings["hooks"]["Stop"].as_array().unwrap();
    assert_eq!(stop.len(), 2, "the existing Stop hook stays: {stop:?}");
    assert_eq!(stop[0]["hooks"][0]["command"], "say done");
    assert!(
        stop[1]["hooks"][0]["command"]
            .as_str()
            .unwrap()
            .ends_with(" hook Stop")
    );
    assert_eq!(settings["hooks"]["PreToolUse"][0]["matcher"], "*");
    assert_eq!(
        settings["hooks"]["PreToolUse"][0]["hooks"][0]["timeout"],
        600
    );
    assert!(run("claude").starts_with("claude: already set up in "));

    assert!(run("gemini").contains(".gemini/settings.json: mcpServers.troupe = "));
    let gemini: Value =
        serde_json::from_str(&std::fs::read_to_string(root.join(".gemini/settings.json")).unwrap())
            .unwrap();
    assert_eq!(gemini["mcpServers"]["troupe"]["args"], json!(["mcp"]));
    assert!(run("codex").contains(".codex/config.toml: [mcp_servers.troupe]"));
    let codex = std::fs::read_to_string(root.join(".codex/config.toml")).unwrap();
    assert!(
        codex.contains("[mcp_servers.troupe]") && codex.contains("args = [\"mcp\"]"),
        "{codex}"
    );
    assert!(run("codex").starts_with("codex: already set up"));
}
