//! Approvals through a real daemon: a worker process asks (and long-polls) through the real
//! CLI, a person answers (approve, deny, approve_pattern, abort), rules answer later requests,
//! timeouts deny, and requests are answered in order per worker; sensitive paths and large
//! diffs escalate whatever the rules say; rules over commands match word by word and never a
//! compound command, and a member's command that reaches outside its worktree is flagged.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use troupe::client::Client;

use crate::scenario::Scenario;
use crate::support::{TestDaemon, asks_for_in_box_requests, define, register, start};

/// A worker that asks to write `out-<n>.txt` and writes it only when approved.
const ASKER: &str = r#"#!/bin/sh
F="out-$1.txt"
field() { sed -n "s/.*\"$1\": \"\([^\"]*\)\".*/\1/p" | head -1; }
R=$(troupe call request_permission "{\"tool_name\":\"write_file\",\"input\":{\"content\":\"hi\"},\"file_path\":\"$F\",\"start_line\":1,\"end_line\":1,\"diff\":\"+hi\",\"wait_ms\":20000}")
A=$(echo "$R" | field approval_id)
S=$(echo "$R" | field status)
while [ "$S" = pending ]; do
  S=$(troupe call request_permission "{\"approval_id\":\"$A\",\"wait_ms\":20000}" | field status)
done
if [ "$S" = approved ]; then echo hi > "$F"; troupe call complete "{\"output\":\"wrote $F\"}" >/dev/null
else troupe call complete "{\"output\":\"not allowed: $S\"}" >/dev/null; fi
"#;

async fn wait_for<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn pending_of(c: &Client, session: &str) -> Value {
    wait_for("a pending approval", || async {
        let r = c
            .call(
                "list_approvals",
                json!({ "status": "pending", "session_id": session }),
            )
            .await
            .unwrap();
        r["approvals"].as_array().unwrap().first().cloned()
    })
    .await
}

