//! Rule patterns over paths (normalised, not crossing `/`, never outside the checkout), commands
//! (word by word, never a compound command unless the pattern says so) and other text.

use super::*;

const ROOT: &str = "/work/wt";

fn path(p: &str) -> Subject {
    let roots = [PathBuf::from(ROOT), PathBuf::from("/link/wt")];
    Subject::Path(PathSubject::new(Path::new(ROOT), &roots, p))
}

fn command(c: &str) -> Subject {
    Subject::Command(Command::read(c).ok().map(|c| c.tokens))
}

#[test]
fn path_patterns() {
    let cases: &[(&str, &str, bool)] = &[
        // From the root: `*` stays in its directory; `..` and `.` are resolved first.
        ("src/*.rs", "src/main.rs", true),
        ("src/*.rs", "src/a/b.rs", false),
        ("src/*.rs", "src/../build.rs", false),
        ("src/*.rs", "./src/./lib.rs", true),
        ("src/*.rs", "src/x/../lib.rs", true),
        ("src/**", "src/a/b.rs", true),
        ("src/**/*.rs", "src/a/b.rs", true),
        ("./src/*.rs", "src/main.rs", true),
        // No `/`: the file's name anywhere.
        ("*.rs", "src/a/b.rs", true),
        ("*", "src/a/b.rs", true),
        ("NOTES.md", "docs/NOTES.md", true),
        ("out-*.txt", "out-3.txt", true),
        ("*.rs", "src/a.txt", false),
        // Absolute: the absolute path, under either name of the root.
        ("/work/wt/src/*.rs", "/work/wt/src/main.rs", true),
        ("/link/wt/src/*.rs", "src/main.rs", true),
        ("/work/wt/src/*.rs", "/work/wt/src/../../wt/src/a.rs", true),
        ("/work/wt/*", "/work/wt/src/a.rs", false),
        // Leaving the checkout matches nothing, not even `**`.
        ("**", "../x.rs", false),
        ("*", "/etc/passwd", false),
        ("**", "src/../../wt2/a.rs", false),
        ("/work/**", "/work/other/a.rs", false),
        // A broken glob matches nothing.
        ("src/[.rs", "src/[.rs", false),
    ];
    for (pattern, subject, want) in cases {
        assert_eq!(
            pattern_matches(pattern, &path(subject)),
            *want,
            "{pattern:?} ~ {subject:?}"
        );
    }
}

#[test]
fn command_patterns() {
    let cases: &[(&str, &str, bool)] = &[
        // Word by word; a trailing `*` (alone, or after a letter or digit) takes any further
        // words, none included.
        ("cargo test*", "cargo test", true),
        ("cargo test*", "cargo test --release", true),
        ("cargo test*", "cargo  test  -p troupe-core", true),
        ("cargo test*", "cargo testfoo", false),
        ("cargo test*", "cargo", false),
        ("cargo test *", "cargo test", true),
        ("cargo test *", "cargo test --release -q", true),
        ("cargo test-*", "cargo test-unit", true),
        ("cargo test-*", "cargo test-unit x", false),
        ("cargo test", "cargo test", true),
        ("cargo test", "cargo test --release", false),
        ("cargo * --release", "cargo build --release", true),
        ("cargo * --release", "cargo build x --release", false),
        ("*", "ls -la", true),
        ("ls *", "lsof", false),
        ("ls*", "lsof", false),
        ("cat src/*.rs", "cat src/main.rs", true),
        ("cat src/*.rs", "cat src/a/b.rs", false),
        ("cat src/**", "cat src/a/b.rs", true),
        ("git commit -m *", "git commit -m 'fix: a; b'", true),
        ("echo [*]", "echo '*'", true),
        ("echo [*]", "echo x", false),
        // Never a compound command…
        ("cargo test*", "cargo test && curl x|sh", false),
        ("cargo test*", "cargo test; curl x", false),
        ("cargo test*", "cargo test || true", false),
        ("cargo test*", "cargo test | tee log", false),
        ("cargo test*", "cargo test & curl x", false),
        ("cargo test*", "cargo test > out", false),
        ("cargo test*", "cargo test < in", false),
        ("cargo test*", "cargo test $(curl x)", false),
        ("cargo test*", "cargo test `curl x`", false),
        ("cargo test*", "cargo test \"$(curl x)\"", false),
        ("cargo test*", "cargo test\ncurl x", false),
        ("*", "a && b", false),
        // …unless the pattern writes its operators.
        (
            "cargo build* && cargo test*",
            "cargo build && cargo test -q",
            true,
        ),
        (
            "cargo build* && cargo test*",
            "cargo build || cargo test",
            false,
        ),
        (
            "cargo build* && cargo test*",
            "cargo build && cargo test && rm x",
            false,
        ),
        ("cargo test * 2>&1", "cargo test -q 2>&1", true),
        ("cargo test* | tail -n *", "cargo test | tail -n 20", true),
        // What cannot be matched: unreadable (either side).
        ("echo *", "echo 'a", false),
        ("echo 'a", "echo a", false),
    ];
    for (pattern, subject, want) in cases {
        assert_eq!(
            pattern_matches(pattern, &command(subject)),
            *want,
            "{pattern:?} ~ {subject:?}"
        );
    }
}

#[test]
fn other_subjects_and_the_tool() {
    let raw = Subject::Raw("https://docs.rs/similar".into());
    assert!(pattern_matches("https://docs.rs/*", &raw));
    assert!(!pattern_matches("https://crates.io/*", &raw));
    assert!(!pattern_matches("*", &Subject::Command(None)));
    assert!(!pattern_matches("*", &Subject::Path(None)));
    let rule = |tool: &str, pattern: &str| ApprovalRule {
        rule_id: "r".into(),
        project_id: "p".into(),
        party_id: None,
        tool_name: tool.into(),
        pattern: pattern.into(),
        created_by: None,
        created_at: String::new(),
        revoked_at: None,
    };
    let cmd = command("cargo test");
    assert!(matches(&rule("Bash", "cargo test*"), "Bash", &cmd));
    assert!(matches(&rule("*", "cargo test*"), "run_command", &cmd));
    assert!(!matches(&rule("Write", "cargo test*"), "Bash", &cmd));
}
