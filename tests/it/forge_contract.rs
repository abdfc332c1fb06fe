//! The GitHub adapter (`troupe_forge::GitHub`) against the fake GitHub: every call of the
//! `Forge` trait once, each of GitHub's refusals made the right typed error, and not one request
//! that GitHub's OpenAPI description does not allow.

use std::path::Path;
use std::time::Duration;

use troupe_forge::{
    Association, CheckState, Forge, ForgeError, GitHub, MergeMethod, NewPull, Permission, Polled,
    RepoRef, ReviewState, Token,
};

use crate::fake_github::{Annotation, FakeGitHub, Fault, LOGIN};
use crate::support::git;

const REPO: &str = "octo/hello";
/// A branch name with a slash: it must stay one query value.
const BRANCH: &str = "troupe/fix-7";
/// A repository with an issue of many comments.
const BUSY: &str = "octo/busy";

/// A bare repository with `main` and [`BRANCH`] (one commit ahead) pushed by the git CLI;
/// returns the branch's head.
fn bare_repository(dir: &Path) -> String {
    let bare = dir.join("hello.git");
    git(
        dir,
        &[
            "init",
            "--quiet",
            "--bare",
            "--initial-branch=main",
            bare.to_str().unwrap(),
        ],
    );
    let work = dir.join("work");
    git(
        dir,
        &[
            "clone",
            "--quiet",
            bare.to_str().unwrap(),
            work.to_str().unwrap(),
        ],
    );
    let commit = |message: &str| {
        git(
            &work,
            &[
                "-c",
                "user.name=Ada",
                "-c",
                "user.email=ada@example.com",
                "-c",
                "commit.gpgsign=false",
                "commit",
                "--quiet",
                "-m",
                message,
            ],
        )
    };
    git(&work, &["checkout", "--quiet", "-B", "main"]);
    std::fs::write(work.join("README.md"), "hello\n").unwrap();
    git(&work, &["add", "README.md"]);
    commit("Start");
    git(&work, &["push", "--quiet", "origin", "main"]);
    git(&work, &["checkout", "--quiet", "-b", BRANCH]);
    std::fs::write(work.join("login.rs"), "fn login() {}\n").unwrap();
    git(&work, &["add", "login.rs"]);
    commit("Fix the login");
    git(&work, &["push", "--quiet", "origin", BRANCH]);
    git(&work, &["rev-parse", "HEAD"])
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn the_github_adapter_does_every_call_as_github_s_description_says() {
    let fake = FakeGitHub::start();
    let dir = tempfile::tempdir().unwrap();
    let head = bare_repository(dir.path());
    fake.add_repo(REPO, Some(&dir.path().join("hello.git")));
    let repo = RepoRef::parse(REPO).unwrap();

    let issue = fake.add_issue(
        REPO,
        "The login fails",
        "Steps: …",
        &["troupe", "bug"],
        "ada",
        "OWNER",
    );
    fake.add_issue_comment(REPO, issue, "bo", "CONTRIBUTOR", "Me too");
    fake.add_issue_comment(REPO, issue, "ada", "OWNER", "Please look");
    // More comments than one page holds: the adapter follows the Link header.
    // (In a repository of their own: the polls below read one page.)
    fake.add_repo(BUSY, None);
    let busy = fake.add_issue(BUSY, "Busy", "", &[], "cy", "MEMBER");
    for i in 0..120 {
        fake.add_issue_comment(BUSY, busy, "cy", "MEMBER", &format!("comment {i}"));
    }

    runtime().block_on(async {
        let github = GitHub::new(
            &fake.url,
            "github.com",
            Token::new(fake.token.clone()),
            Duration::from_secs(20),
        )
        .unwrap();
        assert_eq!((github.kind(), github.web_host()), ("github", "github.com"));

        // Issues and their conversation.
        let got = github.issue(&repo, issue).await.unwrap();
        assert_eq!(got.number, issue);
        assert_eq!(got.title, "The login fails");
        assert_eq!(got.body, "Steps: …");
        assert_eq!(got.state, "open");
        assert_eq!(
            (got.author.as_str(), got.association),
            ("ada", Association::Owner)
        );
        assert!(
            got.labels.contains(&"troupe".to_string()),
            "{:?}",
            got.labels
        );
        assert!(!got.is_pull);
        let comments = github.issue_comments(&repo, issue).await.unwrap();
        let bodies: Vec<_> = comments.iter().map(|c| c.body.as_str()).collect();
        assert_eq!(bodies, ["Me too", "Please look"]);
        assert!(comments.iter().all(|c| c.issue_number == issue));
        assert_eq!(comments[0].association, Association::Contributor);
        let many = github
            .issue_comments(&RepoRef::parse(BUSY).unwrap(), busy)
            .await
            .unwrap();
        assert_eq!(many.len(), 120);
        assert_eq!(
            (many[0].body.as_str(), many[119].body.as_str()),
            ("comment 0", "comment 119")
        );
        let said = github.comment(&repo, issue, "On it.").await.unwrap();
        assert_eq!(
            (said.body.as_str(), said.author.as_str(), said.issue_number),
            ("On it.", LOGIN, issue)
        );
        assert_eq!(fake.issue_comments(REPO, issue).len(), 3);

        // Pull requests.
        assert_eq!(github.find_open_pull(&repo, BRANCH).await.unwrap(), None);
        let opened = github
            .open_pull(
                &repo,
                &NewPull {
                    head: BRANCH.to_string(),
                    base: "main".to_string(),
                    title: "Fix the login".to_string(),
                    body: "Fixes #1".to_string(),
                    draft: false,
                },
            )
            .await
            .unwrap();
        assert_eq!(
            (opened.head_ref.as_str(), opened.head_sha.as_str()),
            (BRANCH, head.as_str())
        );
        assert_eq!(
            (opened.base_ref.as_str(), opened.state.as_str()),
            ("main", "open")
        );
        assert!(!opened.merged && !opened.draft);
        let found = github
            .find_open_pull(&repo, BRANCH)
            .await
            .unwrap()
            .expect("the open pull request");
        assert_eq!(
            (found.number, found.head_sha.as_str()),
            (opened.number, head.as_str())
        );
        let updated = github
            .update_pull_body(&repo, opened.number, "Fixes #1\n\nTests pass.")
            .await
            .unwrap();
        assert_eq!(updated.number, opened.number);
        let pulls = fake.pulls(REPO);
        assert!(
            pulls.iter().any(|p| p["body"] == "Fixes #1\n\nTests pass."),
            "{pulls:?}"
        );
        let pull = github.pull(&repo, opened.number).await.unwrap();
        assert_eq!(
            (pull.number, pull.head_sha.as_str()),
            (opened.number, head.as_str())
        );
        // Seen through the issues API, it is a pull request.
        assert!(github.issue(&repo, opened.number).await.unwrap().is_pull);

        // Checks: a failed run with annotations, a green one, one running, a failing status.
        fake.set_check_run(
            REPO,
            &head,
            "test",
            "completed",
            Some("failure"),
            "2 tests failed",
            "login::works failed",
            "assertion failed: ok",
            &[Annotation::new(
                "login.rs",
                1,
                "failure",
                "assertion failed: ok",
            )],
        );
        fake.set_check_run(
            REPO,
            &head,
            "lint",
            "completed",
            Some("success"),
            "Clean",
            "",
            "",
            &[],
        );
        fake.set_check_run(REPO, &head, "build", "in_progress", None, "", "", "", &[]);
        fake.set_status(REPO, &head, "ci/legacy", "failure", "legacy CI failed");
        let checks = github.checks(&repo, &head).await.unwrap();
        let check = |name: &str| {
            checks
                .iter()
                .find(|c| c.name == name)
                .unwrap_or_else(|| panic!("no check {name} in {checks:?}"))
        };
        let test = check("test");
        assert_eq!(
            (test.state, test.kind.as_str(), test.conclusion.as_str()),
            (CheckState::Failure, "check_run", "failure")
        );
        assert!(test.id.is_some());
        for part in [
            "2 tests failed",
            "login::works failed",
            "assertion failed: ok",
        ] {
            assert!(test.text.contains(part), "{}", test.text);
        }
        assert_eq!(test.annotations.len(), 1, "{test:?}");
        let note = &test.annotations[0];
        assert_eq!(
            (note.path.as_str(), note.start_line, note.level.as_str()),
            ("login.rs", 1, "failure")
        );
        assert!(note.message.contains("assertion failed: ok"), "{note:?}");
        assert_eq!(check("lint").state, CheckState::Success);
        assert!(check("lint").annotations.is_empty());
        assert_eq!(check("build").state, CheckState::Pending);
        let legacy = check("ci/legacy");
        assert_eq!(
            (legacy.state, legacy.kind.as_str(), legacy.id),
            (CheckState::Failure, "status", None)
        );
        assert_eq!(legacy.text, "legacy CI failed");
        // Only the failed run's annotations were asked for.
        let annotation_reads = fake
            .requests()
            .iter()
            .filter(|r| r.path.ends_with("/annotations"))
            .count();
        assert_eq!(annotation_reads, 1);

        // Reviews and line comments.
        fake.add_review(
            REPO,
            opened.number,
            "cy",
            "MEMBER",
            "CHANGES_REQUESTED",
            "Please test the error path",
            &head,
        );
        fake.add_review_comment(
            REPO,
            opened.number,
            "cy",
            "MEMBER",
            "login.rs",
            1,
            "What if it fails?",
            &head,
        );
        let reviews = github.reviews(&repo, opened.number).await.unwrap();
        let review = reviews
            .iter()
            .find(|r| r.author == "cy")
            .expect("cy's review");
        assert_eq!(
            (review.state, review.association),
            (ReviewState::ChangesRequested, Association::Member)
        );
        assert_eq!(
            (review.body.as_str(), review.commit_id.as_str()),
            ("Please test the error path", head.as_str())
        );
        let lines = github.line_comments(&repo, opened.number).await.unwrap();
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert_eq!(
            (
                lines[0].path.as_str(),
                lines[0].line,
                lines[0].body.as_str()
            ),
            ("login.rs", Some(1), "What if it fails?")
        );
        assert_eq!(lines[0].commit_id, head);

        // Polling: changed with a validator, then not modified when sent back.
        let Polled::Changed { items, etag } =
            github.poll_labeled(&repo, "troupe", None).await.unwrap()
        else {
            panic!("the first poll has items")
        };
        assert!(items.iter().any(|i| i.number == issue), "{items:?}");
        assert!(
            items
                .iter()
                .all(|i| i.labels.contains(&"troupe".to_string()))
        );
        let etag = etag.expect("an ETag");
        assert_eq!(
            github
                .poll_labeled(&repo, "troupe", Some(&etag))
                .await
                .unwrap(),
            Polled::NotModified
        );
        let Polled::Changed { items, etag } =
            github.poll_comments(&repo, None, None).await.unwrap()
        else {
            panic!("the first poll has items")
        };
        let bodies: Vec<_> = items.iter().map(|c| c.body.as_str()).collect();
        assert_eq!(bodies, ["Me too", "Please look", "On it."]);
        assert!(items.iter().all(|c| c.issue_number == issue));
        let etag = etag.expect("an ETag");
        assert_eq!(
            github
                .poll_comments(&repo, None, Some(&etag))
                .await
                .unwrap(),
            Polled::NotModified
        );
        let since = github
            .poll_comments(&repo, Some("2000-01-01T00:00:00Z"), None)
            .await
            .unwrap();
        assert!(matches!(since, Polled::Changed { .. }), "{since:?}");
        let conditional: Vec<_> = fake
            .requests()
            .into_iter()
            .filter(|r| r.conditional)
            .collect();
        assert_eq!(conditional.len(), 2);
        assert!(conditional.iter().all(|r| r.status == 304));

        // Merging, only at the head it was given.
        let merged = github
            .merge(&repo, opened.number, &head, MergeMethod::Merge)
            .await
            .unwrap();
        assert!(merged.merged, "{merged:?}");
        assert!(!merged.sha.is_empty());
        let after = github.pull(&repo, opened.number).await.unwrap();
        assert!(after.merged && after.state == "closed", "{after:?}");

        // What is not there.
        let missing = github.issue(&repo, 9999).await.unwrap_err();
        assert!(
            matches!(&missing, ForgeError::NotFound(what) if what.contains("#9999")),
            "{missing:?}"
        );
        assert!(!missing.retryable());

        // GitHub's refusals, each the error the daemon backs off from.
        let issue_path = format!("/repos/{REPO}/issues/{issue}");
        fake.fail_next(
            "GET",
            &issue_path,
            Fault::RateLimited { reset_in_secs: 120 },
            1,
        );
        let e = github.issue(&repo, issue).await.unwrap_err();
        assert!(
            matches!(
                e,
                ForgeError::RateLimited {
                    retry_after_secs: 100..=121,
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(e.retryable());
        fake.fail_next(
            "GET",
            &issue_path,
            Fault::SecondaryRateLimit {
                retry_after_secs: 30,
            },
            1,
        );
        let e = github.issue(&repo, issue).await.unwrap_err();
        assert_eq!(e.retry_after_secs(), Some(30), "{e:?}");
        assert!(e.retryable());
        fake.fail_next(
            "POST",
            &format!("{issue_path}/comments"),
            Fault::ServerError(502),
            1,
        );
        let e = github.comment(&repo, issue, "again").await.unwrap_err();
        assert!(matches!(e, ForgeError::Server { status: 502, .. }), "{e:?}");
        assert!(e.retryable());
        fake.fail_next("GET", &issue_path, Fault::ServerError(503), 1);
        let e = github.issue(&repo, issue).await.unwrap_err();
        assert!(matches!(e, ForgeError::Server { status: 503, .. }), "{e:?}");
        // And after the faults, it answers again.
        assert_eq!(github.issue(&repo, issue).await.unwrap().number, issue);

        // No answer within the adapter's time.
        let impatient = GitHub::new(
            &fake.url,
            "github.com",
            Token::new(fake.token.clone()),
            Duration::from_millis(300),
        )
        .unwrap();
        fake.fail_next("GET", &issue_path, Fault::Hang(Duration::from_secs(2)), 1);
        let e = impatient.issue(&repo, issue).await.unwrap_err();
        assert!(matches!(e, ForgeError::Timeout(_)), "{e:?}");
        assert!(e.retryable());

        // Nothing listening: the connection fails.
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let nowhere = format!("http://{}", closed.local_addr().unwrap());
        drop(closed);
        let unreachable = GitHub::new(
            &nowhere,
            "github.com",
            Token::new(fake.token.clone()),
            Duration::from_secs(5),
        )
        .unwrap();
        let e = unreachable.issue(&repo, issue).await.unwrap_err();
        assert!(matches!(e, ForgeError::Transport(_)), "{e:?}");
        assert!(e.retryable());
        assert_eq!(unreachable.requests_sent(), 1);

        // Every request was counted, and each error names no secret.
        assert_eq!(
            github.requests_sent() + impatient.requests_sent(),
            fake.requests().len() as u64
        );
        assert!(!format!("{e} {e:?} {github:?}").contains(&fake.token));
    });

    let invalid = fake.invalid_requests();
    assert!(
        invalid.is_empty(),
        "requests GitHub's description does not allow:\n{}",
        invalid
            .iter()
            .map(|r| r.summary())
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// The requests recorded after the first `from`.
fn since(fake: &FakeGitHub, from: usize) -> Vec<crate::fake_github::Recorded> {
    fake.requests().into_iter().skip(from).collect()
}

#[test]
fn the_watcher_s_reads_are_conditional_and_free_while_nothing_changes() {
    let fake = FakeGitHub::start();
    let dir = tempfile::tempdir().unwrap();
    let head = bare_repository(dir.path());
    fake.add_repo(REPO, Some(&dir.path().join("hello.git")));
    let repo = RepoRef::parse(REPO).unwrap();
    fake.add_repo(BUSY, None);
    let busy_repo = RepoRef::parse(BUSY).unwrap();
    let busy = fake.add_issue(BUSY, "Busy", "", &[], "cy", "MEMBER");
    for i in 0..120 {
        fake.add_issue_comment(BUSY, busy, "cy", "MEMBER", &format!("comment {i}"));
    }

    runtime().block_on(async {
        let github = GitHub::new(
            &fake.url,
            "github.com",
            Token::new(fake.token.clone()),
            Duration::from_secs(20),
        )
        .unwrap();
        let pull = github
            .open_pull(
                &repo,
                &NewPull {
                    head: BRANCH.to_string(),
                    base: "main".to_string(),
                    title: "Fix the login".to_string(),
                    body: "Fixes #1".to_string(),
                    draft: false,
                },
            )
            .await
            .unwrap();
        let number = pull.number;
        fake.set_check_run(
            REPO,
            &head,
            "test",
            "completed",
            Some("failure"),
            "1 test failed",
            "login::works failed",
            "",
            &[Annotation::new(
                "login.rs",
                1,
                "failure",
                "assertion failed",
            )],
        );
        fake.set_check_run(
            REPO,
            &head,
            "lint",
            "completed",
            Some("success"),
            "Clean",
            "",
            "",
            &[],
        );
        fake.set_status(REPO, &head, "ci/legacy", "pending", "queued");
        fake.add_review(
            REPO,
            number,
            "cy",
            "MEMBER",
            "COMMENTED",
            "Looks close",
            &head,
        );
        fake.add_review_comment(
            REPO,
            number,
            "cy",
            "MEMBER",
            "login.rs",
            1,
            "What if it fails?",
            &head,
        );

        // One look of the watcher: the pull request, its checks (check runs, the failed run's
        // annotations, the combined status), reviews and line comments.
        let look = || async {
            let pull = github.pull(&repo, number).await.unwrap();
            let checks = github.checks(&repo, &head).await.unwrap();
            let reviews = github.reviews(&repo, number).await.unwrap();
            let lines = github.line_comments(&repo, number).await.unwrap();
            (pull, checks, reviews, lines)
        };

        // The first look asks afresh.
        let mark = fake.requests().len();
        let first = look().await;
        let sent = since(&fake, mark);
        assert_eq!(sent.len(), 6, "{sent:#?}");
        assert!(
            sent.iter()
                .all(|r| r.method == "GET" && !r.conditional && r.status == 200),
            "{sent:#?}"
        );
        assert_eq!(first.1.len(), 3, "{:?}", first.1);
        assert_eq!(first.2.len(), 1, "{:?}", first.2);
        assert_eq!(first.3.len(), 1, "{:?}", first.3);
        assert_eq!(github.requests_not_modified(), 0);

        // Nothing changed: every read is conditional, answered 304, and the answers are the
        // same.
        let mark = fake.requests().len();
        let second = look().await;
        let sent = since(&fake, mark);
        assert_eq!(sent.len(), 6, "{sent:#?}");
        assert!(
            sent.iter().all(|r| r.conditional && r.status == 304),
            "{sent:#?}"
        );
        assert_eq!(second, first);
        assert_eq!(github.requests_not_modified(), 6);
        assert_eq!(github.requests_conditional(), 6);

        // Each change shows in the next look; what did not change is still 304.
        fake.set_check_run(
            REPO,
            &head,
            "test",
            "completed",
            Some("success"),
            "All tests pass",
            "",
            "",
            &[],
        );
        fake.add_review(REPO, number, "ada", "OWNER", "APPROVED", "Ship it", &head);
        let mark = fake.requests().len();
        let third = look().await;
        let sent = since(&fake, mark);
        let status_of = |sent: &[crate::fake_github::Recorded], suffix: &str| {
            let r = sent
                .iter()
                .find(|r| r.path.ends_with(suffix))
                .unwrap_or_else(|| panic!("no request for {suffix} in {sent:#?}"));
            assert!(r.conditional, "{}", r.summary());
            r.status
        };
        assert_eq!(status_of(&sent, &format!("/pulls/{number}")), 304);
        assert_eq!(status_of(&sent, "/check-runs"), 200);
        assert_eq!(status_of(&sent, "/status"), 304);
        assert_eq!(status_of(&sent, "/reviews"), 200);
        assert_eq!(status_of(&sent, &format!("/pulls/{number}/comments")), 304);
        // The run is green now: no annotations are asked for.
        assert_eq!(sent.len(), 5, "{sent:#?}");
        assert_eq!((&third.0, &third.3), (&first.0, &first.3));
        let test = third.1.iter().find(|c| c.name == "test").unwrap();
        assert_eq!(
            (test.state, test.annotations.len()),
            (CheckState::Success, 0)
        );
        assert_ne!(third.1, first.1);
        assert_eq!(
            third.1.iter().find(|c| c.name == "ci/legacy"),
            first.1.iter().find(|c| c.name == "ci/legacy")
        );
        assert_eq!(third.2.len(), 2, "{:?}", third.2);
        assert!(
            third
                .2
                .iter()
                .any(|r| r.author == "ada" && r.state == ReviewState::Approved)
        );

        // A line comment (the pull request counts them, as GitHub's does), and GitHub finding
        // that it no longer merges.
        fake.add_review_comment(REPO, number, "ada", "OWNER", "login.rs", 1, "Nice.", &head);
        fake.set_mergeable(REPO, number, false);
        let mark = fake.requests().len();
        let fourth = look().await;
        let sent = since(&fake, mark);
        assert_eq!(status_of(&sent, &format!("/pulls/{number}")), 200);
        assert_eq!(status_of(&sent, "/check-runs"), 304);
        assert_eq!(status_of(&sent, "/status"), 304);
        assert_eq!(status_of(&sent, "/reviews"), 304);
        assert_eq!(status_of(&sent, &format!("/pulls/{number}/comments")), 200);
        assert_eq!(sent.len(), 5, "{sent:#?}");
        assert_eq!(fourth.0.mergeable, Some(false));
        assert_ne!(fourth.0, first.0);
        assert_eq!((&fourth.1, &fourth.2), (&third.1, &third.2));
        let bodies: Vec<_> = fourth.3.iter().map(|l| l.body.as_str()).collect();
        assert_eq!(bodies, ["What if it fails?", "Nice."]);

        // Then unchanged again: all 304, the changed answers kept.
        let mark = fake.requests().len();
        let fifth = look().await;
        let sent = since(&fake, mark);
        assert!(
            sent.len() == 5 && sent.iter().all(|r| r.conditional && r.status == 304),
            "{sent:#?}"
        );
        assert_eq!(fifth, fourth);

        // An issue and its comments too, each page with its own validator (a 304 has no Link
        // header: the next page is remembered with the first).
        let mark = fake.requests().len();
        let issue = github.issue(&busy_repo, busy).await.unwrap();
        let comments = github.issue_comments(&busy_repo, busy).await.unwrap();
        assert_eq!(comments.len(), 120);
        assert!(
            since(&fake, mark)
                .iter()
                .all(|r| !r.conditional && r.status == 200)
        );
        let mark = fake.requests().len();
        assert_eq!(github.issue(&busy_repo, busy).await.unwrap(), issue);
        assert_eq!(
            github.issue_comments(&busy_repo, busy).await.unwrap(),
            comments
        );
        let sent = since(&fake, mark);
        assert!(
            sent.len() == 3 && sent.iter().all(|r| r.conditional && r.status == 304),
            "{sent:#?}"
        );
        // A new comment lands on the second page; the first is unchanged.
        fake.add_issue_comment(BUSY, busy, "cy", "MEMBER", "comment 120");
        let mark = fake.requests().len();
        let more = github.issue_comments(&busy_repo, busy).await.unwrap();
        let sent = since(&fake, mark);
        let statuses: Vec<_> = sent.iter().map(|r| (r.conditional, r.status)).collect();
        assert_eq!(statuses, [(true, 304), (true, 200)], "{sent:#?}");
        assert_eq!(more.len(), 121);
        assert_eq!(more[..120], comments[..]);
        assert_eq!(more[120].body, "comment 120");

        // Every request counted; the 304s cost nothing against the rate limit.
        let all = fake.requests();
        assert_eq!(github.requests_sent(), all.len() as u64);
        let not_modified = all.iter().filter(|r| r.status == 304).count() as u64;
        assert_eq!(github.requests_not_modified(), not_modified);
        assert_eq!(
            github.requests_conditional(),
            all.iter().filter(|r| r.conditional).count() as u64
        );
        assert_eq!(not_modified, 6 + 3 + 3 + 5 + 3 + 1);
    });

    fake.assert_all_valid();
    assert!(
        fake.answer_problems().is_empty(),
        "{:?}",
        fake.answer_problems()
    );
}

#[test]
fn permissions_and_who_labeled_an_issue_are_read_as_github_s_description_says() {
    let fake = FakeGitHub::start();
    fake.add_repo(REPO, None);
    let repo = RepoRef::parse(REPO).unwrap();
    // Opened with the label by someone who may not write; labeled again later by a writer.
    let asked = fake.add_issue(
        REPO,
        "Start the team",
        "",
        &["troupe"],
        "mallory",
        "CONTRIBUTOR",
    );
    fake.add_issue_comment(REPO, asked, "ada", "OWNER", "Go ahead");
    fake.add_issue_comment(REPO, asked, "cy", "MEMBER", "+1");
    let plain = fake.add_issue(REPO, "Unlabeled", "", &[], "bo", "NONE");
    // More events than one page holds: the adapter follows the Link header.
    let busy = fake.add_issue(REPO, "Busy", "", &[], "cy", "MEMBER");
    for _ in 0..130 {
        fake.label_issue(REPO, busy, "bug", "bo");
    }
    fake.label_issue(REPO, busy, "Troupe", "dee");
    fake.set_permission(REPO, "wanda", "write");
    fake.set_permission(REPO, "maya", "maintain");
    fake.set_permission(REPO, "tria", "triage");
    fake.set_permission(REPO, "rita", "read");
    fake.set_permission(REPO, "nora", "none");

    runtime().block_on(async {
        let github = GitHub::new(
            &fake.url,
            "github.com",
            Token::new(fake.token.clone()),
            Duration::from_secs(20),
        )
        .unwrap();

        // Set, derived from the association last seen, and unknown (404: none, no error).
        for (login, expected) in [
            ("wanda", Permission::Write),
            ("maya", Permission::Maintain),
            ("tria", Permission::Triage),
            ("rita", Permission::Read),
            ("nora", Permission::None),
            ("ada", Permission::Admin),
            ("cy", Permission::Write),
            ("octo", Permission::Admin),
            (LOGIN, Permission::Write),
            ("mallory", Permission::None),
            ("no-such-user", Permission::None),
        ] {
            let got = github.permission(&repo, login).await.unwrap();
            assert_eq!(got, expected, "{login}");
        }
        let writers = ["wanda", "maya", "ada", "cy", "octo", LOGIN];
        for login in ["wanda", "maya", "tria", "rita", "nora", "ada", "mallory"] {
            let can = github.permission(&repo, login).await.unwrap().can_write();
            assert_eq!(can, writers.contains(&login), "{login}");
        }
        let unknown = fake
            .requests()
            .into_iter()
            .filter(|r| r.path.ends_with("/no-such-user/permission"))
            .collect::<Vec<_>>();
        assert_eq!(unknown.len(), 1, "{unknown:#?}");
        assert_eq!(unknown[0].status, 404);

        // Remembered for a while, names in any case: no request the second time, even for a
        // 404; a change on GitHub shows only once the answer expires.
        let mark = fake.requests().len();
        fake.set_permission(REPO, "rita", "write");
        assert_eq!(
            github.permission(&repo, "Rita").await.unwrap(),
            Permission::Read
        );
        assert_eq!(
            github
                .permission(&RepoRef::parse("Octo/Hello").unwrap(), "NO-SUCH-USER")
                .await
                .unwrap(),
            Permission::None
        );
        assert_eq!(since(&fake, mark).len(), 0);
        // Another repository is asked afresh (and one that is not there is none too).
        let other = RepoRef::parse("octo/elsewhere").unwrap();
        assert_eq!(
            github.permission(&other, "wanda").await.unwrap(),
            Permission::None
        );
        assert_eq!(since(&fake, mark).len(), 1);

        // Who labeled: the last to apply it, in any case; none when it never was.
        assert_eq!(
            github.labeled_by(&repo, asked, "troupe").await.unwrap(),
            Some("mallory".to_string())
        );
        fake.label_issue(REPO, asked, "troupe", "ada");
        assert_eq!(
            github.labeled_by(&repo, asked, "TROUPE").await.unwrap(),
            Some("ada".to_string())
        );
        assert_eq!(github.labeled_by(&repo, asked, "bug").await.unwrap(), None);
        assert_eq!(
            github.labeled_by(&repo, plain, "troupe").await.unwrap(),
            None
        );
        let mark = fake.requests().len();
        assert_eq!(
            github.labeled_by(&repo, busy, "troupe").await.unwrap(),
            Some("dee".to_string())
        );
        let pages = since(&fake, mark);
        assert_eq!(pages.len(), 2, "{pages:#?}");
        assert!(pages[1].path.starts_with("/repositories/"), "{pages:#?}");
        assert_eq!(
            github.labeled_by(&repo, busy, "bug").await.unwrap(),
            Some("bo".to_string())
        );
        let e = github.labeled_by(&repo, 999, "troupe").await.unwrap_err();
        assert!(matches!(e, ForgeError::NotFound(_)), "{e:?}");

        assert_eq!(github.requests_sent(), fake.requests().len() as u64);
    });

    fake.assert_all_valid();
    assert!(
        fake.answer_problems().is_empty(),
        "{:?}",
        fake.answer_problems()
    );
}
