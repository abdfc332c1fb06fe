//! A project's config: its definitions read with their table names, a bad file named.

use super::*;

#[test]
fn a_projects_definitions_are_read_with_their_table_names() {
    let dir = tempfile::tempdir().unwrap();
    assert!(ProjectConfig::load(dir.path()).unwrap().is_none());
    std::fs::create_dir_all(dir.path().join(".troupe")).unwrap();
    std::fs::write(
        dir.path().join(PATH),
        r#"
[default]
party = "team"

[agents.claude]
runner = "acp:claude"
isolation = "worktree"

[agents.broken]
runner = "teleport"

[parties.team]
roles.lead = { agent = "claude", is_leader = true }

[sandbox]
approve_own_checkout_edits = true
"#,
    )
    .unwrap();
    let c = ProjectConfig::load(dir.path()).unwrap().unwrap();
    assert_eq!(c.string("default", "party"), Some("team"));
    assert!(c.approve_own_checkout_edits());
    let team = c.party("team").unwrap().unwrap();
    assert_eq!(team.name, "team");
    assert!(team.roles["lead"].is_leader);
    assert_eq!(c.agent("claude").unwrap().unwrap().runner, "acp:claude");
    assert!(c.agent("nobody").unwrap().is_none());
    let broken = c.agent("broken").unwrap_err();
    assert!(broken.contains("[agents.broken]"), "{broken}");
    std::fs::write(dir.path().join(PATH), "[default\n").unwrap();
    let bad = ProjectConfig::load(dir.path()).unwrap_err();
    assert!(bad.contains("config.toml"), "{bad}");
}
