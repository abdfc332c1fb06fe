//! Troupe's forges: the issues, pull requests, checks and reviews of a hosted repository behind
//! one trait ([`Forge`]), with GitHub's adapter in `github.rs`. The only crate that speaks to a
//! forge's API; it knows no party, no store and no daemon (plain values in and out), and it
//! never pushes (git's own program does, in `troupe-worktree`).
//!
//! A GitLab or Forgejo adapter is a file of its own beside `github.rs` implementing [`Forge`]
//! (docs/forge.md says what each call maps to there).

use std::fmt;

pub mod credential;
mod github;
mod refs;

pub use github::GitHub;
pub use refs::{IssueRef, RepoRef};

/// Who wrote an issue, a comment or a review, as the forge sees them in the repository.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Association {
    Owner,
    Member,
    Collaborator,
    Contributor,
    FirstTimeContributor,
    FirstTimer,
    Mannequin,
    None,
}

impl Association {
    /// Whether the author can write to the repository (only they may start the team).
    pub fn can_write(self) -> bool {
        matches!(self, Self::Owner | Self::Member | Self::Collaborator)
    }

    /// GitHub's `author_association` text; anything unknown is `None`.
    pub fn parse(text: &str) -> Self {
        serde_json::from_value(serde_json::Value::String(text.to_string())).unwrap_or(Self::None)
    }
}

/// What a person may do in a repository: their role there (GitHub's `role_name`, or its older
/// `permission`). Someone who is not a collaborator (or no such account) has `None`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Permission {
    Admin,
    Maintain,
    Write,
    Triage,
    Read,
    None,
}

impl Permission {
    /// Whether they can write to the repository (push, merge, label): admin, maintain or write.
    pub fn can_write(self) -> bool {
        matches!(self, Self::Admin | Self::Maintain | Self::Write)
    }

    /// One of the forge's role words (`admin`, `maintain`, `write`, `triage`, `read`, `none`;
    /// any case), or `None` for anything else (a custom role's name).
    pub fn parse(text: &str) -> Option<Self> {
        Some(match text.trim().to_ascii_lowercase().as_str() {
            "admin" => Self::Admin,
            "maintain" => Self::Maintain,
            "write" => Self::Write,
            "triage" => Self::Triage,
            "read" => Self::Read,
            "none" => Self::None,
            _ => return Option::None,
        })
    }

    /// Its word (`admin`, …, `none`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Admin => "admin",
            Self::Maintain => "maintain",
            Self::Write => "write",
            Self::Triage => "triage",
            Self::Read => "read",
            Self::None => "none",
        }
    }
}

impl fmt::Display for Permission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An issue (or, on GitHub, a pull request seen through the issues API: `is_pull`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Issue {
    pub number: u64,
    pub title: String,
    pub body: String,
    /// open or closed.
    pub state: String,
    pub labels: Vec<String>,
    pub author: String,
    pub association: Association,
    pub url: String,
    pub is_pull: bool,
    pub updated_at: String,
}

/// A comment on an issue or a pull request's conversation.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Comment {
    pub id: u64,
    /// The issue (or pull request) it is on.
    pub issue_number: u64,
    pub author: String,
    pub association: Association,
    pub body: String,
    pub url: String,
    pub created_at: String,
    pub updated_at: String,
}

/// A pull request.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PullRequest {
    pub number: u64,
    pub url: String,
    /// open or closed.
    pub state: String,
    pub merged: bool,
    pub draft: bool,
    pub head_ref: String,
    pub head_sha: String,
    pub base_ref: String,
    /// What the forge computed, when it has (None: not yet known).
    pub mergeable: Option<bool>,
}

/// A pull request to open.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct NewPull {
    /// The branch with the work (in the same repository).
    pub head: String,
    /// The branch it is to merge into.
    pub base: String,
    pub title: String,
    pub body: String,
    pub draft: bool,
}

/// Where a check stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckState {
    Pending,
    Success,
    /// Failed, errored, cancelled, timed out or needing action: the work is not green.
    Failure,
}

