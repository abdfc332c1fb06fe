//! A fake GitHub REST API on loopback that checks every request against GitHub's official
//! OpenAPI description and answers like GitHub, from repositories held in memory.
//!
//! `FakeGitHub::start()` binds `127.0.0.1:0` and serves HTTP/1.1 (hyper, keep-alive) from a
//! current-thread tokio runtime on its own thread, so plain `#[test]` functions can use it;
//! dropping it stops the server. The API's base is the server's root (`url`, no `/api/v3`).
//!
//! **Checking.** Each request is matched to an operation of the description
//! (`tests/forge-fixtures`, `@octokit/openapi`'s `api.github.com.json`, read once per process)
//! by method and path template (literal segments win over parameters; `x-multi-segment`
//! parameters such as a commit ref take several segments). Its path parameters, query
//! parameters (unknown names, values against their schemas, `per_page` 1..=100, required ones)
//! and JSON body (against the operation's `application/json` schema turned into JSON Schema,
//! plus properties the schema does not name) are checked, and so are the headers: a
//! `User-Agent`, `Authorization: Bearer <token>` or `token <token>` with [`FakeGitHub::token`],
//! and, when present, a GitHub `Accept` media type, a supported `X-GitHub-Api-Version`
//! (`2022-11-28`, `2026-03-10`) and a JSON `Content-Type`. Every request is recorded *before* it
//! is answered, with what is wrong with it ([`Recorded::problems`]); a test ends with
//! [`FakeGitHub::assert_all_valid`], which lists them.
//!
//! **Answers.** Requests with problems are still answered as GitHub would: unknown paths and
//! methods and bad path parameters 404, a bad body 422 (`Invalid request.`), a missing
//! `User-Agent` 403, bad credentials 401; unknown query parameters are ignored, as GitHub does.
//! Bodies are the description's own examples for each operation patched with the state's
//! values; the fake checks its own 2xx answers against the description's response schemas
//! ([`FakeGitHub::answer_problems`]). Every answer carries GitHub's rate-limit headers
//! (`x-ratelimit-limit` 5000, `-remaining` going down, `-reset`, `-used`, `-resource: core`);
//! a 200 to a `GET` has an `ETag`, and a `GET` whose `If-None-Match` matches it is answered 304
//! without a body and without counting against the limit. Lists take `per_page` (default 30,
//! at most 100) and `page`, and say where the other pages are in a `Link` header whose URLs are
//! `{url}/repositories/{repo id}/…`, as GitHub's are: follow them as they are.
//!
//! Issues and pull requests share their numbers; `GET /issues` lists pull requests too (with a
//! `pull_request` field). A pull request's head and base commits are read from the repository's
//! bare git repository (`add_repo(…, Some(bare))`) each time it is answered, so a push moves
//! them; a merge writes the merge (or squash, or rebased) commits into the bare repository and
//! moves the base branch. Without a bare repository, branches exist with made-up commits.
//! Operations of the description the fake does not implement are answered with the
//! description's example and recorded with a problem saying so.
//!
//! The authenticated user (whatever writes through the API) is [`LOGIN`], associated with every
//! repository as [`LOGIN_ASSOCIATION`]. [`http`] is a blocking HTTP/1.1 client for tests that
//! talk to the fake (or to a webhook receiver) without one of their own.

#![allow(dead_code)] // each test uses only part of this

mod bare;
pub mod spec;
pub mod state;
mod webhook;

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::io::{Read, Write};
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::Value;

use spec::{Route, parse_query, spec};
use state::{Answer, Call, State, error};

/// The token the fake accepts.
pub const TOKEN: &str = "ghp_fake_troupe_token";
/// The user the token authenticates as: the author of what is created through the API.
pub const LOGIN: &str = "troupe-bot";
/// [`LOGIN`]'s `author_association` on every repository.
pub const LOGIN_ASSOCIATION: &str = "COLLABORATOR";
/// The `X-GitHub-Api-Version`s GitHub accepts.
pub const API_VERSIONS: [&str; 2] = ["2022-11-28", "2026-03-10"];
const RATE_LIMIT: u64 = 5000;

