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

/// A repository with `README` and `shared.txt` (ten lines), on branch `main`, and a member
/// worktree per name, each with the given files written and committed.
fn landing_repo(tmp: &Path) -> PathBuf {
    let root = tmp.join("repo");
    std::fs::create_dir(&root).unwrap();
    let lines: String = (1..=10).map(|i| format!("line {i}\n")).collect();
    std::fs::write(root.join("shared.txt"), lines).unwrap();
    std::fs::write(root.join("README"), "hi\n").unwrap();
    let repo = Repository::init_opts(
        &root,
        git2::RepositoryInitOptions::new().initial_head("main"),
    )
    .unwrap();
    drop(repo);
    commit_all(&root, "init").unwrap();
    root
}

fn member(root: &Path, role: &'static str, files: &[(&str, &str)]) -> String {
    let name = MemberName {
        party: "p1",
        role,
        index: 0,
    };
    let co = ensure_worktree(root, &root.parent().unwrap().join("wt"), name).unwrap();
    for (f, text) in files {
        std::fs::write(co.path.join(f), text).unwrap();
    }
    commit_all(&co.path, &format!("{role} work")).unwrap();
    co.branch
}

fn edit_line(n: usize, text: &str) -> String {
    (1..=10)
        .map(|i| {
            if i == n {
                format!("{text}\n")
            } else {
                format!("line {i}\n")
            }
        })
        .collect()
}

#[test]
fn review_shows_a_members_diff_commits_and_versions() {
    let tmp = tempfile::tempdir().unwrap();
    let root = landing_repo(tmp.path());
    let dev = member(
        &root,
        "dev",
        &[
            ("a.rs", "fn a() {}\n"),
            ("shared.txt", &edit_line(3, "three")),
        ],
    );
    let state = review::branch_state(&root, &dev, None).unwrap();
    assert_eq!(
        (state.ahead, state.behind, state.target.as_str()),
        (1, 0, "main")
    );
    assert_eq!(state.changed_files, ["a.rs", "shared.txt"]);
    let (_, files) = review::branch_diff(&root, &dev, None, None).unwrap();
    let shared = files.iter().find(|f| f.path == "shared.txt").unwrap();
    assert_eq!(
        (shared.status.as_str(), shared.additions, shared.deletions),
        ("modified", 1, 1)
    );
    assert!(
        shared.patch.contains("-line 3\n+three\n"),
        "{}",
        shared.patch
    );
    assert_eq!(
        files.iter().find(|f| f.path == "a.rs").unwrap().status,
        "added"
    );
    let (_, only) = review::branch_diff(&root, &dev, None, Some("a.rs")).unwrap();
    assert_eq!(only.len(), 1);
    let (base, head) = review::file_versions(&root, &dev, None, "a.rs").unwrap();
    assert_eq!((base, head.as_deref()), (None, Some("fn a() {}\n")));
    let (_, commits) = review::branch_commits(&root, &dev, None).unwrap();
    assert_eq!(commits.len(), 1);
    assert_eq!(commits[0].summary, "dev work");
    assert!(matches!(
        review::branch_state(&root, "troupe/p1/nobody-0", None),
        Err(WorktreeError::NoBranch(_))
    ));
    assert!(matches!(
        review::branch_state(&root, &dev, Some("nope")),
        Err(WorktreeError::NoTargetBranch(_))
    ));
}

fn integrate_all(root: &Path, branches: &[&String], strategy: land::Strategy) -> land::Integration {
    let list: Vec<(String, String)> = branches
        .iter()
        .map(|b| (b.to_string(), b.rsplit('/').next().unwrap().to_string()))
        .collect();
    land::integrate(root, None, &list, strategy, "troupe/p1/landing").unwrap()
}

