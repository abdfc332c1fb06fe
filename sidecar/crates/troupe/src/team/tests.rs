//! The first team: what is found, the party made of it, the config it writes.

use super::*;
use troupe_core::project_config::ProjectConfig;

/// A directory of stand-in commands, as on a `PATH`.
fn bin_dir(names: &[&str]) -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    for n in names {
        let p = dir.path().join(n);
        std::fs::write(&p, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    dir
}

fn found_with(names: &[&str], root: &Path) -> Found {
    let bins = bin_dir(names);
    // A file that is not executable is not a command.
    std::fs::write(bins.path().join("not-exec"), "").unwrap();
    let found = detect(root, Some(bins.path().as_os_str().to_owned()), |k| {
        (k == "OPENAI_API_KEY").then(|| "sk-test".to_string())
    });
    drop(bins);
    found
}

#[test]
fn three_vendors_make_a_leader_two_developers_on_the_others_and_a_reviewer() {
    let root = tempfile::tempdir().unwrap();
    std::fs::write(root.path().join("Cargo.toml"), "[package]\n").unwrap();
    let found = found_with(&["claude-agent-acp", "codex-acp", "gemini"], root.path());
    assert_eq!(found.installed.len(), 3);
    assert_eq!(found.keys, ["OPENAI_API_KEY"]);
    let seats = plan(&found).unwrap();
    let roles: Vec<(&str, &str)> = seats
        .iter()
        .map(|s| (s.role.as_str(), s.vendor.name))
        .collect();
    assert_eq!(
        roles,
        [
            ("lead", "claude"),
            ("dev-codex", "codex"),
            ("dev-gemini", "gemini"),
            ("reviewer", "claude")
        ]
    );

    // What it writes is a party the daemon takes as it is.
    let out = init(root.path(), &found).unwrap();
    assert!(out.written, "{:?}", out.lines);
    let config = ProjectConfig::load(root.path()).unwrap().unwrap();
    assert_eq!(config.string("default", "party"), Some(PARTY));
    let party = config.party(PARTY).unwrap().unwrap();
    party
        .validate(|a| config.agent(a).unwrap().is_some())
        .unwrap();
    assert!(party.roles["lead"].is_leader);
    assert_eq!(party.flow["merge"].len(), 4);
    let merge = config.agent("merge").unwrap().unwrap();
    assert_eq!(merge.runner, "land");
    assert_eq!(
        merge.land.unwrap().test_command.as_deref(),
        Some("cargo test")
    );
    assert_eq!(config.agent("codex").unwrap().unwrap().runner, "acp:codex");
    let said = out.lines.join("\n");
    assert!(
        said.contains("test command: cargo test (from Cargo.toml)"),
        "{said}"
    );
    assert!(said.contains("dev-gemini — Gemini CLI"), "{said}");

    // Again: it has a team, nothing changes.
    let before = std::fs::read_to_string(config.path()).unwrap();
    let again = init(root.path(), &found).unwrap();
    assert!(!again.written);
    assert_eq!(std::fs::read_to_string(config.path()).unwrap(), before);
}

#[test]
fn fewer_vendors_still_make_a_team_and_none_writes_nothing() {
    let root = tempfile::tempdir().unwrap();
    let two = plan(&found_with(&["codex-acp", "gemini"], root.path())).unwrap();
    let roles: Vec<(&str, &str)> = two
        .iter()
        .map(|s| (s.role.as_str(), s.vendor.name))
        .collect();
    assert_eq!(
        roles,
        [
            ("lead", "codex"),
            ("dev-gemini", "gemini"),
            ("dev-codex", "codex"),
            ("reviewer", "codex")
        ]
    );
    let one = plan(&found_with(&["gemini"], root.path())).unwrap();
    let roles: Vec<&str> = one.iter().map(|s| s.role.as_str()).collect();
    assert_eq!(roles, ["lead", "dev", "reviewer"]);

    let none = found_with(&["not-an-agent"], root.path());
    assert!(plan(&none).is_none());
    let out = init(root.path(), &none).unwrap();
    assert!(!out.written);
    let said = out.lines.join("\n");
    assert!(
        said.contains("npm install -g @agentclientprotocol/claude-agent-acp"),
        "{said}"
    );
    assert!(said.contains("Nothing was written"), "{said}");
    assert!(!root.path().join(".troupe").exists());
}

#[test]
fn the_test_command_is_the_projects_own() {
    let cases: &[(&str, &str, Option<&str>)] = &[
        (
            "package.json",
            r#"{"scripts":{"test":"vitest"}}"#,
            Some("npm test"),
        ),
        ("package.json", r#"{"scripts":{}}"#, None),
        ("go.mod", "module x\n", Some("go test ./...")),
        ("pytest.ini", "[pytest]\n", Some("python3 -m pytest")),
        (
            "pyproject.toml",
            "[tool.pytest.ini_options]\n",
            Some("python3 -m pytest"),
        ),
        (
            "Makefile",
            "build:\n\tcc x.c\ntest: build\n\t./t\n",
            Some("make test"),
        ),
        ("Makefile", "build:\n\tcc x.c\n", None),
    ];
    for (file, text, want) in cases {
        let root = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join(file), text).unwrap();
        let got = test_command(root.path()).map(|(c, _)| c);
        assert_eq!(got.as_deref(), *want, "{file}: {text}");
    }
}
