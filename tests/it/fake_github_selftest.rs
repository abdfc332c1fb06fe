//! The fake GitHub's own tests: a client's whole round (issue, comment, pull request on a real
//! bare repository, checks, statuses, reviews, merge) passes its checks; bad bodies, unknown
//! query parameters and unknown paths are each caught and named; conditional requests, faults,
//! pagination and signed webhooks behave as GitHub's.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

use crate::fake_github::{Annotation, FakeGitHub, Fault, http, state};

const REPO: &str = "acme/widgets";

/// A request as a well-behaved client sends it: status, headers, JSON body (`Null` when empty).
fn call(
    github: &FakeGitHub,
    method: &str,
    path: &str,
    body: Option<Value>,
    extra: &[(&str, &str)],
) -> (u16, Vec<(String, String)>, Value) {
    let auth = format!("Bearer {}", github.token);
    let mut headers = vec![
        ("Authorization", auth.as_str()),
        ("User-Agent", "troupe-fake-github-selftest"),
        ("Accept", "application/vnd.github+json"),
        ("X-GitHub-Api-Version", "2022-11-28"),
    ];
    if body.is_some() {
        headers.push(("Content-Type", "application/json"));
    }
    headers.extend_from_slice(extra);
    let bytes = body.map(|b| serde_json::to_vec(&b).unwrap());
    let url = if path.starts_with("http") {
        path.to_owned()
    } else {
        format!("{}{path}", github.url)
    };
    let (status, headers, raw) = http(method, &url, &headers, bytes.as_deref());
    let value = if raw.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&raw)
            .unwrap_or_else(|e| panic!("{method} {path}: not JSON ({e}): {raw:?}"))
    };
    (status, headers, value)
}

fn header<'h>(headers: &'h [(String, String)], name: &str) -> Option<&'h str> {
    headers
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

