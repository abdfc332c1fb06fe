//! Peer-to-peer messaging through a real daemon: direct, parent/child, broadcasts, siblings,
//! discovery, long-polls, subscriptions, read state, idempotency and per-recipient order.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{TestDaemon, register};

fn contents(poll: &Value) -> Vec<String> {
    poll["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap().to_string())
        .collect()
}

fn ids(sessions: &Value) -> Vec<String> {
    let mut v: Vec<String> = sessions["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["session_id"].as_str().unwrap().to_string())
        .collect();
    v.sort();
    v
}

#[tokio::test]
async fn siblings_message_each_other_directly_and_poll() {
    // Seed verification 1: two sibling agents, A messages B, B receives via poll_messages.
    let daemon = TestDaemon::start();
    let c = daemon.client().await;
    let project = daemon.project("repo");
    let parent = register(&c, "human", &project, None).await;
    let a = register(&c, "claude", &project, Some(&parent)).await;
    let b = register(&c, "codex", &project, Some(&parent)).await;

    let reg = c
        .call("get_session", json!({ "session_id": a }))
        .await
        .unwrap();
    assert_eq!(reg["session"]["agent_depth"], 1);
    assert_eq!(reg["session"]["parent_session_id"], parent.as_str());

    let sent = c
        .call("send_message", json!({ "from_session_id": a, "to_session_id": b, "content": "hello B", "priority": "urgent" }))
        .await
        .unwrap();
    assert_eq!(sent["to_session_id"], b.as_str());
    assert_eq!(sent["duplicate"], false);

    let polled = c
        .call("poll_messages", json!({ "session_id": b }))
        .await
        .unwrap();
    assert_eq!(contents(&polled), ["hello B"]);
    let m = &polled["messages"][0];
    assert_eq!(m["from_session_id"], a.as_str());
    assert_eq!(m["priority"], "urgent");
    assert_eq!(m["message_type"], "direct");
    assert_eq!(m["message_id"], sent["message_id"]);

    // Polling marked it read: the inbox is empty now, but `since` still finds it.
    let again = c
        .call("poll_messages", json!({ "session_id": b }))
        .await
        .unwrap();
    assert_eq!(contents(&again), Vec::<String>::new());
    let history = c
        .call(
            "poll_messages",
            json!({ "session_id": b, "since": 0, "mark_read": false }),
        )
        .await
        .unwrap();
    assert_eq!(contents(&history), ["hello B"]);
    assert!(history["messages"][0]["read_at"].is_string());

    let siblings = c
        .call("list_siblings", json!({ "session_id": a }))
        .await
        .unwrap();
    assert_eq!(ids(&siblings), std::slice::from_ref(&b));
    let found = c
        .call("discover_agents", json!({ "cwd": project }))
        .await
        .unwrap();
    let mut all = vec![parent.clone(), a.clone(), b.clone()];
    all.sort();
    assert_eq!(ids(&found), all);
    c.call("end_session", json!({ "session_id": b }))
        .await
        .unwrap();
    let found = c
        .call("discover_agents", json!({ "cwd": project }))
        .await
        .unwrap();
    assert_eq!(ids(&found).len(), 2);
    let ended = c
        .call(
            "discover_agents",
            json!({ "cwd": project, "status": "ended" }),
        )
        .await
        .unwrap();
    assert_eq!(ids(&ended), [b]);
}

#[tokio::test]
async fn parent_child_and_broadcasts() {
    let daemon = TestDaemon::start();
    let c = daemon.client().await;
    let project = daemon.project("repo");
    let leader = register(&c, "claude", &project, None).await;
    let kids = [
        register(&c, "codex", &project, Some(&leader)).await,
        register(&c, "gemini", &project, Some(&leader)).await,
    ];
    let grandchild = register(&c, "claude", &project, Some(&kids[0])).await;
    let gc = c
        .call("get_session", json!({ "session_id": grandchild }))
        .await
        .unwrap();
    assert_eq!(gc["session"]["agent_depth"], 2);

    let b = c
        .call(
            "broadcast_to_children",
            json!({ "session_id": leader, "content": "plan" }),
        )
        .await
        .unwrap();
    let mut to: Vec<String> = serde_json::from_value(b["to_session_ids"].clone()).unwrap();
    to.sort();
    let mut expected = kids.to_vec();
    expected.sort();
    assert_eq!(to, expected, "children only, not the grandchild");

    for kid in &kids {
        let p = c
            .call("poll_messages", json!({ "session_id": kid }))
            .await
            .unwrap();
        assert_eq!(contents(&p), ["plan"]);
        assert_eq!(p["messages"][0]["message_type"], "broadcast");
        c.call(
            "send_to_parent",
            json!({ "session_id": kid, "content": format!("done {kid}") }),
        )
        .await
        .unwrap();
    }
    let p = c
        .call("poll_messages", json!({ "session_id": leader }))
        .await
        .unwrap();
    assert_eq!(
        contents(&p),
        [format!("done {}", kids[0]), format!("done {}", kids[1])]
    );
    assert_eq!(p["messages"][0]["message_type"], "to_parent");

    c.call(
        "send_to_child",
        json!({ "session_id": leader, "child_session_id": kids[1], "content": "more tests" }),
    )
    .await
    .unwrap();
    let p = c
        .call("poll_messages", json!({ "session_id": kids[1] }))
        .await
        .unwrap();
    assert_eq!(contents(&p), ["more tests"]);
    assert_eq!(p["messages"][0]["message_type"], "to_child");

    // Party broadcast: sessions registered with a party_id (parties arrive later).
    let p1 = c
        .call(
            "register_session",
            json!({ "cli": "codex", "cwd": project, "party_id": "party-1" }),
        )
        .await
        .unwrap()["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    let p2 = c
        .call(
            "register_session",
            json!({ "cli": "gemini", "cwd": project, "party_id": "party-1" }),
        )
        .await
        .unwrap()["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    let b = c
        .call(
            "broadcast_to_party",
            json!({ "party_id": "party-1", "from_session_id": p1, "content": "sync" }),
        )
        .await
        .unwrap();
    assert_eq!(b["to_session_ids"], json!([p2]));
    let p = c
        .call("poll_messages", json!({ "session_id": p2 }))
        .await
        .unwrap();
    assert_eq!(p["messages"][0]["party_id"], "party-1");
    assert_eq!(p["messages"][0]["message_type"], "party");
    let members = c
        .call(
            "discover_agents",
            json!({ "cwd": project, "party_id": "party-1" }),
        )
        .await
        .unwrap();
    assert_eq!(ids(&members).len(), 2);
}

#[tokio::test]
async fn long_poll_wakes_on_send_and_times_out_empty() {
    let daemon = TestDaemon::start();
    let c = daemon.client().await;
    let sender = daemon.client().await;
    let project = daemon.project("repo");
    let a = register(&c, "claude", &project, None).await;
    let b = register(&c, "codex", &project, None).await;

    let empty = c
        .call("poll_messages", json!({ "session_id": b, "wait_ms": 50 }))
        .await
        .unwrap();
    assert_eq!(contents(&empty), Vec::<String>::new());
    assert_eq!(empty["next_since"], 0);

    let waiting = {
        let b = b.clone();
        tokio::spawn(async move {
            c.call(
                "poll_messages",
                json!({ "session_id": b, "wait_ms": 20_000 }),
            )
            .await
            .unwrap()
        })
    };
    // The poll is parked; the send wakes it (no sleep needed: if the send lands first, the
    // poll finds the message on its first read).
    sender
        .call(
            "send_message",
            json!({ "from_session_id": a, "to_session_id": b, "content": "wake up" }),
        )
        .await
        .unwrap();
    let got = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(contents(&got), ["wake up"]);
}

#[tokio::test]
async fn subscription_pushes_every_message_in_order_and_replays_with_since() {
    let daemon = TestDaemon::start();
    let c = daemon.ws_client().await; // the WebSocket door
    let project = daemon.project("repo");
    let a = register(&c, "claude", &project, None).await;
    let b = register(&c, "codex", &project, None).await;
    c.call(
        "send_message",
        json!({ "from_session_id": a, "to_session_id": b, "content": "before" }),
    )
    .await
    .unwrap();

    let mut sub = c
        .subscribe_messages(json!({ "session_id": b }))
        .await
        .unwrap();
    let senders: Vec<_> = (0..4).map(|_| daemon.client()).collect();
    let mut handles = Vec::new();
    for (i, fut) in senders.into_iter().enumerate() {
        let s = fut.await;
        let (a, b) = (a.clone(), b.clone());
        handles.push(tokio::spawn(async move {
            for j in 0..25 {
                s.call("send_message", json!({ "from_session_id": a, "to_session_id": b, "content": format!("{i}:{j}") }))
                    .await
                    .unwrap();
            }
        }));
    }
    let mut seqs = Vec::new();
    let mut per_sender = vec![Vec::new(); 4];
    while seqs.len() < 100 {
        let m = tokio::time::timeout(Duration::from_secs(10), sub.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_ne!(
            m["content"], "before",
            "a subscription without since starts now"
        );
        seqs.push(m["seq"].as_i64().unwrap());
        let (i, j) = m["content"].as_str().unwrap().split_once(':').unwrap();
        per_sender[i.parse::<usize>().unwrap()].push(j.parse::<u32>().unwrap());
    }
    for h in handles {
        h.await.unwrap();
    }
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "delivery in seq order: {seqs:?}"
    );
    for got in per_sender {
        assert_eq!(
            got,
            (0..25).collect::<Vec<_>>(),
            "each sender's messages in send order"
        );
    }

    // Resuming with `since` replays what came after.
    let mut replay = c
        .subscribe_messages(json!({ "session_id": b, "since": 0 }))
        .await
        .unwrap();
    let first = replay.next().await.unwrap().unwrap();
    assert_eq!(first["content"], "before");

    let err = c
        .subscribe_messages(json!({ "session_id": "ghost" }))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), Some("not_found"));
}

#[tokio::test]
async fn idempotent_sends_and_mark_read() {
    let daemon = TestDaemon::start();
    let c = daemon.client().await;
    let project = daemon.project("repo");
    let a = register(&c, "claude", &project, None).await;
    let b = register(&c, "codex", &project, None).await;

    let first = c
        .call("send_message", json!({ "from_session_id": a, "to_session_id": b, "content": "once", "idempotency_key": "k1" }))
        .await
        .unwrap();
    let retry = c
        .call("send_message", json!({ "from_session_id": a, "to_session_id": b, "content": "once", "idempotency_key": "k1" }))
        .await
        .unwrap();
    assert_eq!(retry["message_id"], first["message_id"]);
    assert_eq!(retry["duplicate"], true);

    for i in 0..3 {
        c.call(
            "send_message",
            json!({ "from_session_id": a, "to_session_id": b, "content": format!("m{i}") }),
        )
        .await
        .unwrap();
    }
    let all = c
        .call(
            "poll_messages",
            json!({ "session_id": b, "mark_read": false }),
        )
        .await
        .unwrap();
    assert_eq!(contents(&all), ["once", "m0", "m1", "m2"]);
    let first_id = all["messages"][0]["message_id"].clone();
    let marked = c
        .call(
            "mark_read",
            json!({ "session_id": b, "message_ids": [first_id] }),
        )
        .await
        .unwrap();
    assert_eq!(marked["marked"], 1);
    let up_to = all["messages"][2]["seq"].clone();
    let marked = c
        .call("mark_read", json!({ "session_id": b, "up_to_seq": up_to }))
        .await
        .unwrap();
    assert_eq!(marked["marked"], 2);
    let rest = c
        .call("poll_messages", json!({ "session_id": b, "limit": 10 }))
        .await
        .unwrap();
    assert_eq!(contents(&rest), ["m2"]);

    // A re-registration with the same external id resumes the session.
    let r1 = c
        .call(
            "register_session",
            json!({ "cli": "claude", "cwd": project, "external_id": "cc-123" }),
        )
        .await
        .unwrap();
    let r2 = c
        .call(
            "register_session",
            json!({ "cli": "claude", "cwd": project, "external_id": "cc-123" }),
        )
        .await
        .unwrap();
    assert_eq!(r1["session_id"], r2["session_id"]);
    assert_eq!(
        (r1["created"].clone(), r2["created"].clone()),
        (json!(true), json!(false))
    );

    // Everything above is on the timeline.
    let events = c
        .call("list_events", json!({ "session_id": a, "limit": 1000 }))
        .await
        .unwrap();
    let kinds: Vec<&str> = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "session_registered",
            "message_sent",
            "message_sent",
            "message_sent",
            "message_sent"
        ]
    );
}

