//! Playbooks teach the members the protocol: a party of executors (an LLM API, the mock model
//! server on loopback) is told its part and the party's state as its turn starts, is offered the
//! protocol's tools, and the calls its model makes move the plan in Troupe, as that member. A
//! process member gets the same playbook with `troupe call` as its way to the tools.

use std::path::Path;

use serde_json::{Value, json};

use crate::mock_llm::{MockLlm, Reply};
use crate::plugins::{grant_mock, install};
use crate::scenario::Scenario;
use crate::support::{TestDaemon, define, executable, launch, party_end, repo, shares, wait_for};

/// The names of the tools a model request offered.
fn offered(body: &Value) -> Vec<String> {
    body["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| t["function"]["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// A daemon with the OpenAI executor granted to a mock model that holds each request until a
/// reply is pushed, an agent `gpt` on it, and party `party` (a definition) of it.
async fn executor_world(party: Value) -> (TestDaemon, troupe::client::Client, MockLlm) {
    let d = TestDaemon::start();
    let c = d.client().await;
    install(&d, "executor-openai").await;
    let mock = MockLlm::start(vec![]);
    mock.hold_when_empty();
    grant_mock(&c, "executor-openai", &mock, "/v1").await;
    define(
        &c,
        "agent",
        json!({ "name": "gpt", "runner": "wasm:executor-openai", "model": "mock-gpt" }),
    )
    .await;
    define(&c, "party", party).await;
    (d, c, mock)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(troupe_test_tools),
    ignore = "drives a real tool scripts/test installs: run with TROUPE_TEST_TOOLS=1"
)]
async fn executor_members_are_taught_the_protocol_and_play_it_through_their_tools() {
    let (d, c, mock) = executor_world(json!({ "name": "pair", "roles": {
        "lead": { "agent": "gpt", "is_leader": true },
        "dev": { "agent": "gpt" } },
        "flow": { "dev": ["lead"] } }))
    .await;
    let project = repo(&d.dir.path().join("proj"));
    let party = launch(&c, "pair", &project).await;

    // What the model answers; every protocol call names only the party (the member is its
    // credential's).
    for reply in [
        Reply::tool(
            "propose_plan",
            json!({ "party_id": party, "summary": "one step", "steps": [{
                "id": "notes", "title": "Write the notes", "owner_role": "dev",
                "acceptance": "notes.md says hello" }] }),
        ),
        Reply::tool("commit_plan", json!({ "party_id": party })),
        Reply::tool("complete", json!({ "summary": "planned" })),
        Reply::tool(
            "start_step",
            json!({ "party_id": party, "step_id": "notes" }),
        ),
        Reply::tool(
            "write_file",
            json!({ "path": "notes.md", "content": "hello" }),
        ),
        Reply::tool(
            "submit_step",
            json!({ "party_id": party, "step_id": "notes", "summary": "wrote notes.md" }),
        ),
        Reply::tool("complete", json!({ "summary": "done" })),
    ] {
        mock.push(reply);
    }
    // Writing a file asks the person (the default workflow), as for any member.
    let write = crate::support::pending_approval(&c).await;
    assert_eq!(write["tool_name"], "write_file", "{write}");
    assert_eq!(write["role_name"], "dev", "{write}");
    c.call(
        "decide_approval",
        json!({ "approval_id": write["approval_id"], "decision": "approve" }),
    )
    .await
    .unwrap();
    let end = party_end(&c, &party, 120).await;
    assert_eq!(end["party"]["status"], "completed", "{end}");

    // The plan moved as the models said, each call as its member.
    let plan = c
        .call("get_plan", json!({ "party_id": party }))
        .await
        .unwrap();
    assert_eq!(plan["committed"]["proposed_by"], "lead", "{plan}");
    assert_eq!(plan["committed"]["committed_by"], "lead", "{plan}");
    assert_eq!(plan["steps"][0]["state"], "in_review", "{plan}");
    assert_eq!(plan["steps"][0]["reason"], "wrote notes.md", "{plan}");
    assert_eq!(
        std::fs::read_to_string(Path::new(&project).join("notes.md")).unwrap(),
        "hello"
    );

    // What each was told: its playbook, how to call the tools, the party as its turn started;
    // and offered the protocol's tools.
    let requests = mock.requests();
    let first = |needle: &str| {
        requests
            .iter()
            .find(|r| r.body_text.contains(needle))
            .unwrap_or_else(|| panic!("no model request says {needle:?}"))
    };
    let lead = first("You plan and steer");
    assert!(
        lead.body_text
            .contains("You are lead#0, the lead of a Troupe party")
    );
    assert!(
        lead.body_text
            .contains("Troupe's tools named below are among your tools.")
    );
    assert!(lead.body_text.contains("No plan is committed yet."));
    let tools = offered(&lead.body);
    for tool in [
        "propose_plan",
        "commit_plan",
        "start_step",
        "vote",
        "ask_person",
    ] {
        assert!(tools.iter().any(|t| t == tool), "{tool} not in {tools:?}");
    }
    assert!(
        !lead.body_text.contains("\"session_id\""),
        "the caller's fields are not the model's to fill"
    );
    let dev = first("You build the steps");
    assert!(dev.body_text.contains("The committed plan (v1, 1 steps):"));
    assert!(
        dev.body_text
            .contains("Your step notes is pending; acceptance: notes.md says hello.")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_member_is_told_to_call_troupe_from_its_shell_and_a_project_playbook_wins() {
    let s = Scenario::new().await;
    let (c, project) = (&s.person, &s.project);
    // It writes its prompt where the test reads it: the shared dir, which its box is given.
    let out = s.shared().join("prompt.txt");
    let script = executable(
        s.dir(),
        "tell.sh",
        &format!(
            "#!/bin/sh\nprintf '%s' \"$TROUPE_PROMPT\" > {}\ntroupe call complete '{{\"output\":\"ok\"}}' >/dev/null\n",
            out.display()
        ),
    );
    define(
        c,
        "agent",
        shares(
            json!({ "name": "teller", "command": [script], "instructions": "Tell." }),
            &[&s.shared()],
        ),
    )
    .await;
    define(
        c,
        "party",
        json!({ "name": "tell", "roles": { "qa": { "agent": "teller", "playbook": "tester" } } }),
    )
    .await;
    std::fs::create_dir_all(Path::new(&project).join(".troupe/playbooks")).unwrap();
    std::fs::write(
        Path::new(&project).join(".troupe/playbooks/tester.md"),
        "# The tester\n\nYou, {{member}}, try the build as a user would.\n",
    )
    .unwrap();
    let party = s.launch("tell").await;
    let end = s.ended(&party).await;
    assert_eq!(end["party"]["status"], "completed", "{end}");
    let prompt = wait_for("the member's prompt", 30, || async {
        std::fs::read_to_string(&out).ok()
    })
    .await;
    assert!(
        prompt.starts_with("Call Troupe's tools from your shell: `troupe call <tool>"),
        "{prompt}"
    );
    assert!(
        prompt.contains("You, qa#0, try the build as a user would."),
        "{prompt}"
    );
    assert!(
        prompt.contains("`ask_person`"),
        "the common playbook: {prompt}"
    );
    let (at_playbook, at_instructions) = (
        prompt.find("try the build").unwrap(),
        prompt.find("Tell.").unwrap(),
    );
    assert!(at_playbook < at_instructions, "{prompt}");
    assert!(
        prompt.contains("## The party now\nNo plan is committed yet."),
        "{prompt}"
    );
}

/// A held executor member (`pause_party`) waits at its next tool call, between its model's
/// turns, and goes on once the person lets it go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(troupe_test_tools),
    ignore = "drives a real tool scripts/test installs: run with TROUPE_TEST_TOOLS=1"
)]
async fn a_held_executor_waits_at_its_next_tool_call() {
    let (d, c, mock) =
        executor_world(json!({ "name": "solo", "roles": { "dev": { "agent": "gpt" } } })).await;
    let project = repo(&d.dir.path().join("proj"));
    let party = launch(&c, "solo", &project).await;
    // Its model waits in the mock (nothing to answer yet): the member is running.
    wait_for("the member to run", 60, || async {
        let s = c
            .call("get_party_status", json!({ "party_id": party }))
            .await
            .unwrap();
        (s["members"][0]["run_status"] == "running").then_some(())
    })
    .await;
    let held = c
        .call("pause_party", json!({ "party_id": party }))
        .await
        .unwrap();
    assert_eq!(held["members"], json!(["dev#0"]), "{held}");
    mock.push(Reply::tool("list_files", json!({})));
    mock.push(Reply::tool("complete", json!({ "summary": "listed" })));
    // The model asked for a tool; held, the member does not run it.
    let tool_calls = || async {
        c.call("list_events", json!({ "party_id": party, "limit": 1000 }))
            .await
            .unwrap()["events"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["kind"] == "tool_called")
            .count()
    };
    wait_for("the model's answer to be taken", 60, || async {
        (mock.remaining() < 2).then_some(())
    })
    .await;
    assert_eq!(tool_calls().await, 0, "held: no tool ran");
    c.call("resume_party", json!({ "party_id": party }))
        .await
        .unwrap();
    let end = party_end(&c, &party, 60).await;
    assert_eq!(end["party"]["status"], "completed", "{end}");
    assert!(
        tool_calls().await >= 2,
        "list_files and complete ran once let go"
    );
}