fn git(dir: &Path, args: &[&str]) -> String {
    let output = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args([
            "-c",
            "user.name=Dev",
            "-c",
            "user.email=dev@example.com",
            "-c",
            "commit.gpgsign=false",
        ])
        .args(args)
        .env_remove("GIT_DIR")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

/// A bare repository with `main` (one commit) and `feature` (one more), pushed from a clone.
fn bare_repo(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let bare = dir.join("widgets.git");
    let work = dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    git(
        dir,
        &[
            "init",
            "--quiet",
            "--bare",
            "-b",
            "main",
            bare.to_str().unwrap(),
        ],
    );
    git(&work, &["init", "--quiet", "-b", "main"]);
    std::fs::write(work.join("README.md"), "widgets\n").unwrap();
    git(&work, &["add", "."]);
    git(&work, &["commit", "--quiet", "-m", "first"]);
    git(&work, &["remote", "add", "origin", bare.to_str().unwrap()]);
    git(&work, &["push", "--quiet", "origin", "main"]);
    git(&work, &["checkout", "--quiet", "-b", "feature"]);
    std::fs::write(work.join("src.txt"), "one\ntwo\n").unwrap();
    git(&work, &["add", "."]);
    git(&work, &["commit", "--quiet", "-m", "add src"]);
    git(&work, &["push", "--quiet", "origin", "feature"]);
    (bare, work)
}

#[test]
#[cfg_attr(
    not(troupe_test_tools),
    ignore = "needs GitHub's OpenAPI description, which scripts/test installs (tests/forge-fixtures): run with TROUPE_TEST_TOOLS=1"
)]
fn fake_github_accepts_a_clients_whole_round_and_answers_like_github() {
    let dir = tempfile::tempdir().unwrap();
    let (bare, work) = bare_repo(dir.path());
    let github = FakeGitHub::start();
    github.add_repo(REPO, Some(&bare));
    let issue = github.add_issue(
        REPO,
        "Widgets break",
        "They do.",
        &["troupe"],
        "alice",
        "MEMBER",
    );
    github.add_issue(REPO, "Unrelated", "", &["other"], "bob", "NONE");

    // The issue, and the labelled list (newest first).
    let (status, _, body) = call(
        &github,
        "GET",
        &format!("/repos/{REPO}/issues/{issue}"),
        None,
        &[],
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["number"], issue);
    assert_eq!(body["title"], "Widgets break");
    assert_eq!(body["user"]["login"], "alice");
    assert_eq!(body["author_association"], "MEMBER");
    assert_eq!(body["labels"][0]["name"], "troupe");
    assert_eq!(
        body["html_url"],
        format!("https://github.com/{REPO}/issues/{issue}")
    );
    assert!(body.get("pull_request").is_none(), "{body}");
    let (status, _, list) = call(
        &github,
        "GET",
        &format!(
            "/repos/{REPO}/issues?labels=troupe&state=open&sort=created&direction=desc&per_page=50"
        ),
        None,
        &[],
    );
    assert_eq!(status, 200);
    assert_eq!(list.as_array().unwrap().len(), 1, "{list}");

    // A comment, then the issue's comments and the repository's since a time.
    let since = state::iso(state::now() - 5);
    github.add_issue_comment(REPO, issue, "alice", "MEMBER", "@troupe please fix");
    let (status, headers, comment) = call(
        &github,
        "POST",
        &format!("/repos/{REPO}/issues/{issue}/comments"),
        Some(json!({ "body": "On it." })),
        &[],
    );
    assert_eq!(status, 201, "{comment}");
    assert_eq!(comment["user"]["login"], github.login);
    // Ids past 32 bits, as GitHub's comment ids are.
    assert!(comment["id"].as_u64().unwrap() > u64::try_from(i32::MAX).unwrap());
    assert!(header(&headers, "location").is_some());
    let (_, _, comments) = call(
        &github,
        "GET",
        &format!("/repos/{REPO}/issues/{issue}/comments?per_page=100"),
        None,
        &[],
    );
    assert_eq!(comments.as_array().unwrap().len(), 2);
    assert_eq!(comments[1]["body"], "On it.");
    let (_, _, recent) = call(
        &github,
        "GET",
        &format!(
            "/repos/{REPO}/issues/comments?since={since}&sort=updated&direction=asc&per_page=100"
        ),
        None,
        &[],
    );
    assert_eq!(recent.as_array().unwrap().len(), 2, "{recent}");
    assert_eq!(github.issue_comments(REPO, issue).len(), 2);

    // A pull request from the pushed branch: the next number, its head from the bare repository.
    let (status, _, pull) = call(
        &github,
        "POST",
        &format!("/repos/{REPO}/pulls"),
        Some(json!({
            "title": "Fix widgets", "head": "feature", "base": "main",
            "body": format!("Fixes #{issue}"), "draft": false,
        })),
        &[],
    );
    assert_eq!(status, 201, "{pull}");
    let number = pull["number"].as_u64().unwrap();
    assert_eq!(number, 3);
    let head = git(&bare, &["rev-parse", "refs/heads/feature"]);
    assert_eq!(pull["head"]["sha"], head.as_str());
    assert_eq!(pull["head"]["ref"], "feature");
    assert_eq!(pull["base"]["ref"], "main");
    assert_eq!(pull["commits"], 1);
    assert_eq!(pull["mergeable"], true);
    // A second one for the same head is refused like GitHub refuses it.
    let (status, _, refused) = call(
        &github,
        "POST",
        &format!("/repos/{REPO}/pulls"),
        Some(json!({ "title": "Again", "head": "acme:feature", "base": "main" })),
        &[],
    );
    assert_eq!(status, 422, "{refused}");
    assert!(
        refused["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("A pull request already exists for acme:feature"),
        "{refused}"
    );
    // A push moves the head.
    std::fs::write(work.join("src.txt"), "one\ntwo\nthree\n").unwrap();
    git(&work, &["commit", "--quiet", "-am", "more"]);
    git(&work, &["push", "--quiet", "origin", "feature"]);
    let head = git(&bare, &["rev-parse", "refs/heads/feature"]);
    let (_, _, pull) = call(
        &github,
        "GET",
        &format!("/repos/{REPO}/pulls/{number}"),
        None,
        &[],
    );
    assert_eq!(pull["head"]["sha"], head.as_str());
    assert_eq!(pull["commits"], 2);
    let (_, _, open) = call(
        &github,
        "GET",
        &format!("/repos/{REPO}/pulls?state=open&head=acme:feature"),
        None,
        &[],
    );
    assert_eq!(open[0]["number"], number, "{open}");
    let (_, _, issues) = call(
        &github,
        "GET",
        &format!("/repos/{REPO}/issues?state=all"),
        None,
        &[],
    );
    assert_eq!(issues[0]["number"], number);
    assert!(issues[0]["pull_request"]["url"].is_string(), "{issues}");
    let (status, _, _) = call(
        &github,
        "PATCH",
        &format!("/repos/{REPO}/pulls/{number}"),
        Some(json!({ "body": "Fixes the widgets." })),
        &[],
    );
    assert_eq!(status, 200);
    assert_eq!(github.pulls(REPO)[0]["body"], "Fixes the widgets.");

    // Checks, with annotations, and commit statuses.
    let run = github.set_check_run(
        REPO,
        &head,
        "test",
        "completed",
        Some("failure"),
        "1 failing",
        "widgets::spin failed",
        "assertion failed",
        &[Annotation::new("src.txt", 2, "failure", "expected three")],
    );
    github.set_status(REPO, &head, "ci/lint", "success", "clean");
    let (_, _, runs) = call(
        &github,
        "GET",
        &format!("/repos/{REPO}/commits/{head}/check-runs?per_page=100"),
        None,
        &[],
    );
    assert_eq!(runs["total_count"], 1, "{runs}");
    assert_eq!(runs["check_runs"][0]["id"], run);
    assert_eq!(runs["check_runs"][0]["conclusion"], "failure");
    assert_eq!(runs["check_runs"][0]["output"]["annotations_count"], 1);
    assert_eq!(runs["check_runs"][0]["pull_requests"][0]["number"], number);
    // By branch name too (a multi-segment ref).
    let (_, _, by_branch) = call(
        &github,
        "GET",
        &format!("/repos/{REPO}/commits/heads/feature/check-runs"),
        None,
        &[],
    );
    assert_eq!(by_branch["total_count"], 1, "{by_branch}");
    let (_, _, annotations) = call(
        &github,
        "GET",
        &format!("/repos/{REPO}/check-runs/{run}/annotations"),
        None,
        &[],
    );
    assert_eq!(annotations[0]["message"], "expected three");
    assert_eq!(annotations[0]["annotation_level"], "failure");
    let (_, _, combined) = call(
        &github,
        "GET",
        &format!("/repos/{REPO}/commits/{head}/status"),
        None,
        &[],
    );
    assert_eq!(combined["state"], "success");
    assert_eq!(combined["statuses"][0]["context"], "ci/lint");

    // Reviews and line comments.
    github.add_review(
        REPO,
        number,
        "carol",
        "MEMBER",
        "CHANGES_REQUESTED",
        "Not yet.",
        &head,
    );
    github.add_review_comment(
        REPO,
        number,
        "carol",
        "MEMBER",
        "src.txt",
        3,
        "Why three?",
        &head,
    );
    let (_, _, reviews) = call(
        &github,
        "GET",
        &format!("/repos/{REPO}/pulls/{number}/reviews"),
        None,
        &[],
    );
    assert_eq!(reviews.as_array().unwrap().len(), 1);
    assert_eq!(reviews[0]["state"], "CHANGES_REQUESTED");
    let (_, _, line_comments) = call(
        &github,
        "GET",
        &format!("/repos/{REPO}/pulls/{number}/comments"),
        None,
        &[],
    );
    assert_eq!(line_comments[0]["line"], 3);
    assert_eq!(line_comments[0]["pull_request_review_id"], reviews[0]["id"]);

    // Merging: a stale sha is 409, a refused one 405, then a real merge commit on main.
    let (status, _, _) = call(
        &github,
        "PUT",
        &format!("/repos/{REPO}/pulls/{number}/merge"),
        Some(json!({ "sha": "0000000000000000000000000000000000000000", "merge_method": "merge" })),
        &[],
    );
    assert_eq!(status, 409);
    github.set_mergeable(REPO, number, false);
    let (status, _, _) = call(
        &github,
        "PUT",
        &format!("/repos/{REPO}/pulls/{number}/merge"),
        Some(json!({ "sha": head, "merge_method": "merge" })),
        &[],
    );
    assert_eq!(status, 405);
    github.set_mergeable(REPO, number, true);
    let (status, _, merged) = call(
        &github,
        "PUT",
        &format!("/repos/{REPO}/pulls/{number}/merge"),
        Some(json!({ "sha": head, "merge_method": "merge", "commit_title": "Fix widgets (#3)" })),
        &[],
    );
    assert_eq!(status, 200, "{merged}");
    assert_eq!(merged["merged"], true);
    let main = git(&bare, &["rev-parse", "refs/heads/main"]);
    assert_eq!(merged["sha"], main.as_str());
    assert_eq!(git(&bare, &["rev-parse", "main^2"]), head);
    assert_eq!(
        git(&bare, &["log", "-1", "--format=%s", "main"]),
        "Fix widgets (#3)"
    );
    let (_, _, pull) = call(
        &github,
        "GET",
        &format!("/repos/{REPO}/pulls/{number}"),
        None,
        &[],
    );
    assert_eq!(pull["merged"], true);
    assert_eq!(pull["state"], "closed");
    assert_eq!(pull["merge_commit_sha"], main.as_str());

    github.assert_all_valid();
    assert!(
        github.answer_problems().is_empty(),
        "the fake's answers strayed from the description:\n{}",
        github.answer_problems().join("\n")
    );
    let recorded = github.requests();
    assert!(recorded.iter().all(|r| r.operation_id.is_some()));
    assert_eq!(recorded[0].operation_id.as_deref(), Some("issues/get"));
}

#[test]
#[cfg_attr(
    not(troupe_test_tools),
    ignore = "needs GitHub's OpenAPI description, which scripts/test installs (tests/forge-fixtures): run with TROUPE_TEST_TOOLS=1"
)]
fn fake_github_names_what_is_wrong_with_a_request() {
    let github = FakeGitHub::start();
    eprintln!(
        "fake GitHub: the description was read in {:?}",
        crate::fake_github::spec::spec().load_time
    );
    github.add_repo(REPO, None);

    // A body without `head`: GitHub's 422, and the problem names `head`.
    let (status, _, body) = call(
        &github,
        "POST",
        &format!("/repos/{REPO}/pulls"),
        Some(json!({ "title": "x", "base": "main" })),
        &[],
    );
    assert_eq!(status, 422, "{body}");
    // A draft that is not a boolean.
    call(
        &github,
        "POST",
        &format!("/repos/{REPO}/pulls"),
        Some(json!({ "title": "x", "head": "f", "base": "main", "draft": "yes" })),
        &[],
    );
    // A property the description does not have.
    call(
        &github,
        "POST",
        &format!("/repos/{REPO}/pulls"),
        Some(json!({ "title": "x", "head": "f", "base": "main", "drafts": true })),
        &[],
    );
    // An unknown query parameter, an enum value GitHub does not take, per_page over 100: all
    // still answered.
    let (status, _, _) = call(
        &github,
        "GET",
        &format!("/repos/{REPO}/issues?label=bug&state=opened&per_page=500&since=yesterday"),
        None,
        &[],
    );
    assert_eq!(status, 200);
    // A path GitHub does not have, a method it does not take there, a non-integer number.
    let (status, _, body) = call(&github, "GET", &format!("/repos/{REPO}/issuez"), None, &[]);
    assert_eq!(status, 404);
    assert_eq!(body["message"], "Not Found");
    let (status, _, _) = call(
        &github,
        "DELETE",
        &format!("/repos/{REPO}/pulls"),
        None,
        &[],
    );
    assert_eq!(status, 404);
    let (status, _, _) = call(
        &github,
        "GET",
        &format!("/repos/{REPO}/issues/abc"),
        None,
        &[],
    );
    assert_eq!(status, 404);
    // Bad credentials and a missing User-Agent.
    let (status, _, body) = call(
        &github,
        "GET",
        &format!("/repos/{REPO}/issues"),
        None,
        &[("Authorization", "Bearer nope")],
    );
    assert_eq!(status, 401);
    assert_eq!(body["message"], "Bad credentials");
    let (status, _, _) = http(
        "GET",
        &format!("{}/repos/{REPO}/issues", github.url),
        &[("Authorization", &format!("token {}", github.token))],
        None,
    );
    assert_eq!(status, 403);
    // A head filter without its owner, which GitHub ignores.
    let (status, _, _) = call(
        &github,
        "GET",
        &format!("/repos/{REPO}/pulls?head=f"),
        None,
        &[],
    );
    assert_eq!(status, 200);

    let invalid = github.invalid_requests();
    let problems: Vec<String> = invalid.iter().map(|r| r.problems.join(" | ")).collect();
    assert_eq!(invalid.len(), 10, "{problems:#?}");
    let has = |i: usize, needle: &str| {
        assert!(
            problems[i].contains(needle),
            "request {i} should name {needle:?}: {}",
            problems[i]
        );
    };
    has(0, "\"head\" is a required property");
    has(1, "/draft");
    has(1, "boolean");
    has(2, "unknown property `drafts`");
    has(3, "unknown query parameter `label`");
    has(3, "query parameter `state`=\"opened\"");
    has(3, "per_page");
    has(3, "query parameter `since`=\"yesterday\"");
    has(
        4,
        "no operation of GitHub's REST API matches GET /repos/acme/widgets/issuez",
    );
    has(5, "has no DELETE");
    has(6, "path parameter `issue_number`");
    has(7, "Authorization");
    has(8, "User-Agent");
    has(9, "`head`=\"f\" lacks its `user:`");
    assert_eq!(
        invalid[3].operation_id.as_deref(),
        Some("issues/list-for-repo")
    );
    assert_eq!(invalid[4].operation_id, None);
    assert!(invalid.iter().all(|r| !r.valid));

    // The fake holds its own answers to the description's response schemas too.
    let spec = crate::fake_github::spec::spec();
    let strayed = spec.check_response(
        spec.op("issues/get"),
        200,
        &json!({ "number": "one", "title": null }),
    );
    assert!(
        strayed.iter().any(|p| p.contains("/number"))
            && strayed.iter().any(|p| p.contains("\"user\"")),
        "{strayed:#?}"
    );
}

