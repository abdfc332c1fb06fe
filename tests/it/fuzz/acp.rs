//! Fuzz target for the ACP door: what an editor sends to a real `troupe acp` on stdio. Lines
//! shaped after the protocol (`initialize`, `authenticate`, `session/new`, `session/load`,
//! `session/list`, `session/prompt` with slash commands, text and resources, `session/cancel`),
//! unknown methods, odd ids, lines that are not JSON, and arbitrary answers to the door's own
//! requests (`session/request_permission`, `elicitation/create`) that a member's permission
//! requests and questions raise. Properties: every request gets exactly one answer, a result or
//! an error with a protocol code (never an internal error), within a bound; the door writes only
//! JSON-RPC on stdout, never panics, serves the next request after every case and exits cleanly
//! when its input ends; the daemon keeps serving.

use std::collections::{HashMap, VecDeque};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use proptest::prelude::*;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, watch};
use troupe_api::error::codes;
use troupe_fuzz::proptest;

use super::{HANG, World, assert_serving, runtime, world};
use crate::support::{BIN, define, executable, repo};

/// How long a case waits for a prompt's turn before it cancels it (the `asks` party takes a few
/// seconds when nobody answers).
const TURN: Duration = Duration::from_secs(15);

/// A member that completes at once: the project's default party.
const QUICK: &str = "#!/bin/sh\ntroupe call complete '{\"output\":\"done\"}' >/dev/null\n";

/// A member that asks permission and two questions (one with choices, one in the person's own
/// words), waiting a little for each, then completes: the door asks the editor all three.
const ASKER: &str = r#"#!/bin/sh
troupe call request_permission '{"tool_name":"write_file","input":{"content":"x"},"wait_ms":2000}' >/dev/null
troupe call ask_person '{"question":"Which color?","choices":["red","blue"],"wait_ms":2000}' >/dev/null
troupe call ask_person '{"question":"Anything else?","wait_ms":2000}' >/dev/null
troupe call complete '{"output":"asked"}' >/dev/null
"#;

/// The codes the door may answer with: parse error, invalid request, method not found, invalid
/// params, resource not found, request cancelled, and the daemon's own refusals (forbidden,
/// too large, conflict, unavailable, plugin). An internal error (-32603) fails the case.
const TYPED: &[i64] = &[
    -32700,
    -32600,
    -32601,
    -32602,
    -32002,
    -32800,
    codes::FORBIDDEN as i64,
    codes::TOO_LARGE as i64,
    codes::CONFLICT as i64,
    codes::UNAVAILABLE as i64,
    codes::PLUGIN as i64,
];

/// Strings that stand for a session the door made (the `n`th known, modulo), put in when sent.
const SESSION_TOKENS: &[&str] = &["@session0", "@session1", "@session2", "@session3"];

const PROMPTS: &[&str] = &[
    "/help",
    "/status",
    "/inbox",
    "/approve",
    "/approve all",
    "/deny",
    "/land",
    "/land squash",
    "/land sideways",
    "/cancel",
    "/answer blue",
    "/answer",
    "/party",
    "/party quick go",
    "/party asks go",
    "/party no-such-party go",
    "/party ../../etc go",
    "/agent",
    "/agent quick-member go",
    "/agent no-such-agent go",
    "/frobnicate",
    "/",
    "//",
    "",
    "   ",
    "fix the bug",
];

fn text_block() -> Value {
    json!({ "type": "object",
            "properties": { "type": { "const": "text" }, "text": { "enum": PROMPTS } },
            "required": ["type", "text"] })
}

/// A content block of a prompt.
fn block_schema() -> Value {
    json!({ "anyOf": [
        text_block(),
        text_block(),
        { "type": "object", "properties": { "type": { "const": "text" },
          "text": { "type": "string" } }, "required": ["type", "text"] },
        { "type": "object", "properties": { "type": { "const": "resource_link" },
          "name": { "type": "string" }, "uri": { "type": "string" } },
          "required": ["type", "name", "uri"] },
        { "type": "object", "properties": { "type": { "const": "resource" },
          "resource": { "type": "object", "properties": { "uri": { "type": "string" },
            "text": { "type": "string" }, "mimeType": { "type": "string" } },
            "required": ["uri", "text"] } }, "required": ["type", "resource"] },
        { "type": "object", "properties": { "type": { "const": "image" },
          "data": { "type": "string" }, "mimeType": { "type": "string" } },
          "required": ["type", "data", "mimeType"] }
    ] })
}

