//! Publishing a branch to a remote: the one network operation Troupe does with git. It runs
//! git's own program (git2 is built without network features), so the person's git config
//! applies — `insteadOf`, credential helpers, proxies — and a credential the daemon holds
//! reaches git through its environment (`GIT_CONFIG_*`), never a file or an argument. Only the
//! daemon calls it, outside every member's box.

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

/// What to push.
#[derive(Debug, Clone)]
pub struct Push<'a> {
    pub remote: &'a str,
    /// The commit to publish.
    pub commit: &'a str,
    /// The remote branch it becomes (`troupe/fix-12`).
    pub branch: &'a str,
    /// What the remote branch must be now for the push to go ahead (None: it must not exist):
    /// work someone else pushed there is never overwritten.
    pub expect: Option<&'a str>,
    /// Extra git configuration for this push alone (an `http.<url>.extraheader` carrying the
    /// credential), passed through the environment.
    pub config: &'a [(String, String)],
    pub timeout: Duration,
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
    let mut cmd = Command::new("git");
    cmd.arg("-C")
        .arg(root)
        .args(["push", "--porcelain", "--no-verify", &lease, p.remote])
        .arg(format!("{}:refs/heads/{}", p.commit, p.branch))
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_ASKPASS", "true")
        .env("GCM_INTERACTIVE", "never")
        .env("GIT_CONFIG_COUNT", p.config.len().to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (i, (k, v)) in p.config.iter().enumerate() {
        cmd.env(format!("GIT_CONFIG_KEY_{i}"), k)
            .env(format!("GIT_CONFIG_VALUE_{i}"), v);
    }
    let failed = |reason: String| WorktreeError::Push {
        remote: p.remote.to_string(),
        reason,
    };
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