#[tokio::test]
async fn cli_send_poll_and_watch() {
    let daemon = TestDaemon::start();
    let c = daemon.client().await;
    let project = daemon.project("repo");
    let a = register(&c, "claude", &project, None).await;
    let b = register(&c, "codex", &project, None).await;

    let mut watch = tokio::process::Command::new(crate::support::BIN)
        .arg("--data-dir")
        .arg(&daemon.layout.data_dir)
        .args(["--json", "msg", "watch", &b, "--since", "0", "--count", "2"])
        .env("TROUPE_RUNTIME_DIR", &daemon.layout.runtime_dir)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    for text in ["first", "second"] {
        let out = daemon.cli(&["msg", "send", "--from", &a, "--to", &b, "--key", text, text]);
        assert!(out.status.success(), "{}", crate::support::stderr(&out));
        assert!(
            crate::support::stdout(&out).contains("seq"),
            "{}",
            crate::support::stdout(&out)
        );
    }
    let out = daemon.cli(&[
        "msg", "send", "--from", &a, "--to", &b, "--key", "first", "first",
    ]);
    assert!(
        crate::support::stdout(&out).contains("duplicate"),
        "{}",
        crate::support::stdout(&out)
    );

    let mut stdout = String::new();
    use tokio::io::AsyncReadExt;
    watch
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .await
        .unwrap();
    assert!(watch.wait().await.unwrap().success());
    let got: Vec<String> = stdout
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["content"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(got, ["first", "second"]);

    let out = daemon.cli(&["msg", "poll", &b]);
    let text = crate::support::stdout(&out);
    assert!(text.contains("first") && text.contains("second"), "{text}");
    let out = daemon.cli(&["msg", "poll", &b, "--json"]);
    let polled: Value = serde_json::from_str(&crate::support::stdout(&out)).unwrap();
    assert_eq!(
        polled["messages"],
        json!([]),
        "the first poll marked them read"
    );
}