#[test]
#[cfg_attr(
    not(troupe_test_tools),
    ignore = "needs GitHub's OpenAPI description, which scripts/test installs (tests/forge-fixtures): run with TROUPE_TEST_TOOLS=1"
)]
fn fake_github_answers_conditional_requests_faults_and_pages_like_github() {
    let github = FakeGitHub::start();
    github.add_repo(REPO, None);
    for n in 0..5 {
        github.add_issue(
            REPO,
            &format!("issue {n}"),
            "",
            &["troupe"],
            "alice",
            "NONE",
        );
    }
    let path = format!("/repos/{REPO}/issues/1");

    // ETag and If-None-Match: a 304 without a body that costs no rate limit.
    let (status, headers, _) = call(&github, "GET", &path, None, &[]);
    assert_eq!(status, 200);
    let etag = header(&headers, "etag").unwrap().to_owned();
    let remaining: u64 = header(&headers, "x-ratelimit-remaining")
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(header(&headers, "x-ratelimit-limit"), Some("5000"));
    assert_eq!(header(&headers, "x-ratelimit-resource"), Some("core"));
    let (status, headers, body) = call(&github, "GET", &path, None, &[("If-None-Match", &etag)]);
    assert_eq!(status, 304);
    assert_eq!(body, Value::Null);
    assert_eq!(
        header(&headers, "x-ratelimit-remaining")
            .unwrap()
            .parse::<u64>()
            .unwrap(),
        remaining
    );
    // A change makes the ETag stale.
    github.add_issue_comment(REPO, 1, "bob", "NONE", "me too");
    let (status, headers, _) = call(&github, "GET", &path, None, &[("If-None-Match", &etag)]);
    assert_eq!(status, 200);
    assert_eq!(
        header(&headers, "x-ratelimit-remaining")
            .unwrap()
            .parse::<u64>()
            .unwrap(),
        remaining - 1
    );
    let recorded = github.requests();
    assert!(recorded[1].conditional && recorded[1].status == 304);

    // Faults: served the given number of times, then gone.
    github.fail_next(
        "GET",
        &format!("/repos/{REPO}/issues"),
        Fault::RateLimited { reset_in_secs: 30 },
        1,
    );
    let (status, headers, body) = call(&github, "GET", &path, None, &[]);
    assert_eq!(status, 403);
    assert_eq!(header(&headers, "x-ratelimit-remaining"), Some("0"));
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .starts_with("API rate limit exceeded")
    );
    let (status, _, _) = call(&github, "GET", &path, None, &[]);
    assert_eq!(status, 200);
    github.fail_next(
        "*",
        "/repos/",
        Fault::SecondaryRateLimit {
            retry_after_secs: 7,
        },
        1,
    );
    let (status, headers, _) = call(&github, "GET", &path, None, &[]);
    assert_eq!(status, 403);
    assert_eq!(header(&headers, "retry-after"), Some("7"));
    github.fail_next("GET", "/repos/", Fault::ServerError(502), 2);
    assert_eq!(call(&github, "GET", &path, None, &[]).0, 502);
    assert_eq!(call(&github, "GET", &path, None, &[]).0, 502);
    assert_eq!(call(&github, "GET", &path, None, &[]).0, 200);
    github.fail_next("GET", "/repos/", Fault::Hang(Duration::from_millis(300)), 1);
    let started = std::time::Instant::now();
    assert_eq!(call(&github, "GET", &path, None, &[]).0, 200);
    assert!(started.elapsed() >= Duration::from_millis(300));

    // Pages: a Link header to follow as it is.
    let (status, headers, first) = call(
        &github,
        "GET",
        &format!("/repos/{REPO}/issues?labels=troupe&per_page=2"),
        None,
        &[],
    );
    assert_eq!(status, 200);
    assert_eq!(first.as_array().unwrap().len(), 2);
    let link = header(&headers, "link").unwrap();
    assert!(
        link.contains("rel=\"next\"") && link.contains("rel=\"last\""),
        "{link}"
    );
    let next = link
        .split(", ")
        .find(|l| l.ends_with("rel=\"next\""))
        .unwrap();
    let next = &next[1..next.find('>').unwrap()];
    let (status, headers, second) = call(&github, "GET", next, None, &[]);
    assert_eq!(status, 200, "{second}");
    assert_eq!(second[0]["number"], 3, "{second}");
    assert!(header(&headers, "link").unwrap().contains("rel=\"prev\""));

    let waited = github.wait_for("the second page", Duration::from_secs(5), |r| {
        r.iter().any(|r| r.path.starts_with("/repositories/"))
    });
    assert!(
        waited.iter().all(|r| r.valid),
        "{:#?}",
        github.invalid_requests()
    );
    assert!(
        github.answer_problems().is_empty(),
        "{:#?}",
        github.answer_problems()
    );
}

