//! The single writer: a dedicated thread that owns the write connection and commits jobs in
//! groups. It does not decide what to write; jobs are closures supplied by the store's methods.
//!
//! One failing job never undoes the others of its group (see `commit_group`). Replies are sent
//! only after the group's COMMIT returned: an acknowledged write is durable.
//!
//! A group is up to 1,024 queued jobs. A second thread checkpoints the WAL (PASSIVE, at most
//! every 100 ms) so the writer only appends; past 64 MiB of WAL the writer folds the rest back
//! and truncates it between two groups (`WalBound`). After each commit it bumps a counter
//! (`Store::commits`) that readers tailing a table wait on. Work outside any transaction
//! (`VACUUM`) runs here too, between two groups.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use rusqlite::Connection;
use tokio::sync::{mpsc, oneshot, watch};

use crate::StoreError;
use crate::changes::{self, Announcer};

/// Most jobs committed by one transaction.
const MAX_GROUP: usize = 1024;
/// Jobs waiting for the writer before senders wait too.
const QUEUE_DEPTH: usize = 16 * 1024;

/// A queued write: run it in the group's transaction (possibly twice, see `commit_group`),
/// then tell its caller the outcome once the commit is known.
trait Job: Send {
    /// Runs the job; returns whether it succeeded. With `isolated`, it runs in its own savepoint
    /// so a failure undoes only its own changes.
    fn attempt(&mut self, conn: &Connection, isolated: bool) -> bool;
    fn finish(self: Box<Self>, commit: Result<(), &StoreError>);
}

struct WriteJob<F, R> {
    f: F,
    result: Option<Result<R, StoreError>>,
    reply: oneshot::Sender<Result<R, StoreError>>,
}

impl<F, R> Job for WriteJob<F, R>
where
    F: Fn(&Connection) -> Result<R, StoreError> + Send + 'static,
    R: Send + 'static,
{
    fn attempt(&mut self, conn: &Connection, isolated: bool) -> bool {
        let result = if isolated {
            run_in_savepoint(conn, &self.f)
        } else {
            guard(|| (self.f)(conn))
        };
        let ok = result.is_ok();
        self.result = Some(result);
        ok
    }

    fn finish(self: Box<Self>, commit: Result<(), &StoreError>) {
        let outcome = match (commit, self.result) {
            (Ok(()), Some(result)) => result,
            // A job that failed was rolled back to its savepoint: its own error stands.
            (Err(_), Some(Err(own))) => Err(own),
            (Err(e), _) => Err(StoreError::Commit(e.to_string())),
            (Ok(()), None) => Err(StoreError::Commit("the write never ran".into())),
        };
        // The caller may have gone away (a dropped request); there is no one to tell then.
        let _unheard = self.reply.send(outcome);
    }
}

/// Work that runs on the write connection outside any transaction (`VACUUM`), between two
/// group commits; it answers its caller itself.
type Exclusive = Box<dyn FnOnce(&mut Connection) + Send>;

enum Cmd {
    Job(Box<dyn Job>),
    Exclusive(Exclusive),
    Shutdown,
}

pub(crate) struct WriterHandle {
    tx: mpsc::Sender<Cmd>,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// Counts committed groups (readers that tail a table wait on it).
    commits: watch::Sender<i64>,
    /// Counts committed changes per topic (`changes`).
    topics: Announcer,
}

/// Starts the writer on `conn` and its checkpointer on `checkpoint_conn`.
pub(crate) fn spawn(
    conn: Connection,
    checkpoint_conn: Connection,
) -> Result<WriterHandle, StoreError> {
    // Checkpoints (copying the WAL into the database file) run on their own thread, so the
    // writer only ever appends to the WAL.
    conn.pragma_update(None, "wal_autocheckpoint", 0)?;
    let (tx, rx) = mpsc::channel(QUEUE_DEPTH);
    let (wake_checkpointer, checkpoint_rx) = std::sync::mpsc::sync_channel(1);
    let commits = watch::channel(0).0;
    let announce = commits.clone();
    let topics = Announcer::new();
    let announce_topics = topics.clone();
    let wal = WalBound::new(WAL_TRUNCATE_FRAMES);
    let seen = wal.clone();
    let checkpointer = std::thread::Builder::new()
        .name("troupe-store-checkpoint".into())
        .spawn(move || checkpointer(checkpoint_conn, checkpoint_rx, &seen))?;
    let thread = std::thread::Builder::new()
        .name("troupe-store-writer".into())
        .spawn(move || {
            let announce = Announce {
                commits: announce,
                topics: announce_topics,
            };
            run(conn, rx, wake_checkpointer, checkpointer, &announce, wal);
        })?;
    Ok(WriterHandle {
        tx,
        thread: Mutex::new(Some(thread)),
        commits,
        topics,
    })
}

impl WriterHandle {
    /// A receiver that changes after every committed group.
    pub(crate) fn commits(&self) -> watch::Receiver<i64> {
        self.commits.subscribe()
    }