#[test]
fn landing_integrates_in_order_and_moves_a_clean_target() {
    for strategy in [
        land::Strategy::Merge,
        land::Strategy::Rebase,
        land::Strategy::Squash,
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let root = landing_repo(tmp.path());
        let a = member(&root, "a", &[("a.txt", "a\n")]);
        let b = member(&root, "b", &[("b.txt", "b\n")]);
        let repo = Repository::open(&root).unwrap();
        let start = repo
            .head()
            .unwrap()
            .peel_to_commit()
            .unwrap()
            .id()
            .to_string();
        let result = integrate_all(&root, &[&a, &b], strategy);
        assert_eq!(result.start, start);
        assert!(
            result
                .outcomes
                .iter()
                .all(|(_, o)| matches!(o, land::BranchOutcome::Integrated { commits: 1, .. })),
            "{result:?}"
        );
        let wt = land::checkout_integration(
            &root,
            &tmp.path().join("land"),
            "troupe-p1-landing",
            "troupe/p1/landing",
        )
        .unwrap();
        assert!(wt.join("a.txt").exists() && wt.join("b.txt").exists());
        land::advance_target(&root, "main", &result.start, &result.tip).unwrap();
        // The checked-out target's files moved with it.
        assert_eq!(std::fs::read_to_string(root.join("b.txt")).unwrap(), "b\n");
        let head = repo.head().unwrap().peel_to_commit().unwrap();
        assert_eq!(head.id().to_string(), result.tip);
        let parents = match strategy {
            land::Strategy::Merge => 2, // a fast-forwarded, b merged
            _ => 1,
        };
        assert_eq!(head.parent_count(), parents, "{strategy:?}");
        assert!(!is_dirty(&root).unwrap());
        // Landed branches count as merged, whatever the strategy: cleanup removes them.
        assert!(
            is_merged(&repo, &a).unwrap() && is_merged(&repo, &b).unwrap(),
            "{strategy:?}"
        );
    }
}

#[test]
fn a_conflict_leaves_its_branch_out_and_the_rest_goes_on() {
    let tmp = tempfile::tempdir().unwrap();
    let root = landing_repo(tmp.path());
    let a = member(&root, "a", &[("shared.txt", &edit_line(5, "five by a"))]);
    let b = member(&root, "b", &[("shared.txt", &edit_line(5, "five by b"))]);
    let c = member(&root, "c", &[("c.txt", "c\n")]);
    let result = integrate_all(&root, &[&a, &b, &c], land::Strategy::Merge);
    let outcome = |br: &String| &result.outcomes.iter().find(|(x, _)| x == br).unwrap().1;
    assert!(matches!(
        outcome(&a),
        land::BranchOutcome::Integrated { .. }
    ));
    let land::BranchOutcome::Conflict(files) = outcome(&b) else {
        panic!("{result:?}")
    };
    assert_eq!(files[0].path, "shared.txt");
    assert!(
        files[0].hunks[0].contains("five by a") && files[0].hunks[0].contains("five by b"),
        "{files:?}"
    );
    assert!(matches!(
        outcome(&c),
        land::BranchOutcome::Integrated { .. }
    ));
    // The member branches did not move.
    let repo = Repository::open(&root).unwrap();
    assert_eq!(review::branch_state(&root, &b, None).unwrap().ahead, 1);
    drop(repo);

    // The radar sees the same conflict before anything lands, with the lines at the fork.
    let mut radar = radar::Radar::new();
    let branches: Vec<(String, String)> = [("a", &a), ("b", &b), ("c", &c)]
        .iter()
        .map(|(l, br)| (l.to_string(), br.to_string()))
        .collect();
    let found = radar.scan(&root, None, &branches).unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!((found[0].a.as_str(), found[0].b.as_str()), ("a", "b"));
    assert_eq!(found[0].files, ["shared.txt"]);
    assert_eq!(
        (found[0].ranges[0].start_line, found[0].ranges[0].end_line),
        (5, 5)
    );
    let merges = radar.merges;
    assert_eq!(radar.scan(&root, None, &branches).unwrap(), found);
    assert_eq!(radar.merges, merges, "nothing moved: nothing merged again");
}

#[test]
fn a_dirty_or_moved_target_is_never_touched() {
    let tmp = tempfile::tempdir().unwrap();
    let root = landing_repo(tmp.path());
    let a = member(&root, "a", &[("README", "changed by a\n")]);
    let result = integrate_all(&root, &[&a], land::Strategy::Merge);
    std::fs::write(root.join("README"), "local edit\n").unwrap();
    let err = land::advance_target(&root, "main", &result.start, &result.tip).unwrap_err();
    assert!(matches!(err, WorktreeError::TargetDirty { .. }), "{err}");
    assert!(err.to_string().contains("README"), "{err}");
    assert_eq!(
        std::fs::read_to_string(root.join("README")).unwrap(),
        "local edit\n"
    );
    std::fs::write(root.join("README"), "hi\n").unwrap();
    std::fs::write(root.join("new.txt"), "moved\n").unwrap();
    commit_all(&root, "the person commits meanwhile").unwrap();
    let err = land::advance_target(&root, "main", &result.start, &result.tip).unwrap_err();
    assert!(matches!(err, WorktreeError::TargetMoved { .. }), "{err}");
}

