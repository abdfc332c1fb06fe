//! Naming repositories and issues every way people write them.
use super::*;

#[test]
fn repositories_and_issues_are_named_every_way_people_write_them() {
    let r = RepoRef::parse("octo-org/hello.world").unwrap();
    assert_eq!(r.to_string(), "octo-org/hello.world");
    for url in [
        "https://github.com/octo-org/hello.world.git",
        "https://x-access-token@github.com/octo-org/hello.world",
        "ssh://git@github.com/octo-org/hello.world.git",
        "git@github.com:octo-org/hello.world.git",
    ] {
        assert_eq!(
            RepoRef::from_remote_url(url, "github.com"),
            Some(r.clone()),
            "{url}"
        );
    }
    assert_eq!(
        RepoRef::from_remote_url("git@gitlab.com:a/b", "github.com"),
        None
    );
    assert_eq!(
        RepoRef::from_remote_url("/srv/git/a.git", "github.com"),
        None
    );
    for bad in ["a", "a/b/c", "../b", "a/..", "a b/c", "/b"] {
        assert!(RepoRef::parse(bad).is_err(), "{bad}");
    }
    let i = IssueRef::parse("octo-org/hello.world#12", "github.com").unwrap();
    assert_eq!(i.number, 12);
    assert_eq!(
        IssueRef::parse(
            "https://github.com/octo-org/hello.world/issues/12",
            "github.com"
        ),
        Ok(i.clone())
    );
    assert_eq!(i.to_string(), "octo-org/hello.world#12");
    for bad in [
        "octo/x#0",
        "octo/x#",
        "octo/x#1a",
        "https://evil.example/octo/x/issues/1",
        "https://github.com/octo/x/wiki/1",
        "https://github.com/octo/x/issues/1/extra",
    ] {
        assert!(IssueRef::parse(bad, "github.com").is_err(), "{bad}");
    }
}
