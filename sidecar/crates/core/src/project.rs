//! Resolves a working directory to its project root: the main checkout of the git repository
//! it is in (a linked worktree resolves to the repository it belongs to), or the directory
//! itself when it is not in a repository. Reads `.git` files only; never runs git. It also
//! holds the lock every git write of the daemon takes.

use std::fs;

/// Serialises the daemon's git writes (checkouts, integration branches, target moves): git takes
/// locks in the repository (refs, worktree admin dirs), so one at a time.
static GIT_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The git lock if nobody holds it now.
pub fn try_git_lock() -> Option<std::sync::MutexGuard<'static, ()>> {
    match GIT_LOCK.try_lock() {
        Ok(guard) => Some(guard),
        Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(std::sync::TryLockError::WouldBlock) => None,
    }
}

/// Holds the git lock until dropped (a panicked holder does not block the next).
pub fn git_lock() -> std::sync::MutexGuard<'static, ()> {
    GIT_LOCK
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
use std::path::{Path, PathBuf};

/// The project root and a display name for `cwd`.
pub fn resolve_project_root(cwd: &Path) -> std::io::Result<(PathBuf, String)> {
    let cwd = fs::canonicalize(cwd)?;
    let root = git_root(&cwd).unwrap_or_else(|| cwd.clone());
    let name = root
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| root.display().to_string());
    Ok((root, name))
}

fn git_root(start: &Path) -> Option<PathBuf> {
    for dir in start.ancestors() {
        let dot_git = dir.join(".git");
        let Ok(meta) = fs::metadata(&dot_git) else {
            continue;
        };
        if meta.is_dir() {
            return Some(dir.to_path_buf());
        }
        // A linked worktree (or submodule): `.git` is a file `gitdir: <path>`.
        if let Some(main) = main_checkout_of_gitfile(&dot_git) {
            return Some(main);
        }
        return Some(dir.to_path_buf());
    }
    None
}

/// For a worktree's `.git` file, the main checkout: `<gitdir>/commondir` names the shared
/// `.git` directory, whose parent is the main checkout.
fn main_checkout_of_gitfile(dot_git: &Path) -> Option<PathBuf> {
    let text = fs::read_to_string(dot_git).ok()?;
    let gitdir = text.strip_prefix("gitdir:")?.trim();
    let base = dot_git.parent()?;
    let gitdir = base.join(gitdir);
    let common = fs::read_to_string(gitdir.join("commondir")).ok()?;
    let common = fs::canonicalize(gitdir.join(common.trim())).ok()?;
    if common.file_name()? == ".git" {
        common.parent().map(Path::to_path_buf)
    } else {
        None
    }
}

/// Reads a file of a project that its agents may have written (`.troupe/config.toml`, a
/// playbook, a subagent's `file:` context): only a regular file, not through a symlink (one
/// could point at the data dir's token), at most `max` bytes (more is an error). `Ok(None)`: no
/// such file.
pub fn read_project_file(path: &Path, max: u64) -> Result<Option<Vec<u8>>, String> {
    use std::io::Read;
    let shown = path.display();
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{shown}: {e}")),
    };
    if !meta.file_type().is_file() {
        return Err(format!(
            "{shown} is not a regular file (a symlink, a directory or a pipe is not read)"
        ));
    }
    if meta.len() > max {
        return Err(format!(
            "{shown} is {} bytes; the limit is {max}",
            meta.len()
        ));
    }
    let file = std::fs::File::open(path).map_err(|e| format!("{shown}: {e}"))?;
    // What was opened is what was checked (no swap between the two).
    let opened = file.metadata().map_err(|e| format!("{shown}: {e}"))?;
    {
        use std::os::unix::fs::MetadataExt;
        if !opened.is_file() || opened.ino() != meta.ino() || opened.dev() != meta.dev() {
            return Err(format!("{shown} changed while it was read"));
        }
    }
    let mut bytes = Vec::new();
    file.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("{shown}: {e}"))?;
    if bytes.len() as u64 > max {
        return Err(format!("{shown} is over the limit of {max} bytes"));
    }
    Ok(Some(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_dir_is_its_own_root() {
        let dir = tempfile::tempdir().unwrap();
        let (root, _) = resolve_project_root(dir.path()).unwrap();
        assert_eq!(root, fs::canonicalize(dir.path()).unwrap());
    }

    #[test]
    fn subdir_of_repo_and_worktree_resolve_to_main_checkout() {
        let dir = tempfile::tempdir().unwrap();
        let main = dir.path().join("repo");
        fs::create_dir_all(main.join(".git/worktrees/wt")).unwrap();
        fs::create_dir_all(main.join("src/deep")).unwrap();
        fs::write(main.join(".git/worktrees/wt/commondir"), "../..\n").unwrap();
        let wt = dir.path().join("wt");
        fs::create_dir_all(&wt).unwrap();
        fs::write(
            wt.join(".git"),
            format!("gitdir: {}\n", main.join(".git/worktrees/wt").display()),
        )
        .unwrap();

        let canon = fs::canonicalize(&main).unwrap();
        assert_eq!(
            resolve_project_root(&main.join("src/deep")).unwrap().0,
            canon
        );
        let (root, name) = resolve_project_root(&wt).unwrap();
        assert_eq!(root, canon);
        assert_eq!(name, "repo");
    }
}
