//! Wire types: the params and result of every operation, with their JSON Schemas. Row records
//! (`Session`, `Message`, `Event`, …) come from the store. Editor clients mirror these.

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
    /// Whether members run in the sandbox that hides the data dir from them, and why not.
    #[serde(default)]
    pub sandbox: String,
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
    /// max_age_days` of the data dir's `config.toml`, else 30; 0: whatever their age).
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

// ---- Agents -------------------------------------------------------------------------------

pub use troupe_engine::{AgentDefinition, PartyDefinition, Signal, Strategy};
pub use troupe_model::{
    AgentRun, DefinitionRow, MemberStatus, Notification, PartyStatus, RoleState, RunStatus, Task,
    TaskStatus,
};

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentDefinitionParams {
    pub definition: AgentDefinition,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NameParams {
    pub name: String,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct DefinitionResult {
    pub definition: DefinitionRow,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct DefinitionsResult {
    pub definitions: Vec<DefinitionRow>,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StartAgentParams {
    /// The agent definition to run.
    pub agent: String,
    pub prompt: String,
    /// The session starting it; the new session is its child (depth + 1).
    pub parent_session_id: String,
    /// A task id, or `next`: the project's oldest open task, taken for this run.
    #[serde(default)]
    pub task: Option<String>,
    /// Seconds; overrides the definition's timeout (0: no limit).
    #[serde(default)]
    pub timeout: Option<f64>,
    /// The parent's context given to the agent (seed 001): `summary_markdown` (the parent's
    /// task, result and recent messages), `session_id:<id>` (the same of another session of the
    /// project), `transcript:<n>` (the parent's last n messages), `file:<path>` (a file of the
    /// project); other text is given as it is.
    #[serde(default)]
    pub session_context: Option<String>,
    /// Changes to the agent for this run: model, runner, isolation, timeout, budget, tool
    /// policy (a member's subagent: narrowing only).
    #[serde(default)]
    pub overrides: Option<troupe_engine::AgentOverrides>,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct StartAgentResult {
    pub run_id: String,
    pub session_id: String,
    pub workdir: String,
}

/// How a run ended by its own account.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CompletionStatus {
    #[default]
    Success,
    Partial,
    Blocked,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CompleteParams {
    /// The completing agent's session (the CLI fills it from TROUPE_SESSION_ID).
    pub session_id: String,
    /// The run; defaults to the session's run.
    #[serde(default)]
    pub run_id: Option<String>,
    pub output: String,
    #[serde(default)]
    pub status: CompletionStatus,
    #[serde(default)]
    pub artifacts: std::collections::BTreeMap<String, serde_json::Value>,
    #[serde(default)]
    pub files_modified: Vec<String>,
    #[serde(default)]
    pub next_steps: Vec<String>,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct CompleteResult {
    pub run_id: String,
    pub status: RunStatus,
}

#[derive(Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListAgentsParams {
    /// The runs started by this session.
    #[serde(default)]
    pub parent_session_id: Option<String>,
    /// The calling session: lists the runs it started and its siblings (the other runs started
    /// by its own parent, or the other members of its party), read-only. Agents calling over
    /// MCP are this session.
    #[serde(default)]
    pub session_id: Option<String>,
    /// With `session_id`: only its children, or only its siblings (default: both).
    #[serde(default)]
    pub scope: Option<AgentScope>,
    #[serde(default)]
    pub party_id: Option<String>,
    /// Only pending and running runs.
    #[serde(default)]
    pub active_only: bool,
}

/// Which relatives of the calling session `list_agents` shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AgentScope {
    Children,
    Siblings,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct RunsResult {
    pub runs: Vec<AgentRun>,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunIdParams {
    pub run_id: String,
}

/// The person's own prompt into a running agent's session (`prompt_agent`).
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PromptAgentParams {
    pub run_id: String,
    /// What to say to the agent, as its next turn.
    pub text: String,
    /// How long to wait for its answer (default 120000, at most 600000).
    #[serde(default)]
    pub wait_ms: Option<u64>,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct PromptAgentResult {
    pub run_id: String,
    /// Whether its answer came within `wait_ms` (else it is on the run's timeline).
    pub answered: bool,
    /// Its text in that turn.
    pub answer: Option<String>,
    /// How that turn ended: end_turn, cancelled, max_tokens, …
    pub stop_reason: Option<String>,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct RunResult {
    pub run: AgentRun,
    /// Tokens and cost of its executor and of the runs it started.
    pub usage: troupe_model::Usage,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RouteToParams {
    /// The router step's session (the CLI fills it from TROUPE_SESSION_ID).
    pub session_id: String,
    /// The agent that should handle the request: one of the router's `agents`.
    pub agent: String,
    /// Why.
    #[serde(default)]
    pub reason: String,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct RouteToResult {
    /// The router step's run, now complete.
    pub run_id: String,
    pub agent: String,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TeamBroadcastParams {
    /// The member's turn's session (the CLI fills it from TROUPE_SESSION_ID).
    pub session_id: String,
    /// What the other members should know; they see it before their next turn.
    pub message: String,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VoteConcludeParams {
    pub session_id: String,
    #[serde(default)]
    pub reason: String,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConcludeTeamParams {
    pub session_id: String,
    /// The team's final answer.
    pub answer: String,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct TeamActResult {
    /// The member's turn.
    pub run_id: String,
    /// The team (the pattern run's agent).
    pub team: String,
}

/// One run of a run tree.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct RunTreeEntry {
    pub run_id: String,
    pub agent: String,
    /// Why it was started: `root`, `handoff`, `router`, `advisor`, `team_member`, `subagent`
    /// (none: a party member).
    pub trigger: Option<String>,
    pub status: RunStatus,
    /// The run that started it (none for the tree's root).
    pub parent_run_id: Option<String>,
    pub depth: u32,
    pub output: Option<String>,
    pub error: Option<String>,
    /// Its own tokens and cost, with those of the runs under it.
    pub usage: troupe_model::Usage,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct RunTreeResult {
    /// The runs, the root first, each after the run that started it.
    pub runs: Vec<RunTreeEntry>,
    /// The chain whose answer the root returned (a pattern run's), e.g. `["a", "b", "c"]`.
    pub chain: Vec<String>,
    /// Everything the tree spent (the root's rolled-up usage).
    pub total: troupe_model::Usage,
}

// ---- Parties ------------------------------------------------------------------------------

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PartyDefinitionParams {
    pub definition: PartyDefinition,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LaunchPartyParams {
    /// The party definition.
    pub name: String,
    #[serde(default)]
    pub task_id: Option<String>,
    /// Free-form inputs handed to every member's prompt.
    #[serde(default)]
    pub inputs: Option<serde_json::Value>,
    /// The project (its git root); or give `project_id`.
    #[serde(default)]
    pub cwd: Option<String>,
    #[serde(default)]
    pub project_id: Option<String>,
    /// Changes to a role's agent for this launch, by role: model, runner, isolation, timeout,
    /// budget, tool policy (over the role's own `overrides`).
    #[serde(default)]
    pub roles: std::collections::BTreeMap<String, troupe_engine::AgentOverrides>,
    /// The session launching it (members' sessions become its children).
    #[serde(default)]
    pub created_by_session_id: Option<String>,
    /// `self`: the launching session leads the party itself (no leader process is started);
    /// `spawn` (the default) starts every role's agents.
    #[serde(default)]
    pub mode: LaunchMode,
}

/// Who leads a launched party.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LaunchMode {
    /// Every role, the leader's included, is an agent Troupe starts.
    #[default]
    Spawn,
    /// The launching session (an interactive Claude Code, an editor user) is the leader.
    #[serde(rename = "self")]
    SelfLed,
}

/// A party, without its frozen definition.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct PartySummary {
    pub party_id: String,
    pub name: String,
    pub status: PartyStatus,
    pub status_reason: Option<String>,
    pub project_id: String,
    pub repo_root: String,
    pub task_id: Option<String>,
    pub created_at: String,
    pub completed_at: Option<String>,
    /// Roles a `proceed` signal released from their `role:signal` flow edges.
    #[serde(default)]
    pub released: Vec<String>,
    /// What it was launched with (`launch_party`'s `inputs`).
    #[serde(default)]
    pub inputs: Option<serde_json::Value>,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct LaunchPartyResult {
    pub party_id: String,
    pub party: PartySummary,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PartyIdParams {
    pub party_id: String,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct RoleStatus {
    pub role: String,
    pub agent: String,
    pub count: u32,
    pub is_leader: bool,
    pub depends_on: Vec<String>,
    /// The recovery strategy in force (run-time override included).
    pub on_crash: Strategy,
    pub paused: bool,
    pub status: RoleState,
    pub completed: usize,
    pub running: usize,
    pub crashes: i64,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct MemberStatusView {
    pub role: String,
    pub index: i64,
    pub status: MemberStatus,
    pub crash_count: i64,
    pub attempts: i64,
    pub session_id: Option<String>,
    pub session_status: Option<SessionStatus>,
    pub run_id: Option<String>,
    pub run_status: Option<RunStatus>,
    pub output: Option<String>,
    pub workdir: Option<String>,
    pub branch: Option<String>,
    /// When the scheduler started and finished this member (ms since the epoch).
    pub started_at_ms: Option<i64>,
    pub finished_at_ms: Option<i64>,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct PartyStatusResult {
    pub party: PartySummary,
    /// Tokens and cost of its executor members.
    pub usage: troupe_model::Usage,
    pub roles: Vec<RoleStatus>,
    pub members: Vec<MemberStatusView>,
    pub tasks: Vec<Task>,
    /// Where the party's collaboration is (seed 004): initialized, team_formed, planning,
    /// executing, reviewing, completed, cancelled or error.
    pub collab_state: troupe_engine::collab::CollabState,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SignalRoleParams {
    pub party_id: String,
    pub role_name: String,
    pub signal: Signal,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OverrideRecoveryParams {
    pub party_id: String,
    pub role_name: String,
    pub strategy: Strategy,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct PartyResult {
    pub party: PartySummary,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReassignTaskParams {
    pub party_id: String,
    pub task_id: String,
    pub from_role: String,
    pub to_role: String,
}

#[derive(Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListPartiesParams {
    #[serde(default)]
    pub status: Option<PartyStatus>,
    #[serde(default)]
    pub cwd: Option<String>,
    #[serde(default)]
    pub project_id: Option<String>,
    /// Only the parties this session launched.
    #[serde(default)]
    pub created_by_session_id: Option<String>,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct PartiesResult {
    pub parties: Vec<PartySummary>,
}

/// Whom `pause_party` and `resume_party` hold or let go: a party's running members, one role's,
/// or one member.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HoldParams {
    pub party_id: String,
    #[serde(default)]
    pub role: Option<String>,
    #[serde(default)]
    pub index: Option<u32>,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct HoldResult {
    /// The members held (or let go), as `role#index`.
    pub members: Vec<String>,
    /// The members left as they were, and why (a remote worker's, one in the daemon).
    pub skipped: Vec<String>,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CleanupPartyParams {
    pub party_id: String,
    /// Delete uncommitted or unmerged work too.
    #[serde(default)]
    pub force: bool,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct KeptCheckout {
    pub workdir: String,
    pub reason: String,
    /// The refs whose commits removing it would lose: in no branch that is kept and not merged
    /// into the target (empty when it was kept for another reason, such as uncommitted changes).
    #[serde(default)]
    pub unmerged: Vec<DeletedRef>,
}

/// A branch (or other ref) a cleanup deletes, and its tip.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct DeletedRef {
    /// The repository it is in: the project's, or a member's clone or worktree.
    pub repo: String,
    /// A branch's name (`troupe/<party>/<role>-<i>`), `HEAD` when detached, else the ref's full
    /// name (`refs/stash`).
    pub branch: String,
    /// The commit it points at.
    pub tip: String,
    /// Its commits are in no branch that is kept and not merged into the target: deleting it
    /// loses them (only a forced cleanup does).
    pub unmerged: bool,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct CleanupResult {
    pub removed: Vec<String>,
    pub kept: Vec<KeptCheckout>,
    /// What the removals deleted: the members' branches in the project's repository, and every
    /// other ref whose commits went with a checkout (`unmerged`: lost; only when forced).
    #[serde(default)]
    pub deleted: Vec<DeletedRef>,
}

// ---- Tasks and notifications --------------------------------------------------------------

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateTaskParams {
    pub title: String,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub cwd: Option<String>,
    #[serde(default)]
    pub project_id: Option<String>,
    #[serde(default)]
    pub party_id: Option<String>,
    #[serde(default)]
    pub role_name: Option<String>,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct TaskResult {
    pub task_id: String,
    pub task: Task,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EscalateTaskParams {
    pub task_id: String,
    pub reason: String,
    /// The escalating session (the CLI fills it from TROUPE_SESSION_ID).
    #[serde(default)]
    pub session_id: Option<String>,
}

#[derive(Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListTasksParams {
    #[serde(default)]
    pub party_id: Option<String>,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct TasksResult {
    pub tasks: Vec<Task>,
}

#[derive(Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListNotificationsParams {
    #[serde(default)]
    pub since: Option<i64>,
    #[serde(default)]
    pub party_id: Option<String>,
    #[serde(default)]
    pub limit: Option<u32>,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct NotificationsResult {
    pub notifications: Vec<Notification>,
    pub next_since: i64,
}

// ---- Approvals ----------------------------------------------------------------------------

pub use troupe_model::{Approval, ApprovalRule, ApprovalStatus, Question, QuestionStatus};

/// The longest question `ask_person` takes (bytes), its most choices, and its longest choice.
pub const QUESTION_MAX_BYTES: usize = 4000;
pub const QUESTION_MAX_CHOICES: usize = 20;
pub const CHOICE_MAX_BYTES: usize = 200;

/// `ask_person`: a question for a person, or (with `question_id`) waiting on for its answer.
#[derive(Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AskPersonParams {
    /// The asking session (an agent's own, from `TROUPE_SESSION_ID`).
    pub session_id: String,
    /// What to ask (required unless `question_id` resumes waiting).
    #[serde(default)]
    pub question: Option<String>,
    /// The answers to offer (at most 20); none: the person answers in their own words.
    #[serde(default)]
    pub choices: Vec<String>,
    /// Wait on for the answer to this question.
    #[serde(default)]
    pub question_id: Option<String>,
    /// How long to wait for the answer (ms; default 30000, max 300000; 0 answers at once).
    #[serde(default)]
    pub wait_ms: Option<u64>,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct QuestionResult {
    pub question_id: String,
    /// Pending: call again with `question_id` to keep waiting.
    pub status: QuestionStatus,
    pub answer: Option<String>,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AnswerQuestionParams {
    pub question_id: String,
    /// One of the question's choices if it offered some; else any text.
    pub answer: String,
    #[serde(default)]
    pub answered_by: Option<String>,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct AnswerQuestionResult {
    pub question: Question,
}

#[derive(Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RequestPermissionParams {
    /// The asking session (the CLI fills it from TROUPE_SESSION_ID).
    pub session_id: String,
    /// Keep waiting on a request made earlier (after a reconnect) instead of asking again.
    #[serde(default)]
    pub approval_id: Option<String>,
    #[serde(default)]
    pub tool_name: Option<String>,
    #[serde(default)]
    pub input: Option<serde_json::Value>,
    /// The file the action touches, with its line range, and a diff preview for edits.
    #[serde(default)]
    pub file_path: Option<String>,
    #[serde(default)]
    pub start_line: Option<i64>,
    #[serde(default)]
    pub end_line: Option<i64>,
    #[serde(default)]
    pub diff: Option<String>,
    #[serde(default)]
    pub is_dangerous: bool,
    #[serde(default)]
    pub danger_reason: Option<String>,
    /// The caller's key: asking again with it returns the same request.
    #[serde(default)]
    pub request_key: Option<String>,
    /// How long this call waits for the decision (default 30000, max 300000); the request
    /// itself stays pending until decided or timed out.
    #[serde(default)]
    pub wait_ms: Option<u64>,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct PermissionResult {
    pub approval_id: String,
    /// Pending: call again with `approval_id` to keep waiting.
    pub status: ApprovalStatus,
    pub decision: Option<String>,
    pub reason: Option<String>,
}

#[derive(Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListApprovalsParams {
    /// Without it, every status but expired.
    #[serde(default)]
    pub status: Option<ApprovalStatus>,
    /// Also list expired requests (asked by a run that ended before anyone decided).
    #[serde(default)]
    pub include_expired: bool,
    #[serde(default)]
    pub party_id: Option<String>,
    #[serde(default)]
    pub session_id: Option<String>,
    #[serde(default)]
    pub project_id: Option<String>,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct ApprovalsResult {
    pub approvals: Vec<Approval>,
}

/// A person's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DecisionKind {
    Approve,
    Deny,
    /// Deny and stop the asking agent.
    Abort,
    /// Approve, and approve later matching requests automatically.
    ApprovePattern,
}

/// Where an approve_pattern rule applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RuleScope {
    Party,
    Project,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DecideApprovalParams {
    pub approval_id: String,
    pub decision: DecisionKind,
    /// For approve_pattern: a glob over the request's subject (file path, command or input);
    /// default: the subject itself. Paths: `*` does not cross `/`, no `/` matches the file's
    /// name anywhere. Commands: word by word, a last `*` (`cargo test*`) takes further words,
    /// and an operator (`&&`, `;`, `|`, `>`, `$(`…) matches only if the pattern writes it.
    #[serde(default)]
    pub pattern: Option<String>,
    /// For approve_pattern: the party (default when the request came from one) or the project.
    #[serde(default)]
    pub scope: Option<RuleScope>,
    #[serde(default)]
    pub decided_by: Option<String>,
    #[serde(default)]
    pub reason: Option<String>,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct ApprovalResult {
    pub approval: Approval,
}

#[derive(Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListApprovalRulesParams {
    #[serde(default)]
    pub project_id: Option<String>,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct ApprovalRulesResult {
    pub rules: Vec<ApprovalRule>,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RuleIdParams {
    pub rule_id: String,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct ApprovalRuleResult {
    pub rule: ApprovalRule,
}

#[derive(Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SubscribeApprovalsParams {
    /// Only this project's requests (default: all).
    #[serde(default)]
    pub project_id: Option<String>,
    /// Only the project of this directory.
    #[serde(default)]
    pub cwd: Option<String>,
}

#[derive(Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SubscribeNotificationsParams {
    /// Replay notifications after this seq first; without it, only new ones.
    #[serde(default)]
    pub since: Option<i64>,
}

/// A run's output: its log (a process's stdout and stderr; an ACP agent's words and tool calls
/// with its stderr), a byte range at a time.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunLogParams {
    pub run_id: String,
    /// The byte offset to read from; without it, the log's last `limit` bytes.
    #[serde(default)]
    pub offset: Option<u64>,
    /// At most this many bytes (default 65536, at most 1048576).
    #[serde(default)]
    pub limit: Option<u64>,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct RunLogResult {
    pub run_id: String,
    /// The text read (invalid UTF-8 replaced; a character cut at the end is left for the next
    /// read).
    pub text: String,
    pub offset: u64,
    /// Where the next read starts.
    pub next_offset: u64,
    /// The log's size now.
    pub size: u64,
    /// The run has ended: the log grows no more.
    pub ended: bool,
    /// The offset asked for is no longer kept (the log passed `[retention] max_log_mib` and
    /// was rotated: only its current part and the previous one are kept), or lay past the end:
    /// the read started at `offset`, the oldest byte kept.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rotated: bool,
}

/// `subscribe_run_log`: a run's output as it is written, until the run ends.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SubscribeRunLogParams {
    pub run_id: String,
    /// The byte offset to start from (default 0: the whole log, then what comes).
    #[serde(default)]
    pub offset: Option<u64>,
}

/// One piece of a run's output (`run_log` notification).
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct RunLogChunk {
    pub run_id: String,
    pub offset: u64,
    pub text: String,
    /// The run has ended and this is the last of its output: nothing more comes.
    pub ended: bool,
}

/// `subscribe_events`: the timeline, as it is written.
#[derive(Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SubscribeEventsParams {
    /// Only this party's events.
    #[serde(default)]
    pub party_id: Option<String>,
    /// Only this session's events.
    #[serde(default)]
    pub session_id: Option<String>,
    /// Only this project's events.
    #[serde(default)]
    pub project_id: Option<String>,
    /// Replay the events after this seq first (0: from the start); without it, only new ones.
    #[serde(default)]
    pub since: Option<i64>,
}

// ---- Plugins ------------------------------------------------------------------------------

/// An installed plugin.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct PluginInfo {
    pub name: String,
    pub version: String,
    /// recovery, router or executor.
    pub kind: String,
    /// The troupe:plugin WIT version it targets.
    pub wit: String,
    #[serde(default)]
    pub description: Option<String>,
    pub dir: String,
    pub sha256: String,
    /// Hosts its manifest asks for (`*`: any the user grants).
    pub http_hosts: Vec<String>,
    #[serde(default)]
    pub config: Option<serde_json::Value>,
    #[serde(default)]
    pub config_schema: Option<serde_json::Value>,
    /// What the user granted it (plugins/grants.toml).
    pub grant: serde_json::Value,
    /// compiled or cache: where its machine code came from at its last load.
    pub loaded_from: String,
    pub load_ms: f64,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct BrokenPlugin {
    pub dir: String,
    pub error: String,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct PluginsResult {
    pub plugins: Vec<PluginInfo>,
    /// Plugin folders that did not load, with why.
    pub broken: Vec<BrokenPlugin>,
    /// WIT versions this daemon loads.
    pub supported_wit: Vec<String>,
    pub plugins_dir: String,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InstallPluginParams {
    /// A folder holding `plugin.toml` and the component it names (absolute, or relative to `cwd`).
    pub path: String,
    #[serde(default)]
    pub cwd: Option<String>,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct PluginResult {
    pub plugin: PluginInfo,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct RemovePluginResult {
    pub name: String,
    pub removed: bool,
}

/// Changes to what a plugin is granted; absent fields stay as they are.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GrantPluginParams {
    pub name: String,
    /// Origins it may reach (replaces the list): `api.openai.com`, `https://host:port`, or
    /// `http://127.0.0.1:8080` (plain http only for local hosts).
    #[serde(default)]
    pub allow_http: Option<Vec<String>>,
    #[serde(default)]
    pub allow_private: Option<bool>,
    /// The daemon's environment variable holding the provider key ("" to clear).
    #[serde(default)]
    pub key_env: Option<String>,
    /// Config values over the manifest's defaults (replaces the object).
    #[serde(default)]
    pub config: Option<serde_json::Value>,
    #[serde(default)]
    pub memory_mib: Option<u32>,
    #[serde(default)]
    pub call_timeout_ms: Option<u64>,
    #[serde(default)]
    pub max_requests: Option<u64>,
    #[serde(default)]
    pub max_response_bytes: Option<u64>,
}

/// An agent a router may choose.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RouteCandidate {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub capabilities: Vec<String>,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RouteRequestParams {
    /// The router plugin.
    pub router: String,
    /// The request to route.
    pub request: String,
    #[serde(default)]
    pub metadata: std::collections::BTreeMap<String, String>,
    /// The agents to choose from (default: every agent definition).
    #[serde(default)]
    pub candidates: Option<Vec<RouteCandidate>>,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct RouteResult {
    pub agent: String,
    pub reason: String,
    pub router: String,
}

// ---- Agent CLI hooks ----------------------------------------------------------------------

fn claude() -> String {
    "claude".into()
}

/// One hook of an agent CLI, as `troupe hook <event>` forwards it.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HookParams {
    /// The CLI whose hook this is (default claude).
    #[serde(default = "claude")]
    pub cli: String,
    /// The hook's JSON input exactly as the CLI sent it (`hook_event_name`, `session_id`,
    /// `cwd`, `tool_name`, `tool_input`, …).
    pub payload: serde_json::Value,
    /// The Troupe session, when Troupe started this CLI (TROUPE_SESSION_ID).
    #[serde(default)]
    pub session_id: Option<String>,
    /// The parent of a session registered by this hook (TROUPE_PARENT_SESSION_ID).
    #[serde(default)]
    pub parent_session_id: Option<String>,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct HookResult {
    pub session_id: String,
    /// The JSON the hook prints for the CLI (`{}` when there is nothing to say).
    pub output: serde_json::Value,
}

// ---- The collaboration protocol (seed 004): plans, steps, decisions ----

pub use troupe_engine::Budget;
pub use troupe_engine::collab::{CollabState, StepSpec, ToolPolicy};
pub use troupe_model::{
    DecisionRecord, DecisionStatus, PlanReview, PlanStatus, PlanStep, PlanVersion, StepState, Vote,
};

/// A plan proposed for a party (a new draft version).
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProposePlanParams {
    pub party_id: String,
    pub steps: Vec<StepSpec>,
    #[serde(default)]
    pub summary: Option<String>,
    /// The proposing session (a member); absent: the person.
    #[serde(default)]
    pub session_id: Option<String>,
}

/// What a teammate says of a draft plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PlanVerdict {
    Approve,
    RequestChanges,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReviewPlanParams {
    pub party_id: String,
    /// The draft reviewed (default: the latest).
    #[serde(default)]
    pub version: Option<i64>,
    pub verdict: PlanVerdict,
    #[serde(default)]
    pub comments: Option<String>,
    /// The reviewing session (a member); absent: the person.
    #[serde(default)]
    pub session_id: Option<String>,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CommitPlanParams {
    pub party_id: String,
    /// The draft committed (default: the latest).
    #[serde(default)]
    pub version: Option<i64>,
    /// Commit even though a reviewer asked for changes.
    #[serde(default)]
    pub force: bool,
    /// The committing session (the party's leader); absent: the person.
    #[serde(default)]
    pub session_id: Option<String>,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct PlanResult {
    pub plan: PlanVersion,
}

/// A party's plan: where the collaboration is, the committed plan and its steps, the draft
/// under review.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct PlanView {
    pub party_id: String,
    pub collab_state: CollabState,
    pub committed: Option<PlanVersion>,
    pub draft: Option<PlanVersion>,
    pub steps: Vec<PlanStep>,
}

/// A step named by its owner (or the leader, or the person).
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StepParams {
    pub party_id: String,
    pub step_id: String,
    /// What was done (for `submit_step`), or a note.
    #[serde(default)]
    pub summary: Option<String>,
    #[serde(default)]
    pub session_id: Option<String>,
}

/// What a reviewer says of a submitted step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StepVerdict {
    Accept,
    Reopen,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReviewStepParams {
    pub party_id: String,
    pub step_id: String,
    pub verdict: StepVerdict,
    /// Why (checked against the step's acceptance text).
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub session_id: Option<String>,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HandoffStepParams {
    pub party_id: String,
    pub step_id: String,
    /// The role that owns the step from now on.
    pub to_role: String,
    /// What the new owner should know.
    #[serde(default)]
    pub note: Option<String>,
    #[serde(default)]
    pub session_id: Option<String>,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BlockStepParams {
    pub party_id: String,
    pub step_id: String,
    /// What blocks it: the topic of the decision it raises.
    pub blocker: String,
    /// The ways out the decision offers (default: proceed as planned, hand it off, drop it).
    #[serde(default)]
    pub options: Vec<String>,
    #[serde(default)]
    pub session_id: Option<String>,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct StepResult {
    pub step: PlanStep,
    /// The decision a block raised.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<DecisionRecord>,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProposeDecisionParams {
    pub party_id: String,
    pub topic: String,
    pub options: Vec<String>,
    /// What the options were weighed on.
    #[serde(default)]
    pub evidence: Option<String>,
    /// Who votes: role names and/or "person" (default: every role of the party).
    #[serde(default)]
    pub voters: Option<Vec<String>>,
    /// How long voting stays open (default 300 s); it closes earlier once everyone voted.
    #[serde(default)]
    pub window_secs: Option<f64>,
    #[serde(default)]
    pub session_id: Option<String>,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VoteParams {
    pub decision_id: String,
    pub option: String,
    #[serde(default)]
    pub rationale: Option<String>,
    /// The voting session (it votes as its role); absent: the person.
    #[serde(default)]
    pub session_id: Option<String>,
}

/// The leader (or the person) chooses: breaks a tie, or decides before the window closes.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CommitDecisionParams {
    pub decision_id: String,
    pub option: String,
    #[serde(default)]
    pub session_id: Option<String>,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct DecisionResult {
    pub decision: DecisionRecord,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListDecisionsParams {
    /// One party's decisions; absent: every decision still open or tied.
    #[serde(default)]
    pub party_id: Option<String>,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct DecisionsResult {
    pub decisions: Vec<DecisionRecord>,
}

/// What Troupe's policy says of a tool call (a step's tool policy).
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolPolicyParams {
    pub session_id: String,
    pub tool_name: String,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct ToolPolicyResult {
    /// default (the usual rules decide), allow, ask (a person) or deny.
    pub verdict: String,
    pub reason: Option<String>,
}

// ---- Landing the work: worktrees, review, the merge queue, the conflict radar ---------------

#[derive(Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListWorktreesParams {
    /// Only this party's checkouts (default: every party's that is still on disk).
    #[serde(default)]
    pub party_id: Option<String>,
    /// A member asking (a door fills it in): only its own party's checkouts.
    #[serde(default)]
    pub session_id: Option<String>,
    /// Measure ahead/behind against this branch (default: the branch the project has out).
    #[serde(default)]
    pub target: Option<String>,
}

/// A managed checkout: a party member's worktree or clone, measured against the target.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct WorktreeInfo {
    pub party_id: String,
    pub party_name: String,
    pub role: String,
    pub index: i64,
    /// The member's status.
    pub status: MemberStatus,
    pub workdir: String,
    pub branch: String,
    pub target: Option<String>,
    /// The branch's tip, and where it forked from the target.
    pub head: Option<String>,
    pub base: Option<String>,
    pub ahead: usize,
    pub behind: usize,
    /// Uncommitted changes in the checkout (untracked files count).
    pub dirty: bool,
    /// Files its commits changed since the fork.
    pub changed_files: Vec<String>,
    /// Why it could not be measured (its branch gone, the target missing), if so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct WorktreesResult {
    pub worktrees: Vec<WorktreeInfo>,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MemberParams {
    pub party_id: String,
    /// A member asking (a door fills it in): it must be of the party.
    #[serde(default)]
    pub session_id: Option<String>,
    pub role: String,
    /// The member's instance (default 0).
    #[serde(default)]
    pub index: u32,
    /// Against this branch (default: the branch the project has out).
    #[serde(default)]
    pub target: Option<String>,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MemberDiffParams {
    pub party_id: String,
    /// A member asking (a door fills it in): it must be of the party.
    #[serde(default)]
    pub session_id: Option<String>,
    pub role: String,
    #[serde(default)]
    pub index: u32,
    #[serde(default)]
    pub target: Option<String>,
    /// Only this file, with its text at the fork point and at the branch's tip.
    #[serde(default)]
    pub path: Option<String>,
}

/// One changed file of a member's branch.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct FileDiffView {
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_path: Option<String>,
    /// added, deleted, modified, renamed, copied, typechange.
    pub status: String,
    pub additions: usize,
    pub deletions: usize,
    pub binary: bool,
    /// Unified diff (empty for a binary file).
    pub patch: String,
    /// With `path`: the file at the fork point (absent if it did not exist or is not text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_text: Option<String>,
    /// With `path`: the file at the branch's tip.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head_text: Option<String>,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct MemberDiffResult {
    pub worktree: WorktreeInfo,
    pub files: Vec<FileDiffView>,
    pub additions: usize,
    pub deletions: usize,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct CommitView {
    pub id: String,
    pub summary: String,
    pub message: String,
    pub author: String,
    /// Seconds since the epoch.
    pub time: i64,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct MemberCommitsResult {
    pub worktree: WorktreeInfo,
    /// Oldest first.
    pub commits: Vec<CommitView>,
}

pub use troupe_engine::LandStrategy;

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LandPartyParams {
    pub party_id: String,
    /// The branch to land on (default: the branch the project has out).
    #[serde(default)]
    pub target: Option<String>,
    #[serde(default)]
    pub strategy: LandStrategy,
    /// A shell command run in the integration worktree; the target moves only if it exits 0.
    #[serde(default)]
    pub test_command: Option<String>,
    /// Seconds the test command may take (default 600).
    #[serde(default)]
    pub test_timeout_secs: Option<u64>,
    /// Integrate and test, but do not move the target.
    #[serde(default)]
    pub dry_run: bool,
}

/// A conflicting file and its hunks (with conflict markers).
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct ConflictFileView {
    pub path: String,
    pub hunks: Vec<String>,
}

/// What happened to one member's branch in a landing.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct MemberLanding {
    pub role: String,
    pub index: i64,
    pub branch: String,
    /// integrated, nothing_to_land, conflict, not_picked, or held_for_person (it changes the
    /// project's `.troupe/`: only the person lands it).
    pub outcome: String,
    pub commits: usize,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conflicts: Vec<ConflictFileView>,
    /// A conflict's member started again to resolve it (its role recovers by restart).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolver_run_id: Option<String>,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct TestRun {
    pub command: String,
    pub passed: bool,
    pub exit_code: Option<i32>,
    /// The last 8 KiB of its output.
    pub output: String,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct LandResult {
    pub party_id: String,
    pub target: String,
    pub strategy: LandStrategy,
    /// Whether the target moved.
    pub landed: bool,
    /// The target's tip before, and the integration branch's tip.
    pub start: String,
    pub tip: String,
    pub integration_branch: String,
    pub integration_dir: Option<String>,
    pub members: Vec<MemberLanding>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test: Option<TestRun>,
    /// What happened, in a sentence.
    pub summary: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReviewVerdict {
    Approve,
    RequestChanges,
    Comment,
}

/// A review comment, on a line of a file or on the whole change.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReviewComment {
    #[serde(default)]
    pub path: Option<String>,
    /// 1-based line in the member's version of the file.
    #[serde(default)]
    pub line: Option<u32>,
    pub text: String,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReviewMemberParams {
    pub party_id: String,
    /// The reviewing member's session (a door fills it in); absent: the person.
    #[serde(default)]
    pub session_id: Option<String>,
    pub role: String,
    #[serde(default)]
    pub index: u32,
    pub verdict: ReviewVerdict,
    #[serde(default)]
    pub comments: Vec<ReviewComment>,
    #[serde(default)]
    pub summary: Option<String>,
    /// If the member has finished, start it again in its checkout with the review as its
    /// prompt (not with approve).
    #[serde(default)]
    pub restart: bool,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct ReviewMemberResult {
    pub party_id: String,
    pub role: String,
    pub index: i64,
    pub verdict: ReviewVerdict,
    /// Whether the member was running and was sent the review.
    pub delivered: bool,
    /// The run that started the finished member again with the review (`restart`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restarted_run_id: Option<String>,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListConflictsParams {
    /// One party (default: every running party of `cwd`'s project, or of every project).
    #[serde(default)]
    pub party_id: Option<String>,
    #[serde(default)]
    pub cwd: Option<String>,
}

/// Lines (1-based, inclusive) of a file, at the fork point, that both sides changed.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub struct ConflictRangeView {
    pub path: String,
    pub start_line: u32,
    pub end_line: u32,
}

/// Two members (or a member and the target) whose work would conflict if landed.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub struct PredictedConflictView {
    pub party_id: String,
    /// The project's checkout, where `ranges` are.
    pub repo_root: String,
    /// `role#index`, or the target branch's name.
    pub a: String,
    pub b: String,
    pub files: Vec<String>,
    pub ranges: Vec<ConflictRangeView>,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct ConflictsResult {
    pub conflicts: Vec<PredictedConflictView>,
}

/// Best of N: the attempt of a role that lands.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PickMemberParams {
    pub party_id: String,
    pub role: String,
    /// The attempt (instance) picked.
    pub index: u32,
    #[serde(default)]
    pub reason: Option<String>,
    /// The judge's (or the leader's) session (a door fills it in); absent: the person.
    #[serde(default)]
    pub session_id: Option<String>,
}

pub use troupe_model::MemberPick;

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct PickResult {
    pub pick: MemberPick,
}

// ---- One inbox: everything that waits for a person -------------------------------------------

#[derive(Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListInboxParams {
    /// Only this project's items (default: every project's).
    #[serde(default)]
    pub project_id: Option<String>,
    /// Only the project of this directory.
    #[serde(default)]
    pub cwd: Option<String>,
}

/// How an inbox item is answered: the operation, the params it takes (to complete with one of
/// `choices` where there are some), and the choices.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct InboxAnswer {
    pub op: String,
    pub params: serde_json::Value,
    /// The field `choices` go in (`decision`, `signal`, `option`, `index`…), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub choice_field: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub choices: Vec<serde_json::Value>,
}

/// One thing waiting for a person, whatever door it came from. Its `item_id` is stable: the
/// same item is the same id until it is answered (or dismissed), then it is gone.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct InboxItem {
    pub item_id: String,
    /// approval, question, paused_role, escalation, decision, pick, merge_conflict.
    pub kind: String,
    pub project_id: Option<String>,
    pub party_id: Option<String>,
    /// The session it waits for, when one asked (a request, a question).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    pub title: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// When it started waiting.
    pub since: String,
    pub answer: InboxAnswer,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct InboxResult {
    pub items: Vec<InboxItem>,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InboxItemParams {
    pub item_id: String,
}
