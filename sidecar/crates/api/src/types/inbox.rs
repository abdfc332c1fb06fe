//! One inbox: everything that waits for a person.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

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
    /// approval, question, paused_role, escalation, decision, pick, merge_conflict, schedule.
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