async fn finished(c: &Client, run: &str) -> Value {
    wait_for("the run to end", || async {
        let r = c
            .call("get_agent_result", json!({ "run_id": run }))
            .await
            .unwrap();
        (!matches!(r["run"]["status"].as_str(), Some("pending" | "running")))
            .then(|| r["run"].clone())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_wait_for_a_person_and_rules_answer_later_requests() {
    let daemon = TestDaemon::start();
    let c = daemon.client().await;
    let project = daemon.project("repo");
    let me = register(&c, "human", &project, None).await;
    let script = daemon.dir.path().join("ask.sh");
    std::fs::write(&script, ASKER).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    for (name, n, timeout) in [
        ("asker1", "1", 300.0),
        ("asker2", "2", 300.0),
        ("asker3", "3", 300.0),
        ("asker4", "4", 300.0),
        ("asker5", "5", 0.5),
        ("asker6", "6", 300.0),
    ] {
        c.call(
            "create_agent_definition",
            json!({ "definition": { "name": name, "command": [script.display().to_string(), n], "approval_timeout_secs": timeout } }),
        )
        .await
        .unwrap();
    }
    let start = |agent: &'static str| {
        let (c, me) = (&c, me.clone());
        async move {
            let r = c
                .call(
                    "start_agent",
                    json!({ "agent": agent, "prompt": "write", "parent_session_id": me }),
                )
                .await
                .unwrap();
            (
                r["run_id"].as_str().unwrap().to_string(),
                r["session_id"].as_str().unwrap().to_string(),
            )
        }
    };

    // Approve: the worker was waiting, proceeds, and its write lands.
    let (run, session) = start("asker1").await;
    let a = pending_of(&c, &session).await;
    assert_eq!(a["tool_name"], "write_file");
    assert_eq!(a["file_path"], "out-1.txt");
    assert_eq!(
        (a["start_line"].clone(), a["end_line"].clone()),
        (json!(1), json!(1))
    );
    assert_eq!(a["diff"], "+hi");
    assert_eq!(a["run_id"], run.as_str());
    let decided = c
        .call(
            "decide_approval",
            json!({ "approval_id": a["approval_id"], "decision": "approve" }),
        )
        .await
        .unwrap();
    assert_eq!(decided["approval"]["status"], "approved");
    let r = finished(&c, &run).await;
    assert_eq!(r["result"]["output"], "wrote out-1.txt");
    assert!(std::path::Path::new(&project).join("out-1.txt").exists());
    let err = c
        .call(
            "decide_approval",
            json!({ "approval_id": a["approval_id"], "decision": "deny" }),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), Some("conflict"));
    assert!(
        err.to_string().contains("is already approved (approve)"),
        "{err}"
    );

    // Deny: the worker hears it and does not write.
    let (run, session) = start("asker2").await;
    let a = pending_of(&c, &session).await;
    c.call(
        "decide_approval",
        json!({ "approval_id": a["approval_id"], "decision": "deny", "reason": "not now" }),
    )
    .await
    .unwrap();
    assert_eq!(
        finished(&c, &run).await["result"]["output"],
        "not allowed: denied"
    );
    assert!(!std::path::Path::new(&project).join("out-2.txt").exists());

    // Approve pattern: approves this one and stores a rule that approves the next one.
    let (run, session) = start("asker3").await;
    let a = pending_of(&c, &session).await;
    let err = c
        .call("decide_approval", json!({ "approval_id": a["approval_id"], "decision": "approve_pattern", "pattern": "out-[.txt" }))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("is not a valid glob"), "{err}");
    c.call("decide_approval", json!({ "approval_id": a["approval_id"], "decision": "approve_pattern", "pattern": "out-*.txt" }))
        .await
        .unwrap();
    assert_eq!(
        finished(&c, &run).await["result"]["output"],
        "wrote out-3.txt"
    );
    let (run, session) = start("asker4").await;
    assert_eq!(
        finished(&c, &run).await["result"]["output"],
        "wrote out-4.txt",
        "no person needed"
    );
    let auto = c
        .call("list_approvals", json!({ "session_id": session }))
        .await
        .unwrap();
    assert_eq!(auto["approvals"][0]["decision"], "rule");
    let rules = c.call("list_approval_rules", json!({})).await.unwrap();
    let rule = rules["rules"][0].clone();
    assert_eq!(
        (rule["tool_name"].clone(), rule["pattern"].clone()),
        (json!("write_file"), json!("out-*.txt"))
    );

    // Revoked, the rule answers nothing; with nobody answering, the request times out denied.
    c.call(
        "revoke_approval_rule",
        json!({ "rule_id": rule["rule_id"] }),
    )
    .await
    .unwrap();
    let (run, session) = start("asker5").await;
    assert_eq!(
        finished(&c, &run).await["result"]["output"],
        "not allowed: denied"
    );
    let timed_out = c
        .call("list_approvals", json!({ "session_id": session }))
        .await
        .unwrap();
    assert_eq!(timed_out["approvals"][0]["decision"], "timeout");

    // Abort: the asking agent is stopped.
    let (run, session) = start("asker6").await;
    let a = pending_of(&c, &session).await;
    c.call(
        "decide_approval",
        json!({ "approval_id": a["approval_id"], "decision": "abort" }),
    )
    .await
    .unwrap();
    let r = finished(&c, &run).await;
    assert_eq!(r["status"], "cancelled");
    assert!(r["error"].as_str().unwrap().contains("aborted"), "{r}");

    let err = c
        .call(
            "decide_approval",
            json!({ "approval_id": "nope", "decision": "approve" }),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), Some("not_found"));
    let events = c
        .call(
            "list_events",
            json!({ "kind": "approval_decided", "limit": 100 }),
        )
        .await
        .unwrap();
    // approve, deny, approve_pattern, timeout, abort (the rule's approval is recorded as it
    // is asked).
    assert_eq!(
        events["events"].as_array().unwrap().len(),
        5,
        "every decision is on the timeline"
    );
}

