//! GitHub's adapter: [`Forge`] over GitHub's REST API (version 2022-11-28), through octocrab's
//! generic requests (`answer.rs` reads refusals, links and failures; `wire.rs` reads bodies).
//! No retries here: a failure is a typed [`ForgeError`] and the daemon backs off and retries.
//!
//! The reads the daemon repeats while it watches (an issue and its comments, a pull request,
//! its checks, reviews and line comments) are conditional: the last answer to each address
//! (each page its own) is kept in a bounded cache (`cache.rs`), sent back as `If-None-Match`,
//! and a `304 Not Modified` (free against GitHub's rate limit) is answered from it.
//!
//! People's permissions are asked for often (whoever comments may be asking for something
//! only a writer may): each answer is remembered for ten minutes (`permissions.rs`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use http::header::{ACCEPT, AUTHORIZATION, IF_NONE_MATCH, USER_AGENT};
use http::{HeaderMap, HeaderValue, Method, StatusCode};
use serde::de::DeserializeOwned;

use crate::{
    Check, Comment, Forge, ForgeError, Issue, LineComment, MergeMethod, Merged, NewPull,
    Permission, Polled, PullRequest, RepoRef, Review, Token,
};

mod answer;
mod cache;
mod permissions;
#[cfg(test)]
mod tests;
mod wire;

use answer::encode;
use cache::{Cache, Cached};
use permissions::Permissions;

/// At most this many pages are read for one list (100 items each).
const MAX_PAGES: usize = 10;
/// At most this many pages of an issue's events are read for who labeled it (the oldest 500).
const MAX_EVENT_PAGES: usize = 5;

/// What every request says it is (GitHub asks for a User-Agent that names the application).
const USER_AGENT_VALUE: &str = concat!("troupe/", env!("CARGO_PKG_VERSION"));

/// GitHub (github.com, or a GitHub Enterprise Server) through its REST API.
pub struct GitHub {
    octo: octocrab::Octocrab,
    /// The API's address (`https://api.github.com`, `https://ghe.example/api/v3`).
    base: http::Uri,
    /// Its path (`/api/v3`), or empty.
    base_path: String,
    web_host: String,
    /// `Bearer <token>`, marked sensitive.
    authorization: HeaderValue,
    timeout: Duration,
    sent: AtomicU64,
    /// Of those, the ones with `If-None-Match`.
    conditional: AtomicU64,
    /// Of those, the ones answered `304 Not Modified`.
    not_modified: AtomicU64,
    /// The last answers to the watcher's reads, by address.
    cache: Cache,
    /// People's permissions, by repository and login, for a while.
    permissions: Permissions,
}

impl std::fmt::Debug for GitHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GitHub")
            .field("api", &self.base.to_string())
            .field("web_host", &self.web_host)
            .field("timeout", &self.timeout)
            .field("requests_sent", &self.sent.load(Ordering::Relaxed))
            .field(
                "requests_conditional",
                &self.conditional.load(Ordering::Relaxed),
            )
            .field(
                "requests_not_modified",
                &self.not_modified.load(Ordering::Relaxed),
            )
            .field("answers_cached", &self.cache.len())
            .field("permissions_cached", &self.permissions.len())
            .finish_non_exhaustive()
    }
}

/// A 2xx (or, for a conditional request, 304) answer, read whole.
struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: String,
}

/// A read's answer (fresh, or remembered and not modified since): its body and the address of
/// its next page, as GitHub gave it.
struct Read {
    body: Arc<str>,
    next: Option<String>,
}