#[test]
fn a_clones_branch_is_brought_over_for_review_and_landing() {
    let tmp = tempfile::tempdir().unwrap();
    let root = landing_repo(tmp.path());
    let name = MemberName {
        party: "p1",
        role: "qa",
        index: 0,
    };
    let co = ensure_clone(&root, &tmp.path().join("clones"), name).unwrap();
    std::fs::write(co.path.join("qa.txt"), "checked\n").unwrap();
    commit_all(&co.path, "qa notes").unwrap();
    assert!(matches!(
        review::branch_state(&root, &co.branch, None),
        Err(WorktreeError::NoBranch(_))
    ));
    land::import_clone_branch(&root, &co.path, &co.branch).unwrap();
    let state = review::branch_state(&root, &co.branch, None).unwrap();
    assert_eq!(
        (state.ahead, state.changed_files.clone()),
        (1, vec!["qa.txt".to_string()])
    );
    // Nothing new: nothing fetched, nothing changed.
    land::import_clone_branch(&root, &co.path, &co.branch).unwrap();
    assert_eq!(
        review::branch_state(&root, &co.branch, None).unwrap(),
        state
    );
    // Unlanded work keeps the clone; once landed (squashed), it goes with its branch.
    let base = tmp.path().join("clones");
    assert!(matches!(
        remove_clone(&root, &base, name, false),
        Err(WorktreeError::Unmerged { .. })
    ));
    let list = [(co.branch.clone(), "qa#0".to_string())];
    let done = land::integrate(
        &root,
        None,
        &list,
        land::Strategy::Squash,
        "troupe/p1/landing",
    )
    .unwrap();
    land::advance_target(&root, "main", &done.start, &done.tip).unwrap();
    remove_clone(&root, &base, name, false).unwrap();
    assert!(!co.path.exists());
    assert!(matches!(
        review::branch_state(&root, &co.branch, None),
        Err(WorktreeError::NoBranch(_))
    ));
}

#[test]
fn rebase_keeps_a_conflict_resolved_by_merging_as_one_commit() {
    let tmp = tempfile::tempdir().unwrap();
    let root = landing_repo(tmp.path());
    let a = member(&root, "a", &[("shared.txt", &edit_line(5, "five by a"))]);
    let b = member(&root, "b", &[("shared.txt", &edit_line(5, "five by b"))]);
    // b resolves the conflict by merging a's branch into its own.
    let wt = tmp.path().join("wt/p1/b-0");
    let repo = Repository::open(&wt).unwrap();
    std::fs::write(wt.join("shared.txt"), edit_line(5, "five by both")).unwrap();
    let mut index = repo.index().unwrap();
    index.add_path(Path::new("shared.txt")).unwrap();
    index.write().unwrap();
    let tree = repo.find_tree(index.write_tree().unwrap()).unwrap();
    let ours = repo.head().unwrap().peel_to_commit().unwrap();
    let theirs = repo
        .find_branch(&a, BranchType::Local)
        .unwrap()
        .get()
        .peel_to_commit()
        .unwrap();
    let a_tip = theirs.id();
    let sig = git2::Signature::now("b", "b@example.com").unwrap();
    repo.commit(
        Some("HEAD"),
        &sig,
        &sig,
        "merge a",
        &tree,
        &[&ours, &theirs],
    )
    .unwrap();
    let result = integrate_all(&root, &[&a, &b], land::Strategy::Rebase);
    assert!(
        result
            .outcomes
            .iter()
            .all(|(_, o)| matches!(o, land::BranchOutcome::Integrated { .. })),
        "{result:?}"
    );
    let main = Repository::open(&root).unwrap();
    // a's commit already sat on main's tip: it lands as it is (whatever the clock says), so
    // b's merge of it is a merge of what landed.
    assert!(
        matches!(&result.outcomes[0].1, land::BranchOutcome::Integrated { tip, .. } if *tip == a_tip.to_string()),
        "{result:?}"
    );
    let tip = main
        .find_commit(git2::Oid::from_str(&result.tip).unwrap())
        .unwrap();
    assert_eq!(tip.parent_count(), 1, "linear history");
    let blob = tip
        .tree()
        .unwrap()
        .get_path(Path::new("shared.txt"))
        .unwrap();
    let text = main.find_blob(blob.id()).unwrap().content().to_vec();
    assert_eq!(
        String::from_utf8(text).unwrap(),
        edit_line(5, "five by both")
    );
}

