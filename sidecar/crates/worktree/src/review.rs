//! What a member's branch holds against its base: tip, fork point, ahead/behind, the changed
//! files as a unified diff with stats, its commits, and a file's two versions. Read-only: no
//! checkout is touched.

use std::path::Path;

use git2::{BranchType, DiffOptions, Oid, Repository};

use crate::WorktreeError;

/// A branch measured against a target branch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BranchState {
    pub branch: String,
    pub target: String,
    /// The branch's tip.
    pub head: String,
    /// Where the branch forked from the target (their merge base).
    pub base: String,
    /// Commits on the branch and not on the target.
    pub ahead: usize,
    /// Commits on the target since the fork.
    pub behind: usize,
    /// Files the branch changed since the fork (committed work).
    pub changed_files: Vec<String>,
}

/// One file of a branch's diff against its base.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileDiff {
    pub path: String,
    /// Set when the file was renamed.
    pub old_path: Option<String>,
    /// added, deleted, modified, renamed, copied, typechange.
    pub status: String,
    pub additions: usize,
    pub deletions: usize,
    pub binary: bool,
    /// The file's unified diff (headers and hunks); empty for a binary file.
    pub patch: String,
}

/// One commit of a branch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitInfo {
    pub id: String,
    pub summary: String,
    pub message: String,
    pub author: String,
    /// Seconds since the epoch.
    pub time: i64,
}

/// The target branch's name: `target`, or the branch the main checkout has out.
pub fn target_branch(repo: &Repository, target: Option<&str>) -> Result<String, WorktreeError> {
    if let Some(t) = target {
        return Ok(t.to_string());
    }
    let head = repo.head().map_err(|_| WorktreeError::NoTarget)?;
    if !head.is_branch() {
        return Err(WorktreeError::NoTarget);
    }
    head.shorthand()
        .map(String::from)
        .ok_or(WorktreeError::NoTarget)
}

/// A local branch's tip.
pub(crate) fn tip(repo: &Repository, branch: &str) -> Result<Oid, WorktreeError> {
    repo.find_branch(branch, BranchType::Local)
        .map_err(|_| WorktreeError::NoBranch(branch.to_string()))?
        .get()
        .peel_to_commit()
        .map(|c| c.id())
        .map_err(|_| WorktreeError::NoBranch(branch.to_string()))
}

/// The target's tip (an error naming the target when it does not exist).
pub(crate) fn target_tip(repo: &Repository, target: &str) -> Result<Oid, WorktreeError> {
    tip(repo, target).map_err(|_| WorktreeError::NoTargetBranch(target.to_string()))
}

fn changed_paths(diff: &git2::Diff<'_>) -> Vec<String> {
    diff.deltas()
        .filter_map(|d| d.new_file().path().or_else(|| d.old_file().path()))
        .map(|p| p.to_string_lossy().into_owned())
        .collect()
}

fn state_of(
    repo: &Repository,
    branch: &str,
    target: &str,
) -> Result<(BranchState, Oid, Oid), WorktreeError> {
    let head = tip(repo, branch)?;
    let target_head = target_tip(repo, target)?;
    let base = repo.merge_base(head, target_head)?;
    let (ahead, behind) = repo.graph_ahead_behind(head, target_head)?;
    let diff = tree_diff(repo, base, head)?;
    let state = BranchState {
        branch: branch.to_string(),
        target: target.to_string(),
        head: head.to_string(),
        base: base.to_string(),
        ahead,
        behind,
        changed_files: changed_paths(&diff),
    };
    Ok((state, base, head))
}

/// The diff between two commits, renames found.
fn tree_diff(repo: &Repository, from: Oid, to: Oid) -> Result<git2::Diff<'_>, WorktreeError> {
    let old = repo.find_commit(from)?.tree()?;
    let new = repo.find_commit(to)?.tree()?;
    let mut diff = repo.diff_tree_to_tree(Some(&old), Some(&new), Some(&mut DiffOptions::new()))?;
    diff.find_similar(None)?;
    Ok(diff)
}

/// `branch` against `target` (default: the main checkout's branch).
pub fn branch_state(
    repo_root: &Path,
    branch: &str,
    target: Option<&str>,
) -> Result<BranchState, WorktreeError> {
    let repo = Repository::open(repo_root)?;
    let target = target_branch(&repo, target)?;
    Ok(state_of(&repo, branch, &target)?.0)
}

