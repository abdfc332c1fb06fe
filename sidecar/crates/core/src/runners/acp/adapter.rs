//! Our side of the Agent Client Protocol, over the pinned `agent-client-protocol` crate: the
//! client role for one session and one turn, with the crate's types kept in this file. The rest
//! of Troupe sees only [`Update`], [`PermissionAsk`], [`ElicitAsk`], [`ClientSide`] and
//! [`SessionSetup`]. The
//! crate ignores unknown updates, notifications and malformed lines, answers unknown requests
//! with "method not found" and echoes request ids exactly; every answer that may wait (a
//! person's approval, a terminal's exit) is given from a task, off its dispatch loop.

use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::schema::{
    AuthCapabilities, AuthenticateRequest, CancelNotification, ClientCapabilities, ContentBlock,
    CreateElicitationRequest, CreateElicitationResponse, CreateTerminalRequest,
    CreateTerminalResponse, ElicitationCapabilities, ElicitationFormCapabilities, EnvVariable,
    FileSystemCapabilities, Implementation, InitializeRequest, KillTerminalRequest,
    KillTerminalResponse, McpServer, McpServerStdio, NewSessionRequest, PermissionOptionKind,
    PromptRequest, ReadTextFileRequest, ReadTextFileResponse, ReleaseTerminalRequest,
    ReleaseTerminalResponse, RequestPermissionOutcome, RequestPermissionRequest,
    RequestPermissionResponse, SelectedPermissionOutcome, SessionNotification, SessionUpdate,
    StopReason, TerminalExitStatus, TerminalOutputRequest, TerminalOutputResponse, TextContent,
    ToolCallContent, ToolCallLocation, WaitForTerminalExitRequest, WaitForTerminalExitResponse,
    WriteTextFileRequest, WriteTextFileResponse,
};
use agent_client_protocol::v1::{ConnectionTo, Responder};
use agent_client_protocol::{Agent, Client, Lines, on_receive_notification, on_receive_request};
use serde_json::{Value, json};
use tokio::sync::watch;

mod elicit;

pub use elicit::{ElicitAnswer, ElicitAsk, ElicitField, FieldKind, FieldValue};

pub use crate::acp::{Choice, line_sink, lossy_lines};

/// A boxed future, as [`ClientSide`] returns them.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// Something the agent reported during its turn.
#[derive(Debug, Clone, PartialEq)]
pub enum Update {
    /// A piece of the agent's answer.
    Text(String),
    /// A piece of its reasoning.
    Thought(String),
    /// A tool call started, or changed (status, title, input).
    ToolCall(ToolCallInfo),
    /// Its plan, whole.
    Plan(Vec<PlanItem>),
    /// Context window use and the session's cost so far.
    Usage {
        used: u64,
        size: u64,
        cost_usd: Option<f64>,
    },
}

/// A tool call, as far as the agent described it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolCallInfo {
    pub id: String,
    /// Whether this is the call's first report (not an update of it).
    pub started: bool,
    pub title: Option<String>,
    /// read, edit, delete, move, search, execute, think, fetch, switch_mode, other.
    pub kind: Option<String>,
    /// pending, in_progress, completed, failed.
    pub status: Option<String>,
    pub raw_input: Option<Value>,
    pub paths: Vec<PathBuf>,
    /// The edits it shows: path, old text (none for a new file), new text.
    pub diffs: Vec<(PathBuf, Option<String>, String)>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct PlanItem {
    pub content: String,
    pub priority: String,
    pub status: String,
}

/// The agent asks before a tool call.
#[derive(Debug, Clone)]
pub struct PermissionAsk {
    pub tool: ToolCallInfo,
    /// The kinds it offers.
    pub choices: Vec<Choice>,
}

/// The answer: one of the offered kinds (the nearest offered one is picked), or cancelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PermissionAnswer {
    Choose(Choice),
    Cancelled,
}

/// `terminal/create`.
#[derive(Debug, Clone)]
pub struct TerminalSpec {
    pub command: String,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: Option<PathBuf>,
    pub output_byte_limit: Option<u64>,
}

/// How a terminal's command ended.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TerminalExit {
    pub code: Option<u32>,
    pub signal: Option<String>,
}

/// `terminal/output`.
#[derive(Debug, Clone, Default)]
pub struct TerminalOutput {
    pub output: String,
    pub truncated: bool,
    pub exit: Option<TerminalExit>,
}

