//! Landing the work: worktrees, diffs, review, the merge queue, best-of-N picks, the conflict radar.

use super::*;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

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

pub use troupe_engine::{LandStrategy, LandTo};

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
    /// `pull_request`: push the tested integration to the project's forge and open (or
    /// update) the party's pull request on the target instead of moving it.
    #[serde(default, skip_serializing_if = "LandTo::is_branch")]
    pub to: LandTo,
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
    /// Delivered as a pull request (`to: pull_request`): where it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_request: Option<PullRequestView>,
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
