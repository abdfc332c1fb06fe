//! Publishing a branch to a remote: the one network operation Troupe does with git. It runs
//! git's own program (git2 is built without network features), so the person's git config
//! applies — `insteadOf`, proxies — and a credential the daemon holds reaches git through a
//! credential helper reading a private file that lives for the push alone (never the
//! environment or an argument, which any process of the same user can read in `/proc`). Only
//! the daemon calls it, outside every member's box.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::WorktreeError;

/// The URL a remote of the repository at `root` is configured with (as written, before
/// `insteadOf` rewrites it).
pub fn remote_url(root: &Path, remote: &str) -> Result<String, WorktreeError> {
    let repo = git2::Repository::discover(root)
        .map_err(|_| WorktreeError::NotARepo(root.to_path_buf()))?;
    // The configured value itself: libgit2's remote applies `insteadOf`.
    let url = repo.config()?.get_string(&format!("remote.{remote}.url"))?;
    Ok(url)
}

/// A credential for one push: git's credential helper reads it from a private file that lives
/// for the push alone (never the environment or an argument, which other processes of the same
/// user could read).
pub struct PushCredential<'a> {
    pub username: &'a str,
    pub password: &'a str,
    /// A private directory of the daemon's for the file.
    pub scratch: &'a Path,
}

/// What to push.
pub struct Push<'a> {
    pub remote: &'a str,
    /// The commit to publish.
    pub commit: &'a str,
    /// The remote branch it becomes (`troupe/fix-12`).
    pub branch: &'a str,
    /// What the remote branch must be now for the push to go ahead (None: it must not exist):
    /// work someone else pushed there is never overwritten.
    pub expect: Option<&'a str>,
    /// The credential, for a remote that needs one Troupe holds.
    pub credential: Option<PushCredential<'a>>,
    pub timeout: Duration,
}

/// The credential's file, removed when dropped.
struct CredentialFile(std::path::PathBuf);

impl Drop for CredentialFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0); // already gone is fine
    }
}

/// Git's other helpers set aside for one command, and one that answers `get` from `file`.
fn helper_args(file: &Path) -> [String; 4] {
    let path = file.display().to_string().replace('\'', "");
    [
        "-c".into(),
        "credential.helper=".into(),
        "-c".into(),
        format!("credential.helper=!f() {{ test \"$1\" = get && cat '{path}'; }}; f"),
    ]
}

fn credential_file(c: &PushCredential<'_>) -> std::io::Result<CredentialFile> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(c.scratch)?;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let path = c
        .scratch
        .join(format!("push-{}-{nanos}", std::process::id()));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)?;
    let file = CredentialFile(path);
    writeln!(f, "username={}\npassword={}", c.username, c.password)?;
    Ok(file)
}

/// Pushes `commit` to `branch` on the remote with a lease (see [`Push::expect`]).
pub fn push(root: &Path, p: &Push<'_>) -> Result<(), WorktreeError> {
    if !p.branch.split('/').all(|part| crate::safe(part).is_ok()) {
        return Err(WorktreeError::BadName(p.branch.to_string()));
    }
    if p.remote.starts_with('-') || p.remote.is_empty() {
        return Err(WorktreeError::BadName(p.remote.to_string()));
    }
    if p.commit.len() < 7 || !p.commit.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(WorktreeError::Push {
            remote: p.remote.to_string(),
            reason: format!("{:?} is not a commit id", p.commit),
        });
    }
    let lease = format!(
        "--force-with-lease=refs/heads/{}:{}",
        p.branch,
        p.expect.unwrap_or("")
    );
    let failed = |reason: String| WorktreeError::Push {
        remote: p.remote.to_string(),
        reason,
    };
    let mut cmd = Command::new("git");
    cmd.arg("-C").arg(root);
    let _file = match &p.credential {
        Some(c) => {
            let file = credential_file(c)
                .map_err(|e| failed(format!("the credential could not be handed to git: {e}")))?;
            cmd.args(helper_args(&file.0));
            Some(file)
        }
        None => None,
    };
    cmd.args(["push", "--porcelain", "--no-verify", &lease, p.remote])
        .arg(format!("{}:refs/heads/{}", p.commit, p.branch))
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_ASKPASS", "true")
        .env("GCM_INTERACTIVE", "never")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .map_err(|e| failed(format!("git could not be started: {e}")))?;
    let mut pipes = (child.stdout.take(), child.stderr.take());
    let readers = [pipes.0.take().map(reader), pipes.1.take().map(reader)];
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if start.elapsed() > p.timeout {
            let _ = child.kill(); // already gone is fine
            let _ = child.wait();
            return Err(failed(format!(
                "no answer in {} s; nothing is known to have changed",
                p.timeout.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let [out, err] = readers.map(|r| r.and_then(|h| h.join().ok()).unwrap_or_default());
    if status.success() {
        return Ok(());
    }
    let text = format!("{out}\n{err}");
    let text: String = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("To ") && *l != "Done")
        .collect::<Vec<_>>()
        .join("; ");
    let text = if text.chars().count() > 600 {
        text.chars().take(600).collect::<String>() + "…"
    } else {
        text
    };
    Err(failed(
        if text.contains("stale info") || text.contains("fetch first") {
            format!(
                "the remote branch {} moved since Troupe last pushed it (someone else pushed there); nothing was overwritten: {text}",
                p.branch
            )
        } else {
            text
        },
    ))
}

fn reader(mut pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = pipe.read_to_string(&mut s); // a broken pipe leaves what was read
        s
    })
}

/// The tree a commit of the repository at `root` holds (what it contains, whoever made it and
/// when): two landings of the same work are different commits with the same tree.
pub fn tree_of(root: &Path, commit: &str) -> Result<String, WorktreeError> {
    let repo = git2::Repository::discover(root)
        .map_err(|_| WorktreeError::NotARepo(root.to_path_buf()))?;
    let oid = git2::Oid::from_str(commit)?;
    Ok(repo.find_commit(oid)?.tree_id().to_string())
}

#[cfg(test)]
mod tests;