/// What Troupe does for the agent. Errors are messages the agent gets back.
pub trait ClientSide: Send + Sync + 'static {
    /// Any message from the agent (for hang detection).
    fn heard(&self);
    /// A `session/update` came (any kind, before it is read).
    fn updated(&self) -> BoxFuture<()>;
    /// What `initialize` said about the agent.
    fn started(&self, info: AgentInfo) -> BoxFuture<()>;
    /// An update of the turn; may wait (backpressure on a flood).
    fn update(&self, update: Update) -> BoxFuture<()>;
    fn permission(&self, ask: PermissionAsk) -> BoxFuture<PermissionAnswer>;
    /// The agent asks its user to fill in a form (`elicitation/create`).
    fn elicit(&self, ask: ElicitAsk) -> BoxFuture<ElicitAnswer>;
    fn read_text(
        &self,
        path: PathBuf,
        line: Option<u32>,
        limit: Option<u32>,
    ) -> BoxFuture<Result<String, String>>;
    fn write_text(&self, path: PathBuf, content: String) -> BoxFuture<Result<(), String>>;
    fn terminal_create(&self, spec: TerminalSpec) -> Result<String, String>;
    fn terminal_output(&self, id: &str) -> Result<TerminalOutput, String>;
    fn terminal_wait(&self, id: &str) -> BoxFuture<Result<TerminalExit, String>>;
    fn terminal_kill(&self, id: &str) -> Result<(), String>;
    fn terminal_release(&self, id: &str) -> Result<(), String>;
    /// Resolves when the turn under way is to be cancelled while the session goes on (the
    /// person pauses the run or prompts it); called once per turn.
    fn interrupt(&self) -> BoxFuture<()> {
        Box::pin(std::future::pending())
    }
    /// A turn ended and the session is not being closed: the next prompt in the same session
    /// (a new round), or `None` to end it.
    fn next_turn(&self, end: TurnEnd) -> BoxFuture<Option<String>> {
        let _ = end;
        Box::pin(std::future::ready(None))
    }
}

/// A stdio MCP server to attach to the session.
#[derive(Debug, Clone)]
pub struct McpStdio {
    pub name: String,
    pub command: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
}

/// The session to open and the one prompt to send.
#[derive(Debug, Clone)]
pub struct SessionSetup {
    pub cwd: PathBuf,
    /// `authenticate` with this method, and for `gateway` this base URL.
    pub auth_method: Option<String>,
    pub base_url: Option<String>,
    pub mcp: Vec<McpStdio>,
    pub prompt: String,
    /// Offer `fs/read_text_file` and `fs/write_text_file`.
    pub fs: bool,
}

/// How the turn ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnEnd {
    EndTurn,
    MaxTokens,
    MaxTurnRequests,
    Refusal,
    Cancelled,
}

impl TurnEnd {
    pub fn as_str(self) -> &'static str {
        match self {
            TurnEnd::EndTurn => "end_turn",
            TurnEnd::MaxTokens => "max_tokens",
            TurnEnd::MaxTurnRequests => "max_turn_requests",
            TurnEnd::Refusal => "refusal",
            TurnEnd::Cancelled => "cancelled",
        }
    }
}

/// Who answered `initialize`.
#[derive(Debug, Clone, Default)]
pub struct AgentInfo {
    pub name: Option<String>,
    pub version: Option<String>,
    pub auth_methods: Vec<String>,
}

/// Why a session failed.
#[derive(Debug, thiserror::Error)]
pub enum AcpError {
    #[error("the agent closed its output (it exited or crashed) during {0}")]
    Closed(String),
    #[error("the agent offers no auth method {wanted:?} (it offers: {offered})")]
    NoSuchAuth { wanted: String, offered: String },
    #[error("the agent answered {during} with an error: {message}")]
    Agent { during: String, message: String },
    #[error(
        "no answer to {during} within {} s: is this an ACP agent (claude-agent-acp, codex-acp, gemini --acp, …)?",
        HANDSHAKE.as_secs()
    )]
    NoAnswer { during: String },
}

/// How long each step before the prompt (initialize, authenticate, session/new) may take.
pub const HANDSHAKE: std::time::Duration = std::time::Duration::from_secs(60);