/// One line of a check run's annotations.
#[derive(Debug, Clone, PartialEq)]
pub struct Annotation {
    pub path: String,
    pub start_line: u32,
    pub end_line: u32,
    /// `notice`, `warning` or `failure`.
    pub level: String,
    pub message: String,
}

impl Annotation {
    pub fn new(path: &str, line: u32, level: &str, message: &str) -> Annotation {
        Annotation {
            path: path.to_owned(),
            start_line: line,
            end_line: line,
            level: level.to_owned(),
            message: message.to_owned(),
        }
    }
}

/// What `fail_next` makes the next matching requests get instead of their answer (they are
/// still checked and recorded).
#[derive(Debug, Clone, PartialEq)]
pub enum Fault {
    /// 403, `x-ratelimit-remaining: 0`, the reset this many seconds ahead, GitHub's "API rate
    /// limit exceeded" body.
    RateLimited { reset_in_secs: u64 },
    /// 403 with `retry-after` and GitHub's "secondary rate limit" body.
    SecondaryRateLimit { retry_after_secs: u64 },
    /// This status with a JSON `message` (a 5xx, say).
    ServerError(u16),
    /// The request is carried out, and its answer sent only after this long (a client timing
    /// out meanwhile has changed the state all the same, as with the real thing).
    Hang(Duration),
}

/// One request the fake received.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    /// As received, without the query string.
    pub path: String,
    /// The raw query string (empty without one).
    pub query: String,
    /// The operation of the description it matched.
    pub operation_id: Option<String>,
    /// No problems.
    pub valid: bool,
    /// What is wrong with it, each naming what (parameter, body property, header).
    pub problems: Vec<String>,
    /// The status it was answered.
    pub status: u16,
    /// It had `If-None-Match`.
    pub conditional: bool,
    /// Its JSON body.
    pub body: Option<Value>,
}

impl Recorded {
    /// One line: method, path and query, operation, status and problems.
    pub fn summary(&self) -> String {
        let query = if self.query.is_empty() {
            String::new()
        } else {
            format!("?{}", self.query)
        };
        let op = self.operation_id.as_deref().unwrap_or("no operation");
        let conditional = if self.conditional {
            " (conditional)"
        } else {
            ""
        };
        let mut line = format!(
            "{} {}{query} [{op}] -> {}{conditional}",
            self.method, self.path, self.status
        );
        for problem in &self.problems {
            line.push_str("\n    problem: ");
            line.push_str(problem);
        }
        line
    }
}

