//! The collaboration protocol end to end (seed 004's acceptance criteria): real process members
//! in a real git repository plan, review and commit; steps are executed, reopened by review and
//! handed off; a blocked step raises a decision that is voted, tie-broken and written as an ADR
//! committed on the party's branch; the executor against the mock provider works under a step's
//! tool policy and budget; a session leads the party it launched (`mode: self`). Bad input gets
//! named errors.

use std::path::Path;

use serde_json::{Value, json};
use troupe::client::Client;

use crate::mock_llm::{MockLlm, Reply};
use crate::plugins::{grant_mock, install};
use crate::scenario::Scenario;
use crate::support::{define, git, item, refused, register, wait_for};

/// A member that stays until a message tells it to finish (the test speaks for it, as the MCP
/// door speaks for an agent: with its session).
fn puppet(dir: &Path) -> String {
    let path = dir.join("puppet.sh");
    std::fs::write(
        &path,
        r#"#!/bin/sh
set -e
heard=""
until echo "$heard" | grep -q "finish now"; do
  heard="$heard $(troupe call poll_messages '{"wait_ms":5000}')"
done
troupe call complete "{\"output\":\"$TROUPE_ROLE done\"}" >/dev/null
"#,
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.display().to_string()
}

/// The session of each role's member once all are running.
async fn sessions(
    c: &Client,
    party: &str,
    roles: &[&str],
) -> std::collections::HashMap<String, String> {
    wait_for("every member running", 30, || async {
        let s = c
            .call("get_party_status", json!({ "party_id": party }))
            .await
            .unwrap();
        let members = s["members"].as_array().unwrap();
        let map: std::collections::HashMap<String, String> = members
            .iter()
            .filter(|m| m["status"] == "running" && m["session_id"].is_string())
            .map(|m| {
                (
                    m["role"].as_str().unwrap().to_string(),
                    m["session_id"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        roles.iter().all(|r| map.contains_key(*r)).then_some(map)
    })
    .await
}

fn step(id: &str, owner: &str, deps: &[&str]) -> Value {
    json!({ "id": id, "title": format!("the {id} step"), "owner_role": owner,
            "description": format!("do {id}"), "acceptance": format!("{id} works"),
            "depends_on": deps })
}

async fn inbox(c: &Client, session: &str) -> String {
    let r = c
        .call(
            "poll_messages",
            json!({ "session_id": session, "since": 0, "mark_read": false, "limit": 1000 }),
        )
        .await
        .unwrap();
    r["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap().to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_team_plans_executes_reviews_hands_off_and_records_a_decision_as_an_adr() {
    let scene = Scenario::new().await;
    let (c, project) = (&scene.person, &scene.project);
    let command = puppet(scene.dir());
    define(
        c,
        "agent",
        json!({ "name": "puppet", "command": [command] }),
    )
    .await;
    define(
        c,
        "party",
        json!({ "name": "crew", "roles": {
            "leader": { "agent": "puppet", "is_leader": true },
            "planner": { "agent": "puppet" },
            "dev": { "agent": "puppet" },
            "qa": { "agent": "puppet" } } }),
    )
    .await;
    let party = scene.launch("crew").await;
    let s = sessions(c, &party, &["leader", "planner", "dev", "qa"]).await;
    let status = c
        .call("get_party_status", json!({ "party_id": party }))
        .await
        .unwrap();
    assert_eq!(status["collab_state"], "team_formed", "{status}");

    // Planning: bad plans are refused by name.
    let (kind, msg) = refused(
        c,
        "propose_plan",
        json!({ "party_id": party, "session_id": s["planner"],
                "steps": [step("a", "dev", &["b"]), step("b", "dev", &["a"])] }),
    )
    .await;
    assert_eq!(kind, "invalid_params");
    assert!(msg.contains("form a cycle: a -> b -> a"), "{msg}");
    let (_, msg) = refused(
        c,
        "propose_plan",
        json!({ "party_id": party, "steps": [step("a", "tester", &[])] }),
    )
    .await;
    assert!(msg.contains("the party has no role tester"), "{msg}");
    let outsider = register(c, "claude-code", project, None).await;
    let (kind, _) = refused(
        c,
        "propose_plan",
        json!({ "party_id": party, "session_id": outsider, "steps": [step("a", "dev", &[])] }),
    )
    .await;
    assert_eq!(kind, "forbidden");

    // v1: qa asks for changes, so the leader cannot commit it (and dev may not commit at all).
    let plan = vec![
        step("design", "dev", &[]),
        step("build", "dev", &["design"]),
    ];
    let v1 = c
        .call(
            "propose_plan",
            json!({ "party_id": party, "session_id": s["planner"], "steps": plan }),
        )
        .await
        .unwrap();
    assert_eq!(v1["plan"]["version"], 1);
    let status = c
        .call("get_party_status", json!({ "party_id": party }))
        .await
        .unwrap();
    assert_eq!(status["collab_state"], "planning");
    let (kind, _) = refused(
        c,
        "review_plan",
        json!({ "party_id": party, "session_id": s["planner"], "verdict": "approve" }),
    )
    .await;
    assert_eq!(kind, "forbidden", "a planner does not review its own plan");
    c.call(
        "review_plan",
        json!({ "party_id": party, "session_id": s["qa"], "verdict": "request_changes",
                "comments": "add a test step for me" }),
    )
    .await
    .unwrap();
    let (kind, msg) = refused(
        c,
        "commit_plan",
        json!({ "party_id": party, "session_id": s["leader"] }),
    )
    .await;
    assert_eq!(kind, "conflict");
    assert!(msg.contains("changes requested by qa"), "{msg}");
    let (kind, _) = refused(
        c,
        "commit_plan",
        json!({ "party_id": party, "session_id": s["dev"] }),
    )
    .await;
    assert_eq!(kind, "forbidden");

    // v2 adds the test step; qa approves; the leader commits.
    let plan = vec![
        step("design", "dev", &[]),
        step("build", "dev", &["design"]),
        json!({ "id": "test", "title": "test it", "owner_role": "qa", "acceptance": "green",
                "depends_on": ["build"],
                "tool_policy": { "blocked_tools": ["Bash"], "approve_tools": ["Write"] },
                "budget": { "max_tokens": 1000, "max_files_changed": 10 } }),
    ];
    let v2 = c
        .call(
            "propose_plan",
            json!({ "party_id": party, "session_id": s["planner"], "steps": plan,
                                       "summary": "with a test step" }),
        )
        .await
        .unwrap();
    assert_eq!(v2["plan"]["version"], 2);
    c.call(
        "review_plan",
        json!({ "party_id": party, "session_id": s["qa"], "verdict": "approve" }),
    )
    .await
    .unwrap();
    let committed = c
        .call(
            "commit_plan",
            json!({ "party_id": party, "session_id": s["leader"] }),
        )
        .await
        .unwrap();
    assert_eq!(committed["plan"]["status"], "committed");
    assert_eq!(committed["plan"]["committed_by"], "leader");
    let view = c
        .call("get_plan", json!({ "party_id": party }))
        .await
        .unwrap();
    assert_eq!(view["collab_state"], "executing");
    assert_eq!(view["committed"]["version"], 2);
    assert!(view["draft"].is_null(), "v1 was superseded: {view}");
    let states: Vec<&str> = view["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["pending", "pending", "pending"]);
    assert!(
        inbox(c, &s["dev"])
            .await
            .contains("plan version 2 committed by leader")
    );

    // Execution: dependencies hold; unknown steps and other owners are refused.
    let (kind, msg) = refused(
        c,
        "start_step",
        json!({ "party_id": party, "step_id": "build", "session_id": s["dev"] }),
    )
    .await;
    assert_eq!(kind, "conflict");
    assert!(msg.contains("waits for design"), "{msg}");
    let (kind, _) = refused(
        c,
        "start_step",
        json!({ "party_id": party, "step_id": "nope", "session_id": s["dev"] }),
    )
    .await;
    assert_eq!(kind, "not_found");
    let (kind, _) = refused(
        c,
        "start_step",
        json!({ "party_id": party, "step_id": "design", "session_id": s["qa"] }),
    )
    .await;
    assert_eq!(kind, "forbidden");

    // design: started, submitted, reopened by qa, submitted again, accepted.
    for (op, by, extra) in [
        ("start_step", "dev", json!({})),
        ("submit_step", "dev", json!({ "summary": "a sketch" })),
    ] {
        let mut p = json!({ "party_id": party, "step_id": "design", "session_id": s[by] });
        p.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        c.call(op, p).await.unwrap();
    }
    let (kind, _) = refused(
        c,
        "review_step",
        json!({ "party_id": party, "step_id": "design",
        "session_id": s["dev"], "verdict": "accept" }),
    )
    .await;
    assert_eq!(kind, "forbidden", "an owner does not review its own step");
    let r = c
        .call(
            "review_step",
            json!({ "party_id": party, "step_id": "design", "session_id": s["qa"],
                                      "verdict": "reopen", "reason": "no error handling" }),
        )
        .await
        .unwrap();
    assert_eq!(r["step"]["state"], "reopened");
    assert!(
        inbox(c, &s["dev"])
            .await
            .contains("step design was reopened by qa: no error handling")
    );
    // Submitting again means working on it again first (its policy and budget apply).
    let (kind, _) = refused(
        c,
        "submit_step",
        json!({ "party_id": party, "step_id": "design", "session_id": s["dev"] }),
    )
    .await;
    assert_eq!(
        kind, "conflict",
        "a reopened step is started before it is submitted"
    );
    c.call(
        "start_step",
        json!({ "party_id": party, "step_id": "design", "session_id": s["dev"] }),
    )
    .await
    .unwrap();
    c.call(
        "submit_step",
        json!({ "party_id": party, "step_id": "design", "session_id": s["dev"],
                                  "summary": "with error handling" }),
    )
    .await
    .unwrap();
    let status = c
        .call("get_party_status", json!({ "party_id": party }))
        .await
        .unwrap();
    assert_eq!(status["collab_state"], "executing");
    let r = c
        .call(
            "review_step",
            json!({ "party_id": party, "step_id": "design", "session_id": s["qa"],
                                      "verdict": "accept", "reason": "good" }),
        )
        .await
        .unwrap();
    assert_eq!(r["step"]["state"], "done");
    let (kind, _) = refused(
        c,
        "submit_step",
        json!({ "party_id": party, "step_id": "design", "session_id": s["dev"] }),
    )
    .await;
    assert_eq!(kind, "conflict", "a done step is not submitted again");

    // build: started by dev, handed off to qa with the context so far, submitted by qa,
    // accepted by the leader.
    c.call(
        "start_step",
        json!({ "party_id": party, "step_id": "build", "session_id": s["dev"],
                                 "summary": "half the modules compile" }),
    )
    .await
    .unwrap();
    let r = c
        .call("handoff_step", json!({ "party_id": party, "step_id": "build", "session_id": s["dev"],
                                       "to_role": "qa", "note": "the linker flags are the problem" }))
        .await
        .unwrap();
    assert_eq!(r["step"]["owner_role"], "qa");
    assert_eq!(r["step"]["state"], "in_progress");
    let told = inbox(c, &s["qa"]).await;
    assert!(
        told.contains("step build (the build step) is yours now, handed off by dev"),
        "{told}"
    );
    assert!(
        told.contains("half the modules compile") && told.contains("linker flags"),
        "{told}"
    );
    let (kind, _) = refused(
        c,
        "submit_step",
        json!({ "party_id": party, "step_id": "build", "session_id": s["dev"] }),
    )
    .await;
    assert_eq!(kind, "forbidden", "dev no longer owns it");
    c.call(
        "submit_step",
        json!({ "party_id": party, "step_id": "build", "session_id": s["qa"], "summary": "links" }),
    )
    .await
    .unwrap();
    let status = c
        .call("get_party_status", json!({ "party_id": party }))
        .await
        .unwrap();
    assert_eq!(status["collab_state"], "executing");
    c.call("review_step", json!({ "party_id": party, "step_id": "build", "session_id": s["leader"], "verdict": "accept" }))
        .await
        .unwrap();

    // test: started by qa; its tool policy answers qa's requests; then qa is blocked.
    c.call(
        "start_step",
        json!({ "party_id": party, "step_id": "test", "session_id": s["qa"] }),
    )
    .await
    .unwrap();
    let p = c
        .call(
            "check_tool_policy",
            json!({ "session_id": s["qa"], "tool_name": "Bash" }),
        )
        .await
        .unwrap();
    assert_eq!(p["verdict"], "deny", "{p}");
    let denied = c
        .call(
            "request_permission",
            json!({ "session_id": s["qa"], "tool_name": "Bash",
                                             "input": { "command": "make test" } }),
        )
        .await
        .unwrap();
    assert_eq!(denied["status"], "denied", "{denied}");
    assert!(
        denied["reason"]
            .as_str()
            .unwrap()
            .contains("step test blocks the tool Bash"),
        "{denied}"
    );
    // The same policy answers Claude Code's PreToolUse hook for that member.
    let hook = c
        .call(
            "claude_hook",
            json!({ "session_id": s["qa"], "payload": {
                "hook_event_name": "PreToolUse", "session_id": "qa-claude", "cwd": project,
                "tool_name": "Bash", "tool_input": { "command": "make test" } } }),
        )
        .await
        .unwrap();
    assert_eq!(
        hook["output"]["hookSpecificOutput"]["permissionDecision"], "deny",
        "{hook}"
    );
    assert!(
        hook["output"]["hookSpecificOutput"]["permissionDecisionReason"]
            .as_str()
            .unwrap()
            .contains("step test blocks the tool Bash"),
        "{hook}"
    );
    let p = c
        .call(
            "check_tool_policy",
            json!({ "session_id": s["dev"], "tool_name": "Bash" }),
        )
        .await
        .unwrap();
    assert_eq!(p["verdict"], "default", "dev works on no step: {p}");

    let r = c
        .call(
            "block_step",
            json!({ "party_id": party, "step_id": "test", "session_id": s["qa"],
                                     "blocker": "flaky CI", "options": ["retry", "skip"] }),
        )
        .await
        .unwrap();
    assert_eq!(r["step"]["state"], "blocked");
    let decision = r["decision"]["decision_id"].as_str().unwrap().to_string();
    assert_eq!(
        r["decision"]["voters"],
        json!(["dev", "leader", "planner", "qa"])
    );
    assert_eq!(r["decision"]["topic"], "step test is blocked: flaky CI");
    // Bad votes.
    let (kind, _) = refused(
        c,
        "vote",
        json!({ "decision_id": decision, "option": "maybe", "session_id": s["dev"] }),
    )
    .await;
    assert_eq!(kind, "invalid_params");
    let (kind, msg) = refused(
        c,
        "vote",
        json!({ "decision_id": decision, "option": "retry" }),
    )
    .await;
    assert_eq!(kind, "forbidden", "the person is not a voter here: {msg}");
    assert!(msg.contains("person is not a voter"), "{msg}");
    // Two for each option: the leader's vote breaks the tie.
    for (who, option) in [("planner", "skip"), ("dev", "retry"), ("qa", "skip")] {
        c.call(
            "vote",
            json!({ "decision_id": decision, "option": option, "session_id": s[who],
                               "rationale": format!("{who} thinks so") }),
        )
        .await
        .unwrap();
    }
    let (kind, msg) = refused(
        c,
        "vote",
        json!({ "decision_id": decision, "option": "retry", "session_id": s["dev"] }),
    )
    .await;
    assert_eq!(kind, "conflict");
    assert!(msg.contains("dev has already voted"), "{msg}");
    let last = c
        .call(
            "vote",
            json!({ "decision_id": decision, "option": "retry", "session_id": s["leader"],
                              "rationale": "it passed yesterday" }),
        )
        .await
        .unwrap();
    let dec = &last["decision"];
    assert_eq!(dec["status"], "committed", "{dec}");
    assert_eq!(dec["chosen"], "retry");
    assert!(
        dec["how"]
            .as_str()
            .unwrap()
            .contains("tie broken by the leader"),
        "{dec}"
    );
    let adr = dec["adr_path"].as_str().unwrap();
    assert!(
        adr.ends_with("docs/adr/0001-step-test-is-blocked-flaky-ci.md"),
        "{adr}"
    );
    let text = std::fs::read_to_string(adr).unwrap();
    assert!(
        text.starts_with("# 1. step test is blocked: flaky CI"),
        "{text}"
    );
    assert!(text.contains("## Decision\n\nretry"), "{text}");
    assert!(
        text.contains("- leader: retry (it passed yesterday)"),
        "{text}"
    );
    // Committed on the party's branch, in the project's repository.
    let branch = git(
        project,
        &[
            "branch",
            "--list",
            "troupe/*adr*",
            "--format=%(refname:short)",
        ],
    );
    let branch = branch.trim();
    assert!(
        branch.starts_with("troupe/crew-") && branch.ends_with("/adr-0"),
        "{branch}"
    );
    let files = scene.git(&["show", "--name-only", "--format=%s", branch]);
    assert!(
        files.contains("ADR 0001: step test is blocked: flaky CI"),
        "{files}"
    );
    assert!(
        files.contains("docs/adr/0001-step-test-is-blocked-flaky-ci.md"),
        "{files}"
    );
    assert_eq!(
        scene.git(&["status", "--porcelain"]),
        "",
        "the person's checkout is untouched"
    );
    // The decision unblocked the step.
    let view = c
        .call("get_plan", json!({ "party_id": party }))
        .await
        .unwrap();
    let test_step = item(&view, "steps", "step_id", "test");
    assert_eq!(test_step["state"], "in_progress", "{test_step}");

    // A decision the person votes on: tied, then the leader chooses; ADR 0002.
    let (kind, _) = refused(
        c,
        "propose_decision",
        json!({ "party_id": party, "topic": "x",
        "options": ["a"], "session_id": s["dev"] }),
    )
    .await;
    assert_eq!(kind, "invalid_params", "one option is no choice");
    let (kind, _) = refused(
        c,
        "propose_decision",
        json!({ "party_id": party, "topic": "x",
        "options": ["a", "b"], "voters": ["ghost"] }),
    )
    .await;
    assert_eq!(kind, "invalid_params");
    let d2 = c
        .call(
            "propose_decision",
            json!({ "party_id": party, "session_id": s["dev"],
            "topic": "Which store", "options": ["sqlite", "postgres"], "evidence": "bench numbers",
            "voters": ["dev", "person"], "window_secs": 600 }),
        )
        .await
        .unwrap();
    let d2 = d2["decision"]["decision_id"].as_str().unwrap().to_string();
    let (kind, _) = refused(
        c,
        "vote",
        json!({ "decision_id": d2, "option": "sqlite", "session_id": s["qa"] }),
    )
    .await;
    assert_eq!(kind, "forbidden", "qa is not a voter on this one");
    c.call(
        "vote",
        json!({ "decision_id": d2, "option": "sqlite", "session_id": s["dev"] }),
    )
    .await
    .unwrap();
    let tied = c
        .call(
            "vote",
            json!({ "decision_id": d2, "option": "postgres", "rationale": "we run it already" }),
        )
        .await
        .unwrap();
    assert_eq!(tied["decision"]["status"], "tied", "{tied}");
    assert!(
        inbox(c, &s["leader"])
            .await
            .contains("is tied between sqlite, postgres")
    );
    let (kind, _) = refused(
        c,
        "commit_decision",
        json!({ "decision_id": d2, "option": "sqlite", "session_id": s["qa"] }),
    )
    .await;
    assert_eq!(kind, "forbidden");
    let chosen = c
        .call(
            "commit_decision",
            json!({ "decision_id": d2, "option": "postgres", "session_id": s["leader"] }),
        )
        .await
        .unwrap();
    assert_eq!(chosen["decision"]["chosen"], "postgres");
    assert!(
        chosen["decision"]["adr_path"]
            .as_str()
            .unwrap()
            .ends_with("docs/adr/0002-which-store.md")
    );
    let (kind, _) = refused(
        c,
        "commit_decision",
        json!({ "decision_id": d2, "option": "sqlite" }),
    )
    .await;
    assert_eq!(kind, "conflict", "committed once");

    // Review: qa submits, the person accepts; every step done.
    c.call(
        "submit_step",
        json!({ "party_id": party, "step_id": "test", "session_id": s["qa"], "summary": "green" }),
    )
    .await
    .unwrap();
    let status = c
        .call("get_party_status", json!({ "party_id": party }))
        .await
        .unwrap();
    assert_eq!(status["collab_state"], "reviewing", "{status}");
    c.call(
        "review_step",
        json!({ "party_id": party, "step_id": "test", "verdict": "accept", "reason": "all green" }),
    )
    .await
    .unwrap();
    let status = c
        .call("get_party_status", json!({ "party_id": party }))
        .await
        .unwrap();
    assert_eq!(status["collab_state"], "completed", "{status}");

    let decisions = c
        .call("list_decisions", json!({ "party_id": party }))
        .await
        .unwrap();
    assert_eq!(decisions["decisions"].as_array().unwrap().len(), 2);
    // The timeline tells the story.
    let events = c
        .call("list_events", json!({ "party_id": party, "limit": 1000 }))
        .await
        .unwrap();
    let kinds: Vec<&str> = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    for k in [
        "plan_proposed",
        "plan_reviewed",
        "plan_committed",
        "step_started",
        "step_submitted",
        "step_reopened",
        "step_accepted",
        "step_handed_off",
        "step_blocked",
        "decision_proposed",
        "decision_voted",
        "decision_tied",
        "decision_committed",
        "adr_written",
        "step_unblocked",
    ] {
        assert!(
            kinds.contains(&k),
            "{k} missing from the timeline: {kinds:?}"
        );
    }
    for who in ["leader", "planner", "dev", "qa"] {
        c.call("send_message", json!({ "from_session_id": outsider, "to_session_id": s[who], "content": "finish now" }))
            .await
            .unwrap();
    }
    let end = scene.ended(&party).await;
    assert_eq!(end["party"]["status"], "completed", "{end}");
    assert_eq!(end["collab_state"], "completed");
    let (kind, _) = refused(
        c,
        "propose_plan",
        json!({ "party_id": party, "steps": [step("z", "dev", &[])] }),
    )
    .await;
    assert_eq!(kind, "conflict", "an ended party takes no new plan");
}

/// A decision nobody finishes voting on closes when its window ends: a majority of the votes
/// cast wins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_closes_when_its_window_ends() {
    let scene = Scenario::new().await;
    let c = &scene.person;
    let command = puppet(scene.dir());
    define(
        c,
        "agent",
        json!({ "name": "puppet", "command": [command] }),
    )
    .await;
    define(
        c,
        "party",
        json!({ "name": "pair", "roles": {
        "a": { "agent": "puppet" }, "b": { "agent": "puppet" }, "c": { "agent": "puppet" } } }),
    )
    .await;
    let party = scene.launch("pair").await;
    let s = sessions(c, &party, &["a", "b", "c"]).await;
    let dec = c
        .call(
            "propose_decision",
            json!({ "party_id": party, "session_id": s["a"], "topic": "tabs or spaces",
            "options": ["tabs", "spaces"], "window_secs": 1 }),
        )
        .await
        .unwrap();
    let id = dec["decision"]["decision_id"].as_str().unwrap().to_string();
    c.call(
        "vote",
        json!({ "decision_id": id, "option": "spaces", "session_id": s["b"] }),
    )
    .await
    .unwrap();
    let done = wait_for("the window to close", 30, || async {
        let r = c
            .call("list_decisions", json!({ "party_id": party }))
            .await
            .unwrap();
        let d = r["decisions"][0].clone();
        (d["status"] == "committed" && d["adr_path"].is_string()).then_some(d)
    })
    .await;
    assert_eq!(done["chosen"], "spaces");
    assert!(
        done["how"].as_str().unwrap().contains("1 of 3 voted"),
        "{done}"
    );
    c.call("cancel_party", json!({ "party_id": party }))
        .await
        .unwrap();
}

/// `launch_party {mode: "self"}`: the launching session is the leader — no process is started
/// for it; it gets the leader's tools, hears completions, commits the plan, and completes the
/// party's leader role with `complete`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_leads_the_party_it_launched() {
    let scene = Scenario::new().await;
    let (c, project) = (&scene.person, &scene.project);
    let worker = scene.dir().join("worker.sh");
    std::fs::write(
        &worker,
        "#!/bin/sh\ntroupe call complete '{\"output\":\"built\"}' >/dev/null\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&worker, std::fs::Permissions::from_mode(0o755)).unwrap();
    define(
        c,
        "agent",
        json!({ "name": "never-started", "command": ["/bin/false"] }),
    )
    .await;
    define(
        c,
        "agent",
        json!({ "name": "worker", "command": [worker.display().to_string()] }),
    )
    .await;
    define(
        c,
        "party",
        json!({ "name": "mine", "roles": {
        "lead": { "agent": "never-started", "is_leader": true },
        "dev": { "agent": "worker" } },
        "flow": { "dev": ["lead:signal"] } }),
    )
    .await;
    let me = register(c, "claude-code", project, None).await;
    let (kind, msg) = refused(
        c,
        "launch_party",
        json!({ "name": "mine", "cwd": project, "mode": "self" }),
    )
    .await;
    assert_eq!(kind, "invalid_params");
    assert!(msg.contains("created_by_session_id"), "{msg}");
    let r = c
        .call(
            "launch_party",
            json!({ "name": "mine", "cwd": project, "mode": "self",
                                       "created_by_session_id": me }),
        )
        .await
        .unwrap();
    let party = r["party_id"].as_str().unwrap().to_string();
    let s = c
        .call("get_party_status", json!({ "party_id": party }))
        .await
        .unwrap();
    let lead = s["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "lead")
        .unwrap()
        .clone();
    assert_eq!(lead["session_id"], me.as_str(), "{s}");
    assert_eq!(lead["status"], "running");
    let run = c
        .call("get_agent_result", json!({ "run_id": lead["run_id"] }))
        .await
        .unwrap();
    assert_eq!(run["run"]["definition"]["runner"], "attached", "{run}");
    assert_eq!(run["run"]["pgid"], Value::Null, "no process was started");
    // It leads: it commits a plan and signals the phase.
    c.call(
        "propose_plan",
        json!({ "party_id": party, "session_id": me, "steps": [step("ship", "dev", &[])] }),
    )
    .await
    .unwrap();
    c.call(
        "commit_plan",
        json!({ "party_id": party, "session_id": me }),
    )
    .await
    .unwrap();
    c.call(
        "signal_role",
        json!({ "party_id": party, "role_name": "dev", "signal": "proceed" }),
    )
    .await
    .unwrap();
    wait_for("the leader to hear dev complete", 30, || async {
        inbox(c, &me)
            .await
            .contains("role dev completed")
            .then_some(())
    })
    .await;
    let (kind, _) = refused(
        c,
        "launch_party",
        json!({ "name": "mine", "cwd": project, "mode": "self",
        "created_by_session_id": me }),
    )
    .await;
    assert_eq!(kind, "conflict", "one party at a time");
    c.call("complete", json!({ "session_id": me, "output": "shipped" }))
        .await
        .unwrap();
    let end = crate::support::party_end(c, &party, 30).await;
    assert_eq!(end["party"]["status"], "completed", "{end}");
}

/// The executor works on a step under its tool policy (a blocked tool is denied and logged, an
/// allowed one approved without a person) and its budget (over it, the step is blocked and the
/// member paused, not crashed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(troupe_test_tools),
    ignore = "drives a real tool scripts/test installs: run with TROUPE_TEST_TOOLS=1"
)]
async fn an_executor_works_under_its_steps_tool_policy_and_budget() {
    let scene = Scenario::new().await;
    let (d, c, project) = (&scene.daemon, &scene.person, &scene.project);
    install(d, "executor-openai").await;
    let mock = MockLlm::start(vec![
        Reply::tool("run_command", json!({ "command": "rm -rf build" })),
        Reply::tool(
            "write_file",
            json!({ "path": "notes.md", "content": "hello" }),
        ),
        Reply::tool("read_file", json!({ "path": "README.md" })),
        Reply::tool("read_file", json!({ "path": "README.md" })),
        Reply::tool("complete", json!({ "summary": "never reached" })),
    ]);
    grant_mock(c, "executor-openai", &mock, "/v1").await;
    let command = puppet(scene.dir());
    define(
        c,
        "agent",
        json!({ "name": "puppet", "command": [command] }),
    )
    .await;
    define(
        c,
        "agent",
        json!({ "name": "coder", "runner": "wasm:executor-openai", "model": "mock-gpt" }),
    )
    .await;
    define(
        c,
        "party",
        json!({ "name": "exec", "roles": {
        "lead": { "agent": "puppet", "is_leader": true },
        "dev": { "agent": "coder", "prompt": "Write notes.md." } },
        "flow": { "dev": ["lead:signal"] } }),
    )
    .await;
    let party = scene.launch("exec").await;
    let s = sessions(c, &party, &["lead"]).await;
    c.call("propose_plan", json!({ "party_id": party, "session_id": s["lead"], "steps": [{
        "id": "notes", "title": "write the notes", "owner_role": "dev",
        "tool_policy": { "allowed_tools": ["write_file", "read_file"], "blocked_tools": ["run_command"] },
        "budget": { "max_tokens": 40 } }] }))
        .await
        .unwrap();
    c.call("commit_plan", json!({ "party_id": party }))
        .await
        .unwrap();
    c.call(
        "start_step",
        json!({ "party_id": party, "step_id": "notes" }),
    )
    .await
    .unwrap();
    c.call(
        "signal_role",
        json!({ "party_id": party, "role_name": "dev", "signal": "proceed" }),
    )
    .await
    .unwrap();
    let st = wait_for("the member to pause on the step's budget", 60, || async {
        let s = c
            .call("get_party_status", json!({ "party_id": party }))
            .await
            .unwrap();
        let dev = s["members"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["role"] == "dev")
            .cloned()?;
        (dev["status"] == "paused").then_some(s)
    })
    .await;
    let dev = st["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "dev")
        .unwrap()
        .clone();
    assert_eq!(dev["crash_count"], 0, "{st}");
    let approvals = c
        .call("list_approvals", json!({ "party_id": party }))
        .await
        .unwrap();
    let approvals = approvals["approvals"].as_array().unwrap();
    let of = |tool: &str| {
        approvals
            .iter()
            .find(|a| a["tool_name"] == tool)
            .cloned()
            .unwrap_or_else(|| panic!("no {tool} in {approvals:?}"))
    };
    let rm = of("run_command");
    assert_eq!(rm["status"], "denied", "{rm}");
    assert!(
        rm["reason"]
            .as_str()
            .unwrap()
            .contains("step notes blocks the tool run_command"),
        "{rm}"
    );
    let write = of("write_file");
    assert_eq!(write["status"], "approved", "{write}");
    assert_eq!(write["rule_id"], "step:notes", "{write}");
    assert_eq!(
        std::fs::read_to_string(Path::new(&project).join("notes.md")).unwrap(),
        "hello"
    );
    let view = c
        .call("get_plan", json!({ "party_id": party }))
        .await
        .unwrap();
    let step = &view["steps"][0];
    assert_eq!(step["state"], "blocked", "{view}");
    assert!(
        step["reason"].as_str().unwrap().contains("over its budget"),
        "{step}"
    );
    let events = c
        .call(
            "list_events",
            json!({ "party_id": party, "kind": "step_budget_tripped" }),
        )
        .await
        .unwrap();
    assert_eq!(events["events"].as_array().unwrap().len(), 1, "{events}");
    c.call("cancel_party", json!({ "party_id": party }))
        .await
        .unwrap();
}
