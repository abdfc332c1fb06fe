//! ACP members through the real daemon, with our scripted ACP agent (`troupe-dev
//! scripted-acp-agent`) as the agent process: permission requests decided as Troupe approvals
//! (approve, deny, approve pattern), `fs/*` and `terminal/*` inside the worktree, the wire the
//! agent saw, updates on the timeline; an agent that crashes, hangs, ignores SIGTERM, writes
//! garbage or floods; and a whole party (leader → 2 developers in worktrees → qa) with a crash
//! restarted and a cancel.

use std::path::Path;

use serde_json::{Value, json};
use troupe::client::Client;

use crate::support::{
    TestDaemon, asks_for_in_box_requests, define, inbox_question, launch, no_question_left,
    party_end, pending_approval, register, repo, shares, start, wait_for, wait_run,
};

/// An `acp:scripted` agent running `script`, recording what it receives into `record` (in the
/// test's shared dir, which its box is given: the host's /tmp is not there for it).
fn scripted(name: &str, script: &str, record: &Path, extra: Value) -> Value {
    let mut def = json!({
        "name": name,
        "runner": "acp:scripted",
        "command": [crate::support::DEV_BIN, "scripted-acp-agent"],
        "isolation": "worktree",
        "env": { "TROUPE_ACP_SCRIPT": script, "TROUPE_ACP_RECORD": record.display().to_string() },
        "acp": { "auth_method": "gateway", "base_url": "http://127.0.0.1:9/anthropic" },
    });
    if let (Value::Object(d), Value::Object(e)) = (&mut def, extra) {
        for (k, v) in e {
            d.insert(k, v);
        }
    }
    shares(def, &[record.parent().unwrap()])
}

/// What the agent received, one JSON message per line.
fn received(record: &Path) -> Vec<Value> {
    std::fs::read_to_string(record)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn by_method<'a>(msgs: &'a [Value], method: &str) -> Vec<&'a Value> {
    msgs.iter().filter(|m| m["method"] == method).collect()
}

async fn events(c: &Client, session: &str) -> Vec<Value> {
    let e = c
        .call(
            "list_events",
            json!({ "session_id": session, "limit": 1000 }),
        )
        .await
        .unwrap();
    e["events"].as_array().unwrap().clone()
}

fn kinds(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["kind"].as_str().unwrap().to_string())
        .collect()
}

