//! One agent session across turns, with our scripted ACP agent (`troupe-dev scripted-acp-agent`,
//! script `rounds`): a party member whose turn ends without `complete` while it still has a part
//! in the plan is prompted again in the same session with the messages that came for it; the
//! person takes over a running agent (`prompt_agent`: its turn cancelled, the person's text as
//! the next turn, the answer returned, then the task resumed); a paused ACP member's turn is
//! cancelled and resumed in its session when let go.

use std::path::Path;

use serde_json::{Value, json};
use troupe::client::Client;

use crate::support::{TestDaemon, define, launch, register, repo, shares, wait_for};

/// An `acp:scripted` agent running the `rounds` script, recording what it receives in `record`
/// (in the test's shared dir, which its box is given).
fn rounds_agent(name: &str, record: &Path) -> Value {
    let def = json!({
        "name": name,
        "runner": "acp:scripted",
        "command": [crate::support::DEV_BIN, "scripted-acp-agent"],
        "isolation": "worktree",
        "env": {
            "TROUPE_ACP_SCRIPT": "rounds",
            "TROUPE_ACP_FIRST_WAITS": "1",
            "TROUPE_ACP_RECORD": record.display().to_string(),
        },
        "acp": { "auth_method": "gateway", "base_url": "http://127.0.0.1:9/anthropic" },
    });
    shares(def, &[record.parent().unwrap()])
}