#[test]
#[cfg_attr(
    not(troupe_test_tools),
    ignore = "needs GitHub's OpenAPI description, which scripts/test installs (tests/forge-fixtures): run with TROUPE_TEST_TOOLS=1"
)]
fn fake_github_answers_its_other_operations_as_the_description_says() {
    let github = FakeGitHub::start();
    github.add_repo(REPO, None);
    let sha = state::fake_sha("somewhere");
    let run = github.set_check_run(REPO, &sha, "lint", "in_progress", None, "", "", "", &[]);

    let (status, _, repo) = call(&github, "GET", &format!("/repos/{REPO}"), None, &[]);
    assert_eq!(status, 200);
    assert_eq!(repo["full_name"], REPO);
    assert_eq!(repo["default_branch"], "main");
    let (status, _, user) = call(&github, "GET", "/user", None, &[]);
    assert_eq!(status, 200);
    assert_eq!(user["login"], github.login);
    let (status, _, issue) = call(
        &github,
        "POST",
        &format!("/repos/{REPO}/issues"),
        Some(json!({ "title": "New", "body": "text", "labels": ["bug"] })),
        &[],
    );
    assert_eq!(status, 201, "{issue}");
    let n = issue["number"].as_u64().unwrap();
    let (status, _, labels) = call(
        &github,
        "POST",
        &format!("/repos/{REPO}/issues/{n}/labels"),
        Some(json!({ "labels": ["troupe"] })),
        &[],
    );
    assert_eq!(status, 200, "{labels}");
    assert_eq!(labels.as_array().unwrap().len(), 2);
    let (status, _, labels) = call(
        &github,
        "DELETE",
        &format!("/repos/{REPO}/issues/{n}/labels/bug"),
        None,
        &[],
    );
    assert_eq!(status, 200, "{labels}");
    assert_eq!(labels[0]["name"], "troupe");
    let (status, _, closed) = call(
        &github,
        "PATCH",
        &format!("/repos/{REPO}/issues/{n}"),
        Some(json!({ "state": "closed", "state_reason": "not_planned" })),
        &[],
    );
    assert_eq!(status, 200, "{closed}");
    assert_eq!(closed["state"], "closed");
    assert_eq!(closed["state_reason"], "not_planned");
    let (_, _, comment) = call(
        &github,
        "POST",
        &format!("/repos/{REPO}/issues/{n}/comments"),
        Some(json!({ "body": "first" })),
        &[],
    );
    let id = comment["id"].as_u64().unwrap();
    let (status, _, edited) = call(
        &github,
        "PATCH",
        &format!("/repos/{REPO}/issues/comments/{id}"),
        Some(json!({ "body": "edited" })),
        &[],
    );
    assert_eq!(status, 200);
    assert_eq!(edited["body"], "edited");
    let (status, _, got) = call(
        &github,
        "GET",
        &format!("/repos/{REPO}/issues/comments/{id}"),
        None,
        &[],
    );
    assert_eq!((status, got["body"].as_str()), (200, Some("edited")));
    let (status, _, check) = call(
        &github,
        "GET",
        &format!("/repos/{REPO}/check-runs/{run}"),
        None,
        &[],
    );
    assert_eq!(status, 200);
    assert_eq!(check["status"], "in_progress");
    assert_eq!(check["completed_at"], Value::Null);
    let (status, _, combined) = call(
        &github,
        "GET",
        &format!("/repos/{REPO}/commits/{sha}/status"),
        None,
        &[],
    );
    assert_eq!((status, combined["state"].as_str()), (200, Some("pending")));
    let (status, _, _) = call(
        &github,
        "DELETE",
        &format!("/repos/{REPO}/issues/comments/{id}"),
        None,
        &[],
    );
    assert_eq!(status, 204);
    // Unknown repositories and numbers are GitHub's 404s, and valid requests all the same.
    assert_eq!(
        call(&github, "GET", "/repos/acme/nothing/issues/1", None, &[]).0,
        404
    );
    assert_eq!(
        call(
            &github,
            "GET",
            &format!("/repos/{REPO}/pulls/{n}"),
            None,
            &[]
        )
        .0,
        404
    );

    github.assert_all_valid();
    assert!(
        github.answer_problems().is_empty(),
        "{:#?}",
        github.answer_problems()
    );
    // An operation the fake does not implement: the description's example, and a problem.
    let (status, _, _) = call(
        &github,
        "GET",
        &format!("/repos/{REPO}/branches"),
        None,
        &[],
    );
    assert_eq!(status, 200);
    let invalid = github.invalid_requests();
    assert_eq!(invalid.len(), 1);
    assert!(
        invalid[0].problems[0].contains("does not implement GET /repos/{owner}/{repo}/branches"),
        "{:?}",
        invalid[0].problems
    );
}

