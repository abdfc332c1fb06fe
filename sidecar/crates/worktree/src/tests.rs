//! Worktree and clone tests against real repositories: reuse, safe removal, bad names.

use super::*;

fn repo_with_commit(dir: &Path) -> Repository {
    let repo = Repository::init(dir).unwrap();
    std::fs::write(dir.join("README"), "hi\n").unwrap();
    {
        let mut index = repo.index().unwrap();
        index.add_path(Path::new("README")).unwrap();
        index.write().unwrap();
        let tree = repo.find_tree(index.write_tree().unwrap()).unwrap();
        let sig = git2::Signature::now("t", "t@example.com").unwrap();
        repo.commit(Some("HEAD"), &sig, &sig, "init", &tree, &[])
            .unwrap();
    }
    repo
}

const NAME: MemberName<'static> = MemberName {
    party: "feat-1",
    role: "developer",
    index: 0,
};

#[test]
fn worktree_lifecycle_keeps_unmerged_work_unless_forced() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("repo");
    std::fs::create_dir(&root).unwrap();
    repo_with_commit(&root);
    let base = tmp.path().join("worktrees");

    let co = ensure_worktree(&root, &base, NAME).unwrap();
    assert_eq!(co.branch, "troupe/feat-1/developer-0");
    assert_eq!(co.path, base.join("feat-1/developer-0"));
    assert!(co.path.join("README").exists());
    assert_eq!(repo_root(&co.path).unwrap(), root.canonicalize().unwrap());
    // Reused on restart.
    assert_eq!(ensure_worktree(&root, &base, NAME).unwrap(), co);

    std::fs::write(co.path.join("new.txt"), "work").unwrap();
    assert!(matches!(
        remove_worktree(&root, &base, NAME, false),
        Err(WorktreeError::Dirty { .. })
    ));
    // Commit it on the member's branch: now it is unmerged.
    let wt = Repository::open(&co.path).unwrap();
    let mut index = wt.index().unwrap();
    index.add_path(Path::new("new.txt")).unwrap();
    index.write().unwrap();
    let tree = wt.find_tree(index.write_tree().unwrap()).unwrap();
    let sig = git2::Signature::now("t", "t@example.com").unwrap();
    let parent = wt.head().unwrap().peel_to_commit().unwrap();
    wt.commit(Some("HEAD"), &sig, &sig, "work", &tree, &[&parent])
        .unwrap();
    let err = remove_worktree(&root, &base, NAME, false).unwrap_err();
    assert!(err.to_string().contains("not merged"), "{err}");
    assert!(co.path.exists());

    remove_worktree(&root, &base, NAME, true).unwrap();
    assert!(!co.path.exists());
}

#[test]
fn clones_and_bad_names() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("repo");
    std::fs::create_dir(&root).unwrap();
    repo_with_commit(&root);
    let base = tmp.path().join("clones");
    let co = ensure_clone(&root, &base, NAME).unwrap();
    assert!(co.path.join("README").exists());
    let clone = Repository::open(&co.path).unwrap();
    assert_eq!(
        clone.head().unwrap().shorthand(),
        Some("troupe/feat-1/developer-0")
    );
    remove_clone(&root, &base, NAME, false).unwrap();
    assert!(!co.path.exists());

    let evil = MemberName {
        party: "..",
        role: "x",
        index: 0,
    };
    assert!(matches!(evil.dir(&base), Err(WorktreeError::BadName(_))));
    let evil = MemberName {
        party: "p",
        role: "a/../../b",
        index: 0,
    };
    assert!(matches!(
        ensure_worktree(&root, &base, evil),
        Err(WorktreeError::BadName(_))
    ));
    let empty = tmp.path().join("empty");
    Repository::init(&empty).unwrap();
    assert!(matches!(
        ensure_worktree(&empty, &base, NAME),
        Err(WorktreeError::NoCommits(_))
    ));
}
