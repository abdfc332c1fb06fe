//! How many lines a tool call would change, read from its input: what the large-diff guardrail
//! counts for every runner, whether or not the caller sent a diff. The shapes read:
//!
//! - a write: `content` with the file's path (the request's, or the input's `file_path` or
//!   `path`; Claude Code's `Write`, the executor's `write_file`), against the file on disk (none:
//!   every line is new);
//! - an edit: `old_string` → `new_string` (Claude Code's `Edit`, Gemini's `replace`), or
//!   `edits: [{old_string, new_string}]` (`MultiEdit`); `replace_all` counts each occurrence in
//!   the file on disk;
//! - ACP diffs: `diffs` (or `content`) `[{type: "diff", path, oldText, newText}]`, as the ACP
//!   runner puts its permission request's tool call content;
//! - a patch or diff as text (`patch`, `diff`): its `+` and `-` lines.
//!
//! Lines count as a unified diff counts them: each removed and each added line (a changed line is
//! both). Several shapes in one input (an agent that sends its own diff besides its edit) give the
//! largest count, not their sum.

use std::time::Duration;

use serde_json::Value;
use similar::{DiffOp, TextDiff};

/// Longest a line diff may take before it settles for a larger (never smaller) count.
const DIFF_TIMEOUT: Duration = Duration::from_millis(250);

/// The lines changed by turning `old` into `new`: removed plus added.
pub fn lines_changed(old: &str, new: &str) -> usize {
    if old == new {
        return 0;
    }
    let diff = TextDiff::configure()
        .timeout(DIFF_TIMEOUT)
        .diff_lines(old, new);
    diff.ops()
        .iter()
        .map(|op| match *op {
            DiffOp::Equal { .. } => 0,
            DiffOp::Delete { old_len, .. } => old_len,
            DiffOp::Insert { new_len, .. } => new_len,
            DiffOp::Replace {
                old_len, new_len, ..
            } => old_len + new_len,
        })
        .sum()
}

/// The `+` and `-` lines of a unified diff (not its `+++`/`---` headers).
pub fn diff_text_lines(diff: &str) -> usize {
    diff.lines()
        .filter(|l| {
            (l.starts_with('+') && !l.starts_with("+++"))
                || (l.starts_with('-') && !l.starts_with("---"))
        })
        .count()
}

/// The lines `input` would change. Its file is `file_path` (the request's own), else the
/// input's `file_path` or `path`; `on_disk` gives the current text of a file by its path as
/// written, if there is one to read.
pub fn changed_lines(
    input: &Value,
    file_path: Option<&str>,
    on_disk: &dyn Fn(&str) -> Option<String>,
) -> usize {
    let text = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).map(str::to_string);
    let path = file_path.or_else(|| {
        ["file_path", "path"]
            .iter()
            .find_map(|k| input.get(*k).and_then(Value::as_str))
    });
    let current = || path.and_then(on_disk);
    let mut counts = Vec::new();

    // Edits, each maybe applied to every occurrence.
    let single = [input.clone()];
    let edits = match input.get("edits").and_then(Value::as_array) {
        Some(edits) => edits.as_slice(),
        None => single.as_slice(),
    };
    let mut edited = 0;
    let mut file = None;
    for edit in edits {
        let (Some(old), Some(new)) = (text(edit, "old_string"), text(edit, "new_string")) else {
            continue;
        };
        let times = match edit.get("replace_all").and_then(Value::as_bool) {
            Some(true) if !old.is_empty() => file
                .get_or_insert_with(current)
                .as_deref()
                .map(|f| f.matches(old.as_str()).count())
                .unwrap_or(1)
                .max(1),
            _ => 1,
        };
        edited += lines_changed(&old, &new) * times;
    }
    counts.push(edited);

    // A whole file's content, against what is on disk.
    if let (Some(content), Some(_)) = (input.get("content").and_then(Value::as_str), path) {
        let before = file.unwrap_or_else(current).unwrap_or_default();
        counts.push(lines_changed(&before, content));
    }

    // ACP diffs.
    for key in ["diffs", "content"] {
        let Some(items) = input.get(key).and_then(Value::as_array) else {
            continue;
        };
        let acp: usize = items
            .iter()
            .filter(|d| d.get("type").is_none_or(|t| t == "diff"))
            .filter_map(|d| {
                let new = text(d, "newText")?;
                Some(lines_changed(&text(d, "oldText").unwrap_or_default(), &new))
            })
            .sum();
        counts.push(acp);
    }

    // A patch as text.
    for key in ["patch", "diff"] {
        if let Some(diff) = input.get(key).and_then(Value::as_str) {
            counts.push(diff_text_lines(diff));
        }
    }
    counts.into_iter().max().unwrap_or(0)
}

#[cfg(test)]
mod tests;