#[tokio::test]
async fn requests_are_answered_in_order_per_worker_and_resume_by_key() {
    let daemon = TestDaemon::start();
    let c = daemon.client().await;
    let project = daemon.project("repo");
    let worker = register(&c, "codex", &project, None).await;
    let ask = |tool: &'static str, key: &'static str| {
        let (c, worker) = (&c, worker.clone());
        async move {
            c.call("request_permission", json!({ "session_id": worker, "tool_name": tool, "input": { "command": "ls" }, "request_key": key, "wait_ms": 0 }))
                .await
                .unwrap()
        }
    };
    let first = ask("shell", "k1").await;
    let second = ask("shell", "k2").await;
    assert_eq!(first["status"], "pending");
    let again = ask("shell", "k1").await;
    assert_eq!(
        again["approval_id"], first["approval_id"],
        "the same key is the same request"
    );
    let err = c
        .call(
            "decide_approval",
            json!({ "approval_id": second["approval_id"], "decision": "approve" }),
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("decide that one before"), "{err}");
    c.call(
        "decide_approval",
        json!({ "approval_id": first["approval_id"], "decision": "approve" }),
    )
    .await
    .unwrap();
    c.call(
        "decide_approval",
        json!({ "approval_id": second["approval_id"], "decision": "approve" }),
    )
    .await
    .unwrap();

    let other = register(&c, "claude", &project, None).await;
    let err = c
        .call(
            "request_permission",
            json!({ "session_id": other, "approval_id": first["approval_id"], "wait_ms": 0 }),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), Some("forbidden"));
    let resumed = c
        .call(
            "request_permission",
            json!({ "session_id": worker, "approval_id": first["approval_id"] }),
        )
        .await
        .unwrap();
    assert_eq!(resumed["status"], "approved");
    let err = c
        .call("request_permission", json!({ "session_id": worker }))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("tool_name is required"), "{err}");
}

#[tokio::test]
async fn editors_are_pushed_every_change_of_requests_and_notifications() {
    let daemon = TestDaemon::start();
    let c = daemon.client().await;
    let project = daemon.project("repo");
    let worker = register(&c, "codex", &project, None).await;
    let mut approvals = c
        .subscribe(
            "subscribe_approvals",
            json!({ "cwd": project }),
            "unsubscribe_approvals",
        )
        .await
        .unwrap();
    let mut notes = c
        .subscribe(
            "subscribe_notifications",
            json!({}),
            "unsubscribe_notifications",
        )
        .await
        .unwrap();
    assert_eq!(
        next(&mut approvals).await["approvals"],
        json!([]),
        "the current state first"
    );
    let asked = c
        .call("request_permission", json!({ "session_id": worker, "tool_name": "shell", "input": { "command": "make" }, "wait_ms": 0 }))
        .await
        .unwrap();
    let snapshot = next(&mut approvals).await;
    assert_eq!(
        snapshot["approvals"][0]["approval_id"],
        asked["approval_id"]
    );
    assert_eq!(snapshot["approvals"][0]["subject"], "make");
    c.call(
        "decide_approval",
        json!({ "approval_id": asked["approval_id"], "decision": "deny" }),
    )
    .await
    .unwrap();
    assert_eq!(next(&mut approvals).await["approvals"], json!([]));

    let task = c
        .call("create_task", json!({ "cwd": project, "title": "schema" }))
        .await
        .unwrap();
    c.call(
        "escalate_task",
        json!({ "task_id": task["task_id"], "reason": "which database?" }),
    )
    .await
    .unwrap();
    let n = next(&mut notes).await;
    assert_eq!(n["kind"], "escalation");
    assert!(
        n["text"].as_str().unwrap().contains("which database?"),
        "{n}"
    );
}

/// The next item of a subscription, within 10 s.
async fn next(sub: &mut jsonrpsee_core::client::Subscription<Value>) -> Value {
    tokio::time::timeout(Duration::from_secs(10), sub.next())
        .await
        .expect("a push within 10 s")
        .expect("the subscription is open")
        .expect("a valid item")
}

