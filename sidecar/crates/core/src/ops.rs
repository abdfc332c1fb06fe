//! Operation handlers: one async function per operation in the registry, taking its params
//! and returning its result. No wire formats here: the doors do the framing.

mod agents;
pub mod approvals;
mod collab;
mod forge;
mod hooks;
mod inbox;
mod landing;
mod parties;
mod plugins;
mod questions;
mod schedules;
#[cfg(test)]
mod tests;

pub use crate::retention::gc;
pub use crate::rounds::prompt_agent;
pub use crate::run_logs::get_run_log;
pub use agents::*;
pub use approvals::{
    decide_approval, list_approval_rules, list_approvals, request_permission,
    request_permission_decided, revoke_approval_rule,
};
pub use collab::*;
pub use forge::*;
pub use hooks::*;
pub use inbox::*;
pub use landing::*;
pub use parties::*;
pub use plugins::*;
pub use questions::*;
pub use schedules::*;

use std::path::Path;
use std::time::Duration;

use troupe_store::{
    EventFilter, Message, NewMessage, NewSession, PollFilter, Recipients, SendOutcome,
    SessionFilter, SessionStatus,
};

use crate::daemon::Daemon;
use crate::project::resolve_project_root;
use troupe_api::ApiError;
use troupe_api::types::*;

/// Longest a long-poll may wait.
pub const MAX_WAIT_MS: u64 = 300_000;
const DEFAULT_LIMIT: u32 = 100;
const MAX_LIMIT: u32 = 1000;

fn limit(op: &'static str, limit: Option<u32>) -> Result<i64, ApiError> {
    match limit.unwrap_or(DEFAULT_LIMIT) {
        0 => Err(ApiError::invalid(op, "limit must be at least 1")),
        n if n > MAX_LIMIT => Err(ApiError::invalid(
            op,
            format!("limit {n} is over the maximum of {MAX_LIMIT}"),
        )),
        n => Ok(i64::from(n)),
    }
}

fn non_empty(op: &'static str, field: &str, value: &str) -> Result<(), ApiError> {
    if value.trim().is_empty() {
        return Err(ApiError::invalid(op, format!("{field} must not be empty")));
    }
    Ok(())
}

/// The project id named by `project_id`, or else by `cwd`'s project. `Ok(None)` when `cwd`
/// belongs to a project never seen.
fn project_of(
    d: &Daemon,
    op: &'static str,
    project_id: Option<String>,
    cwd: Option<String>,
) -> Result<Option<String>, ApiError> {
    if let Some(id) = project_id {
        return Ok(Some(d.store.get_project(&id)?.project_id));
    }
    let Some(cwd) = cwd else {
        return Ok(None);
    };
    let (root, _) = resolve_project_root(Path::new(&cwd))
        .map_err(|e| ApiError::invalid(op, format!("cwd {cwd}: {e}")))?;
    Ok(d.store
        .find_project_by_root(&root.to_string_lossy())?
        .map(|p| p.project_id))
}

/// For filters: `None` when neither is given; `Some(None)` when `cwd`'s project was never seen.
pub fn project_filter(
    d: &Daemon,
    op: &'static str,
    project_id: Option<String>,
    cwd: Option<String>,
) -> Result<Option<Option<String>>, ApiError> {
    if project_id.is_none() && cwd.is_none() {
        return Ok(None);
    }
    Ok(Some(project_of(d, op, project_id, cwd)?))
}

pub async fn register_session(
    d: &Daemon,
    p: RegisterSessionParams,
) -> Result<RegisterSessionResult, ApiError> {
    const OP: &str = "register_session";
    non_empty(OP, "cli", &p.cli)?;
    let (root, name) = resolve_project_root(Path::new(&p.cwd))
        .map_err(|e| ApiError::invalid(OP, format!("cwd {}: {e}", p.cwd)))?;
    let outcome = d
        .store
        .register_session(NewSession {
            cli: p.cli,
            cwd: p.cwd,
            project_root: root.to_string_lossy().into_owned(),
            project_name: name,
            external_id: p.external_id,
            parent_session_id: p.parent_session_id,
            spawned_by_agent_id: p.spawned_by_agent_id,
            party_id: p.party_id,
        })
        .await?;
    Ok(RegisterSessionResult {
        session_id: outcome.session.session_id.clone(),
        project_id: outcome.project.project_id,
        project_root: outcome.project.root_path,
        created: outcome.created,
        session: outcome.session,
    })
}

pub async fn end_session(d: &Daemon, p: SessionIdParams) -> Result<SessionResult, ApiError> {
    let session = d.store.end_session(p.session_id).await?;
    d.hub.forget(&session.session_id);
    Ok(SessionResult { session })
}

pub async fn heartbeat(d: &Daemon, p: SessionIdParams) -> Result<SessionResult, ApiError> {
    let session = d.store.heartbeat(p.session_id).await?;
    Ok(SessionResult { session })
}

