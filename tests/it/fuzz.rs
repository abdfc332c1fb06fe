//! Fuzz targets against real processes (proptest, through `troupe-fuzz`): arbitrary params for
//! every operation of the registry through a real daemon's socket, arbitrary JSON-RPC frames
//! and bytes at its HTTP and socket doors, arbitrary LSP frames and requests at a real
//! `troupe lsp`, and arbitrary tool calls at a real `troupe mcp`; the ACP door (`acp.rs`),
//! Claude Code's hooks (`hooks.rs`) and the NATS hub and workers (`remote.rs`) have theirs
//! beside. Every case is answered or refused with a typed error within a bound, nothing panics,
//! and the daemon keeps serving. A long-poll is known from its params (`wait_ms`), not a list.
//! `cargo test` runs a short fixed corpus; `scripts/fuzz` runs each target for minutes.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use proptest::prelude::*;
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use troupe_api::OPERATIONS;
use troupe_api::error::codes;
use troupe_fuzz::proptest;

use crate::support::{BIN, TestDaemon, register};

mod acp;
mod hooks;
mod remote;

/// How long any one answer may take before the case counts as a hang (generous: the machine
/// may be loaded; an answer normally takes milliseconds).
const HANG: Duration = Duration::from_secs(30);
/// How long a long-poll is given before we stop waiting: one that waits as asked (or its
/// default wait, 30 s for a person's answer) is not a hang.
const LONG_POLL: Duration = Duration::from_secs(2);

/// Whether `op` is a long-poll: learnt from the operation list (its params take `wait_ms`), so
/// a new long-poll (`ask_person` came after these targets) needs no entry here.
fn long_poll(op: &str) -> bool {
    troupe_api::param_field(op, "wait_ms") != troupe_api::Field::Absent
}

/// An operation whose summary says it is a long-poll takes `wait_ms`: one that waited some
/// other way would be taken for a hang by these targets.
#[test]
fn the_long_polls_are_learnt_from_the_operation_list() {
    let learnt: Vec<&str> = OPERATIONS
        .iter()
        .map(|o| o.name)
        .filter(|o| long_poll(o))
        .collect();
    for op in ["poll_messages", "request_permission", "ask_person"] {
        assert!(learnt.contains(&op), "{op} is not learnt: {learnt:?}");
    }
    for op in OPERATIONS
        .iter()
        .filter(|o| o.summary.contains("long-poll"))
    {
        assert!(
            long_poll(op.name),
            "{} says it is a long-poll but takes no wait_ms",
            op.name
        );
    }
}

/// The codes an operation may answer bad input with (-32603 would mean a panic or an untyped
/// failure, and fails the case).
const TYPED: &[i32] = &[
    codes::PARSE_ERROR,
    codes::INVALID_PARAMS,
    codes::METHOD_NOT_FOUND,
    codes::OVERSIZED_REQUEST,
    codes::NOT_FOUND,
    codes::FORBIDDEN,
    codes::TOO_LARGE,
    codes::CONFLICT,
    codes::UNAVAILABLE,
    codes::PLUGIN,
];

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn schema_of(op: &troupe_api::Operation) -> Value {
    serde_json::to_value((op.params_schema)()).unwrap()
}

/// A daemon with a project and a registered session, and the strings a fuzz case may reuse.
struct World {
    daemon: TestDaemon,
    pool: Vec<String>,
}

fn world(rt: &tokio::runtime::Runtime) -> World {
    let daemon = TestDaemon::start();
    let project = daemon.project("proj");
    let pool = rt.block_on(async {
        let c = daemon.client().await;
        let a = register(&c, "claude", &project, None).await;
        let b = register(&c, "codex", &project, Some(&a)).await;
        vec![a, b, project.clone(), format!("{project}/src/main.rs")]
    });
    World { daemon, pool }
}

/// The daemon still runs and answers `daemon_status` on a fresh connection.
fn assert_serving(rt: &tokio::runtime::Runtime, w: &mut World) -> Result<(), TestCaseError> {
    if let Some(status) = w.daemon.child.as_mut().unwrap().try_wait().unwrap() {
        return Err(TestCaseError::fail(format!("the daemon exited: {status}")));
    }
    rt.block_on(async {
        let c = tokio::time::timeout(HANG, w.daemon.client())
            .await
            .map_err(|_| TestCaseError::fail("no new connection within the bound"))?;
        tokio::time::timeout(HANG, c.call("daemon_status", json!({})))
            .await
            .map_err(|_| TestCaseError::fail("daemon_status hung"))?
            .map_err(|e| TestCaseError::fail(format!("daemon_status failed: {e}")))?;
        Ok(())
    })
}

