//! The forge: a party's delivery summary (a pull request's body), its pull request and where
//! that stands, merging it, and the events the forge sends.

use super::*;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One step of the party's committed plan, as delivered.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct DeliveryStep {
    pub step_id: String,
    pub title: String,
    pub owner: String,
    pub state: String,
}

/// One decision the party took, with its ADR.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct DeliveryDecision {
    pub topic: String,
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    /// The ADR's path in the repository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adr_path: Option<String>,
}

/// What one member spent.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct MemberCost {
    pub role: String,
    pub index: i64,
    pub agent: String,
    pub runs: usize,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cost_usd: f64,
}

/// What a party delivered: the request, the plan with each step's owner and state, the
/// decisions with their ADRs, the last test run and each member's cost; `markdown` is the
/// same as a pull request's body.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct DeliverySummary {
    pub party_id: String,
    pub party_name: String,
    /// The task as given (an issue's title for a party started from one).
    pub request: String,
    /// The forge issue it started from (`owner/repo#n`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issue: Option<String>,
    pub steps: Vec<DeliveryStep>,
    pub decisions: Vec<DeliveryDecision>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test: Option<TestRun>,
    pub members: Vec<MemberCost>,
    pub total_cost_usd: f64,
    pub markdown: String,
}

/// A check of the pull request's head.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct CheckView {
    pub name: String,
    /// pending, success or failure.
    pub state: String,
    pub conclusion: String,
}

/// A party's pull request and where it stands.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct PullRequestView {
    pub party_id: String,
    /// `owner/name` on the forge.
    pub repo: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub number: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head_branch: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_branch: Option<String>,
    /// The tip the daemon pushed last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head_sha: Option<String>,
    /// working, open, fixing, ready, merged, closed or gave_up.
    pub state: String,
    /// Rounds of fixes CI failures started, and how many the project allows.
    pub ci_rounds: i64,
    pub max_ci_rounds: i64,
    /// The forge issue the party started from (`owner/repo#n`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issue: Option<String>,
    /// The last failure, error or reason, in a sentence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Who pushed and opened it: the daemon, with the person's forge credential.
    pub pushed_by: String,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MergePullRequestParams {
    pub party_id: String,
}

/// An event from the forge, as its webhook delivers it.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ForgeEventParams {
    /// The event's name (`X-GitHub-Event`: issues, issue_comment, check_run, …).
    pub event: String,
    /// The delivery's id (`X-GitHub-Delivery`); one seen before is refused.
    pub delivery_id: String,
    /// The event's JSON body.
    pub payload: serde_json::Value,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct ForgeEventResult {
    /// started (a party), woke (a pull request's watcher), ignored.
    pub outcome: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub party_id: Option<String>,
    /// Why, in a sentence.
    pub reason: String,
}
