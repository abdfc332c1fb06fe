//! The adapter's parts that need no network: refusals made errors, check and review states,
//! `Link` headers, encoding, bounding, reading GitHub's bodies, and the headers of a request.

use std::time::Duration;

use http::HeaderMap;

use super::answer::{below_base, bounded, encode, next_in_link, next_link, refusal};
use super::wire;
use super::*;
use crate::{Association, CheckState, ReviewState};

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.append(
            http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(value).unwrap(),
        );
    }
    map
}

const NOW: u64 = 1_700_000_000;

#[test]
fn refusals_become_the_error_they_are() {
    let none = HeaderMap::new();
    let what = "issue o/r#7";

    let e = refusal(what, 401, &none, r#"{"message":"Bad credentials"}"#, NOW);
    assert!(
        matches!(&e, ForgeError::Credential(m) if m.contains("Bad credentials") && m.contains("gh auth login")),
        "{e:?}"
    );
    assert!(!e.retryable());

    // The primary limit spent: again when it resets (at least a second from now).
    let spent = headers(&[
        ("x-ratelimit-remaining", "0"),
        ("x-ratelimit-reset", &(NOW + 30).to_string()),
    ]);
    let body = r#"{"message":"API rate limit exceeded for user ID 1."}"#;
    for status in [403, 429] {
        let e = refusal(what, status, &spent, body, NOW);
        assert_eq!(e.retry_after_secs(), Some(30), "{e:?}");
        assert!(e.retryable());
    }
    let reset_passed = headers(&[
        ("x-ratelimit-remaining", "0"),
        ("x-ratelimit-reset", &(NOW - 5).to_string()),
    ]);
    assert_eq!(
        refusal(what, 403, &reset_passed, body, NOW).retry_after_secs(),
        Some(1)
    );

    // A secondary limit: its retry-after, else a minute.
    let e = refusal(what, 403, &headers(&[("retry-after", "7")]), "{}", NOW);
    assert_eq!(e.retry_after_secs(), Some(7), "{e:?}");
    let secondary = r#"{"message":"You have exceeded a secondary rate limit. Please wait."}"#;
    let e = refusal(what, 403, &none, secondary, NOW);
    assert!(
        matches!(&e, ForgeError::RateLimited { retry_after_secs: 60, message } if message.contains("secondary")),
        "{e:?}"
    );
    assert_eq!(
        refusal(what, 429, &none, "", NOW).retry_after_secs(),
        Some(60)
    );

    // A 403 that is no limit is a refusal, with GitHub's words.
    let e = refusal(
        what,
        403,
        &headers(&[("x-ratelimit-remaining", "4999")]),
        r#"{"message":"Resource not accessible by integration"}"#,
        NOW,
    );
    assert!(
        matches!(&e, ForgeError::Refused { status: 403, message } if message.contains("not accessible")),
        "{e:?}"
    );
    assert!(!e.retryable());

    let e = refusal(what, 404, &none, r#"{"message":"Not Found"}"#, NOW);
    assert_eq!(e, ForgeError::NotFound(what.to_string()));

    // Other 4xx: the message and every error's message or code.
    let invalid = r#"{"message":"Validation Failed","errors":[
        {"resource":"PullRequest","code":"custom","message":"A pull request already exists for o:b."},
        {"resource":"PullRequest","field":"base","code":"invalid"},
        "plain words"],"documentation_url":"https://docs.github.com"}"#;
    let e = refusal(what, 422, &none, invalid, NOW);
    let ForgeError::Refused {
        status: 422,
        message,
    } = &e
    else {
        panic!("{e:?}")
    };
    assert_eq!(
        message,
        "issue o/r#7: Validation Failed: A pull request already exists for o:b.; \
         PullRequest.base: invalid; plain words"
    );
    let e = refusal(
        what,
        409,
        &none,
        r#"{"message":"Head branch was modified."}"#,
        NOW,
    );
    assert!(
        matches!(&e, ForgeError::Refused { status: 409, message } if message.contains("modified"))
    );

    // 5xx, with or without GitHub's shape.
    let e = refusal(what, 502, &none, "<html>Bad gateway</html>", NOW);
    assert!(
        matches!(&e, ForgeError::Server { status: 502, message } if message.contains("Bad gateway")),
        "{e:?}"
    );
    assert!(e.retryable());
    let e = refusal(what, 503, &none, "", NOW);
    assert!(
        matches!(&e, ForgeError::Server { status: 503, message } if message.contains("Service Unavailable")),
        "{e:?}"
    );

    // A moved repository is named, not followed.
    let e = refusal(
        what,
        301,
        &headers(&[("location", "https://api.github.com/repositories/1")]),
        "",
        NOW,
    );
    assert!(
        matches!(&e, ForgeError::Refused { status: 301, message } if message.contains("repositories/1")),
        "{e:?}"
    );
}