/// Guardrails (seed 004): a sensitive path or a diff over the limit is a person's call whatever
/// rule would answer it — flagged dangerous, escalated to the person — and the project may set
/// its own list in `.troupe/guardrails.toml`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sensitive_paths_and_large_diffs_escalate_whatever_the_rules_say() {
    let d = TestDaemon::start();
    let c = d.client().await;
    let project = d.project("repo");
    let me = register(&c, "claude", &project, None).await;
    let ask = |file: &'static str, diff: Option<String>| {
        let (c, me) = (&c, me.clone());
        async move {
            c.call(
                "request_permission",
                json!({ "session_id": me, "tool_name": "write_file", "input": { "path": file },
                        "file_path": file, "diff": diff, "wait_ms": 0 }),
            )
            .await
            .unwrap()
        }
    };
    // A rule that approves every write.
    let first = ask("src/a.rs", None).await;
    c.call(
        "decide_approval",
        json!({ "approval_id": first["approval_id"], "decision": "approve_pattern", "pattern": "*" }),
    )
    .await
    .unwrap();
    assert_eq!(ask("src/b.rs", None).await["status"], "approved");

    for (file, diff, why) in [
        (".env", None, "sensitive path .env (matches .env)"),
        (
            "config/.env.production",
            None,
            "sensitive path config/.env.production (matches .env.*)",
        ),
        (
            ".github/workflows/ci.yml",
            None,
            "sensitive path .github/workflows/ci.yml (matches .github/workflows/**)",
        ),
        (
            "src/big.rs",
            Some("+x\n".repeat(401)),
            "a diff of 401 changed lines (over the 400-line limit)",
        ),
    ] {
        let r = ask(file, diff).await;
        assert_eq!(r["status"], "pending", "{file}: {r}");
        let a = c
            .call("list_approvals", json!({ "status": "pending" }))
            .await
            .unwrap()["approvals"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["approval_id"] == r["approval_id"])
            .cloned()
            .unwrap();
        assert_eq!(a["is_dangerous"], true, "{a}");
        assert_eq!(a["danger_reason"], why, "{a}");
    }
    let notes = c.call("list_notifications", json!({})).await.unwrap();
    let escalated: Vec<&Value> = notes["notifications"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["kind"] == "approval_escalated")
        .collect();
    assert_eq!(escalated.len(), 4, "{notes}");
    assert!(
        escalated[0]["text"]
            .as_str()
            .unwrap()
            .contains("no rule answers it"),
        "{notes}"
    );

    // The project's own list replaces the defaults.
    std::fs::create_dir_all(Path::new(&project).join(".troupe")).unwrap();
    std::fs::write(
        Path::new(&project).join(".troupe/guardrails.toml"),
        "sensitive_paths = [\"deploy/**\"]\nmax_diff_lines = 1000\n",
    )
    .unwrap();
    assert_eq!(ask("deploy/prod.yaml", None).await["status"], "pending");
    assert_eq!(ask(".env", None).await["status"], "approved");
    // Its own file stays sensitive, whatever it says.
    assert_eq!(
        ask(".troupe/guardrails.toml", None).await["status"],
        "pending"
    );
    // A session working in a subdirectory: paths are matched from the checkout's root.
    let web = Path::new(&project).join("web");
    std::fs::create_dir_all(&web).unwrap();
    let sub = register(&c, "claude", &web.display().to_string(), None).await;
    let deploy = Path::new(&project)
        .join("deploy/prod.yaml")
        .display()
        .to_string();
    for path in [deploy.as_str(), "../deploy/prod.yaml"] {
        let r = c
            .call(
                "request_permission",
                json!({ "session_id": sub, "tool_name": "write_file", "input": { "path": path },
                        "file_path": path, "wait_ms": 0 }),
            )
            .await
            .unwrap();
        assert_eq!(r["status"], "pending", "{path}: {r}");
    }
    assert_eq!(
        ask("src/big.rs", Some("+x\n".repeat(401))).await["status"],
        "approved"
    );
}

/// A request decided the moment it is stored (an editor that answers at once) wakes its asker,
/// round after round. The asker reads the request again once it watches for the decision, so a
/// decision taken in between is not missed (`bench acp-door` once saw an ask answer `pending`
/// under load; this stresses the path, it cannot force that interleaving).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_decided_before_its_asker_waits_is_answered_at_once() {
    let d = TestDaemon::start();
    let c = d.client().await;
    let dir = d.dir.path().join("proj");
    std::fs::create_dir_all(dir.join(".git")).unwrap();
    let worker = register(&c, "codex", dir.to_str().unwrap(), None).await;
    let decider = d.client().await;
    let mut pushes = decider
        .subscribe("subscribe_approvals", json!({}), "unsubscribe_approvals")
        .await
        .unwrap();
    let quick = tokio::spawn(async move {
        while let Some(Ok(pushed)) = pushes.next().await {
            for a in pushed["approvals"].as_array().into_iter().flatten() {
                let _already_decided = decider
                    .call(
                        "decide_approval",
                        json!({ "approval_id": a["approval_id"], "decision": "approve" }),
                    )
                    .await;
            }
        }
    });
    for i in 0..200 {
        let asked = Instant::now();
        let r = c
            .call(
                "request_permission",
                json!({ "session_id": worker, "tool_name": "run_command",
                        "input": { "command": format!("echo {i}") }, "wait_ms": 10000 }),
            )
            .await
            .unwrap();
        assert_eq!(
            r["status"],
            "approved",
            "ask {i} after {:?}: {r}",
            asked.elapsed()
        );
    }
    quick.abort();
}

