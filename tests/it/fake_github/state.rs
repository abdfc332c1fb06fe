//! The fake GitHub's repositories in memory (issues and pull requests sharing their numbers,
//! comments, check runs, commit statuses, reviews) and its answers to the operations it
//! implements, each body built from the description's own example for that operation and
//! patched with the state's values.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::{Value, json};

use super::bare;
use super::spec::{Op, spec};
use super::{Annotation, LOGIN, LOGIN_ASSOCIATION};

/// An answer: status, JSON body (none for 204) and extra headers.
pub struct Answer {
    pub status: u16,
    pub body: Option<Value>,
    pub headers: Vec<(String, String)>,
    /// Set when the fake had no real answer (an operation it does not implement).
    pub problem: Option<String>,
    /// A problem with a request the description allows but GitHub does not do what the client
    /// likely meant with (answered all the same).
    pub note: Option<String>,
}

impl Answer {
    fn ok(status: u16, body: Value) -> Answer {
        Answer {
            status,
            body: Some(body),
            headers: Vec::new(),
            problem: None,
            note: None,
        }
    }

    fn with_header(mut self, name: &str, value: String) -> Answer {
        self.headers.push((name.to_owned(), value));
        self
    }
}

/// GitHub's error body: `message`, `documentation_url` and `status` (a string, as GitHub sends
/// it).
pub fn error(status: u16, message: &str, docs: &str) -> Answer {
    Answer::ok(
        status,
        json!({ "message": message, "documentation_url": docs, "status": status.to_string() }),
    )
}

/// GitHub's 422 `Validation Failed` with its `errors`.
fn validation_failed(docs: &str, errors: Value) -> Answer {
    Answer::ok(
        422,
        json!({
            "message": "Validation Failed",
            "errors": errors,
            "documentation_url": docs,
            "status": "422",
        }),
    )
}

pub struct Repo {
    pub owner: String,
    pub name: String,
    pub id: u64,
    pub bare: Option<PathBuf>,
    pub default_branch: String,
    next_number: u64,
    pub issues: BTreeMap<u64, Issue>,
    pub comments: Vec<Comment>,
    pub check_runs: Vec<CheckRun>,
    pub statuses: Vec<CommitStatus>,
    pub created_at: u64,
    /// Issue events (labeled, unlabeled), oldest first.
    pub events: Vec<IssueEvent>,
    /// Permissions set by the test, by lowercased login (`admin` … `none`).
    pub permissions: BTreeMap<String, String>,
    /// The `author_association` each login was last given (issues, comments, reviews), by
    /// lowercased login: what its permission is when none was set.
    pub associations: BTreeMap<String, String>,
}

/// One of an issue's events.
pub struct IssueEvent {
    pub id: u64,
    pub issue: u64,
    pub actor: String,
    /// `labeled` or `unlabeled`.
    pub event: String,
    pub label: String,
    pub created_at: u64,
}

/// The roles `set_permission` takes.
pub const PERMISSIONS: [&str; 6] = ["admin", "maintain", "write", "triage", "read", "none"];

pub struct Issue {
    pub number: u64,
    pub id: u64,
    pub title: String,
    pub body: Option<String>,
    pub labels: Vec<String>,
    pub user: String,
    pub association: String,
    pub state: String,
    pub state_reason: Option<String>,
    pub closed_by: Option<String>,
    pub created_at: u64,
    pub updated_at: u64,
    pub closed_at: Option<u64>,
    pub pull: Option<Pull>,
}

pub struct Pull {
    pub id: u64,
    pub head: String,
    pub base: String,
    pub draft: bool,
    pub maintainer_can_modify: bool,
    pub merged_at: Option<u64>,
    pub merge_commit_sha: Option<String>,
    pub merged_by: Option<String>,
    /// Set by the test; `None`: computed from the bare repository (true without one).
    pub mergeable: Option<bool>,
    /// The head and base commits last seen (what is answered once a branch is gone).
    pub head_sha: String,
    pub base_sha: String,
    pub reviews: Vec<Review>,
    pub review_comments: Vec<ReviewComment>,
}

pub struct Comment {
    pub id: u64,
    pub issue: u64,
    pub user: String,
    pub association: String,
    pub body: String,
    pub created_at: u64,
    pub updated_at: u64,
}

pub struct CheckRun {
    pub id: u64,
    pub head_sha: String,
    pub name: String,
    pub status: String,
    pub conclusion: Option<String>,
    pub title: String,
    pub summary: String,
    pub text: String,
    pub annotations: Vec<Annotation>,
    pub started_at: u64,
    pub completed_at: Option<u64>,
}

pub struct CommitStatus {
    pub id: u64,
    pub sha: String,
    pub context: String,
    pub state: String,
    pub description: String,
    pub created_at: u64,
    pub updated_at: u64,
}

pub struct Review {
    pub id: u64,
    pub user: String,
    pub association: String,
    pub state: String,
    pub body: String,
    pub commit_id: String,
    pub submitted_at: u64,
}

pub struct ReviewComment {
    pub id: u64,
    pub review_id: u64,
    pub user: String,
    pub association: String,
    pub path: String,
    pub line: u32,
    pub body: String,
    pub commit_id: String,
    pub created_at: u64,
    pub updated_at: u64,
}

impl Repo {
    pub fn full(&self) -> String {
        format!("{}/{}", self.owner, self.name)
    }

    fn api(&self) -> String {
        format!("https://api.github.com/repos/{}", self.full())
    }

    fn web(&self) -> String {
        format!("https://github.com/{}", self.full())
    }

    /// A branch's head commit: from the bare repository, or made up from its name without one.
    pub fn branch_sha(&self, branch: &str) -> Option<String> {
        match &self.bare {
            Some(bare) => bare::rev_parse(bare, &format!("refs/heads/{branch}")),
            None => Some(fake_sha(&format!("{}:{branch}", self.full()))),
        }
    }

    /// Remembers the association `login` was last seen with.
    pub fn note_association(&mut self, login: &str, association: &str) {
        self.associations
            .insert(login.to_lowercase(), association.to_owned());
    }

    /// `login`'s role: the one set, else the repository's owner's (admin), else [`LOGIN`]'s
    /// (write, as a collaborator), else from the association it was last seen with (OWNER:
    /// admin; MEMBER, COLLABORATOR: write); `None` for anyone else (GitHub's 404 for someone
    /// who is not a collaborator).
    pub fn permission_of(&self, login: &str) -> Option<String> {
        let key = login.to_lowercase();
        if let Some(set) = self.permissions.get(&key) {
            return Some(set.clone());
        }
        if login.eq_ignore_ascii_case(&self.owner) {
            return Some("admin".to_owned());
        }
        if login.eq_ignore_ascii_case(LOGIN) {
            return Some("write".to_owned());
        }
        match self.associations.get(&key).map(String::as_str) {
            Some("OWNER") => Some("admin".to_owned()),
            Some("MEMBER" | "COLLABORATOR") => Some("write".to_owned()),
            _ => None,
        }
    }

    /// The commit a ref names (`sha`, `branch`, `heads/branch`, `tags/v1`).
    pub fn resolve_ref(&self, reference: &str) -> Option<String> {
        match &self.bare {
            Some(bare) => bare::rev_parse(bare, reference)
                .or_else(|| bare::rev_parse(bare, &format!("refs/{reference}"))),
            None if is_sha(reference) => Some(reference.to_owned()),
            None => self.branch_sha(reference.trim_start_matches("heads/")),
        }
    }
}

/// Everything the fake knows.
pub struct State {
    pub repos: Vec<Repo>,
    next_id: u64,
}

impl Default for State {
    fn default() -> Self {
        State::new()
    }
}

/// Ids start above `i32::MAX`, as GitHub's comment and check-run ids do: a client keeping them
/// in 32 bits fails at once.
const FIRST_ID: u64 = 3_000_000_000;

impl State {
    pub fn new() -> State {
        State {
            repos: Vec::new(),
            next_id: FIRST_ID,
        }
    }

    pub fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    pub fn add_repo(&mut self, full: &str, bare: Option<PathBuf>) {
        let (owner, name) = full
            .split_once('/')
            .unwrap_or_else(|| panic!("fake GitHub: a repository is owner/name, not {full:?}"));
        let default_branch = bare
            .as_deref()
            .and_then(bare::default_branch)
            .unwrap_or_else(|| "main".to_owned());
        let id = 700_000_000 + self.repos.len() as u64 + 1;
        self.repos.retain(|r| !r.full().eq_ignore_ascii_case(full));
        self.repos.push(Repo {
            owner: owner.to_owned(),
            name: name.to_owned(),
            id,
            bare,
            default_branch,
            next_number: 1,
            issues: BTreeMap::new(),
            comments: Vec::new(),
            check_runs: Vec::new(),
            statuses: Vec::new(),
            created_at: now(),
            events: Vec::new(),
            permissions: BTreeMap::new(),
            associations: BTreeMap::new(),
        });
    }

