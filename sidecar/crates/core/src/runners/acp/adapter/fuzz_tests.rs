//! Fuzz target (proptest, through `troupe-fuzz`): an ACP agent that says anything. A fake agent
//! on an in-memory pipe answers our `initialize`, `session/new` and `session/prompt` (fittingly,
//! with any JSON, with an error, or not at all) and sends arbitrary lines at a chosen moment —
//! requests, notifications and responses shaped after the protocol's JSON Schemas with wrong
//! types and extra fields, and garbage — then ends its output. Our client side must answer every
//! well-formed request, end the session (typed error or turn end) and never panic or hang.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use agent_client_protocol::v1::schema as acp;
use proptest::prelude::*;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use troupe_fuzz::proptest;

use super::*;

/// How the fake agent answers one of our requests.
#[derive(Debug, Clone)]
enum Answer {
    Fitting,
    Result(Value),
    Error(Value),
    Silent,
}

/// When the fake agent sends its lines.
#[derive(Debug, Clone, Copy, PartialEq)]
enum When {
    BeforeInitialize,
    DuringTurn,
}

#[derive(Debug, Clone)]
enum Line {
    Raw(Vec<u8>),
    Message(Value),
}

#[derive(Debug, Clone)]
struct Case {
    initialize: Answer,
    new_session: Answer,
    prompt: Answer,
    stop_reason: &'static str,
    when: When,
    lines: Vec<Line>,
    permission: PermissionAnswer,
}

fn schema_of<T: schemars::JsonSchema>() -> Value {
    serde_json::to_value(schemars::schema_for!(T)).unwrap_or_default()
}

/// The methods an agent may call on us, with their params' schemas.
fn agent_requests() -> Vec<(&'static str, Value)> {
    vec![
        (
            "session/request_permission",
            schema_of::<acp::RequestPermissionRequest>(),
        ),
        ("fs/read_text_file", schema_of::<acp::ReadTextFileRequest>()),
        (
            "fs/write_text_file",
            schema_of::<acp::WriteTextFileRequest>(),
        ),
        ("terminal/create", schema_of::<acp::CreateTerminalRequest>()),
        ("terminal/output", schema_of::<acp::TerminalOutputRequest>()),
        (
            "terminal/wait_for_exit",
            schema_of::<acp::WaitForTerminalExitRequest>(),
        ),
        ("terminal/kill", schema_of::<acp::KillTerminalRequest>()),
        (
            "terminal/release",
            schema_of::<acp::ReleaseTerminalRequest>(),
        ),
    ]
}

fn pool() -> Vec<String> {
    ["s1", "t1", "/tmp", "allow", "reject", "end_turn"]
        .map(str::to_string)
        .to_vec()
}

fn id() -> BoxedStrategy<Value> {
    prop_oneof![
        4 => (0i64..1_000_000).prop_map(Value::from),
        1 => troupe_fuzz::number(),
        1 => troupe_fuzz::string().prop_map(Value::from),
        1 => Just(Value::Null),
        1 => troupe_fuzz::json(),
    ]
    .boxed()
}

fn version() -> BoxedStrategy<Value> {
    prop_oneof![12 => Just(json!("2.0")), 1 => troupe_fuzz::json()].boxed()
}

fn line() -> BoxedStrategy<Line> {
    let requests: Vec<BoxedStrategy<Value>> = agent_requests()
        .into_iter()
        .map(|(method, schema)| {
            (version(), id(), troupe_fuzz::shaped(&schema, pool()))
                .prop_map(move |(v, id, params)| {
                    json!({ "jsonrpc": v, "id": id, "method": method, "params": params })
                })
                .boxed()
        })
        .collect();
    let request = proptest::strategy::Union::new(requests);
    let update = (
        version(),
        troupe_fuzz::shaped(&schema_of::<acp::SessionNotification>(), pool()),
    )
        .prop_map(
            |(v, params)| json!({ "jsonrpc": v, "method": "session/update", "params": params }),
        );
    let unknown = (
        version(),
        proptest::option::of(id()),
        troupe_fuzz::string(),
        troupe_fuzz::json(),
    )
        .prop_map(|(v, id, method, params)| {
            let mut m = json!({ "jsonrpc": v, "method": method, "params": params });
            if let Some(id) = id {
                m["id"] = id;
            }
            m
        });
    let response =
        (version(), id(), any::<bool>(), troupe_fuzz::json()).prop_map(|(v, id, ok, body)| {
            if ok {
                json!({ "jsonrpc": v, "id": id, "result": body })
            } else {
                json!({ "jsonrpc": v, "id": id, "error": body })
            }
        });
    prop_oneof![
        4 => request.prop_map(Line::Message),
        4 => update.prop_map(Line::Message),
        1 => unknown.prop_map(Line::Message),
        1 => response.prop_map(Line::Message),
        1 => troupe_fuzz::json().prop_map(Line::Message),
        1 => troupe_fuzz::bytes().prop_map(Line::Raw),
        1 => troupe_fuzz::string().prop_map(|s| Line::Raw(s.into_bytes())),
        1 => proptest::collection::vec(troupe_fuzz::json(), 0..3)
            .prop_map(|batch| Line::Message(Value::Array(batch))),
    ]
    .boxed()
}

