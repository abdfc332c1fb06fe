//! Guardrails (seed 004): paths no rule may approve and diffs too large to approve by rule. A
//! permission request that touches a sensitive path (`.env*`, `**/secrets/**`, CI config,
//! lockfiles, keys…) or carries a diff over the size limit becomes an escalation flagged
//! dangerous, whatever rule would otherwise answer it (the diff counted from the tool's input by
//! `edits`, for every runner; a shell command's paths read by `shell`). The project may replace
//! the defaults in `.troupe/guardrails.toml` of its main checkout:
//!
//! ```toml
//! sensitive_paths = [".env*", "**/secrets/**", "deploy/**"]   # replaces the defaults
//! max_diff_lines = 400
//! ```

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use globset::{Glob, GlobSet, GlobSetBuilder};
use serde::Deserialize;

pub mod edits;
pub mod shell;

/// Paths no rule may approve, unless the project says otherwise. A pattern without a `/`
/// matches a file name anywhere (as in .gitignore); one with a `/` matches the path from the
/// checkout's root.
pub const DEFAULT_SENSITIVE: &[&str] = &[
    ".env",
    ".env.*",
    "*.pem",
    "*.key",
    "id_rsa*",
    "id_ed25519*",
    "**/secrets/**",
    "secrets/**",
    ".github/workflows/**",
    ".gitlab-ci.yml",
    ".circleci/**",
    "Jenkinsfile",
    "Cargo.lock",
    "package-lock.json",
    "yarn.lock",
    "pnpm-lock.yaml",
    "poetry.lock",
    "Gemfile.lock",
    "go.sum",
];

/// Always sensitive, whatever the project's list says: Troupe's own files in the checkout, the
/// guardrails file among them (an agent must not switch its guardrails off).
pub const ALWAYS_SENSITIVE: &[&str] = &[".troupe/**"];

/// Diff lines (added and removed) above which no rule may approve.
pub const DEFAULT_MAX_DIFF_LINES: usize = 400;

/// A project's guardrails.
#[derive(Debug)]
pub struct Guardrails {
    /// Patterns matched against a file's name, and the set they compile to (same order).
    name_patterns: Vec<String>,
    names: GlobSet,
    /// Patterns matched against the path from the checkout's root.
    path_patterns: Vec<String>,
    paths: GlobSet,
    max_diff_lines: usize,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    sensitive_paths: Option<Vec<String>>,
    max_diff_lines: Option<usize>,
}

impl Guardrails {
    /// The guardrails of the project whose main checkout is `root`: its
    /// `.troupe/guardrails.toml`, else the defaults. A file that does not parse keeps the
    /// defaults (and says why in the log): a typo must not switch the guardrails off.
    pub fn of_project(root: &Path) -> Guardrails {
        let path = root.join(".troupe/guardrails.toml");
        let file = match std::fs::read_to_string(&path) {
            Ok(text) => match toml::from_str::<File>(&text) {
                Ok(f) => Some(f),
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "guardrails file unreadable; using the defaults");
                    None
                }
            },
            Err(_) => None,
        };
        let patterns = file
            .as_ref()
            .and_then(|f| f.sensitive_paths.clone())
            .unwrap_or_else(|| DEFAULT_SENSITIVE.iter().map(|s| s.to_string()).collect());
        let max = file
            .and_then(|f| f.max_diff_lines)
            .unwrap_or(DEFAULT_MAX_DIFF_LINES);
        Guardrails::new(patterns, max)
    }

    /// `of_project`, read again only when the file changed (a permission request and every
    /// Claude Code hook ask; the file is stat'ed, not parsed, each time).
    pub fn for_project(root: &Path) -> Arc<Guardrails> {
        type Cache = Mutex<HashMap<PathBuf, (Option<SystemTime>, Arc<Guardrails>)>>;
        static CACHE: std::sync::OnceLock<Cache> = std::sync::OnceLock::new();
        let modified = std::fs::metadata(root.join(".troupe/guardrails.toml"))
            .and_then(|m| m.modified())
            .ok();
        let cache = CACHE.get_or_init(Cache::default);
        let mut cache = cache.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((seen, guard)) = cache.get(root)
            && *seen == modified
        {
            return guard.clone();
        }
        let guard = Arc::new(Guardrails::of_project(root));
        cache.insert(root.to_path_buf(), (modified, guard.clone()));
        guard
    }

    pub fn new(patterns: Vec<String>, max_diff_lines: usize) -> Guardrails {
        let (mut names, mut paths) = (GlobSetBuilder::new(), GlobSetBuilder::new());
        let (mut name_patterns, mut path_patterns) = (Vec::new(), Vec::new());
        let always = ALWAYS_SENSITIVE.iter().map(|p| p.to_string());
        for p in patterns.into_iter().chain(always) {
            let Ok(glob) = Glob::new(&p) else {
                tracing::warn!(pattern = %p, "not a glob; ignored");
                continue;
            };
            if p.contains('/') {
                paths.add(glob);
                path_patterns.push(p);
            } else {
                names.add(glob);
                name_patterns.push(p);
            }
        }
        // Every pattern added compiled above, so building cannot fail; empty sets if it does.
        let build = |b: GlobSetBuilder| b.build().unwrap_or_else(|_| GlobSet::empty());
        Guardrails {
            name_patterns,
            names: build(names),
            path_patterns,
            paths: build(paths),
            max_diff_lines,
        }
    }

    /// The first sensitive path among `paths` (relative to the checkout's root), with the
    /// pattern it matches.
    pub fn sensitive<'a>(
        &self,
        paths: impl IntoIterator<Item = &'a str>,
    ) -> Option<(String, String)> {
        for path in paths {
            let rel = path.trim_start_matches("./");
            let name = Path::new(rel)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let by_name = self
                .names
                .matches(&name)
                .first()
                .map(|i| &self.name_patterns[*i]);
            let by_path = self
                .paths
                .matches(rel)
                .first()
                .map(|i| &self.path_patterns[*i]);
            if let Some(pattern) = by_name.or(by_path) {
                return Some((rel.to_string(), pattern.clone()));
            }
        }
        None
    }

    /// Why a request's diff (unified, as text) is too large for a rule, if it is: its changed
    /// lines.
    pub fn diff_too_large(&self, diff: &str) -> Option<usize> {
        self.too_many_changes(edits::diff_text_lines(diff))
    }

    /// `changed` lines (added and removed, as `edits` counts them), if over the limit.
    pub fn too_many_changes(&self, changed: usize) -> Option<usize> {
        (changed > self.max_diff_lines).then_some(changed)
    }

    pub fn max_diff_lines(&self) -> usize {
        self.max_diff_lines
    }
}

#[cfg(test)]
mod tests;
