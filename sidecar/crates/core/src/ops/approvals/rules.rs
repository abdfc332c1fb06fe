//! How an approval rule answers a request: its tool (`*` for any) and its pattern over what the
//! request is about, read by kind.
//!
//! - **A file path.** The path is normalised first (`.` and `..` resolved lexically against where
//!   the caller works) and taken from the root of its checkout; a path that leaves the checkout
//!   matches no rule. `*` and `?` never cross a `/`; `**` does. As in .gitignore, a pattern
//!   without a `/` matches the file's name anywhere (`*.rs`, `NOTES.md`, `*` for every file), one
//!   with a `/` matches the path from the checkout's root (`src/*.rs` matches `src/main.rs`, not
//!   `src/a/b.rs` nor `src/../build.rs`), and one starting with `/` matches the absolute path.
//! - **A shell command** (an input's `command`). The pattern and the command are read the same way
//!   (`crate::guardrails::shell`: shell words, then operators) and matched word by word: a
//!   pattern word is a glob over one word of the command (its `*` stays inside that word and does
//!   not cross `/`). The last word of the pattern may end the match early: a lone `*` (`cargo
//!   test *`), or a `*` right after a letter or digit (`cargo test*`), matches any further words,
//!   none included. So `cargo test*` matches `cargo test` and `cargo test --release`, not
//!   `cargo testfoo`; `cargo test-*` matches `cargo test-unit` only. An operator (`;`, `&&`, `||`,
//!   `|`, `&`, `>`, `<`, `$(`, a backtick, a newline) matches only the same operator written in
//!   the pattern at that place: `cargo test*` never matches `cargo test && curl x | sh` nor
//!   `cargo test > out`, while `cargo build* && cargo test*` matches `cargo build && cargo test
//!   -q`, each side as above. No rule matches a command the reader cannot read, one that expands
//!   a parameter (`$VAR`, `${…}`, `$1`, `$'…'`; `$?` and the like aside) or one with a path outside
//!   the checkout (`~`, `$HOME`, an absolute path elsewhere, a `..` that leaves it). To match a
//!   literal `*` write `[*]`.
//! - **Anything else** (a URL, the input as JSON): the glob over the text as it is.

use std::path::{Component, Path, PathBuf};

use globset::{Glob, GlobBuilder, GlobMatcher};
use troupe_store::ApprovalRule;

use crate::guardrails::shell::{Command, Token};

/// What a request is about, as the rules see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Subject {
    /// A file; `None` when it leaves the checkout (no rule matches it).
    Path(Option<PathSubject>),
    /// A shell command's tokens; `None` when no rule may match it (unreadable, expanding a
    /// parameter, or reaching outside the checkout).
    Command(Option<Vec<Token>>),
    /// Anything else, as text.
    Raw(String),
}

/// A file path inside its checkout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct PathSubject {
    /// From the checkout's root, normalised (`src/main.rs`; empty for the root itself).
    rel: String,
    /// Absolute, under each name of the checkout's root.
    absolute: Vec<String>,
}

impl PathSubject {
    /// `path` as rules see it: resolved lexically against `base` (`.` and `..` taken away) and
    /// taken from the root of the checkout, given by each of its names (`roots`: canonical
    /// first); `None` when it lies outside.
    pub(super) fn new(base: &Path, roots: &[PathBuf], path: &str) -> Option<PathSubject> {
        let full = lexical(&base.join(path));
        let rel = roots.iter().find_map(|r| full.strip_prefix(r).ok())?;
        let rel = rel.to_string_lossy().into_owned();
        let mut absolute: Vec<String> = roots
            .iter()
            .map(|r| r.join(&rel).to_string_lossy().into_owned())
            .collect();
        absolute.dedup();
        Some(PathSubject { rel, absolute })
    }
}

/// `path` with `.` and `..` taken away without looking at the disk (`..` at the root stays
/// there).
pub(super) fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// Whether `rule` answers a call of `tool` about `subject`.
pub(super) fn matches(rule: &ApprovalRule, tool: &str, subject: &Subject) -> bool {
    (rule.tool_name == "*" || rule.tool_name == tool) && pattern_matches(&rule.pattern, subject)
}

/// Whether a rule's `pattern` matches `subject` (see the module's comment).
pub(super) fn pattern_matches(pattern: &str, subject: &Subject) -> bool {
    match subject {
        Subject::Path(None) | Subject::Command(None) => false,
        Subject::Path(Some(path)) => path_matches(pattern, path),
        Subject::Command(Some(tokens)) => {
            command_pattern(pattern).is_some_and(|parts| command_matches(&parts, tokens))
        }
        Subject::Raw(text) => Glob::new(pattern).is_ok_and(|g| g.compile_matcher().is_match(text)),
    }
}

/// A glob whose `*` and `?` do not cross `/`.
fn glob(pattern: &str) -> Option<GlobMatcher> {
    GlobBuilder::new(pattern)
        .literal_separator(true)
        .build()
        .ok()
        .map(|g| g.compile_matcher())
}

fn path_matches(pattern: &str, path: &PathSubject) -> bool {
    let Some(matcher) = glob(pattern.strip_prefix("./").unwrap_or(pattern)) else {
        return false;
    };
    if pattern.starts_with('/') {
        path.absolute.iter().any(|a| matcher.is_match(a))
    } else if pattern.contains('/') {
        matcher.is_match(&path.rel)
    } else {
        let name = path.rel.rsplit('/').next().unwrap_or_default();
        matcher.is_match(name)
    }
}

/// A piece of a command pattern.
enum Part {
    /// One word of the command.
    Word(GlobMatcher),
    /// Any further words (none included), up to the next operator or the end.
    Rest,
    /// This operator.
    Op(String),
}

/// A command pattern read; `None` when it cannot be read (it then matches nothing).
fn command_pattern(pattern: &str) -> Option<Vec<Part>> {
    let tokens = Command::read(pattern).ok()?.tokens;
    let mut parts = Vec::new();
    for (i, token) in tokens.iter().enumerate() {
        let word = match token {
            Token::Op(op) => {
                parts.push(Part::Op(op.clone()));
                continue;
            }
            Token::Word(w) => w,
        };
        let last = !matches!(tokens.get(i + 1), Some(Token::Word(_)));
        if last && word == "*" {
            parts.push(Part::Rest);
        } else if let Some(stem) = word.strip_suffix('*')
            && last
            && stem.ends_with(|c: char| c.is_alphanumeric())
        {
            parts.push(Part::Word(glob(stem)?));
            parts.push(Part::Rest);
        } else {
            parts.push(Part::Word(glob(word)?));
        }
    }
    Some(parts)
}

fn command_matches(parts: &[Part], tokens: &[Token]) -> bool {
    let mut at = 0;
    for part in parts {
        match (part, tokens.get(at)) {
            // A `Rest` is always followed by an operator or the end: taking every word is the
            // only way to match.
            (Part::Rest, _) => {
                while matches!(tokens.get(at), Some(Token::Word(_))) {
                    at += 1;
                }
            }
            (Part::Word(glob), Some(Token::Word(word))) if glob.is_match(word) => at += 1,
            (Part::Op(op), Some(Token::Op(theirs))) if op == theirs => at += 1,
            _ => return false,
        }
    }
    at == tokens.len()
}

#[cfg(test)]
mod tests;