/// The params of each method, as JSON Schemas for [`troupe_fuzz::shaped`]; `project` is the
/// directory whose sessions prompt the parties defined for these cases.
fn schemas(project: &str) -> Vec<(&'static str, Value)> {
    let session = json!({ "anyOf": [{ "enum": SESSION_TOKENS }, { "enum": SESSION_TOKENS },
                                     { "enum": SESSION_TOKENS }, { "type": "string" }] });
    let cwd = json!({ "anyOf": [{ "const": project }, { "const": project },
                                 { "type": "string" }] });
    let text = json!({ "type": "string" });
    let server = json!({ "type": "object", "properties": {
        "name": text, "command": text,
        "args": { "type": "array", "items": text },
        "env": { "type": "array", "items": { "type": "object",
            "properties": { "name": text, "value": text }, "required": ["name", "value"] } } },
        "required": ["name", "command", "args", "env"] });
    let mcp_servers = json!({ "anyOf": [{ "const": [] }, { "const": [] },
                                         { "type": "array", "items": server }] });
    let block = block_schema();
    vec![
        (
            "initialize",
            json!({ "type": "object", "properties": {
                "protocolVersion": { "enum": [1, 1, 1, 0, 2, 65536, -1, "1"] },
                "clientCapabilities": { "type": "object", "properties": {
                    "fs": { "type": "object", "properties": {
                        "readTextFile": { "type": "boolean" },
                        "writeTextFile": { "type": "boolean" } } },
                    "terminal": { "type": "boolean" },
                    "elicitation": { "type": "object", "properties": {
                        "form": { "type": "object" } } } } },
                "clientInfo": { "type": "object", "properties": {
                    "name": { "type": "string" }, "version": { "type": "string" } } } },
                "required": ["protocolVersion"] }),
        ),
        (
            "authenticate",
            json!({ "type": "object", "properties": { "methodId": { "type": "string" } },
                    "required": ["methodId"] }),
        ),
        (
            "session/new",
            json!({ "type": "object", "properties": { "cwd": cwd,
                    "mcpServers": mcp_servers }, "required": ["cwd", "mcpServers"] }),
        ),
        (
            "session/load",
            json!({ "type": "object", "properties": { "sessionId": session,
                    "cwd": cwd, "mcpServers": mcp_servers },
                    "required": ["sessionId", "cwd", "mcpServers"] }),
        ),
        (
            "session/list",
            json!({ "type": "object", "properties": { "cwd": cwd,
                    "cursor": { "type": "string" } } }),
        ),
        (
            "session/prompt",
            json!({ "type": "object", "properties": { "sessionId": session,
                    "prompt": { "type": "array", "items": block } },
                    "required": ["sessionId", "prompt"] }),
        ),
        (
            "session/set_mode",
            json!({ "type": "object", "properties": { "sessionId": session,
                    "modeId": { "type": "string" } }, "required": ["sessionId", "modeId"] }),
        ),
    ]
}

fn cancel_schema() -> Value {
    json!({ "type": "object", "properties": { "sessionId": { "anyOf": [
                { "enum": SESSION_TOKENS }, { "type": "string" }] } },
            "required": ["sessionId"] })
}

/// A request's id: ours to match its answer, or one the protocol does not allow.
#[derive(Debug, Clone)]
enum Id {
    Number,
    Text,
    Odd(Value),
}

#[derive(Debug, Clone)]
enum Line {
    Request {
        method: String,
        params: Option<Value>,
        id: Id,
    },
    Notification {
        method: String,
        params: Option<Value>,
    },
    /// Anything, sent as one line (a newline inside splits it).
    Raw(Vec<u8>),
}

/// How the editor answers the door's next request.
#[derive(Debug, Clone)]
enum Reply {
    /// The offered option at this index (modulo).
    Choose(usize),
    Cancelled,
    /// A form filled in with these words.
    Accept(String),
    Decline,
    /// Any result at all.
    Result(Value),
    Error(i64, String),
    /// No answer: the door's ask waits until it is withdrawn.
    Silence,
}