    /// A receiver that changes after every committed group that changed `topic`.
    pub(crate) fn changes(&self, topic: changes::Topic) -> watch::Receiver<i64> {
        self.topics.subscribe(topic)
    }

    /// Announces a change to `topic` the database does not hold (a removed checkout).
    pub(crate) fn announce(&self, topic: changes::Topic) {
        self.topics.announce_one(topic);
    }

    pub(crate) async fn submit<R, F>(&self, f: F) -> Result<R, StoreError>
    where
        F: Fn(&Connection) -> Result<R, StoreError> + Send + 'static,
        R: Send + 'static,
    {
        let (reply, reply_rx) = oneshot::channel();
        let job: Box<dyn Job> = Box::new(WriteJob {
            f,
            result: None,
            reply,
        });
        self.tx
            .send(Cmd::Job(job))
            .await
            .map_err(|_| StoreError::Closed)?;
        reply_rx.await.map_err(|_| StoreError::Closed)?
    }

    /// Runs `f` on the write connection outside any transaction, after the group in progress
    /// committed; writes queue meanwhile.
    pub(crate) async fn exclusive<R, F>(&self, f: F) -> Result<R, StoreError>
    where
        F: FnOnce(&mut Connection) -> Result<R, StoreError> + Send + 'static,
        R: Send + 'static,
    {
        let (reply, reply_rx) = oneshot::channel();
        let work: Exclusive = Box::new(move |conn| {
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(conn)))
                .unwrap_or_else(|_| Err(StoreError::Commit("exclusive work panicked".into())));
            // The caller may have gone away; there is no one to tell then.
            let _unheard = reply.send(outcome);
        });
        self.tx
            .send(Cmd::Exclusive(work))
            .await
            .map_err(|_| StoreError::Closed)?;
        reply_rx.await.map_err(|_| StoreError::Closed)?
    }

    /// Commits everything already queued, then stops the thread and waits for it.
    pub(crate) async fn shutdown(&self) -> Result<(), StoreError> {
        // If the writer is already gone, there is nothing left to flush.
        if self.tx.send(Cmd::Shutdown).await.is_err() {
            return Ok(());
        }
        let thread = self
            .thread
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        if let Some(thread) = thread {
            tokio::task::spawn_blocking(move || thread.join())
                .await
                .map_err(|_| StoreError::Closed)?
                .map_err(|_| StoreError::Commit("the writer thread panicked".into()))?;
        }
        Ok(())
    }
}

/// Runs one of the writer's transaction statements (`BEGIN`, `COMMIT`, `SAVEPOINT job`…) from
/// the connection's statement cache: `Connection::transaction` parses its `BEGIN` and `COMMIT`
/// anew at every group.
fn exec(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(|_| ())
}

fn run_in_savepoint<R>(
    conn: &Connection,
    f: impl Fn(&Connection) -> Result<R, StoreError>,
) -> Result<R, StoreError> {
    exec(conn, "SAVEPOINT job")?;
    match guard(|| f(conn)) {
        Ok(value) => {
            exec(conn, "RELEASE job")?;
            Ok(value)
        }
        Err(e) => {
            exec(conn, "ROLLBACK TO job")?;
            exec(conn, "RELEASE job")?;
            Err(e)
        }
    }
}

/// Runs a job, turning a panic into an error so the writer thread survives it.
fn guard<R>(f: impl FnOnce() -> Result<R, StoreError>) -> Result<R, StoreError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
        .unwrap_or_else(|_| Err(StoreError::Commit("a write job panicked".into())))
}

/// What the writer bumps after a commit.
struct Announce {
    commits: watch::Sender<i64>,
    topics: Announcer,
}

fn run(
    mut conn: Connection,
    mut rx: mpsc::Receiver<Cmd>,
    wake_checkpointer: std::sync::mpsc::SyncSender<()>,
    checkpointer: JoinHandle<()>,
    announce: &Announce,
    wal: WalBound,
) {
    let mut group: Vec<Box<dyn Job>> = Vec::with_capacity(MAX_GROUP);
    let mut stopping = false;
    while !stopping {
        let mut exclusive = None;
        match rx.blocking_recv() {
            Some(Cmd::Job(job)) => group.push(job),
            Some(Cmd::Exclusive(work)) => exclusive = Some(work),
            Some(Cmd::Shutdown) | None => break,
        }
        while exclusive.is_none() && group.len() < MAX_GROUP {
            match rx.try_recv() {
                Ok(Cmd::Job(job)) => group.push(job),
                // The group so far commits first.
                Ok(Cmd::Exclusive(work)) => exclusive = Some(work),
                Ok(Cmd::Shutdown) => {
                    stopping = true;
                    break;
                }
                Err(_) => break,
            }
        }
        if !group.is_empty() {
            commit_group(&conn, &mut group, &announce.topics);
        }
        if let Some(work) = exclusive {
            work(&mut conn);
        }
        announce.commits.send_modify(|n| *n += 1);
        wal.truncate_if_due(&conn);
        // A wake-up already pending covers this commit too.
        let _coalesced = wake_checkpointer.try_send(());
    }
    drop(wake_checkpointer);
    if checkpointer.join().is_err() {
        tracing::error!("the checkpoint thread panicked");
    }
    // Leave a tidy database behind: fold the WAL back into the main file.
    if let Err(e) = conn.pragma_update(None, "wal_checkpoint", "TRUNCATE") {
        tracing::warn!(error = %e, "final WAL checkpoint failed");
    }
}

