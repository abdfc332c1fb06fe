//! The subscriptions' logic, one loop for all six: a `Feed` yields the items a subscriber is
//! owed, in order, and waits on the hub (events: on the store's commits) when there are none.
//! Messages, notifications and events replay the rows after a cursor, a batch at a time;
//! approvals and the inbox send their whole list at once and after every change; a run's log is
//! sent from a byte offset, looked at every 200 ms (its processes write it directly). No wire
//! format here: a door turns the items into its notifications.

use std::sync::Arc;

use serde_json::Value;
use tokio::sync::watch;
use troupe_api::types::{
    ApprovalsResult, InboxResult, ListInboxParams, RunLogChunk, SubscribeApprovalsParams,
    SubscribeEventsParams, SubscribeMessagesParams, SubscribeNotificationsParams,
    SubscribeRunLogParams,
};
use troupe_api::{ApiError, parse_params};
use troupe_model::ApprovalStatus;
use troupe_store::{EventFilter, PollFilter, StoreError};

use crate::daemon::Daemon;

/// Rows pushed to a subscriber per store read.
const BATCH: i64 = 256;

/// What a feed reads.
enum Source {
    /// A session's messages after the cursor.
    Messages { session_id: String },
    /// The person's notifications after the cursor.
    Notifications,
    /// Timeline events after the cursor (those of a party, a session, a project, or all).
    Events { filter: EventFilter },
    /// The pending requests (of one project, of none, or of all), whole, at each change.
    Approvals { project: Option<Option<String>> },
    /// A run's log after the cursor (a byte offset), until the run ended and all was read.
    RunLog {
        run_id: String,
        path: std::path::PathBuf,
        /// The last chunk (`ended`) was pushed.
        told: bool,
    },
    /// The inbox (of one project, of none, or of all), whole, at each change. `root`: the
    /// project of a directory not seen yet, looked up again at each read (it may appear).
    Inbox {
        project: Option<Option<String>>,
        root: Option<String>,
    },
}

/// One subscriber's stream of items.
pub struct Feed {
    daemon: Arc<Daemon>,
    source: Source,
    wake: watch::Receiver<i64>,
    cursor: i64,
    /// Read again without waiting (the first read, or the last batch was full).
    ready: bool,
    /// The inbox last pushed (an unchanged one is not pushed again).
    last: Option<Value>,
    /// When the inbox was last worked out (it is again at most every `INBOX_EVERY`).
    last_read: Option<tokio::time::Instant>,
}

/// The least time between two readings of a subscriber's inbox. A burst of changes (a big
/// party's members pausing, questions and approvals coming and going) is read together: the
/// first change after a quiet spell at once, the rest at most every `INBOX_EVERY`.
const INBOX_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