    pub fn repo(&self, full: &str) -> Option<&Repo> {
        self.repos
            .iter()
            .find(|r| r.full().eq_ignore_ascii_case(full))
    }

    pub fn repo_mut(&mut self, full: &str) -> &mut Repo {
        self.repos
            .iter_mut()
            .find(|r| r.full().eq_ignore_ascii_case(full))
            .unwrap_or_else(|| panic!("fake GitHub: no repository {full}: call add_repo first"))
    }

    /// `/repositories/{id}/rest` (where GitHub's `Link` headers point) as
    /// `/repos/{owner}/{repo}/rest`.
    pub fn unalias(&self, path: &str) -> Option<String> {
        let rest = path.strip_prefix("/repositories/")?;
        let (id, rest) = rest.split_once('/').unwrap_or((rest, ""));
        let repo = self.repos.iter().find(|r| r.id.to_string() == id)?;
        Some(
            format!("/repos/{}/{rest}", repo.full())
                .trim_end_matches('/')
                .to_owned(),
        )
    }

    pub fn add_issue(
        &mut self,
        full: &str,
        title: &str,
        body: Option<&str>,
        labels: &[String],
        user: &str,
        association: &str,
    ) -> u64 {
        let id = self.next_id();
        let event_ids: Vec<u64> = labels.iter().map(|_| self.next_id()).collect();
        let repo = self.repo_mut(full);
        let number = repo.next_number;
        repo.next_number += 1;
        let at = now();
        repo.note_association(user, association);
        // GitHub records the labels an issue is opened with as `labeled` by its author.
        for (event_id, label) in event_ids.into_iter().zip(labels) {
            repo.events.push(IssueEvent {
                id: event_id,
                issue: number,
                actor: user.to_owned(),
                event: "labeled".to_owned(),
                label: label.clone(),
                created_at: at,
            });
        }
        repo.issues.insert(
            number,
            Issue {
                number,
                id,
                title: title.to_owned(),
                body: body.map(str::to_owned),
                labels: labels.to_vec(),
                user: user.to_owned(),
                association: association.to_owned(),
                state: "open".to_owned(),
                state_reason: None,
                closed_by: None,
                created_at: at,
                updated_at: at,
                closed_at: None,
                pull: None,
            },
        );
        number
    }

    pub fn add_comment(
        &mut self,
        full: &str,
        number: u64,
        user: &str,
        association: &str,
        body: &str,
    ) -> u64 {
        let id = self.next_id();
        let repo = self.repo_mut(full);
        let at = now();
        repo.note_association(user, association);
        let issue = repo
            .issues
            .get_mut(&number)
            .unwrap_or_else(|| panic!("fake GitHub: {full} has no issue #{number}"));
        issue.updated_at = at;
        repo.comments.push(Comment {
            id,
            issue: number,
            user: user.to_owned(),
            association: association.to_owned(),
            body: body.to_owned(),
            created_at: at,
            updated_at: at,
        });
        id
    }

    /// `label` applied to issue `number` by `actor`: added if missing, and a `labeled` event
    /// recorded either way (as if it had been taken off and applied again).
    pub fn label_issue(&mut self, full: &str, number: u64, label: &str, actor: &str) {
        let id = self.next_id();
        let repo = self.repo_mut(full);
        let at = now();
        let issue = repo
            .issues
            .get_mut(&number)
            .unwrap_or_else(|| panic!("fake GitHub: {full} has no issue #{number}"));
        if !issue.labels.iter().any(|l| l.eq_ignore_ascii_case(label)) {
            issue.labels.push(label.to_owned());
        }
        issue.updated_at = at;
        repo.events.push(IssueEvent {
            id,
            issue: number,
            actor: actor.to_owned(),
            event: "labeled".to_owned(),
            label: label.to_owned(),
            created_at: at,
        });
    }

    /// `labeled` and `unlabeled` events by `actor` for what differs between an issue's labels
    /// `before` and now.
    fn record_label_changes(&mut self, full: &str, number: u64, before: &[String], actor: &str) {
        let Some(after) = self
            .repo(full)
            .and_then(|r| r.issues.get(&number))
            .map(|i| i.labels.clone())
        else {
            return;
        };
        let missing =
            |from: &[String], name: &String| !from.iter().any(|l| l.eq_ignore_ascii_case(name));
        let mut changes: Vec<(&str, String)> = Vec::new();
        changes.extend(
            before
                .iter()
                .filter(|l| missing(&after, l))
                .map(|l| ("unlabeled", l.clone())),
        );
        changes.extend(
            after
                .iter()
                .filter(|l| missing(before, l))
                .map(|l| ("labeled", l.clone())),
        );
        let at = now();
        for (event, label) in changes {
            let id = self.next_id();
            self.repo_mut(full).events.push(IssueEvent {
                id,
                issue: number,
                actor: actor.to_owned(),
                event: event.to_owned(),
                label,
                created_at: at,
            });
        }
    }

    /// The JSON of every pull request of a repository, as `GET /pulls/{n}` answers it.
    pub fn pulls_json(&self, full: &str) -> Vec<Value> {
        let Some(repo) = self.repo(full) else {
            return Vec::new();
        };
        repo.issues
            .values()
            .filter(|i| i.pull.is_some())
            .map(|i| pull_json(repo, i))
            .collect()
    }

    pub fn comments_json(&self, full: &str, number: u64) -> Vec<Value> {
        let Some(repo) = self.repo(full) else {
            return Vec::new();
        };
        repo.comments
            .iter()
            .filter(|c| c.issue == number)
            .map(|c| comment_json(repo, c))
            .collect()
    }

    /// The answer to a request for an operation (already validated).
    pub fn answer(&mut self, call: &Call) -> Answer {
        let docs = call.op.docs_url.as_str();
        if let (Some(owner), Some(name)) = (call.params.get("owner"), call.params.get("repo")) {
            let full = format!("{owner}/{name}");
            if self.repo(&full).is_none() {
                return error(404, "Not Found", docs);
            }
            return self.answer_repo(&full, call);
        }
        match call.op.id.as_str() {
            "users/get-authenticated" => {
                let mut user = spec().example("private-user");
                let simple = user_json(LOGIN);
                for (key, value) in simple.as_object().unwrap() {
                    user[key] = value.clone();
                }
                user["name"] = json!("Troupe bot");
                Answer::ok(200, user)
            }
            _ => unimplemented_answer(call.op),
        }
    }