#[test]
fn a_renamed_file_is_reviewed_against_its_old_name() {
    let tmp = tempfile::tempdir().unwrap();
    let root = landing_repo(tmp.path());
    let name = MemberName {
        party: "p1",
        role: "mover",
        index: 0,
    };
    let co = ensure_worktree(&root, &tmp.path().join("wt"), name).unwrap();
    let text: String = (1..=10).map(|i| format!("line {i}\n")).collect();
    std::fs::remove_file(co.path.join("shared.txt")).unwrap();
    std::fs::write(co.path.join("moved.txt"), format!("{text}line 11\n")).unwrap();
    commit_all(&co.path, "move shared.txt").unwrap();
    let (_, files) = review::branch_diff(&root, &co.branch, None, Some("moved.txt")).unwrap();
    assert_eq!(files.len(), 1, "{files:?}");
    assert_eq!(
        (files[0].status.as_str(), files[0].old_path.as_deref()),
        ("renamed", Some("shared.txt"))
    );
    let (base, head) = review::file_versions(&root, &co.branch, None, "moved.txt").unwrap();
    assert_eq!(base.as_deref(), Some(text.as_str()));
    assert_eq!(head.unwrap(), format!("{text}line 11\n"));
}

/// Points the clone's or worktree's HEAD at `commit`, detached, or at a new `branch` there.
fn move_head(repo: &Repository, commit: git2::Oid, branch: Option<&str>) {
    let target = repo.find_commit(commit).unwrap();
    match branch {
        Some(b) => {
            repo.branch(b, &target, false).unwrap();
            repo.set_head(&format!("refs/heads/{b}")).unwrap();
        }
        None => repo.set_head_detached(commit).unwrap(),
    }
    repo.checkout_head(Some(git2::build::CheckoutBuilder::new().force()))
        .unwrap();
}

fn head_of(path: &Path) -> git2::Oid {
    Repository::open(path)
        .unwrap()
        .head()
        .unwrap()
        .peel_to_commit()
        .unwrap()
        .id()
}

const CLONE: MemberName<'static> = MemberName {
    party: "p2",
    role: "dev",
    index: 0,
};

/// A clone member's commit brought over to the main repository's copy of its branch, then left
/// by the clone (its branch moved back): the copy alone holds it, so a cleanup keeps both and
/// names the copy; forced, it says it deleted the copy and its tip.
#[test]
fn a_clone_whose_head_moved_back_keeps_a_commit_only_its_copy_holds() {
    let tmp = tempfile::tempdir().unwrap();
    let root = landing_repo(tmp.path());
    let base = tmp.path().join("clones");
    let co = ensure_clone(&root, &base, CLONE).unwrap();
    let start = head_of(&co.path);
    std::fs::write(co.path.join("work.txt"), "unmerged\n").unwrap();
    commit_all(&co.path, "work").unwrap();
    let work = head_of(&co.path);
    land::import_clone_branch(&root, &co.path, &co.branch).unwrap();
    // The clone's branch (and HEAD) back where it started: `git reset --hard`.
    let clone = Repository::open(&co.path).unwrap();
    let start_commit = clone.find_object(start, None).unwrap();
    clone
        .reset(&start_commit, git2::ResetType::Hard, None)
        .unwrap();
    assert_eq!(head_of(&co.path), start);

    let Err(WorktreeError::Unmerged { refs, .. }) = remove_clone(&root, &base, CLONE, false) else {
        panic!("the copy's commit would be lost");
    };
    assert_eq!(
        refs.iter()
            .map(|r| (r.name.as_str(), r.tip.clone(), r.repo.clone()))
            .collect::<Vec<_>>(),
        [(co.branch.as_str(), work.to_string(), root.clone())]
    );
    assert!(co.path.exists());
    let main = Repository::open(&root).unwrap();
    assert!(main.find_branch(&co.branch, BranchType::Local).is_ok());

    let dropped = remove_clone(&root, &base, CLONE, true).unwrap();
    assert_eq!(
        dropped
            .iter()
            .map(|r| (r.name.as_str(), r.tip.clone(), r.unmerged))
            .collect::<Vec<_>>(),
        [(co.branch.as_str(), work.to_string(), true)]
    );
    assert!(!co.path.exists());
    assert!(main.find_branch(&co.branch, BranchType::Local).is_err());
}

