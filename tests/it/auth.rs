//! Every connection must present the token; sockets and tokens of another user, or readable
//! by others, are refused.

use std::os::unix::fs::PermissionsExt;

use serde_json::json;
use troupe::client;

use crate::support::{TestDaemon, http_post, rpc_error};

const STATUS: &[u8] = br#"{"jsonrpc":"2.0","id":1,"method":"daemon_status","params":{}}"#;

#[test]
fn http_without_or_with_a_wrong_token_is_refused_with_a_json_rpc_error() {
    let daemon = TestDaemon::start();
    let addr = daemon.ws_addr();
    for (token, reason) in [
        (None, "missing token"),
        (Some("0".repeat(64)), "wrong token"),
        (Some(String::new()), "malformed Authorization header"),
    ] {
        let (status, body) = http_post(&addr, token.as_deref(), STATUS);
        assert_eq!(status, 401, "{body}");
        let err = rpc_error(&body);
        assert_eq!(err["code"], -32020, "{body}");
        assert_eq!(err["data"]["kind"], "unauthorized");
        assert!(err["message"].as_str().unwrap().contains(reason), "{body}");
    }
    // With the token, the same request works.
    let (status, body) = http_post(&addr, Some(&daemon.token()), STATUS);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"pid\""), "{body}");
}

#[tokio::test]
async fn websocket_and_socket_clients_need_the_token() {
    let daemon = TestDaemon::start();
    let ws_url = format!("ws://{}", daemon.ws_addr());

    let refused = client::builder("not-the-token")
        .unwrap()
        .build(&ws_url)
        .await;
    let err = refused
        .expect_err("a wrong token must be refused")
        .to_string();
    assert!(err.contains("401"), "{err}");

    let stream = tokio::net::UnixStream::connect(daemon.layout.socket_path())
        .await
        .unwrap();
    let refused = client::builder("not-the-token")
        .unwrap()
        .build_with_stream("ws://localhost/", stream)
        .await;
    assert!(refused.is_err(), "the socket checks the token too");

    // The real token works on both doors.
    let ws = daemon.ws_client().await;
    assert!(ws.call("daemon_status", json!({})).await.is_ok());
    let sock = daemon.client().await;
    assert!(sock.call("daemon_status", json!({})).await.is_ok());
}

#[tokio::test]
async fn a_socket_or_token_others_can_read_or_own_is_refused() {
    let daemon = TestDaemon::start();
    let socket = daemon.layout.socket_path();
    let token = daemon.layout.token_path();

    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o644)).unwrap();
    let err = client::connect(&daemon.layout, false).await.unwrap_err();
    assert!(
        format!("{err:#}").contains("must not be accessible to other users"),
        "{err:#}"
    );
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();

    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    let err = client::connect(&daemon.layout, true).await.unwrap_err();
    assert!(
        format!("{err:#}").contains("must not be accessible to other users"),
        "{err:#}"
    );
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600)).unwrap();

    // Another user's socket (only root can make one here).
    if troupe_api::layout::current_uid() == 0 {
        std::os::unix::fs::lchown(&socket, Some(65534), Some(65534)).unwrap();
        let err = client::connect(&daemon.layout, true).await.unwrap_err();
        assert!(
            format!("{err:#}").contains("belongs to uid 65534"),
            "{err:#}"
        );
        std::os::unix::fs::lchown(&socket, Some(0), Some(0)).unwrap();
    }
    assert!(client::connect(&daemon.layout, false).await.is_ok());
}

/// `troupe call` is one HTTP request on the socket: it answers as a WebSocket call would (the
/// result; a JSON-RPC error with its code), and a wrong credential is refused with the
/// daemon's reason, not a bare HTTP status.
#[test]
fn a_one_shot_call_answers_and_is_refused_like_a_websocket_call() {
    let daemon = TestDaemon::start();
    let out = daemon.cli(&["call", "daemon_status", "{}"]);
    assert!(out.status.success(), "{}", crate::support::stderr(&out));
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(status["pid"].is_u64(), "{status}");

    let out = daemon.cli(&["call", "get_party_status", "{}"]);
    assert!(!out.status.success());
    let err = crate::support::stderr(&out);
    assert!(
        err.contains("missing field `party_id`") && err.contains("error -32602"),
        "{err}"
    );

    let out = std::process::Command::new(crate::support::BIN)
        .arg("--data-dir")
        .arg(&daemon.layout.data_dir)
        .args(["call", "daemon_status", "{}"])
        .env("TROUPE_RUNTIME_DIR", &daemon.layout.runtime_dir)
        .env("TROUPE_RUN_TOKEN", "troupe-run-forged.0000")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = crate::support::stderr(&out);
    assert!(err.contains("unauthorized: wrong token"), "{err}");
}