    fn answer_repo(&mut self, full: &str, call: &Call) -> Answer {
        let docs = call.op.docs_url.clone();
        let docs = docs.as_str();
        let number = call
            .params
            .get("issue_number")
            .or_else(|| call.params.get("pull_number"))
            .and_then(|n| n.parse::<u64>().ok());
        let body = call.body.cloned().unwrap_or(Value::Null);
        match call.op.id.as_str() {
            "repos/get" => {
                let repo = self.repo(full).unwrap();
                Answer::ok(200, repo_json(repo, &spec().example("full-repository")))
            }
            "issues/get" => {
                let repo = self.repo(full).unwrap();
                match number.and_then(|n| repo.issues.get(&n)) {
                    Some(issue) => Answer::ok(200, issue_json(repo, issue)),
                    None => error(404, "Not Found", docs),
                }
            }
            "issues/list-for-repo" => {
                let repo = self.repo(full).unwrap();
                let state = call.query("state").unwrap_or("open");
                let wanted: Vec<String> = call
                    .query("labels")
                    .map(|l| {
                        l.split(',')
                            .map(|l| l.trim().to_lowercase())
                            .filter(|l| !l.is_empty())
                            .collect()
                    })
                    .unwrap_or_default();
                let since = call.query("since").and_then(parse_time);
                let creator = call.query("creator");
                let mut issues: Vec<&Issue> = repo
                    .issues
                    .values()
                    .filter(|i| state == "all" || i.state == state)
                    .filter(|i| {
                        wanted
                            .iter()
                            .all(|w| i.labels.iter().any(|l| l.to_lowercase() == *w))
                    })
                    .filter(|i| since.is_none_or(|s| i.updated_at >= s))
                    .filter(|i| creator.is_none_or(|c| i.user.eq_ignore_ascii_case(c)))
                    .collect();
                let comments =
                    |i: &Issue| repo.comments.iter().filter(|c| c.issue == i.number).count();
                match call.query("sort").unwrap_or("created") {
                    "updated" => issues.sort_by_key(|i| (i.updated_at, i.number)),
                    "comments" => issues.sort_by_key(|i| (comments(i), i.number)),
                    _ => issues.sort_by_key(|i| (i.created_at, i.number)),
                }
                if call.query("direction").unwrap_or("desc") == "desc" {
                    issues.reverse();
                }
                let items = issues.iter().map(|i| issue_json(repo, i)).collect();
                call.page(repo, items)
            }
            "issues/create" => {
                let labels = label_names(&body["labels"]);
                let number = self.add_issue(
                    full,
                    body["title"].as_str().unwrap_or_default(),
                    body["body"].as_str(),
                    &labels,
                    LOGIN,
                    LOGIN_ASSOCIATION,
                );
                let repo = self.repo(full).unwrap();
                let issue = &repo.issues[&number];
                Answer::ok(201, issue_json(repo, issue))
                    .with_header("location", format!("{}/issues/{number}", call.api(repo)))
            }
            "issues/update" => {
                let repo = self.repo_mut(full);
                let Some(issue) = number.and_then(|n| repo.issues.get_mut(&n)) else {
                    return error(404, "Not Found", docs);
                };
                let before = issue.labels.clone();
                if let Some(title) = body["title"].as_str() {
                    issue.title = title.to_owned();
                }
                if body.get("body").is_some() {
                    issue.body = body["body"].as_str().map(str::to_owned);
                }
                if body.get("labels").is_some() {
                    issue.labels = label_names(&body["labels"]);
                }
                if let Some(state) = body["state"].as_str() {
                    set_state(issue, state, body["state_reason"].as_str());
                }
                issue.updated_at = now();
                self.record_label_changes(full, number.unwrap(), &before, LOGIN);
                let repo = self.repo(full).unwrap();
                Answer::ok(200, issue_json(repo, &repo.issues[&number.unwrap()]))
            }
            "issues/add-labels" | "issues/set-labels" => {
                let names = if body.is_array() {
                    label_names(&body)
                } else {
                    label_names(&body["labels"])
                };
                let replace = call.op.id == "issues/set-labels";
                let repo = self.repo_mut(full);
                let Some(issue) = number.and_then(|n| repo.issues.get_mut(&n)) else {
                    return error(404, "Not Found", docs);
                };
                let before = issue.labels.clone();
                if replace {
                    issue.labels.clear();
                }
                for name in names {
                    if !issue.labels.iter().any(|l| l.eq_ignore_ascii_case(&name)) {
                        issue.labels.push(name);
                    }
                }
                issue.updated_at = now();
                self.record_label_changes(full, number.unwrap(), &before, LOGIN);
                let repo = self.repo(full).unwrap();
                let issue = &repo.issues[&number.unwrap()];
                Answer::ok(200, Value::Array(labels_json(repo, &issue.labels)))
            }
            "issues/remove-label" => {
                let name = call.params.get("name").cloned().unwrap_or_default();
                let repo = self.repo_mut(full);
                let Some(issue) = number.and_then(|n| repo.issues.get_mut(&n)) else {
                    return error(404, "Not Found", docs);
                };
                let before = issue.labels.clone();
                issue.labels.retain(|l| !l.eq_ignore_ascii_case(&name));
                if issue.labels.len() == before.len() {
                    return error(404, "Label does not exist", docs);
                }
                issue.updated_at = now();
                self.record_label_changes(full, number.unwrap(), &before, LOGIN);
                let repo = self.repo(full).unwrap();
                let issue = &repo.issues[&number.unwrap()];
                Answer::ok(200, Value::Array(labels_json(repo, &issue.labels)))
            }
            "issues/list-events" => {
                let repo = self.repo(full).unwrap();
                let Some(number) = number.filter(|n| repo.issues.contains_key(n)) else {
                    return error(404, "Not Found", docs);
                };
                let items = repo
                    .events
                    .iter()
                    .filter(|e| e.issue == number)
                    .map(|e| event_json(repo, e))
                    .collect();
                call.page(repo, items)
            }
            "repos/get-collaborator-permission-level" => {
                let repo = self.repo(full).unwrap();
                let login = call.params.get("username").cloned().unwrap_or_default();
                match repo.permission_of(&login) {
                    Some(role) => Answer::ok(200, permission_json(&login, &role)),
                    None => error(404, "Not Found", docs),
                }
            }
            "issues/list-comments" => {
                let repo = self.repo(full).unwrap();
                let Some(number) = number.filter(|n| repo.issues.contains_key(n)) else {
                    return error(404, "Not Found", docs);
                };
                let since = call.query("since").and_then(parse_time);
                let items = repo
                    .comments
                    .iter()
                    .filter(|c| c.issue == number)
                    .filter(|c| since.is_none_or(|s| c.updated_at >= s))
                    .map(|c| comment_json(repo, c))
                    .collect();
                call.page(repo, items)
            }
            "issues/create-comment" => {
                let Some(number) =
                    number.filter(|n| self.repo(full).unwrap().issues.contains_key(n))
                else {
                    return error(404, "Not Found", docs);
                };
                let text = body["body"].as_str().unwrap_or_default();
                if text.is_empty() {
                    return validation_failed(
                        docs,
                        json!([{ "resource": "IssueComment", "code": "missing_field", "field": "body" }]),
                    );
                }
                let id = self.add_comment(full, number, LOGIN, LOGIN_ASSOCIATION, text);
                let repo = self.repo(full).unwrap();
                let comment = repo.comments.iter().find(|c| c.id == id).unwrap();
                Answer::ok(201, comment_json(repo, comment)).with_header(
                    "location",
                    format!("{}/issues/comments/{id}", call.api(repo)),
                )
            }
            "issues/list-comments-for-repo" => {
                let repo = self.repo(full).unwrap();
                let since = call.query("since").and_then(parse_time);
                let mut comments: Vec<&Comment> = repo
                    .comments
                    .iter()
                    .filter(|c| since.is_none_or(|s| c.updated_at >= s))
                    .collect();
                match call.query("sort").unwrap_or("created") {
                    "updated" => comments.sort_by_key(|c| (c.updated_at, c.id)),
                    _ => comments.sort_by_key(|c| (c.created_at, c.id)),
                }
                if call.query("direction") == Some("desc") {
                    comments.reverse();
                }
                let items = comments.iter().map(|c| comment_json(repo, c)).collect();
                call.page(repo, items)
            }
            "issues/get-comment" | "issues/update-comment" | "issues/delete-comment" => {
                let id: Option<u64> = call.params.get("comment_id").and_then(|n| n.parse().ok());
                let repo = self.repo_mut(full);
                let Some(index) = repo.comments.iter().position(|c| Some(c.id) == id) else {
                    return error(404, "Not Found", docs);
                };
                match call.op.id.as_str() {
                    "issues/delete-comment" => {
                        repo.comments.remove(index);
                        return Answer {
                            status: 204,
                            body: None,
                            headers: Vec::new(),
                            problem: None,
                            note: None,
                        };
                    }
                    "issues/update-comment" => {
                        let comment = &mut repo.comments[index];
                        comment.body = body["body"].as_str().unwrap_or_default().to_owned();
                        comment.updated_at = now();
                    }
                    _ => {}
                }
                let repo = self.repo(full).unwrap();
                Answer::ok(200, comment_json(repo, &repo.comments[index]))
            }
            "pulls/create" => self.create_pull(full, call, &body),
            "pulls/list" => {
                let repo = self.repo(full).unwrap();
                let state = call.query("state").unwrap_or("open");
                let head = call.query("head");
                let base = call.query("base");
                let mut pulls: Vec<&Issue> = repo
                    .issues
                    .values()
                    .filter(|i| i.pull.is_some())
                    .filter(|i| state == "all" || i.state == state)
                    .filter(|i| {
                        // `user:ref`, as GitHub documents it; GitHub ignores a bare ref.
                        head.and_then(|h| h.split_once(':'))
                            .is_none_or(|(user, r)| {
                                user.eq_ignore_ascii_case(&repo.owner)
                                    && r == i.pull.as_ref().unwrap().head
                            })
                    })
                    .filter(|i| base.is_none_or(|b| i.pull.as_ref().unwrap().base == b))
                    .collect();
                match call.query("sort").unwrap_or("created") {
                    "updated" => pulls.sort_by_key(|i| (i.updated_at, i.number)),
                    _ => pulls.sort_by_key(|i| (i.created_at, i.number)),
                }
                if call.query("direction").unwrap_or("desc") == "desc" {
                    pulls.reverse();
                }
                let items = pulls.iter().map(|i| pull_simple_json(repo, i)).collect();
                let mut answer = call.page(repo, items);
                if let Some(head) = head.filter(|h| !h.contains(':')) {
                    answer.note = Some(format!(
                        "query parameter `head`={head:?} lacks its `user:` (`{}:{head}`): GitHub \
                         then ignores the filter and lists every pull request",
                        repo.owner
                    ));
                }
                answer
            }
            "pulls/get" => {
                let repo = self.repo(full).unwrap();
                match number
                    .and_then(|n| repo.issues.get(&n))
                    .filter(|i| i.pull.is_some())
                {
                    Some(issue) => Answer::ok(200, pull_json(repo, issue)),
                    None => error(404, "Not Found", docs),
                }
            }
            "pulls/update" => self.update_pull(full, number, call, &body),
            "pulls/merge" => self.merge_pull(full, number, call, &body),
            "pulls/list-reviews" => {
                let repo = self.repo(full).unwrap();
                let Some(issue) = number.and_then(|n| repo.issues.get(&n)) else {
                    return error(404, "Not Found", docs);
                };
                let Some(pull) = &issue.pull else {
                    return error(404, "Not Found", docs);
                };
                let items = pull
                    .reviews
                    .iter()
                    .map(|r| review_json(repo, issue.number, r))
                    .collect();
                call.page(repo, items)
            }
            "pulls/list-review-comments" => {
                let repo = self.repo(full).unwrap();
                let Some(issue) = number.and_then(|n| repo.issues.get(&n)) else {
                    return error(404, "Not Found", docs);
                };
                let Some(pull) = &issue.pull else {
                    return error(404, "Not Found", docs);
                };
                let since = call.query("since").and_then(parse_time);
                let mut comments: Vec<&ReviewComment> = pull
                    .review_comments
                    .iter()
                    .filter(|c| since.is_none_or(|s| c.updated_at >= s))
                    .collect();
                if call.query("sort") == Some("updated") {
                    comments.sort_by_key(|c| (c.updated_at, c.id));
                }
                if call.query("direction") == Some("desc") {
                    comments.reverse();
                }
                let items = comments
                    .iter()
                    .map(|c| review_comment_json(repo, issue.number, c))
                    .collect();
                call.page(repo, items)
            }
            "checks/list-for-ref" => {
                let repo = self.repo(full).unwrap();
                let reference = call.params.get("ref").cloned().unwrap_or_default();
                let Some(sha) = repo.resolve_ref(&reference) else {
                    return error(422, &format!("No commit found for SHA: {reference}"), docs);
                };
                let name = call.query("check_name");
                let status = call.query("status");
                let latest = call.query("filter").unwrap_or("latest") == "latest";
                let mut runs: Vec<&CheckRun> = repo
                    .check_runs
                    .iter()
                    .filter(|r| r.head_sha == sha)
                    .filter(|r| name.is_none_or(|n| r.name == n))
                    .filter(|r| status.is_none_or(|s| r.status == s))
                    .collect();
                runs.reverse();
                if latest {
                    let mut seen = Vec::new();
                    runs.retain(|r| {
                        let first = !seen.contains(&r.name);
                        seen.push(r.name.clone());
                        first
                    });
                }
                let total = runs.len();
                let items: Vec<Value> = runs.iter().map(|r| check_run_json(repo, r)).collect();
                let mut answer = call.page(repo, items);
                let page = answer.body.take().unwrap_or_default();
                answer.body = Some(json!({ "total_count": total, "check_runs": page }));
                answer
            }
            "checks/get" | "checks/list-annotations" => {
                let repo = self.repo(full).unwrap();
                let id: Option<u64> = call.params.get("check_run_id").and_then(|n| n.parse().ok());
                let Some(run) = repo.check_runs.iter().find(|r| Some(r.id) == id) else {
                    return error(404, "Not Found", docs);
                };
                if call.op.id == "checks/get" {
                    return Answer::ok(200, check_run_json(repo, run));
                }
                let items = run
                    .annotations
                    .iter()
                    .map(|a| annotation_json(repo, &run.head_sha, a))
                    .collect();
                call.page(repo, items)
            }
            "repos/get-combined-status-for-ref" => {
                let repo = self.repo(full).unwrap();
                let reference = call.params.get("ref").cloned().unwrap_or_default();
                let Some(sha) = repo.resolve_ref(&reference) else {
                    return error(422, &format!("No commit found for SHA: {reference}"), docs);
                };
                let statuses = latest_statuses(repo, &sha);
                let total = statuses.len();
                let items: Vec<Value> = statuses.iter().map(|s| status_json(repo, s)).collect();
                let mut answer = call.page(repo, items);
                let page = answer.body.take().unwrap_or_default();
                let mut combined = spec().example("combined-commit-status");
                combined["state"] = json!(combined_state(&statuses));
                combined["statuses"] = page;
                combined["sha"] = json!(sha);
                combined["total_count"] = json!(total);
                combined["repository"] = repo_json(repo, &combined["repository"]);
                combined["commit_url"] = json!(format!("{}/commits/{sha}", repo.api()));
                combined["url"] = json!(format!("{}/commits/{sha}/status", repo.api()));
                answer.body = Some(combined);
                answer
            }
            _ => unimplemented_answer(call.op),
        }
    }