/// A handshake step's answer, or `NoAnswer` after `HANDSHAKE`.
async fn within<T>(
    during: &str,
    step: impl Future<Output = Result<T, agent_client_protocol::Error>>,
) -> Result<T, AcpError> {
    match tokio::time::timeout(HANDSHAKE, step).await {
        Ok(answer) => answer.map_err(|e| to_error(during, e)),
        Err(_) => Err(AcpError::NoAnswer {
            during: during.into(),
        }),
    }
}

fn to_error(during: &str, e: agent_client_protocol::Error) -> AcpError {
    let text = e.to_string();
    if agent_client_protocol::is_incoming_transport_closed(&e)
        || text.contains("transport closed")
        || text.contains("Transport closed")
    {
        AcpError::Closed(during.into())
    } else {
        AcpError::Agent {
            during: during.into(),
            message: text,
        }
    }
}

fn kind_name<T: serde::Serialize>(v: &T) -> Option<String> {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
}

fn paths(locations: &[ToolCallLocation]) -> Vec<PathBuf> {
    locations.iter().map(|l| l.path.clone()).collect()
}

fn diffs(content: &[ToolCallContent]) -> Vec<(PathBuf, Option<String>, String)> {
    content
        .iter()
        .filter_map(|c| match c {
            ToolCallContent::Diff(d) => {
                Some((d.path.clone(), d.old_text.clone(), d.new_text.clone()))
            }
            _ => None,
        })
        .collect()
}

fn text_of(block: &ContentBlock) -> Option<String> {
    match block {
        ContentBlock::Text(t) => Some(t.text.clone()),
        _ => None,
    }
}

fn update_of(n: SessionNotification) -> Option<Update> {
    Some(match n.update {
        SessionUpdate::AgentMessageChunk(c) => Update::Text(text_of(&c.content)?),
        SessionUpdate::AgentThoughtChunk(c) => Update::Thought(text_of(&c.content)?),
        SessionUpdate::ToolCall(t) => Update::ToolCall(ToolCallInfo {
            id: t.tool_call_id.to_string(),
            started: true,
            title: Some(t.title),
            kind: kind_name(&t.kind),
            status: kind_name(&t.status),
            raw_input: t.raw_input,
            paths: paths(&t.locations),
            diffs: diffs(&t.content),
        }),
        SessionUpdate::ToolCallUpdate(u) => Update::ToolCall(ToolCallInfo {
            id: u.tool_call_id.to_string(),
            started: false,
            title: u.fields.title,
            kind: u.fields.kind.as_ref().and_then(kind_name),
            status: u.fields.status.as_ref().and_then(kind_name),
            raw_input: u.fields.raw_input,
            paths: u.fields.locations.as_deref().map(paths).unwrap_or_default(),
            diffs: u.fields.content.as_deref().map(diffs).unwrap_or_default(),
        }),
        SessionUpdate::Plan(p) => Update::Plan(
            p.entries
                .iter()
                .map(|e| PlanItem {
                    content: e.content.clone(),
                    priority: kind_name(&e.priority).unwrap_or_default(),
                    status: kind_name(&e.status).unwrap_or_default(),
                })
                .collect(),
        ),
        SessionUpdate::UsageUpdate(u) => Update::Usage {
            used: u.used,
            size: u.size,
            cost_usd: u
                .cost
                .as_ref()
                .filter(|c| c.currency.eq_ignore_ascii_case("usd"))
                .map(|c| c.amount),
        },
        _ => return None,
    })
}

fn choice_of(kind: &PermissionOptionKind) -> Option<Choice> {
    Some(match kind {
        PermissionOptionKind::AllowOnce => Choice::AllowOnce,
        PermissionOptionKind::AllowAlways => Choice::AllowAlways,
        PermissionOptionKind::RejectOnce => Choice::RejectOnce,
        PermissionOptionKind::RejectAlways => Choice::RejectAlways,
        _ => return None,
    })
}

