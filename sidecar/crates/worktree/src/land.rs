//! The merge queue's git half: member branches integrated one at a time, in memory, on an
//! integration branch that starts at the target's tip (merge, rebase or squash); a conflict
//! names its files and hunks and leaves that branch out; the integration branch's own worktree
//! is where tests run; the target is moved last, only if it has not moved meanwhile and is not
//! checked out with changes. No branch is rewritten; nothing but the target ever moves.

use std::path::{Path, PathBuf};

use git2::{BranchType, Oid, Repository, Signature, StatusOptions, WorktreeAddOptions};

use crate::WorktreeError;
use crate::review::{commits_between, target_branch, target_tip, tip};

/// How a member branch joins the integration branch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// A fast-forward when possible, else a merge commit.
    Merge,
    /// The branch's commits replayed one by one (linear history, authors kept).
    Rebase,
    /// One commit holding the branch's whole change.
    Squash,
}

/// A file git could not merge, with its conflicting hunks (conflict markers included).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConflictFile {
    pub path: String,
    pub hunks: Vec<String>,
}

/// What happened to one branch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BranchOutcome {
    /// Integrated: the integration branch's tip after it, and how many commits it brought.
    Integrated { tip: String, commits: usize },
    /// The branch has nothing the integration branch lacks.
    NothingToLand,
    /// Left out; the integration branch is as it was before it.
    Conflict(Vec<ConflictFile>),
}

/// The integration branch after every branch had its turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Integration {
    pub target: String,
    /// The target's tip when integration started (the target may only move from here).
    pub start: String,
    /// The integration branch's tip.
    pub tip: String,
    pub outcomes: Vec<(String, BranchOutcome)>,
}

fn signature(repo: &Repository) -> Result<Signature<'static>, WorktreeError> {
    Ok(repo
        .signature()
        .map(|s| s.to_owned())
        .or_else(|_| Signature::now("troupe", "troupe@localhost"))?)
}

/// The conflicts of a merged index: each file with its conflicting hunks.
fn conflicts_of(
    repo: &Repository,
    index: &git2::Index,
) -> Result<Vec<ConflictFile>, WorktreeError> {
    let mut files = Vec::new();
    for conflict in index.conflicts()? {
        let conflict = conflict?;
        let entry = conflict
            .our
            .as_ref()
            .or(conflict.their.as_ref())
            .or(conflict.ancestor.as_ref());
        let Some(entry) = entry else { continue };
        let path = String::from_utf8_lossy(&entry.path).into_owned();
        let hunks = match (&conflict.ancestor, &conflict.our, &conflict.their) {
            (anc, Some(ours), Some(theirs)) => {
                // Added on both sides: no ancestor, so each side is all new.
                let merged =
                    repo.merge_file_from_index(anc.as_ref().unwrap_or(ours), ours, theirs, None)?;
                marker_hunks(&String::from_utf8_lossy(merged.content()))
            }
            _ => vec![format!("{path}: deleted on one side, changed on the other")],
        };
        files.push(ConflictFile { path, hunks });
    }
    Ok(files)
}

/// The `<<<<<<< … >>>>>>>` blocks of a merged file (at most 20, each at most 80 lines).
pub(crate) fn marker_hunks(text: &str) -> Vec<String> {
    let mut hunks = Vec::new();
    let mut current: Option<Vec<&str>> = None;
    for line in text.lines() {
        if line.starts_with("<<<<<<<") {
            current = Some(vec![line]);
        } else if let Some(lines) = current.as_mut() {
            if lines.len() < 80 {
                lines.push(line);
            }
            if line.starts_with(">>>>>>>") {
                if let Some(done) = current.take() {
                    hunks.push(done.join("\n"));
                }
                if hunks.len() == 20 {
                    break;
                }
            }
        }
    }
    hunks
}