    fn create_pull(&mut self, full: &str, call: &Call, body: &Value) -> Answer {
        let docs = call.op.docs_url.as_str();
        let repo = self.repo(full).unwrap();
        let head_arg = body["head"].as_str().unwrap_or_default();
        let base = body["base"].as_str().unwrap_or_default().to_owned();
        let head = match head_arg.split_once(':') {
            Some((user, branch)) if user.eq_ignore_ascii_case(&repo.owner) => branch.to_owned(),
            Some(_) => {
                return validation_failed(
                    docs,
                    json!([{ "resource": "PullRequest", "field": "head", "code": "invalid" }]),
                );
            }
            None => head_arg.to_owned(),
        };
        let title = body["title"].as_str().unwrap_or_default();
        if title.is_empty() {
            return validation_failed(
                docs,
                json!([{ "resource": "PullRequest", "field": "title", "code": "missing_field" }]),
            );
        }
        let Some(head_sha) = repo.branch_sha(&head) else {
            return validation_failed(
                docs,
                json!([{ "resource": "PullRequest", "field": "head", "code": "invalid" }]),
            );
        };
        let Some(base_sha) = repo.branch_sha(&base) else {
            return validation_failed(
                docs,
                json!([{ "resource": "PullRequest", "field": "base", "code": "invalid" }]),
            );
        };
        if repo.issues.values().any(|i| {
            i.state == "open"
                && i.pull
                    .as_ref()
                    .is_some_and(|p| p.head == head && p.base == base)
        }) {
            return validation_failed(
                docs,
                json!([{
                    "resource": "PullRequest",
                    "code": "custom",
                    "message": format!("A pull request already exists for {}:{head}.", repo.owner),
                }]),
            );
        }
        if let Some(bare) = &repo.bare
            && bare::is_ancestor(bare, &head_sha, &base_sha)
        {
            return validation_failed(
                docs,
                json!([{
                    "resource": "PullRequest",
                    "code": "custom",
                    "message": format!("No commits between {base} and {head}"),
                }]),
            );
        }
        let pull_id = self.next_id();
        let number = self.add_issue(
            full,
            title,
            body["body"].as_str(),
            &[],
            LOGIN,
            LOGIN_ASSOCIATION,
        );
        let repo = self.repo_mut(full);
        let issue = repo.issues.get_mut(&number).unwrap();
        issue.pull = Some(Pull {
            id: pull_id,
            head,
            base,
            draft: body["draft"].as_bool().unwrap_or(false),
            maintainer_can_modify: body["maintainer_can_modify"].as_bool().unwrap_or(true),
            merged_at: None,
            merge_commit_sha: None,
            merged_by: None,
            mergeable: None,
            head_sha,
            base_sha,
            reviews: Vec::new(),
            review_comments: Vec::new(),
        });
        let repo = self.repo(full).unwrap();
        Answer::ok(201, pull_json(repo, &repo.issues[&number]))
            .with_header("location", format!("{}/pulls/{number}", call.api(repo)))
    }

