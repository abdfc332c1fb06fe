//! Sessions, messages and the timeline: registering, sending, polling, subscribing.

use super::*;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use troupe_model::{Event, Message, MessageType, Priority, Project, Session, SessionStatus};

/// Params of an operation that takes none (`{}`).
#[derive(Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoParams {}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RegisterSessionParams {
    /// The kind of client: claude, codex, gemini, human, …
    pub cli: String,
    /// The session's working directory; its git root names the project.
    pub cwd: String,
    /// The client's own id for this session; registering it again resumes the session.
    #[serde(default)]
    pub external_id: Option<String>,
    /// The session that started this one (its agent_depth is the parent's + 1).
    #[serde(default)]
    pub parent_session_id: Option<String>,
    /// The agent run that spawned this session, when an agent did.
    #[serde(default)]
    pub spawned_by_agent_id: Option<String>,
    #[serde(default)]
    pub party_id: Option<String>,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct RegisterSessionResult {
    pub session_id: String,
    pub project_id: String,
    pub project_root: String,
    /// False when an existing session with the same cli and external_id was resumed.
    pub created: bool,
    pub session: Session,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionIdParams {
    pub session_id: String,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct SessionResult {
    pub session: Session,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct SessionsResult {
    pub sessions: Vec<Session>,
}

#[derive(Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListSessionsParams {
    /// Only this project's sessions.
    #[serde(default)]
    pub project_id: Option<String>,
    /// Only the sessions of the project this directory belongs to.
    #[serde(default)]
    pub cwd: Option<String>,
    #[serde(default)]
    pub status: Option<SessionStatus>,
    #[serde(default)]
    pub party_id: Option<String>,
    #[serde(default)]
    pub parent_session_id: Option<String>,
}

#[derive(Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DiscoverAgentsParams {
    /// The project to search; defaults to the project of `cwd`.
    #[serde(default)]
    pub project_id: Option<String>,
    #[serde(default)]
    pub cwd: Option<String>,
    /// Defaults to `active`.
    #[serde(default)]
    pub status: Option<SessionStatus>,
    #[serde(default)]
    pub party_id: Option<String>,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SendMessageParams {
    pub from_session_id: String,
    pub to_session_id: String,
    pub content: String,
    #[serde(default = "normal")]
    pub priority: Priority,
    #[serde(default)]
    pub message_type: Option<MessageType>,
    /// A retried send with the same key (per sender) is stored once.
    #[serde(default)]
    pub idempotency_key: Option<String>,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SendToParentParams {
    pub session_id: String,
    pub content: String,
    #[serde(default = "normal")]
    pub priority: Priority,
    #[serde(default)]
    pub idempotency_key: Option<String>,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SendToChildParams {
    pub session_id: String,
    pub child_session_id: String,
    pub content: String,
    #[serde(default = "normal")]
    pub priority: Priority,
    #[serde(default)]
    pub idempotency_key: Option<String>,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BroadcastToChildrenParams {
    pub session_id: String,
    pub content: String,
    #[serde(default = "normal")]
    pub priority: Priority,
    #[serde(default)]
    pub idempotency_key: Option<String>,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BroadcastToPartyParams {
    pub party_id: String,
    pub from_session_id: String,
    pub content: String,
    #[serde(default = "normal")]
    pub priority: Priority,
    #[serde(default)]
    pub idempotency_key: Option<String>,
}

fn normal() -> Priority {
    Priority::Normal
}

/// The result of a send to one recipient.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct SentMessage {
    pub message_id: String,
    pub to_session_id: String,
    /// The message's place in the recipient's delivery order.
    pub seq: i64,
    /// True when this idempotency key had been used: the earlier message is returned.
    pub duplicate: bool,
}

/// The result of a send to many recipients.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct BroadcastResult {
    pub message_ids: Vec<String>,
    pub to_session_ids: Vec<String>,
    pub duplicate: bool,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PollMessagesParams {
    pub session_id: String,
    /// Return messages after this `seq` (read or not); without it, unread messages.
    #[serde(default)]
    pub since: Option<i64>,
    /// Mark the returned messages read (default true).
    #[serde(default)]
    pub mark_read: Option<bool>,
    /// Wait up to this long for a message when there is none (long-poll; max 300000).
    #[serde(default)]
    pub wait_ms: Option<u64>,
    /// At most this many messages (default 100, max 1000).
    #[serde(default)]
    pub limit: Option<u32>,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct PollMessagesResult {
    pub messages: Vec<Message>,
    /// Pass as `since` to continue after these messages.
    pub next_since: i64,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MarkReadParams {
    pub session_id: String,
    /// These messages; without it, every message up to `up_to_seq` (or all).
    #[serde(default)]
    pub message_ids: Option<Vec<String>>,
    #[serde(default)]
    pub up_to_seq: Option<i64>,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct MarkReadResult {
    /// How many messages went from unread to read.
    pub marked: usize,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SubscribeMessagesParams {
    pub session_id: String,
    /// Replay messages after this `seq` first; without it, only messages sent from now on.
    #[serde(default)]
    pub since: Option<i64>,
}

#[derive(Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListEventsParams {
    #[serde(default)]
    pub since: Option<i64>,
    #[serde(default)]
    pub session_id: Option<String>,
    #[serde(default)]
    pub party_id: Option<String>,
    #[serde(default)]
    pub project_id: Option<String>,
    #[serde(default)]
    pub kind: Option<String>,
    /// At most this many events (default 100, max 1000).
    #[serde(default)]
    pub limit: Option<u32>,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct ListEventsResult {
    pub events: Vec<Event>,
    pub next_since: i64,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct DaemonStatus {
    pub pid: u32,
    pub version: String,
    pub data_dir: String,
    pub socket_path: String,
    pub ws_url: String,
    pub uptime_ms: u64,
    pub schema_version: usize,
    pub max_message_bytes: usize,
    pub projects: i64,
    pub sessions: i64,
    pub active_sessions: i64,
    pub messages: i64,
    pub events: i64,
    /// What the members' box is and what it keeps them from, or why members cannot start.
    #[serde(default)]
    pub sandbox: String,
    /// The layer that makes the box: `bubblewrap`, `landlock`, `off` (the person's choice) or
    /// `unavailable` (members do not start).
    #[serde(default)]
    pub sandbox_layer: String,
}

#[derive(Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShutdownParams {
    /// Leave the members' processes that the next daemon can adopt (process members) running;
    /// by default every member's processes end with the daemon.
    #[serde(default)]
    pub leave_running: bool,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct ShutdownResult {
    pub stopping: bool,
    /// Runs ended with every process of theirs.
    #[serde(default)]
    pub ended_runs: usize,
    /// Runs left running for the next daemon to take back: process members (with
    /// `leave_running`), runs on remote workers, sessions leading their own party.
    #[serde(default)]
    pub left_running: usize,
}

/// `gc`: apply the retention rules now.
#[derive(Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GcParams {
    /// Count what would go; remove nothing.
    #[serde(default)]
    pub dry_run: bool,
    /// Rows, logs and checkouts older than this many days may go (default: `[retention]
    /// max_age_days` of the data dir's `config.toml`, else 30; 0: whatever their age; at most
    /// 36500, a hundred years).
    #[serde(default)]
    pub max_age_days: Option<f64>,
}

/// What a `gc` removed (or, dry, would remove).
#[derive(Debug, Default, Deserialize, Serialize, JsonSchema)]
pub struct GcResult {
    pub dry_run: bool,
    /// The age past which things went.
    pub max_age_days: f64,
    /// The database was past `[retention] max_db_mib`: the age was lowered to this until it
    /// was under (or to 0, when what is left is all kept).
    #[serde(default)]
    pub size_limit_age_days: Option<f64>,
    /// Timeline events (not of an open party).
    pub events: u64,
    /// Messages read, or whose recipient's session ended.
    pub messages: u64,
    /// Notifications not of an open party.
    pub notifications: u64,
    /// Permission requests answered (never a pending one).
    pub approvals: u64,
    /// Questions answered or expired (never a pending one).
    pub questions: u64,
    /// Ended runs of ended parties and standalone ones (a run a party's member still names
    /// stays, its log goes).
    pub runs: u64,
    /// Ended sessions nothing refers to any more.
    pub sessions: u64,
    /// Run logs removed (`runs/<run>.log` and its rotated part), and their bytes.
    pub log_files: u64,
    pub log_bytes: u64,
    /// Checkouts removed: of parties that ended (members', ADR, integration) and of standalone
    /// runs that ended, longer ago than the age, with no unmerged or uncommitted work.
    pub checkouts_removed: Vec<String>,
    /// Checkouts kept, and why (unmerged commits, uncommitted changes, a run at work in it, an
    /// owner unknown to this data dir).
    pub checkouts_kept: Vec<KeptCheckout>,
    /// The branches the removed checkouts took with them (all merged).
    #[serde(default)]
    pub deleted: Vec<DeletedRef>,
    /// The database's size before and after (`page_count × page_size`).
    pub db_bytes_before: u64,
    pub db_bytes_after: u64,
    /// Whether it ended with `VACUUM` (a real `gc` that freed pages), so the file shrank.
    pub vacuumed: bool,
}