/// A clone whose HEAD is on another branch (or detached) while its own branch holds unmerged
/// commits: every ref of the clone is checked, not just its HEAD.
#[test]
fn a_clone_on_another_branch_keeps_its_own_branchs_commits() {
    let tmp = tempfile::tempdir().unwrap();
    let root = landing_repo(tmp.path());
    let base = tmp.path().join("clones");
    let co = ensure_clone(&root, &base, CLONE).unwrap();
    let start = head_of(&co.path);
    std::fs::write(co.path.join("work.txt"), "unmerged\n").unwrap();
    commit_all(&co.path, "work").unwrap();
    let work = head_of(&co.path);
    let clone = Repository::open(&co.path).unwrap();
    move_head(&clone, start, Some("elsewhere"));

    let Err(WorktreeError::Unmerged { refs, .. }) = remove_clone(&root, &base, CLONE, false) else {
        panic!("the clone's branch would be lost");
    };
    assert_eq!(
        refs.iter()
            .map(|r| (r.name.as_str(), r.tip.clone(), r.repo.clone()))
            .collect::<Vec<_>>(),
        [(co.branch.as_str(), work.to_string(), co.path.clone())]
    );
    assert!(co.path.exists());

    // A detached HEAD with a commit of its own is named too.
    move_head(&clone, start, None);
    std::fs::write(co.path.join("more.txt"), "detached\n").unwrap();
    commit_all(&co.path, "detached work").unwrap();
    let detached = head_of(&co.path);
    let err = remove_clone(&root, &base, CLONE, false).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("not merged"), "{text}");
    assert!(text.contains(&co.branch), "{text}");
    assert!(
        text.contains(&format!("HEAD at {}", &detached.to_string()[..10])),
        "{text}"
    );

    let dropped = remove_clone(&root, &base, CLONE, true).unwrap();
    let mut lost: Vec<(String, String)> = dropped
        .iter()
        .filter(|r| r.unmerged)
        .map(|r| (r.name.clone(), r.tip.clone()))
        .collect();
    lost.sort();
    assert_eq!(
        lost,
        [
            ("HEAD".to_string(), detached.to_string()),
            (co.branch.clone(), work.to_string())
        ]
    );
    assert!(!co.path.exists());
}

/// Merged work goes without force, and a commit reachable from a branch that is kept is not
/// lost: the cleanup deletes the member's branch and says so.
#[test]
fn merged_or_kept_elsewhere_work_goes_without_force() {
    let tmp = tempfile::tempdir().unwrap();
    let root = landing_repo(tmp.path());
    let base = tmp.path().join("clones");
    let co = ensure_clone(&root, &base, CLONE).unwrap();
    std::fs::write(co.path.join("work.txt"), "kept\n").unwrap();
    commit_all(&co.path, "work").unwrap();
    let work = head_of(&co.path);
    land::import_clone_branch(&root, &co.path, &co.branch).unwrap();
    // Someone keeps the work on a branch of their own.
    let main = Repository::open(&root).unwrap();
    main.branch("keep", &main.find_commit(work).unwrap(), false)
        .unwrap();
    let dropped = remove_clone(&root, &base, CLONE, false).unwrap();
    assert_eq!(
        dropped
            .iter()
            .map(|r| (r.name.as_str(), r.tip.clone(), r.unmerged))
            .collect::<Vec<_>>(),
        [(co.branch.as_str(), work.to_string(), false)]
    );
    assert!(!co.path.exists());
    assert!(main.find_branch("keep", BranchType::Local).is_ok());
}

/// A worktree whose HEAD was detached and given a commit: that commit goes with the worktree,
/// so it is kept (its branch, merged, is not the question).
#[test]
fn a_worktrees_detached_commit_keeps_it() {
    let tmp = tempfile::tempdir().unwrap();
    let root = landing_repo(tmp.path());
    let base = tmp.path().join("wt");
    let name = MemberName {
        party: "p3",
        role: "dev",
        index: 0,
    };
    let co = ensure_worktree(&root, &base, name).unwrap();
    let start = head_of(&co.path);
    move_head(&Repository::open(&co.path).unwrap(), start, None);
    std::fs::write(co.path.join("loose.txt"), "detached\n").unwrap();
    commit_all(&co.path, "detached work").unwrap();
    let loose = head_of(&co.path);
    let Err(WorktreeError::Unmerged { refs, .. }) = remove_worktree(&root, &base, name, false)
    else {
        panic!("the detached commit would be lost");
    };
    assert_eq!(
        refs.iter()
            .map(|r| (r.name.as_str(), r.tip.clone()))
            .collect::<Vec<_>>(),
        [("HEAD", loose.to_string())]
    );
    assert!(co.path.exists());
    let dropped = remove_worktree(&root, &base, name, true).unwrap();
    let mut seen: Vec<(String, bool)> = dropped
        .iter()
        .map(|r| (r.name.clone(), r.unmerged))
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        [("HEAD".to_string(), true), (co.branch.clone(), false)]
    );
    assert!(!co.path.exists());
}

