//! Troupe's SQLite store: schema migrations, one group-commit writer thread and a pool of
//! read connections. The only crate with SQL in it; it knows nothing of JSON-RPC or the CLI.
//!
//! Writes go through [`Store::write`]: each runs in a transaction shared with the other jobs of
//! its group (in a savepoint of its own when one of them failed), and its caller hears back only
//! after that transaction has committed (WAL, `synchronous=FULL`), so an acknowledged write
//! survives a crash. Validation that must be atomic with the write (the sender active, the
//! recipient in the same project, the idempotency key unseen) runs inside the write job. Reads
//! use pooled connections on the caller's thread (WAL readers never block the writer). The row
//! records are `troupe-model`'s, re-exported here.

mod approvals;
mod changes;
mod collab;
mod columns;
mod definitions;
mod error;
mod events;
mod filters;
mod floor;
mod forge;
mod landing;
mod messages;
mod notifications;
mod parties;
mod questions;
mod retention;
mod runs;
mod schedules;
mod schema;
mod sessions;
mod tasks;
mod writer;

#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rusqlite::Connection;

pub use changes::Topic;
pub use collab::{NewDecision, StepChange};
pub use definitions::{DefinitionKind, Put};
pub use error::StoreError;
pub use events::EventFilter;
pub use floor::{FloorFigures, group_commit_floor};
pub use messages::{PollFilter, SendOutcome};
pub use retention::{DbSize, Kind as RetentionKind, Swept, WINDOW as RETENTION_WINDOW};
pub use runs::{ActiveRun, RunCaller, RunToComplete};
pub use schedules::{Fire, Schedule, ScheduleConfig};
pub use schema::{SCHEMA_VERSION, schema_sql};
pub use troupe_model::{
    AgentRun, Approval, ApprovalRule, ApprovalStatus, Decision, DecisionRecord, DecisionStatus,
    DefinitionRow, Event, ForgeLink, MemberPick, MemberRow, MemberState, MemberStatus, Message,
    MessageType, NewApproval, NewEvent, NewMessage, NewNotification, NewQuestion, NewRun,
    NewSession, Notification, PartyHead, PartyRow, PartyState, PartyStatus, PlanReview, PlanStatus,
    PlanStep, PlanVersion, Priority, Project, Question, QuestionStatus, Recipients,
    RegisterOutcome, RunEnd, RunStatus, Session, SessionFilter, SessionStatus, StepState, Strategy,
    Task, TaskStatus, Usage, Vote,
};

/// How many read connections are kept open between reads.
const MAX_IDLE_READERS: usize = 8;

/// A handle on the database; cheap to clone.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

struct Inner {
    path: PathBuf,
    writer: writer::WriterHandle,
    readers: Mutex<Vec<Connection>>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("path", &self.inner.path)
            .finish()
    }
}

impl Store {
    /// Opens (creating if needed) the database at `path`, migrates it to the latest schema and
    /// starts the writer thread.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let conn = open_migrated(path)?;
        let writer = writer::spawn(conn, open_connection(path)?)?;
        Ok(Store {
            inner: Arc::new(Inner {
                path: path.to_path_buf(),
                writer,
                readers: Mutex::new(Vec::new()),
            }),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Runs `f` inside the next group commit and returns its result once that commit is
    /// durable. An error from `f` rolls back only `f`'s own changes. `f` may run twice (when
    /// another job of its group fails), each time on the same database state.
    pub async fn write<R, F>(&self, f: F) -> Result<R, StoreError>
    where
        F: Fn(&Connection) -> Result<R, StoreError> + Send + 'static,
        R: Send + 'static,
    {
        self.inner.writer.submit(f).await
    }

    /// A receiver that changes after every commit: a reader tailing a table (the timeline)
    /// waits on it, then reads what is new itself.
    pub fn commits(&self) -> tokio::sync::watch::Receiver<i64> {
        self.inner.writer.commits()
    }

    /// A receiver that changes after every commit that changed `topic` (the pending
    /// approvals, the person's notifications, the inbox): the feeds of those wait on it.
    pub fn changes(&self, topic: Topic) -> tokio::sync::watch::Receiver<i64> {
        self.inner.writer.changes(topic)
    }

    /// Announces a change to `topic` that the database does not hold: the removal of a
    /// checkout the inbox reads (a party's integration checkout, whose conflicts it lists).
    pub fn announce(&self, topic: Topic) {
        self.inner.writer.announce(topic);
    }

    /// Runs a read on a pooled connection (a consistent snapshot for the whole closure).
    pub fn read<R>(
        &self,
        f: impl FnOnce(&Connection) -> Result<R, StoreError>,
    ) -> Result<R, StoreError> {
        let conn = match self.lock_readers().pop() {
            Some(conn) => conn,
            None => open_connection(&self.inner.path)?,
        };
        // BEGIN and its end are cached statements: a read is often one short SELECT, and
        // parsing them anew each time cost more than it.
        let result = conn
            .prepare_cached("BEGIN")
            .and_then(|mut begin| begin.execute([]))
            .map_err(StoreError::from)
            .and_then(|_| f(&conn));
        // A read writes nothing: rolling back ends its snapshot either way. A connection still
        // inside a transaction afterwards is not pooled.
        let ended = conn.is_autocommit()
            || conn
                .prepare_cached("ROLLBACK")
                .and_then(|mut end| end.execute([]))
                .is_ok();
        if ended {
            let mut idle = self.lock_readers();
            if idle.len() < MAX_IDLE_READERS {
                idle.push(conn);
            }
        }
        result
    }

    /// Waits until every write submitted so far has committed, then stops the writer.
    pub async fn close(&self) -> Result<(), StoreError> {
        self.inner.writer.shutdown().await
    }

    fn lock_readers(&self) -> std::sync::MutexGuard<'_, Vec<Connection>> {
        // A panic while holding this lock cannot leave the Vec inconsistent.
        self.inner
            .readers
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The write connection: WAL, 2 KiB pages on a new database, migrated to the latest schema.
fn open_migrated(path: &Path) -> Result<Connection, StoreError> {
    let mut conn = open_connection(path)?;
    // Most pages a group commit dirties are index leaves at scattered positions (one per
    // sender and recipient); 2 KiB pages halve the WAL bytes per commit against 4 KiB and
    // measured ~15% more durable sends/s (`troupe-dev bench messaging`). Only takes effect on
    // a new database.
    conn.pragma_update(None, "page_size", 2048)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    schema::migrate(&mut conn)?;
    Ok(conn)
}

fn open_connection(path: &Path) -> Result<Connection, StoreError> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    conn.set_prepared_statement_cache_capacity(64);
    Ok(conn)
}

/// A fresh time-ordered id (UUID v7), for rows and for anything named before it is stored.
pub fn new_id() -> String {
    uuid::Uuid::now_v7().to_string()
}
