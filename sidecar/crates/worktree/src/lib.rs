//! Git isolation for party members and agents: a linked worktree on its own branch, or a local
//! clone, created under the daemon's data dir. The only crate that touches git. Cleanup never
//! throws away uncommitted or unmerged work unless forced. Names are checked, never escaped.
//! Reviewing a branch (`review`), landing branches (`land`) and predicting their conflicts
//! (`radar`) each have their own room.

pub mod land;
pub mod radar;
pub mod review;

use std::path::{Path, PathBuf};

use git2::{BranchType, Repository, StatusOptions, WorktreeAddOptions, WorktreePruneOptions};

/// What went wrong.
#[derive(Debug, thiserror::Error)]
pub enum WorktreeError {
    #[error("{0:?} is not a safe name for a branch or directory (letters, digits, '-', '_')")]
    BadName(String),
    #[error("{0} is not inside a git repository")]
    NotARepo(PathBuf),
    #[error("the repository at {0} has no commits yet; commit something before isolating agents")]
    NoCommits(PathBuf),
    #[error("{path} has uncommitted changes; pass force to delete them")]
    Dirty { path: PathBuf },
    #[error("branch {branch} has commits not merged into {base}; pass force to delete them")]
    Unmerged { branch: String, base: String },
    #[error("branch {0} does not exist (has the member started?)")]
    NoBranch(String),
    #[error("target branch {0} does not exist")]
    NoTargetBranch(String),
    #[error("the main checkout is not on a branch; name the target branch")]
    NoTarget,
    #[error(
        "{target} moved while the work was being integrated; land again to integrate onto its new tip"
    )]
    TargetMoved { target: String },
    #[error("{target} is checked out at {} with uncommitted changes ({}); commit or stash them, then land again (nothing was changed)", path.display(), files.join(", "))]
    TargetDirty {
        target: String,
        path: PathBuf,
        files: Vec<String>,
    },
    #[error(
        "{branch} was worked on outside Troupe ({what}); move that work to a branch of your own, then land again (nothing was changed)"
    )]
    IntegrationTouched { branch: String, what: String },
    #[error("the target could not be moved ({reason}); check {} with git status", path.display())]
    Undo { path: PathBuf, reason: String },
    #[error("git: {0}")]
    Git(#[from] git2::Error),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// An isolated checkout for one member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkout {
    pub path: PathBuf,
    pub branch: String,
}

/// The names a member's checkout is made of; each must be safe.
#[derive(Debug, Clone, Copy)]
pub struct MemberName<'a> {
    pub party: &'a str,
    pub role: &'a str,
    pub index: u32,
}

fn safe(name: &str) -> Result<&str, WorktreeError> {
    let ok = !name.is_empty()
        && name.len() <= 80
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if ok {
        Ok(name)
    } else {
        Err(WorktreeError::BadName(name.to_string()))
    }
}

impl MemberName<'_> {
    /// `troupe/<party>/<role>-<i>`.
    pub fn branch(&self) -> Result<String, WorktreeError> {
        Ok(format!(
            "troupe/{}/{}-{}",
            safe(self.party)?,
            safe(self.role)?,
            self.index
        ))
    }

    /// `<base>/<party>/<role>-<i>`, always inside `base`.
    pub fn dir(&self, base: &Path) -> Result<PathBuf, WorktreeError> {
        Ok(base
            .join(safe(self.party)?)
            .join(format!("{}-{}", safe(self.role)?, self.index)))
    }

    fn worktree_name(&self) -> Result<String, WorktreeError> {
        Ok(format!(
            "troupe-{}-{}-{}",
            safe(self.party)?,
            safe(self.role)?,
            self.index
        ))
    }
}

/// The main checkout of the repository containing `path`.
pub fn repo_root(path: &Path) -> Result<PathBuf, WorktreeError> {
    let repo =
        Repository::discover(path).map_err(|_| WorktreeError::NotARepo(path.to_path_buf()))?;
    let common = repo.commondir().to_path_buf();
    let root = if common.ends_with(".git") {
        common.parent().map(Path::to_path_buf)
    } else {
        repo.workdir().map(Path::to_path_buf)
    };
    root.ok_or_else(|| WorktreeError::NotARepo(path.to_path_buf()))
}