/// A rule over commands matches whole words and never a compound command; a member's command
/// that reaches outside its worktree (`~`, `$HOME`) is flagged `outside_worktree` and no rule
/// answers it, however wide.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn command_rules_match_words_not_compound_commands_nor_paths_outside_the_worktree() {
    let s = Scenario::new().await;
    let (c, project) = (&s.person, &s.project);
    // The rules, not the box, answer the member's commands that stay in its checkout.
    asks_for_in_box_requests(project);
    let parent = register(c, "human", project, None).await;
    define(
        c,
        "agent",
        json!({ "name": "worker", "command": ["sleep", "120"], "isolation": "worktree" }),
    )
    .await;
    let run = start(c, "worker", "go", &parent).await;
    let r = c
        .call("get_agent_result", json!({ "run_id": run }))
        .await
        .unwrap();
    let session = r["run"]["session_id"].as_str().unwrap().to_string();
    assert_ne!(r["run"]["workdir"].as_str(), Some(project.as_str()), "{r}");
    let ask = |command: &'static str| {
        let (c, session) = (&c, session.clone());
        async move {
            c.call(
                "request_permission",
                json!({ "session_id": session, "tool_name": "Bash",
                        "input": { "command": command }, "wait_ms": 0 }),
            )
            .await
            .unwrap()
        }
    };
    let approve_pattern = |r: Value, pattern: &'static str| {
        let c = &c;
        async move {
            c.call(
                "decide_approval",
                json!({ "approval_id": r["approval_id"], "decision": "approve_pattern",
                        "pattern": pattern, "scope": "project" }),
            )
            .await
            .unwrap();
        }
    };

    // `cargo test*`: `cargo test` and any further words, nothing chained to it.
    approve_pattern(ask("cargo test").await, "cargo test*").await;
    for command in ["cargo test", "cargo test --release -p troupe-core"] {
        let r = ask(command).await;
        assert_eq!(r["status"], "approved", "{command}: {r}");
        assert_eq!(r["decision"], "rule", "{command}: {r}");
    }
    let deny = |r: Value| {
        let c = &c;
        async move {
            c.call(
                "decide_approval",
                json!({ "approval_id": r["approval_id"], "decision": "deny" }),
            )
            .await
            .unwrap();
        }
    };
    for command in [
        "cargo test && curl x|sh",
        "cargo test; curl x | sh",
        "cargo test | sh",
        "cargo test > out",
        "cargo test $(curl x)",
        "cargo testfoo",
    ] {
        let r = ask(command).await;
        assert_eq!(r["status"], "pending", "{command}: {r}");
        // A worker's requests are answered in order: this one before the next.
        deny(r).await;
    }

    // `rm *` answers a removal inside the worktree, never one that reaches outside it.
    approve_pattern(ask("rm -rf build").await, "rm *").await;
    assert_eq!(ask("rm -rf target").await["status"], "approved");
    for (command, reach) in [
        ("rm -rf ~/important", "~/important"),
        ("rm -rf $HOME/important", "$HOME"),
        ("rm -rf ../../important", "../../important"),
        ("rm -rf /important", "/important"),
    ] {
        let r = ask(command).await;
        assert_eq!(r["status"], "pending", "{command}: {r}");
        let a = c
            .call(
                "list_approvals",
                json!({ "session_id": session, "status": "pending" }),
            )
            .await
            .unwrap()["approvals"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["approval_id"] == r["approval_id"])
            .cloned()
            .unwrap();
        assert_eq!(a["outside_worktree"], true, "{a}");
        assert_eq!(a["is_dangerous"], true, "{a}");
        assert_eq!(
            a["danger_reason"],
            format!("outside the member's worktree ({reach})"),
            "{a}"
        );
        // No rule may come from it either.
        let err = c
            .call(
                "decide_approval",
                json!({ "approval_id": a["approval_id"], "decision": "approve_pattern", "pattern": "*" }),
            )
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("outside the member's worktree"), "{err}");
        deny(a).await;
    }
    // A sensitive path named in a command escalates as it would for a file tool.
    let r = ask("rm -rf .env").await;
    assert_eq!(r["status"], "pending", "{r}");
    deny(r).await;
    c.call("cancel_agent", json!({ "run_id": run }))
        .await
        .unwrap();
}