#[derive(Debug, Clone)]
struct Case {
    /// Start with a new `troupe acp` (the old one's input ends): its first lines come before
    /// any `initialize`.
    fresh: bool,
    lines: Vec<Line>,
    replies: Vec<Reply>,
}

fn request(project: &str, pool: &[String]) -> BoxedStrategy<Line> {
    let shaped: Vec<BoxedStrategy<(String, Value)>> = schemas(project)
        .into_iter()
        .map(|(method, schema)| {
            troupe_fuzz::shaped(&schema, pool.to_vec())
                .prop_map(move |p| (method.to_string(), p))
                .boxed()
        })
        .collect();
    // A prompt an editor would send: a session of ours, a slash command or words first.
    let first = prop_oneof![
        4 => proptest::sample::select(PROMPTS).prop_map(str::to_string),
        1 => Just("/party asks go".to_string()),
        1 => troupe_fuzz::string(),
    ];
    let more = troupe_fuzz::shaped(
        &json!({ "type": "array", "items": block_schema() }),
        pool.to_vec(),
    );
    let session = prop_oneof![
        4 => proptest::sample::select(SESSION_TOKENS).prop_map(str::to_string),
        1 => troupe_fuzz::string_from(pool.to_vec()),
    ];
    let prompt = (session, first, proptest::option::weighted(0.2, more)).prop_map(
        |(session, first, more)| {
            let mut blocks = vec![json!({ "type": "text", "text": first })];
            blocks.extend(more.and_then(|m| m.as_array().cloned()).unwrap_or_default());
            (
                "session/prompt".to_string(),
                json!({ "sessionId": session, "prompt": blocks }),
            )
        },
    );
    let method_params = prop_oneof![
        8 => proptest::strategy::Union::new(shaped),
        6 => prompt,
        1 => (
            prop_oneof![
                Just("session/unknown".to_string()),
                Just("fs/read_text_file".to_string()),
                Just("_troupe/anything".to_string()),
                troupe_fuzz::string(),
            ],
            troupe_fuzz::json_from(pool.to_vec()),
        ),
    ];
    let id = prop_oneof![
        6 => Just(Id::Number),
        3 => Just(Id::Text),
        1 => prop_oneof![
            Just(Value::Null),
            Just(json!(1.5)),
            Just(json!(-1)),
            Just(json!(u64::MAX)),
            Just(json!(true)),
            Just(json!({ "id": 1 })),
            Just(json!([1])),
        ]
        .prop_map(Id::Odd),
    ];
    (
        method_params,
        proptest::option::weighted(0.97, Just(())),
        id,
    )
        .prop_map(|((method, params), with_params, id)| Line::Request {
            method,
            params: with_params.map(|()| params),
            id,
        })
        .boxed()
}

