//! The ACP door's wire: the agent role of the Agent Client Protocol over the pinned
//! `agent-client-protocol` crate (the runner's adapter in the core plays the client role of the
//! same crate, and lends its line transport). The crate's types stay in this file: the door
//! sees [`Door`], [`Peer`], [`Out`], [`Ask`] and [`DoorError`]. The crate answers unknown
//! methods with "method not found", malformed lines with a parse error, and echoes request ids;
//! every request that may wait (a prompt lasts as long as its party) is answered from a task,
//! off the crate's dispatch loop.

use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::schema::{
    AgentCapabilities, AuthenticateRequest, AuthenticateResponse, AvailableCommand,
    AvailableCommandInput, AvailableCommandsUpdate, CancelNotification, ContentBlock, ContentChunk,
    Cost, CreateElicitationRequest, Diff, ElicitationAction, ElicitationContentValue,
    ElicitationFormMode, ElicitationSchema, ElicitationSessionScope, EmbeddedResourceResource,
    ErrorCode, Implementation, InitializeRequest, InitializeResponse, ListSessionsRequest,
    ListSessionsResponse, LoadSessionRequest, LoadSessionResponse, NewSessionRequest,
    NewSessionResponse, PermissionOption, PermissionOptionKind, Plan, PlanEntry, PlanEntryPriority,
    PlanEntryStatus, PromptCapabilities, PromptRequest, PromptResponse, RequestPermissionOutcome,
    RequestPermissionRequest, SessionCapabilities, SessionInfo, SessionListCapabilities,
    SessionNotification, SessionUpdate, StopReason, StringPropertySchema, TextContent, ToolCall,
    ToolCallContent, ToolCallLocation, ToolCallUpdate, ToolCallUpdateFields,
    UnstructuredCommandInput, UsageUpdate,
};
use agent_client_protocol::v1::{ConnectionTo, Responder};
use agent_client_protocol::{Agent, Client, Lines, on_receive_notification, on_receive_request};
use serde_json::{Value, json};
use troupe_core::acp::{Choice, line_sink, lossy_lines};

/// A boxed future, as [`Door`] returns them.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// Why a request failed, as the editor is told.
#[derive(Debug, thiserror::Error)]
pub enum DoorError {
    #[error("{0}")]
    InvalidParams(String),
    #[error("{0}")]
    InvalidRequest(String),
    #[error("{0}")]
    NotFound(String),
    /// Refused by the daemon with a code of its own (conflict, forbidden, too large,
    /// unavailable, …): passed on with that code, as the other doors do.
    #[error("{message}")]
    Refused { code: i32, message: String },
    #[error("{0}")]
    Internal(String),
}

/// A session of the door, as `session/list` shows it.
#[derive(Debug, Clone)]
pub struct SessionEntry {
    pub id: String,
    pub cwd: PathBuf,
    pub title: Option<String>,
    pub updated_at: Option<String>,
}

/// How a prompt's turn ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    EndTurn,
    Cancelled,
}

/// A slash command the door advertises.
#[derive(Debug, Clone, PartialEq)]
pub struct SlashCommand {
    pub name: &'static str,
    pub description: &'static str,
    /// What to type after it, when it takes anything.
    pub hint: Option<&'static str>,
}

/// A tool call to show: a member's, or a request waiting for the person.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolCallOut {
    pub id: String,
    /// Its first report (a `tool_call`), else an update of it.
    pub started: bool,
    pub title: Option<String>,
    /// ACP's tool kinds: read, edit, delete, move, search, execute, think, fetch, other.
    pub kind: Option<String>,
    /// pending, in_progress, completed, failed.
    pub status: Option<String>,
    pub locations: Vec<(PathBuf, Option<u32>)>,
    /// Path, old text (none for a new file), new text.
    pub diffs: Vec<(PathBuf, Option<String>, String)>,
    pub text: Option<String>,
    pub raw_input: Option<Value>,
}