fn answer() -> BoxedStrategy<Answer> {
    prop_oneof![
        8 => Just(Answer::Fitting),
        1 => troupe_fuzz::json().prop_map(Answer::Result),
        1 => troupe_fuzz::json().prop_map(Answer::Error),
        1 => Just(Answer::Silent),
    ]
    .boxed()
}

fn case() -> BoxedStrategy<Case> {
    (
        answer(),
        answer(),
        answer(),
        proptest::sample::select(vec![
            "end_turn",
            "max_tokens",
            "max_turn_requests",
            "refusal",
            "cancelled",
        ]),
        prop_oneof![1 => Just(When::BeforeInitialize), 3 => Just(When::DuringTurn)],
        proptest::collection::vec(line(), 0..24),
        prop_oneof![
            Just(PermissionAnswer::Cancelled),
            Just(PermissionAnswer::Choose(Choice::AllowOnce)),
            Just(PermissionAnswer::Choose(Choice::RejectAlways)),
        ],
    )
        .prop_map(
            |(initialize, new_session, prompt, stop_reason, when, lines, permission)| Case {
                initialize,
                new_session,
                prompt,
                stop_reason,
                when,
                lines,
                permission,
            },
        )
        .boxed()
}

/// Troupe's side, answering at once: permissions as the case says, everything else refused.
struct Side {
    permission: PermissionAnswer,
}

impl ClientSide for Side {
    fn heard(&self) {}
    fn updated(&self) -> BoxFuture<()> {
        Box::pin(async {})
    }
    fn started(&self, _: AgentInfo) -> BoxFuture<()> {
        Box::pin(async {})
    }
    fn update(&self, _: Update) -> BoxFuture<()> {
        Box::pin(async {})
    }
    fn permission(&self, _: PermissionAsk) -> BoxFuture<PermissionAnswer> {
        let answer = self.permission;
        Box::pin(async move { answer })
    }
    fn elicit(&self, _: ElicitAsk) -> BoxFuture<ElicitAnswer> {
        Box::pin(async { ElicitAnswer::Decline })
    }
    fn read_text(
        &self,
        path: PathBuf,
        _: Option<u32>,
        _: Option<u32>,
    ) -> BoxFuture<Result<String, String>> {
        Box::pin(async move { Err(format!("{} is outside the worktree", path.display())) })
    }
    fn write_text(&self, _: PathBuf, _: String) -> BoxFuture<Result<(), String>> {
        Box::pin(async { Err("refused".to_string()) })
    }
    fn terminal_create(&self, _: TerminalSpec) -> Result<String, String> {
        Err("no terminals here".into())
    }
    fn terminal_output(&self, id: &str) -> Result<TerminalOutput, String> {
        Err(format!("no terminal {id}"))
    }
    fn terminal_wait(&self, id: &str) -> BoxFuture<Result<TerminalExit, String>> {
        let id = id.to_string();
        Box::pin(async move { Err(format!("no terminal {id}")) })
    }
    fn terminal_kill(&self, id: &str) -> Result<(), String> {
        Err(format!("no terminal {id}"))
    }
    fn terminal_release(&self, id: &str) -> Result<(), String> {
        Err(format!("no terminal {id}"))
    }
}

