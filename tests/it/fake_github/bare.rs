//! The fake GitHub's view of a repository's bare git repository, through the `git` CLI: branch
//! heads, the commits and diff of a pull request, and merges written as GitHub writes them
//! (`git merge-tree --write-tree` and `git commit-tree`, no work tree).

use std::path::Path;
use std::process::{Command, Output};

/// Who GitHub commits as (the committer of merge, squash and rebase commits).
const COMMITTER: (&str, &str) = ("GitHub", "noreply@github.com");

fn git(bare: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new("git");
    command
        .arg("-C")
        .arg(bare)
        .args(args)
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env_remove("GIT_INDEX_FILE")
        .env("GIT_COMMITTER_NAME", COMMITTER.0)
        .env("GIT_COMMITTER_EMAIL", COMMITTER.1);
    for (name, value) in env {
        command.env(name, value);
    }
    command
        .output()
        .unwrap_or_else(|error| panic!("fake GitHub: cannot run git {args:?}: {error}"))
}

fn text(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

/// The commit a revision names (a sha, `main`, `heads/main`, `refs/heads/main`), if any.
pub fn rev_parse(bare: &Path, rev: &str) -> Option<String> {
    let output = git(
        bare,
        &[
            "rev-parse",
            "--verify",
            "--quiet",
            &format!("{rev}^{{commit}}"),
        ],
        &[],
    );
    (output.status.success() && !text(&output).is_empty()).then(|| text(&output))
}

/// The branch a bare repository's `HEAD` names.
pub fn default_branch(bare: &Path) -> Option<String> {
    let output = git(bare, &["symbolic-ref", "--short", "HEAD"], &[]);
    output.status.success().then(|| text(&output))
}

/// Whether `ancestor` is `commit` or one of its ancestors.
pub fn is_ancestor(bare: &Path, ancestor: &str, commit: &str) -> bool {
    git(
        bare,
        &["merge-base", "--is-ancestor", ancestor, commit],
        &[],
    )
    .status
    .success()
}

/// The tree merging `theirs` into `ours` (from their merge base, or from `base`), or `None` on
/// a conflict.
pub fn merge_tree(bare: &Path, ours: &str, theirs: &str, base: Option<&str>) -> Option<String> {
    let merge_base = base.map(|b| format!("--merge-base={b}"));
    let mut args = vec!["merge-tree", "--write-tree", "--no-messages"];
    if let Some(merge_base) = &merge_base {
        args.push(merge_base);
    }
    args.extend([ours, theirs]);
    let output = git(bare, &args, &[]);
    let tree = text(&output);
    (output.status.success() && !tree.is_empty()).then(|| tree.lines().next().unwrap().to_owned())
}

/// A commit of `tree` on `parents`, authored by `author` (name, email, date; the committer's
/// identity and now when `None`).
pub fn commit_tree(
    bare: &Path,
    tree: &str,
    parents: &[&str],
    message: &str,
    author: Option<(&str, &str, &str)>,
) -> String {
    let mut args = vec!["commit-tree", "--no-gpg-sign", tree];
    for parent in parents {
        args.extend(["-p", parent]);
    }
    args.extend(["-m", message]);
    let (name, email, date) = author.unwrap_or((COMMITTER.0, COMMITTER.1, ""));
    let mut env = vec![("GIT_AUTHOR_NAME", name), ("GIT_AUTHOR_EMAIL", email)];
    if !date.is_empty() {
        env.push(("GIT_AUTHOR_DATE", date));
    }
    let output = git(bare, &args, &env);
    assert!(
        output.status.success(),
        "fake GitHub: git commit-tree failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    text(&output)
}

/// Moves `refs/heads/{branch}` from `old` to `new`; false if it no longer was at `old`.
pub fn update_branch(bare: &Path, branch: &str, new: &str, old: &str) -> bool {
    git(
        bare,
        &["update-ref", &format!("refs/heads/{branch}"), new, old],
        &[],
    )
    .status
    .success()
}

/// The commits on `head` and not on `base`, oldest first (merge commits left out).
pub fn commits_between(bare: &Path, base: &str, head: &str) -> Vec<String> {
    let output = git(
        bare,
        &[
            "rev-list",
            "--reverse",
            "--no-merges",
            &format!("{base}..{head}"),
        ],
        &[],
    );
    text(&output).lines().map(str::to_owned).collect()
}

/// A commit's author: name, email and date (ISO).
pub fn author(bare: &Path, commit: &str) -> (String, String, String) {
    let output = git(
        bare,
        &["log", "-1", "--format=%an%x00%ae%x00%aI", commit],
        &[],
    );
    let text = text(&output);
    let mut parts = text.split('\0').map(str::to_owned);
    (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    )
}

/// A commit's message.
pub fn message(bare: &Path, commit: &str) -> String {
    text(&git(bare, &["log", "-1", "--format=%B", commit], &[]))
}

/// A pull request's numbers as GitHub counts them: commits on `head` since its merge base with
/// `base`, and files changed, lines added and lines deleted from that merge base.
pub fn diff_stats(bare: &Path, base: &str, head: &str) -> (u64, u64, u64, u64) {
    let range = format!("{base}...{head}");
    let commits = text(&git(
        bare,
        &["rev-list", "--count", &format!("{base}..{head}")],
        &[],
    ))
    .parse()
    .unwrap_or(0);
    let numstat = text(&git(bare, &["diff", "--numstat", &range], &[]));
    let (mut files, mut added, mut deleted) = (0, 0, 0);
    for line in numstat.lines() {
        let mut fields = line.split('\t');
        files += 1;
        added += fields.next().and_then(|n| n.parse().ok()).unwrap_or(0);
        deleted += fields.next().and_then(|n| n.parse().ok()).unwrap_or(0);
    }
    (commits, files, added, deleted)
}
