//! Notifications away from the desk through a real daemon: a private session bus
//! (`dbus-daemon`) with a fake notification server that records `Notify` calls, and a loopback
//! webhook receiver. What comes to wait for the person (an approval whose command holds a
//! secret, a question naming one) reaches both once, with nothing secret in either; an item is
//! never notified twice (not at a later inbox change, not after a kill -9 and restart), and a
//! webhook that answers 500 and then 200 gets the notification once.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use troupe::client::Client;

use crate::support::{TestDaemon, inbox, register, wait_for};

/// What the approval's command and the question hold: it must leave the machine in neither.
const SECRET: &str = "sk-live-NOTIFY-SECRET-4242";

/// A private session bus, ended when dropped.
struct Bus {
    child: Child,
    address: String,
    _dir: tempfile::TempDir,
}

impl Bus {
    fn start() -> Bus {
        let dir = tempfile::tempdir().unwrap();
        let listen = format!("unix:path={}", dir.path().join("bus").display());
        let mut child = Command::new("dbus-daemon")
            .args(["--session", "--nofork", "--print-address"])
            .arg(format!("--address={listen}"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            // It complains it may not raise its fd limit when not root's own session.
            .stderr(Stdio::null())
            .spawn()
            .expect("dbus-daemon (Debian: apt install dbus-daemon)");
        // It prints its address once it listens.
        let mut address = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut address)
            .unwrap();
        assert!(address.starts_with("unix:"), "dbus-daemon said {address:?}");
        Bus {
            child,
            address: address.trim().to_string(),
            _dir: dir,
        }
    }
}

impl Drop for Bus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The desktop's notification server, as far as `Notify` goes: it records each call.
struct Server {
    calls: Arc<Mutex<Vec<Value>>>,
}

#[zbus::interface(name = "org.freedesktop.Notifications")]
impl Server {
    #[allow(clippy::too_many_arguments)]
    fn notify(
        &self,
        app_name: String,
        replaces_id: u32,
        app_icon: String,
        summary: String,
        body: String,
        actions: Vec<String>,
        hints: HashMap<String, zbus::zvariant::OwnedValue>,
        expire_timeout: i32,
    ) -> u32 {
        let urgency = match hints.get("urgency").map(|v| &**v) {
            Some(zbus::zvariant::Value::U8(u)) => json!(u),
            _ => Value::Null,
        };
        let mut calls = self.calls.lock().unwrap();
        calls.push(json!({
            "app_name": app_name, "replaces_id": replaces_id, "app_icon": app_icon,
            "summary": summary, "body": body, "actions": actions, "urgency": urgency,
            "hints": format!("{hints:?}"), "expire_timeout": expire_timeout,
        }));
        calls.len() as u32
    }

    fn get_capabilities(&self) -> Vec<String> {
        vec!["body".into()]
    }

    fn get_server_information(&self) -> (String, String, String, String) {
        (
            "fake".into(),
            "troupe tests".into(),
            "1".into(),
            "1.2".into(),
        )
    }
}

/// Owns `org.freedesktop.Notifications` on `address` (until dropped); the calls it got.
async fn desk(address: &str) -> (zbus::Connection, Arc<Mutex<Vec<Value>>>) {
    let calls = Arc::new(Mutex::new(Vec::new()));
    let server = Server {
        calls: calls.clone(),
    };
    let conn = zbus::connection::Builder::address(address)
        .unwrap()
        .serve_at("/org/freedesktop/Notifications", server)
        .unwrap()
        .name("org.freedesktop.Notifications")
        .unwrap()
        .build()
        .await
        .unwrap();
    (conn, calls)
}

/// A loopback webhook receiver: each POST's status (the `fail_first` first ones answered 500,
/// then 200) and JSON body, in order.
async fn hook(fail_first: usize) -> (SocketAddr, Arc<Mutex<Vec<(u16, Value)>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let got: Arc<Mutex<Vec<(u16, Value)>>> = Arc::default();
    let seen = got.clone();
    tokio::spawn(async move {
        loop {
            let (mut stream, _) = listener.accept().await.unwrap();
            let got = seen.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                let body = loop {
                    let n = stream.read(&mut chunk).await.unwrap();
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                        continue;
                    };
                    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                    assert!(head.starts_with("post /troupe "), "{head}");
                    assert!(head.contains("content-type: application/json"), "{head}");
                    let length: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .map_or(0, |v| v.trim().parse().unwrap());
                    if buf.len() >= end + 4 + length {
                        break buf[end + 4..end + 4 + length].to_vec();
                    }
                };
                let status = {
                    let mut got = got.lock().unwrap();
                    let status = if got.len() < fail_first { 500 } else { 200 };
                    got.push((status, serde_json::from_slice(&body).unwrap()));
                    status
                };
                let answer = format!(
                    "HTTP/1.1 {status} {}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                    if status == 200 {
                        "OK"
                    } else {
                        "Internal Server Error"
                    }
                );
                let _ = stream.write_all(answer.as_bytes()).await;
            });
        }
    });
    (addr, got)
}

/// How many desktop notifications had `body` (each item's here is its own).
fn desktop_count(calls: &Mutex<Vec<Value>>, body: &str) -> usize {
    calls
        .lock()
        .unwrap()
        .iter()
        .filter(|c| c["body"] == body)
        .count()
}

/// The webhook's bodies for `item_id` answered `status`.
fn posted(got: &Mutex<Vec<(u16, Value)>>, item_id: &str, status: u16) -> Vec<Value> {
    got.lock()
        .unwrap()
        .iter()
        .filter(|(s, b)| *s == status && b["item_id"] == item_id)
        .map(|(_, b)| b.clone())
        .collect()
}

