//! The ACP door's own tests: the project default read from `.troupe/config.toml`.

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