/// Least time between two checkpoints: each one fsyncs the database file.
const CHECKPOINT_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);

/// WAL frames (2 KiB pages: 64 MiB) past which the writer folds the WAL back and truncates it.
/// PASSIVE checkpoints copy frames but never reset the WAL: under steady writes a new frame is
/// always there when a write starts, so SQLite never starts the WAL over and the file grew
/// without bound (11 GB over a million sends).
pub(crate) const WAL_TRUNCATE_FRAMES: i64 = 32_768;

/// The checkpointer's word to the writer that the WAL grew past its bound.
#[derive(Debug, Clone)]
pub(crate) struct WalBound {
    frames: i64,
    due: Arc<AtomicBool>,
    /// Checkpoints that reported the WAL's length so far.
    looks: Arc<AtomicU64>,
}

impl WalBound {
    pub(crate) fn new(frames: i64) -> WalBound {
        WalBound {
            frames,
            due: Arc::new(AtomicBool::new(false)),
            looks: Arc::new(AtomicU64::new(0)),
        }
    }

    /// How many checkpoints have reported the WAL's length.
    #[cfg(test)]
    pub(crate) fn looks(&self) -> u64 {
        self.looks.load(Ordering::Relaxed)
    }

    /// Notes the WAL's length in frames, as a checkpoint found it.
    fn saw(&self, frames: i64) {
        self.looks.fetch_add(1, Ordering::Relaxed);
        if frames >= self.frames {
            self.due.store(true, Ordering::Relaxed);
        }
    }

    /// On the writer, between two groups (no write open): when the WAL grew past its bound,
    /// copies what is left of it into the database and truncates it to nothing (`TRUNCATE`
    /// waits, within the busy timeout, for the readers still on the WAL; when they outlast
    /// it, the next checkpoint asks again).
    pub(crate) fn truncate_if_due(&self, conn: &Connection) {
        if !self.due.swap(false, Ordering::Relaxed) {
            return;
        }
        match conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
            r.get::<_, i64>(0)
        }) {
            Ok(0) => tracing::debug!("WAL folded back and truncated"),
            Ok(_) => tracing::debug!("WAL truncation put off: readers still on it"),
            Err(e) => tracing::warn!(error = %e, "WAL truncation failed"),
        }
    }
}

/// Copies committed WAL frames into the database file (PASSIVE: never blocks the writer or
/// readers) when woken after a commit, at most once per `CHECKPOINT_INTERVAL`, and tells the
/// writer when the WAL grew past its bound.
pub(crate) fn checkpointer(conn: Connection, wake: std::sync::mpsc::Receiver<()>, wal: &WalBound) {
    while wake.recv().is_ok() {
        match conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| r.get::<_, i64>(1)) {
            Ok(frames) => wal.saw(frames),
            Err(e) => tracing::warn!(error = %e, "WAL checkpoint failed"),
        }
        std::thread::sleep(CHECKPOINT_INTERVAL);
    }
}

/// Commits a group. Fast path: every job runs straight in one transaction (no savepoints,
/// whose page copies cost more than the inserts). If any job fails, that transaction is rolled
/// back and the group runs again with a savepoint per job, so the failure undoes only its own
/// changes; jobs are `Fn` so they can run twice.
///
/// The topics the group's jobs marked (`changes`) are announced after the commit and before
/// any caller hears back; a failed job's marks are dropped with its changes.
fn commit_group(conn: &Connection, group: &mut Vec<Box<dyn Job>>, topics: &Announcer) {
    let size = group.len();
    changes::reset_to(0);
    let committed = (|| {
        exec(conn, "BEGIN")?;
        if !group.iter_mut().all(|job| job.attempt(conn, false)) {
            exec(conn, "ROLLBACK")?;
            changes::reset_to(0);
            exec(conn, "BEGIN")?;
            for job in group.iter_mut() {
                let before = changes::marked();
                if !job.attempt(conn, true) {
                    changes::reset_to(before);
                }
            }
        }
        exec(conn, "COMMIT")
    })()
    .map_err(StoreError::from);
    // A group that failed part-way leaves no transaction open for the next one.
    if committed.is_err()
        && !conn.is_autocommit()
        && let Err(e) = exec(conn, "ROLLBACK")
    {
        tracing::error!(error = %e, "rolling back a failed group failed");
    }
    let marks = changes::take();
    match &committed {
        Ok(()) => topics.announce(marks),
        Err(e) => tracing::error!(error = %e, size, "group commit failed"),
    }
    for job in group.drain(..) {
        job.finish(committed.as_ref().map(|_| ()));
    }
}