pub async fn get_session(d: &Daemon, p: SessionIdParams) -> Result<SessionResult, ApiError> {
    let session = d.store.get_session(&p.session_id)?;
    Ok(SessionResult { session })
}

pub async fn list_sessions(d: &Daemon, p: ListSessionsParams) -> Result<SessionsResult, ApiError> {
    let scoped = p.project_id.is_some() || p.cwd.is_some();
    let project_id = project_of(d, "list_sessions", p.project_id, p.cwd)?;
    if scoped && project_id.is_none() {
        return Ok(SessionsResult {
            sessions: Vec::new(),
        });
    }
    let sessions = d.store.list_sessions(&SessionFilter {
        project_id,
        status: p.status,
        party_id: p.party_id,
        parent_session_id: p.parent_session_id,
    })?;
    Ok(SessionsResult { sessions })
}

pub async fn discover_agents(
    d: &Daemon,
    p: DiscoverAgentsParams,
) -> Result<SessionsResult, ApiError> {
    const OP: &str = "discover_agents";
    if p.project_id.is_none() && p.cwd.is_none() {
        return Err(ApiError::invalid(OP, "give project_id or cwd"));
    }
    let Some(project_id) = project_of(d, OP, p.project_id, p.cwd)? else {
        return Ok(SessionsResult {
            sessions: Vec::new(),
        });
    };
    let sessions = d.store.list_sessions(&SessionFilter {
        project_id: Some(project_id),
        status: Some(p.status.unwrap_or(SessionStatus::Active)),
        party_id: p.party_id,
        parent_session_id: None,
    })?;
    Ok(SessionsResult { sessions })
}

pub async fn list_siblings(d: &Daemon, p: SessionIdParams) -> Result<SessionsResult, ApiError> {
    let sessions = d.store.list_siblings(&p.session_id)?;
    Ok(SessionsResult { sessions })
}

/// Checks the size limit, stores the message(s) durably, then wakes their recipients.
async fn deliver(d: &Daemon, op: &'static str, new: NewMessage) -> Result<SendOutcome, ApiError> {
    non_empty(op, "content", &new.content)?;
    if new.content.len() > d.config.max_message_bytes {
        return Err(ApiError::TooLarge {
            what: "message content",
            size: new.content.len(),
            limit: d.config.max_message_bytes,
        });
    }
    let outcome = d.store.send_message(new).await?;
    for message in &outcome.messages {
        d.hub.publish(&message.to_session_id, message.seq);
    }
    Ok(outcome)
}

fn single(op: &'static str, outcome: SendOutcome) -> Result<SentMessage, ApiError> {
    let duplicate = outcome.duplicate;
    let message = outcome
        .messages
        .into_iter()
        .next()
        .ok_or_else(|| ApiError::Internal(format!("{op} stored no message")))?;
    Ok(SentMessage {
        message_id: message.message_id,
        to_session_id: message.to_session_id,
        seq: message.seq,
        duplicate,
    })
}

fn broadcast(outcome: SendOutcome) -> BroadcastResult {
    let (message_ids, to_session_ids) = outcome
        .messages
        .into_iter()
        .map(|m| (m.message_id, m.to_session_id))
        .unzip();
    BroadcastResult {
        message_ids,
        to_session_ids,
        duplicate: outcome.duplicate,
    }
}

pub async fn send_message(d: &Daemon, p: SendMessageParams) -> Result<SentMessage, ApiError> {
    const OP: &str = "send_message";
    let new = NewMessage {
        from_session_id: p.from_session_id,
        recipients: Recipients::Session(p.to_session_id),
        content: p.content,
        priority: p.priority,
        message_type: p.message_type,
        idempotency_key: p.idempotency_key,
    };
    single(OP, deliver(d, OP, new).await?)
}

pub async fn send_to_parent(d: &Daemon, p: SendToParentParams) -> Result<SentMessage, ApiError> {
    const OP: &str = "send_to_parent";
    let new = NewMessage {
        from_session_id: p.session_id,
        recipients: Recipients::Parent,
        content: p.content,
        priority: p.priority,
        message_type: None,
        idempotency_key: p.idempotency_key,
    };
    single(OP, deliver(d, OP, new).await?)
}

pub async fn send_to_child(d: &Daemon, p: SendToChildParams) -> Result<SentMessage, ApiError> {
    const OP: &str = "send_to_child";
    let new = NewMessage {
        from_session_id: p.session_id,
        recipients: Recipients::Child(p.child_session_id),
        content: p.content,
        priority: p.priority,
        message_type: None,
        idempotency_key: p.idempotency_key,
    };
    single(OP, deliver(d, OP, new).await?)
}