/// Whether `branch`'s work is in the main checkout's HEAD (a missing branch is).
fn is_merged(repo: &Repository, branch: &str) -> Result<bool, WorktreeError> {
    let Ok(b) = repo.find_branch(branch, BranchType::Local) else {
        return Ok(true);
    };
    is_merged_commit(repo, &b.get().peel_to_commit()?)
}

#[test]
fn local_changes_elsewhere_are_carried_over_and_overlapping_ones_named() {
    let tmp = tempfile::tempdir().unwrap();
    let root = landing_repo(tmp.path());
    let a = member(
        &root,
        "a",
        &[("README", "changed by a\n"), ("new.txt", "from a\n")],
    );
    let result = integrate_all(&root, &[&a], land::Strategy::Merge);
    // The person edits another file and has an untracked note: the landing goes through.
    std::fs::write(root.join("shared.txt"), "the person's own edit\n").unwrap();
    std::fs::write(root.join("scratch.md"), "untracked\n").unwrap();
    // An untracked file the landing would create, and a tracked file it changes: named.
    std::fs::write(root.join("new.txt"), "the person's\n").unwrap();
    let err = land::advance_target(&root, "main", &result.start, &result.tip).unwrap_err();
    match &err {
        WorktreeError::TargetDirty { files, .. } => assert_eq!(files, &["new.txt"], "{err}"),
        other => panic!("{other}"),
    }
    assert!(
        err.to_string()
            .contains("files this landing changes (new.txt)"),
        "{err}"
    );
    std::fs::remove_file(root.join("new.txt")).unwrap();
    land::advance_target(&root, "main", &result.start, &result.tip).unwrap();
    assert_eq!(
        std::fs::read_to_string(root.join("README")).unwrap(),
        "changed by a\n"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("new.txt")).unwrap(),
        "from a\n"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("shared.txt")).unwrap(),
        "the person's own edit\n"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("scratch.md")).unwrap(),
        "untracked\n"
    );
    let repo = git2::Repository::open(&root).unwrap();
    let head = repo
        .head()
        .unwrap()
        .peel_to_commit()
        .unwrap()
        .id()
        .to_string();
    assert_eq!(head, result.tip);
    // The landed file is clean; the person's edit is still theirs, uncommitted.
    assert!(repo.status_file(Path::new("README")).unwrap().is_empty());
    assert!(
        repo.status_file(Path::new("shared.txt"))
            .unwrap()
            .contains(git2::Status::WT_MODIFIED)
    );
}

#[test]
fn a_check_says_what_a_removal_would_do_and_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("repo");
    std::fs::create_dir(&root).unwrap();
    let repo = repo_with_commit(&root);
    let base = tmp.path().join("worktrees");
    let co = ensure_worktree(&root, &base, NAME).unwrap();
    // Nothing ahead of the target: it would go, with its (merged) branch.
    let refs = check_remove_worktree(&root, &base, NAME).unwrap();
    assert_eq!(refs.len(), 1, "{refs:?}");
    assert_eq!(refs[0].name, "troupe/feat-1/developer-0");
    assert!(!refs[0].unmerged);
    assert!(co.path.exists());
    assert!(repo.find_branch(&co.branch, BranchType::Local).is_ok());
    // Uncommitted work: it would be refused.
    std::fs::write(co.path.join("new.txt"), "work").unwrap();
    assert!(matches!(
        check_remove_worktree(&root, &base, NAME),
        Err(WorktreeError::Dirty { .. })
    ));
    assert!(co.path.join("new.txt").exists());
    // A clone the same way.
    let clones = tmp.path().join("clones");
    let cl = ensure_clone(&root, &clones, NAME).unwrap();
    check_remove_clone(&root, &clones, NAME).unwrap();
    assert!(cl.path.exists());
    std::fs::write(cl.path.join("new.txt"), "work").unwrap();
    assert!(matches!(
        check_remove_clone(&root, &clones, NAME),
        Err(WorktreeError::Dirty { .. })
    ));
}