/// Denies every permission request at once (from a task of the current runtime), so that a
/// `request_permission` answers.
fn deny_every_request(decider: troupe::client::Client) {
    tokio::spawn(async move {
        let Ok(mut sub) = decider
            .subscribe("subscribe_approvals", json!({}), "unsubscribe_approvals")
            .await
        else {
            return;
        };
        while let Some(Ok(snapshot)) = sub.next().await {
            for a in snapshot["approvals"].as_array().into_iter().flatten() {
                // Decided meanwhile (by a fuzz case): nothing to do.
                let _ = decider
                    .call(
                        "decide_approval",
                        json!({ "approval_id": a["approval_id"], "decision": "deny" }),
                    )
                    .await;
            }
        }
    });
}

// --- the registry: params of every operation ----------------------------------------------

/// Seeds every operation gets first: absent, wrong kinds, and an unknown field.
fn seed_params() -> Vec<Option<Value>> {
    vec![
        None,
        Some(Value::Null),
        Some(json!([])),
        Some(json!(["x", 1])),
        Some(json!("x")),
        Some(json!(0)),
        Some(json!(true)),
        Some(json!({})),
        Some(json!({ "unknown_field": 1 })),
        Some(json!({ "session_id": null, "name": [], "party_id": {}, "cwd": 1 })),
    ]
}

/// Operations the fuzzer never calls with params it could accept.
fn stops_the_daemon(op: &str, params: &Option<Value>) -> bool {
    op == "shutdown_daemon"
        && match params {
            None | Some(Value::Null) => true,
            // `{}`, or `{"leave_running": <bool>}`.
            Some(Value::Object(m)) => m
                .iter()
                .all(|(k, v)| k == "leave_running" && v.is_boolean()),
            Some(_) => false,
        }
}

/// Calls `op` with `params` and checks the answer: a result, or a typed error, in time.
async fn call_checked(
    c: &troupe::client::Client,
    op: &str,
    params: Option<Value>,
) -> Result<(), TestCaseError> {
    let bound = if long_poll(op) { LONG_POLL } else { HANG };
    let args = params.unwrap_or(Value::Null);
    match tokio::time::timeout(bound, c.call(op, args.clone())).await {
        Err(_) if long_poll(op) => Ok(()),
        Err(_) => Err(TestCaseError::fail(format!(
            "{op} hung (no answer in {bound:?}) on {args}"
        ))),
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => match e.code() {
            Some(code) if TYPED.contains(&code) => Ok(()),
            _ => Err(TestCaseError::fail(format!(
                "{op} answered {args} with an untyped error: {e}"
            ))),
        },
    }
}

fn registry_case(pool: Vec<String>) -> BoxedStrategy<(usize, Option<Value>)> {
    let per_op: Vec<BoxedStrategy<(usize, Option<Value>)>> = OPERATIONS
        .iter()
        .enumerate()
        .map(|(i, op)| {
            let shaped = troupe_fuzz::shaped(&schema_of(op), pool.clone());
            prop_oneof![
                4 => shaped.prop_map(Some),
                1 => troupe_fuzz::json_from(pool.clone()).prop_map(Some),
                1 => Just(None),
            ]
            .prop_map(move |p| (i, p))
            .boxed()
        })
        .collect();
    proptest::strategy::Union::new(per_op).boxed()
}

#[test]
fn fuzz_registry_params() {
    let rt = runtime();
    let mut w = world(&rt);
    let c = rt.block_on(w.daemon.client());
    // The seed corpus: every operation, every seed.
    for op in OPERATIONS {
        for params in seed_params() {
            if stops_the_daemon(op.name, &params) {
                continue;
            }
            rt.block_on(call_checked(&c, op.name, params))
                .unwrap_or_else(|e| panic!("seed: {e}"));
        }
    }
    assert_serving(&rt, &mut w).unwrap();
    let w = Mutex::new(w);
    let pool = w.lock().unwrap().pool.clone();
    troupe_fuzz::run(
        "registry_params",
        256,
        registry_case(pool),
        |(i, params)| {
            let op = OPERATIONS[i].name;
            if stops_the_daemon(op, &params) {
                return Ok(());
            }
            rt.block_on(call_checked(&c, op, params))
        },
    );
    assert_serving(&rt, &mut w.lock().unwrap()).unwrap();
}

