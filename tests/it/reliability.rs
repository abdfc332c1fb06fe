//! Reliability defects found by running real agent CLIs, each pinned by a test that failed
//! before its fix: an ACP member's whole process tree (its group, and children that left the
//! group) ends on daemon stop and after a kill -9 and restart; a request of a run that ended
//! expires instead of waiting as a ghost; a request for a path outside the member's worktree is
//! flagged and never answered by a rule; a leader notice with no live leader reaches the
//! person; a subagent lists its siblings over MCP.

use std::path::Path;

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use serde_json::{Value, json};
use troupe::client::Client;

use crate::scenario::Scenario;
use crate::support::{
    BIN, DEV_BIN, TestDaemon, asks_for_in_box_requests, define, launch, no_process_left, party_end,
    pending_approval, processes_of, register, repo, shares, start, wait_for, wait_run,
};

/// An ACP member whose command leaves, like claude-agent-acp → Claude Code → `troupe mcp`,
/// a tree behind its agent: a child in its group that ignores SIGTERM, and one in a session of
/// its own (out of the group) that ignores SIGTERM too. The agent itself waits mid-turn.
fn tree_agent(name: &str, extra: Value) -> Value {
    let shell = format!(
        "trap '' TERM; sleep 1000 & setsid sh -c \"trap '' TERM; sleep 1000\" & \
         exec {DEV_BIN} scripted-acp-agent"
    );
    let mut def = json!({
        "name": name,
        "runner": "acp:scripted",
        "command": ["sh", "-c", shell],
        "isolation": "worktree",
        "env": { "TROUPE_ACP_SCRIPT": "wait" },
    });
    if let (Value::Object(d), Value::Object(e)) = (&mut def, extra) {
        for (k, v) in e {
            d.insert(k, v);
        }
    }
    def
}