/// What the agent received, one JSON message per line.
fn received(record: &Path) -> Vec<Value> {
    std::fs::read_to_string(record)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The prompts' texts, in order.
fn prompts(record: &Path) -> Vec<String> {
    received(record)
        .iter()
        .filter(|m| m["method"] == "session/prompt")
        .map(|m| {
            m["params"]["prompt"][0]["text"]
                .as_str()
                .unwrap_or("")
                .to_string()
        })
        .collect()
}

fn count(record: &Path, method: &str) -> usize {
    received(record)
        .iter()
        .filter(|m| m["method"] == method)
        .count()
}

async fn run_of(c: &Client, party: &str, role: &str) -> (String, String) {
    wait_for(&format!("{role}'s run"), 60, || async {
        let s = c
            .call("get_party_status", json!({ "party_id": party }))
            .await
            .unwrap();
        let m = s["members"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["role"] == role)?
            .clone();
        Some((
            m["run_id"].as_str()?.to_string(),
            m["session_id"].as_str()?.to_string(),
        ))
    })
    .await
}

async fn prompted(record: &Path, what: &str, n: usize) -> Vec<String> {
    wait_for(what, 60, || async {
        let p = prompts(record);
        (p.len() >= n).then_some(p)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acp_member_keeps_its_session_across_rounds_and_the_person_takes_it_over_and_pauses_it()
{
    let d = TestDaemon::start();
    let c = d.client().await;
    let dir = d.dir.path();
    let shared = d.shared();
    let (lead_log, dev_log) = (shared.join("lead.jsonl"), shared.join("dev.jsonl"));
    define(&c, "agent", rounds_agent("lead-acp", &lead_log)).await;
    define(&c, "agent", rounds_agent("dev-acp", &dev_log)).await;
    define(
        &c,
        "party",
        json!({ "name": "steered", "roles": {
            "lead": { "agent": "lead-acp", "is_leader": true, "playbook": "none" },
            "dev": { "agent": "dev-acp", "playbook": "none" } } }),
    )
    .await;
    let project = repo(&dir.join("proj"));
    let party = launch(&c, "steered", &project).await;
    let (lead_run, _) = run_of(&c, &party, "lead").await;
    let (dev_run, dev_session) = run_of(&c, &party, "dev").await;
    prompted(&lead_log, "the lead's first turn", 1).await;
    prompted(&dev_log, "the dev's first turn", 1).await;

    // Paused mid-turn: the lead's turn is cancelled, and nothing more is said to it while held.
    let held = c
        .call("pause_party", json!({ "party_id": party, "role": "lead" }))
        .await
        .unwrap();
    assert_eq!(held["members"], json!(["lead#0"]), "{held}");
    assert_eq!(held["skipped"], json!([]), "{held}");
    wait_for("the lead's turn cancelled", 60, || async {
        (count(&lead_log, "session/cancel") >= 1).then_some(())
    })
    .await;

    // The person takes the developer over mid-turn: its turn is cancelled, the person's text is
    // its next turn in the same session, the answer comes back, then it goes on with its task.
    let answer = c
        .call(
            "prompt_agent",
            json!({ "run_id": dev_run, "text": "What are you working on?" }),
        )
        .await
        .unwrap();
    assert_eq!(answer["answered"], true, "{answer}");
    assert_eq!(
        answer["answer"], "turn 2: What are you working on?",
        "{answer}"
    );
    assert_eq!(answer["stop_reason"], "end_turn", "{answer}");
    assert!(count(&dev_log, "session/cancel") >= 1);
    let p = prompted(&dev_log, "the dev resumed", 3).await;
    assert_eq!(p[1], "What are you working on?");
    assert_eq!(p[2], "Go on with your task where you left off.");

    // Its words are in its own log, as they come.
    wait_for("the dev's words in its log", 60, || async {
        let log = c
            .call("get_run_log", json!({ "run_id": dev_run }))
            .await
            .unwrap();
        let text = log["text"].as_str().unwrap_or_default().to_string();
        (text.contains("[agent] Working on it, until cancelled.")
            && text.contains("[agent] turn 2: What are you working on?"))
        .then_some(())
    })
    .await;

    // A plan gives the developer a step: its turns that end without `complete` are followed by
    // rounds in the same session, each with the messages that came for it.
    c.call(
        "propose_plan",
        json!({ "party_id": party, "steps": [{
            "id": "s1", "title": "Write the notes", "owner_role": "dev",
            "acceptance": "notes.md says hello" }] }),
    )
    .await
    .unwrap();
    c.call("commit_plan", json!({ "party_id": party, "force": true }))
        .await
        .unwrap();
    let person = register(&c, "human", &project, None).await;
    c.call(
        "send_message",
        json!({ "from_session_id": person, "to_session_id": dev_session,
                "content": "Please also update the README." }),
    )
    .await
    .unwrap();
    let p = wait_for("the person's message in a round", 60, || async {
        let p = prompts(&dev_log);
        p.iter()
            .any(|t| t.contains("Please also update the README."))
            .then_some(p)
    })
    .await;
    let round = p
        .iter()
        .find(|t| t.contains("Please also update the README."))
        .unwrap();
    assert!(round.starts_with("Messages came for you:"), "{round}");
    assert!(round.contains("Your step s1 is pending"), "{round}");
    assert_eq!(count(&dev_log, "session/new"), 1, "one session throughout");
    let r = c
        .call("get_agent_result", json!({ "run_id": dev_run }))
        .await
        .unwrap();
    assert_eq!(r["run"]["status"], "running", "{r}");

    // Held, the lead heard nothing more; let go, its cancelled turn is resumed in its session.
    assert_eq!(prompts(&lead_log).len(), 1, "{:?}", prompts(&lead_log));
    c.call("resume_party", json!({ "party_id": party, "role": "lead" }))
        .await
        .unwrap();
    let p = prompted(&lead_log, "the lead resumed", 2).await;
    assert_eq!(p[1], "Go on with your task where you left off.");
    // Between its rounds (the plan is not done), the person asks it something.
    let answer = wait_for("the lead's answer", 60, || async {
        let a = c
            .call(
                "prompt_agent",
                json!({ "run_id": lead_run, "text": "Status, please?" }),
            )
            .await
            .unwrap();
        Some(a)
    })
    .await;
    // (Its turn number depends on the rounds the plan's messages gave it meanwhile.)
    let said = answer["answer"].as_str().unwrap_or_default();
    assert!(
        said.starts_with("turn ") && said.ends_with(": Status, please?"),
        "{answer}"
    );
    assert!(prompts(&lead_log).contains(&"Status, please?".to_string()));
    assert_eq!(count(&lead_log, "session/new"), 1, "one session throughout");
    let events = c
        .call("list_events", json!({ "party_id": party, "limit": 1000 }))
        .await
        .unwrap();
    let kinds: Vec<&str> = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["kind"].as_str())
        .collect();
    for kind in [
        "member_held",
        "member_released",
        "agent_interrupted",
        "agent_round",
        "agent_prompted",
    ] {
        assert!(kinds.contains(&kind), "{kind} missing: {kinds:?}");
    }

    // Only the person takes an agent over; a run that keeps no session says so.
    let e = c
        .call(
            "prompt_agent",
            json!({ "run_id": "no-such-run", "text": "hi" }),
        )
        .await
        .unwrap_err();
    assert_eq!(e.kind(), Some("not_found"), "{e}");
    c.call("cancel_party", json!({ "party_id": party }))
        .await
        .unwrap();
    let s = crate::support::party_end(&c, &party, 60).await;
    assert_eq!(s["party"]["status"], "cancelled", "{s}");
    let e = c
        .call(
            "prompt_agent",
            json!({ "run_id": dev_run, "text": "still there?" }),
        )
        .await
        .unwrap_err();
    assert_eq!(e.kind(), Some("invalid_params"), "{e}");
}