// --- JSON-RPC frames and bytes at the doors -----------------------------------------------

#[derive(Debug, Clone)]
enum Door {
    /// An HTTP POST to the loopback port (the WebSocket's HTTP side).
    Tcp,
    /// An HTTP POST over the Unix socket.
    Socket,
    /// Bytes straight onto the Unix socket, no HTTP.
    RawSocket,
}

fn method() -> BoxedStrategy<String> {
    let known: Vec<String> = OPERATIONS
        .iter()
        .map(|o| o.name.to_string())
        .filter(|n| n != "shutdown_daemon")
        .chain(
            [
                "subscribe_messages",
                "unsubscribe_messages",
                "subscribe_approvals",
                "rpc.discover",
            ]
            .map(str::to_string),
        )
        .collect();
    prop_oneof![
        3 => proptest::sample::select(known),
        1 => troupe_fuzz::string().prop_filter("not shutdown", |m| m != "shutdown_daemon"),
    ]
    .boxed()
}

fn rpc_message() -> BoxedStrategy<Value> {
    let version = prop_oneof![
        8 => Just(json!("2.0")),
        1 => Just(json!("1.0")),
        1 => Just(json!(2.0)),
        1 => troupe_fuzz::json(),
    ];
    let id = prop_oneof![
        3 => (0i64..1000).prop_map(Value::from),
        1 => troupe_fuzz::number(),
        1 => troupe_fuzz::string().prop_map(Value::from),
        1 => troupe_fuzz::json(),
    ];
    (
        version,
        proptest::option::weighted(0.8, id),
        method(),
        proptest::option::weighted(0.8, troupe_fuzz::json()),
        proptest::option::weighted(0.1, ("[a-z]{1,6}", troupe_fuzz::json())),
    )
        .prop_map(|(version, id, method, params, extra)| {
            let mut m = json!({ "jsonrpc": version, "method": method });
            if let Some(id) = id {
                m["id"] = id;
            }
            if let Some(params) = params {
                m["params"] = params;
            }
            if let Some((k, v)) = extra {
                m[k] = v;
            }
            m
        })
        .boxed()
}

fn frame_body() -> BoxedStrategy<Vec<u8>> {
    prop_oneof![
        6 => rpc_message().prop_map(|m| m.to_string().into_bytes()),
        2 => proptest::collection::vec(rpc_message(), 0..6)
            .prop_map(|b| Value::Array(b).to_string().into_bytes()),
        1 => troupe_fuzz::json().prop_map(|v| v.to_string().into_bytes()),
        1 => troupe_fuzz::bytes(),
        1 => (1usize..2000).prop_map(|n| "[".repeat(n).into_bytes()),
    ]
    .boxed()
}

fn frames_case() -> BoxedStrategy<(Door, Vec<u8>)> {
    prop_oneof![
        3 => frame_body().prop_map(|b| (Door::Tcp, b)),
        3 => frame_body().prop_map(|b| (Door::Socket, b)),
        1 => troupe_fuzz::bytes().prop_map(|b| (Door::RawSocket, b)),
        1 => frame_body().prop_map(|b| {
            // A request head, then anything.
            let mut raw = format!("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n", b.len() / 2).into_bytes();
            raw.extend(b);
            (Door::RawSocket, raw)
        }),
    ]
    .boxed()
}