/// The branch's committed work since it forked from `target`, file by file (or only `path`).
pub fn branch_diff(
    repo_root: &Path,
    branch: &str,
    target: Option<&str>,
    path: Option<&str>,
) -> Result<(BranchState, Vec<FileDiff>), WorktreeError> {
    let repo = Repository::open(repo_root)?;
    let target = target_branch(&repo, target)?;
    let (state, base, head) = state_of(&repo, branch, &target)?;
    let diff = tree_diff(&repo, base, head)?;
    let mut files = Vec::new();
    for i in 0..diff.deltas().len() {
        let Some(delta) = diff.get_delta(i) else {
            continue;
        };
        let new_path = delta.new_file().path().map(|p| p.to_string_lossy());
        let old_path = delta.old_file().path().map(|p| p.to_string_lossy());
        let path = new_path.clone().or(old_path.clone()).unwrap_or_default();
        let status = match delta.status() {
            git2::Delta::Added => "added",
            git2::Delta::Deleted => "deleted",
            git2::Delta::Renamed => "renamed",
            git2::Delta::Copied => "copied",
            git2::Delta::Typechange => "typechange",
            _ => "modified",
        };
        let mut file = FileDiff {
            path: path.to_string(),
            old_path: (status == "renamed")
                .then(|| old_path.map(|p| p.into_owned()))
                .flatten(),
            status: status.to_string(),
            additions: 0,
            deletions: 0,
            binary: delta.flags().is_binary(),
            patch: String::new(),
        };
        if let Some(mut patch) = git2::Patch::from_diff(&diff, i)? {
            let (_, adds, dels) = patch.line_stats()?;
            file.additions = adds;
            file.deletions = dels;
            file.binary |= delta.flags().is_binary();
            if !file.binary {
                let buf = patch.to_buf()?;
                file.patch = String::from_utf8_lossy(&buf).into_owned();
            }
        }
        files.push(file);
    }
    if let Some(path) = path {
        // After rename detection: a renamed file is found by its new name or its old one.
        files.retain(|f| f.path == path || f.old_path.as_deref() == Some(path));
    }
    Ok((state, files))
}

/// A file's text at the branch's fork point and at its tip (`None` where it does not exist or
/// is not text).
pub fn file_versions(
    repo_root: &Path,
    branch: &str,
    target: Option<&str>,
    path: &str,
) -> Result<(Option<String>, Option<String>), WorktreeError> {
    let repo = Repository::open(repo_root)?;
    let target = target_branch(&repo, target)?;
    let (_, base, head) = state_of(&repo, branch, &target)?;
    // A renamed file's earlier version is under its old name.
    let diff = tree_diff(&repo, base, head)?;
    let renamed_from = diff
        .deltas()
        .find(|d| {
            d.status() == git2::Delta::Renamed && d.new_file().path() == Some(Path::new(path))
        })
        .and_then(|d| d.old_file().path().map(Path::to_path_buf));
    let base_path = renamed_from.unwrap_or_else(|| Path::new(path).to_path_buf());
    let text = |commit: Oid, path: &Path| -> Result<Option<String>, WorktreeError> {
        let tree = repo.find_commit(commit)?.tree()?;
        let Ok(entry) = tree.get_path(path) else {
            return Ok(None);
        };
        let Ok(blob) = repo.find_blob(entry.id()) else {
            return Ok(None);
        };
        Ok((!blob.is_binary())
            .then(|| std::str::from_utf8(blob.content()).ok().map(String::from))
            .flatten())
    };
    Ok((text(base, &base_path)?, text(head, Path::new(path))?))
}

/// The branch's commits not on `target`, oldest first.
pub fn branch_commits(
    repo_root: &Path,
    branch: &str,
    target: Option<&str>,
) -> Result<(BranchState, Vec<CommitInfo>), WorktreeError> {
    let repo = Repository::open(repo_root)?;
    let target = target_branch(&repo, target)?;
    let (state, _, head) = state_of(&repo, branch, &target)?;
    let commits = commits_between(&repo, target_tip(&repo, &target)?, head)?
        .into_iter()
        .map(|c| CommitInfo {
            id: c.id().to_string(),
            summary: c.summary().unwrap_or_default().to_string(),
            message: c.message().unwrap_or_default().to_string(),
            author: c.author().name().unwrap_or_default().to_string(),
            time: c.time().seconds(),
        })
        .collect();
    Ok((state, commits))
}

/// Commits reachable from `head` and not from `hide`, oldest first.
pub(crate) fn commits_between<'r>(
    repo: &'r Repository,
    hide: Oid,
    head: Oid,
) -> Result<Vec<git2::Commit<'r>>, WorktreeError> {
    let mut walk = repo.revwalk()?;
    walk.push(head)?;
    walk.hide(hide)?;
    walk.set_sorting(git2::Sort::TOPOLOGICAL | git2::Sort::REVERSE)?;
    let mut out = Vec::new();
    for id in walk {
        out.push(repo.find_commit(id?)?);
    }
    Ok(out)
}

/// Each branch's tip (`None` where it does not exist), then the main checkout's HEAD commit:
/// what changes when anyone commits (one repository open, reads only).
pub fn tips(repo_root: &Path, branches: &[&str]) -> Result<Vec<Option<String>>, WorktreeError> {
    let repo = Repository::open(repo_root)?;
    let head = repo
        .head()
        .ok()
        .and_then(|h| h.peel_to_commit().ok())
        .map(|c| c.id().to_string());
    Ok(branches
        .iter()
        .map(|b| tip(&repo, b).ok().map(|t| t.to_string()))
        .chain([head])
        .collect())
}
