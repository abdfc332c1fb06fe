//! The data dir's watch: a daemon whose data dir is no longer its own stops, saying why in its
//! log. Gone (deleted or moved away): its runs end with it, every process of theirs, since their
//! records went with the dir and nothing could take them back. Its lock file replaced (another
//! daemon may hold the dir now): it stops and leaves the runs to that daemon. A watch on the data
//! dir's parent wakes it at once; a look at the lock file every `CHECK_EVERY` covers what the
//! watch cannot see (a lock file replaced, a parent it could not watch).

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::daemon::Daemon;

/// How often the lock file is looked at when the watch says nothing.
const CHECK_EVERY: Duration = Duration::from_secs(10);

/// A file's device and inode.
fn identity(path: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// Why the data dir is no longer this daemon's, if it is not.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Lost {
    /// The lock file is not there: the dir was deleted or moved.
    Gone,
    /// Another file is at the lock file's path: someone else may hold the dir.
    Replaced,
}

fn check(lock: &Path, ours: (u64, u64)) -> Option<Lost> {
    match identity(lock) {
        Some(id) if id == ours => None,
        Some(_) => Some(Lost::Replaced),
        None => Some(Lost::Gone),
    }
}

/// Starts the watch (it ends when the daemon stops).
pub fn watch(daemon: &Arc<Daemon>) {
    let data_dir = daemon.layout.data_dir.clone();
    let lock = daemon.layout.lock_path();
    let Some(ours) = identity(&lock) else {
        tracing::warn!(lock = %lock.display(), "cannot read the lock file: the data dir is not watched");
        return;
    };
    let (wake, mut woken) = tokio::sync::mpsc::unbounded_channel::<()>();
    let watcher = data_dir.parent().and_then(|parent| {
        use notify::Watcher;
        let name = data_dir.file_name().map(std::ffi::OsStr::to_os_string);
        let mut watcher =
            notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
                // Only news of the data dir itself (its parent's other entries are not ours).
                let ours = event.is_ok_and(|e| {
                    e.paths
                        .iter()
                        .any(|p| p.file_name().map(std::ffi::OsStr::to_os_string) == name)
                });
                if ours {
                    let _stopped = wake.send(());
                }
            })
            .inspect_err(|e| tracing::debug!(error = %e, "no watch on the data dir's parent"))
            .ok()?;
        watcher
            .watch(parent, notify::RecursiveMode::NonRecursive)
            .inspect_err(|e| tracing::debug!(error = %e, "no watch on the data dir's parent"))
            .ok()?;
        Some(watcher)
    });
    let daemon = Arc::downgrade(daemon);
    tokio::spawn(async move {
        let _watcher = watcher;
        let lost = loop {
            tokio::select! {
                Some(()) = woken.recv() => {}
                () = tokio::time::sleep(CHECK_EVERY) => {}
            }
            let Some(d) = daemon.upgrade() else { return };
            if *d.shutdown_requested().borrow() {
                return;
            }
            if let Some(lost) = check(&lock, ours) {
                break lost;
            }
        };
        let Some(d) = daemon.upgrade() else { return };
        let leave_running = lost == Lost::Replaced;
        if leave_running {
            tracing::error!(
                data_dir = %data_dir.display(),
                "the data dir's lock file was replaced (another daemon may hold it now): this daemon stops and leaves the runs to it"
            );
        } else {
            tracing::error!(
                data_dir = %data_dir.display(),
                "the data dir is gone (deleted or moved): this daemon stops, and its runs end with it"
            );
        }
        match d.orchestrator.shutdown(leave_running).await {
            Ok(stopped) => tracing::info!(
                ended = stopped.ended,
                left_running = stopped.left_running,
                "runs stopped with the data dir"
            ),
            Err(e) => tracing::info!(error = %e, "the runs were being stopped already"),
        }
        d.request_shutdown();
    });
}

#[cfg(test)]
mod tests;