/// Every file under `dir`, by path relative to it, with its bytes (`with_bytes`) or nothing.
fn files_under(dir: &Path, with_bytes: bool) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut left = vec![dir.to_path_buf()];
    while let Some(d) = left.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if entry.file_type().unwrap().is_dir() {
                left.push(path);
            } else {
                let bytes = if with_bytes {
                    std::fs::read(&path).unwrap()
                } else {
                    Vec::new()
                };
                out.push((path.strip_prefix(dir).unwrap().to_path_buf(), bytes));
            }
        }
    }
    out.sort();
    out
}

/// What a member could harm in the main repository: its refs and HEAD, the listing of its
/// objects, its config, hooks and info.
fn main_repo_state(root: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let git = root.join(".git");
    let mut state = files_under(&git.join("objects"), false);
    for dir in ["refs", "hooks", "info", "logs"] {
        state.extend(files_under(&git.join(dir), true));
    }
    for file in ["HEAD", "config", "packed-refs"] {
        state.push((
            file.into(),
            std::fs::read(git.join(file)).unwrap_or_default(),
        ));
    }
    state
}

/// A member's clone is a repository of its own that borrows the main repository's objects
/// (`objects/info/alternates`): no object file is hardlinked or otherwise shared, and what the
/// member does there (commits, branches, tags, config, hooks) leaves the main repository as it
/// was, until the daemon brings its branch over.
#[test]
fn a_borrowing_clone_shares_no_file_with_the_main_repository_and_writes_nothing_there() {
    use std::os::unix::fs::MetadataExt;
    let tmp = tempfile::tempdir().unwrap();
    let root = landing_repo(tmp.path());
    let main = Repository::open(&root).unwrap();
    // The person's own settings for this repository, and a file their git ignores.
    main.config()
        .unwrap()
        .set_str("user.email", "person@example.com")
        .unwrap();
    std::fs::create_dir_all(root.join(".git/info")).unwrap();
    std::fs::write(root.join(".git/info/exclude"), "*.log\n").unwrap();
    let before = main_repo_state(&root);
    let base = tmp.path().join("clones");
    let co = ensure_clone(&root, &base, CLONE).unwrap();
    let main_head = head_of(&root);

    // Its own repository, borrowing the main one's objects.
    assert!(is_own_repo(&co.path));
    let dot_git = co.path.join(".git");
    let alternates = std::fs::read_to_string(dot_git.join("objects/info/alternates")).unwrap();
    assert_eq!(
        alternates,
        format!(
            "{}\n",
            root.join(".git/objects").canonicalize().unwrap().display()
        )
    );
    let clone = Repository::open(&co.path).unwrap();
    assert_eq!(clone.head().unwrap().shorthand(), Some(co.branch.as_str()));
    assert_eq!(head_of(&co.path), main_head);
    assert_eq!(
        clone.find_remote("origin").unwrap().url(),
        Some(root.to_string_lossy().as_ref())
    );
    assert_eq!(
        clone.refname_to_id("refs/remotes/origin/main").unwrap(),
        main_head
    );
    assert_eq!(
        clone.config().unwrap().get_string("user.email").unwrap(),
        "person@example.com"
    );
    std::fs::write(co.path.join("build.log"), "ignored\n").unwrap();
    assert!(!is_dirty(&co.path).unwrap(), "info/exclude is the person's");
    // Reused as it is.
    assert_eq!(ensure_clone(&root, &base, CLONE).unwrap(), co);

    // What a member does in its clone: commit, branch, tag, its own config and hooks, a gc.
    std::fs::write(co.path.join("work.txt"), "work\n").unwrap();
    commit_all(&co.path, "work").unwrap();
    let work = head_of(&co.path);
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(&co.path)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
    };
    std::fs::write(co.path.join("more.txt"), "more\n").unwrap();
    git(&["add", "more.txt"]);
    git(&["-c", "user.name=m", "commit", "-qm", "more"]);
    let more = head_of(&co.path);
    git(&["branch", "side"]);
    git(&["tag", "v1"]);
    git(&["config", "core.hooksPath", "/nowhere"]);
    std::fs::write(dot_git.join("hooks/pre-commit"), "#!/bin/sh\n").unwrap();
    git(&["gc", "--quiet", "--prune=now"]);
    // git reads the main repository's objects through the alternates.
    git(&["log", "--oneline", "origin/main..HEAD"]);
    git(&["fsck", "--no-progress"]);

    // Nothing of the clone's objects is a hardlink, nor any file of the main repository's.
    let main_inodes: std::collections::HashSet<(u64, u64)> =
        files_under(&root.join(".git/objects"), false)
            .iter()
            .map(|(p, _)| {
                let m = std::fs::metadata(root.join(".git/objects").join(p)).unwrap();
                (m.dev(), m.ino())
            })
            .collect();
    let own = files_under(&dot_git.join("objects"), false);
    assert!(own.len() > 1, "{own:?}");
    for (p, _) in &own {
        let m = std::fs::metadata(dot_git.join("objects").join(p)).unwrap();
        assert_eq!(m.nlink(), 1, "{} is hardlinked", p.display());
        assert!(
            !main_inodes.contains(&(m.dev(), m.ino())),
            "{} is the main repository's file",
            p.display()
        );
    }
    // The main repository is as it was: refs, objects, config, hooks; it lacks the commits.
    assert_eq!(main_repo_state(&root), before);
    assert!(main.find_commit(work).is_err());
    assert!(matches!(
        review::branch_state(&root, &co.branch, None),
        Err(WorktreeError::NoBranch(_))
    ));

    // The daemon brings the branch over, with its commits.
    land::import_clone_branch(&root, &co.path, &co.branch).unwrap();
    let state = review::branch_state(&root, &co.branch, None).unwrap();
    assert_eq!((state.head, state.ahead), (more.to_string(), 2));
    assert_eq!(main.find_commit(work).unwrap().summary(), Some("work"));
    assert!(main.find_branch("side", BranchType::Local).is_err());
    assert!(main.find_reference("refs/tags/v1").is_err());
    assert_eq!(head_of(&root), main_head);

    // A clone of a linked worktree of the main repository borrows the main one's objects.
    let wt = ensure_worktree(&root, &tmp.path().join("wt"), NAME).unwrap();
    let other = MemberName {
        party: "p4",
        role: "dev",
        index: 0,
    };
    let of_wt = ensure_clone(&wt.path, &base, other).unwrap();
    assert_eq!(
        std::fs::read_to_string(of_wt.path.join(".git/objects/info/alternates")).unwrap(),
        alternates
    );
    assert!(!is_own_repo(&wt.path));
    assert_eq!(head_of(&of_wt.path), head_of(&wt.path));

    // A clone made again (its folder deleted) goes on from the branch brought over.
    std::fs::remove_dir_all(&co.path).unwrap();
    let again = ensure_clone(&root, &base, CLONE).unwrap();
    assert_eq!(head_of(&again.path), more);
    assert!(!base.join("p2/.dev-0.new").exists());
}