/// The offered option for `answer`: the same kind, else a narrower sibling (always → once;
/// a rejection may widen, a permission never does).
fn pick(req: &RequestPermissionRequest, answer: PermissionAnswer) -> RequestPermissionOutcome {
    let PermissionAnswer::Choose(wanted) = answer else {
        return RequestPermissionOutcome::Cancelled;
    };
    let fallback = match wanted {
        Choice::AllowOnce => None,
        Choice::AllowAlways => Some(Choice::AllowOnce),
        Choice::RejectOnce => Some(Choice::RejectAlways),
        Choice::RejectAlways => Some(Choice::RejectOnce),
    };
    let find = |c: Choice| {
        req.options
            .iter()
            .find(|o| choice_of(&o.kind) == Some(c))
            .map(|o| o.option_id.clone())
    };
    match find(wanted).or_else(|| fallback.and_then(find)) {
        Some(id) => RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(id)),
        // Nothing to allow with: refuse by cancelling.
        None => RequestPermissionOutcome::Cancelled,
    }
}

fn failed(e: impl std::fmt::Display) -> agent_client_protocol::Error {
    agent_client_protocol::Error::internal_error().data(json!({ "message": e.to_string() }))
}

fn refused(e: impl std::fmt::Display) -> agent_client_protocol::Error {
    agent_client_protocol::Error::invalid_params().data(json!({ "message": e.to_string() }))
}

fn meta(v: Value) -> serde_json::Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => serde_json::Map::new(),
    }
}