/// A request the client must answer with its id: JSON-RPC 2.0, an i64 or string id (the crate
/// drops a request whose id is a larger integer), and
/// structured params or none (anything else is an invalid request, answered with id null).
fn expects_answer(m: &Value) -> Option<Value> {
    let id = m.get("id")?;
    (m["jsonrpc"] == "2.0"
        && m["method"].is_string()
        && (id.is_i64() || id.is_string())
        && m.get("params")
            .is_none_or(|p| p.is_object() || p.is_array()))
    .then(|| id.clone())
}

/// The fake agent: answers our requests as the case says, sends its lines, ends its output.
/// Returns the ids of well-formed requests it sent during the turn that were never answered.
async fn agent(
    case: Case,
    to_client: tokio::io::DuplexStream,
    from_client: tokio::io::DuplexStream,
) -> Vec<Value> {
    let mut out = to_client;
    // Read the client on its own task, so neither side's writes can wait on the other's.
    let (tx, mut input) = tokio::sync::mpsc::unbounded_channel::<Value>();
    tokio::spawn(async move {
        let mut lines = BufReader::new(from_client).lines();
        while let Ok(Some(text)) = lines.next_line().await {
            if let Ok(m) = serde_json::from_str::<Value>(&text)
                && tx.send(m).is_err()
            {
                break;
            }
        }
    });
    let mut awaited: Vec<Value> = Vec::new();
    async fn send(out: &mut tokio::io::DuplexStream, bytes: &[u8]) -> bool {
        out.write_all(bytes).await.is_ok() && out.write_all(b"\n").await.is_ok()
    }
    async fn send_lines(
        out: &mut tokio::io::DuplexStream,
        lines: &[Line],
        awaited: &mut Vec<Value>,
    ) -> bool {
        for line in lines {
            let ok = match line {
                Line::Raw(bytes) => send(out, bytes).await,
                Line::Message(m) => {
                    if let Some(id) = expects_answer(m)
                        && !awaited.contains(&id)
                    {
                        awaited.push(id);
                    }
                    send(out, m.to_string().as_bytes()).await
                }
            };
            if !ok {
                return false;
            }
        }
        true
    }
    if case.when == When::BeforeInitialize && !send_lines(&mut out, &case.lines, &mut awaited).await
    {
        return Vec::new();
    }
    if case.when == When::BeforeInitialize {
        // Only requests sent mid-turn are checked for answers.
        awaited.clear();
    }
    let mut answered: Vec<Value> = Vec::new();
    while let Some(m) = input.recv().await {
        if m.get("method").is_none() {
            if let Some(id) = m.get("id") {
                answered.push(id.clone());
            }
            continue;
        }
        let Some(id) = m.get("id").cloned() else {
            continue; // session/cancel and other notifications
        };
        let (answer, fitting) = match m["method"].as_str() {
            Some("initialize") => (
                &case.initialize,
                json!({ "protocolVersion": 1, "agentCapabilities": {}, "authMethods": [] }),
            ),
            Some("session/new") => (&case.new_session, json!({ "sessionId": "s1" })),
            Some("session/prompt") => {
                if case.when == When::DuringTurn {
                    if !send_lines(&mut out, &case.lines, &mut awaited).await {
                        break;
                    }
                    // Every well-formed request is answered before the turn ends.
                    let all = tokio::time::timeout(Duration::from_secs(10), async {
                        while awaited.iter().any(|a| !answered.contains(a)) {
                            match input.recv().await {
                                Some(m) => {
                                    if m.get("method").is_none()
                                        && let Some(id) = m.get("id")
                                    {
                                        answered.push(id.clone());
                                    }
                                }
                                None => break,
                            }
                        }
                    })
                    .await;
                    if all.is_err() {
                        break;
                    }
                }
                (&case.prompt, json!({ "stopReason": case.stop_reason }))
            }
            _ => (&Answer::Silent, Value::Null),
        };
        let reply = match answer {
            Answer::Fitting => json!({ "jsonrpc": "2.0", "id": id, "result": fitting }),
            Answer::Result(v) => json!({ "jsonrpc": "2.0", "id": id, "result": v }),
            Answer::Error(v) => json!({ "jsonrpc": "2.0", "id": id, "error": v }),
            Answer::Silent => break,
        };
        if !send(&mut out, reply.to_string().as_bytes()).await {
            break;
        }
        // After the turn's end, or an answer that cannot go on (an agent that says something
        // wrong and stays silent is the handshake timeout's and the run's idle limit's job).
        if m["method"] == "session/prompt" || !matches!(answer, Answer::Fitting) {
            break;
        }
    }
    // End our output; the client ends the session.
    drop(out);
    awaited.retain(|a| !answered.contains(a));
    awaited
}

