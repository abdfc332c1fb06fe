//! GitHub's JSON bodies as the adapter reads them, and their conversion to the forge's plain
//! types. Only the fields Troupe uses are read; every one but an item's id or number may be
//! missing or null (GitHub leaves some out of list answers, and a deleted user is null).

use serde::{Deserialize, Deserializer};

use crate::{
    Annotation, Association, Check, CheckState, Comment, Issue, LineComment, Merged, Permission,
    PullRequest, Review, ReviewState,
};

/// A check's text is bounded to this many bytes.
pub(crate) const CHECK_TEXT_MAX: usize = 16 * 1024;

/// A missing or null field as its type's default.
fn nullable<'de, D: Deserializer<'de>, T: Default + Deserialize<'de>>(d: D) -> Result<T, D::Error> {
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

#[derive(Deserialize, Default)]
pub(crate) struct User {
    #[serde(default, deserialize_with = "nullable")]
    login: String,
}

/// The login of an author (GitHub shows a deleted account as `ghost`).
fn login(user: Option<User>) -> String {
    user.map(|u| u.login)
        .filter(|l| !l.is_empty())
        .unwrap_or_else(|| "ghost".to_string())
}

fn association(text: Option<String>) -> Association {
    text.as_deref()
        .map_or(Association::None, Association::parse)
}

#[derive(Deserialize)]
#[serde(untagged)]
pub(crate) enum Label {
    Name(String),
    Object {
        #[serde(default)]
        name: Option<String>,
    },
}

#[derive(Deserialize)]
pub(crate) struct IssueJson {
    number: u64,
    #[serde(default, deserialize_with = "nullable")]
    title: String,
    #[serde(default, deserialize_with = "nullable")]
    body: String,
    #[serde(default, deserialize_with = "nullable")]
    state: String,
    #[serde(default, deserialize_with = "nullable")]
    labels: Vec<Label>,
    #[serde(default)]
    user: Option<User>,
    #[serde(default)]
    author_association: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    html_url: String,
    /// Present (not null) when the issue is a pull request.
    #[serde(default)]
    pull_request: Option<serde::de::IgnoredAny>,
    #[serde(default, deserialize_with = "nullable")]
    updated_at: String,
}

impl From<IssueJson> for Issue {
    fn from(j: IssueJson) -> Self {
        Issue {
            number: j.number,
            title: j.title,
            body: j.body,
            state: j.state,
            labels: j
                .labels
                .into_iter()
                .filter_map(|l| match l {
                    Label::Name(name) => Some(name),
                    Label::Object { name } => name,
                })
                .collect(),
            author: login(j.user),
            association: association(j.author_association),
            url: j.html_url,
            is_pull: j.pull_request.is_some(),
            updated_at: j.updated_at,
        }
    }
}

#[derive(Deserialize)]
pub(crate) struct CommentJson {
    id: u64,
    #[serde(default)]
    user: Option<User>,
    #[serde(default)]
    author_association: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    body: String,
    #[serde(default, deserialize_with = "nullable")]
    html_url: String,
    #[serde(default, deserialize_with = "nullable")]
    issue_url: String,
    #[serde(default, deserialize_with = "nullable")]
    created_at: String,
    #[serde(default, deserialize_with = "nullable")]
    updated_at: String,
}

impl CommentJson {
    /// The comment, on the issue its `issue_url` ends with (else on `issue`, when known).
    pub(crate) fn into_comment(self, issue: Option<u64>) -> Comment {
        let from_url = self
            .issue_url
            .rsplit('/')
            .next()
            .and_then(|n| n.parse::<u64>().ok());
        Comment {
            id: self.id,
            issue_number: from_url.or(issue).unwrap_or(0),
            author: login(self.user),
            association: association(self.author_association),
            body: self.body,
            url: self.html_url,
            created_at: self.created_at,
            updated_at: self.updated_at,
        }
    }
}

#[derive(Deserialize, Default)]
pub(crate) struct BranchJson {
    #[serde(rename = "ref", default, deserialize_with = "nullable")]
    name: String,
    #[serde(default, deserialize_with = "nullable")]
    sha: String,
}

#[derive(Deserialize)]
pub(crate) struct PullJson {
    number: u64,
    #[serde(default, deserialize_with = "nullable")]
    html_url: String,
    #[serde(default, deserialize_with = "nullable")]
    state: String,
    /// Only in a single pull request's answer; a list has `merged_at` alone.
    #[serde(default)]
    merged: Option<bool>,
    #[serde(default)]
    merged_at: Option<String>,
    #[serde(default)]
    draft: Option<bool>,
    #[serde(default, deserialize_with = "nullable")]
    head: BranchJson,
    #[serde(default, deserialize_with = "nullable")]
    base: BranchJson,
    #[serde(default)]
    mergeable: Option<bool>,
}