/// Brings `branch` onto `onto` by `strategy`; `Ok(Err(conflicts))` when git cannot.
fn integrate_one(
    repo: &Repository,
    onto: Oid,
    branch: &str,
    label: &str,
    strategy: Strategy,
) -> Result<Result<(Oid, usize), Vec<ConflictFile>>, WorktreeError> {
    let head = tip(repo, branch)?;
    let onto_commit = repo.find_commit(onto)?;
    let head_commit = repo.find_commit(head)?;
    let sig = signature(repo)?;
    match strategy {
        Strategy::Merge => {
            if repo.graph_descendant_of(head, onto)? {
                let n = commits_between(repo, onto, head)?.len();
                return Ok(Ok((head, n)));
            }
            let mut index = repo.merge_commits(&onto_commit, &head_commit, None)?;
            if index.has_conflicts() {
                return Ok(Err(conflicts_of(repo, &index)?));
            }
            let tree = repo.find_tree(index.write_tree_to(repo)?)?;
            if tree.id() == onto_commit.tree_id() {
                return Ok(Ok((onto, 0))); // landed before (squashed or rebased)
            }
            let n = commits_between(repo, onto, head)?.len();
            let message = format!("Merge {branch} ({label})");
            let id = repo.commit(
                None,
                &sig,
                &sig,
                &message,
                &tree,
                &[&onto_commit, &head_commit],
            )?;
            Ok(Ok((id, n)))
        }
        Strategy::Squash => {
            let mut index = repo.merge_commits(&onto_commit, &head_commit, None)?;
            if index.has_conflicts() {
                return Ok(Err(conflicts_of(repo, &index)?));
            }
            let tree = repo.find_tree(index.write_tree_to(repo)?)?;
            if tree.id() == onto_commit.tree_id() {
                return Ok(Ok((onto, 0)));
            }
            let commits = commits_between(repo, onto, head)?;
            let mut message = format!("{label}: {branch}\n\n");
            for c in &commits {
                message.push_str(&format!("* {}\n", c.summary().unwrap_or_default()));
            }
            let id = repo.commit(None, &sig, &sig, &message, &tree, &[&onto_commit])?;
            Ok(Ok((id, commits.len())))
        }
        Strategy::Rebase => {
            let commits = commits_between(repo, onto, head)?;
            if commits.iter().any(|c| c.parent_count() > 1) {
                // Merges (a conflict resolved by merging) do not replay one by one: the branch
                // goes on as one commit holding its whole change, as with squash.
                return integrate_one(repo, onto, branch, label, Strategy::Squash);
            }
            let mut current = onto_commit;
            let mut n = 0;
            for c in &commits {
                if c.parent_ids().eq([current.id()]) {
                    // Already on top of what went before: kept as it is, as git's rebase
                    // does, so a later branch that merged this one still finds it.
                    current = c.clone();
                    n += 1;
                    continue;
                }
                let mut index = repo.cherrypick_commit(c, &current, 0, None)?;
                if index.has_conflicts() {
                    return Ok(Err(conflicts_of(repo, &index)?));
                }
                let tree = repo.find_tree(index.write_tree_to(repo)?)?;
                if tree.id() == current.tree_id() {
                    continue; // already there
                }
                let message = c.message().unwrap_or_default();
                let id = repo.commit(None, &c.author(), &sig, message, &tree, &[&current])?;
                current = repo.find_commit(id)?;
                n += 1;
            }
            Ok(Ok((current.id(), n)))
        }
    }
}

/// Integrates `branches` (branch name, label), in order, on top of `target`'s tip and points
/// `integration_branch` at the result. Conflicting branches are left out, the others go on.
pub fn integrate(
    repo_root: &Path,
    target: Option<&str>,
    branches: &[(String, String)],
    strategy: Strategy,
    integration_branch: &str,
) -> Result<Integration, WorktreeError> {
    let repo = Repository::open(repo_root)?;
    let target = target_branch(&repo, target)?;
    let start = target_tip(&repo, &target)?;
    let mut current = start;
    let mut outcomes = Vec::new();
    for (branch, label) in branches {
        let head = tip(&repo, branch)?;
        let outcome = if head == current || repo.graph_descendant_of(current, head)? {
            BranchOutcome::NothingToLand
        } else {
            match integrate_one(&repo, current, branch, label, strategy)? {
                Ok((_, 0)) => BranchOutcome::NothingToLand,
                Ok((id, commits)) => {
                    current = id;
                    BranchOutcome::Integrated {
                        tip: id.to_string(),
                        commits,
                    }
                }
                Err(files) => BranchOutcome::Conflict(files),
            }
        };
        outcomes.push((branch.clone(), outcome));
    }
    repo.reference(
        &format!("refs/heads/{integration_branch}"),
        current,
        true,
        "troupe: integration",
    )?;
    Ok(Integration {
        target,
        start: start.to_string(),
        tip: current.to_string(),
        outcomes,
    })
}

/// Refuses to reset an integration branch someone else committed on: its tip must be the one
/// the last landing wrote (`expected`, when there was one).
pub fn check_integration(
    repo_root: &Path,
    integration_branch: &str,
    expected: Option<&str>,
) -> Result<(), WorktreeError> {
    let repo = Repository::open(repo_root)?;
    if let (Some(expected), Ok(now)) = (expected, tip(&repo, integration_branch))
        && now.to_string() != expected
    {
        return Err(WorktreeError::IntegrationTouched {
            branch: integration_branch.to_string(),
            what: format!("its tip is {now}, not {expected} as the last landing left it"),
        });
    }
    // Uncommitted changes in its worktree are the last test run's (a build rewriting a lockfile):
    // they are Troupe's to reset. Only commits are someone's work.
    Ok(())
}