pub async fn broadcast_to_children(
    d: &Daemon,
    p: BroadcastToChildrenParams,
) -> Result<BroadcastResult, ApiError> {
    let new = NewMessage {
        from_session_id: p.session_id,
        recipients: Recipients::Children,
        content: p.content,
        priority: p.priority,
        message_type: None,
        idempotency_key: p.idempotency_key,
    };
    Ok(broadcast(deliver(d, "broadcast_to_children", new).await?))
}

pub async fn broadcast_to_party(
    d: &Daemon,
    p: BroadcastToPartyParams,
) -> Result<BroadcastResult, ApiError> {
    let new = NewMessage {
        from_session_id: p.from_session_id,
        recipients: Recipients::Party(p.party_id),
        content: p.content,
        priority: p.priority,
        message_type: None,
        idempotency_key: p.idempotency_key,
    };
    Ok(broadcast(deliver(d, "broadcast_to_party", new).await?))
}

pub async fn poll_messages(
    d: &Daemon,
    p: PollMessagesParams,
) -> Result<PollMessagesResult, ApiError> {
    const OP: &str = "poll_messages";
    let wait_ms = p.wait_ms.unwrap_or(0);
    if wait_ms > MAX_WAIT_MS {
        return Err(ApiError::invalid(
            OP,
            format!("wait_ms {wait_ms} is over the maximum of {MAX_WAIT_MS}"),
        ));
    }
    let filter = PollFilter {
        session_id: p.session_id,
        since: p.since,
        unread_only: p.since.is_none(),
        limit: limit(OP, p.limit)?,
    };
    // Watch before the first read so a message committed in between still wakes us.
    let mut wake = d.hub.watch(&filter.session_id);
    let deadline = tokio::time::Instant::now() + Duration::from_millis(wait_ms);
    let messages: Vec<Message> = loop {
        let messages = d.store.poll_messages(&filter)?;
        if !messages.is_empty() {
            break messages;
        }
        match tokio::time::timeout_at(deadline, wake.changed()).await {
            Ok(Ok(())) => continue,
            // Timed out, or the hub dropped the session: answer with what there is (nothing).
            Ok(Err(_)) | Err(_) => break messages,
        }
    };
    if p.mark_read.unwrap_or(true) && !messages.is_empty() {
        let ids = messages.iter().map(|m| m.message_id.clone()).collect();
        d.store
            .mark_read(filter.session_id.clone(), Some(ids), None)
            .await?;
    }
    let next_since = messages.last().map_or(p.since.unwrap_or(0), |m| m.seq);
    Ok(PollMessagesResult {
        messages,
        next_since,
    })
}

pub async fn mark_read(d: &Daemon, p: MarkReadParams) -> Result<MarkReadResult, ApiError> {
    let marked = d
        .store
        .mark_read(p.session_id, p.message_ids, p.up_to_seq)
        .await?;
    Ok(MarkReadResult { marked })
}

pub async fn list_events(d: &Daemon, p: ListEventsParams) -> Result<ListEventsResult, ApiError> {
    let events = d.store.list_events(&EventFilter {
        since: p.since,
        session_id: p.session_id,
        party_id: p.party_id,
        project_id: p.project_id,
        kind: p.kind,
        limit: limit("list_events", p.limit)?,
    })?;
    let next_since = events.last().map_or(p.since.unwrap_or(0), |e| e.seq);
    Ok(ListEventsResult { events, next_since })
}

pub async fn daemon_status(d: &Daemon, _: NoParams) -> Result<DaemonStatus, ApiError> {
    let [projects, sessions, active_sessions, messages, events] = d.store.counts()?;
    Ok(DaemonStatus {
        pid: std::process::id(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        data_dir: d.layout.data_dir.display().to_string(),
        socket_path: d.layout.socket_path().display().to_string(),
        ws_url: format!("ws://{}", d.ws_addr),
        uptime_ms: u64::try_from(d.started.elapsed().as_millis()).unwrap_or(u64::MAX),
        schema_version: troupe_store::SCHEMA_VERSION,
        max_message_bytes: d.config.max_message_bytes,
        projects,
        sessions,
        active_sessions,
        messages,
        events,
        sandbox: d.sandbox.status().to_string(),
        sandbox_layer: d.sandbox.layer().as_str().to_string(),
    })
}

/// Ends the runs first (every member's processes, unless `leave_running` leaves those the next
/// daemon can adopt), then asks the daemon to stop: the answer says what became of the runs.
pub async fn shutdown_daemon(d: &Daemon, p: ShutdownParams) -> Result<ShutdownResult, ApiError> {
    let stopped = match d.orchestrator.shutdown(p.leave_running).await {
        Ok(stopped) => stopped,
        // Another stop came first: it ends the runs.
        Err(e) => {
            tracing::info!(error = %e, "the runs were being stopped already");
            Default::default()
        }
    };
    d.request_shutdown();
    Ok(ShutdownResult {
        stopping: true,
        ended_runs: stopped.ended,
        left_running: stopped.left_running,
    })
}