#[test]
fn check_runs_statuses_and_reviews_map_to_their_states() {
    use CheckState::*;
    for (status, conclusion, state) in [
        ("queued", None, Pending),
        ("in_progress", None, Pending),
        ("waiting", None, Pending),
        ("completed", None, Pending),
        ("completed", Some("success"), Success),
        ("completed", Some("neutral"), Success),
        ("completed", Some("skipped"), Success),
        ("completed", Some("failure"), Failure),
        ("completed", Some("timed_out"), Failure),
        ("completed", Some("cancelled"), Failure),
        ("completed", Some("action_required"), Failure),
        ("completed", Some("startup_failure"), Failure),
        ("completed", Some("stale"), Failure),
        ("completed", Some("something_new"), Failure),
    ] {
        assert_eq!(
            wire::check_run_state(status, conclusion),
            state,
            "{status} {conclusion:?}"
        );
    }
    for (state, expected) in [
        ("pending", Pending),
        ("success", Success),
        ("failure", Failure),
        ("error", Failure),
    ] {
        assert_eq!(wire::status_state(state), expected, "{state}");
    }
    for (state, expected) in [
        ("APPROVED", ReviewState::Approved),
        ("CHANGES_REQUESTED", ReviewState::ChangesRequested),
        ("COMMENTED", ReviewState::Commented),
        ("DISMISSED", ReviewState::Dismissed),
        ("PENDING", ReviewState::Pending),
    ] {
        assert_eq!(wire::review_state(state), expected, "{state}");
    }
}

