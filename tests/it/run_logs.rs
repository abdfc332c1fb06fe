//! A member's output, read live: each run has its own log (`get_run_log` reads a byte range,
//! `subscribe_run_log` pushes it as it is written and ends with the run), two members of one
//! party never mixed; an editor asking for a run's output (`troupe.get_run_log`) is pushed the
//! rest as `troupe/runLog`; an ACP agent's words and tool calls are in its log too (`rounds.rs`);
//! bad requests are named.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{TestDaemon, define, executable, launch, repo, shares, wait_for};

async fn next(sub: &mut jsonrpsee_core::client::Subscription<Value>) -> Option<Value> {
    tokio::time::timeout(Duration::from_secs(60), sub.next())
        .await
        .expect("a push within 60 s")
        .map(|item| item.expect("a valid item"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_members_output_is_its_own_and_followed_live_until_it_ends() {
    let d = TestDaemon::start();
    let c = d.client().await;
    let dir = d.dir.path();
    // The files it waits for, in the test's shared dir, which its box is given.
    let gate = d.shared().join("gate");
    std::fs::create_dir_all(&gate).unwrap();
    // Says a line, waits for its role's file, says another (stderr too), and completes.
    let talker = executable(
        dir,
        "talker.sh",
        "#!/bin/sh\necho \"$TROUPE_ROLE: first\"\n\
         while [ ! -e \"$GATE/$TROUPE_ROLE\" ]; do sleep 0.05; done\n\
         echo \"$TROUPE_ROLE: second ünïcödé\"\necho \"$TROUPE_ROLE: on stderr\" >&2\n\
         troupe call complete '{\"output\":\"talked\"}' >/dev/null\n",
    );
    define(
        &c,
        "agent",
        shares(
            json!({ "name": "talker", "command": [talker], "env": { "GATE": gate.display().to_string() } }),
            &[&gate],
        ),
    )
    .await;
    define(
        &c,
        "party",
        json!({ "name": "talk", "roles": { "a": { "agent": "talker" }, "b": { "agent": "talker" } } }),
    )
    .await;
    let project = repo(&dir.join("proj"));
    let party = launch(&c, "talk", &project).await;
    let run_of = |role: &'static str| {
        let (c, party) = (&c, party.clone());
        async move {
            wait_for(&format!("{role}'s run"), 60, || async {
                let s = c
                    .call("get_party_status", json!({ "party_id": party }))
                    .await
                    .unwrap();
                s["members"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|m| m["role"] == role)?["run_id"]
                    .as_str()
                    .map(str::to_string)
            })
            .await
        }
    };
    let (a, b) = (run_of("a").await, run_of("b").await);
    // Once a has said its first line (its box takes a moment to start).
    wait_for("a's first line", 60, || async {
        let log = c.call("get_run_log", json!({ "run_id": a })).await.unwrap();
        log["text"]
            .as_str()
            .is_some_and(|t| t.ends_with("a: first\n"))
            .then_some(())
    })
    .await;

    // Followed live from the start: what a said so far, then what it says next, then the end.
    let mut live = c
        .subscribe(
            "subscribe_run_log",
            json!({ "run_id": a }),
            "unsubscribe_run_log",
        )
        .await
        .unwrap();
    let first = next(&mut live).await.expect("the log so far");
    assert_eq!(first["run_id"], a.as_str());
    assert_eq!(first["offset"], 0);
    // The runner's header line, then what it said.
    let first_text = first["text"].as_str().unwrap().to_string();
    assert!(first_text.starts_with(&format!("=== run {a} (")), "{first}");
    assert!(first_text.ends_with(" ===\na: first\n"), "{first}");
    let head = (first_text.len() - "a: first\n".len()) as u64;
    std::fs::write(gate.join("a"), "").unwrap();
    let mut text = String::new();
    loop {
        let chunk = next(&mut live).await.expect("open until its last chunk");
        text.push_str(chunk["text"].as_str().unwrap());
        if chunk["ended"] == true {
            break;
        }
    }
    assert_eq!(
        text, "a: second ünïcödé\na: on stderr\n",
        "the rest, then the end"
    );

    // Read whole, and by ranges: a's log has only a's lines, b's only b's.
    let log = c.call("get_run_log", json!({ "run_id": a })).await.unwrap();
    assert_eq!(
        log["text"],
        format!("{first_text}a: second ünïcödé\na: on stderr\n"),
        "{log}"
    );
    assert_eq!(log["ended"], true, "{log}");
    assert_eq!(log["next_offset"], log["size"], "{log}");
    // A range that ends inside a character stops before it (read on from `next_offset`).
    let cut = c
        .call(
            "get_run_log",
            json!({ "run_id": a, "offset": head + 9, "limit": 11 }),
        )
        .await
        .unwrap();
    assert_eq!(cut["text"], "a: second ", "{cut}");
    assert_eq!(
        cut["next_offset"],
        head + 19,
        "the cut character is read next: {cut}"
    );
    let cut = c
        .call(
            "get_run_log",
            json!({ "run_id": a, "offset": head + 9, "limit": 12 }),
        )
        .await
        .unwrap();
    assert_eq!(cut["text"], "a: second ü", "{cut}");
    assert_eq!(cut["next_offset"], head + 21, "{cut}");
    let other = c.call("get_run_log", json!({ "run_id": b })).await.unwrap();
    let other_text = other["text"].as_str().unwrap();
    assert!(
        other_text.starts_with(&format!("=== run {b} ("))
            && other_text.ends_with(" ===\nb: first\n"),
        "{other}"
    );
    assert_eq!(other["ended"], false, "{other}");
    // From an editor: `troupe.get_run_log` answers b's output so far, then the editor is sent
    // the rest (`troupe/runLog`) as b writes it, the last push saying it ended.
    let mut lsp = crate::lsp_client::LspClient::start(
        std::path::Path::new(crate::support::BIN),
        &d.layout,
        std::path::Path::new(&project),
        "warn",
    )
    .await
    .unwrap();
    let asked = lsp
        .request(
            "workspace/executeCommand",
            json!({ "command": "troupe.get_run_log", "arguments": [{ "run_id": b }] }),
        )
        .await
        .unwrap();
    let answer = lsp.until(|m| m["id"] == asked).await.unwrap();
    assert_eq!(answer["result"]["text"], other["text"], "{answer}");
    std::fs::write(gate.join("b"), "").unwrap();
    let mut pushed = String::new();
    loop {
        let note = tokio::time::timeout(
            Duration::from_secs(60),
            lsp.until(|m| m["method"] == "troupe/runLog"),
        )
        .await
        .expect("a push within 60 s")
        .unwrap();
        assert_eq!(note["params"]["run_id"], b.as_str(), "{note}");
        pushed.push_str(note["params"]["text"].as_str().unwrap());
        if note["params"]["ended"] == true {
            break;
        }
    }
    assert_eq!(pushed, "b: second ünïcödé\nb: on stderr\n");
    lsp.stop().await.unwrap();
    crate::support::party_end(&c, &party, 60).await;

    // Bad requests are named; a run id is never a path.
    for (params, kind) in [
        (json!({ "run_id": "no-such-run" }), "not_found"),
        (json!({ "run_id": "../../etc/passwd" }), "not_found"),
        (json!({ "run_id": a, "limit": 0 }), "invalid_params"),
        (
            json!({ "run_id": a, "limit": 10_000_000 }),
            "invalid_params",
        ),
        (json!({ "run_id": a, "lines": 3 }), "invalid_params"),
    ] {
        let e = c.call("get_run_log", params.clone()).await.unwrap_err();
        assert_eq!(e.kind(), Some(kind), "{params}: {e}");
    }
    let e = c
        .subscribe(
            "subscribe_run_log",
            json!({ "run_id": "no-such-run" }),
            "unsubscribe_run_log",
        )
        .await
        .unwrap_err();
    assert!(e.to_string().contains("no-such-run"), "{e}");
}
