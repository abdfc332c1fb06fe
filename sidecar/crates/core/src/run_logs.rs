//! A run's output: its own log, `runs/<run_id>.log` in the data dir (a process's stdout and
//! stderr; an ACP agent's words and tool calls beside its stderr), read a byte range at a time
//! (`get_run_log`) or followed as it grows (`subscribe_run_log`, a feed of its own).
//!
//! A log past `[retention] max_log_mib` is rotated (`rotate`): its last `max_log_mib` become
//! `<run>.log.1`, the previous part, and it starts again empty. The run's processes hold it
//! open, so it is copied then truncated, never renamed; they opened it appending (`O_APPEND`),
//! so they go on writing at its new end (what they write between the copy's end and the
//! truncation, a moment, is lost). Offsets count the log's whole history: `<run>.log.start`
//! holds where the current part starts, so an offset means the same byte after a rotation; a
//! read from before the oldest byte kept (or past the end) starts at the oldest byte kept (at
//! the current part's start) and says so (`rotated`).

use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::path::{Path, PathBuf};
use std::sync::RwLock;

use troupe_api::ApiError;
use troupe_api::types::{RunLogParams, RunLogResult};

use crate::daemon::Daemon;

/// Bytes read unless told.
pub const DEFAULT_LIMIT: u64 = 64 * 1024;
/// The most read at once.
pub const MAX_LIMIT: u64 = 1024 * 1024;

/// Reads hold it shared, a rotation exclusively: a read never sees a rotation half done.
static ROTATION: RwLock<()> = RwLock::new(());

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