/// One entry of the plan: content, and its status (pending, in_progress, completed).
#[derive(Debug, Clone, PartialEq)]
pub struct PlanOut {
    pub content: String,
    pub status: &'static str,
}

/// A `session/update` to send.
#[derive(Debug, Clone, PartialEq)]
pub enum Out {
    /// The person's own words (a replayed prompt).
    User(String),
    Text(String),
    Thought(String),
    ToolCall(Box<ToolCallOut>),
    /// The whole plan (each update replaces it).
    Plan(Vec<PlanOut>),
    Usage {
        used: u64,
        size: u64,
        cost_usd: Option<f64>,
    },
    Commands(Vec<SlashCommand>),
}

/// One option of a permission request.
#[derive(Debug, Clone)]
pub struct AskOption {
    pub id: String,
    pub name: String,
    pub kind: Choice,
}

/// A `session/request_permission` to send.
#[derive(Debug, Clone)]
pub struct Ask {
    pub tool: ToolCallOut,
    pub options: Vec<AskOption>,
}

/// The editor's answer: an option's id, or cancelled (the turn was cancelled, or the request
/// withdrawn).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    Chosen(String),
    Cancelled,
}

/// What the door does for the editor. Errors are the editor's answer.
pub trait Door: Send + Sync + 'static {
    fn new_session(&self, cwd: PathBuf) -> BoxFuture<Result<String, DoorError>>;
    /// Replays the session's history through `peer` before the answer.
    fn load_session(
        &self,
        session: String,
        cwd: PathBuf,
        peer: Peer,
    ) -> BoxFuture<Result<(), DoorError>>;
    fn list_sessions(
        &self,
        cwd: Option<PathBuf>,
    ) -> BoxFuture<Result<Vec<SessionEntry>, DoorError>>;
    /// One turn: streams through `peer`, answers when it ends.
    fn prompt(
        &self,
        session: String,
        text: String,
        peer: Peer,
    ) -> BoxFuture<Result<Stop, DoorError>>;
    fn cancel(&self, session: String);
    fn commands(&self) -> Vec<SlashCommand>;
}

/// The editor: where updates and permission requests go.
#[derive(Clone)]
pub struct Peer {
    cx: ConnectionTo<Client>,
    /// The editor said at `initialize` that it fills in forms (`elicitation.form`).
    forms: bool,
}

impl std::fmt::Debug for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Peer")
    }
}

impl Peer {
    /// Sends one update; an error means the editor is gone.
    pub fn send(&self, session: &str, out: Out) -> Result<(), DoorError> {
        let update = update_of(out);
        self.cx
            .send_notification(SessionNotification::new(session.to_string(), update))
            .map_err(|e| DoorError::Internal(e.to_string()))
    }

    /// Asks the editor's approval UI. Dropping the future withdraws the request
    /// (`$/cancel_request`).
    pub async fn ask(&self, session: &str, ask: Ask) -> Answer {
        let options = ask
            .options
            .iter()
            .map(|o| PermissionOption::new(o.id.clone(), o.name.clone(), option_kind(o.kind)))
            .collect();
        let request =
            RequestPermissionRequest::new(session.to_string(), tool_update(ask.tool), options);
        match self.cx.send_request(request).block_task().await {
            Ok(answer) => match answer.outcome {
                RequestPermissionOutcome::Selected(s) => Answer::Chosen(s.option_id.to_string()),
                _ => Answer::Cancelled,
            },
            Err(e) => {
                tracing::debug!(error = %e, "permission request unanswered");
                Answer::Cancelled
            }
        }
    }
}

impl Peer {
    /// Whether the editor fills in forms: a question in the person's own words can be asked
    /// there (`ask_words`).
    pub fn fills_forms(&self) -> bool {
        self.forms
    }

