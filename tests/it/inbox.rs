//! One inbox: an item of each kind that waits for a person — a pending approval, a paused role,
//! an escalated task, a decision the person votes on, a best-of-N pick, a merge conflict left by
//! a landing — appears once in `list_inbox` and in `subscribe_inbox`, and goes when it is
//! answered, from either door (the socket or the WebSocket). Bad input gets named errors.

use serde_json::{Value, json};
use troupe::client::Client;

use crate::landing::attempt;
use crate::scenario::Puppet::{Commits, Crashes};
use crate::scenario::Scenario;
use crate::support::{TestDaemon, define, inbox, launch, party_end, register, repo, wait_for};

/// The inbox's items of `kind`, once there is exactly one.
async fn one_of(c: &Client, project: &str, kind: &str) -> Value {
    wait_for(&format!("one {kind} in the inbox"), 60, || async {
        let of: Vec<Value> = inbox(c, project)
            .await
            .into_iter()
            .filter(|i| i["kind"] == kind)
            .collect();
        (of.len() == 1).then(|| of[0].clone())
    })
    .await
}

/// Reads the subscription until it pushes an inbox that satisfies the condition (60 s at most).
macro_rules! pushed_until {
    ($feed:expr, $what:expr, $done:expr) => {{
        let done = $done;
        let seen = tokio::time::timeout(std::time::Duration::from_secs(60), async {
            while let Some(Ok(pushed)) = $feed.next().await {
                if done(&pushed) {
                    return true;
                }
            }
            false
        })
        .await;
        assert_eq!(seen, Ok(true), "the subscription never pushed {}", $what);
    }};
}

/// Answers an item literally as it describes: `answer.op` with `answer.params` and, if it has
/// a `choice_field`, the choice there.
async fn answer(door: &Client, item: &Value, choice: Option<Value>) {
    let mut params = item["answer"]["params"].clone();
    if let (Some(field), Some(choice)) = (item["answer"]["choice_field"].as_str(), choice) {
        params[field] = choice;
    }
    door.call(item["answer"]["op"].as_str().unwrap(), params)
        .await
        .unwrap_or_else(|e| panic!("answering {item}: {e}"));
}

