//! Schedules that start parties (`[schedules.<name>]` of a project's `.troupe/config.toml`):
//! listing them with their state, pausing, resuming and running one now.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListSchedulesParams {
    /// Only this project's schedules (default: every project's).
    #[serde(default)]
    pub project_id: Option<String>,
    /// Only the project of this directory (its config is read now).
    #[serde(default)]
    pub cwd: Option<String>,
}

/// One schedule, named by its project (`project_id`, or the project of `cwd`) and its name.
#[derive(Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScheduleParams {
    /// The schedule's name (`[schedules.<name>]`).
    pub name: String,
    #[serde(default)]
    pub project_id: Option<String>,
    /// A directory of the schedule's project.
    #[serde(default)]
    pub cwd: Option<String>,
}

/// A schedule and its state. Times are UTC (RFC 3339).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct ScheduleView {
    pub project_id: String,
    /// The project's root directory.
    pub project_root: String,
    pub name: String,
    /// The cron expression (5 fields, or `@hourly`, `@daily`…), evaluated in UTC.
    pub cron: String,
    /// The party definition it launches.
    pub party: String,
    /// Handed to the party as `inputs.task`.
    pub task: String,
    /// `once` (the due times missed while the daemon was down run once, at start) or `skip`
    /// (none of them run).
    pub missed: String,
    pub paused: bool,
    /// When it fires next; none while paused or broken.
    #[serde(default)]
    pub next_due_at: Option<String>,
    /// Why it cannot fire (a bad cron, an unknown party, an unreadable config), if so.
    #[serde(default)]
    pub error: Option<String>,
    /// The due time its cron last fired for.
    #[serde(default)]
    pub last_due_at: Option<String>,
    /// When it last fired (by its cron or by a person).
    #[serde(default)]
    pub last_run_at: Option<String>,
    /// The party its last fire launched.
    #[serde(default)]
    pub last_party_id: Option<String>,
    /// Why its last launch failed.
    #[serde(default)]
    pub last_error: Option<String>,
    /// A fire is committed and its party being launched.
    pub launching: bool,
    /// When it was last paused, resumed or added.
    pub state_at: String,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct SchedulesResult {
    pub schedules: Vec<ScheduleView>,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct ScheduleResult {
    pub schedule: ScheduleView,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
pub struct RunScheduleNowResult {
    /// The party launched.
    pub party_id: String,
    pub schedule: ScheduleView,
}