/// The integration branch's worktree at `dir`, its files set to the branch's tip (made on first
/// use; files left by an earlier test run are removed).
pub fn checkout_integration(
    repo_root: &Path,
    dir: &Path,
    worktree_name: &str,
    integration_branch: &str,
) -> Result<PathBuf, WorktreeError> {
    let repo = Repository::open(repo_root)?;
    if !dir.join(".git").exists() {
        if let Ok(stale) = repo.find_worktree(worktree_name) {
            stale.prune(Some(git2::WorktreePruneOptions::new().valid(true)))?;
        }
        if let Some(parent) = dir.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let reference = repo
            .find_branch(integration_branch, BranchType::Local)?
            .into_reference();
        let mut opts = WorktreeAddOptions::new();
        opts.reference(Some(&reference));
        repo.worktree(worktree_name, dir, Some(&opts))?;
    }
    let wt = Repository::open(dir)?;
    wt.set_head(&format!("refs/heads/{integration_branch}"))?;
    wt.checkout_head(Some(
        git2::build::CheckoutBuilder::new()
            .force()
            .remove_untracked(true),
    ))?;
    Ok(dir.to_path_buf())
}

/// Where `branch` is checked out: the main checkout or a linked worktree.
pub(crate) fn checked_out_at(
    repo: &Repository,
    branch: &str,
) -> Result<Option<PathBuf>, WorktreeError> {
    let refname = format!("refs/heads/{branch}");
    let on = |r: &Repository| {
        r.head().ok().and_then(|h| h.name().map(String::from)) == Some(refname.clone())
    };
    if !repo.is_bare() && on(repo) {
        return Ok(repo.workdir().map(Path::to_path_buf));
    }
    for name in repo.worktrees()?.iter().flatten() {
        let Ok(wt) = repo.find_worktree(name) else {
            continue;
        };
        if let Ok(r) = Repository::open_from_worktree(&wt)
            && on(&r)
        {
            return Ok(Some(wt.path().to_path_buf()));
        }
    }
    Ok(None)
}

/// The files with local changes in the checkout at `path` (tracked files changed or staged, and
/// untracked ones; not ignored ones).
fn local_changes(path: &Path) -> Result<Vec<String>, WorktreeError> {
    let repo = Repository::open(path)?;
    let mut opts = StatusOptions::new();
    opts.include_untracked(true)
        .recurse_untracked_dirs(true)
        .include_ignored(false);
    Ok(repo
        .statuses(Some(&mut opts))?
        .iter()
        .filter_map(|e| e.path().map(String::from))
        .collect())
}

/// The paths that differ between commits `from` and `to` (either side of a rename).
fn changed_paths(
    repo: &Repository,
    from: Oid,
    to: Oid,
) -> Result<std::collections::BTreeSet<String>, WorktreeError> {
    let (a, b) = (
        repo.find_commit(from)?.tree()?,
        repo.find_commit(to)?.tree()?,
    );
    let diff = repo.diff_tree_to_tree(Some(&a), Some(&b), None)?;
    Ok(diff
        .deltas()
        .flat_map(|d| [d.old_file().path(), d.new_file().path()])
        .flatten()
        .map(|p| p.to_string_lossy().into_owned())
        .collect())
}

/// Whether the target may be moved from `start` to `new`: it exists, is where integration
/// started, and, where it is checked out, its local changes touch none of the files the landing
/// changes (git's own rule for a merge: changes elsewhere are carried over; overlapping ones are
/// named).
pub fn check_target(
    repo_root: &Path,
    target: &str,
    start: &str,
    new: &str,
) -> Result<(), WorktreeError> {
    let repo = Repository::open(repo_root)?;
    let now = target_tip(&repo, target)?;
    if now.to_string() != start {
        return Err(WorktreeError::TargetMoved {
            target: target.to_string(),
        });
    }
    if let Some(path) = checked_out_at(&repo, target)? {
        let local = local_changes(&path)?;
        if !local.is_empty() {
            let landing = changed_paths(&repo, now, Oid::from_str(new)?)?;
            let files: Vec<String> = local.into_iter().filter(|f| landing.contains(f)).collect();
            if !files.is_empty() {
                return Err(WorktreeError::TargetDirty {
                    target: target.to_string(),
                    path,
                    files,
                });
            }
        }
    }
    Ok(())
}