impl From<PullJson> for PullRequest {
    fn from(j: PullJson) -> Self {
        PullRequest {
            number: j.number,
            url: j.html_url,
            state: j.state,
            merged: j.merged.unwrap_or(j.merged_at.is_some()),
            draft: j.draft.unwrap_or(false),
            head_ref: j.head.name,
            head_sha: j.head.sha,
            base_ref: j.base.name,
            mergeable: j.mergeable,
        }
    }
}

#[derive(Deserialize)]
pub(crate) struct CheckRunsJson {
    #[serde(default, deserialize_with = "nullable")]
    pub(crate) check_runs: Vec<CheckRunJson>,
}

#[derive(Deserialize, Default)]
pub(crate) struct OutputJson {
    #[serde(default)]
    title: Option<String>,
    #[serde(default)]
    summary: Option<String>,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    annotations_count: Option<u64>,
}

#[derive(Deserialize)]
pub(crate) struct CheckRunJson {
    pub(crate) id: u64,
    #[serde(default, deserialize_with = "nullable")]
    name: String,
    #[serde(default, deserialize_with = "nullable")]
    status: String,
    #[serde(default)]
    conclusion: Option<String>,
    #[serde(default)]
    html_url: Option<String>,
    #[serde(default)]
    details_url: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    output: OutputJson,
}

/// Where a check run stands: queued or in progress is pending; a completed run is green only
/// when it succeeded, was neutral or was skipped (failure, timed_out, cancelled,
/// action_required, startup_failure, stale and anything new are not).
pub(crate) fn check_run_state(status: &str, conclusion: Option<&str>) -> CheckState {
    if status != "completed" {
        return CheckState::Pending;
    }
    match conclusion {
        None => CheckState::Pending,
        Some("success" | "neutral" | "skipped") => CheckState::Success,
        Some(_) => CheckState::Failure,
    }
}

/// Where a commit status stands (pending, success, failure or error).
pub(crate) fn status_state(state: &str) -> CheckState {
    match state {
        "success" => CheckState::Success,
        "pending" => CheckState::Pending,
        _ => CheckState::Failure,
    }
}

impl CheckRunJson {
    pub(crate) fn state(&self) -> CheckState {
        check_run_state(&self.status, self.conclusion.as_deref())
    }

    /// Whether its annotations are worth asking for: it failed and may have some.
    pub(crate) fn wants_annotations(&self) -> bool {
        self.state() == CheckState::Failure && self.output.annotations_count != Some(0)
    }

    pub(crate) fn into_check(self, annotations: Vec<Annotation>) -> Check {
        let state = self.state();
        let text = [self.output.title, self.output.summary, self.output.text]
            .into_iter()
            .flatten()
            .filter(|t| !t.trim().is_empty())
            .collect::<Vec<_>>()
            .join("\n\n");
        Check {
            name: self.name,
            kind: "check_run".to_string(),
            id: Some(self.id),
            state,
            conclusion: self.conclusion.unwrap_or(self.status),
            text: super::answer::bounded(text, CHECK_TEXT_MAX),
            url: self.html_url.or(self.details_url),
            annotations,
        }
    }
}

#[derive(Deserialize)]
pub(crate) struct AnnotationJson {
    #[serde(default, deserialize_with = "nullable")]
    path: String,
    #[serde(default, deserialize_with = "nullable")]
    start_line: u32,
    #[serde(default, deserialize_with = "nullable")]
    end_line: u32,
    #[serde(default, deserialize_with = "nullable")]
    annotation_level: String,
    #[serde(default, deserialize_with = "nullable")]
    title: String,
    #[serde(default, deserialize_with = "nullable")]
    message: String,
}

impl From<AnnotationJson> for Annotation {
    fn from(j: AnnotationJson) -> Self {
        let message = if j.title.is_empty() || j.message.contains(&j.title) {
            j.message
        } else {
            format!("{}: {}", j.title, j.message)
        };
        Annotation {
            path: j.path,
            start_line: j.start_line,
            end_line: j.end_line.max(j.start_line),
            level: j.annotation_level,
            message: super::answer::bounded(message, CHECK_TEXT_MAX),
        }
    }
}

#[derive(Deserialize)]
pub(crate) struct CombinedStatusJson {
    #[serde(default, deserialize_with = "nullable")]
    statuses: Vec<StatusJson>,
}

#[derive(Deserialize)]
pub(crate) struct StatusJson {
    #[serde(default, deserialize_with = "nullable")]
    context: String,
    #[serde(default, deserialize_with = "nullable")]
    state: String,
    #[serde(default, deserialize_with = "nullable")]
    description: String,
    #[serde(default)]
    target_url: Option<String>,
}

impl CombinedStatusJson {
    /// Its statuses (the latest per context: the first seen of each, as GitHub orders them).
    pub(crate) fn into_checks(self) -> Vec<Check> {
        let mut seen = std::collections::HashSet::new();
        self.statuses
            .into_iter()
            .filter(|s| seen.insert(s.context.clone()))
            .map(|s| Check {
                state: status_state(&s.state),
                name: s.context,
                kind: "status".to_string(),
                id: None,
                conclusion: s.state,
                text: super::answer::bounded(s.description, CHECK_TEXT_MAX),
                url: s.target_url.filter(|u| !u.is_empty()),
                annotations: Vec::new(),
            })
            .collect()
    }
}

