//! A run's output: its own log, `runs/<run_id>.log` in the data dir (a process's stdout and
//! stderr; an ACP agent's words and tool calls beside its stderr), read a byte range at a time
//! (`get_run_log`) or followed as it grows (`subscribe_run_log`, a feed of its own).

use std::io::{Read as _, Seek as _, SeekFrom};
use std::path::PathBuf;

use troupe_api::ApiError;
use troupe_api::types::{RunLogParams, RunLogResult};

use crate::daemon::Daemon;

/// Bytes read unless told.
pub const DEFAULT_LIMIT: u64 = 64 * 1024;
/// The most read at once.
pub const MAX_LIMIT: u64 = 1024 * 1024;

/// Where a run's log is (the run must exist: its id is the store's, never the caller's text).
pub fn path(d: &Daemon, run_id: &str) -> Result<(PathBuf, bool), ApiError> {
    let run = d.store.get_run(run_id)?;
    let ended = run.status.is_finished() || run.status.is_completed();
    Ok((
        d.layout
            .data_dir
            .join("runs")
            .join(format!("{}.log", run.run_id)),
        ended,
    ))
}

/// Up to `limit` bytes of the file at `path` from `offset`: the text (a character cut at the
/// end left for the next read, other invalid UTF-8 replaced), where the next read starts, and
/// the file's size. A log not written yet is empty.
pub fn read(
    path: &std::path::Path,
    offset: u64,
    limit: u64,
) -> std::io::Result<(String, u64, u64)> {
    let mut file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok((String::new(), offset, 0));
        }
        Err(e) => return Err(e),
    };
    let size = file.metadata()?.len();
    let offset = offset.min(size);
    file.seek(SeekFrom::Start(offset))?;
    let mut bytes = Vec::new();
    file.take(limit.min(size - offset))
        .read_to_end(&mut bytes)?;
    let keep = match std::str::from_utf8(&bytes) {
        Ok(_) => bytes.len(),
        // A character cut by the limit (an incomplete sequence at the very end): read it next
        // time. Anything else invalid is replaced.
        Err(e) if e.error_len().is_none() => e.valid_up_to(),
        Err(_) => bytes.len(),
    };
    let text = String::from_utf8_lossy(&bytes[..keep]).into_owned();
    Ok((text, offset + keep as u64, size))
}

pub async fn get_run_log(d: &Daemon, p: RunLogParams) -> Result<RunLogResult, ApiError> {
    const OP: &str = "get_run_log";
    let limit = p.limit.unwrap_or(DEFAULT_LIMIT);
    if limit == 0 || limit > MAX_LIMIT {
        return Err(ApiError::invalid(
            OP,
            format!("limit {limit} is not between 1 and {MAX_LIMIT}"),
        ));
    }
    let (path, ended) = path(d, &p.run_id)?;
    let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    let offset = p.offset.unwrap_or_else(|| size.saturating_sub(limit));
    let (text, next_offset, size) = tokio::task::spawn_blocking(move || read(&path, offset, limit))
        .await
        .map_err(|e| ApiError::Internal(format!("reading a run's log: {e}")))?
        .map_err(|e| ApiError::Internal(format!("reading run {}'s log: {e}", p.run_id)))?;
    Ok(RunLogResult {
        run_id: p.run_id,
        text,
        offset: offset.min(size),
        next_offset,
        size,
        ended,
    })
}
