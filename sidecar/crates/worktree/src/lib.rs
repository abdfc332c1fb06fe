//! Git isolation for party members and agents: a linked worktree on its own branch, or a
//! borrowing clone (a repository of its own that reads the main repository's objects through
//! `objects/info/alternates` and writes nothing there), created under the daemon's data dir. The
//! only crate that touches git. Cleanup never throws away uncommitted or unmerged work unless
//! forced. Names are checked, never escaped.
//! Reviewing a branch (`review`), landing branches (`land`) and predicting their conflicts
//! (`radar`) each have their own room.

pub mod land;
pub mod push;
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
    #[error(
        "deleting {} would lose commits not merged into {base} nor kept by another branch; pass force to delete them",
        refs.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
    )]
    Unmerged { base: String, refs: Vec<DroppedRef> },
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
    #[error("{target} is checked out at {} with uncommitted changes to files this landing changes ({}); commit or stash them, then land again (nothing was changed)", path.display(), files.join(", "))]
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
    #[error("{} is not a member's own checkout as Troupe made it ({why}); nothing was read or written there", path.display())]
    NotOwnRepo { path: PathBuf, why: String },
    #[error("git push to {remote} failed: {reason}")]
    Push { remote: String, reason: String },
    #[error("git: {0}")]
    Git(#[from] git2::Error),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// A ref a cleanup deletes (or would): a member's branch in the main repository, or a ref of the
/// member's own checkout (a clone's branches, tags and stash, a detached HEAD).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DroppedRef {
    /// The repository it is in: the main repository, or the member's clone or worktree.
    pub repo: PathBuf,
    /// A branch's short name (`troupe/p/dev-0`), `HEAD` when detached, else the ref's full name
    /// (`refs/stash`, `refs/tags/v1`).
    pub name: String,
    /// The commit it points at.
    pub tip: String,
    /// Deleting it loses commits: some of its commits are neither merged into the target (the
    /// main checkout's HEAD) nor reachable from a ref that is kept.
    pub unmerged: bool,
}

impl std::fmt::Display for DroppedRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let tip = self.tip.get(..10).unwrap_or(&self.tip);
        write!(f, "{} at {tip} (in {})", self.name, self.repo.display())
    }
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

/// Creates (or reuses, after a restart) the member's own repository: a *borrowing clone* of the
/// main one (what `git clone --shared` makes). Its `.git` is its own — refs, index, config,
/// hooks, and an object dir for the objects it makes — and it reads the main repository's
/// objects through `objects/info/alternates`: nothing is hardlinked, nothing copied, and nothing
/// it does writes the main repository. Its branch is checked out, starting where the main
/// repository's copy of it is (brought over earlier), else at the main checkout's HEAD;
/// `origin` is the main repository and `origin/<branch>` the branch the main checkout has out.
/// The daemon brings its branch over (`land::import_clone_branch`) to review and land it.
pub fn ensure_clone(
    repo_root: &Path,
    base: &Path,
    name: MemberName<'_>,
) -> Result<Checkout, WorktreeError> {
    let (checkout, fresh) = prepare(repo_root, base, name)?;
    let Some((main, head)) = fresh else {
        return Ok(checkout);
    };
    // Made aside and moved in whole: a clone made halfway (a crash) is never taken for one to
    // reuse.
    let staging = checkout
        .path
        .with_file_name(format!(".{}-{}.new", safe(name.role)?, name.index));
    if staging.exists() {
        std::fs::remove_dir_all(&staging)?;
    }
    let start = match main.find_branch(&checkout.branch, BranchType::Local) {
        Ok(b) => b.get().peel_to_commit()?.id(),
        Err(_) => head,
    };
    if let Err(e) = borrow(&main, repo_root, &staging, &checkout.branch, start) {
        let _ = std::fs::remove_dir_all(&staging);
        return Err(e);
    }
    std::fs::rename(&staging, &checkout.path)?;
    Ok(checkout)
}

