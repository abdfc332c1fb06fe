//! What a subagent is given of its parent (seed 001's `session_context`): `summary_markdown`
//! (the parent's task, result and recent messages), `session_id:<id>` (the same of another
//! session of the project; for a member, only its own or one it started), `transcript:<n>` (the parent's last n messages received),
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

/// The context `spec` names, for a subagent of `parent` (`member`: a session Troupe started)
/// in the project at `root`; nothing of `data_dir` is ever given.
pub fn resolve(
    store: &Store,
    parent: &Session,
    root: &Path,
    data_dir: &Path,
    member: bool,
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
        // A member may not read another session's messages this way (it reads only its own).
        if member && !descends_from(store, &other, &parent.session_id) {
            return Err(bad(
                "a session's context is given only from the caller's own session or one it started",
            ));
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
        file(root, data_dir, path.trim()).map_err(|e| bad(&e))?
    } else {
        spec.to_string()
    };
    Ok(cut(text))
}

/// Whether `session` is `ancestor` or was started under it (a few levels at most).
fn descends_from(store: &Store, session: &Session, ancestor: &str) -> bool {
    let mut at = Some(session.clone());
    for _ in 0..16 {
        let Some(s) = at.take() else { return false };
        if s.session_id == ancestor {
            return true;
        }
        at = s
            .parent_session_id
            .as_deref()
            .and_then(|p| store.get_session(p).ok());
    }
    false
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
    let keep = usize::try_from(n).unwrap_or(0);
    let mut last: std::collections::VecDeque<troupe_store::Message> =
        std::collections::VecDeque::new();
    let mut since = 0;
    loop {
        let page = store.poll_messages(&PollFilter {
            session_id: session.session_id.clone(),
            since: Some(since),
            unread_only: false,
            limit: 1000,
        })?;
        let full = page.len() == 1000;
        for m in page {
            since = since.max(m.seq);
            last.push_back(m);
            if last.len() > keep {
                last.pop_front();
            }
        }
        if !full {
            return Ok(last.into());
        }
    }
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
fn file(root: &Path, data_dir: &Path, path: &str) -> Result<String, String> {
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
    if let Ok(data) = data_dir.canonicalize()
        && full.starts_with(&data)
    {
        return Err(format!("{path} is in Troupe's data dir"));
    }
    let bytes = crate::project::read_project_file(&full, MAX_CONTEXT as u64)?
        .ok_or_else(|| format!("{path}: no such file"))?;
    Ok(format!("## {path}\n{}", String::from_utf8_lossy(&bytes)))
}