/// Opens the subscription `name` (`subscribe_messages`, `subscribe_approvals`,
/// `subscribe_notifications`, `subscribe_inbox`, `subscribe_events`, `subscribe_run_log`) with its params; a bad param or an unknown session is an error.
pub fn open(
    daemon: &Arc<Daemon>,
    name: &'static str,
    params: Option<Value>,
) -> Result<Feed, ApiError> {
    let (source, wake, cursor) = match name {
        "subscribe_messages" => {
            let p: SubscribeMessagesParams = parse_params(name, params)?;
            // Watch before reading the cursor so nothing committed in between is missed.
            let wake = daemon.hub.watch(&p.session_id);
            let cursor = match p.since {
                Some(since) => daemon.store.get_session(&p.session_id).map(|_| since),
                None => daemon.store.latest_message_seq(&p.session_id),
            }
            .map_err(|e| ApiError::from(e).in_op(name))?;
            let source = Source::Messages {
                session_id: p.session_id,
            };
            (source, wake, cursor)
        }
        "subscribe_notifications" => {
            let p: SubscribeNotificationsParams = parse_params(name, params)?;
            let wake = daemon.store.changes(troupe_store::Topic::Notifications);
            let cursor = match p.since {
                Some(since) => since,
                None => daemon.store.latest_notification_seq()?,
            };
            (Source::Notifications, wake, cursor)
        }
        "subscribe_events" => {
            let p: SubscribeEventsParams = parse_params(name, params)?;
            // Any commit may hold events: watch before reading the cursor.
            let wake = daemon.store.commits();
            let cursor = match p.since {
                Some(since) => since,
                None => daemon.store.latest_event_seq()?,
            };
            let filter = EventFilter {
                party_id: p.party_id,
                session_id: p.session_id,
                project_id: p.project_id,
                limit: BATCH,
                ..EventFilter::default()
            };
            (Source::Events { filter }, wake, cursor)
        }
        "subscribe_run_log" => {
            let p: SubscribeRunLogParams = parse_params(name, params)?;
            let (path, _) = crate::run_logs::path(daemon, &p.run_id).map_err(|e| e.in_op(name))?;
            let wake = watch_log(daemon.clone(), p.run_id.clone(), path.clone());
            let cursor = i64::try_from(p.offset.unwrap_or(0)).unwrap_or(i64::MAX);
            let source = Source::RunLog {
                run_id: p.run_id,
                path,
                told: false,
            };
            (source, wake, cursor)
        }
        "subscribe_approvals" => {
            let p: SubscribeApprovalsParams = parse_params(name, params)?;
            let project = crate::ops::project_filter(daemon, name, p.project_id, p.cwd)?;
            let wake = daemon.store.changes(troupe_store::Topic::Approvals);
            (Source::Approvals { project }, wake, 0)
        }
        "subscribe_inbox" => {
            let p: ListInboxParams = parse_params(name, params)?;
            let root = match &p.cwd {
                Some(cwd) => Some(
                    crate::project::resolve_project_root(std::path::Path::new(cwd))
                        .map_err(|e| ApiError::invalid(name, format!("cwd {cwd}: {e}")))?
                        .0
                        .to_string_lossy()
                        .into_owned(),
                ),
                None => None,
            };
            let project = crate::ops::project_filter(daemon, name, p.project_id, p.cwd)?;
            let wake = daemon.store.changes(troupe_store::Topic::Inbox);
            (Source::Inbox { project, root }, wake, 0)
        }
        other => {
            return Err(ApiError::NotFound {
                what: "subscription".into(),
                id: other.into(),
            });
        }
    };
    Ok(Feed {
        daemon: daemon.clone(),
        source,
        wake,
        cursor,
        ready: true,
        last: None,
        last_read: None,
    })
}

/// How often a followed log is looked at (a process writes it directly, not through us).
const LOG_EVERY: std::time::Duration = std::time::Duration::from_millis(200);

/// A wake for a run's log: bumped when the file grows, and closed (ending the feed) once the
/// run has ended and the last growth was told.
fn watch_log(
    daemon: Arc<Daemon>,
    run_id: String,
    path: std::path::PathBuf,
) -> watch::Receiver<i64> {
    let (tx, rx) = watch::channel(0i64);
    tokio::spawn(async move {
        let mut seen = 0u64;
        loop {
            tokio::select! {
                () = tx.closed() => return,
                () = tokio::time::sleep(LOG_EVERY) => {}
            }
            let ended = daemon
                .store
                .get_run(&run_id)
                .map_or(true, |r| r.status.is_finished() || r.status.is_completed());
            let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
            if size != seen || ended {
                seen = size;
                tx.send_modify(|n| *n += 1);
            }
            if ended {
                // Dropping the sender ends the feed after its last read.
                return;
            }
        }
    });
    rx
}

impl Feed {
    /// The next items, in order (waits until there are some). `None`: the feed has ended (the
    /// hub dropped its key, or a read failed).
    pub async fn next(&mut self) -> Option<Vec<Value>> {
        loop {
            if !self.ready && self.wake.changed().await.is_err() {
                return None;
            }
            self.ready = false;
            if let (Source::Inbox { .. }, Some(at)) = (&self.source, self.last_read) {
                tokio::time::sleep_until(at + INBOX_EVERY).await;
            }
            if matches!(self.source, Source::Inbox { .. }) {
                self.last_read = Some(tokio::time::Instant::now());
            }
            let items = match self.read() {
                Ok(items) => items,
                Err(e) => {
                    tracing::warn!(error = %e, "subscription read failed; closing it");
                    return None;
                }
            };
            if !items.is_empty() || matches!(self.source, Source::Approvals { .. }) {
                return Some(items);
            }
        }
    }

