//! Approvals and questions: permission requests, decisions, rules, `ask_person`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

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