impl GitHub {
    /// GitHub's API at `api_base` (`https://api.github.com`; `https://HOST/api/v3` for GitHub
    /// Enterprise Server; a test server's `http://127.0.0.1:PORT`), whose repositories live on
    /// `web_host` (`github.com`), with the person's `token`; each request gets `timeout` to be
    /// answered. Must be called inside a tokio runtime, which then serves its requests
    /// (octocrab's client spawns its worker there).
    pub fn new(
        api_base: &str,
        web_host: &str,
        token: Token,
        timeout: Duration,
    ) -> Result<GitHub, ForgeError> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(ForgeError::Transport(
                "GitHub's client must be made inside a tokio runtime".to_string(),
            ));
        }
        let bad_base = || {
            ForgeError::Transport(format!(
                "{api_base:?} is not an API address (such as https://api.github.com)"
            ))
        };
        let base: http::Uri = api_base
            .trim()
            .trim_end_matches('/')
            .parse()
            .map_err(|_| bad_base())?;
        if !matches!(base.scheme_str(), Some("http" | "https")) || base.authority().is_none() {
            return Err(bad_base());
        }
        if base.query().is_some() {
            return Err(bad_base());
        }
        let base_path = base.path().trim_end_matches('/').to_string();
        let secret = token.expose().trim();
        if secret.is_empty() {
            return Err(ForgeError::Credential(
                "the GitHub token is empty".to_string(),
            ));
        }
        let mut authorization =
            HeaderValue::from_str(&format!("Bearer {secret}")).map_err(|_| {
                ForgeError::Credential(
                    "the GitHub token holds characters an HTTP header cannot carry".to_string(),
                )
            })?;
        authorization.set_sensitive(true);
        // No personal_token: the adapter sets the header itself (marked sensitive), and
        // octocrab's own would panic on such characters. Only the connection's setup is bounded
        // at the socket: a read timeout there would also end idle pooled connections; each
        // exchange as a whole is bounded in `send`.
        let octo = octocrab::Octocrab::builder()
            .base_uri(base.clone())
            .map_err(|_| bad_base())?
            .set_connect_timeout(Some(timeout))
            .build()
            .map_err(|e| answer::unanswered("making GitHub's client", &e))?;
        Ok(GitHub {
            octo,
            base,
            base_path,
            web_host: web_host.to_string(),
            authorization,
            timeout,
            sent: AtomicU64::new(0),
            conditional: AtomicU64::new(0),
            not_modified: AtomicU64::new(0),
            cache: Cache::new(cache::MAX_ENTRIES, cache::MAX_BYTES),
            permissions: Permissions::new(permissions::TTL, permissions::MAX_ENTRIES),
        })
    }

    /// How many of the requests sent had `If-None-Match` (the watcher's reads of what was read
    /// before, and the polls given a validator).
    pub fn requests_conditional(&self) -> u64 {
        self.conditional.load(Ordering::Relaxed)
    }

    /// The request for `path_and_query` (below the API's base), with the headers every request
    /// carries (octocrab adds `X-GitHub-Api-Version`) and `If-None-Match` when `etag` is given.
    fn request(
        &self,
        method: Method,
        path_and_query: &str,
        body: Option<&serde_json::Value>,
        etag: Option<&str>,
    ) -> Result<http::Request<octocrab::OctoBody>, ForgeError> {
        let mut builder = http::Request::builder()
            .method(method)
            .uri(path_and_query)
            .header(ACCEPT, "application/vnd.github+json")
            .header(USER_AGENT, USER_AGENT_VALUE)
            .header(AUTHORIZATION, self.authorization.clone());
        if let Some(etag) = etag {
            let value = HeaderValue::from_str(etag).map_err(|_| {
                ForgeError::BadAnswer(format!("the validator {etag:?} cannot be sent back"))
            })?;
            builder = builder.header(IF_NONE_MATCH, value);
        }
        self.octo.build_request(builder, body).map_err(|_| {
            ForgeError::BadAnswer(format!("the request {path_and_query:?} could not be made"))
        })
    }

    /// Sends one request and reads its answer; a non-2xx answer (but a 304 to a conditional
    /// request) is the error it says. `what` names what was asked for, in errors.
    async fn send(
        &self,
        method: Method,
        path_and_query: &str,
        body: Option<&serde_json::Value>,
        etag: Option<&str>,
        what: &str,
    ) -> Result<Answer, ForgeError> {
        let request = self.request(method.clone(), path_and_query, body, etag)?;
        self.sent.fetch_add(1, Ordering::Relaxed);
        if etag.is_some() {
            self.conditional.fetch_add(1, Ordering::Relaxed);
        }
        let exchange = async {
            let response = self.octo.execute(request).await?;
            let status = response.status();
            let headers = response.headers().clone();
            let body = self.octo.body_to_string(response).await;
            Ok::<_, octocrab::Error>((status, headers, body))
        };
        let (status, headers, body) = match tokio::time::timeout(self.timeout, exchange).await {
            Err(_) => {
                tracing::debug!(%method, path = path_and_query, "GitHub did not answer in time");
                return Err(ForgeError::Timeout(format!(
                    "{what}: no answer within {:.1} s",
                    self.timeout.as_secs_f64()
                )));
            }
            Ok(Err(e)) => return Err(answer::unanswered(what, &e)),
            Ok(Ok(answered)) => answered,
        };
        tracing::debug!(%method, path = path_and_query, status = status.as_u16(), "GitHub answered");
        let body = match body {
            Ok(body) => body,
            Err(octocrab::Error::InvalidUtf8 { .. }) => {
                return Err(ForgeError::BadAnswer(format!(
                    "{what}: GitHub's answer to {method} {path_and_query} is not UTF-8"
                )));
            }
            Err(e) => return Err(answer::unanswered(what, &e)),
        };
        if status == StatusCode::NOT_MODIFIED && etag.is_some() {
            self.not_modified.fetch_add(1, Ordering::Relaxed);
        }
        if status.is_success() || (status == StatusCode::NOT_MODIFIED && etag.is_some()) {
            return Ok(Answer {
                status,
                headers,
                body,
            });
        }
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Err(answer::refusal(what, status.as_u16(), &headers, &body, now))
    }

    /// Reads an answer's body as `T`.
    fn parse<T: DeserializeOwned>(body: &str, what: &str) -> Result<T, ForgeError> {
        serde_json::from_str(body).map_err(|e| {
            ForgeError::BadAnswer(format!(
                "{what}: GitHub's answer is not what its API says: {e}"
            ))
        })
    }

    /// One of the watcher's reads: a `GET` of `path_and_query`, conditional on the last answer
    /// to it when there is one (then a 304 is that answer). A successful answer with an `ETag`
    /// replaces the remembered one (one without, forgets it).
    async fn read(&self, path_and_query: &str, what: &str) -> Result<Read, ForgeError> {
        let cached = self.cache.get(path_and_query);
        let etag = cached.as_ref().map(|c| c.etag.as_str());
        let answer = self
            .send(Method::GET, path_and_query, None, etag, what)
            .await?;
        if answer.status == StatusCode::NOT_MODIFIED {
            // `send` lets a 304 through only when a validator was sent, that is, from `cached`.
            let Some(cached) = cached else {
                return Err(ForgeError::BadAnswer(format!(
                    "{what}: GitHub answered 304 Not Modified to an unconditional request"
                )));
            };
            tracing::trace!(
                path = path_and_query,
                "GitHub: not modified, answered from the cache"
            );
            return Ok(Read {
                body: cached.body,
                next: cached.next,
            });
        }
        let next = answer::next_link(&answer.headers);
        let body: Arc<str> = Arc::from(answer.body);
        let fresh_etag = answer
            .headers
            .get(http::header::ETAG)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|e| !e.is_empty());
        match fresh_etag {
            Some(etag) => self.cache.put(
                path_and_query,
                Cached {
                    etag: etag.to_string(),
                    body: body.clone(),
                    next: next.clone(),
                },
            ),
            None => self.cache.remove(path_and_query),
        }
        Ok(Read { body, next })
    }

    /// One of the watcher's reads (see [`GitHub::read`]), as `T`.
    async fn get<T: DeserializeOwned>(
        &self,
        path_and_query: &str,
        what: &str,
    ) -> Result<T, ForgeError> {
        let read = self.read(path_and_query, what).await?;
        Self::parse(&read.body, what)
    }

    async fn write<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: serde_json::Value,
        what: &str,
    ) -> Result<T, ForgeError> {
        let answer = self.send(method, path, Some(&body), None, what).await?;
        Self::parse(&answer.body, what)
    }

    /// Every page of a list (following `Link: rel="next"`, at most [`MAX_PAGES`]), each page's
    /// items read by `items`; each page is one of the watcher's reads (see [`GitHub::read`]).
    async fn pages<P: DeserializeOwned, T>(
        &self,
        first: String,
        what: &str,
        items: impl Fn(P) -> Vec<T>,
    ) -> Result<Vec<T>, ForgeError> {
        self.pages_at_most(first, MAX_PAGES, what, items).await
    }

    /// The first `max_pages` pages of a list (see [`GitHub::pages`]).
    async fn pages_at_most<P: DeserializeOwned, T>(
        &self,
        first: String,
        max_pages: usize,
        what: &str,
        items: impl Fn(P) -> Vec<T>,
    ) -> Result<Vec<T>, ForgeError> {
        let mut all = Vec::new();
        let mut next = Some(first);
        for _ in 0..max_pages {
            let Some(path) = next.take() else { break };
            let read = self.read(&path, what).await?;
            all.extend(items(Self::parse::<P>(&read.body, what)?));
            next = match read.next {
                None => None,
                Some(url) => Some(
                    answer::below_base(&url, &self.base, &self.base_path).ok_or_else(|| {
                        ForgeError::BadAnswer(format!("{what}: the next page is elsewhere ({url})"))
                    })?,
                ),
            };
        }
        Ok(all)
    }

    /// One page of a list, unless unchanged since `etag`.
    async fn poll<J: DeserializeOwned, T>(
        &self,
        path_and_query: &str,
        etag: Option<&str>,
        what: &str,
        convert: impl Fn(J) -> T,
    ) -> Result<Polled<Vec<T>>, ForgeError> {
        let answer = self
            .send(Method::GET, path_and_query, None, etag, what)
            .await?;
        if answer.status == StatusCode::NOT_MODIFIED {
            return Ok(Polled::NotModified);
        }
        let items: Vec<J> = Self::parse(&answer.body, what)?;
        let etag = answer
            .headers
            .get(http::header::ETAG)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        Ok(Polled::Changed {
            items: items.into_iter().map(convert).collect(),
            etag,
        })
    }
}