/// A signed webhook delivery, ready to post.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub delivery_id: String,
    pub event: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Delivery {
    /// Posts it to `url` (`http://127.0.0.1:PORT/path`) and returns the status and body.
    pub fn send(&self, url: &str) -> (u16, String) {
        let headers: Vec<(&str, &str)> = self
            .headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        let (status, _, body) = http("POST", url, &headers, Some(&self.body));
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

struct FaultRule {
    method: String,
    prefix: String,
    fault: Fault,
    left: usize,
}

struct Rate {
    used: u64,
    reset: u64,
}

struct Shared {
    url: String,
    token: String,
    state: Mutex<State>,
    recorded: Mutex<Vec<Recorded>>,
    seen: Condvar,
    faults: Mutex<Vec<FaultRule>>,
    answer_problems: Mutex<Vec<String>>,
    rate: Mutex<Rate>,
}

/// The fake server; stops when dropped.
pub struct FakeGitHub {
    /// `http://127.0.0.1:PORT`, no trailing slash.
    pub url: String,
    /// The token it accepts ([`TOKEN`]).
    pub token: String,
    /// The user the token is ([`LOGIN`]).
    pub login: String,
    shared: Arc<Shared>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl FakeGitHub {
    /// Reads the description (once per process), binds `127.0.0.1:0` and serves until dropped.
    /// The socket listens before this returns.
    pub fn start() -> FakeGitHub {
        spec();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let url = format!("http://127.0.0.1:{port}");
        let shared = Arc::new(Shared {
            url: url.clone(),
            token: TOKEN.to_owned(),
            state: Mutex::new(State::new()),
            recorded: Mutex::new(Vec::new()),
            seen: Condvar::new(),
            faults: Mutex::new(Vec::new()),
            answer_problems: Mutex::new(Vec::new()),
            rate: Mutex::new(Rate {
                used: 0,
                reset: state::now() + 3600,
            }),
        });
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
        let server_shared = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name(format!("fake-github-{port}"))
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                runtime.block_on(serve(listener, server_shared, stop_rx));
            })
            .unwrap();
        FakeGitHub {
            url,
            token: TOKEN.to_owned(),
            login: LOGIN.to_owned(),
            shared,
            stop: Some(stop_tx),
            thread: Some(thread),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.shared.state)
    }

    /// Adds (or replaces) the repository `owner/name`; its branches are those of `bare`, if
    /// given (its `HEAD` is the default branch, else `main`).
    pub fn add_repo(&self, repo: &str, bare: Option<&Path>) {
        self.state().add_repo(repo, bare.map(Path::to_path_buf));
    }

    /// An open issue (an empty `body` is GitHub's `null`); returns its number. Its labels are
    /// recorded as `labeled` events by `author`.
    pub fn add_issue(
        &self,
        repo: &str,
        title: &str,
        body: &str,
        labels: &[&str],
        author: &str,
        association: &str,
    ) -> u64 {
        let labels: Vec<String> = labels.iter().map(|l| (*l).to_owned()).collect();
        // GitHub's issue without a body has `"body": null`.
        let body = (!body.is_empty()).then_some(body);
        self.state()
            .add_issue(repo, title, body, &labels, author, association)
    }

    /// A comment on an issue or pull request (bumping its `updated_at`); returns its id.
    pub fn add_issue_comment(
        &self,
        repo: &str,
        number: u64,
        author: &str,
        association: &str,
        body: &str,
    ) -> u64 {
        self.state()
            .add_comment(repo, number, author, association, body)
    }

    /// `login`'s role in the repository (`admin`, `maintain`, `write`, `triage`, `read` or
    /// `none`), as `GET …/collaborators/{login}/permission` answers it. Without one set, the
    /// repository's owner is admin, [`LOGIN`] write, and anyone else what the association they
    /// were last given (issues, comments, reviews) says: `OWNER` admin, `MEMBER` and
    /// `COLLABORATOR` write; for everyone else the answer is GitHub's 404 for someone who is
    /// not a collaborator.
    pub fn set_permission(&self, repo: &str, login: &str, permission: &str) {
        assert!(
            state::PERMISSIONS.contains(&permission),
            "fake GitHub: a permission is one of {:?}, not {permission:?}",
            state::PERMISSIONS
        );
        self.state()
            .repo_mut(repo)
            .permissions
            .insert(login.to_lowercase(), permission.to_owned());
    }

    /// `label` applied to an issue or pull request by `actor`: added (if it lacks it) and a
    /// `labeled` event by `actor` recorded, which `GET …/issues/{n}/events` lists. (`add_issue`
    /// records its labels as applied by the issue's author.)
    pub fn label_issue(&self, repo: &str, number: u64, label: &str, actor: &str) {
        self.state().label_issue(repo, number, label, actor);
    }

    /// A check run on a commit, replacing one of the same name there (the new one has a new
    /// id, as a re-run has); `completed_at` is set when `status` is `completed`. Returns its id.
    #[allow(clippy::too_many_arguments)]
    pub fn set_check_run(
        &self,
        repo: &str,
        sha: &str,
        name: &str,
        status: &str,
        conclusion: Option<&str>,
        title: &str,
        summary: &str,
        text: &str,
        annotations: &[Annotation],
    ) -> u64 {
        let mut state = self.state();
        let id = state.next_id();
        let at = state::now();
        let repo = state.repo_mut(repo);
        repo.check_runs
            .retain(|r| !(r.head_sha == sha && r.name == name));
        repo.check_runs.push(state::CheckRun {
            id,
            head_sha: sha.to_owned(),
            name: name.to_owned(),
            status: status.to_owned(),
            conclusion: conclusion.map(str::to_owned),
            title: title.to_owned(),
            summary: summary.to_owned(),
            text: text.to_owned(),
            annotations: annotations.to_vec(),
            started_at: at,
            completed_at: (status == "completed").then_some(at),
        });
        id
    }

    /// A commit status (`error`, `failure`, `pending`, `success`) for a context; the combined
    /// status shows each context's latest.
    pub fn set_status(&self, repo: &str, sha: &str, context: &str, state: &str, description: &str) {
        let mut guard = self.state();
        let id = guard.next_id();
        let at = state::now();
        guard.repo_mut(repo).statuses.push(state::CommitStatus {
            id,
            sha: sha.to_owned(),
            context: context.to_owned(),
            state: state.to_owned(),
            description: description.to_owned(),
            created_at: at,
            updated_at: at,
        });
    }

    /// A submitted review (`APPROVED`, `CHANGES_REQUESTED`, `COMMENTED`); returns its id.
    #[allow(clippy::too_many_arguments)]
    pub fn add_review(
        &self,
        repo: &str,
        pull: u64,
        author: &str,
        association: &str,
        state: &str,
        body: &str,
        commit_id: &str,
    ) -> u64 {
        let mut guard = self.state();
        let id = guard.next_id();
        guard.repo_mut(repo).note_association(author, association);
        let pull = Self::pull_mut(&mut guard, repo, pull);
        pull.reviews.push(state::Review {
            id,
            user: author.to_owned(),
            association: association.to_owned(),
            state: state.to_owned(),
            body: body.to_owned(),
            commit_id: commit_id.to_owned(),
            submitted_at: state::now(),
        });
        id
    }

    /// A review comment on a line of the pull request's diff (right side). Like GitHub's, it
    /// belongs to a review: the author's latest on that pull request, or a new `COMMENTED` one
    /// with an empty body (which `GET …/reviews` then lists). Returns the comment's id.
    #[allow(clippy::too_many_arguments)]
    pub fn add_review_comment(
        &self,
        repo: &str,
        pull: u64,
        author: &str,
        association: &str,
        path: &str,
        line: u32,
        body: &str,
        commit_id: &str,
    ) -> u64 {
        let mut guard = self.state();
        let id = guard.next_id();
        let new_review = guard.next_id();
        let at = state::now();
        guard.repo_mut(repo).note_association(author, association);
        let pull = Self::pull_mut(&mut guard, repo, pull);
        let review_id = match pull.reviews.iter().rev().find(|r| r.user == author) {
            Some(review) => review.id,
            None => {
                pull.reviews.push(state::Review {
                    id: new_review,
                    user: author.to_owned(),
                    association: association.to_owned(),
                    state: "COMMENTED".to_owned(),
                    body: String::new(),
                    commit_id: commit_id.to_owned(),
                    submitted_at: at,
                });
                new_review
            }
        };
        pull.review_comments.push(state::ReviewComment {
            id,
            review_id,
            user: author.to_owned(),
            association: association.to_owned(),
            path: path.to_owned(),
            line,
            body: body.to_owned(),
            commit_id: commit_id.to_owned(),
            created_at: at,
            updated_at: at,
        });
        id
    }

    fn pull_mut<'s>(state: &'s mut State, repo: &str, number: u64) -> &'s mut state::Pull {
        state
            .repo_mut(repo)
            .issues
            .get_mut(&number)
            .and_then(|i| i.pull.as_mut())
            .unwrap_or_else(|| panic!("fake GitHub: {repo} has no pull request #{number}"))
    }

    /// Overrides whether a pull request can be merged (otherwise: whether its head merges into
    /// its base without conflict in the bare repository).
    pub fn set_mergeable(&self, repo: &str, pull: u64, mergeable: bool) {
        Self::pull_mut(&mut self.state(), repo, pull).mergeable = Some(mergeable);
    }

    /// Every pull request of a repository, as `GET /repos/{owner}/{repo}/pulls/{n}` answers it.
    pub fn pulls(&self, repo: &str) -> Vec<Value> {
        self.state().pulls_json(repo)
    }

    /// The comments of an issue or pull request, as `GET …/issues/{n}/comments` answers them.
    pub fn issue_comments(&self, repo: &str, number: u64) -> Vec<Value> {
        self.state().comments_json(repo, number)
    }

    /// The next `times` requests with this method (`*`: any) whose path starts with
    /// `path_prefix` (as sent, or as `/repos/…` for a `/repositories/{id}/…` path) get `fault`.
    pub fn fail_next(&self, method: &str, path_prefix: &str, fault: Fault, times: usize) {
        lock(&self.shared.faults).push(FaultRule {
            method: method.to_ascii_uppercase(),
            prefix: path_prefix.to_owned(),
            fault,
            left: times,
        });
    }

    /// Every request so far, in the order received.
    pub fn requests(&self) -> Vec<Recorded> {
        lock(&self.shared.recorded).clone()
    }

    /// The requests that had problems.
    pub fn invalid_requests(&self) -> Vec<Recorded> {
        self.requests().into_iter().filter(|r| !r.valid).collect()
    }

    /// Panics listing the invalid requests, if there are any.
    pub fn assert_all_valid(&self) {
        let invalid = self.invalid_requests();
        assert!(
            invalid.is_empty(),
            "fake GitHub: {} request(s) GitHub's description does not allow:\n{}",
            invalid.len(),
            invalid
                .iter()
                .map(Recorded::summary)
                .collect::<Vec<_>>()
                .join("\n")
        );
    }

    /// Where the fake's own 2xx answers strayed from the description's response schemas (its
    /// bugs, not the client's); empty when it answers as the description says.
    pub fn answer_problems(&self) -> Vec<String> {
        lock(&self.shared.answer_problems).clone()
    }

    /// Waits until `pred` holds for the requests so far and returns them; panics naming `what`
    /// and listing the requests if that takes longer than `timeout`.
    pub fn wait_for(
        &self,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&[Recorded]) -> bool,
    ) -> Vec<Recorded> {
        let deadline = Instant::now() + timeout;
        let mut recorded = lock(&self.shared.recorded);
        loop {
            if pred(&recorded) {
                return recorded.clone();
            }
            let now = Instant::now();
            if now >= deadline {
                let seen: Vec<String> = recorded.iter().map(Recorded::summary).collect();
                drop(recorded);
                panic!(
                    "fake GitHub: waited {timeout:?} for {what}; {} request(s):\n{}",
                    seen.len(),
                    seen.join("\n")
                );
            }
            recorded = self
                .shared
                .seen
                .wait_timeout(recorded, deadline - now)
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .0;
        }
    }

    /// A delivery of the first example payload of `event` (with `action`, if given) from
    /// GitHub's webhook examples, after `patch`, signed with `secret`.
    pub fn webhook(
        &self,
        event: &str,
        action: Option<&str>,
        secret: &str,
        patch: impl FnOnce(&mut Value),
    ) -> Delivery {
        webhook::delivery(event, action, secret, patch)
    }
}