/// A member's clone that points git elsewhere (a `.git` file naming the person's git dir, a
/// `core.worktree` naming the data dir) is refused before the daemon commits or fetches there:
/// the person's branch does not move and nothing outside the clone is read into a commit.
#[test]
fn a_clone_that_points_git_elsewhere_is_refused_before_the_daemon_touches_it() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("main");
    let main = repo_with_commit(&root);
    let main_tip = main.head().unwrap().target().unwrap();
    let base = tmp.path().join("clones");
    let name = MemberName {
        party: "p",
        role: "dev",
        index: 0,
    };
    let co = ensure_clone(&root, &base, name).unwrap();
    std::fs::write(co.path.join("new.txt"), "x").unwrap();
    assert!(
        commit_all_own(&co.path, "fine").unwrap().is_some(),
        "as made, it commits"
    );

    // `core.worktree` sending the work tree to a folder of secrets.
    let secrets = tmp.path().join("secrets");
    std::fs::create_dir_all(&secrets).unwrap();
    std::fs::write(secrets.join("token"), "SECRET").unwrap();
    let clone = Repository::open(&co.path).unwrap();
    clone
        .config()
        .unwrap()
        .set_str("core.worktree", secrets.to_str().unwrap())
        .unwrap();
    let err = commit_all_own(&co.path, "steal").unwrap_err();
    assert!(matches!(err, WorktreeError::NotOwnRepo { .. }), "{err}");
    assert!(land::import_clone_branch(&root, &co.path, &co.branch).is_err());
    clone.config().unwrap().remove("core.worktree").unwrap();

    // `.git` swapped for a file naming the person's git dir.
    std::fs::rename(co.path.join(".git"), co.path.join(".g")).unwrap();
    std::fs::write(
        co.path.join(".git"),
        format!("gitdir: {}\n", root.join(".git").display()),
    )
    .unwrap();
    std::fs::write(co.path.join("pwned.txt"), "x").unwrap();
    let err = commit_all_own(&co.path, "pwned").unwrap_err();
    assert!(matches!(err, WorktreeError::NotOwnRepo { .. }), "{err}");
    assert_eq!(
        main.head().unwrap().target().unwrap(),
        main_tip,
        "the person's branch stayed"
    );
}
