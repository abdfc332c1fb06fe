//! Agent CLI hooks (Claude Code's `PreToolUse` and the like).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

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