/// Runs one session over the agent's stdio (`stdin` is what we write to it, `stdout` what it
/// writes): initialize, authenticate, session/new, one prompt. When `cancel` turns true
/// mid-turn, `session/cancel` is sent and the turn's own end awaited.
pub async fn run_session<H, W, R>(
    stdin: W,
    stdout: R,
    side: Arc<H>,
    setup: SessionSetup,
    mut cancel: watch::Receiver<bool>,
) -> Result<TurnEnd, AcpError>
where
    H: ClientSide,
    W: tokio::io::AsyncWrite + Send + 'static,
    R: tokio::io::AsyncRead + Send + 'static,
{
    let transport = Lines::new(line_sink(stdin), lossy_lines(stdout));
    let (s1, s2, s3, s4, s5, s6, s7, s8, s9, s10) = (
        side.clone(),
        side.clone(),
        side.clone(),
        side.clone(),
        side.clone(),
        side.clone(),
        side.clone(),
        side.clone(),
        side.clone(),
        side.clone(),
    );
    let result = Client
        .v1()
        .name("troupe")
        .on_receive_notification(
            async move |n: SessionNotification, _cx| {
                s1.heard();
                s1.updated().await;
                if let Some(update) = update_of(n) {
                    s1.update(update).await;
                }
                Ok(())
            },
            on_receive_notification!(),
        )
        .on_receive_request(
            async move |req: RequestPermissionRequest,
                        responder: Responder<RequestPermissionResponse>,
                        _cx| {
                s2.heard();
                let ask = PermissionAsk {
                    tool: ToolCallInfo {
                        id: req.tool_call.tool_call_id.to_string(),
                        started: false,
                        title: req.tool_call.fields.title.clone(),
                        kind: req.tool_call.fields.kind.as_ref().and_then(kind_name),
                        status: None,
                        raw_input: req.tool_call.fields.raw_input.clone(),
                        paths: req
                            .tool_call
                            .fields
                            .locations
                            .as_deref()
                            .map(paths)
                            .unwrap_or_default(),
                        // What it would write: the large-diff guardrail counts it.
                        diffs: req
                            .tool_call
                            .fields
                            .content
                            .as_deref()
                            .map(diffs)
                            .unwrap_or_default(),
                    },
                    choices: req
                        .options
                        .iter()
                        .filter_map(|o| choice_of(&o.kind))
                        .collect(),
                };
                let answer = s2.permission(ask);
                tokio::spawn(async move {
                    let outcome = pick(&req, answer.await);
                    if let Err(e) = responder.respond(RequestPermissionResponse::new(outcome)) {
                        tracing::debug!(error = %e, "permission answer not sent");
                    }
                });
                Ok(())
            },
            on_receive_request!(),
        )
        .on_receive_request(
            async move |req: ReadTextFileRequest,
                        responder: Responder<ReadTextFileResponse>,
                        _cx| {
                s3.heard();
                let read = s3.read_text(req.path, req.line, req.limit);
                tokio::spawn(async move {
                    let sent = match read.await {
                        Ok(text) => responder.respond(ReadTextFileResponse::new(text)),
                        Err(e) => responder.respond_with_error(refused(e)),
                    };
                    if let Err(e) = sent {
                        tracing::debug!(error = %e, "fs/read_text_file answer not sent");
                    }
                });
                Ok(())
            },
            on_receive_request!(),
        )
        .on_receive_request(
            async move |req: WriteTextFileRequest,
                        responder: Responder<WriteTextFileResponse>,
                        _cx| {
                s4.heard();
                let write = s4.write_text(req.path, req.content);
                tokio::spawn(async move {
                    let sent = match write.await {
                        Ok(()) => responder.respond(WriteTextFileResponse::new()),
                        Err(e) => responder.respond_with_error(refused(e)),
                    };
                    if let Err(e) = sent {
                        tracing::debug!(error = %e, "fs/write_text_file answer not sent");
                    }
                });
                Ok(())
            },
            on_receive_request!(),
        )
        .on_receive_request(
            async move |req: CreateTerminalRequest,
                        responder: Responder<CreateTerminalResponse>,
                        _cx| {
                s5.heard();
                let spec = TerminalSpec {
                    command: req.command,
                    args: req.args,
                    env: req.env.into_iter().map(|e| (e.name, e.value)).collect(),
                    cwd: req.cwd,
                    output_byte_limit: req.output_byte_limit,
                };
                match s5.terminal_create(spec) {
                    Ok(id) => responder.respond(CreateTerminalResponse::new(id)),
                    Err(e) => responder.respond_with_error(refused(e)),
                }
            },
            on_receive_request!(),
        )
        .on_receive_request(
            async move |req: TerminalOutputRequest,
                        responder: Responder<TerminalOutputResponse>,
                        _cx| {
                s6.heard();
                match s6.terminal_output(&req.terminal_id.to_string()) {
                    Ok(out) => responder.respond(
                        TerminalOutputResponse::new(out.output, out.truncated)
                            .exit_status(out.exit.map(exit_status)),
                    ),
                    Err(e) => responder.respond_with_error(refused(e)),
                }
            },
            on_receive_request!(),
        )
        .on_receive_request(
            async move |req: WaitForTerminalExitRequest,
                        responder: Responder<WaitForTerminalExitResponse>,
                        _cx| {
                s7.heard();
                let wait = s7.terminal_wait(&req.terminal_id.to_string());
                tokio::spawn(async move {
                    let sent = match wait.await {
                        Ok(exit) => {
                            responder.respond(WaitForTerminalExitResponse::new(exit_status(exit)))
                        }
                        Err(e) => responder.respond_with_error(failed(e)),
                    };
                    if let Err(e) = sent {
                        tracing::debug!(error = %e, "terminal/wait_for_exit answer not sent");
                    }
                });
                Ok(())
            },
            on_receive_request!(),
        )
        .on_receive_request(
            async move |req: KillTerminalRequest,
                        responder: Responder<KillTerminalResponse>,
                        _cx| {
                s8.heard();
                match s8.terminal_kill(&req.terminal_id.to_string()) {
                    Ok(()) => responder.respond(KillTerminalResponse::new()),
                    Err(e) => responder.respond_with_error(refused(e)),
                }
            },
            on_receive_request!(),
        )
        .on_receive_request(
            async move |req: ReleaseTerminalRequest,
                        responder: Responder<ReleaseTerminalResponse>,
                        _cx| {
                s9.heard();
                match s9.terminal_release(&req.terminal_id.to_string()) {
                    Ok(()) => responder.respond(ReleaseTerminalResponse::new()),
                    Err(e) => responder.respond_with_error(refused(e)),
                }
            },
            on_receive_request!(),
        )
        .on_receive_request(
            async move |req: CreateElicitationRequest,
                        responder: Responder<CreateElicitationResponse>,
                        _cx| {
                s10.heard();
                let ask = match elicit::ask_of(&req) {
                    Ok(ask) => ask,
                    Err(why) => {
                        tracing::info!(%why, "an elicitation Troupe cannot ask is declined");
                        if let Err(e) =
                            responder.respond(elicit::response_of(ElicitAnswer::Decline))
                        {
                            tracing::debug!(error = %e, "elicitation answer not sent");
                        }
                        return Ok(());
                    }
                };
                let answer = s10.elicit(ask);
                let withdrawn = responder.cancellation();
                tokio::spawn(async move {
                    // The agent may withdraw its form (`$/cancel_request`): dropping the answer
                    // takes its question out of the inbox.
                    let answer = tokio::select! {
                        answer = answer => answer,
                        () = withdrawn.cancelled() => ElicitAnswer::Cancel,
                    };
                    if let Err(e) = responder.respond(elicit::response_of(answer)) {
                        tracing::debug!(error = %e, "elicitation answer not sent");
                    }
                });
                Ok(())
            },
            on_receive_request!(),
        )
        .connect_with(transport, async move |cx: ConnectionTo<Agent>| {
            Ok(drive(cx, setup, &mut cancel, side.as_ref()).await)
        })
        .await;
    match result {
        Ok(done) => done,
        Err(e) => Err(to_error("the session", e)),
    }
}

