//! Parties: definitions, launching, status, signals, recovery overrides, listings.

use super::*;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

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
    /// An issue of the project's forge repository as the task: `OWNER/REPO#N`, `#N` (the
    /// project's own repository) or its URL. Its title, body and comments become the `task`
    /// input, marked as untrusted text from the forge; the party links back to it.
    #[serde(default)]
    pub issue: Option<String>,
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
