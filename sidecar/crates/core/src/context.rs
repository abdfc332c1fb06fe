//! What a subagent is given of its parent (seed 001's `session_context`): `summary_markdown`
//! (the parent's task, result and recent messages), `session_id:<id>` (the same of another
//! session of the project), `transcript:<n>` (the parent's last n messages received),
//! `file:<path>` (a file of the project, confined to it); any other text is given as it is.

use std::fmt::Write as _;
use std::path::Path;

use troupe_store::{PollFilter, Session, Store};

/// The most characters of context given.
const MAX_CONTEXT: usize = 32 * 1024;
/// The messages a summary shows.
const SUMMARY_MESSAGES: i64 = 10;
/// The most messages a transcript shows.
const MAX_TRANSCRIPT: i64 = 200;

/// Why a `session_context` could not be given.
#[derive(Debug, thiserror::Error)]
pub enum ContextError {
    #[error("session_context {0:?}: {1}")]
    Bad(String, String),
    #[error(transparent)]
    Store(#[from] troupe_store::StoreError),
}

/// The context `spec` names, for a subagent of `parent` in the project at `root`.
pub fn resolve(
    store: &Store,
    parent: &Session,
    root: &Path,
    spec: &str,
) -> Result<String, ContextError> {
    let bad = |why: &str| ContextError::Bad(spec.to_string(), why.to_string());
    let text = if spec == "summary_markdown" {
        summary(store, parent)?
    } else if let Some(id) = spec.strip_prefix("session_id:") {
        let other = store.get_session(id.trim())?;
        if other.project_id != parent.project_id {
            return Err(bad("that session is of another project"));
        }
        summary(store, &other)?
    } else if let Some(n) = spec.strip_prefix("transcript:") {
        let n: i64 = n
            .trim()
            .parse()
            .ok()
            .filter(|n| (1..=MAX_TRANSCRIPT).contains(n))
            .ok_or_else(|| bad(&format!("transcript:<n> takes 1 to {MAX_TRANSCRIPT}")))?;
        transcript(store, parent, n)?
    } else if let Some(path) = spec.strip_prefix("file:") {
        file(root, path.trim()).map_err(|e| bad(&e))?
    } else {
        spec.to_string()
    };
    Ok(cut(text))
}

fn cut(mut s: String) -> String {
    if s.len() > MAX_CONTEXT {
        let mut at = MAX_CONTEXT;
        while !s.is_char_boundary(at) {
            at -= 1;
        }
        s.truncate(at);
        s.push_str("\n[context cut]");
    }
    s
}

/// The session's last `n` messages received, oldest first.
fn recent(
    store: &Store,
    session: &Session,
    n: i64,
) -> Result<Vec<troupe_store::Message>, ContextError> {
    let all = store.poll_messages(&PollFilter {
        session_id: session.session_id.clone(),
        since: Some(0),
        unread_only: false,
        limit: 1000,
    })?;
    let skip = all.len().saturating_sub(usize::try_from(n).unwrap_or(0));
    Ok(all.into_iter().skip(skip).collect())
}

fn transcript(store: &Store, session: &Session, n: i64) -> Result<String, ContextError> {
    let mut out = format!("## The last messages of session {}\n", session.session_id);
    for m in recent(store, session, n)? {
        let _ = writeln!(out, "- from {}: {}", m.from_session_id, m.content);
    }
    Ok(out)
}

fn summary(store: &Store, session: &Session) -> Result<String, ContextError> {
    let mut out = format!(
        "## Session {} ({}, in {})\n",
        session.session_id, session.cli, session.cwd
    );
    if let Some(run) = store.run_of_session(&session.session_id)? {
        let _ = writeln!(out, "Its agent: {}.", run.agent_name);
        let task: String = run.prompt.chars().take(2000).collect();
        let _ = writeln!(out, "Its task:\n{task}");
        if let Some(result) = &run.result {
            let _ = writeln!(
                out,
                "Its result: {}",
                result.to_string().chars().take(2000).collect::<String>()
            );
        }
    }
    let messages = recent(store, session, SUMMARY_MESSAGES)?;
    if !messages.is_empty() {
        out.push_str("Recent messages to it:\n");
        for m in messages {
            let text: String = m.content.chars().take(500).collect();
            let _ = writeln!(out, "- from {}: {text}", m.from_session_id);
        }
    }
    Ok(out)
}

/// A file of the project, by a path relative to its root that stays inside it.
fn file(root: &Path, path: &str) -> Result<String, String> {
    if path.is_empty() {
        return Err("file:<path> needs a path".into());
    }
    let root = root
        .canonicalize()
        .map_err(|e| format!("{}: {e}", root.display()))?;
    let full = root
        .join(path)
        .canonicalize()
        .map_err(|e| format!("{path}: {e}"))?;
    if !full.starts_with(&root) {
        return Err(format!("{path} is outside the project"));
    }
    let bytes = std::fs::read(&full).map_err(|e| format!("{path}: {e}"))?;
    Ok(format!("## {path}\n{}", String::from_utf8_lossy(&bytes)))
}