#[derive(Deserialize)]
pub(crate) struct ReviewJson {
    id: u64,
    #[serde(default)]
    user: Option<User>,
    #[serde(default)]
    author_association: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    state: String,
    #[serde(default, deserialize_with = "nullable")]
    body: String,
    #[serde(default, deserialize_with = "nullable")]
    commit_id: String,
    #[serde(default, deserialize_with = "nullable")]
    submitted_at: String,
}

pub(crate) fn review_state(state: &str) -> ReviewState {
    match state {
        "APPROVED" => ReviewState::Approved,
        "CHANGES_REQUESTED" => ReviewState::ChangesRequested,
        "DISMISSED" => ReviewState::Dismissed,
        "PENDING" => ReviewState::Pending,
        _ => ReviewState::Commented,
    }
}

impl From<ReviewJson> for Review {
    fn from(j: ReviewJson) -> Self {
        Review {
            id: j.id,
            author: login(j.user),
            association: association(j.author_association),
            state: review_state(&j.state),
            body: j.body,
            commit_id: j.commit_id,
            submitted_at: j.submitted_at,
        }
    }
}

#[derive(Deserialize)]
pub(crate) struct LineCommentJson {
    id: u64,
    #[serde(default)]
    user: Option<User>,
    #[serde(default)]
    author_association: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    path: String,
    #[serde(default)]
    line: Option<u32>,
    #[serde(default)]
    original_line: Option<u32>,
    #[serde(default, deserialize_with = "nullable")]
    body: String,
    #[serde(default, deserialize_with = "nullable")]
    commit_id: String,
    #[serde(default, deserialize_with = "nullable")]
    created_at: String,
    #[serde(default, deserialize_with = "nullable")]
    html_url: String,
    #[serde(default)]
    in_reply_to_id: Option<u64>,
}

impl From<LineCommentJson> for LineComment {
    fn from(j: LineCommentJson) -> Self {
        LineComment {
            id: j.id,
            author: login(j.user),
            association: association(j.author_association),
            path: j.path,
            line: j.line.or(j.original_line),
            body: j.body,
            commit_id: j.commit_id,
            created_at: j.created_at,
            url: j.html_url,
            in_reply_to: j.in_reply_to_id,
        }
    }
}

#[derive(Deserialize)]
pub(crate) struct MergedJson {
    #[serde(default, deserialize_with = "nullable")]
    merged: bool,
    #[serde(default, deserialize_with = "nullable")]
    sha: String,
    #[serde(default, deserialize_with = "nullable")]
    message: String,
}

impl From<MergedJson> for Merged {
    fn from(j: MergedJson) -> Self {
        Merged {
            merged: j.merged,
            sha: j.sha,
            message: j.message,
        }
    }
}

/// `GET /repos/{owner}/{repo}/collaborators/{username}/permission`'s answer.
#[derive(Deserialize)]
pub(crate) struct PermissionJson {
    /// The older word: admin, write, read or none (maintain shows as write, triage as read).
    #[serde(default, deserialize_with = "nullable")]
    permission: String,
    /// The role itself (admin, maintain, write, triage, read, or a custom role's name).
    #[serde(default)]
    role_name: Option<String>,
}

impl PermissionJson {
    /// The role when it is one of GitHub's own; else (a custom role) the older word, which
    /// names the role it is based on; anything else is none.
    pub(crate) fn permission(&self) -> Permission {
        self.role_name
            .as_deref()
            .and_then(Permission::parse)
            .or_else(|| Permission::parse(&self.permission))
            .unwrap_or(Permission::None)
    }
}

#[derive(Deserialize, Default)]
pub(crate) struct EventLabelJson {
    #[serde(default, deserialize_with = "nullable")]
    name: String,
}

/// One of an issue's events (`GET …/issues/{n}/events`); only a `labeled` one's label is read.
#[derive(Deserialize)]
pub(crate) struct IssueEventJson {
    #[serde(default, deserialize_with = "nullable")]
    event: String,
    #[serde(default)]
    actor: Option<User>,
    #[serde(default)]
    label: Option<EventLabelJson>,
}

/// Who applied `label` (any case) last among `events` (oldest first), if anyone did.
pub(crate) fn last_labeled_by(events: Vec<IssueEventJson>, label: &str) -> Option<String> {
    let wanted = label.trim().to_lowercase();
    events
        .into_iter()
        .rev()
        .find(|e| {
            e.event == "labeled"
                && e.label
                    .as_ref()
                    .is_some_and(|l| l.name.trim().to_lowercase() == wanted)
        })
        .map(|e| login(e.actor))
}
