//! Operations in process (`crate::harness::Core`): messaging, the person's powers refused to an
//! agent, a question through the inbox and the store's change feed, and bad params, each in
//! milliseconds.

use serde_json::json;
use troupe_api::ApiError;
use troupe_store::Topic;

use crate::harness::Core;

fn kind(e: &ApiError) -> &'static str {
    e.code_and_kind().1
}

#[tokio::test]
async fn messages_reach_their_recipient_once_in_order() {
    let core = Core::start().await;
    let a = core.session("claude", "proj").await;
    let b = core.session("codex", "proj").await;
    for text in ["one", "two", "three"] {
        core.call_as(
            Core::agent(&a),
            "send_message",
            json!({ "from_session_id": a, "to_session_id": b, "content": text }),
        )
        .await
        .unwrap();
    }
    let poll = || {
        core.call_as(
            Core::agent(&b),
            "poll_messages",
            json!({ "session_id": b, "mark_read": true }),
        )
    };
    let polled = poll().await.unwrap();
    let got: Vec<&str> = polled["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(got, ["one", "two", "three"]);
    let again = poll().await.unwrap();
    assert_eq!(again["messages"], json!([]), "read once");
    // An agent may not read another session's messages.
    let e = core
        .call_as(Core::agent(&a), "poll_messages", json!({ "session_id": b }))
        .await
        .unwrap_err();
    assert_eq!(kind(&e), "forbidden", "{e}");
    core.stop().await;
}

#[tokio::test]
async fn a_question_waits_in_the_inbox_until_the_person_answers_and_only_the_person_may() {
    let core = Core::start().await;
    let agent = core.session("claude", "proj").await;
    let cwd = core.dir.path().join("proj").display().to_string();
    let mut inbox_changed = core.daemon.store.changes(Topic::Inbox);
    let asked = core
        .call_as(
            Core::agent(&agent),
            "ask_person",
            json!({ "session_id": agent, "question": "which port?", "choices": ["80", "8080"],
                    "wait_ms": 0 }),
        )
        .await
        .unwrap();
    assert_eq!(asked["status"], "pending");
    assert!(
        inbox_changed.has_changed().unwrap(),
        "the store announced the inbox's change"
    );
    inbox_changed.borrow_and_update();
    let inbox = core
        .call("list_inbox", json!({ "cwd": cwd }))
        .await
        .unwrap();
    let items = inbox["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{inbox}");
    assert_eq!(items[0]["kind"], "question");
    let answer = json!({ "question_id": asked["question_id"], "answer": "8080" });
    // The agent that asked may not answer for the person.
    let e = core
        .call_as(Core::agent(&agent), "answer_question", answer.clone())
        .await
        .unwrap_err();
    assert_eq!(kind(&e), "forbidden", "{e}");
    core.call("answer_question", answer).await.unwrap();
    assert!(inbox_changed.has_changed().unwrap());
    let inbox = core
        .call("list_inbox", json!({ "cwd": cwd }))
        .await
        .unwrap();
    assert_eq!(inbox["items"], json!([]));
    let heard = core
        .call_as(
            Core::agent(&agent),
            "ask_person",
            json!({ "session_id": agent, "question_id": asked["question_id"], "wait_ms": 0 }),
        )
        .await
        .unwrap();
    assert_eq!(
        (heard["status"].as_str(), heard["answer"].as_str()),
        (Some("answered"), Some("8080"))
    );
    core.stop().await;
}

#[tokio::test]
async fn bad_params_and_unknown_operations_are_named() {
    let core = Core::start().await;
    let e = core
        .call("list_parties", json!({ "status": "asleep" }))
        .await
        .unwrap_err();
    assert_eq!(kind(&e), "invalid_params");
    assert!(e.to_string().contains("asleep"), "{e}");
    let e = core
        .call("send_message", json!({ "content": 3 }))
        .await
        .unwrap_err();
    assert_eq!(kind(&e), "invalid_params", "{e}");
    let e = core.call("no_such_op", json!({})).await.unwrap_err();
    assert_eq!(kind(&e), "not_found", "{e}");
    let e = core
        .call("get_party_status", json!({ "party_id": "nope" }))
        .await
        .unwrap_err();
    assert_eq!(kind(&e), "not_found", "{e}");
    core.stop().await;
}

/// `gc`'s age is bounded: one past SQLite's dates (the fuzzer's `2461373`, before the year 0)
/// is refused by name with the range allowed, not answered with a store failure; the largest
/// allowed age works, dry and for real.
#[tokio::test]
async fn gc_refuses_an_age_past_its_bound_and_takes_the_largest_allowed() {
    let core = Core::start().await;
    core.session("claude", "proj").await;
    for age in [json!(2_461_373), json!(36_500.5), json!(1e300), json!(-1)] {
        let e = core
            .call("gc", json!({ "max_age_days": age }))
            .await
            .unwrap_err();
        assert_eq!(
            e.code_and_kind(),
            (troupe_api::error::codes::INVALID_PARAMS, "invalid_params"),
            "{e}"
        );
        let text = e.to_string();
        assert!(
            text.contains("gc") && text.contains("max_age_days") && text.contains("36500"),
            "{text}"
        );
    }
    for dry_run in [true, false] {
        let done = core
            .call("gc", json!({ "max_age_days": 36_500, "dry_run": dry_run }))
            .await
            .unwrap();
        assert_eq!(done["max_age_days"], 36_500.0, "{done}");
        assert_eq!(done["dry_run"], dry_run, "{done}");
        assert_eq!(
            done["sessions"], 0,
            "nothing is a hundred years old: {done}"
        );
    }
    core.stop().await;
}