    fn update_pull(
        &mut self,
        full: &str,
        number: Option<u64>,
        call: &Call,
        body: &Value,
    ) -> Answer {
        let docs = call.op.docs_url.as_str();
        let repo = self.repo(full).unwrap();
        let Some(issue) = number
            .and_then(|n| repo.issues.get(&n))
            .filter(|i| i.pull.is_some())
        else {
            return error(404, "Not Found", docs);
        };
        let pull = issue.pull.as_ref().unwrap();
        if body["state"] == "open" && issue.state == "closed" {
            if pull.merged_at.is_some() {
                return validation_failed(
                    docs,
                    json!([{ "resource": "PullRequest", "code": "custom", "field": "state", "message": "state cannot be changed. The pull request has been merged." }]),
                );
            }
            if repo.issues.values().any(|i| {
                i.state == "open"
                    && i.pull
                        .as_ref()
                        .is_some_and(|p| p.head == pull.head && p.base == pull.base)
            }) {
                return validation_failed(
                    docs,
                    json!([{ "resource": "PullRequest", "code": "custom", "message": format!("A pull request already exists for {}:{}.", repo.owner, pull.head) }]),
                );
            }
        }
        if let Some(base) = body["base"].as_str()
            && repo.branch_sha(base).is_none()
        {
            return validation_failed(
                docs,
                json!([{ "resource": "PullRequest", "field": "base", "code": "invalid" }]),
            );
        }
        let repo = self.repo_mut(full);
        let issue = repo.issues.get_mut(&number.unwrap()).unwrap();
        if let Some(title) = body["title"].as_str() {
            issue.title = title.to_owned();
        }
        if body.get("body").is_some() {
            issue.body = body["body"].as_str().map(str::to_owned);
        }
        if let Some(state) = body["state"].as_str() {
            set_state(issue, state, None);
        }
        let pull = issue.pull.as_mut().unwrap();
        if let Some(base) = body["base"].as_str() {
            pull.base = base.to_owned();
        }
        if let Some(modify) = body["maintainer_can_modify"].as_bool() {
            pull.maintainer_can_modify = modify;
        }
        issue.updated_at = now();
        let repo = self.repo(full).unwrap();
        Answer::ok(200, pull_json(repo, &repo.issues[&number.unwrap()]))
    }

    fn merge_pull(&mut self, full: &str, number: Option<u64>, call: &Call, body: &Value) -> Answer {
        let docs = call.op.docs_url.as_str();
        let repo = self.repo(full).unwrap();
        let Some(issue) = number
            .and_then(|n| repo.issues.get(&n))
            .filter(|i| i.pull.is_some())
        else {
            return error(404, "Not Found", docs);
        };
        let pull = issue.pull.as_ref().unwrap();
        if issue.state != "open" || pull.merged_at.is_some() {
            return error(405, "Pull Request is not mergeable", docs);
        }
        let head_sha = repo.branch_sha(&pull.head).unwrap_or(pull.head_sha.clone());
        if let Some(sha) = body["sha"].as_str()
            && sha != head_sha
        {
            return error(
                409,
                "Head branch was modified. Review and try the merge again.",
                docs,
            );
        }
        if pull.draft {
            return error(405, "Pull Request is still a draft", docs);
        }
        if !mergeable(repo, pull) {
            return error(405, "Pull Request is not mergeable", docs);
        }
        let method = body["merge_method"].as_str().unwrap_or("merge");
        let title = issue.title.clone();
        let merge_sha = match &repo.bare {
            None => fake_sha(&format!("merge {full}#{}", issue.number)),
            Some(bare) => {
                let Some(base_sha) = repo.branch_sha(&pull.base) else {
                    return error(405, "Pull Request is not mergeable", docs);
                };
                let commit_title = body["commit_title"].as_str();
                let commit_message = body["commit_message"].as_str();
                let merged = match method {
                    "squash" => merge_squash(
                        bare,
                        &base_sha,
                        &head_sha,
                        &format!(
                            "{}\n\n{}",
                            commit_title.map_or_else(
                                || format!("{title} (#{})", issue.number),
                                str::to_owned
                            ),
                            commit_message.unwrap_or_default()
                        ),
                    ),
                    "rebase" => merge_rebase(bare, &base_sha, &head_sha),
                    _ => merge_commit(
                        bare,
                        &base_sha,
                        &head_sha,
                        &format!(
                            "{}\n\n{}",
                            commit_title.map_or_else(
                                || format!(
                                    "Merge pull request #{} from {}/{}",
                                    issue.number, repo.owner, pull.head
                                ),
                                str::to_owned
                            ),
                            commit_message.unwrap_or(&title)
                        ),
                    ),
                };
                let Some(merged) = merged else {
                    return error(405, "Pull Request is not mergeable", docs);
                };
                if !bare::update_branch(bare, &pull.base, &merged, &base_sha) {
                    return error(
                        409,
                        "Base branch was modified. Review and try the merge again.",
                        docs,
                    );
                }
                merged
            }
        };
        let at = now();
        let repo = self.repo_mut(full);
        let issue = repo.issues.get_mut(&number.unwrap()).unwrap();
        issue.state = "closed".to_owned();
        issue.closed_at = Some(at);
        issue.closed_by = Some(LOGIN.to_owned());
        issue.updated_at = at;
        let pull = issue.pull.as_mut().unwrap();
        pull.merged_at = Some(at);
        pull.merge_commit_sha = Some(merge_sha.clone());
        pull.merged_by = Some(LOGIN.to_owned());
        pull.head_sha = head_sha;
        let mut result =
            spec().example("pull-request-merge-result-response-if-merge-was-successful");
        result["sha"] = json!(merge_sha);
        result["merged"] = json!(true);
        result["message"] = json!("Pull Request successfully merged");
        Answer::ok(200, result)
    }
}

fn merge_commit(bare: &std::path::Path, base: &str, head: &str, message: &str) -> Option<String> {
    let tree = bare::merge_tree(bare, base, head, None)?;
    Some(bare::commit_tree(
        bare,
        &tree,
        &[base, head],
        message.trim_end(),
        Some(login_author().as_tuple()),
    ))
}

fn merge_squash(bare: &std::path::Path, base: &str, head: &str, message: &str) -> Option<String> {
    let tree = bare::merge_tree(bare, base, head, None)?;
    Some(bare::commit_tree(
        bare,
        &tree,
        &[base],
        message.trim_end(),
        Some(login_author().as_tuple()),
    ))
}

/// Each commit of the pull request replayed on the base (their authors kept, GitHub as the
/// committer), as GitHub's "rebase and merge" does.
fn merge_rebase(bare: &std::path::Path, base: &str, head: &str) -> Option<String> {
    let mut current = base.to_owned();
    for commit in bare::commits_between(bare, base, head) {
        let parent = format!("{commit}^");
        let tree = bare::merge_tree(bare, &current, &commit, Some(&parent))?;
        let (name, email, date) = bare::author(bare, &commit);
        let message = bare::message(bare, &commit);
        current = bare::commit_tree(
            bare,
            &tree,
            &[&current],
            &message,
            Some((&name, &email, &date)),
        );
    }
    Some(current)
}

struct Author(String, String, String);

impl Author {
    fn as_tuple(&self) -> (&str, &str, &str) {
        (&self.0, &self.1, &self.2)
    }
}

fn login_author() -> Author {
    Author(
        LOGIN.to_owned(),
        format!("{}+{LOGIN}@users.noreply.github.com", user_id(LOGIN)),
        String::new(),
    )
}

fn set_state(issue: &mut Issue, state: &str, reason: Option<&str>) {
    if state == issue.state {
        return;
    }
    issue.state = state.to_owned();
    if state == "closed" {
        issue.closed_at = Some(now());
        issue.closed_by = Some(LOGIN.to_owned());
        issue.state_reason = Some(reason.unwrap_or("completed").to_owned());
    } else {
        issue.closed_at = None;
        issue.closed_by = None;
        issue.state_reason = Some("reopened".to_owned());
    }
}

/// Label names from a request's `labels` (names, or objects with a `name`).
fn label_names(labels: &Value) -> Vec<String> {
    labels
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| l.as_str().or_else(|| l["name"].as_str()))
        .map(str::to_owned)
        .collect()
}

/// A request as the state answers it.
pub struct Call<'a> {
    pub op: &'a Op,
    pub params: &'a BTreeMap<String, String>,
    pub query: &'a [(String, String)],
    pub body: Option<&'a Value>,
    /// The fake's own base URL (for `Link` and `Location`).
    pub url: &'a str,
    /// The routed path (`/repos/...`).
    pub path: &'a str,
}

