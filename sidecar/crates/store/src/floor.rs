//! The floor `troupe-dev bench messaging` measures the daemon against: the rows of keyed sends
//! committed in groups straight through rusqlite, on the store's own schema, pragmas (WAL,
//! `synchronous=FULL`, 2 KiB pages) and checkpointing, with no writer thread, channel, runtime
//! or JSON-RPC in the way.

use std::path::Path;
use std::time::Instant;

use crate::Recipients;
use crate::messages::{send, store_messages};
use crate::sessions::SessionBrief;
use crate::sessions::register;
use crate::{NewMessage, NewSession, Priority, Session, StoreError};

/// Sends per second each way of committing them managed.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct FloorFigures {
    /// Only the rows a send writes: its message, its timeline event and their index entries.
    pub rows_per_s: f64,
    /// The store's whole `send` in the transaction: the session and idempotency-key look-ups
    /// too.
    pub store_sql_per_s: f64,
}

/// Commits `sends` sends from `senders` senders (each to its own recipient, as the bench's
/// clients do) in groups of one send per sender — the groups the writer forms when `senders`
/// clients each wait for their answer — into fresh databases under `dir`. With `keys`, every
/// send carries an idempotency key. Returns sends per second.
pub fn group_commit_floor(
    dir: &Path,
    senders: usize,
    sends: usize,
    content: &str,
    keys: bool,
) -> Result<FloorFigures, StoreError> {
    let senders = senders.max(1);
    Ok(FloorFigures {
        rows_per_s: one(
            &dir.join("floor-rows.db"),
            senders,
            sends,
            content,
            keys,
            true,
        )?,
        store_sql_per_s: one(
            &dir.join("floor-sql.db"),
            senders,
            sends,
            content,
            keys,
            false,
        )?,
    })
}

fn one(
    path: &Path,
    senders: usize,
    sends: usize,
    content: &str,
    keys: bool,
    rows_only: bool,
) -> Result<f64, StoreError> {
    let mut conn = crate::open_migrated(path)?;
    let mut pairs: Vec<(SessionBrief, String)> = Vec::with_capacity(senders);
    {
        let tx = conn.transaction()?;
        let session = |cli: &str| -> Result<Session, StoreError> {
            let new = NewSession {
                cli: cli.into(),
                cwd: "/floor".into(),
                project_root: "/floor".into(),
                project_name: "floor".into(),
                ..NewSession::default()
            };
            Ok(register(&tx, &new)?.session)
        };
        for _ in 0..senders {
            pairs.push((
                SessionBrief::from(&session("from")?),
                session("to")?.session_id,
            ));
        }
        tx.commit()?;
    }
    // The same checkpointing as the store: a second connection, PASSIVE, at most every 100 ms.
    conn.pragma_update(None, "wal_autocheckpoint", 0)?;
    let (wake, wakes) = std::sync::mpsc::sync_channel(1);
    let checkpoint_conn = crate::open_connection(path)?;
    let wal = crate::writer::WalBound::new(crate::writer::WAL_TRUNCATE_FRAMES);
    let seen = wal.clone();
    let checkpointer =
        std::thread::spawn(move || crate::writer::checkpointer(checkpoint_conn, wakes, &seen));
    let started = Instant::now();
    let result = (|| {
        let mut done = 0;
        let mut group = 0;
        while done < sends {
            let tx = conn.transaction()?;
            for (from, to) in pairs.iter().take(sends - done) {
                let new = NewMessage {
                    from_session_id: from.session_id.clone(),
                    recipients: Recipients::Session(to.clone()),
                    content: content.to_string(),
                    priority: Priority::Normal,
                    message_type: None,
                    idempotency_key: keys.then(|| format!("c{group}")),
                };
                if rows_only {
                    store_messages(&tx, from, vec![to.clone()], &new)?;
                } else {
                    send(&tx, &new)?;
                }
                done += 1;
            }
            tx.commit()?;
            wal.truncate_if_due(&conn);
            let _coalesced = wake.try_send(());
            group += 1;
        }
        Ok::<_, StoreError>(())
    })();
    let elapsed = started.elapsed().as_secs_f64();
    drop(wake);
    if checkpointer.join().is_err() {
        return Err(StoreError::Commit(
            "the floor's checkpoint thread panicked".into(),
        ));
    }
    result?;
    // A sanity check that the rows are there (and the timing covered real work).
    let stored: i64 = conn.query_row("SELECT count(*) FROM inter_session_messages", [], |r| {
        r.get(0)
    })?;
    if usize::try_from(stored).ok() != Some(sends) {
        return Err(StoreError::Commit(format!(
            "the floor stored {stored} messages, not {sends}"
        )));
    }
    Ok(sends as f64 / elapsed)
}