fn exit_status(exit: TerminalExit) -> TerminalExitStatus {
    TerminalExitStatus::new()
        .exit_code(exit.code)
        .signal(exit.signal)
}

async fn drive(
    cx: ConnectionTo<Agent>,
    setup: SessionSetup,
    cancel: &mut watch::Receiver<bool>,
    side: &impl ClientSide,
) -> Result<TurnEnd, AcpError> {
    let init = within(
        "initialize",
        cx.send_request(
            InitializeRequest::new(ProtocolVersion::V1)
                .client_capabilities(
                    ClientCapabilities::new()
                        .fs(FileSystemCapabilities::new()
                            .read_text_file(setup.fs)
                            .write_text_file(setup.fs))
                        .terminal(true)
                        .elicitation(
                            ElicitationCapabilities::new().form(ElicitationFormCapabilities::new()),
                        )
                        .auth(AuthCapabilities::new().meta(meta(json!({ "gateway": true })))),
                )
                .client_info(Implementation::new("troupe", env!("CARGO_PKG_VERSION"))),
        )
        .block_task(),
    )
    .await?;
    let auth_methods: Vec<String> = init
        .auth_methods
        .iter()
        .filter_map(|m| {
            serde_json::to_value(m)
                .ok()
                .and_then(|v| v.get("id").and_then(Value::as_str).map(str::to_string))
        })
        .collect();
    side.started(AgentInfo {
        name: init.agent_info.as_ref().map(|i| i.name.clone()),
        version: init.agent_info.as_ref().map(|i| i.version.clone()),
        auth_methods: auth_methods.clone(),
    })
    .await;
    if let Some(method) = &setup.auth_method {
        if !auth_methods.iter().any(|m| m == method) {
            return Err(AcpError::NoSuchAuth {
                wanted: method.clone(),
                offered: if auth_methods.is_empty() {
                    "none".into()
                } else {
                    auth_methods.join(", ")
                },
            });
        }
        let mut request = AuthenticateRequest::new(method.clone());
        if let Some(base_url) = &setup.base_url {
            request = request.meta(meta(json!({
                "gateway": { "baseUrl": base_url, "headers": {} }
            })));
        }
        within("authenticate", cx.send_request(request).block_task()).await?;
    }
    let servers = setup
        .mcp
        .iter()
        .map(|s| {
            McpServer::Stdio(
                McpServerStdio::new(s.name.clone(), s.command.clone())
                    .args(s.args.clone())
                    .env(
                        s.env
                            .iter()
                            .map(|(k, v)| EnvVariable::new(k.clone(), v.clone()))
                            .collect(),
                    ),
            )
        })
        .collect();
    let session = within(
        "session/new",
        cx.send_request(NewSessionRequest::new(setup.cwd.clone()).mcp_servers(servers))
            .block_task(),
    )
    .await?;
    let mut prompt = setup.prompt.clone();
    loop {
        let end = turn(&cx, &session.session_id, prompt, cancel, side).await?;
        if *cancel.borrow() {
            return Ok(end);
        }
        // Between rounds the session stays open; a stop ends it (the agent has no turn to
        // cancel).
        let next = side.next_turn(end);
        tokio::pin!(next);
        let next = loop {
            tokio::select! {
                next = &mut next => break next,
                changed = cancel.changed() => {
                    if changed.is_err() || *cancel.borrow() {
                        return Ok(end);
                    }
                }
            }
        };
        match next {
            Some(next) => prompt = next,
            None => return Ok(end),
        }
    }
}