impl Call<'_> {
    pub fn query(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn api(&self, repo: &Repo) -> String {
        format!("{}/repos/{}", self.url, repo.full())
    }

    /// One page of `items` (`per_page`, at most 100, default 30; `page` from 1), with GitHub's
    /// `Link` header (`prev`, `next`, `last`, `first`) pointing at `/repositories/{id}/…` as
    /// GitHub's does.
    fn page(&self, repo: &Repo, items: Vec<Value>) -> Answer {
        let per_page = self
            .query("per_page")
            .and_then(|n| n.parse::<usize>().ok())
            .unwrap_or(30)
            .clamp(1, 100);
        let page = self
            .query("page")
            .and_then(|n| n.parse::<usize>().ok())
            .unwrap_or(1)
            .max(1);
        let last = items.len().div_ceil(per_page).max(1);
        let slice: Vec<Value> = items
            .into_iter()
            .skip((page - 1) * per_page)
            .take(per_page)
            .collect();
        let mut answer = Answer::ok(200, Value::Array(slice));
        if last > 1 {
            let rest: String = self.path.splitn(5, '/').skip(4).collect();
            let others: Vec<String> = self
                .query
                .iter()
                .filter(|(n, _)| n != "page" && n != "per_page")
                .map(|(n, v)| format!("{}={}", encode(n), encode(v)))
                .collect();
            let link = |p: usize, rel: &str| {
                let mut query = others.clone();
                if self.query("per_page").is_some() {
                    query.push(format!("per_page={per_page}"));
                }
                query.push(format!("page={p}"));
                format!(
                    "<{}/repositories/{}/{rest}?{}>; rel=\"{rel}\"",
                    self.url,
                    repo.id,
                    query.join("&")
                )
            };
            let mut links = Vec::new();
            if page > 1 {
                links.push(link(page - 1, "prev"));
            }
            if page < last {
                links.push(link(page + 1, "next"));
                links.push(link(last, "last"));
            }
            if page > 1 {
                links.push(link(1, "first"));
            }
            answer = answer.with_header("link", links.join(", "));
        }
        answer
    }
}

/// A query value percent-encoded (what is not unreserved).
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The spec's example for an operation the fake does not implement, with a problem saying so.
fn unimplemented_answer(op: &Op) -> Answer {
    let problem = Some(format!(
        "the fake GitHub does not implement {} {} ({}): it answered the description's example; \
         add it to tests/it/fake_github/state.rs",
        op.method, op.template, op.id
    ));
    match spec().answer_example(op) {
        Some((status, body)) => Answer {
            status,
            body,
            headers: Vec::new(),
            problem,
            note: None,
        },
        None => Answer {
            problem,
            ..error(501, "Not Implemented", &op.docs_url)
        },
    }
}

// ---- JSON, from the description's examples ----

/// Every string in `value` with `from` replaced by `to`.
fn rewrite(value: &mut Value, from: &str, to: &str) {
    match value {
        Value::String(s) if s.contains(from) => *s = s.replace(from, to),
        Value::Array(items) => items.iter_mut().for_each(|v| rewrite(v, from, to)),
        Value::Object(map) => map.values_mut().for_each(|v| rewrite(v, from, to)),
        _ => {}
    }
}

/// A stable id for a name (users, labels).
fn stable_id(text: &str) -> u64 {
    use sha2::Digest;
    let hash = sha2::Sha256::digest(text.as_bytes());
    10_000_000 + u64::from_be_bytes(hash[..8].try_into().unwrap()) % 90_000_000
}

pub fn user_id(login: &str) -> u64 {
    stable_id(&format!("user {login}"))
}

/// A made-up 40-hex commit id.
pub fn fake_sha(text: &str) -> String {
    use sha2::Digest;
    let hash = sha2::Sha256::digest(text.as_bytes());
    hash.iter().take(20).map(|b| format!("{b:02x}")).collect()
}

fn is_sha(text: &str) -> bool {
    text.len() == 40 && text.bytes().all(|b| b.is_ascii_hexdigit())
}

fn node_id(prefix: &str, id: u64) -> String {
    format!("{prefix}_kwDO{id:X}")
}

/// A `simple-user`.
pub fn user_json(login: &str) -> Value {
    let mut user = spec().example("issue")["user"].clone();
    rewrite(&mut user, "/octocat", &format!("/{login}"));
    let id = user_id(login);
    user["login"] = json!(login);
    user["id"] = json!(id);
    user["node_id"] = json!(node_id("U", id));
    user["avatar_url"] = json!(format!("https://avatars.githubusercontent.com/u/{id}?v=4"));
    user["type"] = json!(if login.ends_with("[bot]") {
        "Bot"
    } else {
        "User"
    });
    user["site_admin"] = json!(false);
    user
}

/// A repository object patched from one of the description's (`repository`, `full-repository`,
/// `minimal-repository`).
fn repo_json(repo: &Repo, template: &Value) -> Value {
    let mut value = template.clone();
    rewrite(&mut value, "octocat/Hello-World", &repo.full());
    let object = value.as_object_mut().unwrap();
    for key in ["template_repository", "organization", "parent", "source"] {
        object.remove(key);
    }
    value["id"] = json!(repo.id);
    value["node_id"] = json!(node_id("R", repo.id));
    value["name"] = json!(repo.name);
    value["full_name"] = json!(repo.full());
    value["owner"] = user_json(&repo.owner);
    value["private"] = json!(false);
    value["fork"] = json!(false);
    value["description"] = Value::Null;
    value["topics"] = json!([]);
    // The description requires it of a full repository, whose example lacks it.
    value["has_discussions"] = json!(false);
    if value.get("default_branch").is_some() {
        value["default_branch"] = json!(repo.default_branch);
    }
    if value.get("permissions").is_some() {
        value["permissions"] = json!({
            "admin": false, "maintain": false, "push": true, "triage": true, "pull": true,
        });
    }
    for key in ["created_at", "updated_at", "pushed_at"] {
        if value.get(key).is_some() {
            value[key] = json!(iso(repo.created_at));
        }
    }
    value
}

fn label_json(repo: &Repo, name: &str) -> Value {
    let id = stable_id(&format!("label {} {name}", repo.full()));
    json!({
        "id": id,
        "node_id": node_id("LA", id),
        "url": format!("{}/labels/{}", repo.api(), encode(name)),
        "name": name,
        "description": null,
        "color": "ededed",
        "default": false,
    })
}

fn labels_json(repo: &Repo, names: &[String]) -> Vec<Value> {
    names.iter().map(|n| label_json(repo, n)).collect()
}

fn reactions_json(url: &str) -> Value {
    json!({
        "url": format!("{url}/reactions"),
        "total_count": 0, "+1": 0, "-1": 0, "laugh": 0, "confused": 0, "heart": 0,
        "hooray": 0, "eyes": 0, "rocket": 0,
    })
}

fn time_or_null(at: Option<u64>) -> Value {
    at.map_or(Value::Null, |t| json!(iso(t)))
}

/// An `issue` (a pull request's issue carries `pull_request`).
pub fn issue_json(repo: &Repo, issue: &Issue) -> Value {
    let mut value = spec().example("issue");
    let api = repo.api();
    let n = issue.number;
    let url = format!("{api}/issues/{n}");
    let kind = if issue.pull.is_some() {
        "pull"
    } else {
        "issues"
    };
    value["id"] = json!(issue.id);
    value["node_id"] = json!(node_id(
        if issue.pull.is_some() { "PR" } else { "I" },
        issue.id
    ));
    value["url"] = json!(url);
    value["repository_url"] = json!(api);
    value["labels_url"] = json!(format!("{url}/labels{{/name}}"));
    value["comments_url"] = json!(format!("{url}/comments"));
    value["events_url"] = json!(format!("{url}/events"));
    value["timeline_url"] = json!(format!("{url}/timeline"));
    value["html_url"] = json!(format!("{}/{kind}/{n}", repo.web()));
    value["number"] = json!(n);
    value["state"] = json!(issue.state);
    value["state_reason"] = json!(issue.state_reason);
    value["title"] = json!(issue.title);
    value["body"] = json!(issue.body);
    value["user"] = user_json(&issue.user);
    value["labels"] = Value::Array(labels_json(repo, &issue.labels));
    value["assignee"] = Value::Null;
    value["assignees"] = json!([]);
    value["milestone"] = Value::Null;
    value["locked"] = json!(false);
    value["active_lock_reason"] = Value::Null;
    value["comments"] = json!(repo.comments.iter().filter(|c| c.issue == n).count());
    value["closed_at"] = time_or_null(issue.closed_at);
    value["created_at"] = json!(iso(issue.created_at));
    value["updated_at"] = json!(iso(issue.updated_at));
    value["closed_by"] = issue.closed_by.as_deref().map_or(Value::Null, user_json);
    value["author_association"] = json!(issue.association);
    value["performed_via_github_app"] = Value::Null;
    value["reactions"] = reactions_json(&url);
    match &issue.pull {
        Some(pull) => {
            let web = format!("{}/pull/{n}", repo.web());
            value["pull_request"] = json!({
                "url": format!("{api}/pulls/{n}"),
                "html_url": web,
                "diff_url": format!("{web}.diff"),
                "patch_url": format!("{web}.patch"),
                "merged_at": time_or_null(pull.merged_at),
            });
            value["draft"] = json!(pull.draft);
        }
        None => {
            value.as_object_mut().unwrap().remove("pull_request");
        }
    }
    value
}