/// The running run of `role` (attempt `attempt`) once its whole tree is up (≥ 4 processes:
/// the agent, the grouped child, the setsid shell and its child): run id and process group.
async fn running_tree(c: &Client, party: &str, role: &str, attempt: i64) -> (String, i64) {
    wait_for(&format!("{role} attempt {attempt} running"), 60, || async {
        let runs = c
            .call("list_agents", json!({ "party_id": party }))
            .await
            .unwrap();
        let run = runs["runs"].as_array().unwrap().iter().find(|r| {
            r["role_name"] == role && r["attempt"] == attempt && r["status"] == "running"
        })?;
        let (id, pgid) = (run["run_id"].as_str()?.to_string(), run["pgid"].as_i64()?);
        (processes_of(&id, pgid).len() >= 4).then_some((id, pgid))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acp_members_whole_tree_ends_after_a_kill_9_and_restart_and_on_stop() {
    let mut d = TestDaemon::start();
    let c = d.client().await;
    let project = repo(&d.dir.path().join("proj"));
    define(&c, "agent", tree_agent("tree", json!({}))).await;
    define(
        &c,
        "party",
        json!({ "name": "trees", "roles": { "dev": { "agent": "tree", "retry_attempts": 3 } },
                "recovery": { "on_crash": "restart", "max_retries": 3 } }),
    )
    .await;
    let party = launch(&c, "trees", &project).await;
    let (first, pgid) = running_tree(&c, &party, "dev", 1).await;

    // kill -9: nothing ends the tree now; the next daemon must.
    drop(c);
    d.kill9();
    assert!(!processes_of(&first, pgid).is_empty());
    d.spawn();
    let c = d.client().await;
    no_process_left(&first, pgid, 30).await;
    let r = c
        .call("get_agent_result", json!({ "run_id": first }))
        .await
        .unwrap();
    assert_eq!(r["run"]["status"], "crashed", "{r}");
    // Recovery restarts the member: a new attempt, with a tree of its own.
    let (second, pgid2) = running_tree(&c, &party, "dev", 2).await;
    assert_ne!(second, first);

    // `troupe stop`: an ACP agent cannot be adopted by the next daemon, so it goes now, tree
    // and all, and its run is recorded as ended.
    drop(c);
    let out = d.cli(&["stop"]);
    assert!(out.status.success(), "{}", crate::support::stderr(&out));
    d.child.take().unwrap().wait().unwrap();
    no_process_left(&second, pgid2, 30).await;
    d.spawn();
    let c = d.client().await;
    let r = c
        .call("get_agent_result", json!({ "run_id": second }))
        .await
        .unwrap();
    assert_eq!(r["run"]["status"], "crashed", "{r}");
    assert!(
        r["run"]["error"].as_str().unwrap().contains("daemon"),
        "{r}"
    );
    c.call("cancel_party", json!({ "party_id": party }))
        .await
        .unwrap();
    party_end(&c, &party, 60).await;
}

/// The scripted agent's `write` script asks permission to write NOTES.md; it records what it
/// hears in `record` (in the test's shared dir, which its box is given).
fn asker(name: &str, record: &Path) -> Value {
    let def = json!({
        "name": name,
        "runner": "acp:scripted",
        "command": [DEV_BIN, "scripted-acp-agent"],
        "isolation": "worktree",
        "env": { "TROUPE_ACP_SCRIPT": "write", "TROUPE_ACP_RECORD": record.display().to_string() },
    });
    shares(def, &[record.parent().unwrap()])
}

async fn approval(c: &Client, id: &Value) -> Value {
    let all = c
        .call("list_approvals", json!({ "include_expired": true }))
        .await
        .unwrap();
    all["approvals"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| &a["approval_id"] == id)
        .cloned()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_of_a_run_that_ended_expires_and_the_live_attempts_is_the_one_shown() {
    let mut d = TestDaemon::start();
    let c = d.client().await;
    let dir = d.dir.path().to_path_buf();
    let project = repo(&dir.join("proj"));
    // Each attempt's write waits for the person (the box would let it through).
    asks_for_in_box_requests(&project);
    define(&c, "agent", asker("asker", &d.shared().join("r.jsonl"))).await;
    define(
        &c,
        "party",
        json!({ "name": "askers", "roles": { "dev": { "agent": "asker" } },
                "recovery": { "on_crash": "restart", "max_retries": 2 } }),
    )
    .await;
    let party = launch(&c, "askers", &project).await;
    let ghost = pending_approval(&c).await;

    // The daemon dies with the request pending; its run is found dead at restart.
    drop(c);
    d.kill9();
    d.spawn();
    let c = d.client().await;
    let g = approval(&c, &ghost["approval_id"]).await;
    assert_eq!(g["status"], "expired", "{g}");
    assert!(g["reason"].as_str().unwrap().contains("ended"), "{g}");
    // Hidden from the default list, shown when asked.
    let listed = c.call("list_approvals", json!({})).await.unwrap();
    assert!(
        listed["approvals"]
            .as_array()
            .unwrap()
            .iter()
            .all(|a| a["approval_id"] != ghost["approval_id"]),
        "{listed}"
    );
    let expired = c
        .call("list_approvals", json!({ "status": "expired" }))
        .await
        .unwrap();
    assert_eq!(expired["approvals"].as_array().unwrap().len(), 1);
    // A decision on it is refused, saying why.
    let err = c
        .call(
            "decide_approval",
            json!({ "approval_id": ghost["approval_id"], "decision": "approve" }),
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("expired"), "{err}");
    // The timeline says so.
    let events = c
        .call("list_events", json!({ "party_id": party, "limit": 1000 }))
        .await
        .unwrap();
    assert!(
        events["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["kind"] == "approval_expired"
                && e["data"]["approval_id"] == ghost["approval_id"]),
        "{events}"
    );

    // The restarted attempt asks again: its request is the first one a person sees.
    let live = pending_approval(&c).await;
    assert_ne!(live["approval_id"], ghost["approval_id"]);
    c.call(
        "decide_approval",
        json!({ "approval_id": live["approval_id"], "decision": "approve" }),
    )
    .await
    .unwrap();
    let s = party_end(&c, &party, 60).await;
    assert_eq!(s["party"]["status"], "completed", "{s}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_left_by_a_crashed_process_member_expires() {
    let d = TestDaemon::start();
    let c = d.client().await;
    let project = d.project("proj");
    let parent = register(&c, "human", &project, None).await;
    // Asks in the background, then crashes without waiting for the answer.
    let body = r#"troupe call request_permission '{"tool_name":"run_command","input":{"command":"make"},"wait_ms":60000}' >/dev/null 2>&1 &
while [ "$(troupe call list_approvals '{"status":"pending"}' | grep -c approval_id)" = 0 ]; do :; done
exit 3"#;
    define(
        &c,
        "agent",
        json!({ "name": "crasher", "command": ["sh", "-c", body] }),
    )
    .await;
    let run = start(&c, "crasher", "go", &parent).await;
    let r = wait_run(&c, &run).await;
    assert_eq!(r["run"]["status"], "crashed", "{r}");
    let all = c
        .call("list_approvals", json!({ "include_expired": true }))
        .await
        .unwrap();
    let a = &all["approvals"][0];
    assert_eq!(a["run_id"], run.as_str(), "{all}");
    assert_eq!(a["status"], "expired", "{a}");
    let pending = c
        .call("list_approvals", json!({ "status": "pending" }))
        .await
        .unwrap();
    assert_eq!(pending["approvals"], json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_outside_the_members_worktree_is_dangerous_and_no_rule_answers_it() {
    let s = Scenario::new().await;
    let (d, c, project) = (&s.daemon, &s.person, &s.project);
    // The person's rule, not the box, answers its requests inside its checkout.
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
    let (session, workdir) = (
        r["run"]["session_id"].as_str().unwrap().to_string(),
        r["run"]["workdir"].as_str().unwrap().to_string(),
    );
    let ask = |file: String| {
        let c = &c;
        let session = session.clone();
        async move {
            c.call(
                "request_permission",
                json!({ "session_id": session, "tool_name": "write_file", "file_path": file,
                        "input": { "file_path": file }, "wait_ms": 0 }),
            )
            .await
            .unwrap()
        }
    };
    // Inside: approved with a pattern that matches every path.
    let inside = ask(format!("{workdir}/a.txt")).await;
    c.call(
        "decide_approval",
        json!({ "approval_id": inside["approval_id"], "decision": "approve_pattern",
                "pattern": "**", "scope": "project" }),
    )
    .await
    .unwrap();
    assert_eq!(ask(format!("{workdir}/b.txt")).await["status"], "approved");

    // Outside (the main checkout, and through `..`): the rule does not answer; flagged.
    let targets = [
        format!("{project}/README.md"),
        format!("{workdir}/../../../escape.txt"),
    ];
    for target in targets {
        let out = ask(target.clone()).await;
        assert_eq!(out["status"], "pending", "{target}: {out}");
        let a = approval(c, &out["approval_id"]).await;
        assert_eq!(a["is_dangerous"], true, "{a}");
        assert_eq!(a["outside_worktree"], true, "{a}");
        assert!(
            a["danger_reason"]
                .as_str()
                .unwrap()
                .contains("outside the member's worktree"),
            "{a}"
        );
        // No rule may come from it either.
        let err = c
            .call(
                "decide_approval",
                json!({ "approval_id": a["approval_id"], "decision": "approve_pattern" }),
            )
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("outside the member's worktree"), "{err}");
        c.call(
            "decide_approval",
            json!({ "approval_id": a["approval_id"], "decision": "deny" }),
        )
        .await
        .unwrap();
    }
    // The editor door shows the warning, and offers no "Approve pattern" for it.
    let out = ask(format!("{project}/README.md")).await;
    let project_dir = std::fs::canonicalize(project).unwrap();
    let mut lsp =
        crate::lsp_client::LspClient::start(Path::new(BIN), &d.layout, &project_dir, "warn")
            .await
            .unwrap();
    let diag = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        lsp.until(|m| {
            m["method"] == "textDocument/publishDiagnostics"
                && m["params"]["diagnostics"]
                    .as_array()
                    .is_some_and(|d| d.iter().any(|x| x["code"] == out["approval_id"]))
        }),
    )
    .await
    .expect("a diagnostic for the request")
    .unwrap();
    let shown = diag["params"]["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["code"] == out["approval_id"])
        .unwrap()
        .clone();
    assert!(
        shown["message"]
            .as_str()
            .unwrap()
            .contains("dangerous: outside the member's worktree"),
        "{shown}"
    );
    assert_eq!(shown["severity"], 1, "an error, not a warning: {shown}");
    let id = lsp
        .request(
            "textDocument/codeAction",
            json!({ "textDocument": { "uri": diag["params"]["uri"] },
                    "range": shown["range"], "context": { "diagnostics": [shown] } }),
        )
        .await
        .unwrap();
    let actions = lsp.until(|m| m["id"] == id).await.unwrap();
    let titles: Vec<&str> = actions["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["title"].as_str().unwrap())
        .collect();
    assert!(titles.contains(&"Troupe: Approve"), "{titles:?}");
    assert!(!titles.iter().any(|t| t.contains("pattern")), "{titles:?}");
    lsp.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_notice_after_the_leader_finished_reaches_the_person() {
    let s = Scenario::new().await;
    let c = &s.person;
    let done = r#"troupe call complete "{\"output\":\"$TROUPE_ROLE done\"}" >/dev/null"#;
    define(
        c,
        "agent",
        json!({ "name": "quick", "command": ["sh", "-c", done], "isolation": "none" }),
    )
    .await;
    define(
        c,
        "party",
        json!({
            "name": "leader-first",
            "roles": {
                "lead": { "agent": "quick", "is_leader": true },
                "dev": { "agent": "quick" },
                "qa": { "agent": "quick" }
            },
            "flow": { "dev": ["lead"], "qa": ["dev"] }
        }),
    )
    .await;
    let party = s.launch("leader-first").await;
    let s = s.ended(&party).await;
    assert_eq!(s["party"]["status"], "completed", "{s}");
    let n = c
        .call("list_notifications", json!({ "party_id": party }))
        .await
        .unwrap();
    let texts: Vec<&str> = n["notifications"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["text"].as_str().unwrap())
        .collect();
    // Both notices came after the leader had finished: neither is lost.
    for role in ["dev", "qa"] {
        assert!(
            texts
                .iter()
                .any(|t| t.contains(&format!("role {role} completed"))),
            "{texts:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subagent_lists_its_siblings_over_mcp() {
    let d = TestDaemon::start();
    let c = d.client().await;
    let project = d.project("proj");
    let parent = register(&c, "human", &project, None).await;
    define(
        &c,
        "agent",
        json!({ "name": "sleeper", "command": ["sleep", "120"] }),
    )
    .await;
    let a = start(&c, "sleeper", "a", &parent).await;
    let b = start(&c, "sleeper", "b", &parent).await;
    let a_session = c
        .call("get_agent_result", json!({ "run_id": a }))
        .await
        .unwrap()["run"]["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    let cmd = tokio::process::Command::new(BIN).configure(|cmd| {
        cmd.arg("--data-dir")
            .arg(&d.layout.data_dir)
            .arg("mcp")
            .env("TROUPE_RUNTIME_DIR", &d.layout.runtime_dir)
            .env("TROUPE_SESSION_ID", &a_session)
            .env("TROUPE_LOG", "warn");
    });
    let m = ().serve(TokioChildProcess::new(cmd).unwrap()).await.unwrap();
    let tools = m.list_all_tools().await.unwrap();
    let list = tools.iter().find(|t| t.name == "list_agents").unwrap();
    let props = list.input_schema.get("properties").unwrap();
    assert!(props.get("parent_session_id").is_none(), "{props:?}");
    assert!(props.get("session_id").is_none(), "{props:?}");
    let listed = m
        .call_tool(
            CallToolRequestParams::new("list_agents")
                .with_arguments(json!({ "active_only": true }).as_object().unwrap().clone()),
        )
        .await
        .unwrap();
    let text = listed
        .content
        .first()
        .and_then(|c| c.as_text())
        .map(|t| t.text.clone())
        .unwrap();
    let runs: Value = serde_json::from_str(&text).unwrap();
    let ids: Vec<&str> = runs["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec![b.as_str()], "its sibling, not itself: {text}");
    m.cancel().await.unwrap();
    for run in [a, b] {
        c.call("cancel_agent", json!({ "run_id": run }))
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_editor_drops_a_request_when_its_run_ends() {
    let s = Scenario::new().await;
    let (d, c, project) = (&s.daemon, &s.person, &s.project);
    // Its request to write in its checkout waits for the person (the box would let it through).
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
    let asked = c
        .call(
            "request_permission",
            json!({ "session_id": session, "tool_name": "write_file", "file_path": "README.md",
                    "input": {}, "wait_ms": 0 }),
        )
        .await
        .unwrap();
    let project_dir = std::fs::canonicalize(project).unwrap();
    let mut lsp =
        crate::lsp_client::LspClient::start(Path::new(BIN), &d.layout, &project_dir, "warn")
            .await
            .unwrap();
    let uri = format!("file://{}", project_dir.join("README.md").display());
    let shown = |m: &Value| {
        m["method"] == "textDocument/publishDiagnostics"
            && m["params"]["uri"] == uri
            && m["params"]["diagnostics"]
                .as_array()
                .is_some_and(|d| d.iter().any(|x| x["code"] == asked["approval_id"]))
    };
    tokio::time::timeout(std::time::Duration::from_secs(60), lsp.until(shown))
        .await
        .expect("the request shown")
        .unwrap();
    c.call("cancel_agent", json!({ "run_id": run }))
        .await
        .unwrap();
    tokio::time::timeout(
        std::time::Duration::from_secs(60),
        lsp.until(|m| {
            m["method"] == "textDocument/publishDiagnostics"
                && m["params"]["uri"] == uri
                && m["params"]["diagnostics"] == json!([])
        }),
    )
    .await
    .expect("the expired request dropped from the editor")
    .unwrap();
    lsp.stop().await.unwrap();
}
