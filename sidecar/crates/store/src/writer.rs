//! The single writer: a dedicated thread that owns the write connection and commits jobs in
//! groups. It does not decide what to write; jobs are closures supplied by the store's methods.
//!
//! Each job runs in its own savepoint, so one failing job does not undo the others of its group.
//! Replies are sent only after the group's COMMIT returned: an acknowledged write is durable.

use std::sync::Mutex;
use std::thread::JoinHandle;

use rusqlite::{Connection, Transaction};
use tokio::sync::{mpsc, oneshot};

use crate::StoreError;

/// Most jobs committed by one transaction.
const MAX_GROUP: usize = 1024;
/// Jobs waiting for the writer before senders wait too.
const QUEUE_DEPTH: usize = 16 * 1024;

/// Delivers a job's outcome once its group's commit is known.
type Reply = Box<dyn FnOnce(Result<(), &StoreError>) + Send>;

/// A queued write: run it in the group's transaction, or tell its caller it never ran.
trait Job: Send {
    fn run(self: Box<Self>, tx: &mut Transaction<'_>) -> Reply;
    fn abort(self: Box<Self>, err: &StoreError);
}

struct WriteJob<F, R> {
    f: F,
    reply: oneshot::Sender<Result<R, StoreError>>,
}

impl<F, R> Job for WriteJob<F, R>
where
    F: FnOnce(&Connection) -> Result<R, StoreError> + Send + 'static,
    R: Send + 'static,
{
    fn run(self: Box<Self>, tx: &mut Transaction<'_>) -> Reply {
        let WriteJob { f, reply } = *self;
        let result = run_in_savepoint(tx, f);
        Box::new(move |commit: Result<(), &StoreError>| {
            let outcome = match (commit, result) {
                (Ok(()), result) => result,
                // A job that failed was rolled back to its savepoint: its own error stands.
                (Err(_), Err(own)) => Err(own),
                (Err(e), Ok(_)) => Err(StoreError::Commit(e.to_string())),
            };
            // The caller may have gone away (a dropped request); there is no one to tell then.
            let _unheard = reply.send(outcome);
        })
    }

    fn abort(self: Box<Self>, err: &StoreError) {
        let _unheard = self.reply.send(Err(StoreError::Commit(err.to_string())));
    }
}

enum Cmd {
    Job(Box<dyn Job>),
    Shutdown,
}

pub(crate) struct WriterHandle {
    tx: mpsc::Sender<Cmd>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

pub(crate) fn spawn(conn: Connection) -> Result<WriterHandle, StoreError> {
    let (tx, rx) = mpsc::channel(QUEUE_DEPTH);
    let thread = std::thread::Builder::new()
        .name("troupe-store-writer".into())
        .spawn(move || run(conn, rx))?;
    Ok(WriterHandle {
        tx,
        thread: Mutex::new(Some(thread)),
    })
}

impl WriterHandle {
    pub(crate) async fn submit<R, F>(&self, f: F) -> Result<R, StoreError>
    where
        F: FnOnce(&Connection) -> Result<R, StoreError> + Send + 'static,
        R: Send + 'static,
    {
        let (reply, reply_rx) = oneshot::channel();
        let job: Box<dyn Job> = Box::new(WriteJob { f, reply });
        self.tx
            .send(Cmd::Job(job))
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

fn run_in_savepoint<R>(
    tx: &mut Transaction<'_>,
    f: impl FnOnce(&Connection) -> Result<R, StoreError>,
) -> Result<R, StoreError> {
    let mut sp = tx.savepoint()?;
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&sp)))
        .unwrap_or_else(|_| Err(StoreError::Commit("a write job panicked".into())));
    match result {
        Ok(value) => {
            sp.commit()?;
            Ok(value)
        }
        Err(e) => {
            sp.rollback()?;
            Err(e)
        }
    }
}

fn run(mut conn: Connection, mut rx: mpsc::Receiver<Cmd>) {
    let mut group: Vec<Box<dyn Job>> = Vec::with_capacity(MAX_GROUP);
    let mut stopping = false;
    while !stopping {
        match rx.blocking_recv() {
            Some(Cmd::Job(job)) => group.push(job),
            Some(Cmd::Shutdown) | None => break,
        }
        while group.len() < MAX_GROUP {
            match rx.try_recv() {
                Ok(Cmd::Job(job)) => group.push(job),
                Ok(Cmd::Shutdown) => {
                    stopping = true;
                    break;
                }
                Err(_) => break,
            }
        }
        commit_group(&mut conn, &mut group);
    }
    // Leave a tidy database behind: fold the WAL back into the main file.
    if let Err(e) = conn.pragma_update(None, "wal_checkpoint", "TRUNCATE") {
        tracing::warn!(error = %e, "final WAL checkpoint failed");
    }
}

fn commit_group(conn: &mut Connection, group: &mut Vec<Box<dyn Job>>) {
    let size = group.len();
    let mut tx = match conn.transaction() {
        Ok(tx) => tx,
        Err(e) => {
            let err = StoreError::from(e);
            tracing::error!(error = %err, "cannot begin a write transaction");
            for job in group.drain(..) {
                job.abort(&err);
            }
            return;
        }
    };
    let replies: Vec<Reply> = group.drain(..).map(|job| job.run(&mut tx)).collect();
    let committed = tx.commit().map_err(StoreError::from);
    if let Err(e) = &committed {
        tracing::error!(error = %e, size, "group commit failed");
    }
    for reply in replies {
        reply(committed.as_ref().map(|_| ()));
    }
}