    /// Asks the editor for a person's answer in their own words (`elicitation/create`, a form
    /// of one text field); None when declined, cancelled or unanswered. Dropping the future
    /// withdraws the request.
    pub async fn ask_words(&self, session: &str, question: &str) -> Option<String> {
        let schema = ElicitationSchema::new().property(
            "answer",
            StringPropertySchema::new().title("Your answer".to_string()),
            true,
        );
        let form =
            ElicitationFormMode::new(ElicitationSessionScope::new(session.to_string()), schema);
        let request = CreateElicitationRequest::new(form, question.to_string());
        match self.cx.send_request(request).block_task().await {
            Ok(answer) => match answer.action {
                ElicitationAction::Accept(accepted) => match accepted.content?.remove("answer")? {
                    ElicitationContentValue::String(words) if !words.trim().is_empty() => {
                        Some(words)
                    }
                    _ => None,
                },
                _ => None,
            },
            Err(e) => {
                tracing::debug!(error = %e, "form unanswered");
                None
            }
        }
    }
}

fn option_kind(c: Choice) -> PermissionOptionKind {
    match c {
        Choice::AllowOnce => PermissionOptionKind::AllowOnce,
        Choice::AllowAlways => PermissionOptionKind::AllowAlways,
        Choice::RejectOnce => PermissionOptionKind::RejectOnce,
        Choice::RejectAlways => PermissionOptionKind::RejectAlways,
    }
}

/// A protocol enum from its wire name (an unknown name is left out).
fn named<T: serde::de::DeserializeOwned>(name: Option<&str>) -> Option<T> {
    serde_json::from_value(Value::String(name?.to_string())).ok()
}

fn text(s: String) -> ContentChunk {
    ContentChunk::new(ContentBlock::Text(TextContent::new(s)))
}

fn content_of(t: &ToolCallOut) -> Vec<ToolCallContent> {
    let mut content: Vec<ToolCallContent> = t
        .diffs
        .iter()
        .map(|(path, old, new)| {
            ToolCallContent::Diff(Diff::new(path.clone(), new.clone()).old_text(old.clone()))
        })
        .collect();
    if let Some(s) = &t.text {
        content.push(ContentBlock::Text(TextContent::new(s.clone())).into());
    }
    content
}

fn locations_of(t: &ToolCallOut) -> Vec<ToolCallLocation> {
    t.locations
        .iter()
        .map(|(path, line)| ToolCallLocation::new(path.clone()).line(*line))
        .collect()
}

fn tool_update(t: ToolCallOut) -> ToolCallUpdate {
    let content = content_of(&t);
    let locations = locations_of(&t);
    let mut fields = ToolCallUpdateFields::new()
        .title(t.title)
        .kind(named(t.kind.as_deref()))
        .status(named(t.status.as_deref()))
        .raw_input(t.raw_input);
    if !content.is_empty() {
        fields = fields.content(content);
    }
    if !locations.is_empty() {
        fields = fields.locations(locations);
    }
    ToolCallUpdate::new(t.id, fields)
}

fn update_of(out: Out) -> SessionUpdate {
    match out {
        Out::User(s) => SessionUpdate::UserMessageChunk(text(s)),
        Out::Text(s) => SessionUpdate::AgentMessageChunk(text(s)),
        Out::Thought(s) => SessionUpdate::AgentThoughtChunk(text(s)),
        Out::ToolCall(t) if t.started => {
            let mut call = ToolCall::new(t.id.clone(), t.title.clone().unwrap_or_default())
                .content(content_of(&t))
                .locations(locations_of(&t))
                .raw_input(t.raw_input.clone());
            if let Some(kind) = named(t.kind.as_deref()) {
                call = call.kind(kind);
            }
            if let Some(status) = named(t.status.as_deref()) {
                call = call.status(status);
            }
            SessionUpdate::ToolCall(call)
        }
        Out::ToolCall(t) => SessionUpdate::ToolCallUpdate(tool_update(*t)),
        Out::Plan(entries) => SessionUpdate::Plan(Plan::new(
            entries
                .into_iter()
                .map(|e| {
                    let status = match e.status {
                        "completed" => PlanEntryStatus::Completed,
                        "in_progress" => PlanEntryStatus::InProgress,
                        _ => PlanEntryStatus::Pending,
                    };
                    PlanEntry::new(e.content, PlanEntryPriority::Medium, status)
                })
                .collect(),
        )),
        Out::Usage {
            used,
            size,
            cost_usd,
        } => SessionUpdate::UsageUpdate(
            UsageUpdate::new(used, size).cost(cost_usd.map(|c| Cost::new(c, "USD"))),
        ),
        Out::Commands(commands) => {
            SessionUpdate::AvailableCommandsUpdate(AvailableCommandsUpdate::new(
                commands
                    .into_iter()
                    .map(|c| {
                        AvailableCommand::new(c.name, c.description).input(c.hint.map(|h| {
                            AvailableCommandInput::Unstructured(UnstructuredCommandInput::new(h))
                        }))
                    })
                    .collect(),
            ))
        }
    }
}

