//! Bad input gets a clear, typed error, and the daemon goes on serving everyone else.

use serde_json::{Value, json};

use crate::support::{TestDaemon, http_post, register, rpc_error};

fn call_raw(daemon: &TestDaemon, body: &[u8]) -> Value {
    let (status, reply) = http_post(&daemon.ws_addr(), Some(&daemon.token()), body);
    assert!(
        status == 200 || status == 413 || status == 400,
        "HTTP {status}: {reply}"
    );
    rpc_error(&reply)
}

#[tokio::test]
async fn malformed_unknown_and_wrong_requests_get_stable_codes() {
    let daemon = TestDaemon::start();
    let survivor = daemon.client().await;

    let err = call_raw(
        &daemon,
        br#"{"jsonrpc":"2.0","id":1,"method":"daemon_status","#,
    );
    assert_eq!(err["code"], -32700, "{err}");

    let err = call_raw(
        &daemon,
        br#"{"jsonrpc":"2.0","id":1,"method":"launch_rockets","params":{}}"#,
    );
    assert_eq!(err["code"], -32601, "{err}");
    assert!(
        err["message"].as_str().unwrap().contains("launch_rockets"),
        "{err}"
    );

    let err = call_raw(
        &daemon,
        br#"{"jsonrpc":"2.0","id":1,"method":"get_session","params":["x"]}"#,
    );
    assert_eq!(err["code"], -32602, "{err}");
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .contains("must be a JSON object"),
        "{err}"
    );

    let err = call_raw(
        &daemon,
        br#"{"jsonrpc":"2.0","id":1,"method":"get_session","params":{}}"#,
    );
    assert_eq!(err["code"], -32602);
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .contains("missing field `session_id`"),
        "{err}"
    );

    let err = call_raw(
        &daemon,
        br#"{"jsonrpc":"2.0","id":1,"method":"get_session","params":{"session_id":"a","sesion":"typo"}}"#,
    );
    assert_eq!(err["code"], -32602);
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .contains("unknown field `sesion`"),
        "{err}"
    );

    let err = call_raw(
        &daemon,
        br#"{"jsonrpc":"2.0","id":1,"method":"send_message","params":{"from_session_id":"a","to_session_id":"b","content":"x","priority":"asap"}}"#,
    );
    assert_eq!(err["code"], -32602);
    assert!(err["message"].as_str().unwrap().contains("asap"), "{err}");

    let err = call_raw(
        &daemon,
        br#"{"jsonrpc":"2.0","id":1,"method":"get_session","params":{"session_id":"ghost"}}"#,
    );
    assert_eq!(err["code"], -32021);
    assert_eq!(err["data"]["kind"], "not_found");
    assert_eq!(err["data"]["id"], "ghost");

    let err = call_raw(&daemon, b"[]");
    assert!(
        err.is_object() || err.is_null(),
        "an empty batch is answered, not fatal"
    );

    // A request body far over the server's limit: refused, nothing else affected.
    let huge = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"daemon_status","params":{{"pad":"{}"}}}}"#,
        "x".repeat(8 * 1024 * 1024)
    );
    let err = call_raw(&daemon, huge.as_bytes());
    assert_eq!(err["code"], -32007, "{err}");

    assert!(
        survivor.call("daemon_status", json!({})).await.is_ok(),
        "daemon still serves"
    );
}

