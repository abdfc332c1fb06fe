//! The egress proxy: which hosts an allow list names, and a real proxy on a Unix socket that
//! tunnels to a listed loopback service, refuses an unlisted one with a 403 naming why, and
//! records the refusal on the timeline.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;

fn list(entries: &[&str]) -> Vec<String> {
    entries.iter().map(|e| e.to_string()).collect()
}

#[test]
fn an_allow_list_names_hosts_ports_and_subdomains_and_loopback_only_with_its_port() {
    let allow = list(&[
        "api.anthropic.com",
        "example.com:8443",
        "*.googleapis.com",
        "127.0.0.1:4010",
    ]);
    assert!(listed(&allow, "api.anthropic.com", 443));
    assert!(listed(&allow, "API.Anthropic.com", 80));
    assert!(!listed(&allow, "evil-api.anthropic.com", 443));
    assert!(listed(&allow, "example.com", 8443));
    assert!(!listed(&allow, "example.com", 443));
    assert!(listed(&allow, "generativelanguage.googleapis.com", 443));
    assert!(!listed(&allow, "googleapis.com.evil.net", 443));
    assert!(listed(&allow, "127.0.0.1", 4010));
    assert!(listed(&allow, "localhost", 4010));
    assert!(!listed(&allow, "127.0.0.1", 22));
    assert!(
        !listed(&list(&["localhost"]), "127.0.0.1", 5432),
        "loopback needs a port"
    );
    assert!(!listed(&list(&["*.localhost"]), "db.localhost", 5432));
    assert_eq!(loopback_ports(&allow), vec![4010]);
    assert!(
        !listed(&allow, "::ffff:127.0.0.1", 22),
        "a mapped loopback address is loopback"
    );
    assert!(listed(&allow, "[::ffff:127.0.0.1]", 4010));
}

#[test]
fn requests_parse_as_tunnels_or_origin_form() {
    let r = parse(b"CONNECT api.openai.com:443 HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    assert!(r.connect);
    assert_eq!((r.host.as_str(), r.port), ("api.openai.com", 443));
    let r = parse(b"GET http://example.com/a?b=1 HTTP/1.1\r\nHost: example.com\r\n\r\n").unwrap();
    assert!(!r.connect);
    assert_eq!((r.host.as_str(), r.port), ("example.com", 80));
    assert!(
        String::from_utf8_lossy(&r.head).starts_with("GET /a?b=1 HTTP/1.1\r\nHost: example.com")
    );
    assert!(parse(b"GET /relative HTTP/1.1\r\n\r\n").is_err());
    assert!(parse(b"CONNECT noport HTTP/1.1\r\n\r\n").is_err());
    assert!(parse(b"garbage\r\n\r\n").is_err());
}

async fn through(socket: &std::path::Path, request: &str) -> String {
    let mut s = tokio::net::UnixStream::connect(socket).await.unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut b).await.unwrap() == 0 {
            break;
        }
        head.push(b[0]);
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    if text.starts_with("HTTP/1.1 200") {
        s.write_all(b"ping").await.unwrap();
        let mut echo = [0u8; 4];
        s.read_exact(&mut echo).await.unwrap();
        return format!("{text}{}", String::from_utf8_lossy(&echo));
    }
    let mut rest = String::new();
    s.read_to_string(&mut rest).await.unwrap();
    format!("{text}{rest}")
}

#[tokio::test]
async fn the_proxy_tunnels_to_a_listed_service_and_refuses_the_rest_on_the_record() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("t.db")).unwrap();
    // A loopback echo service (the person's, or a test's model server).
    let echo = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = echo.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut c, _)) = echo.accept().await {
            tokio::spawn(async move {
                let mut b = [0u8; 4];
                if c.read_exact(&mut b).await.is_ok() {
                    let _ = c.write_all(&b).await;
                }
            });
        }
    });
    let other = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let other_port = other.local_addr().unwrap().port();
    let gate = Gate::new(
        "run-1".into(),
        "session-1".into(),
        None,
        None,
        "dev".into(),
        vec![format!("127.0.0.1:{port}")],
        Duration::from_millis(200),
        store.clone(),
        None,
    );
    let socket = dir.path().join("egress.sock");
    let endpoint = open(Arc::new(gate), &socket, true).unwrap();
    assert!(endpoint.tcp_port.is_some());

    let ok = through(
        &socket,
        &format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n"),
    )
    .await;
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
    assert!(ok.ends_with("ping"), "{ok}");

    let refused = through(
        &socket,
        &format!("CONNECT 127.0.0.1:{other_port} HTTP/1.1\r\n\r\n"),
    )
    .await;
    assert!(refused.starts_with("HTTP/1.1 403"), "{refused}");
    assert!(
        refused.contains("service on the person's own machine"),
        "{refused}"
    );
    let refused = through(
        &socket,
        "GET http://example.invalid/ HTTP/1.1\r\nHost: example.invalid\r\n\r\n",
    )
    .await;
    assert!(refused.starts_with("HTTP/1.1 403"), "{refused}");
    assert!(
        refused.contains("not in agent dev's allow list"),
        "{refused}"
    );
    let bad = through(&socket, "NONSENSE\r\n\r\n").await;
    assert!(bad.starts_with("HTTP/1.1 400"), "{bad}");

    let events = store
        .list_events(&troupe_store::EventFilter {
            kind: Some("egress_refused".into()),
            limit: 10,
            ..Default::default()
        })
        .unwrap();
    assert_eq!(events.len(), 2, "{events:?}");
    drop(endpoint);
    assert!(!socket.exists(), "a closed egress removes its socket");
}
