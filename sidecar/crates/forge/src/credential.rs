//! Finding the person's GitHub credential where they already keep it: the environment
//! (`GH_TOKEN`, `GITHUB_TOKEN`; the enterprise pair for another host), else the `gh` CLI's own
//! login (`gh auth token`).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::{ForgeError, Token};

/// How long `gh auth token` may take (it reads a file or the system keyring).
const GH_WAIT: Duration = Duration::from_secs(5);

/// The person's token for `host` (`github.com`, or a GitHub Enterprise Server's host), read
/// through `env` (the process's environment, or a test's): `GH_TOKEN`, then `GITHUB_TOKEN`
/// (for github.com and its `*.ghe.com` tenants, as `gh` does; for another host
/// `GH_ENTERPRISE_TOKEN`, then `GITHUB_ENTERPRISE_TOKEN`), then the `gh` CLI's login for that
/// host (`gh auth token --hostname HOST`, when `gh` is on `env`'s PATH). It may wait a few
/// seconds for `gh`: call it off the async threads (`spawn_blocking`).
pub fn discover(host: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<Token, ForgeError> {
    let host = host.trim().to_ascii_lowercase();
    let names: &[&str] = if is_github_com(&host) {
        &["GH_TOKEN", "GITHUB_TOKEN"]
    } else {
        &["GH_ENTERPRISE_TOKEN", "GITHUB_ENTERPRISE_TOKEN"]
    };
    for name in names {
        if let Some(token) = env(name).map(|t| t.trim().to_string())
            && !token.is_empty()
        {
            return Ok(Token::new(token));
        }
    }
    if let Some(gh) = env("PATH").and_then(|path| find_on_path("gh", &path))
        && let Some(token) = gh_auth_token(&gh, &host)
    {
        return Ok(Token::new(token));
    }
    Err(ForgeError::Credential(if is_github_com(&host) {
        format!(
            "no GitHub credential for {host}: log in with `gh auth login`, or set GH_TOKEN or \
             GITHUB_TOKEN"
        )
    } else {
        format!(
            "no GitHub credential for {host}: log in with `gh auth login --hostname {host}`, or \
             set GH_ENTERPRISE_TOKEN (GH_TOKEN and GITHUB_TOKEN are for github.com)"
        )
    }))
}

/// github.com, or a GitHub Enterprise Cloud tenant (`*.ghe.com`): `gh` gives both the
/// github.com variables.
fn is_github_com(host: &str) -> bool {
    host == "github.com" || host == "api.github.com" || host.ends_with(".ghe.com")
}

/// The first executable file called `name` in the directories of `path`.
fn find_on_path(name: &str, path: &str) -> Option<PathBuf> {
    std::env::split_paths(path)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// `gh auth token --hostname HOST`'s answer (trimmed), if it gives one within [`GH_WAIT`].
fn gh_auth_token(gh: &Path, host: &str) -> Option<String> {
    let mut child = Command::new(gh)
        .args(["auth", "token", "--hostname", host])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let deadline = Instant::now() + GH_WAIT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                tracing::debug!("`gh auth token` gave no answer in time");
                return None;
            }
        }
    };
    if !status.success() {
        return None;
    }
    let mut out = String::new();
    child.stdout.take()?.read_to_string(&mut out).ok()?;
    let token = out.trim();
    (!token.is_empty() && !token.contains(char::is_whitespace)).then(|| token.to_string())
}

#[cfg(test)]
mod tests;