pub fn comment_json(repo: &Repo, comment: &Comment) -> Value {
    let mut value = spec().example("issue-comment");
    let api = repo.api();
    let url = format!("{api}/issues/comments/{}", comment.id);
    let kind = match repo.issues.get(&comment.issue) {
        Some(issue) if issue.pull.is_some() => "pull",
        _ => "issues",
    };
    value["id"] = json!(comment.id);
    value["node_id"] = json!(node_id("IC", comment.id));
    value["url"] = json!(url);
    value["html_url"] = json!(format!(
        "{}/{kind}/{}#issuecomment-{}",
        repo.web(),
        comment.issue,
        comment.id
    ));
    value["body"] = json!(comment.body);
    value["user"] = user_json(&comment.user);
    value["created_at"] = json!(iso(comment.created_at));
    value["updated_at"] = json!(iso(comment.updated_at));
    value["issue_url"] = json!(format!("{api}/issues/{}", comment.issue));
    value["author_association"] = json!(comment.association);
    value["performed_via_github_app"] = Value::Null;
    value["reactions"] = reactions_json(&url);
    value
}

fn mergeable(repo: &Repo, pull: &Pull) -> bool {
    if let Some(mergeable) = pull.mergeable {
        return mergeable;
    }
    let Some(bare) = &repo.bare else {
        return true;
    };
    match (repo.branch_sha(&pull.base), repo.branch_sha(&pull.head)) {
        (Some(base), Some(head)) => bare::merge_tree(bare, &base, &head, None).is_some(),
        _ => false,
    }
}

/// A `pull-request`, its head and base read from the bare repository now.
pub fn pull_json(repo: &Repo, issue: &Issue) -> Value {
    let pull = issue.pull.as_ref().unwrap();
    let mut value = spec().example("pull-request");
    let api = repo.api();
    let n = issue.number;
    let web = format!("{}/pull/{n}", repo.web());
    let open = issue.state == "open";
    let head_sha = if open {
        repo.branch_sha(&pull.head).unwrap_or(pull.head_sha.clone())
    } else {
        pull.head_sha.clone()
    };
    let base_sha = repo.branch_sha(&pull.base).unwrap_or(pull.base_sha.clone());
    let repo_value = repo_json(repo, &value["head"]["repo"]);
    let end = |branch: &str, sha: &str| {
        json!({
            "label": format!("{}:{branch}", repo.owner),
            "ref": branch,
            "sha": sha,
            "user": user_json(&repo.owner),
            "repo": repo_value,
        })
    };
    value["url"] = json!(format!("{api}/pulls/{n}"));
    value["id"] = json!(pull.id);
    value["node_id"] = json!(node_id("PR", pull.id));
    value["html_url"] = json!(web);
    value["diff_url"] = json!(format!("{web}.diff"));
    value["patch_url"] = json!(format!("{web}.patch"));
    value["issue_url"] = json!(format!("{api}/issues/{n}"));
    value["commits_url"] = json!(format!("{api}/pulls/{n}/commits"));
    value["review_comments_url"] = json!(format!("{api}/pulls/{n}/comments"));
    value["review_comment_url"] = json!(format!("{api}/pulls/comments{{/number}}"));
    value["comments_url"] = json!(format!("{api}/issues/{n}/comments"));
    value["statuses_url"] = json!(format!("{api}/statuses/{head_sha}"));
    value["number"] = json!(n);
    value["state"] = json!(issue.state);
    value["locked"] = json!(false);
    value["title"] = json!(issue.title);
    value["user"] = user_json(&issue.user);
    value["body"] = json!(issue.body);
    value["labels"] = Value::Array(labels_json(repo, &issue.labels));
    value["milestone"] = Value::Null;
    value["active_lock_reason"] = Value::Null;
    value["created_at"] = json!(iso(issue.created_at));
    value["updated_at"] = json!(iso(issue.updated_at));
    value["closed_at"] = time_or_null(issue.closed_at);
    value["merged_at"] = time_or_null(pull.merged_at);
    value["merge_commit_sha"] = json!(pull.merge_commit_sha);
    value["assignee"] = Value::Null;
    value["assignees"] = json!([]);
    value["requested_reviewers"] = json!([]);
    value["requested_teams"] = json!([]);
    value["head"] = end(&pull.head, &head_sha);
    value["base"] = end(&pull.base, &base_sha);
    value["_links"] = json!({
        "self": { "href": format!("{api}/pulls/{n}") },
        "html": { "href": web },
        "issue": { "href": format!("{api}/issues/{n}") },
        "comments": { "href": format!("{api}/issues/{n}/comments") },
        "review_comments": { "href": format!("{api}/pulls/{n}/comments") },
        "review_comment": { "href": format!("{api}/pulls/comments{{/number}}") },
        "commits": { "href": format!("{api}/pulls/{n}/commits") },
        "statuses": { "href": format!("{api}/statuses/{head_sha}") },
    });
    value["author_association"] = json!(issue.association);
    value["auto_merge"] = Value::Null;
    value["draft"] = json!(pull.draft);
    value["merged"] = json!(pull.merged_at.is_some());
    if open {
        let mergeable = mergeable(repo, pull);
        value["mergeable"] = json!(mergeable);
        value["rebaseable"] = json!(mergeable);
        value["mergeable_state"] = json!(match (pull.draft, mergeable) {
            (true, _) => "draft",
            (false, true) => "clean",
            (false, false) => "dirty",
        });
    } else {
        value["mergeable"] = Value::Null;
        value["rebaseable"] = Value::Null;
        value["mergeable_state"] = json!("unknown");
    }
    value["merged_by"] = pull.merged_by.as_deref().map_or(Value::Null, user_json);
    value["comments"] = json!(repo.comments.iter().filter(|c| c.issue == n).count());
    value["review_comments"] = json!(pull.review_comments.len());
    value["maintainer_can_modify"] = json!(pull.maintainer_can_modify);
    let (commits, files, additions, deletions) = match &repo.bare {
        Some(bare) => bare::diff_stats(bare, &base_sha, &head_sha),
        None => (1, 1, 1, 0),
    };
    value["commits"] = json!(commits);
    value["additions"] = json!(additions);
    value["deletions"] = json!(deletions);
    value["changed_files"] = json!(files);
    value
}