impl Drop for FakeGitHub {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn serve(
    listener: std::net::TcpListener,
    shared: Arc<Shared>,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) {
    let listener = tokio::net::TcpListener::from_std(listener).unwrap();
    loop {
        tokio::select! {
            _ = &mut stop => return,
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let shared = Arc::clone(&shared);
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        let shared = Arc::clone(&shared);
                        async move { Ok::<_, Infallible>(handle(&shared, request).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .keep_alive(true)
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        }
    }
}

async fn handle(shared: &Shared, request: Request<Incoming>) -> Response<Full<Bytes>> {
    let (parts, body) = request.into_parts();
    let raw = body
        .collect()
        .await
        .map(|b| b.to_bytes().to_vec())
        .unwrap_or_default();
    let headers: BTreeMap<String, String> = parts
        .headers
        .iter()
        .map(|(n, v)| {
            (
                n.as_str().to_owned(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let (status, answer_headers, body, hang) = process(
        shared,
        parts.method.as_str(),
        parts.uri.path(),
        parts.uri.query().unwrap_or_default(),
        &headers,
        &raw,
    );
    if let Some(hang) = hang {
        tokio::time::sleep(hang).await;
    }
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = hyper::StatusCode::from_u16(status).unwrap();
    for (name, value) in answer_headers {
        if let (Ok(name), Ok(value)) = (
            hyper::header::HeaderName::from_bytes(name.as_bytes()),
            hyper::header::HeaderValue::from_str(&value),
        ) {
            response.headers_mut().append(name, value);
        }
    }
    response
}

/// What is sent back: status, headers, body, and how long to hold it first.
type Sent = (u16, Vec<(String, String)>, Vec<u8>, Option<Duration>);

/// Checks, answers and records one request.
fn process(
    shared: &Shared,
    method: &str,
    path: &str,
    query: &str,
    headers: &BTreeMap<String, String>,
    raw: &[u8],
) -> Sent {
    const DOCS: &str = "https://docs.github.com/rest";
    let header = |name: &str| headers.get(name).map(String::as_str);
    let mut problems = Vec::new();
    let mut early: Option<Answer> = None;

    let no_user_agent = header("user-agent").is_none_or(|ua| ua.trim().is_empty());
    if no_user_agent {
        problems.push("no User-Agent header: GitHub refuses requests without one (403)".to_owned());
        early.get_or_insert(Answer {
            status: 403,
            body: None,
            headers: Vec::new(),
            problem: None,
            note: None,
        });
    }
    match header("authorization") {
        None => {
            problems.push(format!(
                "no Authorization header (`Bearer {TOKEN}` or `token {TOKEN}`)"
            ));
            early.get_or_insert(error(401, "Requires authentication", DOCS));
        }
        Some(value) => {
            let (scheme, token) = value.split_once(' ').unwrap_or((value, ""));
            let scheme_ok =
                scheme.eq_ignore_ascii_case("bearer") || scheme.eq_ignore_ascii_case("token");
            if !scheme_ok || token.trim() != shared.token {
                problems.push(format!(
                    "Authorization {value:?} is not `Bearer <token>` or `token <token>` with \
                     the fake's token {:?}",
                    shared.token
                ));
                early.get_or_insert(error(401, "Bad credentials", DOCS));
            }
        }
    }
    if let Some(accept) = header("accept") {
        for media in accept.split(',') {
            let media = media.split(';').next().unwrap_or_default().trim();
            let ok = matches!(media, "application/json" | "*/*" | "application/*")
                || media.starts_with("application/vnd.github.")
                || media == "application/vnd.github+json";
            if !ok {
                problems.push(format!(
                    "Accept names {media:?}: GitHub's REST API answers \
                     application/vnd.github+json (or application/json)"
                ));
            }
        }
    }
    if let Some(version) = header("x-github-api-version")
        && !API_VERSIONS.contains(&version)
    {
        problems.push(format!(
            "X-GitHub-Api-Version {version:?} is not one GitHub supports ({})",
            API_VERSIONS.join(", ")
        ));
        early.get_or_insert(error(
            400,
            &format!("API version {version} is not supported."),
            DOCS,
        ));
    }
    let body: Option<Value> = if raw.is_empty() {
        None
    } else {
        if let Some(content_type) = header("content-type")
            && !content_type.starts_with("application/json")
            && !content_type.starts_with("application/vnd.github")
        {
            problems.push(format!(
                "Content-Type {content_type:?} for a JSON body (application/json)"
            ));
        }
        match serde_json::from_slice(raw) {
            Ok(value) => Some(value),
            Err(e) => {
                problems.push(format!("the request body is not JSON: {e}"));
                early.get_or_insert(error(400, "Problems parsing JSON", DOCS));
                None
            }
        }
    };

    let spec = spec();
    let routed = lock(&shared.state)
        .unalias(path)
        .unwrap_or_else(|| path.to_owned());
    let query_pairs = parse_query(query);
    let mut op = None;
    let mut params = BTreeMap::new();
    match spec.route(method, &routed) {
        Route::NotFound => {
            problems.push(format!(
                "no operation of GitHub's REST API matches {method} {path}"
            ));
            early.get_or_insert(error(404, "Not Found", DOCS));
        }
        Route::WrongMethod(methods) => {
            problems.push(format!(
                "GitHub's REST API has no {method} {path} (that path takes {})",
                methods.join(", ")
            ));
            early.get_or_insert(error(404, "Not Found", DOCS));
        }
        Route::Found(found, found_params) => {
            let mut path_bad = false;
            problems.extend(spec.check_params(found, &found_params, &query_pairs, &mut path_bad));
            if path_bad {
                early.get_or_insert(error(404, "Not Found", &found.docs_url));
            }
            let body_problems = spec.check_body(found, body.as_ref());
            if !body_problems.is_empty() {
                early.get_or_insert(error(
                    422,
                    &format!("Invalid request.\n\n{}", body_problems.join("\n")),
                    &found.docs_url,
                ));
            }
            problems.extend(body_problems);
            op = Some(found);
            params = found_params;
        }
    }

    let fault = {
        let mut faults = lock(&shared.faults);
        let hit = faults.iter_mut().find(|rule| {
            (rule.method == "*" || rule.method == method)
                && (path.starts_with(&rule.prefix) || routed.starts_with(&rule.prefix))
        });
        let fault = hit.map(|rule| {
            rule.left -= 1;
            rule.fault.clone()
        });
        faults.retain(|rule| rule.left > 0);
        fault
    };
    let now = state::now();
    let mut rate_override = None;
    let mut hang = None;
    let answer = match fault {
        Some(Fault::RateLimited { reset_in_secs }) => {
            rate_override = Some((0, now + reset_in_secs));
            error(
                403,
                "API rate limit exceeded for user ID 1. If you reach out to GitHub Support for \
                 help, please include the request ID FAKE:0000:0000000:0000000:00000000 and \
                 timestamp 2025-01-01 00:00:00 UTC.",
                "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api",
            )
        }
        Some(Fault::SecondaryRateLimit { retry_after_secs }) => {
            let mut answer = error(
                403,
                "You have exceeded a secondary rate limit. Please wait a few minutes before you \
                 try again. If you reach out to GitHub Support for help, please include the \
                 request ID FAKE:0000:0000000:0000000:00000000.",
                "https://docs.github.com/free-pro-team@latest/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits",
            );
            answer
                .headers
                .push(("retry-after".to_owned(), retry_after_secs.to_string()));
            answer
        }
        Some(Fault::ServerError(status)) => error(status, "Server Error", DOCS),
        other => {
            if let Some(Fault::Hang(duration)) = other {
                hang = Some(duration);
            }
            match (early, op) {
                (Some(answer), _) => answer,
                (None, Some(op)) => {
                    let call = Call {
                        op,
                        params: &params,
                        query: &query_pairs,
                        body: body.as_ref(),
                        url: &shared.url,
                        path: &routed,
                    };
                    let answer = lock(&shared.state).answer(&call);
                    problems.extend(answer.note.clone());
                    if let Some(problem) = &answer.problem {
                        problems.push(problem.clone());
                    } else if (200..300).contains(&answer.status)
                        && let Some(body) = &answer.body
                    {
                        let strayed = spec.check_response(op, answer.status, body);
                        lock(&shared.answer_problems).extend(
                            strayed
                                .into_iter()
                                .map(|p| format!("{method} {path}?{query}: {p}")),
                        );
                    }
                    answer
                }
                (None, None) => error(404, "Not Found", DOCS),
            }
        }
    };

    let mut out_headers: Vec<(String, String)> = Vec::new();
    let mut out_body = Vec::new();
    let conditional = header("if-none-match").is_some();
    let mut status = answer.status;
    if let Some(body) = &answer.body {
        out_body = serde_json::to_vec(body).unwrap();
        out_headers.push((
            "content-type".to_owned(),
            "application/json; charset=utf-8".to_owned(),
        ));
    } else if status == 403 && no_user_agent {
        out_body = b"Request forbidden by administrative rules. Please make sure your request \
                     has a User-Agent header (https://docs.github.com/en/rest/overview/resources-in-the-rest-api#user-agent-required). \
                     Check https://developer.github.com for other possible causes.\n"
            .to_vec();
        out_headers.push(("content-type".to_owned(), "text/html".to_owned()));
    }
    if method == "GET" && status == 200 {
        use sha2::Digest;
        let hash: String = sha2::Sha256::digest(&out_body)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let etag = format!("\"{hash}\"");
        let matches = header("if-none-match").is_some_and(|tags| {
            tags.split(',')
                .map(|t| t.trim().trim_start_matches("W/"))
                .any(|t| t == etag || t == "*")
        });
        out_headers.push(("etag".to_owned(), etag));
        out_headers.push((
            "cache-control".to_owned(),
            "private, max-age=60, s-maxage=60".to_owned(),
        ));
        if matches {
            status = 304;
            out_body.clear();
            out_headers.retain(|(n, _)| n != "content-type");
        }
    }
    if status != 304 {
        out_headers.extend(answer.headers);
    }
    let (remaining, reset, used) = {
        let mut rate = lock(&shared.rate);
        if now >= rate.reset {
            rate.used = 0;
            rate.reset = now + 3600;
        }
        if status != 304 {
            rate.used += 1;
        }
        match rate_override {
            Some((remaining, reset)) => (remaining, reset, RATE_LIMIT),
            None => (
                RATE_LIMIT.saturating_sub(rate.used),
                rate.reset,
                rate.used.min(RATE_LIMIT),
            ),
        }
    };
    let n = lock(&shared.recorded).len() + 1;
    out_headers.extend([
        ("x-ratelimit-limit".to_owned(), RATE_LIMIT.to_string()),
        ("x-ratelimit-remaining".to_owned(), remaining.to_string()),
        ("x-ratelimit-reset".to_owned(), reset.to_string()),
        ("x-ratelimit-used".to_owned(), used.to_string()),
        ("x-ratelimit-resource".to_owned(), "core".to_owned()),
        (
            "x-github-request-id".to_owned(),
            format!("FAKE:{n:04X}:{:07X}:{:07X}:{now:08X}", n * 7, n * 13),
        ),
        (
            "x-github-media-type".to_owned(),
            "github.v3; format=json".to_owned(),
        ),
        (
            "x-github-api-version-selected".to_owned(),
            header("x-github-api-version")
                .filter(|v| API_VERSIONS.contains(v))
                .unwrap_or(API_VERSIONS[0])
                .to_owned(),
        ),
        (
            "vary".to_owned(),
            "Accept, Authorization, Cookie, X-GitHub-OTP".to_owned(),
        ),
    ]);

    let record = Recorded {
        method: method.to_owned(),
        path: path.to_owned(),
        query: query.to_owned(),
        operation_id: op.map(|op| op.id.clone()),
        valid: problems.is_empty(),
        problems,
        status,
        conditional,
        body,
    };
    lock(&shared.recorded).push(record);
    shared.seen.notify_all();
    (status, out_headers, out_body, hang)
}

/// A blocking HTTP/1.1 request to a loopback `http://` URL (`Connection: close`): status,
/// headers (names lowercased) and body.
pub fn http(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let rest = url
        .strip_prefix("http://")
        .unwrap_or_else(|| panic!("fake GitHub: not an http:// URL: {url}"));
    let (host, target) = match rest.find('/') {
        Some(at) => rest.split_at(at),
        None => (rest, "/"),
    };
    let mut stream = std::net::TcpStream::connect(host).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut request =
        format!("{method} {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    if let Some(body) = body {
        request.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    request.push_str("\r\n");
    let mut bytes = request.into_bytes();
    bytes.extend_from_slice(body.unwrap_or_default());
    stream.write_all(&bytes).unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).unwrap();
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| {
            panic!(
                "fake GitHub: no HTTP head in {:?}",
                String::from_utf8_lossy(&raw)
            )
        });
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut rest = raw[split + 4..].to_vec();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("fake GitHub: bad status line in {head:?}"));
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
    if chunked {
        let mut body = Vec::new();
        while let Some(end) = rest.windows(2).position(|w| w == b"\r\n") {
            let size_text = String::from_utf8_lossy(&rest[..end]).into_owned();
            let size =
                usize::from_str_radix(size_text.split(';').next().unwrap().trim(), 16).unwrap_or(0);
            if size == 0 {
                break;
            }
            body.extend_from_slice(&rest[end + 2..end + 2 + size]);
            rest = rest[end + 2 + size + 2..].to_vec();
        }
        rest = body;
    }
    (status, headers, rest)
}