/// A check run (GitHub Actions and apps) or a commit status (older CI), made one shape.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Check {
    pub name: String,
    /// check_run or status.
    pub kind: String,
    /// The check run's id (None for a status).
    pub id: Option<u64>,
    pub state: CheckState,
    /// The forge's own word (failure, timed_out, error, …).
    pub conclusion: String,
    /// The failure text: the run's title, summary and text, or the status's description
    /// (bounded by the adapter).
    pub text: String,
    pub url: Option<String>,
    /// Lines the check points at (a failed check run's annotations).
    pub annotations: Vec<Annotation>,
}

/// A check's note on a line of a file.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Annotation {
    pub path: String,
    pub start_line: u32,
    pub end_line: u32,
    /// notice, warning or failure.
    pub level: String,
    pub message: String,
}

/// A review's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReviewState {
    Approved,
    ChangesRequested,
    Commented,
    Dismissed,
    Pending,
}

/// A submitted review of a pull request.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Review {
    pub id: u64,
    pub author: String,
    pub association: Association,
    pub state: ReviewState,
    pub body: String,
    /// The head it reviewed.
    pub commit_id: String,
    pub submitted_at: String,
}

/// A review comment on a line of a pull request's diff.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LineComment {
    pub id: u64,
    pub author: String,
    pub association: Association,
    pub path: String,
    /// The line in the pull request's version of the file (None: on a line no longer there).
    pub line: Option<u32>,
    pub body: String,
    pub commit_id: String,
    pub created_at: String,
    pub url: String,
    pub in_reply_to: Option<u64>,
}

/// How a pull request is merged.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MergeMethod {
    #[default]
    Merge,
    Squash,
    Rebase,
}

/// A merge's answer.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Merged {
    pub merged: bool,
    pub sha: String,
    pub message: String,
}

/// A conditional read's answer: changed (with the validator to send next time), or not.
#[derive(Debug, Clone, PartialEq)]
pub enum Polled<T> {
    Changed { items: T, etag: Option<String> },
    NotModified,
}

/// Why a forge call failed. `retryable` says whether trying again later may help.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ForgeError {
    /// Rate limited (a 403 or 429 with the limit spent, or a secondary limit): try again after.
    #[error("the forge's rate limit is spent: {message} (again in {retry_after_secs} s)")]
    RateLimited {
        retry_after_secs: u64,
        message: String,
    },
    /// The forge failed (5xx).
    #[error("the forge failed ({status}): {message}")]
    Server { status: u16, message: String },
    /// No answer in time.
    #[error("the forge did not answer in time: {0}")]
    Timeout(String),
    /// Could not reach it (connection refused, TLS, DNS).
    #[error("the forge could not be reached: {0}")]
    Transport(String),
    /// The thing asked for is not there (or the credential may not see it).
    #[error("not found on the forge: {0}")]
    NotFound(String),
    /// The forge refused the request (4xx other than the above): it names why.
    #[error("the forge refused the request ({status}): {message}")]
    Refused { status: u16, message: String },
    /// The credential was refused (401) or is missing.
    #[error("the forge credential is missing or refused: {0}")]
    Credential(String),
    /// The answer was not what the API describes.
    #[error("the forge's answer could not be read: {0}")]
    BadAnswer(String),
}

impl ForgeError {
    /// Whether the same call may succeed later (rate limits, server errors, timeouts, network).
    pub fn retryable(&self) -> bool {
        matches!(
            self,
            Self::RateLimited { .. } | Self::Server { .. } | Self::Timeout(_) | Self::Transport(_)
        )
    }

    /// How long to wait before trying again, at least (a rate limit says; else None).
    pub fn retry_after_secs(&self) -> Option<u64> {
        match self {
            Self::RateLimited {
                retry_after_secs, ..
            } => Some(*retry_after_secs),
            _ => None,
        }
    }
}

/// The person's forge credential. Its `Debug` never shows it.
#[derive(Clone)]
pub struct Token(String);

impl Token {
    pub fn new(secret: impl Into<String>) -> Self {
        Self(secret.into())
    }

    /// The secret itself, for the one header or git config value that carries it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(…)")
    }
}