fn error_of(e: DoorError) -> agent_client_protocol::Error {
    let message = e.to_string();
    let base = match e {
        DoorError::InvalidParams(_) => agent_client_protocol::Error::invalid_params(),
        DoorError::InvalidRequest(_) => agent_client_protocol::Error::invalid_request(),
        DoorError::NotFound(_) => {
            agent_client_protocol::Error::new(ErrorCode::ResourceNotFound, "Resource not found")
        }
        DoorError::Refused { code, .. } => agent_client_protocol::Error::new(code, message.clone()),
        DoorError::Internal(_) => agent_client_protocol::Error::internal_error(),
    };
    base.data(json!({ "message": message }))
}

/// Answers `responder` with `answer`'s outcome, from a task; then, if it succeeded and was
/// sent, runs `after` with it.
fn answer_later<T, R>(
    responder: Responder<R>,
    answer: BoxFuture<Result<T, DoorError>>,
    map: impl FnOnce(T) -> R + Send + 'static,
    after: impl FnOnce(T) + Send + 'static,
) where
    T: Clone + Send + 'static,
    R: agent_client_protocol::JsonRpcResponse + Send + 'static,
{
    tokio::spawn(async move {
        match answer.await {
            Ok(v) => match responder.respond(map(v.clone())) {
                Ok(()) => after(v),
                Err(e) => tracing::debug!(error = %e, "answer not sent"),
            },
            Err(e) => {
                if let Err(e) = responder.respond_with_error(error_of(e)) {
                    tracing::debug!(error = %e, "error not sent");
                }
            }
        }
    });
}

/// The prompt's words: its text blocks, the text of embedded resources and the links.
fn prompt_text(blocks: &[ContentBlock]) -> String {
    let mut parts = Vec::new();
    for block in blocks {
        match block {
            ContentBlock::Text(t) => parts.push(t.text.clone()),
            ContentBlock::ResourceLink(l) => parts.push(format!("[{}]({})", l.name, l.uri)),
            ContentBlock::Resource(r) => {
                if let EmbeddedResourceResource::TextResourceContents(t) = &r.resource {
                    parts.push(format!("{}:\n{}", t.uri, t.text));
                }
            }
            _ => {}
        }
    }
    parts.join("\n")
}