/// A file beside the log: `<run>.log<suffix>`.
fn beside(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// The previous part, the current part's start, and the files a rotation leaves half written.
const SUFFIXES: [&str; 4] = [".1", ".start", ".1.tmp", ".start.tmp"];

/// Where the current part starts in the log's history (0 until the first rotation).
fn start_of(path: &Path) -> std::io::Result<u64> {
    match std::fs::read_to_string(beside(path, ".start")) {
        Ok(text) => Ok(text.trim().parse().unwrap_or(0)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(e),
    }
}

fn len_of(path: &Path) -> std::io::Result<Option<u64>> {
    match std::fs::metadata(path) {
        Ok(m) => Ok(Some(m.len())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

fn shared() -> std::sync::RwLockReadGuard<'static, ()> {
    // The lock guards no data: a panicked holder leaves nothing inconsistent.
    ROTATION
        .read()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A read of a log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRead {
    /// The text read (invalid UTF-8 replaced; a character cut at the end is left for the next
    /// read).
    pub text: String,
    /// Where the text starts: the offset asked for, unless `rotated`.
    pub offset: u64,
    /// Where the next read starts.
    pub next: u64,
    /// The log's size: its whole history, rotated parts included.
    pub size: u64,
    /// The offset asked for was gone (rotated away) or past the end: the read started at the
    /// oldest byte kept (past the end: the current part's start).
    pub rotated: bool,
}

/// Up to `limit` bytes of the log at `path` from `offset` (`None`: its last `limit` bytes). A
/// log not written yet is empty.
pub fn read_at(path: &Path, offset: Option<u64>, limit: u64) -> std::io::Result<LogRead> {
    let _reading = shared();
    let start = start_of(path)?;
    let Some(current) = len_of(path)? else {
        let offset = offset.unwrap_or(0);
        return Ok(LogRead {
            text: String::new(),
            offset,
            next: offset,
            size: start,
            rotated: false,
        });
    };
    let size = start + current;
    let previous = if start > 0 {
        len_of(&beside(path, ".1"))?.unwrap_or(0).min(start)
    } else {
        0
    };
    let oldest = start - previous;
    let (offset, rotated) = match offset {
        None => (size.saturating_sub(limit).max(oldest), false),
        Some(o) if o > size => (start, true),
        Some(o) if o < oldest => (oldest, true),
        Some(o) => (o, false),
    };
    // From the previous part on into the current one, or from the current one.
    let mut bytes = Vec::new();
    let mut want = limit.min(size - offset);
    if offset < start {
        let mut f = std::fs::File::open(beside(path, ".1"))?;
        f.seek(SeekFrom::Start(offset - oldest))?;
        f.take(want.min(start - offset)).read_to_end(&mut bytes)?;
        want -= bytes.len() as u64;
    }
    if want > 0 {
        let mut f = std::fs::File::open(path)?;
        f.seek(SeekFrom::Start(offset.max(start) - start))?;
        f.take(want).read_to_end(&mut bytes)?;
    }
    let keep = match std::str::from_utf8(&bytes) {
        Ok(_) => bytes.len(),
        // A character cut by the limit (an incomplete sequence at the very end): read it next
        // time. Anything else invalid is replaced (a character a rotation cut in two too).
        Err(e) if e.error_len().is_none() => e.valid_up_to(),
        Err(_) => bytes.len(),
    };
    Ok(LogRead {
        text: String::from_utf8_lossy(&bytes[..keep]).into_owned(),
        offset,
        next: offset + keep as u64,
        size,
        rotated,
    })
}

/// Rotates the log at `path` if its current part is over `max` bytes: the last `max` bytes
/// become the previous part (`.log.1`, replacing the one before), and the log starts again
/// empty. Whether it did.
pub fn rotate(path: &Path, max: u64) -> std::io::Result<bool> {
    if len_of(path)?.is_none_or(|len| len <= max) {
        return Ok(false);
    }
    let _rotating = ROTATION
        .write()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let start = start_of(path)?;
    let mut current = std::fs::File::open(path)?;
    // Opened before the copy: the truncation follows the copy's last read at once (what is
    // written in between is lost).
    let truncate = std::fs::OpenOptions::new().write(true).open(path)?;
    let from = current.metadata()?.len().saturating_sub(max);
    current.seek(SeekFrom::Start(from))?;
    let (previous, previous_tmp) = (beside(path, ".1"), beside(path, ".1.tmp"));
    let mut copy = std::fs::File::create(&previous_tmp)?;
    // To the end, what was written meanwhile included.
    let copied = std::io::copy(&mut current, &mut copy)?;
    truncate.set_len(0)?;
    copy.sync_data()?;
    std::fs::rename(&previous_tmp, &previous)?;
    let (start_file, start_tmp) = (beside(path, ".start"), beside(path, ".start.tmp"));
    let mut next = std::fs::File::create(&start_tmp)?;
    write!(next, "{}", start + from + copied)?;
    next.sync_data()?;
    std::fs::rename(&start_tmp, &start_file)?;
    Ok(true)
}

/// The files of a run's log (its parts and their bookkeeping) and their bytes; with `remove`,
/// deletes them.
pub fn files(path: &Path, remove: bool) -> std::io::Result<(u64, u64)> {
    let _rotating = ROTATION
        .write()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let (mut count, mut bytes) = (0, 0);
    let all = std::iter::once(path.to_path_buf()).chain(SUFFIXES.iter().map(|s| beside(path, s)));
    for file in all {
        let Some(len) = len_of(&file)? else {
            continue;
        };
        if remove {
            match std::fs::remove_file(&file) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                other => other?,
            }
        }
        count += 1;
        bytes += len;
    }
    Ok((count, bytes))
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
    let offset = p.offset;
    let r = tokio::task::spawn_blocking(move || read_at(&path, offset, limit))
        .await
        .map_err(|e| ApiError::Internal(format!("reading a run's log: {e}")))?
        .map_err(|e| ApiError::Internal(format!("reading run {}'s log: {e}", p.run_id)))?;
    Ok(RunLogResult {
        run_id: p.run_id,
        text: r.text,
        offset: r.offset,
        next_offset: r.next,
        size: r.size,
        ended,
        rotated: r.rotated,
    })
}

#[cfg(test)]
mod tests;
