//! The ACP door's own tests: the project default read from `.troupe/config.toml`, `/agent`'s
//! overrides.

use super::*;

#[test]
fn the_default_is_read_from_the_project_config_up_to_the_repository() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir_all(root.join(".git")).unwrap();
    std::fs::create_dir_all(root.join("src/deep")).unwrap();
    assert_eq!(
        project_default(&root.join("src/deep")).unwrap(),
        None,
        "without a config nothing is started (never the scripted demo)"
    );
    std::fs::create_dir_all(root.join(".troupe")).unwrap();
    std::fs::write(
        root.join(".troupe/config.toml"),
        "[default]\nagent = \"reviewer\"\n",
    )
    .unwrap();
    assert_eq!(
        project_default(&root.join("src/deep")).unwrap(),
        Some(Start::Agent("reviewer".into()))
    );
    std::fs::write(
        root.join(".troupe/config.toml"),
        "[default]\nagent = \"a\"\nparty = \"b\"\n",
    )
    .unwrap();
    let err = project_default(root).unwrap_err().to_string();
    assert!(err.contains("exactly one of"), "{err}");
}

#[test]
fn slash_agent_takes_overrides_before_its_task() {
    let (o, task) =
        agent_overrides("model=gpt-5 isolation=worktree timeout=0 Fix the bug").unwrap();
    assert_eq!(o["model"], "gpt-5");
    assert_eq!(o["isolation"], "worktree");
    assert_eq!(o["timeout_secs"], 0.0);
    assert_eq!(task, "Fix the bug");
    // A word that is not an override starts the task, even with an `=` later on.
    let (o, task) = agent_overrides("Set x=1 in the config").unwrap();
    assert!(o.is_empty());
    assert_eq!(task, "Set x=1 in the config");
    let (o, task) = agent_overrides("runner=acp:codex").unwrap();
    assert_eq!(o["runner"], "acp:codex");
    assert_eq!(task, "");
    assert!(agent_overrides("timeout=soon go").is_err());
    assert!(agent_overrides("timeout=inf go").is_err());
    assert!(agent_overrides("timeout=NaN go").is_err());
}