    fn read(&mut self) -> Result<Vec<Value>, StoreError> {
        let store = &self.daemon.store;
        let rows: Vec<(i64, Value)> = match &mut self.source {
            Source::Messages { session_id } => store
                .poll_messages(&PollFilter {
                    session_id: session_id.clone(),
                    since: Some(self.cursor),
                    unread_only: false,
                    limit: BATCH,
                })?
                .into_iter()
                .map(|m| Ok((m.seq, serde_json::to_value(m)?)))
                .collect::<Result<_, serde_json::Error>>()?,
            Source::Notifications => store
                .list_notifications(self.cursor, None, BATCH)?
                .into_iter()
                .map(|n| Ok((n.seq, serde_json::to_value(n)?)))
                .collect::<Result<_, serde_json::Error>>()?,
            Source::Events { filter } => {
                filter.since = Some(self.cursor);
                store
                    .list_events(filter)?
                    .into_iter()
                    .map(|e| Ok((e.seq, serde_json::to_value(e)?)))
                    .collect::<Result<_, serde_json::Error>>()?
            }
            Source::RunLog { run_id, path, told } => {
                if *told {
                    return Ok(Vec::new());
                }
                // Whether it ended is read first: what it wrote before is then all there.
                let run_ended = store
                    .get_run(run_id)
                    .map_or(true, |r| r.status.is_finished() || r.status.is_completed());
                let asked = u64::try_from(self.cursor).unwrap_or(0);
                // After a rotation took the bytes asked for away, the chunk starts at the oldest
                // byte kept, and its offset says so.
                let crate::run_logs::LogRead {
                    text,
                    offset,
                    next,
                    size,
                    ..
                } = crate::run_logs::read_at(path, Some(asked), crate::run_logs::DEFAULT_LIMIT)
                    .map_err(|e| StoreError::Invalid(format!("run {run_id}'s log: {e}")))?;
                self.ready = next < size && !text.is_empty();
                self.cursor = i64::try_from(next).unwrap_or(i64::MAX);
                let ended = run_ended && next >= size;
                if text.is_empty() && !ended {
                    return Ok(Vec::new());
                }
                *told = ended;
                let chunk = RunLogChunk {
                    run_id: run_id.clone(),
                    offset,
                    text,
                    ended,
                };
                return Ok(vec![serde_json::to_value(chunk)?]);
            }
            Source::Approvals { project } => {
                let approvals = match project {
                    // A project never seen has no requests.
                    Some(None) => Vec::new(),
                    Some(Some(id)) => store.list_approvals(
                        Some(ApprovalStatus::Pending),
                        Some(id),
                        None,
                        None,
                        false,
                    )?,
                    None => store.list_approvals(
                        Some(ApprovalStatus::Pending),
                        None,
                        None,
                        None,
                        false,
                    )?,
                };
                tracing::debug!(pending = approvals.len(), "approvals snapshot");
                return Ok(vec![serde_json::to_value(ApprovalsResult { approvals })?]);
            }
            Source::Inbox { project, root } => {
                if let (Some(None), Some(root)) = (&project, &root) {
                    // The directory's project may have been seen since.
                    if let Some(found) = store.find_project_by_root(root)? {
                        *project = Some(Some(found.project_id));
                    }
                }
                let items = match crate::inbox::items(store, &self.daemon.layout, project.clone()) {
                    Ok(items) => items,
                    Err(e) => {
                        // Not pushed as empty: an editor would clear what is still waiting.
                        tracing::warn!(error = %e, "inbox unreadable; tried again at the next change");
                        return Ok(Vec::new());
                    }
                };
                let pushed = serde_json::to_value(InboxResult { items })?;
                // Only a changed inbox is pushed (the first one always).
                if self.last.as_ref() == Some(&pushed) {
                    return Ok(Vec::new());
                }
                self.last = Some(pushed.clone());
                return Ok(vec![pushed]);
            }
        };
        // A full batch: more may be waiting, read again at once.
        self.ready = rows.len() as i64 == BATCH;
        if let Some((seq, _)) = rows.last() {
            self.cursor = *seq;
        }
        Ok(rows.into_iter().map(|(_, v)| v).collect())
    }
}