async fn gone(c: &Client, project: &str, item_id: &str) {
    wait_for(&format!("{item_id} to leave the inbox"), 30, || async {
        (!inbox(c, project)
            .await
            .iter()
            .any(|i| i["item_id"] == item_id))
        .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_of_item_appears_once_and_goes_when_answered_from_any_door() {
    let s = Scenario::new().await;
    let (c, project) = (&s.person, &s.project);
    let ws = s.daemon.ws_client().await;
    let mut feed = c
        .subscribe(
            "subscribe_inbox",
            json!({ "cwd": project }),
            "unsubscribe_inbox",
        )
        .await
        .unwrap();
    let first = feed.next().await.unwrap().unwrap();
    assert_eq!(first["items"], json!([]), "the current state first");

    // A merge conflict: two members change the same lines; the landing leaves b out.
    s.party(
        "clash",
        &[
            ("a", Commits("README.md", "# a's readme")),
            ("b", Commits("README.md", "# b's readme")),
        ],
    )
    .await;
    let clash = s.launch("clash").await;
    s.ended(&clash).await;
    let landed = s.land(&clash).await;
    assert_eq!(landed["members"][1]["outcome"], "conflict", "{landed}");

    // A paused role, and in that party a decision for the person and an escalated task.
    s.puppet("crasher", Crashes(3)).await;
    define(
        c,
        "party",
        json!({ "name": "stuck", "roles": { "w": { "agent": "crasher", "on_crash": "pause" } } }),
    )
    .await;
    let stuck = launch(c, "stuck", project).await;
    let paused = one_of(c, project, "paused_role").await;
    c.call(
        "propose_decision",
        json!({ "party_id": stuck, "topic": "which database", "options": ["sqlite", "postgres"],
                    "voters": ["person"], "window_secs": 3600 }),
    )
    .await
    .unwrap();
    let task = c
        .call(
            "create_task",
            json!({ "party_id": stuck, "title": "Review the parser" }),
        )
        .await
        .unwrap();
    c.call(
        "escalate_task",
        json!({ "task_id": task["task_id"], "reason": "a human should look" }),
    )
    .await
    .unwrap();

    // A best-of-two role with no judge.
    define(
        c,
        "agent",
        json!({ "name": "attempt", "command": [attempt(s.dir())], "isolation": "worktree" }),
    )
    .await;
    define(
        c,
        "party",
        json!({ "name": "duo", "roles": { "dev": { "agent": "attempt", "count": 2, "pick": {} } } }),
    )
    .await;
    let duo = launch(c, "duo", project).await;
    party_end(c, &duo, 60).await;

    // A pending approval.
    let worker = register(c, "codex", project, None).await;
    let asked = c
        .call(
            "request_permission",
            json!({ "session_id": worker, "tool_name": "shell", "input": { "command": "make" }, "wait_ms": 0 }),
        )
        .await
        .unwrap();

    // One of each, each once, each saying how it is answered.
    let items = wait_for("six items", 60, || async {
        let items = s.inbox().await;
        (items.len() == 6).then_some(items)
    })
    .await;
    let mut kinds: Vec<&str> = items.iter().map(|i| i["kind"].as_str().unwrap()).collect();
    kinds.sort_unstable();
    assert_eq!(
        kinds,
        [
            "approval",
            "decision",
            "escalation",
            "merge_conflict",
            "paused_role",
            "pick"
        ],
        "{items:?}"
    );
    let item = |kind: &str| items.iter().find(|i| i["kind"] == kind).unwrap().clone();
    assert_eq!(item("approval")["answer"]["op"], "decide_approval");
    assert_eq!(
        item("approval")["answer"]["params"]["approval_id"],
        asked["approval_id"]
    );
    assert_eq!(item("decision")["answer"]["op"], "vote");
    assert_eq!(
        item("decision")["answer"]["choices"],
        json!(["sqlite", "postgres"])
    );
    assert_eq!(item("pick")["answer"]["choices"], json!([0, 1]));
    assert!(
        item("merge_conflict")["detail"]
            .as_str()
            .unwrap()
            .contains("README.md")
    );
    assert_eq!(paused["answer"]["op"], "signal_role");
    // The subscription caught up with all six.
    pushed_until!(feed, "six items", |p: &Value| {
        p["items"].as_array().is_some_and(|i| i.len() == 6)
    });

    // Each answered as the item itself says (its op, params and one of its choices), from
    // either door; each goes, and only it.
    for (kind, door, choice) in [
        ("approval", &ws, Some(json!("approve"))),
        ("decision", c, Some(json!("sqlite"))),
        ("pick", &ws, Some(json!(1))),
        ("escalation", &ws, None),
        ("merge_conflict", c, None),
        ("paused_role", c, Some(json!("abort"))),
    ] {
        let it = item(kind);
        if let Some(choice) = &choice {
            assert!(
                it["answer"]["choices"].as_array().unwrap().contains(choice),
                "{it}"
            );
        }
        answer(door, &it, choice).await;
        gone(c, project, it["item_id"].as_str().unwrap()).await;
    }
    assert_eq!(inbox(c, project).await, Vec::<Value>::new());
    pushed_until!(feed, "an empty inbox", |p: &Value| p["items"] == json!([]));
    // The same task escalated again after its item was dismissed: a new item.
    c.call(
        "escalate_task",
        json!({ "task_id": task["task_id"], "reason": "still unsure" }),
    )
    .await
    .unwrap();
    let again = one_of(c, project, "escalation").await;
    assert_ne!(again["item_id"], item("escalation")["item_id"]);
    assert_eq!(again["detail"], "still unsure");
    answer(&ws, &again, None).await;
    gone(c, project, again["item_id"].as_str().unwrap()).await;

    // Bad input, named: an item that is not there, one answered otherwise.
    let e = c
        .call("dismiss_inbox_item", json!({ "item_id": "approval:nope" }))
        .await
        .expect_err("unknown item");
    assert_eq!(e.kind(), Some("not_found"), "{e}");
    let again = c
        .call(
            "request_permission",
            json!({ "session_id": worker, "tool_name": "shell", "input": { "command": "rm" }, "wait_ms": 0 }),
        )
        .await
        .unwrap();
    let id = format!("approval:{}", again["approval_id"].as_str().unwrap());
    let e = c
        .call("dismiss_inbox_item", json!({ "item_id": id }))
        .await
        .expect_err("an approval is decided, not dismissed");
    assert!(e.to_string().contains("decide_approval"), "{e}");
    let e = c
        .call("list_inbox", json!({ "cwd": 7 }))
        .await
        .expect_err("bad params");
    assert_eq!(e.kind(), Some("invalid_params"), "{e}");
}

/// A member's process that asks the person a question and exits without waiting for it.
const QUICK_ASKER: &str = r#"#!/bin/sh
troupe call ask_person '{"question":"Ship it on Friday?","wait_ms":0}' >/dev/null
troupe call complete '{"output":"asked"}' >/dev/null
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agents_question_waits_in_the_inbox_until_answered_and_expires_with_its_run() {
    let d = TestDaemon::start();
    let c = d.client().await;
    let project = repo(&d.dir.path().join("proj"));
    let agent = register(&c, "codex", &project, None).await;

    // Bad questions are named.
    for (params, needle) in [
        (json!({ "session_id": agent }), "question is required"),
        (
            json!({ "session_id": agent, "question": "?", "choices": [""] }),
            "is empty",
        ),
        (
            json!({ "session_id": agent, "question": "?", "wait_ms": 10_000_000 }),
            "over the maximum",
        ),
    ] {
        let e = c.call("ask_person", params).await.unwrap_err().to_string();
        assert!(e.contains(needle), "{e}");
    }

    // A question with choices: the asker long-polls; the item offers exactly those choices.
    let asker = d.client().await;
    let (who, a2) = (agent.clone(), asker);
    let waiting = tokio::spawn(async move {
        a2.call(
            "ask_person",
            json!({ "session_id": who, "question": "Which database?",
                    "choices": ["SQLite", "PostgreSQL"], "wait_ms": 60_000 }),
        )
        .await
        .unwrap()
    });
    let item = one_of(&c, &project, "question").await;
    assert_eq!(item["answer"]["op"], "answer_question");
    assert_eq!(item["answer"]["choice_field"], "answer");
    assert_eq!(item["answer"]["choices"], json!(["SQLite", "PostgreSQL"]));
    assert_eq!(item["session_id"], agent.as_str());
    assert!(
        item["title"].as_str().unwrap().contains("Which database?"),
        "{item}"
    );
    let mut wrong = item["answer"]["params"].clone();
    wrong["answer"] = json!("MongoDB");
    let e = c
        .call("answer_question", wrong)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("not one of the question's choices"), "{e}");
    // Answered from another door (the WebSocket): the asker hears it, the item goes.
    let ws = troupe::client::connect_ws(&d.layout).await.unwrap();
    answer(&ws, &item, Some(json!("SQLite"))).await;
    let got = waiting.await.unwrap();
    assert_eq!(got["status"], "answered", "{got}");
    assert_eq!(got["answer"], "SQLite");
    gone(&c, &project, item["item_id"].as_str().unwrap()).await;
    let mut again = item["answer"]["params"].clone();
    again["answer"] = json!("PostgreSQL");
    let e = c
        .call("answer_question", again)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("answered already"), "{e}");

    // Free text: asked without waiting, resumed with its id, answered in the person's words.
    let asked = c
        .call(
            "ask_person",
            json!({ "session_id": agent, "question": "Name the release?", "wait_ms": 0 }),
        )
        .await
        .unwrap();
    assert_eq!(asked["status"], "pending");
    let item = one_of(&c, &project, "question").await;
    assert_eq!(
        item["answer"]["choices"],
        Value::Null,
        "no choices: free text"
    );
    let mut params = item["answer"]["params"].clone();
    params["answer"] = json!("Aurora");
    c.call("answer_question", params).await.unwrap();
    let resumed = c
        .call(
            "ask_person",
            json!({ "session_id": agent, "question_id": asked["question_id"], "wait_ms": 0 }),
        )
        .await
        .unwrap();
    assert_eq!(resumed["answer"], "Aurora");

    // A run's unanswered question expires when the run ends.
    let dir = d.dir.path();
    let script = crate::support::executable(dir, "asker.sh", QUICK_ASKER);
    define(
        &c,
        "agent",
        json!({ "name": "asker", "runner": "process", "command": [script], "timeout_secs": 60 }),
    )
    .await;
    let parent = register(&c, "claude", &project, None).await;
    let run = c
        .call(
            "start_agent",
            json!({ "agent": "asker", "prompt": "ask", "parent_session_id": parent }),
        )
        .await
        .unwrap();
    wait_for("the run's question to expire", 60, || async {
        let events = c
            .call(
                "list_events",
                json!({ "session_id": run["session_id"], "kind": "question_expired" }),
            )
            .await
            .unwrap();
        (!events["events"].as_array().unwrap().is_empty()).then_some(())
    })
    .await;
    assert!(
        inbox(&c, &project)
            .await
            .iter()
            .all(|i| i["kind"] != "question"),
        "an expired question leaves the inbox"
    );
}
