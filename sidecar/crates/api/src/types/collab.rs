//! The collaboration protocol (seed 004): plans, steps, reviews, decisions, budgets.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

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