async fn decide(c: &Client, approval: &Value, decision: Value) {
    let mut params = json!({ "approval_id": approval["approval_id"] });
    if let (Value::Object(p), Value::Object(d)) = (&mut params, decision) {
        p.extend(d);
    }
    c.call("decide_approval", params).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acp_member_asks_troupe_before_it_writes_and_its_turn_lands_on_the_timeline() {
    let d = TestDaemon::start();
    let c = d.client().await;
    let dir = d.dir.path();
    let project = repo(&dir.join("proj"));
    // The person decides the agent's writes in its own checkout (the box would let them
    // through without asking).
    asks_for_in_box_requests(&project);
    let parent = register(&c, "test", &project, None).await;

    // 1. Approved: the agent writes in its worktree through fs/write_text_file.
    let record = d.shared().join("write.jsonl");
    define(&c, "agent", scripted("writer", "write", &record, json!({}))).await;
    let run_id = start(&c, "writer", "Write the notes.", &parent).await;
    let approval = pending_approval(&c).await;
    assert_eq!(approval["tool_name"], "write_file", "{approval}");
    assert_eq!(approval["run_id"], run_id, "{approval}");
    let file_path = approval["file_path"].as_str().unwrap().to_string();
    assert!(file_path.ends_with("/NOTES.md"), "{approval}");
    assert!(
        !file_path.starts_with(&project),
        "a worktree, not the checkout: {file_path}"
    );
    // The edit the request shows, for the guardrails to count.
    assert_eq!(
        approval["input"]["diffs"],
        json!([{ "type": "diff", "path": file_path, "oldText": null,
                 "newText": "Written by the scripted ACP agent.\n" }]),
        "{approval}"
    );
    decide(&c, &approval, json!({ "decision": "approve" })).await;
    let run = wait_run(&c, &run_id).await;
    assert_eq!(run["run"]["status"], "success", "{run}");
    let workdir = run["run"]["workdir"].as_str().unwrap();
    assert_eq!(
        std::fs::read_to_string(Path::new(workdir).join("NOTES.md")).unwrap(),
        "Written by the scripted ACP agent.\n"
    );
    // The last message of the turn is the result; `wc -c` ran in the worktree's terminal.
    assert_eq!(
        run["run"]["result"]["output"], "Wrote NOTES.md (35 NOTES.md).",
        "{run}"
    );

    // What the agent saw: capabilities, gateway auth, its worktree, Troupe's MCP server.
    let msgs = received(&record);
    let init = by_method(&msgs, "initialize")[0];
    assert_eq!(init["params"]["protocolVersion"], 1);
    let caps = &init["params"]["clientCapabilities"];
    assert_eq!(
        caps["fs"],
        json!({ "readTextFile": true, "writeTextFile": true })
    );
    assert_eq!(caps["terminal"], true);
    assert_eq!(caps["auth"]["_meta"]["gateway"], true);
    let auth = by_method(&msgs, "authenticate")[0];
    assert_eq!(auth["params"]["methodId"], "gateway");
    assert_eq!(
        auth["params"]["_meta"]["gateway"]["baseUrl"],
        "http://127.0.0.1:9/anthropic"
    );
    let new = by_method(&msgs, "session/new")[0];
    assert_eq!(
        Path::new(new["params"]["cwd"].as_str().unwrap()),
        Path::new(workdir).canonicalize().unwrap()
    );
    let mcp = &new["params"]["mcpServers"][0];
    assert_eq!(mcp["name"], "troupe");
    assert_eq!(mcp["args"], json!(["mcp"]));
    assert!(
        mcp["command"].as_str().unwrap().ends_with("/troupe"),
        "{mcp}"
    );
    let session = run["run"]["session_id"].as_str().unwrap();
    assert!(
        mcp["env"]
            .as_array()
            .unwrap()
            .contains(&json!({ "name": "TROUPE_SESSION_ID", "value": session })),
        "{mcp}"
    );
    let prompt = &by_method(&msgs, "session/prompt")[0]["params"]["prompt"][0];
    assert!(
        prompt["text"]
            .as_str()
            .unwrap()
            .starts_with("Write the notes.")
    );
    // Its string request ids came back exactly (it exits 7 otherwise), the permission was
    // answered with the option of kind allow_once.
    let answers: Vec<&Value> = msgs
        .iter()
        .filter(|m| m.get("id").is_some() && m.get("method").is_none())
        .collect();
    assert!(
        answers
            .iter()
            .any(|a| a["id"] == "session/request_permission#1-ü"
                && a["result"]["outcome"] == json!({ "outcome": "selected", "optionId": "allow" }))
    );

    let timeline = events(&c, session).await;
    let k = kinds(&timeline);
    for want in [
        "agent_started",
        "agent_plan",
        "agent_message",
        "agent_tool_call",
    ] {
        assert!(k.iter().any(|x| x == want), "{want} missing from {k:?}");
    }
    let started = timeline
        .iter()
        .find(|e| e["kind"] == "agent_started")
        .unwrap();
    assert_eq!(started["data"]["name"], "troupe-scripted-agent");
    let messages: Vec<&str> = timeline
        .iter()
        .filter(|e| e["kind"] == "agent_message")
        .map(|e| e["data"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(
        messages,
        ["I will write NOTES.md.", "Wrote NOTES.md (35 NOTES.md)."]
    );
    let calls: Vec<&Value> = timeline
        .iter()
        .filter(|e| e["kind"] == "agent_tool_call")
        .map(|e| &e["data"])
        .collect();
    assert_eq!(calls.len(), 2, "started and completed: {calls:?}");
    assert_eq!(calls[0]["kind"], "edit");
    assert_eq!(calls[1]["status"], "completed");

    // 2. Denied: nothing is written, the turn still ends (the agent was told no).
    let record = d.shared().join("deny.jsonl");
    define(&c, "agent", scripted("denied", "write", &record, json!({}))).await;
    let run_id = start(&c, "denied", "Write the notes.", &parent).await;
    let approval = pending_approval(&c).await;
    decide(&c, &approval, json!({ "decision": "deny" })).await;
    let run = wait_run(&c, &run_id).await;
    assert_eq!(run["run"]["status"], "success", "{run}");
    assert_eq!(
        run["run"]["result"]["output"],
        "Permission refused (reject): nothing written."
    );
    assert!(
        !Path::new(run["run"]["workdir"].as_str().unwrap())
            .join("NOTES.md")
            .exists()
    );

    // 3. Approve pattern: the agent gets allow (once: its own "always" could be wider than the
    // rule), and the rule answers its next asks without a person.
    let record = d.shared().join("pattern.jsonl");
    define(
        &c,
        "agent",
        scripted("patterned", "write", &record, json!({})),
    )
    .await;
    let run_id = start(&c, "patterned", "Write the notes.", &parent).await;
    let approval = pending_approval(&c).await;
    decide(
        &c,
        &approval,
        json!({ "decision": "approve_pattern", "pattern": "*NOTES.md", "scope": "project" }),
    )
    .await;
    assert_eq!(wait_run(&c, &run_id).await["run"]["status"], "success");
    let msgs = received(&record);
    assert!(
        msgs.iter().any(
            |m| m["result"]["outcome"] == json!({ "outcome": "selected", "optionId": "allow" })
        )
    );
    assert!(
        !msgs
            .iter()
            .any(|m| m["result"]["outcome"]["optionId"] == "allow_always")
    );
    let run_id = start(&c, "patterned", "Again.", &parent).await;
    let run = wait_run(&c, &run_id).await;
    assert_eq!(run["run"]["status"], "success", "{run}");
    let asked = c
        .call(
            "list_approvals",
            json!({ "session_id": run["run"]["session_id"] }),
        )
        .await
        .unwrap();
    assert_eq!(asked["approvals"][0]["status"], "approved", "{asked}");
    assert!(
        asked["approvals"][0]["rule_id"].is_string(),
        "answered by the rule: {asked}"
    );
    assert!(
        Path::new(run["run"]["workdir"].as_str().unwrap())
            .join("NOTES.md")
            .exists()
    );

    // 4. A blocked tool is refused by the workflow without asking anyone.
    let record = d.shared().join("blocked.jsonl");
    define(
        &c,
        "agent",
        scripted(
            "blocked",
            "write",
            &record,
            json!({ "workflow": { "blocked_tools": ["write_file"] } }),
        ),
    )
    .await;
    let run_id = start(&c, "blocked", "Write the notes.", &parent).await;
    let run = wait_run(&c, &run_id).await;
    assert_eq!(
        run["run"]["result"]["output"], "Permission refused (reject): nothing written.",
        "{run}"
    );
    let pending = c
        .call("list_approvals", json!({ "status": "pending" }))
        .await
        .unwrap();
    assert_eq!(pending["approvals"], json!([]));
}

fn pid_alive(pid: i64) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    !stat.is_empty()
        && stat
            .rsplit_once(')')
            .is_some_and(|(_, r)| !r.trim_start().starts_with('Z'))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acp_agents_that_crash_hang_misbehave_or_flood_do_not_hurt_the_daemon() {
    let d = TestDaemon::start();
    let c = d.client().await;
    let dir = d.dir.path();
    let project = repo(&dir.join("proj"));
    // The person decides the agent's writes in its own checkout (the box would let them
    // through without asking).
    asks_for_in_box_requests(&project);
    let parent = register(&c, "test", &project, None).await;
    let record = d.shared().join("r.jsonl");

    // Crash mid-turn: the exit status is the run's error.
    define(
        &c,
        "agent",
        scripted("crasher", "crash", &record, json!({})),
    )
    .await;
    let run = wait_run(&c, &start(&c, "crasher", "go", &parent).await).await;
    assert_eq!(run["run"]["status"], "crashed", "{run}");
    assert_eq!(run["run"]["error"], "exit status 3", "{run}");

    // Hang: no word for idle_secs mid-turn counts as a crash; the agent is gone.
    define(
        &c,
        "agent",
        scripted(
            "hanger",
            "hang",
            &record,
            json!({ "acp": { "idle_secs": 1 } }),
        ),
    )
    .await;
    let run = wait_run(&c, &start(&c, "hanger", "go", &parent).await).await;
    assert_eq!(run["run"]["status"], "crashed", "{run}");
    assert!(
        run["run"]["error"].as_str().unwrap().contains("hung"),
        "{run}"
    );
    assert!(!pid_alive(run["run"]["pid"].as_i64().unwrap()));

    // Ignores SIGTERM too: the run's timeout ends it, SIGKILL takes it.
    define(
        &c,
        "agent",
        scripted(
            "stubborn",
            "hang-hard",
            &record,
            json!({ "timeout_secs": 1 }),
        ),
    )
    .await;
    let run = wait_run(&c, &start(&c, "stubborn", "go", &parent).await).await;
    assert_eq!(run["run"]["status"], "timeout", "{run}");
    assert!(!pid_alive(run["run"]["pid"].as_i64().unwrap()));

    // Garbage lines, an unknown notification, update kind and request: ignored or refused,
    // and the turn goes on (approved through a rule made on the way).
    let record_bad = d.shared().join("bad.jsonl");
    define(
        &c,
        "agent",
        scripted("garbled", "malformed", &record_bad, json!({})),
    )
    .await;
    let run_id = start(&c, "garbled", "go", &parent).await;
    let approval = pending_approval(&c).await;
    decide(&c, &approval, json!({ "decision": "approve" })).await;
    let run = wait_run(&c, &run_id).await;
    assert_eq!(run["run"]["status"], "success", "{run}");
    let unknown = received(&record_bad)
        .into_iter()
        .find(|m| m["id"] == "_x/unknown_request#1-ü")
        .unwrap();
    assert_eq!(unknown["error"]["code"], -32601, "{unknown}");
    assert_eq!(run["usage"]["cost_usd"], 0.25, "{run}");

    // A flood: 20000 chunks around 4 tool calls, joined into a few bounded messages.
    define(
        &c,
        "agent",
        scripted("flooder", "flood", &record, json!({})),
    )
    .await;
    let run = wait_run(&c, &start(&c, "flooder", "go", &parent).await).await;
    assert_eq!(run["run"]["status"], "success", "{run}");
    // The last message (how the stream was split depends on the pauses the machine makes).
    let output = run["run"]["result"]["output"].as_str().unwrap();
    assert!(output.starts_with("chunk 1"), "{output}");
    assert!(output.len() <= 16 * 1024 + 64, "{}", output.len());
    let session = run["run"]["session_id"].as_str().unwrap();
    let timeline = events(&c, session).await;
    let calls = timeline
        .iter()
        .filter(|e| e["kind"] == "agent_tool_call")
        .count();
    assert_eq!(calls, 4);
    let messages: Vec<&str> = timeline
        .iter()
        .filter(|e| e["kind"] == "agent_message")
        .map(|e| e["data"]["text"].as_str().unwrap())
        .collect();
    assert!(messages.len() >= 5, "{} messages", messages.len());
    // Each is bounded; the first segments (5,000 chunks, ~55 KiB) were cut.
    assert!(messages.iter().all(|m| m.len() <= 16 * 1024 + 64));
    assert!(messages.iter().any(|m| m.ends_with("[…]")));
    // The daemon still answers.
    c.call("daemon_status", json!({})).await.unwrap();

    // Stopped while its permission request waits for a person: the request is answered
    // `cancelled` (as the protocol asks), the run ends cancelled, and the request, which
    // nobody waits for any more, is expired rather than left pending.
    let record_stop = d.shared().join("stop.jsonl");
    define(
        &c,
        "agent",
        scripted("asker", "write", &record_stop, json!({})),
    )
    .await;
    let run_id = start(&c, "asker", "go", &parent).await;
    let approval = pending_approval(&c).await;
    c.call("cancel_agent", json!({ "run_id": run_id }))
        .await
        .unwrap();
    let run = wait_run(&c, &run_id).await;
    assert_eq!(run["run"]["status"], "cancelled", "{run}");
    // The row says cancelled at once; the agent hears of it a moment later (under load, a
    // while later): wait for the answer rather than for a time.
    wait_for("the waiting request answered cancelled", 30, || async {
        received(&record_stop)
            .iter()
            .any(|m| m["result"]["outcome"] == json!({ "outcome": "cancelled" }))
            .then_some(())
    })
    .await;
    let a = c
        .call("list_approvals", json!({ "include_expired": true }))
        .await
        .unwrap();
    let a = a["approvals"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["approval_id"] == approval["approval_id"])
        .cloned()
        .unwrap();
    assert_eq!(a["status"], "expired", "{a}");
    let pid = run["run"]["pid"].as_i64().unwrap();
    wait_for("the asker's process gone", 30, || async {
        (!pid_alive(pid)).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_party_of_acp_agents_runs_with_a_crash_restarted_and_is_cancelled() {
    let d = TestDaemon::start();
    let c = d.client().await;
    let dir = d.dir.path();
    let project = repo(&dir.join("proj"));
    let record = d.shared().join("party.jsonl");
    define(
        &c,
        "agent",
        scripted("acp-lead", "write", &record, json!({ "isolation": "none" })),
    )
    .await;
    define(
        &c,
        "agent",
        scripted(
            "acp-dev",
            "crash-once",
            &record,
            json!({ "env": { "TROUPE_ACP_SCRIPT": "crash-once", "TROUPE_ACP_RECORD": record.display().to_string(), "TROUPE_ACP_FILE": "feature.txt", "TROUPE_ACP_CONTENT": "feature\n" } }),
        ),
    )
    .await;
    define(
        &c,
        "agent",
        scripted(
            "acp-qa",
            "write",
            &record,
            json!({ "env": { "TROUPE_ACP_FILE": "qa.txt" } }),
        ),
    )
    .await;
    define(
        &c,
        "party",
        json!({
            "name": "acp-team",
            "roles": {
                "leader": { "agent": "acp-lead", "is_leader": true, "prompt": "Plan the work." },
                "developer": { "agent": "acp-dev", "count": 2, "on_crash": "restart", "retry_attempts": 2, "prompt": "Build it." },
                "qa": { "agent": "acp-qa", "prompt": "Check it." }
            },
            "flow": { "developer": ["leader"], "qa": ["developer"] }
        }),
    )
    .await;
    let party = launch(&c, "acp-team", &project).await;
    // The leader's write is approved with a pattern for the whole project: the members'
    // later writes are answered by the rule.
    let approval = pending_approval(&c).await;
    decide(
        &c,
        &approval,
        json!({ "decision": "approve_pattern", "pattern": "*", "scope": "project" }),
    )
    .await;
    let s = party_end(&c, &party, 60).await;
    assert_eq!(s["party"]["status"], "completed", "{s}");
    let members = s["members"].as_array().unwrap();
    let devs: Vec<&Value> = members
        .iter()
        .filter(|m| m["role"] == "developer")
        .collect();
    assert_eq!(devs.len(), 2);
    let mut dirs = Vec::new();
    for dev in devs {
        assert_eq!(dev["status"], "completed", "{dev}");
        assert_eq!(dev["crash_count"], 1, "{dev}");
        assert_eq!(dev["attempts"], 2, "{dev}");
        let workdir = dev["workdir"].as_str().unwrap();
        assert_eq!(
            std::fs::read_to_string(Path::new(workdir).join("feature.txt")).unwrap(),
            "feature\n"
        );
        dirs.push(workdir.to_string());
    }
    assert_ne!(dirs[0], dirs[1], "each developer has its own worktree");
    // The leader works in the checkout itself (isolation none).
    assert!(Path::new(&project).join("NOTES.md").exists());

    // Cancel mid-turn: the agents get session/cancel and the party stops.
    define(
        &c,
        "agent",
        scripted(
            "acp-waiter",
            "wait",
            &record,
            json!({ "isolation": "none" }),
        ),
    )
    .await;
    define(
        &c,
        "party",
        json!({ "name": "acp-wait", "roles": { "worker": { "agent": "acp-waiter", "count": 2 } } }),
    )
    .await;
    let party = launch(&c, "acp-wait", &project).await;
    let running = wait_for("both waiters to start", 30, || async {
        let s = c
            .call("get_party_status", json!({ "party_id": party }))
            .await
            .unwrap();
        let ms = s["members"].as_array().unwrap().clone();
        (ms.len() == 2 && ms.iter().all(|m| m["run_id"].is_string())).then_some(ms)
    })
    .await;
    // Both are mid-turn once their first message is on the timeline.
    for m in &running {
        let session = m["session_id"].as_str().unwrap().to_string();
        wait_for("the waiter's first message", 30, || async {
            events(&c, &session)
                .await
                .iter()
                .any(|e| e["kind"] == "agent_message")
                .then_some(())
        })
        .await;
    }
    c.call("cancel_party", json!({ "party_id": party }))
        .await
        .unwrap();
    let s = party_end(&c, &party, 30).await;
    assert_eq!(s["party"]["status"], "cancelled", "{s}");
    for m in s["members"].as_array().unwrap() {
        assert_eq!(m["status"], "cancelled", "{m}");
        let run = wait_run(&c, m["run_id"].as_str().unwrap()).await;
        assert_eq!(run["run"]["status"], "cancelled", "{run}");
        assert!(!pid_alive(run["run"]["pid"].as_i64().unwrap()), "{run}");
    }
    let cancels = by_method(&received(&record), "session/cancel").len();
    assert!(cancels >= 2, "{cancels} session/cancel seen");
}

/// kill -9 of the daemon mid-turn: the restarted daemon cannot talk to the orphaned agent (its
/// stdio went with the old daemon), so it kills it and counts the run crashed; the party's
/// recovery restarts the member, which finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acp_member_is_restarted_after_a_kill_9_of_the_daemon() {
    let mut d = TestDaemon::start();
    let c = d.client().await;
    let dir = d.dir.path().to_path_buf();
    let project = repo(&dir.join("proj"));
    // The person decides the agent's writes in its own checkout (the box would let them
    // through without asking).
    asks_for_in_box_requests(&project);
    let record = d.shared().join("k.jsonl");
    define(
        &c,
        "agent",
        scripted(
            "sturdy",
            "write",
            &record,
            json!({ "env": { "TROUPE_ACP_SCRIPT": "write", "TROUPE_ACP_FIRST_SCRIPT": "hang",
                             "TROUPE_ACP_RECORD": record.display().to_string() } }),
        ),
    )
    .await;
    define(
        &c,
        "party",
        json!({ "name": "sturdy", "roles": { "dev": { "agent": "sturdy", "on_crash": "restart" } } }),
    )
    .await;
    let party = launch(&c, "sturdy", &project).await;
    let first = wait_for("the first attempt to be mid-turn", 30, || async {
        let s = c
            .call("get_party_status", json!({ "party_id": party }))
            .await
            .unwrap();
        let m = s["members"][0].clone();
        let session = m["session_id"].as_str()?.to_string();
        let said = events(&c, &session)
            .await
            .iter()
            .any(|e| e["kind"] == "agent_message");
        said.then_some(m)
    })
    .await;
    let run = c
        .call("get_agent_result", json!({ "run_id": first["run_id"] }))
        .await
        .unwrap();
    let pid = run["run"]["pid"].as_i64().unwrap();
    assert!(pid_alive(pid));
    drop(c);
    d.kill9();
    d.spawn();
    let c = d.client().await;
    let approval = pending_approval(&c).await;
    assert!(!pid_alive(pid), "the orphaned agent was stopped");
    decide(&c, &approval, json!({ "decision": "approve" })).await;
    let s = party_end(&c, &party, 60).await;
    assert_eq!(s["party"]["status"], "completed", "{s}");
    let member = &s["members"][0];
    assert_eq!(
        (member["attempts"].clone(), member["crash_count"].clone()),
        (json!(2), json!(1)),
        "{s}"
    );
    let old = c
        .call("get_agent_result", json!({ "run_id": first["run_id"] }))
        .await
        .unwrap();
    assert_eq!(old["run"]["status"], "crashed", "{old}");
    assert_eq!(
        old["run"]["error"], "the daemon driving this ACP agent stopped",
        "{old}"
    );
}

/// An `elicit` agent `name` with one more variable in its environment (its form, or when to
/// withdraw it).
async fn form_agent(c: &Client, name: &str, record: &Path, (key, value): (&str, String)) {
    let mut env = json!({ "TROUPE_ACP_SCRIPT": "elicit",
                          "TROUPE_ACP_RECORD": record.display().to_string() });
    env[key] = json!(value);
    define(
        c,
        "agent",
        scripted(name, "elicit", record, json!({ "env": env })),
    )
    .await;
}

async fn answer_with(c: &Client, item: &Value, answer: &str) {
    let mut params = item["answer"]["params"].clone();
    params["answer"] = json!(answer);
    c.call("answer_question", params).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acp_members_form_is_asked_in_the_inbox_a_field_at_a_time() {
    let d = TestDaemon::start();
    let c = d.client().await;
    let dir = d.dir.path();
    let project = repo(&dir.join("proj"));
    let parent = register(&c, "test", &project, None).await;
    let record = d.shared().join("elicit.jsonl");
    define(&c, "agent", scripted("asker", "elicit", &record, json!({}))).await;

    // Filled in: the required fields first, a wrong kind of answer asked again.
    let run_id = start(&c, "asker", "Push the branch.", &parent).await;
    let branch = inbox_question(&c, &project, "(1/3) Branch name").await;
    let title = branch["title"].as_str().unwrap();
    assert!(
        title.contains("Before I push, I need a few details."),
        "{title}"
    );
    assert!(title.contains("Answer /decline to refuse."), "{title}");
    assert_eq!(
        branch["answer"]["choices"],
        Value::Null,
        "free text: {branch}"
    );
    answer_with(&c, &branch, "feature/login").await;
    let remote = inbox_question(&c, &project, "(2/3) Remote").await;
    assert_eq!(
        remote["answer"]["choices"],
        json!(["Origin", "Upstream", "/decline"])
    );
    answer_with(&c, &remote, "Upstream").await;
    let retries = inbox_question(&c, &project, "(3/3) Retries: how often to try again").await;
    assert!(
        retries["title"]
            .as_str()
            .unwrap()
            .contains("Optional: - leaves it out"),
        "{retries}"
    );
    answer_with(&c, &retries, "a few").await;
    let again = inbox_question(&c, &project, "is not a whole number: answer again").await;
    answer_with(&c, &again, "3").await;
    let run = wait_run(&c, &run_id).await;
    assert_eq!(run["run"]["status"], "success", "{run}");
    let output = run["run"]["result"]["output"].as_str().unwrap();
    let came_back: Value =
        serde_json::from_str(output.trim_start_matches("The form came back: ")).unwrap();
    assert_eq!(
        came_back,
        json!({ "action": "accept",
                "content": { "branch": "feature/login", "remote": "upstream", "retries": 3 } })
    );
    // The agent was told it may ask (form mode), and the timeline says it did.
    let msgs = received(&record);
    let init = by_method(&msgs, "initialize")[0];
    assert_eq!(
        init["params"]["clientCapabilities"]["elicitation"],
        json!({ "form": {} })
    );
    let session = run["run"]["session_id"].as_str().unwrap();
    let asked = events(&c, session).await;
    let elicitation = asked
        .iter()
        .find(|e| e["kind"] == "agent_elicitation")
        .unwrap_or_else(|| panic!("{:?}", kinds(&asked)));
    assert_eq!(
        elicitation["data"]["fields"],
        json!(["branch", "remote", "retries"])
    );

    // Declined at its first field: the agent hears `decline`, nothing is left in the inbox.
    let run_id = start(&c, "asker", "Push the branch.", &parent).await;
    let branch = inbox_question(&c, &project, "(1/3) Branch name").await;
    answer_with(&c, &branch, "/decline").await;
    let run = wait_run(&c, &run_id).await;
    assert_eq!(
        run["run"]["result"]["output"], r#"The form came back: {"action":"decline"}"#,
        "{run}"
    );

    // A form without fields is asked as accept or decline.
    let empty = json!({ "message": "Shall I force-push?",
                        "requestedSchema": { "type": "object", "properties": {} } });
    form_agent(
        &c,
        "confirmer",
        &record,
        ("TROUPE_ACP_FORM", empty.to_string()),
    )
    .await;
    let run_id = start(&c, "confirmer", "Push.", &parent).await;
    let confirm = inbox_question(&c, &project, "Shall I force-push?").await;
    assert_eq!(confirm["answer"]["choices"], json!(["accept", "/decline"]));
    answer_with(&c, &confirm, "accept").await;
    let run = wait_run(&c, &run_id).await;
    assert_eq!(
        run["run"]["result"]["output"], r#"The form came back: {"action":"accept","content":{}}"#,
        "{run}"
    );

    // More choices than a question offers: named in the person's words instead.
    let many: serde_json::Map<String, Value> = (0..30)
        .map(|i| (format!("c{i}"), json!(format!("Colour {i}"))))
        .collect();
    let one_of: Vec<Value> = many
        .iter()
        .map(|(k, v)| json!({ "const": k, "title": v }))
        .collect();
    let wide = json!({ "message": "Pick a colour.", "requestedSchema": { "type": "object",
        "required": ["colour"], "properties": { "colour": { "type": "string", "oneOf": one_of } } } });
    form_agent(
        &c,
        "painter",
        &record,
        ("TROUPE_ACP_FORM", wide.to_string()),
    )
    .await;
    let run_id = start(&c, "painter", "Paint.", &parent).await;
    let colour = inbox_question(&c, &project, "(one of: Colour 0, Colour 1").await;
    assert_eq!(colour["answer"]["choices"], Value::Null, "{colour}");
    answer_with(&c, &colour, "colour 17").await;
    let run = wait_run(&c, &run_id).await;
    assert_eq!(
        run["run"]["result"]["output"],
        r#"The form came back: {"action":"accept","content":{"colour":"c17"}}"#,
        "{run}"
    );

    // Withdrawn by the agent while it waits: its question leaves the inbox.
    let marker = d.shared().join("withdraw-now");
    form_agent(
        &c,
        "withdrawer",
        &record,
        ("TROUPE_ACP_WITHDRAW_ON", marker.display().to_string()),
    )
    .await;
    let run_id = start(&c, "withdrawer", "Push.", &parent).await;
    inbox_question(&c, &project, "(1/3) Branch name").await;
    std::fs::write(&marker, "").unwrap();
    let run = wait_run(&c, &run_id).await;
    assert_eq!(
        run["run"]["result"]["output"], r#"The form came back: {"action":"cancel"}"#,
        "{run}"
    );
    no_question_left(
        &c,
        &project,
        "the withdrawn form's question to leave the inbox",
    )
    .await;

    // Unanswered when its run is stopped: the question expires and the inbox is empty.
    let run_id = start(&c, "asker", "Push the branch.", &parent).await;
    inbox_question(&c, &project, "(1/3) Branch name").await;
    c.call("cancel_agent", json!({ "run_id": run_id }))
        .await
        .unwrap();
    no_question_left(
        &c,
        &project,
        "the stopped run's question to leave the inbox",
    )
    .await;
}