/// The member's checkout (path and branch) and, unless it exists already (reused after a
/// restart), the main repository and its HEAD commit to start it from.
fn prepare(
    repo_root: &Path,
    base: &Path,
    name: MemberName<'_>,
) -> Result<(Checkout, Option<(Repository, git2::Oid)>), WorktreeError> {
    let checkout = Checkout {
        path: name.dir(base)?,
        branch: name.branch()?,
    };
    if checkout.path.join(".git").exists() {
        return Ok((checkout, None));
    }
    let repo = Repository::open(repo_root)?;
    let head = repo
        .head()
        .and_then(|h| h.peel_to_commit())
        .map_err(|_| WorktreeError::NoCommits(repo_root.to_path_buf()))?
        .id();
    if let Some(parent) = checkout.path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    Ok((checkout, Some((repo, head))))
}

/// Creates (or reuses, after a restart) a linked worktree for the member on its own branch,
/// starting at the main checkout's HEAD.
pub fn ensure_worktree(
    repo_root: &Path,
    base: &Path,
    name: MemberName<'_>,
) -> Result<Checkout, WorktreeError> {
    let (checkout, fresh) = prepare(repo_root, base, name)?;
    let Some((repo, head)) = fresh else {
        return Ok(checkout);
    };
    let reference = match repo.find_branch(&checkout.branch, BranchType::Local) {
        Ok(b) => b.into_reference(),
        Err(_) => repo
            .branch(&checkout.branch, &repo.find_commit(head)?, false)?
            .into_reference(),
    };
    let wt_name = name.worktree_name()?;
    // A stale registration (its directory deleted by hand) would block the add.
    if let Ok(stale) = repo.find_worktree(&wt_name) {
        stale.prune(Some(WorktreePruneOptions::new().valid(true)))?;
    }
    let mut opts = WorktreeAddOptions::new();
    opts.reference(Some(&reference));
    repo.worktree(&wt_name, &checkout.path, Some(&opts))?;
    Ok(checkout)
}

/// Creates (or reuses) a local clone for the member with its branch checked out.
pub fn ensure_clone(
    repo_root: &Path,
    base: &Path,
    name: MemberName<'_>,
) -> Result<Checkout, WorktreeError> {
    let (checkout, fresh) = prepare(repo_root, base, name)?;
    if fresh.is_none() {
        return Ok(checkout);
    }
    let url = repo_root.to_string_lossy().into_owned();
    let clone = git2::build::RepoBuilder::new().clone(&url, &checkout.path)?;
    let head = clone.head()?.peel_to_commit()?;
    let local = clone.branch(&checkout.branch, &head, false)?;
    let refname = local
        .get()
        .name()
        .ok_or_else(|| WorktreeError::BadName(checkout.branch.clone()))?
        .to_string();
    clone.set_head(&refname)?;
    Ok(checkout)
}

/// Whether the checkout has uncommitted changes (untracked files count; ignored ones do not).
pub fn is_dirty(path: &Path) -> Result<bool, WorktreeError> {
    let repo = Repository::open(path)?;
    let mut opts = StatusOptions::new();
    opts.include_untracked(true).include_ignored(false);
    Ok(!repo.statuses(Some(&mut opts))?.is_empty())
}

/// How many files the checkout at `path` has changed since it left the main checkout's HEAD:
/// uncommitted changes (untracked files count) and those committed on its branch since the fork.
pub fn changed_files(path: &Path, repo_root: &Path) -> Result<usize, WorktreeError> {
    let repo = Repository::open(path)?;
    let mut changed = std::collections::BTreeSet::new();
    let mut opts = StatusOptions::new();
    opts.include_untracked(true)
        .include_ignored(false)
        .recurse_untracked_dirs(true);
    for entry in repo.statuses(Some(&mut opts))?.iter() {
        if let Some(p) = entry.path() {
            changed.insert(p.to_string());
        }
    }
    let main_head = Repository::open(repo_root)
        .ok()
        .and_then(|m| m.head().ok()?.peel_to_commit().ok().map(|c| c.id()));
    let head = repo.head().ok().and_then(|h| h.peel_to_commit().ok());
    if let (Some(main), Some(head)) = (main_head, head)
        && let Ok(base) = repo.merge_base(main, head.id())
        && base != head.id()
    {
        let base_tree = repo.find_commit(base)?.tree()?;
        let diff = repo.diff_tree_to_tree(Some(&base_tree), Some(&head.tree()?), None)?;
        for delta in diff.deltas() {
            if let Some(p) = delta.new_file().path().or_else(|| delta.old_file().path()) {
                changed.insert(p.to_string_lossy().into_owned());
            }
        }
    }
    Ok(changed.len())
}