#[tokio::test]
async fn messaging_errors_name_what_was_wrong() {
    let daemon = TestDaemon::start_with(&["--max-message-bytes", "1024"]);
    let c = daemon.client().await;
    let a_project = daemon.project("a");
    let b_project = daemon.project("b");
    let a1 = register(&c, "claude", &a_project, None).await;
    let a2 = register(&c, "codex", &a_project, None).await;
    let b1 = register(&c, "gemini", &b_project, None).await;

    let err = c
        .call(
            "send_message",
            json!({ "from_session_id": a1, "to_session_id": a2, "content": "x".repeat(1025) }),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(-32023));
    assert!(
        err.to_string()
            .contains("1025 bytes; the limit is 1024 bytes"),
        "{err}"
    );

    let err = c
        .call(
            "send_message",
            json!({ "from_session_id": a1, "to_session_id": b1, "content": "hi" }),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(-32022));
    assert_eq!(err.kind(), Some("forbidden"));
    assert!(
        err.to_string().contains(&b1) && err.to_string().contains("project"),
        "{err}"
    );

    let err = c
        .call(
            "send_message",
            json!({ "from_session_id": a1, "to_session_id": a2, "content": "  " }),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(-32602));
    assert!(
        err.to_string().contains("content must not be empty"),
        "{err}"
    );

    let err = c
        .call(
            "send_to_parent",
            json!({ "session_id": a1, "content": "hi" }),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(-32602));
    assert!(
        err.to_string()
            .contains(&format!("session {a1} has no parent")),
        "{err}"
    );
    assert!(err.to_string().contains("send_to_parent"), "{err}");

    let err = c
        .call(
            "send_to_child",
            json!({ "session_id": a1, "child_session_id": a2, "content": "hi" }),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), Some("forbidden"));
    assert!(err.to_string().contains("is not a child of"), "{err}");

    c.call("end_session", json!({ "session_id": a2 }))
        .await
        .unwrap();
    let err = c
        .call(
            "send_message",
            json!({ "from_session_id": a1, "to_session_id": a2, "content": "hi" }),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(-32024));
    assert!(err.to_string().contains("has ended"), "{err}");

    let err = c
        .call(
            "poll_messages",
            json!({ "session_id": a1, "wait_ms": 999_999 }),
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("over the maximum of 300000"),
        "{err}"
    );

    let err = c
        .call(
            "register_session",
            json!({ "cli": "claude", "cwd": "/definitely/not/here" }),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(-32602));
    assert!(err.to_string().contains("/definitely/not/here"), "{err}");

    let err = c
        .call(
            "register_session",
            json!({ "cli": "claude", "cwd": a_project, "parent_session_id": b1 }),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), Some("forbidden"));

    // Nothing of the above was stored.
    let status = c.call("daemon_status", json!({})).await.unwrap();
    assert_eq!(status["messages"], 0);
}

#[test]
fn a_panicking_handler_becomes_an_internal_error() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let result = rt.block_on(troupe_core::registry::guarded("boom", async {
        if true {
            panic!("kaboom");
        }
        Ok::<_, troupe_api::ApiError>(json!({}))
    }));
    let err = result.unwrap_err();
    assert_eq!(err.code_and_kind(), (-32603, "internal"));
    assert!(
        err.to_string().contains("boom failed unexpectedly: kaboom"),
        "{err}"
    );
}

#[tokio::test]
async fn an_oversized_websocket_request_is_refused_and_the_daemon_goes_on() {
    let daemon = TestDaemon::start();
    let ws = daemon.ws_client().await;
    let huge = "x".repeat(8 * 1024 * 1024);
    let err = ws
        .call("daemon_status", json!({ "pad": huge }))
        .await
        .unwrap_err();
    // Either a JSON-RPC "too big" error or the connection is closed on that client; never a
    // daemon that stops serving others.
    assert!(
        err.code() == Some(-32007) || err.code().is_none(),
        "unexpected error: {err}"
    );
    let other = daemon.client().await;
    assert!(other.call("daemon_status", json!({})).await.is_ok());
    // Hundreds of connections at once are fine too.
    let mut clients = Vec::new();
    for _ in 0..200 {
        clients.push(daemon.client().await);
    }
    for c in &clients {
        assert!(c.call("daemon_status", json!({})).await.is_ok());
    }
}

/// A reader that goes away (`troupe api schema | head -c 10`) ends the command quietly: no
/// panic, no backtrace, success. The schema (hundreds of kilobytes) does not fit in the pipe.
#[test]
fn a_closed_stdout_ends_a_command_quietly() {
    use std::io::Read;
    let mut child = std::process::Command::new(crate::support::BIN)
        .args(["api", "schema"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 10];
    child.stdout.take().unwrap().read_exact(&mut first).unwrap();
    // The reader is dropped here: the rest of the output meets a closed pipe.
    let out = child.wait_with_output().unwrap();
    assert!(first.starts_with(b"{"), "{first:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert!(out.status.success(), "{out:?}");
}