/// Makes the borrowing clone at `dir` with `branch` checked out at `start` (see `ensure_clone`).
fn borrow(
    main: &Repository,
    repo_root: &Path,
    dir: &Path,
    branch: &str,
    start: git2::Oid,
) -> Result<(), WorktreeError> {
    use std::os::unix::ffi::OsStrExt;
    // The common dir's: right also when the main checkout is itself a linked worktree.
    let common = main.commondir().canonicalize()?;
    let objects = common.join("objects");
    // `alternates` is a list of lines.
    if objects.as_os_str().as_bytes().contains(&b'\n') {
        return Err(WorktreeError::Io(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!(
                "{} has a line break in its path: it cannot be borrowed from",
                objects.display()
            ),
        )));
    }
    let made = Repository::init(dir)?;
    let git_dir = made.path().to_path_buf();
    drop(made);
    let info = git_dir.join("objects").join("info");
    std::fs::create_dir_all(&info)?;
    let mut line = objects.as_os_str().as_bytes().to_vec();
    line.push(b'\n');
    std::fs::write(info.join("alternates"), line)?;
    // What the person's git ignores here (`info/exclude`) it ignores in the clone too: a
    // member's build output is not work to keep or commit.
    let exclude = common.join("info").join("exclude");
    if exclude.is_file() {
        std::fs::create_dir_all(git_dir.join("info"))?;
        std::fs::copy(&exclude, git_dir.join("info").join("exclude"))?;
    }
    // Opened again: its object database now reads the main repository's objects.
    let clone = Repository::open(dir)?;
    {
        let mut config = clone.config()?;
        // Who commits, when the person set it for this repository only.
        if let Ok(local) = main
            .config()
            .and_then(|c| c.open_level(git2::ConfigLevel::Local))
        {
            for key in ["user.name", "user.email"] {
                if let Ok(value) = local.get_string(key) {
                    config.set_str(key, &value)?;
                }
            }
        }
    }
    clone.remote("origin", &repo_root.to_string_lossy())?;
    if let Ok(head) = main.head()
        && head.is_branch()
        && let (Some(current), Ok(tip)) = (head.shorthand(), head.peel_to_commit())
    {
        let tracking = format!("refs/remotes/origin/{current}");
        clone.reference(
            &tracking,
            tip.id(),
            true,
            "troupe: the main checkout's branch",
        )?;
        clone.reference_symbolic(
            "refs/remotes/origin/HEAD",
            &tracking,
            true,
            "troupe: the main checkout's branch",
        )?;
    }
    let local = clone.branch(branch, &clone.find_commit(start)?, true)?;
    let refname = local
        .get()
        .name()
        .ok_or_else(|| WorktreeError::BadName(branch.to_string()))?
        .to_string();
    clone.set_head(&refname)?;
    clone.checkout_head(Some(git2::build::CheckoutBuilder::new().force()))?;
    Ok(())
}