#[test]
fn link_headers_give_the_next_page_on_the_same_host_only() {
    let link = r#"<https://api.github.com/repositories/1/issues/2/comments?per_page=100&page=2>; rel="next", <https://api.github.com/repositories/1/issues/2/comments?per_page=100&page=5>; rel="last""#;
    assert_eq!(
        next_in_link(link).as_deref(),
        Some("https://api.github.com/repositories/1/issues/2/comments?per_page=100&page=2")
    );
    // The next link may come last, hold commas, or share a rel with another word.
    let commas = r#"<https://api.github.com/x?labels=a,b&page=1>; rel="prev", <https://api.github.com/x?labels=a,b&page=3>; rel="next""#;
    assert_eq!(
        next_in_link(commas).as_deref(),
        Some("https://api.github.com/x?labels=a,b&page=3")
    );
    assert_eq!(
        next_in_link("<http://h/a?page=2>; rel=\"next last\"").as_deref(),
        Some("http://h/a?page=2")
    );
    assert_eq!(
        next_in_link(r#"<https://api.github.com/x?page=1>; rel="first""#),
        None
    );
    assert_eq!(next_in_link("garbage"), None);
    assert_eq!(
        next_link(&headers(&[("link", link)])).as_deref(),
        Some("https://api.github.com/repositories/1/issues/2/comments?per_page=100&page=2")
    );
    assert_eq!(next_link(&HeaderMap::new()), None);

    let api: http::Uri = "https://api.github.com".parse().unwrap();
    assert_eq!(
        below_base("https://api.github.com/repos/o/r/issues?page=2", &api, "").as_deref(),
        Some("/repos/o/r/issues?page=2")
    );
    assert_eq!(
        below_base("https://evil.example/repos/o/r?page=2", &api, ""),
        None
    );
    assert_eq!(
        below_base("http://api.github.com/repos/o/r?page=2", &api, ""),
        None
    );
    let ghe: http::Uri = "https://ghe.example/api/v3".parse().unwrap();
    assert_eq!(
        below_base(
            "https://ghe.example/api/v3/repos/o/r/pulls?page=2",
            &ghe,
            "/api/v3"
        )
        .as_deref(),
        Some("/repos/o/r/pulls?page=2")
    );
    let local: http::Uri = "http://127.0.0.1:4000".parse().unwrap();
    assert_eq!(
        below_base("http://127.0.0.1:4000/repos/o/r?page=2", &local, "").as_deref(),
        Some("/repos/o/r?page=2")
    );
    assert_eq!(
        below_base("http://127.0.0.1:4001/repos/o/r?page=2", &local, ""),
        None
    );
}

#[test]
fn path_segments_and_query_values_are_encoded() {
    assert_eq!(encode("feature/login-fix"), "feature%2Flogin-fix");
    assert_eq!(encode("octo:troupe/7"), "octo%3Atroupe%2F7");
    assert_eq!(encode("good first issue"), "good%20first%20issue");
    assert_eq!(encode("a&b=c#d?e,f+g%"), "a%26b%3Dc%23d%3Fe%2Cf%2Bg%25");
    assert_eq!(encode("2024-05-01T10:00:00Z"), "2024-05-01T10%3A00%3A00Z");
    assert_eq!(encode("hello.world_~"), "hello.world_~");
    assert_eq!(encode("é"), "%C3%A9");
}

#[test]
fn long_texts_are_cut_on_a_character_boundary_and_say_so() {
    assert_eq!(bounded("short".to_string(), 16), "short");
    let long = "é".repeat(20_000);
    let cut = bounded(long.clone(), 16 * 1024);
    assert!(cut.len() <= 16 * 1024, "{}", cut.len());
    assert!(cut.starts_with("éé"));
    assert!(
        cut.ends_with("[cut: 40000 bytes in all, the first ones shown]"),
        "{}",
        &cut[cut.len() - 60..]
    );
}

#[test]
fn github_s_bodies_are_read_with_missing_and_null_fields() {
    let issue: wire::IssueJson = serde_json::from_str(
        r#"{"number":3,"title":"Fix it","body":null,"state":"open",
            "labels":[{"name":"troupe","color":"fff"},"plain",{"id":1}],
            "user":{"login":"ada"},"author_association":"MEMBER",
            "html_url":"https://github.com/o/r/issues/3",
            "pull_request":{"url":"x"},"updated_at":"2024-01-01T00:00:00Z","extra":[1]}"#,
    )
    .unwrap();
    let issue = Issue::from(issue);
    assert_eq!(issue.labels, ["troupe", "plain"]);
    assert_eq!(issue.body, "");
    assert_eq!(issue.association, Association::Member);
    assert!(issue.is_pull);
    let bare = Issue::from(
        serde_json::from_str::<wire::IssueJson>(r#"{"number":4,"user":null,"pull_request":null}"#)
            .unwrap(),
    );
    assert_eq!(
        (bare.author.as_str(), bare.is_pull, bare.association),
        ("ghost", false, Association::None)
    );

    let comment: wire::CommentJson = serde_json::from_str(
        r#"{"id":9,"issue_url":"https://api.github.com/repos/o/r/issues/12","body":"hi",
            "user":{"login":"bo"},"author_association":"CONTRIBUTOR"}"#,
    )
    .unwrap();
    let comment = comment.into_comment(None);
    assert_eq!((comment.issue_number, comment.author.as_str()), (12, "bo"));

    // A list's pull request has merged_at but no merged, and no mergeable.
    let listed: wire::PullJson = serde_json::from_str(
        r#"{"number":5,"state":"closed","merged_at":"2024-01-01T00:00:00Z",
            "head":{"ref":"troupe/x","sha":"abc"},"base":{"ref":"main","sha":"def"}}"#,
    )
    .unwrap();
    let pull = PullRequest::from(listed);
    assert!(pull.merged && !pull.draft);
    assert_eq!(
        (
            pull.head_ref.as_str(),
            pull.head_sha.as_str(),
            pull.base_ref.as_str()
        ),
        ("troupe/x", "abc", "main")
    );
    assert_eq!(pull.mergeable, None);

    let runs: wire::CheckRunsJson = serde_json::from_str(
        r#"{"total_count":2,"check_runs":[
            {"id":1,"name":"test","status":"completed","conclusion":"failure",
             "html_url":"https://github.com/o/r/runs/1",
             "output":{"title":"2 failed","summary":"tests failed","text":null,"annotations_count":2}},
            {"id":2,"name":"lint","status":"completed","conclusion":"success",
             "output":{"title":null,"summary":null,"annotations_count":0}}]}"#,
    )
    .unwrap();
    let mut runs = runs.check_runs.into_iter();
    let failed = runs.next().unwrap();
    assert!(failed.wants_annotations());
    let check = failed.into_check(vec![]);
    assert_eq!(
        (check.state, check.text.as_str(), check.kind.as_str()),
        (CheckState::Failure, "2 failed\n\ntests failed", "check_run")
    );
    let green = runs.next().unwrap();
    assert!(!green.wants_annotations());
    assert_eq!(green.into_check(vec![]).state, CheckState::Success);

    let combined: wire::CombinedStatusJson = serde_json::from_str(
        r#"{"state":"failure","statuses":[
            {"context":"ci/old","state":"error","description":null,"target_url":""},
            {"context":"ci/old","state":"success"}]}"#,
    )
    .unwrap();
    let statuses = combined.into_checks();
    assert_eq!(statuses.len(), 1);
    assert_eq!(
        (statuses[0].state, statuses[0].id, statuses[0].url.as_ref()),
        (CheckState::Failure, None, None)
    );

    let line = |json: &str| {
        LineComment::from(serde_json::from_str::<wire::LineCommentJson>(json).unwrap()).line
    };
    assert_eq!(line(r#"{"id":1,"line":7,"original_line":3}"#), Some(7));
    assert_eq!(line(r#"{"id":1,"line":null,"original_line":3}"#), Some(3));
    assert_eq!(line(r#"{"id":1}"#), None);

    let review = Review::from(serde_json::from_str::<wire::ReviewJson>(
        r#"{"id":2,"user":{"login":"cy"},"state":"CHANGES_REQUESTED","body":"no","commit_id":"abc"}"#,
    ).unwrap());
    assert_eq!(
        (review.state, review.submitted_at.as_str()),
        (ReviewState::ChangesRequested, "")
    );
}

#[test]
fn every_request_carries_its_headers_once_and_never_shows_the_token() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _in_runtime = rt.enter();
    let github = GitHub::new(
        "http://127.0.0.1:9/",
        "github.com",
        Token::new("ghp_secret"),
        Duration::from_secs(5),
    )
    .unwrap();
    let request = github
        .request(
            Method::GET,
            "/repos/o/r/issues?labels=x",
            None,
            Some("W/\"abc\""),
        )
        .unwrap();
    let h = request.headers();
    let only = |name: &str| {
        let values: Vec<_> = h.get_all(name).iter().collect();
        assert_eq!(values.len(), 1, "{name}: {values:?}");
        values[0].to_str().unwrap().to_string()
    };
    assert_eq!(only("accept"), "application/vnd.github+json");
    assert_eq!(only("x-github-api-version"), "2022-11-28");
    assert!(only("user-agent").starts_with("troupe/"));
    assert_eq!(only("authorization"), "Bearer ghp_secret");
    assert!(h.get("authorization").unwrap().is_sensitive());
    assert_eq!(only("if-none-match"), "W/\"abc\"");
    assert_eq!(request.uri(), "/repos/o/r/issues?labels=x");
    assert_eq!(github.requests_sent(), 0);
    assert_eq!(
        (
            github.requests_conditional(),
            github.requests_not_modified()
        ),
        (0, 0)
    );
    assert!(!format!("{github:?}").contains("ghp_secret"));
    assert_eq!(github.kind(), "github");
    assert_eq!(github.web_host(), "github.com");

    let body = serde_json::json!({"body": "x"});
    let post = github
        .request(
            Method::POST,
            "/repos/o/r/issues/1/comments",
            Some(&body),
            None,
        )
        .unwrap();
    assert_eq!(
        post.headers().get("content-type").unwrap(),
        "application/json"
    );
    assert!(post.headers().get("if-none-match").is_none());

    for bad in [
        "api.github.com",
        "ftp://x",
        "https://api.github.com?x=1",
        "",
    ] {
        assert!(
            GitHub::new(bad, "github.com", Token::new("t"), Duration::from_secs(1)).is_err(),
            "{bad}"
        );
    }
    let e = GitHub::new(
        "https://api.github.com",
        "github.com",
        Token::new("bad\ntoken"),
        Duration::from_secs(1),
    )
    .unwrap_err();
    assert!(
        matches!(&e, ForgeError::Credential(m) if !m.contains("bad")),
        "{e:?}"
    );
    assert!(
        GitHub::new(
            "https://api.github.com",
            "github.com",
            Token::new(" "),
            Duration::from_secs(1)
        )
        .is_err()
    );
}

#[test]
fn outside_a_runtime_the_client_is_refused_not_a_panic() {
    let e = GitHub::new(
        "https://api.github.com",
        "github.com",
        Token::new("t"),
        Duration::from_secs(1),
    )
    .unwrap_err();
    assert!(e.to_string().contains("tokio runtime"), "{e}");
}

#[test]
fn the_cache_keeps_the_most_recently_used_answers_within_its_bounds() {
    use super::cache::{Cache, Cached};
    let answer = |etag: &str, body: &str| Cached {
        etag: etag.to_string(),
        body: body.into(),
        next: None,
    };

    let cache = Cache::new(3, 1024);
    cache.put("/a", answer("\"1\"", "a"));
    cache.put("/b", answer("\"2\"", "b"));
    cache.put("/c", answer("\"3\"", "c"));
    assert_eq!(cache.len(), 3);
    // Looking up /a makes /b the least recently used: a fourth entry evicts it.
    assert_eq!(cache.get("/a"), Some(answer("\"1\"", "a")));
    cache.put("/d", answer("\"4\"", "d"));
    assert_eq!(cache.len(), 3);
    assert_eq!(cache.get("/b"), None);
    for key in ["/a", "/c", "/d"] {
        assert!(cache.get(key).is_some(), "{key}");
    }
    // Replacing an entry is not another entry, and keeps its new answer.
    cache.put("/c", answer("\"5\"", "c2"));
    assert_eq!(cache.len(), 3);
    assert_eq!(cache.get("/c"), Some(answer("\"5\"", "c2")));
    assert_eq!(cache.get("/a").map(|c| c.etag), Some("\"1\"".to_string()));
    // Now /d is the oldest.
    cache.put("/e", answer("\"6\"", "e"));
    assert_eq!(cache.get("/d"), None);
    cache.remove("/e");
    assert_eq!(cache.len(), 2);
    assert_eq!(cache.get("/e"), None);

    // The byte bound: each entry here is 2 + 3 + 30 = 35 bytes; at most 100 are kept.
    let cache = Cache::new(256, 100);
    let body = "x".repeat(30);
    for key in ["/1", "/2", "/3"] {
        cache.put(key, answer("\"e\"", &body));
    }
    assert_eq!((cache.len(), cache.bytes()), (2, 70));
    assert_eq!(cache.get("/1"), None);
    // A next page counts too, and an answer bigger than the whole bound is not kept (nor is
    // the entry it would have replaced).
    cache.put(
        "/2",
        Cached {
            next: Some("/2?page=2".to_string()),
            ..answer("\"e\"", &body)
        },
    );
    assert_eq!((cache.len(), cache.bytes()), (2, 79));
    cache.put("/3", answer("\"e\"", &"y".repeat(200)));
    assert_eq!((cache.len(), cache.bytes()), (1, 44));
    assert_eq!(cache.get("/3"), None);
    assert_eq!(
        cache.get("/2").and_then(|c| c.next),
        Some("/2?page=2".to_string())
    );

    // The adapter's own: 256 entries at most, the least recently used evicted first.
    let cache = Cache::new(super::cache::MAX_ENTRIES, super::cache::MAX_BYTES);
    for i in 0..300 {
        cache.put(&format!("/repos/o/r/pulls/{i}"), answer("\"e\"", "{}"));
        // The first one is looked up all along: it stays.
        assert!(cache.get("/repos/o/r/pulls/0").is_some(), "{i}");
    }
    assert_eq!(cache.len(), 256);
    assert!(cache.get("/repos/o/r/pulls/1").is_none());
    assert!(cache.get("/repos/o/r/pulls/44").is_none());
    assert!(cache.get("/repos/o/r/pulls/45").is_some());
    assert!(cache.get("/repos/o/r/pulls/299").is_some());
}

#[test]
fn a_permission_is_the_role_else_the_older_word() {
    let read = |body: &str| {
        serde_json::from_str::<wire::PermissionJson>(body)
            .unwrap()
            .permission()
    };
    // GitHub's older word folds maintain into write and triage into read: the role says.
    assert_eq!(
        read(r#"{"permission":"write","role_name":"maintain"}"#),
        Permission::Maintain
    );
    assert_eq!(
        read(r#"{"permission":"read","role_name":"triage"}"#),
        Permission::Triage
    );
    assert_eq!(
        read(r#"{"permission":"admin","role_name":"admin","user":null}"#),
        Permission::Admin
    );
    // A custom role: the word of the role it is based on.
    assert_eq!(
        read(r#"{"permission":"write","role_name":"security-manager"}"#),
        Permission::Write
    );
    assert_eq!(read(r#"{"permission":"read"}"#), Permission::Read);
    assert_eq!(
        read(r#"{"permission":"none","role_name":null}"#),
        Permission::None
    );
    assert_eq!(read(r#"{"permission":null}"#), Permission::None);
    assert_eq!(read(r#"{"permission":"owner-ish"}"#), Permission::None);
}

#[test]
fn the_last_to_apply_a_label_is_read_from_the_events() {
    let events: Vec<wire::IssueEventJson> = serde_json::from_str(
        r#"[
            {"event":"labeled","actor":{"login":"ada"},"label":{"name":"Troupe","color":"red"}},
            {"event":"closed","actor":{"login":"cy"},"commit_id":null},
            {"event":"labeled","actor":{"login":"bo"},"label":{"name":"bug","color":"red"}},
            {"event":"unlabeled","actor":{"login":"cy"},"label":{"name":"troupe","color":"red"}},
            {"event":"labeled","actor":{"login":"dee"},"label":{"name":"troupe","color":"red"}},
            {"event":"assigned","actor":{"login":"eve"},"assignee":{"login":"eve"}}
        ]"#,
    )
    .unwrap();
    assert_eq!(
        wire::last_labeled_by(events, "TROUPE"),
        Some("dee".to_string())
    );
    let events: Vec<wire::IssueEventJson> = serde_json::from_str(
        r#"[{"event":"labeled","actor":null,"label":{"name":"troupe","color":"red"}},
            {"event":"labeled","actor":{"login":"bo"},"label":{"name":"bug","color":"red"}}]"#,
    )
    .unwrap();
    // A deleted account is GitHub's ghost.
    assert_eq!(
        wire::last_labeled_by(events, "troupe"),
        Some("ghost".to_string())
    );
    let never: Vec<wire::IssueEventJson> =
        serde_json::from_str(r#"[{"event":"labeled","actor":{"login":"bo"}}]"#).unwrap();
    assert_eq!(wire::last_labeled_by(never, "troupe"), None);
    assert_eq!(wire::last_labeled_by(Vec::new(), "troupe"), None);
}

#[test]
fn permissions_are_remembered_for_a_while_within_their_bound() {
    use super::permissions::Permissions;

    let start = Instant::now();
    let minutes = |m: u64| start + Duration::from_secs(m * 60);
    let kept = Permissions::new(Duration::from_secs(600), 3);
    kept.put("Octo/Hello", "Ada", Permission::Admin, start);
    // Names are case-insensitive.
    assert_eq!(
        kept.get("octo/hello", "ada", minutes(9)),
        Some(Permission::Admin)
    );
    assert_eq!(kept.get("octo/other", "ada", minutes(1)), None);
    // Ten minutes on, it is asked again (and the stale entry goes).
    assert_eq!(kept.get("octo/hello", "ada", minutes(10)), None);
    assert_eq!(kept.len(), 0);

    // Full: the expired go first, then the oldest.
    kept.put("o/r", "a", Permission::Read, start);
    kept.put("o/r", "b", Permission::Write, minutes(5));
    kept.put("o/r", "c", Permission::None, minutes(6));
    kept.put("o/r", "d", Permission::Triage, minutes(11));
    assert_eq!(kept.len(), 3);
    assert_eq!(kept.get("o/r", "a", minutes(11)), None);
    kept.put("o/r", "e", Permission::Maintain, minutes(12));
    assert_eq!(kept.len(), 3);
    assert_eq!(kept.get("o/r", "b", minutes(12)), None);
    assert_eq!(kept.get("o/r", "c", minutes(12)), Some(Permission::None));
    assert_eq!(
        kept.get("o/r", "e", minutes(12)),
        Some(Permission::Maintain)
    );
    // Replacing an entry evicts nothing.
    kept.put("o/r", "c", Permission::Write, minutes(13));
    assert_eq!(kept.len(), 3);
    assert_eq!(kept.get("o/r", "c", minutes(13)), Some(Permission::Write));

    let none = Permissions::new(Duration::from_secs(600), 0);
    none.put("o/r", "a", Permission::Read, start);
    assert_eq!(none.len(), 0);
}