/// Moves `target` from `start` to `new` (a descendant), updating its checkout's files where it is
/// checked out (local changes to other files are kept). Refused, with nothing changed, if the
/// target moved or its checkout has changes to the files the landing changes.
pub fn advance_target(
    repo_root: &Path,
    target: &str,
    start: &str,
    new: &str,
) -> Result<(), WorktreeError> {
    check_target(repo_root, target, start, new)?;
    let repo = Repository::open(repo_root)?;
    let (start, new) = (Oid::from_str(start)?, Oid::from_str(new)?);
    let refname = format!("refs/heads/{target}");
    let moved = || WorktreeError::TargetMoved {
        target: target.to_string(),
    };
    if repo.refname_to_id(&refname)? != start {
        return Err(moved());
    }
    let checkout = match checked_out_at(&repo, target)? {
        Some(path) => Some((Repository::open(&path)?, path)),
        None => None,
    };
    if let Some((wt, path)) = &checkout {
        // From HEAD's tree (the target at `start`), never over changes or ignored files.
        let to = wt.find_commit(new)?;
        wt.checkout_tree(
            to.as_object(),
            Some(
                git2::build::CheckoutBuilder::new()
                    .safe()
                    .overwrite_ignored(false),
            ),
        )
        .map_err(|e| WorktreeError::TargetDirty {
            target: target.to_string(),
            path: path.clone(),
            files: vec![e.message().to_string()],
        })?;
    }
    // Moved only if it is still where integration started (compare and swap).
    if let Err(e) = repo.reference_matching(&refname, new, true, start, "troupe: land") {
        if let Some((wt, path)) = &checkout {
            // Put the person's files back as they were: those the landing changed.
            let diff = wt.diff_tree_to_tree(
                Some(&wt.find_commit(start)?.tree()?),
                Some(&wt.find_commit(new)?.tree()?),
                None,
            )?;
            let mut undo = git2::build::CheckoutBuilder::new();
            undo.force().update_index(true);
            for d in diff.deltas() {
                for p in [d.old_file().path(), d.new_file().path()]
                    .into_iter()
                    .flatten()
                {
                    undo.path(p);
                }
            }
            let commit = wt.find_commit(start)?;
            if let Err(u) = wt.checkout_tree(commit.as_object(), Some(&mut undo)) {
                return Err(WorktreeError::Undo {
                    path: path.clone(),
                    reason: format!("{e}; then restoring its files failed: {u}"),
                });
            }
        }
        return Err(if repo.refname_to_id(&refname).ok() != Some(start) {
            moved()
        } else {
            WorktreeError::Git(e)
        });
    }
    Ok(())
}

/// Deletes the integration branch's worktree and branch.
pub fn remove_integration(
    repo_root: &Path,
    dir: &Path,
    worktree_name: &str,
    integration_branch: &str,
) -> Result<(), WorktreeError> {
    let repo = Repository::open(repo_root)?;
    if let Ok(wt) = repo.find_worktree(worktree_name) {
        wt.prune(Some(
            git2::WorktreePruneOptions::new()
                .valid(true)
                .working_tree(true),
        ))?;
    }
    if dir.exists() {
        std::fs::remove_dir_all(dir)?;
    }
    if let Ok(mut b) = repo.find_branch(integration_branch, BranchType::Local) {
        b.delete()?;
    }
    Ok(())
}

/// Copies a clone's branch into the main repository (a local fetch), so it can be reviewed and
/// landed like a worktree's.
pub fn import_clone_branch(
    repo_root: &Path,
    clone: &Path,
    branch: &str,
) -> Result<(), WorktreeError> {
    let repo = Repository::open(repo_root)?;
    // Nothing new in the clone (the radar asks every second): no fetch. The clone is the
    // member's to write: opened only as Troupe made it.
    let theirs = tip(&crate::open_own_repo(clone)?, branch).ok();
    if theirs.is_some() && theirs == tip(&repo, branch).ok() {
        return Ok(());
    }
    // A copy someone checked out (to try it) is theirs now: it is not moved under them.
    if checked_out_at(&repo, branch)?.is_some() {
        return Ok(());
    }
    let url = clone.to_string_lossy().into_owned();
    let mut remote = repo.remote_anonymous(&url)?;
    let spec = format!("+refs/heads/{branch}:refs/heads/{branch}");
    let mut opts = git2::FetchOptions::new();
    // FETCH_HEAD is the person's (a `git pull` reads it): left alone.
    opts.update_fetchhead(false)
        .download_tags(git2::AutotagOption::None);
    remote.fetch(&[spec.as_str()], Some(&mut opts), None)?;
    Ok(())
}