/// Asks for an approval of `tool` with `command` as `session`; its inbox item's id.
async fn approval(c: &Client, session: &str, tool: &str, command: &str) -> String {
    let asked = c
        .call(
            "request_permission",
            json!({ "session_id": session, "tool_name": tool, "input": { "command": command },
                    "is_dangerous": true, "danger_reason": format!("it runs {command}"),
                    "wait_ms": 0 }),
        )
        .await
        .unwrap();
    format!("approval:{}", asked["approval_id"].as_str().unwrap())
}

/// Waits until the desktop and the webhook (with a 200) each got `item_id`'s notification, whose
/// message is `message`.
async fn arrived(
    calls: &Mutex<Vec<Value>>,
    got: &Mutex<Vec<(u16, Value)>>,
    item_id: &str,
    message: &str,
) {
    wait_for(&format!("{item_id}'s notifications"), 60, || async {
        (desktop_count(calls, message) > 0 && !posted(got, item_id, 200).is_empty()).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(troupe_test_tools),
    ignore = "starts a session bus with dbus-daemon, which scripts/test installs: run with TROUPE_TEST_TOOLS=1"
)]
async fn what_waits_reaches_the_desktop_and_the_webhook_once_and_nothing_secret_leaves() {
    let bus = Bus::start();
    let (_desk, calls) = desk(&bus.address).await;
    // The first POST is answered 500: the notification is tried again and arrives once.
    let (addr, got) = hook(1).await;
    let config = format!(
        "[notify]\nwebhook_url = \"http://{addr}/troupe\"\nwebhook_topic = \"troupe-tests\"\n"
    );
    let mut daemon =
        TestDaemon::start_with_config(&[], &[("DBUS_SESSION_BUS_ADDRESS", &bus.address)], &config);
    let c = daemon.client().await;
    let project = daemon.project("repo");
    let worker = register(&c, "claude", &project, None).await;

    let command = format!("curl -H 'Authorization: Bearer {SECRET}' https://example.com");
    let first = approval(&c, &worker, "Bash", &command).await;
    let first_message = "an approval is waiting in project repo (tool: Bash)";
    arrived(&calls, &got, &first, first_message).await;
    let asked = c
        .call(
            "ask_person",
            json!({ "session_id": worker, "question": format!("may I push with {SECRET}?"),
                    "wait_ms": 0 }),
        )
        .await
        .unwrap();
    let question = format!("question:{}", asked["question_id"].as_str().unwrap());
    let question_message = "a question is waiting in project repo";
    arrived(&calls, &got, &question, question_message).await;

    // The desktop's: from Troupe, a generic summary and body, urgent (someone is stopped).
    let shown = calls.lock().unwrap().clone();
    assert_eq!(shown.len(), 2, "{shown:#?}");
    assert_eq!(shown[0]["app_name"], "Troupe");
    assert_eq!(shown[0]["summary"], "Troupe: approval waiting");
    assert_eq!(shown[0]["body"], first_message);
    assert_eq!(shown[0]["urgency"], 2);
    assert_eq!(shown[1]["summary"], "Troupe: question waiting");
    assert_eq!(shown[1]["body"], question_message);

    // The webhook's: 500, then the same notification again with 200; then the question.
    let bodies = got.lock().unwrap().clone();
    let statuses: Vec<u16> = bodies.iter().map(|(s, _)| *s).collect();
    assert_eq!(statuses, [500, 200, 200], "{bodies:#?}");
    assert_eq!(
        bodies[0].1, bodies[1].1,
        "the same notification, tried again"
    );
    assert_eq!(
        bodies[1].1,
        json!({
            "topic": "troupe-tests",
            "title": "Troupe: approval waiting",
            "message": first_message,
            "text": format!("Troupe: approval waiting: {first_message}"),
            "tags": ["troupe", "approval"],
            "priority": 4,
            "kind": "approval",
            "item_id": first,
            "project": "repo",
            "tool": "Bash",
        })
    );
    assert_eq!(bodies[2].1["item_id"], question);

    // Nothing of what the member wrote left: not the command, the reason nor the question.
    let everything = format!("{shown:?} {bodies:?}");
    for never in [SECRET, "curl", "push with", "it runs"] {
        assert!(!everything.contains(never), "{never:?} left: {everything}");
    }

    // A later change notifies only what is new.
    let second = approval(&c, &worker, "write_file", "echo hi > notes.txt").await;
    let second_message = "an approval is waiting in project repo (tool: write_file)";
    arrived(&calls, &got, &second, second_message).await;

    // A kill -9 and a restart: what still waits is not notified again; what comes next is.
    daemon.kill9();
    daemon.spawn();
    let c = daemon.client().await;
    let waiting: Vec<Value> = inbox(&c, &project).await;
    for id in [&first, &question, &second] {
        assert!(
            waiting.iter().any(|i| i["item_id"] == **id),
            "{id} still waits after the restart: {waiting:#?}"
        );
    }
    let other = register(&c, "claude", &project, None).await;
    let third = approval(&c, &other, "Read", "cat README.md").await;
    let third_message = "an approval is waiting in project repo (tool: Read)";
    // Each way sends in order, and the restarted daemon's first inbox came before the third.
    arrived(&calls, &got, &third, third_message).await;
    for message in [first_message, question_message, second_message] {
        assert_eq!(desktop_count(&calls, message), 1, "{message}: not again");
    }
    assert_eq!(
        calls.lock().unwrap().len(),
        4,
        "{:#?}",
        calls.lock().unwrap()
    );
    for id in [&first, &question, &second, &third] {
        assert_eq!(
            posted(&got, id, 200).len(),
            1,
            "{id} reached the webhook once"
        );
    }
    assert_eq!(got.lock().unwrap().len(), 5, "{:#?}", got.lock().unwrap());
}