/// Serves the door on stdin/stdout until the editor closes its end.
pub async fn serve(door: Arc<dyn Door>) -> anyhow::Result<()> {
    let transport = Lines::new(
        line_sink(tokio::io::stdout()),
        lossy_lines(tokio::io::stdin()),
    );
    let (d1, d2, d3, d4, d5) = (
        door.clone(),
        door.clone(),
        door.clone(),
        door.clone(),
        door.clone(),
    );
    // Whether the editor fills in forms (said at `initialize`), for the peers of later requests.
    let forms = Arc::new(AtomicBool::new(false));
    let (f0, f1, f2) = (forms.clone(), forms.clone(), forms);
    Agent
        .v1()
        .name("troupe")
        .on_receive_request(
            async move |init: InitializeRequest, responder: Responder<InitializeResponse>, _cx| {
                let fills = init
                    .client_capabilities
                    .elicitation
                    .as_ref()
                    .is_some_and(|e| e.form.is_some());
                f0.store(fills, Ordering::SeqCst);
                let version = init.protocol_version.min(ProtocolVersion::V1);
                responder.respond(
                    InitializeResponse::new(version)
                        .agent_capabilities(
                            AgentCapabilities::new()
                                .load_session(true)
                                .prompt_capabilities(
                                    PromptCapabilities::new().embedded_context(true),
                                )
                                .session_capabilities(
                                    SessionCapabilities::new().list(SessionListCapabilities::new()),
                                ),
                        )
                        .agent_info(Implementation::new("troupe", env!("CARGO_PKG_VERSION"))),
                )
            },
            on_receive_request!(),
        )
        .on_receive_request(
            // No auth method is offered (the daemon's own token guards it); a client that
            // authenticates anyway is let through.
            async move |_: AuthenticateRequest, responder: Responder<AuthenticateResponse>, _cx| {
                responder.respond(AuthenticateResponse::new())
            },
            on_receive_request!(),
        )
        .on_receive_request(
            async move |req: NewSessionRequest,
                        responder: Responder<NewSessionResponse>,
                        cx: ConnectionTo<Client>| {
                let commands = d1.commands();
                answer_later(
                    responder,
                    d1.new_session(req.cwd),
                    NewSessionResponse::new,
                    move |session: String| advertise(&cx, session, commands),
                );
                Ok(())
            },
            on_receive_request!(),
        )
        .on_receive_request(
            async move |req: LoadSessionRequest,
                        responder: Responder<LoadSessionResponse>,
                        cx: ConnectionTo<Client>| {
                let commands = d2.commands();
                let session = req.session_id.to_string();
                let peer = Peer {
                    cx: cx.clone(),
                    forms: f1.load(Ordering::SeqCst),
                };
                let loaded = d2.load_session(session.clone(), req.cwd, peer);
                answer_later(
                    responder,
                    Box::pin(async move { loaded.await.map(|()| session) }),
                    |_| LoadSessionResponse::new(),
                    move |session| advertise(&cx, session, commands),
                );
                Ok(())
            },
            on_receive_request!(),
        )
        .on_receive_request(
            async move |req: ListSessionsRequest,
                        responder: Responder<ListSessionsResponse>,
                        _cx| {
                answer_later(
                    responder,
                    d3.list_sessions(req.cwd),
                    |sessions| {
                        ListSessionsResponse::new(
                            sessions
                                .into_iter()
                                .map(|s| {
                                    SessionInfo::new(s.id, s.cwd)
                                        .title(s.title)
                                        .updated_at(s.updated_at)
                                })
                                .collect(),
                        )
                    },
                    |_| {},
                );
                Ok(())
            },
            on_receive_request!(),
        )
        .on_receive_request(
            async move |req: PromptRequest,
                        responder: Responder<PromptResponse>,
                        cx: ConnectionTo<Client>| {
                let text = prompt_text(&req.prompt);
                let peer = Peer {
                    cx,
                    forms: f2.load(Ordering::SeqCst),
                };
                let turn = d4.prompt(req.session_id.to_string(), text, peer);
                answer_later(
                    responder,
                    turn,
                    |stop| {
                        PromptResponse::new(match stop {
                            Stop::EndTurn => StopReason::EndTurn,
                            Stop::Cancelled => StopReason::Cancelled,
                        })
                    },
                    |_| {},
                );
                Ok(())
            },
            on_receive_request!(),
        )
        .on_receive_notification(
            async move |n: CancelNotification, _cx| {
                d5.cancel(n.session_id.to_string());
                Ok(())
            },
            on_receive_notification!(),
        )
        .connect_to(transport)
        .await
        .map_err(|e| anyhow::anyhow!("the ACP connection failed: {e}"))
}

/// `available_commands_update` for a session just made or loaded.
fn advertise(cx: &ConnectionTo<Client>, session: String, commands: Vec<SlashCommand>) {
    let update = update_of(Out::Commands(commands));
    if let Err(e) = cx.send_notification(SessionNotification::new(session, update)) {
        tracing::debug!(error = %e, "commands not advertised");
    }
}