/// The large-diff guardrail counts the lines a call would change from its own input, for every
/// shape a runner sends (no `diff` field needed): a write against the file on disk, an edit, a
/// multi-edit, an ACP diff.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_diff_is_counted_from_the_tools_input() {
    let d = TestDaemon::start();
    let c = d.client().await;
    let project = d.project("repo");
    let lines =
        |n: usize, word: &str| -> String { (0..n).map(|i| format!("{word} {i}\n")).collect() };
    std::fs::write(Path::new(&project).join("big.rs"), lines(1000, "old")).unwrap();
    let me = register(&c, "claude", &project, None).await;
    let ask = |tool: &'static str, input: Value| {
        let (c, me) = (&c, me.clone());
        async move {
            c.call(
                "request_permission",
                json!({ "session_id": me, "tool_name": tool, "input": input, "wait_ms": 0 }),
            )
            .await
            .unwrap()
        }
    };
    let big = format!("{project}/big.rs");
    // A rule that approves every write and edit.
    let first = ask(
        "Write",
        json!({ "file_path": format!("{project}/a.rs"), "content": "x" }),
    )
    .await;
    c.call(
        "decide_approval",
        json!({ "approval_id": first["approval_id"], "decision": "approve_pattern", "pattern": "*", "scope": "project" }),
    )
    .await
    .unwrap();
    c.call(
        "decide_approval",
        json!({ "approval_id": ask("Edit", json!({ "file_path": big, "old_string": "old 1\n", "new_string": "new 1\n" })).await["approval_id"],
                "decision": "approve_pattern", "pattern": "*", "scope": "project" }),
    )
    .await
    .unwrap();
    let small = [
        (
            "Write",
            json!({ "file_path": big, "content": format!("{}top\n", lines(1000, "old")) }),
        ),
        (
            "Edit",
            json!({ "file_path": big, "old_string": "old 2\n", "new_string": "two\n" }),
        ),
    ];
    for (tool, input) in small {
        let r = ask(tool, input).await;
        assert_eq!(r["status"], "approved", "{tool}: {r}");
    }
    let large = [
        (
            "Write",
            json!({ "file_path": big, "content": lines(1000, "new") }),
            2000,
        ),
        (
            "Write",
            json!({ "file_path": format!("{project}/new.rs"), "content": lines(401, "x") }),
            401,
        ),
        (
            "Edit",
            json!({ "file_path": big, "old_string": "old", "new_string": "new", "replace_all": true }),
            2000,
        ),
        (
            "Edit",
            json!({ "file_path": big, "edits": [
            { "old_string": lines(450, "old"), "new_string": "gone\n" },
        ] }),
            451,
        ),
        (
            "Write",
            json!({ "title": "Write new.rs", "diffs": [
            { "type": "diff", "path": format!("{project}/n.rs"), "oldText": null, "newText": lines(450, "y") },
        ] }),
            450,
        ),
    ];
    for (tool, input, changed) in large {
        let r = ask(tool, input).await;
        assert_eq!(r["status"], "pending", "{tool}: {r}");
        let a = c
            .call("list_approvals", json!({ "status": "pending" }))
            .await
            .unwrap()["approvals"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["approval_id"] == r["approval_id"])
            .cloned()
            .unwrap();
        assert_eq!(
            a["danger_reason"],
            format!("a diff of {changed} changed lines (over the 400-line limit)"),
            "{a}"
        );
    }
}