/// A `pull-request-simple` (what `GET /pulls` lists): the keys of the description's example.
fn pull_simple_json(repo: &Repo, issue: &Issue) -> Value {
    let full = pull_json(repo, issue);
    let template = spec().example("pull-request-simple-items");
    let keys = template[0].as_object().unwrap();
    Value::Object(
        full.as_object()
            .unwrap()
            .iter()
            .filter(|(k, _)| keys.contains_key(*k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    )
}

/// An `issue-event-for-issue` (`labeled` or `unlabeled`).
fn event_json(repo: &Repo, event: &IssueEvent) -> Value {
    let mut value = spec().example("issue-event-for-issue-items")[0].clone();
    value["id"] = json!(event.id);
    value["node_id"] = json!(node_id(
        if event.event == "labeled" {
            "LE"
        } else {
            "UNLE"
        },
        event.id
    ));
    value["url"] = json!(format!("{}/issues/events/{}", repo.api(), event.id));
    value["actor"] = user_json(&event.actor);
    value["event"] = json!(event.event);
    value["commit_id"] = Value::Null;
    value["commit_url"] = Value::Null;
    value["created_at"] = json!(iso(event.created_at));
    value["performed_via_github_app"] = Value::Null;
    value["label"] = json!({ "name": event.label, "color": "ededed" });
    value
}

/// A `repository-collaborator-permission` for `role` (one of [`PERMISSIONS`]): `permission`
/// is GitHub's older word (maintain shows as write, triage as read), `role_name` the role.
fn permission_json(login: &str, role: &str) -> Value {
    let mut value =
        spec().example("repository-collaborator-permission-response-if-user-has-admin-permissions");
    let legacy = match role {
        "maintain" => "write",
        "triage" => "read",
        other => other,
    };
    let at_least = |rank: usize| {
        let of = |r: &str| PERMISSIONS.iter().position(|p| *p == r).unwrap_or(5);
        of(role) <= rank
    };
    let mut user = user_json(login);
    user["role_name"] = json!(role);
    user["permissions"] = json!({
        "admin": at_least(0),
        "maintain": at_least(1),
        "push": at_least(2),
        "triage": at_least(3),
        "pull": at_least(4),
    });
    value["permission"] = json!(legacy);
    value["role_name"] = json!(role);
    value["user"] = user;
    value
}

fn check_run_json(repo: &Repo, run: &CheckRun) -> Value {
    let mut value = spec().example("check-run");
    let api = repo.api();
    value["id"] = json!(run.id);
    value["head_sha"] = json!(run.head_sha);
    value["node_id"] = json!(node_id("CR", run.id));
    value["external_id"] = json!("");
    value["url"] = json!(format!("{api}/check-runs/{}", run.id));
    value["html_url"] = json!(format!("{}/runs/{}", repo.web(), run.id));
    value["details_url"] = json!(format!("{}/runs/{}", repo.web(), run.id));
    value["status"] = json!(run.status);
    value["conclusion"] = json!(run.conclusion);
    value["started_at"] = json!(iso(run.started_at));
    value["completed_at"] = time_or_null(run.completed_at);
    value["output"] = json!({
        "title": run.title,
        "summary": run.summary,
        "text": run.text,
        "annotations_count": run.annotations.len(),
        "annotations_url": format!("{api}/check-runs/{}/annotations", run.id),
    });
    value["name"] = json!(run.name);
    value["check_suite"] = json!({ "id": stable_id(&format!("suite {}", run.head_sha)) });
    value["app"]["slug"] = json!("github-actions");
    value["app"]["name"] = json!("GitHub Actions");
    value["app"]["id"] = json!(15368);
    let short = |branch: &str, sha: &str| json!({ "ref": branch, "sha": sha, "repo": { "id": repo.id, "url": api, "name": repo.name } });
    value["pull_requests"] = Value::Array(
        repo.issues
            .values()
            .filter(|i| i.state == "open")
            .filter_map(|i| Some((i, i.pull.as_ref()?)))
            .filter(|(_, p)| repo.branch_sha(&p.head).as_deref() == Some(run.head_sha.as_str()))
            .map(|(i, p)| {
                let base_sha = repo.branch_sha(&p.base).unwrap_or(p.base_sha.clone());
                json!({
                    "url": format!("{api}/pulls/{}", i.number),
                    "id": p.id,
                    "number": i.number,
                    "head": short(&p.head, &run.head_sha),
                    "base": short(&p.base, &base_sha),
                })
            })
            .collect(),
    );
    value
}

fn annotation_json(repo: &Repo, sha: &str, annotation: &Annotation) -> Value {
    let mut value = spec().example("check-annotation-items")[0].clone();
    value["path"] = json!(annotation.path);
    value["start_line"] = json!(annotation.start_line);
    value["end_line"] = json!(annotation.end_line);
    value["start_column"] = Value::Null;
    value["end_column"] = Value::Null;
    value["annotation_level"] = json!(annotation.level);
    value["title"] = Value::Null;
    value["message"] = json!(annotation.message);
    value["raw_details"] = Value::Null;
    value["blob_href"] = json!(format!("{}/blob/{sha}/{}", repo.web(), annotation.path));
    value
}

/// The latest status of each context on a commit, newest first.
fn latest_statuses<'r>(repo: &'r Repo, sha: &str) -> Vec<&'r CommitStatus> {
    let mut latest: Vec<&CommitStatus> = Vec::new();
    for status in repo.statuses.iter().rev().filter(|s| s.sha == sha) {
        if !latest.iter().any(|s| s.context == status.context) {
            latest.push(status);
        }
    }
    latest
}

/// GitHub's combined state: `failure` if any is `error` or `failure`, `pending` if any is (or
/// there are none), else `success`.
fn combined_state(statuses: &[&CommitStatus]) -> &'static str {
    if statuses
        .iter()
        .any(|s| s.state == "error" || s.state == "failure")
    {
        "failure"
    } else if statuses.is_empty() || statuses.iter().any(|s| s.state == "pending") {
        "pending"
    } else {
        "success"
    }
}

fn status_json(repo: &Repo, status: &CommitStatus) -> Value {
    let mut value = spec().example("combined-commit-status")["statuses"][0].clone();
    value["url"] = json!(format!("{}/statuses/{}", repo.api(), status.sha));
    value["avatar_url"] = json!("https://avatars.githubusercontent.com/in/15368?v=4");
    value["id"] = json!(status.id);
    value["node_id"] = json!(node_id("SC", status.id));
    value["state"] = json!(status.state);
    value["description"] = json!(status.description);
    value["target_url"] = Value::Null;
    value["context"] = json!(status.context);
    value["created_at"] = json!(iso(status.created_at));
    value["updated_at"] = json!(iso(status.updated_at));
    value
}

fn review_json(repo: &Repo, number: u64, review: &Review) -> Value {
    let mut value = spec().example("pull-request-review-items")[0].clone();
    let api = format!("{}/pulls/{number}", repo.api());
    let web = format!(
        "{}/pull/{number}#pullrequestreview-{}",
        repo.web(),
        review.id
    );
    value["id"] = json!(review.id);
    value["node_id"] = json!(node_id("PRR", review.id));
    value["user"] = user_json(&review.user);
    value["body"] = json!(review.body);
    value["state"] = json!(review.state);
    value["html_url"] = json!(web);
    value["pull_request_url"] = json!(api);
    value["_links"] = json!({ "html": { "href": web }, "pull_request": { "href": api } });
    value["submitted_at"] = json!(iso(review.submitted_at));
    value["commit_id"] = json!(review.commit_id);
    value["author_association"] = json!(review.association);
    value
}

fn review_comment_json(repo: &Repo, number: u64, comment: &ReviewComment) -> Value {
    let mut value = spec().example("pull-request-review-comment-items")[0].clone();
    let url = format!("{}/pulls/comments/{}", repo.api(), comment.id);
    let pull = format!("{}/pulls/{number}", repo.api());
    let web = format!("{}/pull/{number}#discussion_r{}", repo.web(), comment.id);
    value.as_object_mut().unwrap().remove("in_reply_to_id");
    value["url"] = json!(url);
    value["pull_request_review_id"] = json!(comment.review_id);
    value["id"] = json!(comment.id);
    value["node_id"] = json!(node_id("PRRC", comment.id));
    value["diff_hunk"] = json!(format!("@@ -{0},1 +{0},1 @@", comment.line));
    value["path"] = json!(comment.path);
    value["position"] = json!(1);
    value["original_position"] = json!(1);
    value["commit_id"] = json!(comment.commit_id);
    value["original_commit_id"] = json!(comment.commit_id);
    value["user"] = user_json(&comment.user);
    value["body"] = json!(comment.body);
    value["created_at"] = json!(iso(comment.created_at));
    value["updated_at"] = json!(iso(comment.updated_at));
    value["html_url"] = json!(web);
    value["pull_request_url"] = json!(pull);
    value["author_association"] = json!(comment.association);
    value["_links"] = json!({
        "self": { "href": url }, "html": { "href": web }, "pull_request": { "href": pull },
    });
    value["start_line"] = Value::Null;
    value["original_start_line"] = Value::Null;
    value["start_side"] = Value::Null;
    value["line"] = json!(comment.line);
    value["original_line"] = json!(comment.line);
    value["side"] = json!("RIGHT");
    value["subject_type"] = json!("line");
    value["reactions"] = reactions_json(&url);
    value
}

// ---- time ----

/// Seconds since the Unix epoch.
pub fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// `YYYY-MM-DDTHH:MM:SSZ`, as GitHub writes times.
pub fn iso(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// An ISO 8601 time (`2024-05-01T12:00:00Z`, with fractions or an offset) as epoch seconds
/// (fractions dropped).
pub fn parse_time(text: &str) -> Option<u64> {
    let (date, time) = text.split_once(['T', ' '])?;
    let mut date = date.split('-').map(|p| p.parse::<i64>().ok());
    let (year, month, day) = (date.next()??, date.next()??, date.next()??);
    let (clock, offset) = match time.find(['Z', 'z', '+', '-']) {
        Some(at) => time.split_at(at),
        None => (time, ""),
    };
    let mut clock = clock.split(':');
    let hour: i64 = clock.next()?.parse().ok()?;
    let minute: i64 = clock.next()?.parse().ok()?;
    let second: i64 = clock
        .next()
        .map(|s| s.split('.').next().unwrap_or("0").parse().ok())
        .unwrap_or(Some(0))?;
    let offset_secs = match offset.chars().next() {
        Some(sign @ ('+' | '-')) => {
            let digits: String = offset[1..].chars().filter(char::is_ascii_digit).collect();
            let hours: i64 = digits.get(..2)?.parse().ok()?;
            let minutes: i64 = digits.get(2..4).unwrap_or("0").parse().ok()?;
            let secs = hours * 3600 + minutes * 60;
            if sign == '+' { secs } else { -secs }
        }
        _ => 0,
    };
    // days_from_civil.
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = if month > 2 { month - 3 } else { month + 9 };
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second - offset_secs;
    u64::try_from(secs).ok()
}
