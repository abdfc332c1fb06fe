//! Naming a repository and an issue: `OWNER/REPO`, `OWNER/REPO#N`, an issue's or pull
//! request's web URL, and a git remote's URL (https, ssh or scp-like).

use std::fmt;

/// A repository on a forge.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct RepoRef {
    pub owner: String,
    pub name: String,
}

/// An issue (or pull request) of a repository.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct IssueRef {
    pub repo: RepoRef,
    pub number: u64,
}

fn valid_part(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 100
        && s != "."
        && s != ".."
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

impl RepoRef {
    /// `OWNER/REPO` (a trailing `.git` is dropped).
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let (owner, name) = text
            .split_once('/')
            .ok_or_else(|| format!("{text:?} is not OWNER/REPO"))?;
        let name = name.strip_suffix(".git").unwrap_or(name);
        if !valid_part(owner) || !valid_part(name) {
            return Err(format!(
                "{text:?} is not OWNER/REPO (letters, digits, '-', '_' and '.')"
            ));
        }
        Ok(Self {
            owner: owner.to_string(),
            name: name.to_string(),
        })
    }

    /// The repository a git remote URL names on `host` (`https://host/o/r(.git)`,
    /// `ssh://git@host/o/r`, `git@host:o/r`); None for another host or another shape.
    pub fn from_remote_url(url: &str, host: &str) -> Option<Self> {
        let url = url.trim();
        let path = if let Some(rest) = url
            .strip_prefix("https://")
            .or_else(|| url.strip_prefix("http://"))
            .or_else(|| url.strip_prefix("ssh://"))
            .or_else(|| url.strip_prefix("git://"))
        {
            let (authority, path) = rest.split_once('/')?;
            let authority = authority.rsplit('@').next()?;
            let authority = authority.split(':').next()?;
            if !authority.eq_ignore_ascii_case(host) {
                return None;
            }
            path
        } else {
            // scp-like: [user@]host:owner/repo
            let (before, path) = url.split_once(':')?;
            let h = before.rsplit('@').next()?;
            if !h.eq_ignore_ascii_case(host) || path.starts_with('/') {
                return None;
            }
            path
        };
        Self::parse(path.trim_end_matches('/')).ok()
    }
}

impl fmt::Display for RepoRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.owner, self.name)
    }
}

impl IssueRef {
    /// `OWNER/REPO#N`, or an issue's or pull request's URL on `host`
    /// (`https://host/OWNER/REPO/issues/N`).
    pub fn parse(text: &str, host: &str) -> Result<Self, String> {
        let text = text.trim();
        if let Some((repo, n)) = text.split_once('#') {
            let number = n
                .parse::<u64>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| format!("{text:?}: {n:?} is not an issue number"))?;
            return Ok(Self {
                repo: RepoRef::parse(repo)?,
                number,
            });
        }
        let rest = text
            .strip_prefix("https://")
            .or_else(|| text.strip_prefix("http://"))
            .ok_or_else(|| format!("{text:?} is neither OWNER/REPO#N nor an issue's URL"))?;
        let mut parts = rest.trim_end_matches('/').split('/');
        let (h, owner, name, kind, n) = (
            parts.next().unwrap_or_default(),
            parts.next().unwrap_or_default(),
            parts.next().unwrap_or_default(),
            parts.next().unwrap_or_default(),
            parts.next().unwrap_or_default(),
        );
        if !h.eq_ignore_ascii_case(host) {
            return Err(format!("{text:?} is not on {host}"));
        }
        if !matches!(kind, "issues" | "pull") || parts.next().is_some() {
            return Err(format!("{text:?} is not an issue's or pull request's URL"));
        }
        Self::parse(&format!("{owner}/{name}#{n}"), host)
    }
}

impl fmt::Display for IssueRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#{}", self.repo, self.number)
    }
}

#[cfg(test)]
mod tests;