/// `/repos/OWNER/NAME`.
fn repo_path(repo: &RepoRef) -> String {
    format!("/repos/{}/{}", encode(&repo.owner), encode(&repo.name))
}

#[async_trait::async_trait]
impl Forge for GitHub {
    fn kind(&self) -> &'static str {
        "github"
    }

    fn web_host(&self) -> &str {
        &self.web_host
    }

    fn requests_sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    fn requests_not_modified(&self) -> u64 {
        self.not_modified.load(Ordering::Relaxed)
    }

    async fn issue(&self, repo: &RepoRef, number: u64) -> Result<Issue, ForgeError> {
        let what = format!("issue {repo}#{number}");
        let issue: wire::IssueJson = self
            .get(&format!("{}/issues/{number}", repo_path(repo)), &what)
            .await?;
        Ok(issue.into())
    }

    async fn issue_comments(
        &self,
        repo: &RepoRef,
        number: u64,
    ) -> Result<Vec<Comment>, ForgeError> {
        let what = format!("the comments of {repo}#{number}");
        let first = format!("{}/issues/{number}/comments?per_page=100", repo_path(repo));
        self.pages(first, &what, |page: Vec<wire::CommentJson>| {
            page.into_iter()
                .map(|c| c.into_comment(Some(number)))
                .collect()
        })
        .await
    }

    async fn comment(
        &self,
        repo: &RepoRef,
        number: u64,
        body: &str,
    ) -> Result<Comment, ForgeError> {
        let what = format!("a comment on {repo}#{number}");
        let comment: wire::CommentJson = self
            .write(
                Method::POST,
                &format!("{}/issues/{number}/comments", repo_path(repo)),
                serde_json::json!({ "body": body }),
                &what,
            )
            .await?;
        Ok(comment.into_comment(Some(number)))
    }

    async fn open_pull(&self, repo: &RepoRef, pull: &NewPull) -> Result<PullRequest, ForgeError> {
        let what = format!(
            "a pull request from {} into {} of {repo}",
            pull.head, pull.base
        );
        let opened: wire::PullJson = self
            .write(
                Method::POST,
                &format!("{}/pulls", repo_path(repo)),
                serde_json::json!({
                    "title": pull.title,
                    "head": pull.head,
                    "base": pull.base,
                    "body": pull.body,
                    "draft": pull.draft,
                }),
                &what,
            )
            .await?;
        Ok(opened.into())
    }

    async fn find_open_pull(
        &self,
        repo: &RepoRef,
        head: &str,
    ) -> Result<Option<PullRequest>, ForgeError> {
        let what = format!("the open pull requests from {head} of {repo}");
        let path = format!(
            "{}/pulls?state=open&head={}&per_page=10",
            repo_path(repo),
            encode(&format!("{}:{head}", repo.owner))
        );
        // Not one of the watcher's reads: asked before opening, always afresh.
        let answer = self.send(Method::GET, &path, None, None, &what).await?;
        let pulls: Vec<wire::PullJson> = Self::parse(&answer.body, &what)?;
        Ok(pulls.into_iter().next().map(PullRequest::from))
    }

    async fn update_pull_body(
        &self,
        repo: &RepoRef,
        number: u64,
        body: &str,
    ) -> Result<PullRequest, ForgeError> {
        let what = format!("pull request {repo}#{number}");
        let updated: wire::PullJson = self
            .write(
                Method::PATCH,
                &format!("{}/pulls/{number}", repo_path(repo)),
                serde_json::json!({ "body": body }),
                &what,
            )
            .await?;
        Ok(updated.into())
    }

    async fn pull(&self, repo: &RepoRef, number: u64) -> Result<PullRequest, ForgeError> {
        let what = format!("pull request {repo}#{number}");
        let pull: wire::PullJson = self
            .get(&format!("{}/pulls/{number}", repo_path(repo)), &what)
            .await?;
        Ok(pull.into())
    }

    async fn checks(&self, repo: &RepoRef, sha: &str) -> Result<Vec<Check>, ForgeError> {
        let commit = format!("{}/commits/{}", repo_path(repo), encode(sha));
        let what = format!("the check runs of {sha} in {repo}");
        let runs = self
            .pages(
                format!("{commit}/check-runs?per_page=100"),
                &what,
                |page: wire::CheckRunsJson| page.check_runs,
            )
            .await?;
        let mut checks = Vec::with_capacity(runs.len());
        for run in runs {
            let annotations = if run.wants_annotations() {
                let what = format!("the annotations of check run {} in {repo}", run.id);
                self.pages(
                    format!(
                        "{}/check-runs/{}/annotations?per_page=100",
                        repo_path(repo),
                        run.id
                    ),
                    &what,
                    |page: Vec<wire::AnnotationJson>| page.into_iter().map(Into::into).collect(),
                )
                .await?
            } else {
                Vec::new()
            };
            checks.push(run.into_check(annotations));
        }
        let what = format!("the commit statuses of {sha} in {repo}");
        let combined: wire::CombinedStatusJson =
            self.get(&format!("{commit}/status"), &what).await?;
        checks.extend(combined.into_checks());
        Ok(checks)
    }

    async fn reviews(&self, repo: &RepoRef, number: u64) -> Result<Vec<Review>, ForgeError> {
        let what = format!("the reviews of {repo}#{number}");
        let first = format!("{}/pulls/{number}/reviews?per_page=100", repo_path(repo));
        self.pages(first, &what, |page: Vec<wire::ReviewJson>| {
            page.into_iter().map(Into::into).collect()
        })
        .await
    }

    async fn line_comments(
        &self,
        repo: &RepoRef,
        number: u64,
    ) -> Result<Vec<LineComment>, ForgeError> {
        let what = format!("the review comments of {repo}#{number}");
        let first = format!("{}/pulls/{number}/comments?per_page=100", repo_path(repo));
        self.pages(first, &what, |page: Vec<wire::LineCommentJson>| {
            page.into_iter().map(Into::into).collect()
        })
        .await
    }

    async fn merge(
        &self,
        repo: &RepoRef,
        number: u64,
        sha: &str,
        method: MergeMethod,
    ) -> Result<Merged, ForgeError> {
        let what = format!("merging {repo}#{number} at {sha}");
        let merge_method = match method {
            MergeMethod::Merge => "merge",
            MergeMethod::Squash => "squash",
            MergeMethod::Rebase => "rebase",
        };
        let merged: wire::MergedJson = self
            .write(
                Method::PUT,
                &format!("{}/pulls/{number}/merge", repo_path(repo)),
                serde_json::json!({ "sha": sha, "merge_method": merge_method }),
                &what,
            )
            .await?;
        Ok(merged.into())
    }

    async fn poll_labeled(
        &self,
        repo: &RepoRef,
        label: &str,
        etag: Option<&str>,
    ) -> Result<Polled<Vec<Issue>>, ForgeError> {
        let what = format!("the open issues labeled {label:?} in {repo}");
        let path = format!(
            "{}/issues?labels={}&state=open&sort=created&direction=desc&per_page=50",
            repo_path(repo),
            encode(label)
        );
        self.poll(&path, etag, &what, |issue: wire::IssueJson| issue.into())
            .await
    }

    async fn poll_comments(
        &self,
        repo: &RepoRef,
        since: Option<&str>,
        etag: Option<&str>,
    ) -> Result<Polled<Vec<Comment>>, ForgeError> {
        let what = format!("the issue comments of {repo}");
        let mut path = format!(
            "{}/issues/comments?sort=updated&direction=asc&per_page=100",
            repo_path(repo)
        );
        if let Some(since) = since {
            path.push_str(&format!("&since={}", encode(since)));
        }
        self.poll(&path, etag, &what, |c: wire::CommentJson| {
            c.into_comment(None)
        })
        .await
    }

    async fn permission(&self, repo: &RepoRef, login: &str) -> Result<Permission, ForgeError> {
        let full = repo.to_string();
        if let Some(known) = self.permissions.get(&full, login, Instant::now()) {
            return Ok(known);
        }
        let what = format!("the permission of {login} in {repo}");
        let path = format!(
            "{}/collaborators/{}/permission",
            repo_path(repo),
            encode(login)
        );
        // Not one of the watcher's reads: remembered here for a while instead.
        let permission = match self.send(Method::GET, &path, None, None, &what).await {
            Ok(answer) => Self::parse::<wire::PermissionJson>(&answer.body, &what)?.permission(),
            // Not a collaborator, or no such account.
            Err(ForgeError::NotFound(_)) => Permission::None,
            Err(e) => return Err(e),
        };
        self.permissions
            .put(&full, login, permission, Instant::now());
        Ok(permission)
    }

    async fn labeled_by(
        &self,
        repo: &RepoRef,
        number: u64,
        label: &str,
    ) -> Result<Option<String>, ForgeError> {
        let what = format!("the events of {repo}#{number}");
        let first = format!("{}/issues/{number}/events?per_page=100", repo_path(repo));
        let events = self
            .pages_at_most(
                first,
                MAX_EVENT_PAGES,
                &what,
                |page: Vec<wire::IssueEventJson>| page,
            )
            .await?;
        Ok(wire::last_labeled_by(events, label))
    }
}