/// Whether the checkout at `path` is a repository of its own (a clone: its `.git` is a
/// directory), not a linked worktree of the main repository (whose `.git` is a file). A
/// checkout's record says where it is; this says what it is, whatever the daemon that made it
/// was set to.
pub fn is_own_repo(path: &Path) -> bool {
    std::fs::symlink_metadata(path.join(".git")).is_ok_and(|m| m.is_dir())
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

/// Removes a member's worktree and its branch. Refuses, unless `force`, to lose uncommitted
/// changes or a commit that is neither merged into the target nor reachable from a ref that is
/// kept (its branch's, or a detached HEAD's in the worktree). Returns what it deleted: the
/// branch and, when it lost commits, the detached HEAD.
pub fn remove_worktree(
    repo_root: &Path,
    base: &Path,
    name: MemberName<'_>,
    force: bool,
) -> Result<Vec<DroppedRef>, WorktreeError> {
    worktree_removal(repo_root, base, name, force, false)
}

/// What `remove_worktree` (not forced) would do, doing nothing: the refs it would delete, or
/// why it would refuse.
pub fn check_remove_worktree(
    repo_root: &Path,
    base: &Path,
    name: MemberName<'_>,
) -> Result<Vec<DroppedRef>, WorktreeError> {
    worktree_removal(repo_root, base, name, false, true)
}

fn worktree_removal(
    repo_root: &Path,
    base: &Path,
    name: MemberName<'_>,
    force: bool,
    dry: bool,
) -> Result<Vec<DroppedRef>, WorktreeError> {
    let path = name.dir(base)?;
    let branch = name.branch()?;
    let repo = Repository::open(repo_root)?;
    if path.exists() && !force && is_dirty(&path)? {
        return Err(WorktreeError::Dirty { path });
    }
    let keeper = Keeper::new(&repo, name.party)?;
    let mut dropped = Vec::new();
    if let Ok(b) = repo.find_branch(&branch, BranchType::Local) {
        let tip = b.get().peel_to_commit()?.id();
        dropped.push(keeper.drop_ref(repo_root, branch.clone(), tip)?);
    }
    // A detached HEAD goes with the worktree (a branch checked out there stays).
    if let Ok(wt) = Repository::open(&path)
        && wt.head_detached().unwrap_or(false)
        && let Ok(head) = wt.head().and_then(|h| h.peel_to_commit())
    {
        dropped.push(keeper.drop_ref(&path, "HEAD".into(), head.id())?);
    }
    keeper.refuse_losses(&dropped, force)?;
    if dry {
        dropped.retain(|d| d.repo == repo_root || d.unmerged);
        return Ok(dropped);
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
    dropped.retain(|d| d.repo == repo_root || d.unmerged);
    Ok(dropped)
}

/// Removes a member's clone and the main repository's copy of its branch (brought over for
/// review or landing). Refuses, unless `force`, to lose uncommitted changes or a commit that is
/// neither merged into the target nor reachable from a ref the main repository keeps: every
/// ref of the clone (its remote-tracking refs aside) is checked, whatever its HEAD is on, and
/// the main repository's copy too. A copy someone checked out stays. Returns what it deleted:
/// the copy, and each ref of the clone that lost commits.
pub fn remove_clone(
    repo_root: &Path,
    base: &Path,
    name: MemberName<'_>,
    force: bool,
) -> Result<Vec<DroppedRef>, WorktreeError> {
    clone_removal(repo_root, base, name, force, false)
}

/// What `remove_clone` (not forced) would do, doing nothing: the refs it would delete, or why
/// it would refuse.
pub fn check_remove_clone(
    repo_root: &Path,
    base: &Path,
    name: MemberName<'_>,
) -> Result<Vec<DroppedRef>, WorktreeError> {
    clone_removal(repo_root, base, name, false, true)
}

fn clone_removal(
    repo_root: &Path,
    base: &Path,
    name: MemberName<'_>,
    force: bool,
    dry: bool,
) -> Result<Vec<DroppedRef>, WorktreeError> {
    let path = name.dir(base)?;
    let branch = name.branch()?;
    if !path.exists() {
        return Ok(Vec::new());
    }
    if !force && is_dirty(&path)? {
        return Err(WorktreeError::Dirty { path });
    }
    let main = Repository::open(repo_root)?;
    let mut keeper = Keeper::new(&main, name.party)?;
    let copy = match main.find_branch(&branch, BranchType::Local) {
        Ok(b) => Some(b.get().peel_to_commit()?.id()),
        Err(_) => None,
    };
    // A copy checked out somewhere (someone trying it) is theirs now: it stays, and keeps.
    let copy = match copy {
        Some(tip) if land::checked_out_at(&main, &branch)?.is_some() => {
            keeper.kept.push(tip);
            None
        }
        other => other,
    };
    let mut dropped = Vec::new();
    if let Some(tip) = copy {
        dropped.push(keeper.drop_ref(repo_root, branch.clone(), tip)?);
    }
    match Repository::open(&path) {
        Ok(clone) => {
            for (ref_name, tip) in clone_refs(&clone)? {
                dropped.push(keeper.drop_ref(&path, ref_name, tip)?);
            }
        }
        // Forced: a clone git cannot open goes all the same.
        Err(_) if force => {}
        Err(e) => return Err(e.into()),
    }
    keeper.refuse_losses(&dropped, force)?;
    if dry {
        dropped.retain(|d| d.repo == repo_root || d.unmerged);
        return Ok(dropped);
    }
    std::fs::remove_dir_all(&path)?;
    if copy.is_some()
        && let Ok(mut b) = main.find_branch(&branch, BranchType::Local)
    {
        b.delete()?;
    }
    dropped.retain(|d| d.repo == repo_root || d.unmerged);
    Ok(dropped)
}

/// The refs a clone holds that its removal deletes: its branches, tags, stash and other refs
/// (not its remote-tracking refs: copies of the main repository's), and its HEAD when detached.
fn clone_refs(clone: &Repository) -> Result<Vec<(String, git2::Oid)>, WorktreeError> {
    let mut refs = Vec::new();
    for r in clone.references()? {
        let r = r?;
        let Some(full) = r.name().map(String::from) else {
            continue;
        };
        if full.starts_with("refs/remotes/") {
            continue;
        }
        // A ref to something other than a commit (a tag of a blob) holds no commits.
        let Ok(commit) = r.peel_to_commit() else {
            continue;
        };
        let name = match full.strip_prefix("refs/heads/") {
            Some(short) => short.to_string(),
            None => full,
        };
        refs.push((name, commit.id()));
    }
    if clone.head_detached().unwrap_or(false)
        && let Ok(head) = clone.head().and_then(|h| h.peel_to_commit())
    {
        refs.push(("HEAD".into(), head.id()));
    }
    Ok(refs)
}

/// What a cleanup may delete without losing work: a commit merged into the target (the main
/// checkout's HEAD: an ancestor of it, or landed by squash or rebase), or reachable from a ref
/// that is kept. Kept are the main repository's refs and HEAD, except the party's own
/// `troupe/<party>/…` branches (a cleanup may delete them too).
struct Keeper<'r> {
    main: &'r Repository,
    kept: Vec<git2::Oid>,
}

impl<'r> Keeper<'r> {
    fn new(main: &'r Repository, party: &str) -> Result<Self, WorktreeError> {
        let party_refs = format!("refs/heads/troupe/{}/", safe(party)?);
        let mut kept = Vec::new();
        for r in main.references()? {
            let r = r?;
            if r.name().is_none_or(|n| n.starts_with(&party_refs)) {
                continue;
            }
            if let Ok(commit) = r.peel_to_commit() {
                kept.push(commit.id());
            }
        }
        if let Ok(head) = main.head().and_then(|h| h.peel_to_commit()) {
            kept.push(head.id());
        }
        Ok(Keeper { main, kept })
    }

    /// Whether deleting a ref at `tip` loses commits. A commit the main repository does not
    /// have (made in a clone, never brought over) is lost.
    fn loses(&self, tip: git2::Oid) -> Result<bool, WorktreeError> {
        let Ok(commit) = self.main.find_commit(tip) else {
            return Ok(true);
        };
        let mut walk = self.main.revwalk()?;
        walk.push(tip)?;
        for kept in &self.kept {
            walk.hide(*kept)?;
        }
        if walk.next().transpose()?.is_none() {
            return Ok(false);
        }
        Ok(!is_merged_commit(self.main, &commit)?)
    }

    fn drop_ref(
        &self,
        repo: &Path,
        name: String,
        tip: git2::Oid,
    ) -> Result<DroppedRef, WorktreeError> {
        Ok(DroppedRef {
            repo: repo.to_path_buf(),
            name,
            tip: tip.to_string(),
            unmerged: self.loses(tip)?,
        })
    }

    /// Unless `force`, the refs among `dropped` whose deletion loses commits, as an error.
    fn refuse_losses(&self, dropped: &[DroppedRef], force: bool) -> Result<(), WorktreeError> {
        let refs: Vec<DroppedRef> = dropped.iter().filter(|d| d.unmerged).cloned().collect();
        if force || refs.is_empty() {
            return Ok(());
        }
        let base = match self.main.head() {
            Ok(head) => head.shorthand().unwrap_or("HEAD").to_string(),
            Err(_) => "HEAD".to_string(),
        };
        Err(WorktreeError::Unmerged { base, refs })
    }
}

/// Opens the repository of a member's own checkout (a clone the member could write at will)
/// only when it is what Troupe made: its `.git` a directory there (not a link, not a file
/// naming another repository's git dir), no `commondir`, no `core.worktree` sending its work
/// tree elsewhere, and git finding it nowhere but there. Anything else could have the daemon
/// commit into the person's repository or read the data dir into a branch.
pub fn open_own_repo(path: &Path) -> Result<Repository, WorktreeError> {
    let refuse = |why: &str| WorktreeError::NotOwnRepo {
        path: path.to_path_buf(),
        why: why.to_string(),
    };
    let git = path.join(".git");
    let meta = std::fs::symlink_metadata(&git).map_err(|_| refuse("it has no .git"))?;
    if !meta.is_dir() {
        return Err(refuse(".git is not a directory of its own"));
    }
    if git.join("commondir").exists() {
        return Err(refuse(".git names a common dir elsewhere"));
    }
    let repo = Repository::open_ext(
        path,
        git2::RepositoryOpenFlags::NO_SEARCH,
        std::iter::empty::<&std::ffi::OsStr>(),
    )?;
    if repo.config()?.get_path("core.worktree").is_ok() {
        return Err(refuse("core.worktree sends its work tree elsewhere"));
    }
    let canonical = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    let here = canonical(path);
    if repo.workdir().map(canonical) != Some(here.clone())
        || canonical(repo.path()) != here.join(".git")
    {
        return Err(refuse("git finds its repository elsewhere"));
    }
    Ok(repo)
}

/// `commit_all` in a member's own checkout (`open_own_repo`'s checks first).
pub fn commit_all_own(path: &Path, message: &str) -> Result<Option<String>, WorktreeError> {
    commit_in(open_own_repo(path)?, message)
}

/// Commits every change in the checkout at `path` (new files included) on its current branch;
/// returns the new commit id, or `None` when there was nothing to commit.
pub fn commit_all(path: &Path, message: &str) -> Result<Option<String>, WorktreeError> {
    commit_in(Repository::open(path)?, message)
}

fn commit_in(repo: Repository, message: &str) -> Result<Option<String>, WorktreeError> {
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