fn post(token: &str, body: &[u8]) -> Vec<u8> {
    let mut raw = format!(
        "POST / HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nAuthorization: Bearer {token}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    raw.extend_from_slice(body);
    raw
}

/// Sends `bytes` and reads until the daemon closes; the reply (maybe empty). `half_close`
/// ends our side after the bytes: raw bytes need it to reach an end, an HTTP request must not
/// (the server drops a request whose client half-closed, as HTTP/1 servers may).
fn exchange(mut stream: impl Read + Write, bytes: &[u8], half_close: impl FnOnce()) -> Vec<u8> {
    // The daemon may answer (and close) before reading everything.
    let _ = stream.write_all(bytes);
    half_close();
    let mut reply = Vec::new();
    let _ = stream.read_to_end(&mut reply);
    reply
}

#[test]
fn fuzz_rpc_frames() {
    let rt = runtime();
    let w = Mutex::new(world(&rt));
    let (addr, token, socket) = {
        let w = w.lock().unwrap();
        (
            w.daemon.ws_addr(),
            w.daemon.token(),
            w.daemon.layout.socket_path(),
        )
    };
    troupe_fuzz::run("rpc_frames", 192, frames_case(), |(door, body)| {
        let reply = match door {
            Door::Tcp => {
                let s = std::net::TcpStream::connect(&addr).unwrap();
                s.set_read_timeout(Some(HANG)).unwrap();
                exchange(s, &post(&token, &body), || {})
            }
            Door::Socket | Door::RawSocket => {
                let s = UnixStream::connect(&socket).unwrap();
                s.set_read_timeout(Some(HANG)).unwrap();
                let half = s.try_clone().unwrap();
                let bytes = match door {
                    Door::Socket => post(&token, &body),
                    _ => body.clone(),
                };
                exchange(s, &bytes, || {
                    if matches!(door, Door::RawSocket) {
                        let _ = half.shutdown(std::net::Shutdown::Write);
                    }
                })
            }
        };
        let text = String::from_utf8_lossy(&reply);
        if !matches!(door, Door::RawSocket) {
            // An HTTP request always gets an HTTP answer, in time.
            prop_assert!(text.starts_with("HTTP/1.1 "), "no HTTP answer: {text:?}");
            let status: u16 = text[9..12].parse().unwrap_or(0);
            prop_assert!(
                [200, 400, 405, 413, 415].contains(&status),
                "HTTP {status}: {text}"
            );
            prop_assert!(!text.contains("-32603"), "an internal error: {text}");
        }
        assert_serving(&rt, &mut w.lock().unwrap())
    });
}

// --- LSP: frames and requests at a real `troupe lsp` ----------------------------------------

/// A `troupe lsp` child with its stderr collected (to catch a panic message) and its stdout
/// read all along, as an editor does (a server blocked writing to a full pipe is not a hang).
struct Lsp {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    stdout: tokio::sync::mpsc::UnboundedReceiver<Value>,
    stderr: Arc<Mutex<String>>,
}

impl Lsp {
    fn start(w: &World) -> Lsp {
        let mut child = tokio::process::Command::new(BIN)
            .arg("lsp")
            .env("TROUPE_HOME", &w.daemon.layout.data_dir)
            .env("TROUPE_RUNTIME_DIR", &w.daemon.layout.runtime_dir)
            .env("TROUPE_LOG", "warn")
            .env("RUST_BACKTRACE", "0")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut err = child.stderr.take().unwrap();
        let sink = stderr.clone();
        tokio::spawn(async move {
            let mut buf = vec![0; 4096];
            while let Ok(n) = err.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        let (tx, stdout) = tokio::sync::mpsc::unbounded_channel();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        tokio::spawn(async move {
            while let Some(m) = read_message(&mut out).await {
                if tx.send(m).is_err() {
                    break;
                }
            }
        });
        Lsp {
            stdin: child.stdin.take().unwrap(),
            stdout,
            child,
            stderr,
        }
    }

    async fn write(&mut self, bytes: &[u8]) -> bool {
        self.stdin.write_all(bytes).await.is_ok() && self.stdin.flush().await.is_ok()
    }

    async fn send(&mut self, msg: &Value) -> bool {
        let body = msg.to_string();
        self.write(format!("Content-Length: {}\r\n\r\n{body}", body.len()).as_bytes())
            .await
    }

    /// The next message, or None when the output ended or was not LSP.
    async fn read(&mut self) -> Option<Value> {
        self.stdout.recv().await
    }

    /// Waits for the response to request `id` (answering the server's own requests).
    async fn answer_to(&mut self, id: &Value) -> Result<Value, String> {
        let wait = async {
            loop {
                let Some(m) = self.read().await else {
                    return Err("troupe lsp closed its output".to_string());
                };
                if m.get("method").is_none() && m.get("id") == Some(id) {
                    return Ok(m);
                }
                if m.get("method").is_some()
                    && let Some(their) = m.get("id")
                {
                    let reply = json!({ "jsonrpc": "2.0", "id": their, "result": null });
                    self.send(&reply).await;
                }
            }
        };
        tokio::time::timeout(HANG, wait)
            .await
            .map_err(|_| format!("no answer to request {id} in {HANG:?}"))?
    }

    fn panicked(&self) -> Option<String> {
        let err = self.stderr.lock().unwrap();
        err.contains("panicked").then(|| err.clone())
    }
}

/// One message from the server's output, or None at its end (or at output that is not LSP).
async fn read_message(out: &mut BufReader<tokio::process::ChildStdout>) -> Option<Value> {
    let mut len = None;
    loop {
        let mut line = String::new();
        if out.read_line(&mut line).await.ok()? == 0 {
            return None;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some(v) = line.strip_prefix("Content-Length: ") {
            len = v.parse::<usize>().ok();
        }
    }
    let mut body = vec![0; len?];
    out.read_exact(&mut body).await.ok()?;
    serde_json::from_slice(&body).ok()
}

fn initialize(root: &str) -> Value {
    let uri = format!("file://{root}");
    json!({ "jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {
        "processId": null, "rootUri": uri, "capabilities": {},
        "workspaceFolders": [{ "uri": uri, "name": "w" }] } })
}

fn position() -> BoxedStrategy<Value> {
    let n = || {
        prop_oneof![
            (0u32..200).prop_map(Value::from),
            Just(json!(u32::MAX)),
            Just(json!(u64::from(u32::MAX) + 1)),
            Just(json!(-1)),
            troupe_fuzz::number(),
        ]
    };
    (n(), n())
        .prop_map(|(line, character)| json!({ "line": line, "character": character }))
        .boxed()
}

fn lsp_request(pool: Vec<String>) -> BoxedStrategy<Value> {
    let uri = prop_oneof![
        3 => proptest::sample::select(pool.clone()).prop_map(|p| format!("file://{p}")),
        1 => troupe_fuzz::string(),
        1 => Just("file:///%ZZ/../../etc/passwd".to_string()),
        1 => Just("untitled:Untitled-1".to_string()),
    ];
    // Not the long-polls: one that waits as asked holds a request slot of the server (their
    // params are fuzzed through `registry_params`).
    let ops: Vec<String> = OPERATIONS
        .iter()
        .filter(|o| o.name != "shutdown_daemon" && !long_poll(o.name))
        .map(|o| format!("troupe.{}", o.name))
        .collect();
    let command = prop_oneof![
        4 => proptest::sample::select(ops),
        1 => troupe_fuzz::string().prop_filter("not shutdown", |c| !c.ends_with("shutdown_daemon")),
    ];
    let execute = (
        command,
        proptest::collection::vec(troupe_fuzz::json_from(pool.clone()), 0..3),
    )
        .prop_map(|(command, args)| {
            json!({ "method": "workspace/executeCommand",
                "params": { "command": command, "arguments": args } })
        });
    let range =
        (position(), position()).prop_map(|(start, end)| json!({ "start": start, "end": end }));
    let code_action =
        (uri.clone(), range, troupe_fuzz::json()).prop_map(|(uri, range, diagnostics)| {
            json!({ "method": "textDocument/codeAction", "params": {
                "textDocument": { "uri": uri }, "range": range,
                "context": { "diagnostics": diagnostics } } })
        });
    let code_lens = uri.prop_map(|uri| {
        json!({ "method": "textDocument/codeLens", "params": { "textDocument": { "uri": uri } } })
    });
    let other = (
        prop_oneof![
            Just("textDocument/hover".to_string()),
            Just("workspace/symbol".to_string()),
            Just("$/cancelRequest".to_string()),
            Just("textDocument/didOpen".to_string()),
            troupe_fuzz::string(),
        ],
        troupe_fuzz::json(),
    )
        .prop_map(|(method, params)| json!({ "method": method, "params": params }));
    prop_oneof![
        4 => execute,
        3 => code_action,
        1 => code_lens,
        1 => other,
    ]
    .prop_filter("not exit or shutdown", |m| {
        !matches!(
            m["method"].as_str(),
            Some("exit" | "shutdown" | "initialize")
        )
    })
    .boxed()
}

/// A pending request on a file with these (arbitrary) lines, so that diagnostics, code actions
/// and lenses have something to compute from.
fn approvals() -> BoxedStrategy<Vec<(Value, Value)>> {
    let line = prop_oneof![
        (1i64..100).prop_map(Value::from),
        Just(json!(0)),
        Just(json!(-5)),
        Just(json!(i64::MAX)),
        Just(json!(u64::from(u32::MAX) + 1)),
        Just(json!(u64::from(u32::MAX) + 2)),
        Just(Value::Null),
    ];
    proptest::collection::vec((line.clone(), line), 0..3).boxed()
}

#[test]
fn fuzz_lsp_requests() {
    let rt = runtime();
    let w = world(&rt);
    let (session, project, file) = (w.pool[0].clone(), w.pool[2].clone(), w.pool[3].clone());
    std::fs::create_dir_all(format!("{project}/src")).unwrap();
    std::fs::write(&file, "fn main() {}\n").unwrap();
    let c = rt.block_on(w.daemon.client());
    let start = || async {
        let mut lsp = Lsp::start(&w);
        assert!(lsp.send(&initialize(&project)).await);
        lsp.answer_to(&json!("init")).await.unwrap();
        lsp.send(&json!({ "jsonrpc": "2.0", "method": "initialized", "params": {} }))
            .await;
        lsp
    };
    let lsp = tokio::sync::Mutex::new(rt.block_on(start()));
    let next = std::sync::atomic::AtomicI64::new(0);
    let case = (
        approvals(),
        proptest::collection::vec(lsp_request(w.pool.clone()), 1..6),
    );
    troupe_fuzz::run("lsp_requests", 64, case, |(asks, requests)| {
        rt.block_on(async {
            for (start, end) in asks {
                let params = json!({ "session_id": session, "tool_name": "Edit",
                    "file_path": file, "start_line": start, "end_line": end, "wait_ms": 0 });
                call_checked(&c, "request_permission", Some(params)).await?;
            }
            let mut lsp = lsp.lock().await;
            // A case that ended the server failed; the next (and shrinking) starts afresh.
            if lsp.child.try_wait().unwrap().is_some() || lsp.panicked().is_some() {
                *lsp = start().await;
            }
            for mut request in requests {
                let id = json!(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
                request["jsonrpc"] = json!("2.0");
                let notification = request["method"] == "$/cancelRequest"
                    || request["method"] == "textDocument/didOpen";
                if !notification {
                    request["id"] = id.clone();
                }
                prop_assert!(lsp.send(&request).await, "troupe lsp closed its input");
                if !notification {
                    let answer = lsp.answer_to(&id).await.map_err(TestCaseError::fail)?;
                    prop_assert!(
                        answer.get("result").is_some() || answer.get("error").is_some(),
                        "{answer}"
                    );
                }
            }
            // Still in step: a code lens request is answered.
            let id = json!("probe");
            let probe = json!({ "jsonrpc": "2.0", "id": id, "method": "textDocument/codeLens",
                "params": { "textDocument": { "uri": format!("file://{file}") } } });
            prop_assert!(lsp.send(&probe).await);
            lsp.answer_to(&id).await.map_err(TestCaseError::fail)?;
            if let Some(err) = lsp.panicked() {
                return Err(TestCaseError::fail(format!("troupe lsp panicked: {err}")));
            }
            Ok(())
        })
    });
    let mut w = w;
    assert_serving(&rt, &mut w).unwrap();
}

#[derive(Debug, Clone)]
enum Frame {
    /// A well-framed message (any body).
    Framed(Vec<u8>),
    /// Anything at all, framing included.
    Raw(Vec<u8>),
}

fn lsp_frame() -> BoxedStrategy<Frame> {
    let body = prop_oneof![
        4 => rpc_message()
            .prop_filter("not exit", |m| m["method"] != "exit")
            .prop_map(|m| m.to_string().into_bytes()),
        1 => troupe_fuzz::json().prop_map(|v| v.to_string().into_bytes()),
        1 => troupe_fuzz::bytes(),
    ];
    let header = prop_oneof![
        Just("Content-Length: 99999999999999999999\r\n\r\n".to_string()),
        Just("Content-Length: -1\r\n\r\n".to_string()),
        Just("Content-Length: 0\r\n\r\n".to_string()),
        Just("Content-Type: text/plain\r\n\r\n".to_string()),
        Just("\r\n\r\n".to_string()),
        "Content-Length: [0-9]{1,4}\r\n(\r\n)?",
        troupe_fuzz::string(),
    ];
    prop_oneof![
        4 => body.prop_map(Frame::Framed),
        1 => (header, troupe_fuzz::bytes()).prop_map(|(h, mut b)| {
            let mut raw = h.into_bytes();
            raw.append(&mut b);
            Frame::Raw(raw)
        }),
        1 => troupe_fuzz::bytes().prop_map(Frame::Raw),
    ]
    .boxed()
}

#[test]
fn fuzz_lsp_frames() {
    let rt = runtime();
    let w = world(&rt);
    let project = w.pool[2].clone();
    let frames = proptest::collection::vec(lsp_frame(), 0..8);
    troupe_fuzz::run("lsp_frames", 24, frames, |frames| {
        rt.block_on(async {
            let mut lsp = Lsp::start(&w);
            let in_step = frames.iter().all(|f| matches!(f, Frame::Framed(_)));
            let mut open = true;
            for f in &frames {
                open = match f {
                    Frame::Framed(body) => {
                        let mut raw =
                            format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
                        raw.extend_from_slice(body);
                        lsp.write(&raw).await
                    }
                    Frame::Raw(raw) => lsp.write(raw).await,
                };
                if !open {
                    break;
                }
            }
            if in_step && open {
                // Framing intact: the server answers the next request.
                let mut probe = initialize(&project);
                probe["id"] = json!("probe");
                prop_assert!(lsp.send(&probe).await);
                lsp.answer_to(&json!("probe"))
                    .await
                    .map_err(TestCaseError::fail)?;
            }
            // End of input: the server stops, in time, without a panic.
            drop(lsp.stdin);
            let status = tokio::time::timeout(HANG, lsp.child.wait())
                .await
                .map_err(|_| TestCaseError::fail("troupe lsp did not exit after its input ended"))?
                .unwrap();
            let err = lsp.stderr.lock().unwrap().clone();
            prop_assert!(!err.contains("panicked"), "troupe lsp panicked: {err}");
            prop_assert!(status.code().is_some(), "killed by a signal: {status}");
            Ok(())
        })
    });
}

// --- MCP: tool calls at a real `troupe mcp` -------------------------------------------------

#[test]
fn fuzz_mcp_tools() {
    let rt = runtime();
    let mut w = world(&rt);
    let session = w.pool[0].clone();
    let (mcp, tools) = rt.block_on(async {
        deny_every_request(w.daemon.client().await);
        let layout = w.daemon.layout.clone();
        let s = session.clone();
        let cmd = tokio::process::Command::new(BIN).configure(move |c| {
            c.arg("--data-dir")
                .arg(&layout.data_dir)
                .arg("mcp")
                .env("TROUPE_RUNTIME_DIR", &layout.runtime_dir)
                .env("TROUPE_SESSION_ID", &s)
                .env("TROUPE_LOG", "warn");
        });
        let mcp = ().serve(TokioChildProcess::new(cmd).unwrap()).await.unwrap();
        let tools = mcp.list_all_tools().await.unwrap();
        (mcp, tools)
    });
    let mut names: Vec<String> = tools.iter().map(|t| t.name.to_string()).collect();
    names.extend(["launch_party", "shutdown_daemon", "daemon_status"].map(str::to_string));
    let shaped: Vec<BoxedStrategy<(String, Value)>> = tools
        .iter()
        .map(|t| {
            let name = t.name.to_string();
            let schema = Value::Object((*t.input_schema).clone());
            troupe_fuzz::shaped(&schema, w.pool.clone())
                .prop_map(move |args| (name.clone(), args))
                .boxed()
        })
        .collect();
    let case = prop_oneof![
        4 => proptest::strategy::Union::new(shaped),
        1 => (
            prop_oneof![proptest::sample::select(names), troupe_fuzz::string()],
            troupe_fuzz::json_from(w.pool.clone()),
        ),
    ];
    troupe_fuzz::run("mcp_tools", 128, case, |(name, args)| {
        rt.block_on(async {
            let mut request = CallToolRequestParams::new(name.clone());
            if let Value::Object(map) = &args {
                request = request.with_arguments(map.clone());
            }
            // A tool is its operation: a long-poll's tool waits as the operation does.
            let bound = if long_poll(&name) { LONG_POLL } else { HANG };
            match tokio::time::timeout(bound, mcp.call_tool(request)).await {
                Err(_) if long_poll(&name) => {}
                Err(_) => {
                    return Err(TestCaseError::fail(format!("{name} hung on {args}")));
                }
                // A result (maybe an error result the model reads) or a protocol error.
                Ok(Ok(_)) => {}
                Ok(Err(rmcp::ServiceError::McpError(_))) => {}
                Ok(Err(e)) => {
                    return Err(TestCaseError::fail(format!("{name} broke the door: {e}")));
                }
            }
            Ok(())
        })
    });
    assert!(!mcp.is_transport_closed(), "troupe mcp stopped");
    assert_serving(&rt, &mut w).unwrap();
}

/// Found reading the code the fuzz targets drive: a timeout of 1e300 seconds passed the checks
/// (positive and finite) and then panicked converting to a `Duration` in the orchestrator
/// (`start_agent`) or the approval timer. Now refused with a typed error, and the daemon goes on.
#[tokio::test]
async fn huge_timeouts_are_refused_not_a_panic() {
    let mut w = world_async().await;
    let c = w.daemon.client().await;
    let parent = w.pool[0].clone();
    for field in ["timeout_secs", "approval_timeout_secs"] {
        let mut def = json!({ "name": format!("huge-{field}"), "command": ["true"] });
        def[field] = json!(1e300);
        let err = c
            .call("create_agent_definition", json!({ "definition": def }))
            .await
            .unwrap_err();
        assert_eq!(err.code(), Some(codes::INVALID_PARAMS), "{err}");
        assert!(err.to_string().contains(field), "{err}");
    }
    c.call(
        "create_agent_definition",
        json!({ "definition": { "name": "plain", "command": ["true"] } }),
    )
    .await
    .unwrap();
    let err = c
        .call(
            "start_agent",
            json!({ "agent": "plain", "prompt": "x", "parent_session_id": parent, "timeout": 1e300 }),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(codes::INVALID_PARAMS), "{err}");
    // Still serving, and agents still run (the orchestrator is alive: a process was spawned;
    // it exits without `complete`, so the run counts as crashed).
    let run = crate::support::run_to_end(&c, "plain", "x", &parent).await;
    assert!(run["run"]["pid"].is_number(), "{run}");
    assert_eq!(run["run"]["error"], "exit status 0", "{run}");
    assert!(
        w.daemon
            .child
            .as_mut()
            .unwrap()
            .try_wait()
            .unwrap()
            .is_none()
    );
}

async fn world_async() -> World {
    let daemon = TestDaemon::start();
    let project = daemon.project("proj");
    let c = daemon.client().await;
    let a = register(&c, "claude", &project, None).await;
    World {
        daemon,
        pool: vec![a],
    }
}

/// Found by `rpc_frames`: a subscription sent as a plain HTTP request was answered with a bare
/// "Internal error"; now a typed error that says it needs a WebSocket.
#[test]
fn a_subscription_over_plain_http_is_refused_clearly() {
    let daemon = TestDaemon::start();
    for method in ["subscribe_messages", "unsubscribe_approvals"] {
        let body = format!(r#"{{"jsonrpc":"2.0","method":"{method}","id":0}}"#);
        let (status, reply) =
            crate::support::http_post(&daemon.ws_addr(), Some(&daemon.token()), body.as_bytes());
        assert_eq!(status, 200, "{reply}");
        let err = crate::support::rpc_error(&reply);
        assert_eq!(err["code"], codes::INVALID_REQUEST, "{err}");
        assert!(
            err["message"]
                .as_str()
                .unwrap()
                .contains("needs a WebSocket"),
            "{err}"
        );
        // In a batch too, beside an unknown method and a call that is served.
        let batch = format!(
            r#"[{body},{{"jsonrpc":"2.0","method":"nope","id":1}},{{"jsonrpc":"2.0","method":"daemon_status","id":2}}]"#
        );
        let (status, reply) =
            crate::support::http_post(&daemon.ws_addr(), Some(&daemon.token()), batch.as_bytes());
        assert_eq!(status, 200, "{reply}");
        let answers: Value = serde_json::from_str(&reply).unwrap();
        let by_id = |id: i64| {
            answers
                .as_array()
                .unwrap()
                .iter()
                .find(|a| a["id"] == id)
                .cloned()
                .unwrap()
        };
        assert_eq!(by_id(0)["error"]["code"], codes::INVALID_REQUEST, "{reply}");
        assert_eq!(
            by_id(1)["error"]["code"],
            codes::METHOD_NOT_FOUND,
            "{reply}"
        );
        assert!(
            by_id(1)["error"]["message"]
                .as_str()
                .unwrap()
                .contains("nope"),
            "{reply}"
        );
        assert!(by_id(2)["result"]["pid"].is_number(), "{reply}");
    }
}