/// Panics seen on fuzz threads (a panic in a task the runtime swallows still counts).
fn panics() -> &'static Mutex<Vec<String>> {
    static PANICS: OnceLock<Mutex<Vec<String>>> = OnceLock::new();
    static HOOK: OnceLock<()> = OnceLock::new();
    HOOK.get_or_init(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if std::thread::current().name() == Some("acp-fuzz")
                && let Ok(mut p) = panics().lock()
            {
                p.push(info.to_string());
            }
            previous(info);
        }));
    });
    PANICS.get_or_init(Mutex::default)
}

/// One case on its own thread and runtime: the session's end, and the unanswered requests.
fn run_case(case: Case) -> Result<(Result<TurnEnd, String>, Vec<Value>), String> {
    panics();
    let thread = std::thread::Builder::new()
        .name("acp-fuzz".into())
        .spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            rt.block_on(async move {
                let (client_out, agent_in) = tokio::io::duplex(1 << 16);
                let (agent_out, client_in) = tokio::io::duplex(1 << 16);
                let side = Arc::new(Side {
                    permission: case.permission,
                });
                let setup = SessionSetup {
                    cwd: PathBuf::from("/tmp"),
                    auth_method: None,
                    base_url: None,
                    mcp: Vec::new(),
                    prompt: "fuzz".into(),
                    fs: true,
                };
                let (_cancel, cancel_rx) = watch::channel(false);
                let agent = tokio::spawn(agent(case, agent_out, agent_in));
                let session = run_session(client_out, client_in, side, setup, cancel_rx);
                let end = tokio::time::timeout(Duration::from_secs(30), session)
                    .await
                    .map_err(|_| "the session did not end after the agent's output ended")?;
                let unanswered = tokio::time::timeout(Duration::from_secs(30), agent)
                    .await
                    .map_err(|_| "the fake agent did not finish")?
                    .map_err(|e| e.to_string())?;
                Ok((end.map_err(|e| e.to_string()), unanswered))
            })
        })
        .map_err(|e| e.to_string())?;
    thread
        .join()
        .map_err(|_| "the case's thread panicked".to_string())?
}

#[test]
fn fuzz_acp_agent_messages() {
    troupe_fuzz::run("acp_agent_messages", 96, case(), |case| {
        let fitting = matches!(
            (&case.initialize, &case.new_session, &case.prompt),
            (Answer::Fitting, Answer::Fitting, Answer::Fitting)
        ) && case.lines.is_empty();
        let stop = case.stop_reason;
        let outcome = run_case(case);
        let seen: Vec<String> = panics()
            .lock()
            .map(|mut p| std::mem::take(&mut *p))
            .unwrap_or_default();
        prop_assert!(seen.is_empty(), "panics: {seen:?}");
        let (end, unanswered) = outcome.map_err(TestCaseError::fail)?;
        prop_assert!(
            unanswered.is_empty(),
            "requests never answered: {unanswered:?}"
        );
        if fitting {
            prop_assert_eq!(end.map(|e| e.as_str()), Ok(stop));
        }
        Ok(())
    });
}

/// Found by the fuzz target: a line that is not UTF-8 ended the session (the crate's reader
/// stops at it), so the next request went unanswered and the turn was lost.
#[test]
fn regression_a_line_that_is_not_utf8_is_skipped() {
    let case = Case {
        initialize: Answer::Fitting,
        new_session: Answer::Fitting,
        prompt: Answer::Fitting,
        stop_reason: "end_turn",
        when: When::DuringTurn,
        lines: vec![
            Line::Raw(vec![128]),
            Line::Message(json!({
                "jsonrpc": "2.0", "id": 0, "method": "fs/read_text_file", "params": {}
            })),
        ],
        permission: PermissionAnswer::Cancelled,
    };
    let (end, unanswered) = run_case(case).expect("the case ran");
    assert!(unanswered.is_empty(), "{unanswered:?}");
    assert_eq!(end.map(|e| e.as_str()), Ok("end_turn"));
}