/// Removes a member's worktree (and its branch, when merged). Refuses to lose uncommitted or
/// unmerged work unless `force`.
pub fn remove_worktree(
    repo_root: &Path,
    base: &Path,
    name: MemberName<'_>,
    force: bool,
) -> Result<(), WorktreeError> {
    let path = name.dir(base)?;
    let branch = name.branch()?;
    let repo = Repository::open(repo_root)?;
    if path.exists() && !force && is_dirty(&path)? {
        return Err(WorktreeError::Dirty { path });
    }
    let merged = is_merged(&repo, &branch)?;
    if !merged && !force {
        let base_name = repo.head()?.shorthand().unwrap_or("HEAD").to_string();
        return Err(WorktreeError::Unmerged {
            branch,
            base: base_name,
        });
    }
    if let Ok(wt) = repo.find_worktree(&name.worktree_name()?) {
        wt.prune(Some(
            WorktreePruneOptions::new()
                .valid(true)
                .locked(force)
                .working_tree(true),
        ))?;
    }
    if path.exists() {
        std::fs::remove_dir_all(&path)?;
    }
    if let Ok(mut b) = repo.find_branch(&branch, BranchType::Local) {
        b.delete()?;
    }
    Ok(())
}

/// Removes a member's clone, refusing to lose uncommitted work, or commits not pushed back to
/// the main repository, unless `force`.
pub fn remove_clone(
    repo_root: &Path,
    base: &Path,
    name: MemberName<'_>,
    force: bool,
) -> Result<(), WorktreeError> {
    let path = name.dir(base)?;
    if !path.exists() {
        return Ok(());
    }
    if !force {
        if is_dirty(&path)? {
            return Err(WorktreeError::Dirty { path });
        }
        let clone = Repository::open(&path)?;
        let tip = clone.head()?.peel_to_commit()?.id();
        let main = Repository::open(repo_root)?;
        let known = match main.find_commit(tip) {
            Ok(tip) => is_merged_commit(&main, &tip)?,
            Err(_) => false,
        };
        if !known {
            return Err(WorktreeError::Unmerged {
                branch: name.branch()?,
                base: main.head()?.shorthand().unwrap_or("HEAD").to_string(),
            });
        }
    }
    std::fs::remove_dir_all(&path)?;
    // Its branch, if brought over for review or landing (`land::import_clone_branch`).
    if let Ok(main) = Repository::open(repo_root)
        && let Ok(mut b) = main.find_branch(&name.branch()?, BranchType::Local)
    {
        b.delete()?;
    }
    Ok(())
}

/// Commits every change in the checkout at `path` (new files included) on its current branch;
/// returns the new commit id, or `None` when there was nothing to commit.
pub fn commit_all(path: &Path, message: &str) -> Result<Option<String>, WorktreeError> {
    let repo = Repository::open(path)?;
    let mut index = repo.index()?;
    index.add_all(["*"].iter(), git2::IndexAddOption::DEFAULT, None)?;
    // Deleted files too (add_all stages only what exists).
    index.update_all(["*"].iter(), None)?;
    index.write()?;
    let tree = repo.find_tree(index.write_tree()?)?;
    let parent = repo.head().ok().and_then(|h| h.peel_to_commit().ok());
    if let Some(p) = &parent
        && p.tree_id() == tree.id()
    {
        return Ok(None);
    }
    let sig = repo
        .signature()
        .or_else(|_| git2::Signature::now("troupe", "troupe@localhost"))?;
    let parents: Vec<&git2::Commit<'_>> = parent.iter().collect();
    let id = repo.commit(Some("HEAD"), &sig, &sig, message, &tree, &parents)?;
    Ok(Some(id.to_string()))
}

/// Creates a repository at `path` with one commit of the files already there.
pub fn init_repo(path: &Path, message: &str) -> Result<(), WorktreeError> {
    Repository::init(path)?;
    commit_all(path, message)?;
    Ok(())
}

fn is_merged(repo: &Repository, branch: &str) -> Result<bool, WorktreeError> {
    let Ok(b) = repo.find_branch(branch, BranchType::Local) else {
        return Ok(true);
    };
    is_merged_commit(repo, &b.get().peel_to_commit()?)
}

/// Whether the main checkout's HEAD has `tip`'s work: it is an ancestor, or merging it would
/// change nothing (landed by rebase or squash).
fn is_merged_commit(repo: &Repository, tip: &git2::Commit<'_>) -> Result<bool, WorktreeError> {
    let head = repo.head()?.peel_to_commit()?;
    if tip.id() == head.id() || repo.graph_descendant_of(head.id(), tip.id())? {
        return Ok(true);
    }
    let mut index = repo.merge_commits(&head, tip, None)?;
    Ok(!index.has_conflicts() && index.write_tree_to(repo)? == head.tree_id())
}

#[cfg(test)]
mod tests;