/// A forge: what Troupe asks of it. Every call is one logical request (an adapter may page);
/// errors are typed so the caller can back off and retry ([`ForgeError::retryable`]).
#[async_trait::async_trait]
pub trait Forge: Send + Sync + fmt::Debug {
    /// The forge's kind (`github`).
    fn kind(&self) -> &'static str;
    /// The web host repositories live on (`github.com`): a remote URL on it is this forge's.
    fn web_host(&self) -> &str;
    /// How many HTTP requests this forge has sent (for the figures).
    fn requests_sent(&self) -> u64;
    /// How many of those were answered "not modified" (a conditional request whose validator
    /// still held: GitHub does not count them against its rate limit), for the figures. An
    /// adapter that sends no conditional requests has none.
    fn requests_not_modified(&self) -> u64 {
        0
    }

    async fn issue(&self, repo: &RepoRef, number: u64) -> Result<Issue, ForgeError>;
    /// An issue's comments, oldest first.
    async fn issue_comments(&self, repo: &RepoRef, number: u64)
    -> Result<Vec<Comment>, ForgeError>;
    /// Comment on an issue or a pull request's conversation.
    async fn comment(&self, repo: &RepoRef, number: u64, body: &str)
    -> Result<Comment, ForgeError>;
    async fn open_pull(&self, repo: &RepoRef, pull: &NewPull) -> Result<PullRequest, ForgeError>;
    /// The open pull request from `head` (a branch of the same repository), if there is one.
    async fn find_open_pull(
        &self,
        repo: &RepoRef,
        head: &str,
    ) -> Result<Option<PullRequest>, ForgeError>;
    async fn update_pull_body(
        &self,
        repo: &RepoRef,
        number: u64,
        body: &str,
    ) -> Result<PullRequest, ForgeError>;
    async fn pull(&self, repo: &RepoRef, number: u64) -> Result<PullRequest, ForgeError>;
    /// Every check of a commit: its check runs (with a failed run's annotations) and its
    /// commit statuses (the latest per context).
    async fn checks(&self, repo: &RepoRef, sha: &str) -> Result<Vec<Check>, ForgeError>;
    /// A pull request's submitted reviews, oldest first.
    async fn reviews(&self, repo: &RepoRef, number: u64) -> Result<Vec<Review>, ForgeError>;
    /// A pull request's review comments on lines, oldest first.
    async fn line_comments(
        &self,
        repo: &RepoRef,
        number: u64,
    ) -> Result<Vec<LineComment>, ForgeError>;
    /// Merge a pull request, only if its head is still `sha`.
    async fn merge(
        &self,
        repo: &RepoRef,
        number: u64,
        sha: &str,
        method: MergeMethod,
    ) -> Result<Merged, ForgeError>;
    /// Open issues carrying `label`, newest first (one page), unless unchanged since `etag`.
    async fn poll_labeled(
        &self,
        repo: &RepoRef,
        label: &str,
        etag: Option<&str>,
    ) -> Result<Polled<Vec<Issue>>, ForgeError>;
    /// The repository's issue comments updated since `since` (an ISO 8601 time), oldest
    /// first (one page), unless unchanged since `etag`.
    async fn poll_comments(
        &self,
        repo: &RepoRef,
        since: Option<&str>,
        etag: Option<&str>,
    ) -> Result<Polled<Vec<Comment>>, ForgeError>;
    /// What `login` may do in the repository. Someone the forge does not know as a
    /// collaborator (or no such account) is [`Permission::None`], not an error. An adapter may
    /// remember the answer for a while (GitHub's: ten minutes).
    async fn permission(&self, repo: &RepoRef, login: &str) -> Result<Permission, ForgeError>;
    /// Who last applied `label` (any case) to issue or pull request `number`, from its events
    /// (an adapter may read only the first few hundred); `None` when it never was.
    async fn labeled_by(
        &self,
        repo: &RepoRef,
        number: u64,
        label: &str,
    ) -> Result<Option<String>, ForgeError>;
}

#[cfg(test)]
mod tests;
