//! Agents: definitions, starting and completing runs, results, logs, pattern runs.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

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