fn line(project: &str, pool: Vec<String>) -> BoxedStrategy<Line> {
    let cancel =
        troupe_fuzz::shaped(&cancel_schema(), pool.clone()).prop_map(|params| Line::Notification {
            method: "session/cancel".into(),
            params: Some(params),
        });
    let other_notification = (
        prop_oneof![
            Just("$/cancel_request".to_string()),
            Just("session/update".to_string()),
            troupe_fuzz::string(),
        ],
        troupe_fuzz::json_from(pool.clone()),
    )
        .prop_map(|(method, params)| Line::Notification {
            method,
            params: Some(params),
        });
    let raw = prop_oneof![
        Just(b"{this is not json".to_vec()),
        Just(b"".to_vec()),
        Just(b"null".to_vec()),
        Just(br#"{"jsonrpc":"2.0","id":0,"result":{}}"#.to_vec()),
        Just(br#"{"jsonrpc":"2.0","id":1,"error":{"code":-1,"message":"x"}}"#.to_vec()),
        troupe_fuzz::json_from(pool.clone()).prop_map(|v| v.to_string().into_bytes()),
        troupe_fuzz::nasty_string().prop_map(String::into_bytes),
        troupe_fuzz::bytes(),
    ];
    prop_oneof![
        10 => request(project, &pool),
        2 => cancel,
        1 => other_notification,
        2 => raw.prop_map(Line::Raw),
    ]
    .boxed()
}

fn reply() -> BoxedStrategy<Reply> {
    prop_oneof![
        4 => (0usize..4).prop_map(Reply::Choose),
        2 => Just(Reply::Cancelled),
        2 => troupe_fuzz::string().prop_map(Reply::Accept),
        1 => Just(Reply::Decline),
        1 => troupe_fuzz::json().prop_map(Reply::Result),
        1 => (any::<i64>(), troupe_fuzz::string()).prop_map(|(c, m)| Reply::Error(c, m)),
        1 => Just(Reply::Silence),
    ]
    .boxed()
}

fn case(project: &str, pool: Vec<String>) -> BoxedStrategy<Case> {
    (
        proptest::bool::weighted(0.08),
        proptest::collection::vec(line(project, pool), 1..7),
        proptest::collection::vec(reply(), 0..4),
    )
        .prop_map(|(fresh, lines, replies)| Case {
            fresh,
            lines,
            replies,
        })
        .boxed()
}

/// What the door said on stdout, as the reader task sorted it.
#[derive(Default)]
struct Seen {
    /// Answers to our requests, by their id (as JSON text).
    answers: HashMap<String, Value>,
    /// Lines that were not JSON-RPC messages, and malformed updates.
    garbage: Vec<String>,
}

/// A `troupe acp` child: a writer task owns its stdin, a reader task its stdout (answering the
/// door's requests from `replies`), its stderr is kept to catch a panic.
struct Door {
    child: tokio::process::Child,
    input: mpsc::UnboundedSender<Option<Vec<u8>>>,
    seen: Arc<Mutex<Seen>>,
    changed: watch::Receiver<u64>,
    replies: Arc<Mutex<VecDeque<Reply>>>,
    stderr: Arc<Mutex<String>>,
    next_id: i64,
}

impl Door {
    fn start(w: &World) -> Door {
        let mut child = tokio::process::Command::new(BIN)
            .arg("--data-dir")
            .arg(&w.daemon.layout.data_dir)
            .arg("acp")
            .env("TROUPE_RUNTIME_DIR", &w.daemon.layout.runtime_dir)
            .env("TROUPE_LOG", "warn")
            .env("RUST_BACKTRACE", "0")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let (input, mut lines) = mpsc::unbounded_channel::<Option<Vec<u8>>>();
        let mut stdin = child.stdin.take().unwrap();
        tokio::spawn(async move {
            // None closes the door's input.
            while let Some(Some(mut line)) = lines.recv().await {
                line.push(b'\n');
                if stdin.write_all(&line).await.is_err() || stdin.flush().await.is_err() {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let (mut err, sink) = (child.stderr.take().unwrap(), stderr.clone());
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
        let seen = Arc::new(Mutex::new(Seen::default()));
        let replies = Arc::new(Mutex::new(VecDeque::new()));
        let (bump, changed) = watch::channel(0u64);
        let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
        let (seen2, replies2, to_door) = (seen.clone(), replies.clone(), input.clone());
        tokio::spawn(async move {
            while let Ok(Some(text)) = out.next_line().await {
                let msg = serde_json::from_str::<Value>(&text).ok().filter(|m| {
                    m["jsonrpc"] == "2.0" && (m.get("method").is_some() || m.get("id").is_some())
                });
                let Some(msg) = msg else {
                    seen2.lock().unwrap().garbage.push(text);
                    continue;
                };
                match (msg.get("method").and_then(Value::as_str), msg.get("id")) {
                    (Some(method), Some(id)) => {
                        let next = replies2.lock().unwrap().pop_front();
                        if let Some(answer) = answer(method, &msg["params"], id, next) {
                            let _ = to_door.send(Some(answer.to_string().into_bytes()));
                        }
                    }
                    (Some("session/update"), None) => {
                        let p = &msg["params"];
                        if !p["sessionId"].is_string() || !p["update"]["sessionUpdate"].is_string()
                        {
                            seen2.lock().unwrap().garbage.push(text);
                        }
                    }
                    (Some(_), None) => {}
                    (None, Some(id)) => {
                        seen2.lock().unwrap().answers.insert(id.to_string(), msg);
                    }
                    (None, None) => unreachable!("filtered above"),
                }
                bump.send_modify(|n| *n += 1);
            }
            // The end of its output wakes the waiters too.
            bump.send_modify(|n| *n += 1);
        });
        Door {
            child,
            input,
            seen,
            changed,
            replies,
            stderr,
            next_id: 0,
        }
    }

    fn send(&self, line: Vec<u8>) {
        let _ = self.input.send(Some(line));
    }

    /// Sends a request; the id its answer will carry, unless the request is not a valid
    /// JSON-RPC request (an id or params of a kind the protocol does not allow: the crate
    /// answers "invalid request" with a null id, or not at all).
    fn request(&mut self, method: &str, params: Option<Value>, id: &Id) -> Option<Value> {
        self.next_id += 1;
        let structured = matches!(
            params,
            None | Some(Value::Null | Value::Object(_) | Value::Array(_))
        );
        let (id, ours) = match id {
            Id::Number => (json!(self.next_id), structured),
            Id::Text => (json!(format!("fz-{}", self.next_id)), structured),
            Id::Odd(v) => (v.clone(), false),
        };
        let mut m = json!({ "jsonrpc": "2.0", "id": id, "method": method });
        if let Some(p) = params {
            m["params"] = p;
        }
        self.send(m.to_string().into_bytes());
        ours.then_some(id)
    }

    fn panicked(&self) -> Option<String> {
        let err = self.stderr.lock().unwrap();
        err.contains("panicked").then(|| err.clone())
    }

    /// The answer to request `id`, within the bound.
    async fn answer_to(&mut self, id: &Value) -> Result<Value, TestCaseError> {
        self.answer_within(id, HANG)
            .await?
            .ok_or_else(|| TestCaseError::fail(format!("no answer to request {id} in {HANG:?}")))
    }

    /// The answer to request `id`, if it comes within `bound`; an error if the door ended.
    async fn answer_within(
        &mut self,
        id: &Value,
        bound: Duration,
    ) -> Result<Option<Value>, TestCaseError> {
        let key = id.to_string();
        let wait = async {
            loop {
                if let Some(a) = self.seen.lock().unwrap().answers.remove(&key) {
                    return Ok(a);
                }
                if self.changed.changed().await.is_err() || self.child.try_wait()?.is_some() {
                    // Its output ended: look once more, then it is gone.
                    return self
                        .seen
                        .lock()
                        .unwrap()
                        .answers
                        .remove(&key)
                        .ok_or_else(|| std::io::Error::other("troupe acp ended before answering"));
                }
            }
        };
        match tokio::time::timeout(bound, wait).await {
            Ok(Ok(a)) => Ok(Some(a)),
            Ok(Err(e)) => Err(TestCaseError::fail(format!(
                "no answer to {id}: {e}; stderr: {}",
                self.stderr.lock().unwrap()
            ))),
            Err(_) => Ok(None),
        }
    }

    /// Ends its input and waits for it to exit, cleanly and in time.
    async fn close(mut self) -> Result<(), TestCaseError> {
        let _ = self.input.send(None);
        let status = tokio::time::timeout(HANG, self.child.wait())
            .await
            .map_err(|_| TestCaseError::fail("troupe acp did not exit after its input ended"))?
            .unwrap();
        if let Some(err) = self.panicked() {
            return Err(TestCaseError::fail(format!("troupe acp panicked: {err}")));
        }
        prop_assert!(
            status.success(),
            "troupe acp ended {status}: {}",
            self.stderr.lock().unwrap()
        );
        Ok(())
    }
}

/// The editor's answer to the door's request, as `reply` says (a well-formed cancel when the
/// case has no reply left); None for no answer.
fn answer(method: &str, params: &Value, id: &Value, reply: Option<Reply>) -> Option<Value> {
    let result = |r: Value| json!({ "jsonrpc": "2.0", "id": id, "result": r });
    let cancelled = || match method {
        "elicitation/create" => json!({ "action": "cancel" }),
        _ => json!({ "outcome": { "outcome": "cancelled" } }),
    };
    Some(match reply.unwrap_or(Reply::Cancelled) {
        Reply::Choose(i) => {
            let options = params["options"].as_array().cloned().unwrap_or_default();
            match options.get(i % options.len().max(1)) {
                Some(o) => result(
                    json!({ "outcome": { "outcome": "selected", "optionId": o["optionId"] } }),
                ),
                None => result(cancelled()),
            }
        }
        Reply::Cancelled => result(cancelled()),
        Reply::Accept(words) => {
            result(json!({ "action": "accept", "content": { "answer": words } }))
        }
        Reply::Decline => result(json!({ "action": "decline" })),
        Reply::Result(v) => result(v),
        Reply::Error(code, message) => {
            json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message } })
        }
        Reply::Silence => return None,
    })
}

/// `v` with every session token replaced by a session the door made.
fn with_sessions(v: Value, sessions: &[String]) -> Value {
    match v {
        Value::String(s) => match SESSION_TOKENS.iter().position(|t| *t == s) {
            Some(i) if !sessions.is_empty() => Value::String(sessions[i % sessions.len()].clone()),
            _ => Value::String(s),
        },
        Value::Array(a) => {
            Value::Array(a.into_iter().map(|v| with_sessions(v, sessions)).collect())
        }
        Value::Object(m) => Value::Object(
            m.into_iter()
                .map(|(k, v)| (k, with_sessions(v, sessions)))
                .collect(),
        ),
        other => other,
    }
}

/// Checks an answer: exactly one of a result and an error, the error with a protocol code.
fn check_answer(request: &str, answer: &Value) -> Result<(), TestCaseError> {
    match (answer.get("result"), answer.get("error")) {
        (Some(_), None) => Ok(()),
        (None, Some(e)) => {
            let code = e["code"].as_i64();
            prop_assert!(
                code.is_some_and(|c| TYPED.contains(&c)),
                "{request} was answered with an untyped error: {answer}"
            );
            prop_assert!(e["message"].is_string(), "{answer}");
            Ok(())
        }
        _ => Err(TestCaseError::fail(format!(
            "{request}: not a JSON-RPC answer: {answer}"
        ))),
    }
}

/// Initializes a door and opens the probe's session; the session.
async fn initialize(door: &mut Door, project: &str) -> Result<String, TestCaseError> {
    let params = json!({ "protocolVersion": 1, "clientCapabilities": {
        "elicitation": { "form": {} } } });
    let id = door.request("initialize", Some(params), &Id::Text);
    let init = door.answer_to(&id.unwrap()).await?;
    prop_assert_eq!(&init["result"]["protocolVersion"], &json!(1), "{}", init);
    let id = door.request(
        "session/new",
        Some(json!({ "cwd": project, "mcpServers": [] })),
        &Id::Text,
    );
    let made = door.answer_to(&id.unwrap()).await?;
    made["result"]["sessionId"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| TestCaseError::fail(format!("no session: {made}")))
}

/// The door still serves: it initializes again (as an editor that fills forms, until a case
/// says otherwise) and answers a prompt of its own session.
async fn probe(door: &mut Door, project: &str, session: &str) -> Result<(), TestCaseError> {
    let params = json!({ "protocolVersion": 1, "clientCapabilities": {
        "elicitation": { "form": {} } } });
    let id = door.request("initialize", Some(params), &Id::Text);
    let init = door.answer_to(&id.unwrap()).await?;
    check_answer("initialize", &init)?;
    let prompt = json!({ "sessionId": session, "prompt": [{ "type": "text", "text": "/inbox" }] });
    let id = door.request("session/prompt", Some(prompt), &Id::Text);
    let answer = door.answer_to(&id.unwrap()).await?;
    prop_assert_eq!(
        &answer["result"]["stopReason"],
        &json!("end_turn"),
        "the probe prompt in {}: {}",
        project,
        answer
    );
    Ok(())
}

#[test]
fn fuzz_acp_door() {
    let rt = runtime();
    let mut w = world(&rt);
    // A real repository whose default party is `quick`; the `asks` party's member asks.
    let project = repo(&w.daemon.dir.path().join("acp"));
    std::fs::create_dir_all(format!("{project}/.troupe")).unwrap();
    std::fs::write(
        format!("{project}/.troupe/config.toml"),
        "[default]\nparty = \"quick\"\n",
    )
    .unwrap();
    rt.block_on(async {
        let c = w.daemon.client().await;
        let dir = w.daemon.dir.path();
        let quick = executable(dir, "quick.sh", QUICK);
        let asker = executable(dir, "asker.sh", ASKER);
        for (name, command) in [("quick-member", quick), ("asker", asker)] {
            define(
                &c,
                "agent",
                json!({ "name": name, "command": [command], "timeout_secs": 60 }),
            )
            .await;
        }
        for (party, agent) in [("quick", "quick-member"), ("asks", "asker")] {
            define(
                &c,
                "party",
                json!({ "name": party, "roles": { "member": { "agent": agent } } }),
            )
            .await;
        }
    });
    let mut pool: Vec<String> = SESSION_TOKENS.iter().map(|s| s.to_string()).collect();
    pool.extend([
        project.clone(),
        format!("{project}/src"),
        "acp".into(),
        "/nonexistent/troupe-fuzz".into(),
        w.pool[0].clone(),
    ]);
    let state = rt.block_on(async {
        let mut door = Door::start(&w);
        let probe_session = initialize(&mut door, &project).await.unwrap();
        let first = initialize(&mut door, &project).await.unwrap();
        tokio::sync::Mutex::new((door, probe_session, vec![first, w.pool[0].clone()]))
    });
    troupe_fuzz::run("acp_door", 48, case(&project, pool), |c| {
        rt.block_on(async {
            let mut state = state.lock().await;
            let (door, probe_session, sessions) = &mut *state;
            if c.fresh || door.child.try_wait().unwrap().is_some() || door.panicked().is_some() {
                let old = std::mem::replace(door, Door::start(&w));
                old.close().await?;
            }
            door.replies
                .lock()
                .unwrap()
                .extend(c.replies.iter().cloned());
            let mut expected = Vec::new();
            for line in &c.lines {
                match line {
                    Line::Request { method, params, id } => {
                        let params = params.clone().map(|p| with_sessions(p, sessions));
                        let new_here = method == "session/new"
                            && params.as_ref().is_some_and(|p| p["cwd"] == json!(project));
                        let session = params.as_ref().map(|p| p["sessionId"].clone());
                        if let Some(id) = door.request(method, params, id) {
                            expected.push((method.clone(), id, new_here, session));
                        }
                    }
                    Line::Notification { method, params } => {
                        let mut m = json!({ "jsonrpc": "2.0", "method": method });
                        if let Some(p) = params {
                            m["params"] = with_sessions(p.clone(), sessions);
                        }
                        door.send(m.to_string().into_bytes());
                    }
                    Line::Raw(bytes) => door.send(bytes.clone()),
                }
            }
            for (method, id, new_here, session) in expected {
                let answer = match door.answer_within(&id, TURN).await? {
                    Some(answer) => answer,
                    // A turn lasts as long as what it started, which may wait for a person
                    // (a role paused by a denial): cancelled, it ends and answers.
                    None if method == "session/prompt" => {
                        let cancel = json!({ "jsonrpc": "2.0", "method": "session/cancel",
                                             "params": { "sessionId": session } });
                        door.send(cancel.to_string().into_bytes());
                        door.answer_to(&id).await?
                    }
                    None => door.answer_to(&id).await?,
                };
                check_answer(&method, &answer)?;
                if let (true, Some(s)) = (new_here, answer["result"]["sessionId"].as_str()) {
                    sessions.push(s.to_string());
                }
            }
            // A new door is initialized for the probe; an old one may have been told anything.
            probe(door, &project, probe_session).await?;
            door.replies.lock().unwrap().clear();
            let garbage = std::mem::take(&mut door.seen.lock().unwrap().garbage);
            prop_assert!(garbage.is_empty(), "not JSON-RPC on stdout: {garbage:?}");
            if let Some(err) = door.panicked() {
                return Err(TestCaseError::fail(format!("troupe acp panicked: {err}")));
            }
            Ok(())
        })
    });
    let (door, _, _) = state.into_inner();
    rt.block_on(door.close()).unwrap();
    assert_serving(&rt, &mut w).unwrap();
}