#[test]
#[cfg_attr(
    not(troupe_test_tools),
    ignore = "needs GitHub's OpenAPI description, which scripts/test installs (tests/forge-fixtures): run with TROUPE_TEST_TOOLS=1"
)]
fn fake_github_squashes_and_rebases_in_the_bare_repository() {
    let dir = tempfile::tempdir().unwrap();
    let (bare, work) = bare_repo(dir.path());
    git(&work, &["checkout", "--quiet", "-b", "other", "main"]);
    std::fs::write(work.join("other.txt"), "other\n").unwrap();
    git(&work, &["add", "."]);
    git(&work, &["commit", "--quiet", "-m", "add other"]);
    git(&work, &["push", "--quiet", "origin", "other"]);
    let github = FakeGitHub::start();
    github.add_repo(REPO, Some(&bare));
    let open = |head: &str| {
        let (status, _, pull) = call(
            &github,
            "POST",
            &format!("/repos/{REPO}/pulls"),
            Some(json!({ "title": format!("From {head}"), "head": head, "base": "main" })),
            &[],
        );
        assert_eq!(status, 201, "{pull}");
        (
            pull["number"].as_u64().unwrap(),
            pull["head"]["sha"].as_str().unwrap().to_owned(),
        )
    };
    let (first, first_head) = open("feature");
    let (second, second_head) = open("other");

    let (status, _, merged) = call(
        &github,
        "PUT",
        &format!("/repos/{REPO}/pulls/{first}/merge"),
        Some(json!({ "sha": first_head, "merge_method": "squash" })),
        &[],
    );
    assert_eq!(status, 200, "{merged}");
    let squashed = git(&bare, &["rev-parse", "main"]);
    assert_eq!(merged["sha"], squashed.as_str());
    // One parent: a squash.
    assert_eq!(
        git(&bare, &["log", "-1", "--format=%P", "main"])
            .split_whitespace()
            .count(),
        1
    );
    assert_eq!(
        git(&bare, &["log", "-1", "--format=%s", "main"]),
        format!("From feature (#{first})")
    );
    assert_eq!(git(&bare, &["show", "main:src.txt"]), "one\ntwo");

    let (status, _, merged) = call(
        &github,
        "PUT",
        &format!("/repos/{REPO}/pulls/{second}/merge"),
        Some(json!({ "sha": second_head, "merge_method": "rebase" })),
        &[],
    );
    assert_eq!(status, 200, "{merged}");
    assert_eq!(git(&bare, &["rev-parse", "main^"]), squashed);
    assert_eq!(
        git(&bare, &["log", "-1", "--format=%s|%an|%cn", "main"]),
        "add other|Dev|GitHub"
    );
    assert_eq!(git(&bare, &["show", "main:other.txt"]), "other");
    github.assert_all_valid();
}

