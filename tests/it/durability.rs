//! kill -9 while 64 clients send: every acknowledged message survives exactly once, in send
//! order per recipient, and retried sends (same idempotency keys) are not duplicated.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::json;
use tokio::sync::Notify;

use crate::support::{TestDaemon, register};

const SENDERS: usize = 64;
const RECIPIENTS: usize = 16;
const KILL_AFTER_ACKS: usize = 3_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_messages_survive_kill_9_exactly_once_in_order() {
    let mut daemon = TestDaemon::start();
    let project = daemon.project("repo");
    let setup = daemon.client().await;
    let mut recipients = Vec::new();
    for _ in 0..RECIPIENTS {
        recipients.push(register(&setup, "codex", &project, None).await);
    }
    let mut senders = Vec::new();
    for s in 0..SENDERS {
        let id = register(&setup, "claude", &project, None).await;
        senders.push((id, recipients[s % RECIPIENTS].clone()));
    }
    drop(setup);

    let acks = Arc::new(AtomicUsize::new(0));
    let enough = Arc::new(Notify::new());
    let mut tasks = Vec::new();
    for (s, (from, to)) in senders.iter().cloned().enumerate() {
        let client = daemon.client().await;
        let (acks, enough) = (acks.clone(), enough.clone());
        tasks.push(tokio::spawn(async move {
            // Returns the acknowledged indices and the last index attempted.
            let mut acked = Vec::new();
            for i in 0.. {
                let sent = client
                    .call(
                        "send_message",
                        json!({
                            "from_session_id": from, "to_session_id": to,
                            "content": format!("{s}:{i}"), "idempotency_key": format!("{s}:{i}"),
                        }),
                    )
                    .await;
                match sent {
                    Ok(_) => {
                        acked.push(i);
                        if acks.fetch_add(1, Ordering::SeqCst) + 1 == KILL_AFTER_ACKS {
                            enough.notify_one();
                        }
                    }
                    Err(_) => return (acked, i),
                }
            }
            unreachable!()
        }));
    }
    enough.notified().await;
    daemon.kill9();
    let mut outcomes = Vec::new();
    for t in tasks {
        outcomes.push(t.await.unwrap());
    }
    let total_acked: usize = outcomes.iter().map(|(a, _)| a.len()).sum();
    assert!(total_acked >= KILL_AFTER_ACKS);

    daemon.spawn();
    let c = daemon.client().await;
    let stored = stored_by_sender(&c, &recipients).await;
    for (s, (acked, _)) in outcomes.iter().enumerate() {
        let got = stored.get(&s).cloned().unwrap_or_default();
        // Sends are sequential per sender, so what is stored is exactly 0..n, in order.
        assert_eq!(
            got,
            (0..got.len() as u64).collect::<Vec<_>>(),
            "sender {s}: order or gaps"
        );
        assert!(
            acked.len() <= got.len(),
            "sender {s}: {} acknowledged but only {} stored",
            acked.len(),
            got.len()
        );
    }

    // Every client retries everything it attempted, with the same keys.
    for (s, (from, to)) in senders.iter().enumerate() {
        let (_, last) = outcomes[s];
        for i in 0..=last {
            let r = c
                .call(
                    "send_message",
                    json!({
                        "from_session_id": from, "to_session_id": to,
                        "content": format!("{s}:{i}"), "idempotency_key": format!("{s}:{i}"),
                    }),
                )
                .await
                .unwrap();
            let was_stored = (i as usize) < stored.get(&s).map_or(0, Vec::len);
            assert_eq!(r["duplicate"], was_stored, "sender {s} message {i}");
        }
    }
    let after = stored_by_sender(&c, &recipients).await;
    for (s, (_, last)) in outcomes.iter().enumerate() {
        assert_eq!(
            after[&s],
            (0..=*last).collect::<Vec<_>>(),
            "sender {s} after retries"
        );
    }
}

/// Per sender index, the message indices stored, in delivery order per recipient.
async fn stored_by_sender(
    c: &troupe::client::Client,
    recipients: &[String],
) -> BTreeMap<usize, Vec<u64>> {
    let mut by_sender: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
    for r in recipients {
        let mut since = 0;
        loop {
            let page = c
                .call(
                    "poll_messages",
                    json!({ "session_id": r, "since": since, "mark_read": false, "limit": 1000 }),
                )
                .await
                .unwrap();
            let messages = page["messages"].as_array().unwrap();
            if messages.is_empty() {
                break;
            }
            for m in messages {
                let (s, i) = m["content"].as_str().unwrap().split_once(':').unwrap();
                by_sender
                    .entry(s.parse().unwrap())
                    .or_default()
                    .push(i.parse().unwrap());
            }
            since = page["next_since"].as_i64().unwrap();
        }
    }
    by_sender
}