/// One turn of the session: `prompt` sent, followed to its stop reason. A stop (`cancel`) or an
/// interruption (`ClientSide::interrupt`) sends `session/cancel`, once, and waits for the turn
/// to end as the protocol asks.
async fn turn(
    cx: &ConnectionTo<Agent>,
    session_id: &agent_client_protocol::v1::schema::SessionId,
    prompt: String,
    cancel: &mut watch::Receiver<bool>,
    side: &impl ClientSide,
) -> Result<TurnEnd, AcpError> {
    let turn = cx
        .send_request(PromptRequest::new(
            session_id.clone(),
            vec![ContentBlock::Text(TextContent::new(prompt))],
        ))
        .block_task();
    tokio::pin!(turn);
    let interrupt = side.interrupt();
    tokio::pin!(interrupt);
    let mut cancelled = false;
    let response = loop {
        tokio::select! {
            response = &mut turn => break response,
            changed = cancel.changed(), if !cancelled => {
                if changed.is_err() || *cancel.borrow() {
                    cancelled = true;
                    if let Err(e) = cx.send_notification(CancelNotification::new(session_id.clone())) {
                        tracing::debug!(error = %e, "session/cancel not sent");
                    }
                }
            }
            () = &mut interrupt, if !cancelled => {
                cancelled = true;
                if let Err(e) = cx.send_notification(CancelNotification::new(session_id.clone())) {
                    tracing::debug!(error = %e, "session/cancel not sent");
                }
            }
        }
    }
    .map_err(|e| to_error("session/prompt", e))?;
    Ok(match response.stop_reason {
        StopReason::EndTurn => TurnEnd::EndTurn,
        StopReason::MaxTokens => TurnEnd::MaxTokens,
        StopReason::MaxTurnRequests => TurnEnd::MaxTurnRequests,
        StopReason::Refusal => TurnEnd::Refusal,
        _ => TurnEnd::Cancelled,
    })
}

#[cfg(test)]
mod fuzz_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use agent_client_protocol::v1::schema::{
        PermissionOption, ToolCallUpdate, ToolCallUpdateFields,
    };

    fn request(kinds: &[PermissionOptionKind]) -> RequestPermissionRequest {
        RequestPermissionRequest::new(
            "s",
            ToolCallUpdate::new("t", ToolCallUpdateFields::new()),
            kinds
                .iter()
                .enumerate()
                .map(|(i, k)| PermissionOption::new(format!("opt-{i}"), "x", *k))
                .collect(),
        )
    }

    fn chosen(outcome: RequestPermissionOutcome) -> Option<String> {
        match outcome {
            RequestPermissionOutcome::Selected(s) => Some(s.option_id.to_string()),
            _ => None,
        }
    }

    #[test]
    fn picks_by_kind_then_sibling() {
        use PermissionOptionKind as K;
        let all = request(&[K::AllowOnce, K::AllowAlways, K::RejectOnce, K::RejectAlways]);
        assert_eq!(
            chosen(pick(&all, PermissionAnswer::Choose(Choice::AllowOnce))).as_deref(),
            Some("opt-0")
        );
        assert_eq!(
            chosen(pick(&all, PermissionAnswer::Choose(Choice::AllowAlways))).as_deref(),
            Some("opt-1")
        );
        assert_eq!(
            chosen(pick(&all, PermissionAnswer::Choose(Choice::RejectOnce))).as_deref(),
            Some("opt-2")
        );
        assert_eq!(chosen(pick(&all, PermissionAnswer::Cancelled)), None);
        let some = request(&[K::AllowOnce, K::RejectAlways]);
        assert_eq!(
            chosen(pick(&some, PermissionAnswer::Choose(Choice::AllowAlways))).as_deref(),
            Some("opt-0")
        );
        assert_eq!(
            chosen(pick(&some, PermissionAnswer::Choose(Choice::RejectOnce))).as_deref(),
            Some("opt-1")
        );
        // A one-time permission is never widened into a lasting one.
        let always_only = request(&[K::AllowAlways, K::RejectOnce]);
        assert_eq!(
            chosen(pick(
                &always_only,
                PermissionAnswer::Choose(Choice::AllowOnce)
            )),
            None
        );
        let allow_only = request(&[K::AllowOnce]);
        assert_eq!(
            chosen(pick(
                &allow_only,
                PermissionAnswer::Choose(Choice::RejectOnce)
            )),
            None
        );
    }
}
