//! Guardrails: which paths are sensitive (by name anywhere, or by path from the root), and which
//! diffs are too large for a rule.

use super::*;

#[test]
fn sensitive_paths_by_name_anywhere_or_by_path_from_the_root() {
    let g = Guardrails::new(DEFAULT_SENSITIVE.iter().map(|s| s.to_string()).collect(), 3);
    let hit = |p: &str| {
        g.sensitive([p])
            .map(|(path, pattern)| format!("{path} ~ {pattern}"))
    };
    assert_eq!(hit(".env").as_deref(), Some(".env ~ .env"));
    assert_eq!(
        hit("./config/.env.local").as_deref(),
        Some("config/.env.local ~ .env.*")
    );
    assert_eq!(
        hit("app/secrets/db.txt").as_deref(),
        Some("app/secrets/db.txt ~ **/secrets/**")
    );
    assert_eq!(
        hit(".github/workflows/ci.yml").as_deref(),
        Some(".github/workflows/ci.yml ~ .github/workflows/**")
    );
    assert_eq!(
        hit("web/package-lock.json").as_deref(),
        Some("web/package-lock.json ~ package-lock.json")
    );
    assert_eq!(hit("src/main.rs"), None);
    assert_eq!(hit("docs/environment.md"), None);
    // The first sensitive one of several.
    assert_eq!(
        g.sensitive(["src/lib.rs", "Cargo.lock"])
            .map(|(p, _)| p)
            .as_deref(),
        Some("Cargo.lock")
    );
}

#[test]
fn a_diff_over_the_limit_counts_added_and_removed_lines() {
    let g = Guardrails::new(Vec::new(), 3);
    assert_eq!(
        g.diff_too_large("--- a\n+++ b\n-one\n+two\n context\n+three"),
        None
    );
    assert_eq!(g.diff_too_large("-a\n-b\n+c\n+d"), Some(4));
}

#[test]
fn a_project_file_replaces_the_defaults_and_a_bad_one_keeps_them() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join(".troupe")).unwrap();
    std::fs::write(
        dir.path().join(".troupe/guardrails.toml"),
        "sensitive_paths = [\"deploy/**\"]\nmax_diff_lines = 10\n",
    )
    .unwrap();
    let g = Guardrails::of_project(dir.path());
    assert!(g.sensitive(["deploy/prod.yaml"]).is_some());
    assert!(g.sensitive([".env"]).is_none());
    // Its own file stays sensitive whatever it says.
    assert_eq!(
        g.sensitive([".troupe/guardrails.toml"])
            .map(|(_, p)| p)
            .as_deref(),
        Some(".troupe/**")
    );
    assert_eq!(g.max_diff_lines(), 10);
    std::fs::write(
        dir.path().join(".troupe/guardrails.toml"),
        "sensitive_paths = 3",
    )
    .unwrap();
    let g = Guardrails::of_project(dir.path());
    assert!(g.sensitive([".env"]).is_some());
    assert_eq!(g.max_diff_lines(), DEFAULT_MAX_DIFF_LINES);
}