#[test]
#[cfg_attr(
    not(troupe_test_tools),
    ignore = "needs GitHub's OpenAPI description, which scripts/test installs (tests/forge-fixtures): run with TROUPE_TEST_TOOLS=1"
)]
fn fake_github_signs_webhooks_as_github_does() {
    use hmac::{KeyInit, Mac};

    let github = FakeGitHub::start();
    let delivery = github.webhook("issue_comment", Some("created"), "s3cret", |payload| {
        payload["repository"]["full_name"] = json!(REPO);
        payload["comment"]["body"] = json!("@troupe go");
    });
    assert_eq!(delivery.event, "issue_comment");
    assert_eq!(delivery.header("X-GitHub-Event"), Some("issue_comment"));
    assert_eq!(
        delivery.header("X-GitHub-Delivery"),
        Some(delivery.delivery_id.as_str())
    );
    assert!(
        delivery
            .header("User-Agent")
            .unwrap()
            .starts_with("GitHub-Hookshot/")
    );
    let payload: Value = serde_json::from_slice(&delivery.body).unwrap();
    assert_eq!(payload["action"], "created");
    assert_eq!(payload["comment"]["body"], "@troupe go");
    let signature = delivery.header("X-Hub-Signature-256").unwrap();
    let hex = signature.strip_prefix("sha256=").unwrap();
    let bytes: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect();
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(b"s3cret").unwrap();
    mac.update(&delivery.body);
    mac.verify_slice(&bytes).unwrap();
    let other = github.webhook("issue_comment", Some("created"), "s3cret", |_| {});
    assert_ne!(other.delivery_id, delivery.delivery_id);

    // Sending it: to a listener that answers 202.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = std::thread::spawn(move || {
        use std::io::{BufRead, BufReader, Read, Write};
        let (stream, _) = listener.accept().unwrap();
        let mut reader = BufReader::new(stream);
        let mut length = 0;
        let mut head = Vec::new();
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            if line == "\r\n" {
                break;
            }
            if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = value.trim().parse().unwrap();
            }
            head.push(line);
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
        reader
            .get_mut()
            .write_all(b"HTTP/1.1 202 Accepted\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
            .unwrap();
        (head, body)
    });
    let (status, answer) = delivery.send(&format!("http://127.0.0.1:{port}/hooks/github"));
    assert_eq!((status, answer.as_str()), (202, "ok"));
    let (head, body) = server.join().unwrap();
    assert!(
        head[0].starts_with("POST /hooks/github HTTP/1.1"),
        "{head:?}"
    );
    assert_eq!(body, delivery.body);
}
