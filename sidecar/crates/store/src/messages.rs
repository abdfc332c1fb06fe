//! Peer-to-peer messages: send (recipients resolved and checked inside the write), poll, mark
//! read. Delivery order per recipient is `seq` order, which is commit order.

use rusqlite::{Connection, Row, params};

use crate::events::append_event;
use crate::sessions::{SessionBrief, list_sessions_in, load_active_brief};
use crate::{
    Message, NewEvent, NewMessage, Recipients, SessionFilter, SessionStatus, Store, StoreError,
    new_id,
};

/// The stored messages of one send.
#[derive(Debug, Clone)]
pub struct SendOutcome {
    pub messages: Vec<Message>,
    /// True when the idempotency key had been seen: nothing new was stored.
    pub duplicate: bool,
}

/// Which messages a poll returns.
#[derive(Debug, Clone)]
pub struct PollFilter {
    pub session_id: String,
    /// Only messages with a greater `seq`.
    pub since: Option<i64>,
    pub unread_only: bool,
    pub limit: i64,
}

const MESSAGE_COLUMNS: &str = "seq, id, project_id, from_session_id, to_session_id, content, \
     priority, message_type, party_id, idempotency_key, created_at, read_at";

fn message_from_row(row: &Row<'_>) -> rusqlite::Result<Message> {
    Ok(Message {
        seq: row.get(0)?,
        message_id: row.get(1)?,
        project_id: row.get(2)?,
        from_session_id: row.get(3)?,
        to_session_id: row.get(4)?,
        content: row.get(5)?,
        priority: row.get(6)?,
        message_type: row.get(7)?,
        party_id: row.get(8)?,
        idempotency_key: row.get(9)?,
        created_at: row.get(10)?,
        read_at: row.get(11)?,
    })
}

pub(crate) fn send(conn: &Connection, new: &NewMessage) -> Result<SendOutcome, StoreError> {
    let from = load_active_brief(conn, &new.from_session_id)?;

    if let Some(key) = &new.idempotency_key {
        let sql = format!(
            "SELECT {MESSAGE_COLUMNS} FROM inter_session_messages \
             WHERE from_session_id = ?1 AND idempotency_key = ?2 ORDER BY seq"
        );
        let earlier: Vec<Message> = conn
            .prepare_cached(&sql)?
            .query_map(params![from.session_id, key], message_from_row)?
            .collect::<Result<_, _>>()?;
        if !earlier.is_empty() {
            return Ok(SendOutcome {
                messages: earlier,
                duplicate: true,
            });
        }
    }

    let recipients = match &new.recipients {
        Recipients::Session(to) => {
            let to = load_active_brief(conn, to)?;
            if to.project_id != from.project_id {
                return Err(StoreError::Forbidden(format!(
                    "session {} belongs to project {}, but the sender {} belongs to project {}",
                    to.session_id, to.project_id, from.session_id, from.project_id
                )));
            }
            vec![to.session_id]
        }
        Recipients::Parent => {
            let parent = from.parent_session_id.as_deref().ok_or_else(|| {
                StoreError::Invalid(format!("session {} has no parent", from.session_id))
            })?;
            vec![load_active_brief(conn, parent)?.session_id]
        }
        Recipients::Child(child) => {
            let child = load_active_brief(conn, child)?;
            if child.parent_session_id.as_deref() != Some(from.session_id.as_str()) {
                return Err(StoreError::Forbidden(format!(
                    "session {} is not a child of {}",
                    child.session_id, from.session_id
                )));
            }
            vec![child.session_id]
        }
        Recipients::Children => {
            let filter = SessionFilter {
                parent_session_id: Some(from.session_id.clone()),
                status: Some(SessionStatus::Active),
                ..SessionFilter::default()
            };
            list_sessions_in(conn, &filter)?
                .into_iter()
                .map(|s| s.session_id)
                .collect()
        }
        Recipients::Party(party) => {
            let filter = SessionFilter {
                project_id: Some(from.project_id.clone()),
                party_id: Some(party.clone()),
                status: Some(SessionStatus::Active),
                ..SessionFilter::default()
            };
            list_sessions_in(conn, &filter)?
                .into_iter()
                .map(|s| s.session_id)
                .filter(|id| *id != from.session_id)
                .collect()
        }
    };

    store_messages(conn, &from, recipients, new)
}

/// The rows of a send whose checks passed: one message per recipient and one timeline event.
/// `troupe-dev bench messaging`'s floor commits exactly these (see `floor.rs`).
pub(crate) fn store_messages(
    conn: &Connection,
    from: &SessionBrief,
    recipients: Vec<String>,
    new: &NewMessage,
) -> Result<SendOutcome, StoreError> {
    let message_type = new
        .message_type
        .unwrap_or_else(|| new.recipients.default_type());
    let party_id = match &new.recipients {
        Recipients::Party(party) => Some(party.clone()),
        _ => from.party_id.clone(),
    };
    let mut insert = conn.prepare_cached(
        "INSERT INTO inter_session_messages (id, project_id, from_session_id, to_session_id, \
         content, priority, message_type, party_id, idempotency_key) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) RETURNING seq, created_at",
    )?;
    let mut messages = Vec::with_capacity(recipients.len());
    for to in recipients {
        let id = new_id();
        let (seq, created_at): (i64, String) = insert.query_row(
            params![
                id,
                from.project_id,
                from.session_id,
                to,
                new.content,
                new.priority,
                message_type,
                party_id,
                new.idempotency_key
            ],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        messages.push(Message {
            seq,
            message_id: id,
            project_id: from.project_id.clone(),
            from_session_id: from.session_id.clone(),
            to_session_id: to,
            content: new.content.clone(),
            priority: new.priority,
            message_type,
            party_id: party_id.clone(),
            idempotency_key: new.idempotency_key.clone(),
            created_at,
            read_at: None,
        });
    }
    // Message contents live in their own table; the timeline records who sent what where.
    let data = match messages.as_slice() {
        [one] => serde_json::json!({
            "message_type": message_type, "message_id": one.message_id,
            "to_session_id": one.to_session_id, "seq": one.seq,
        }),
        many => serde_json::json!({
            "message_type": message_type,
            "message_ids": many.iter().map(|m| m.message_id.as_str()).collect::<Vec<_>>(),
            "to_session_ids": many.iter().map(|m| m.to_session_id.as_str()).collect::<Vec<_>>(),
        }),
    };
    append_event(
        conn,
        &NewEvent {
            kind: "message_sent".into(),
            project_id: Some(from.project_id.clone()),
            session_id: Some(from.session_id.clone()),
            party_id,
            data,
        },
    )?;
    Ok(SendOutcome {
        messages,
        duplicate: false,
    })
}

pub(crate) fn poll_in(conn: &Connection, filter: &PollFilter) -> Result<Vec<Message>, StoreError> {
    let sql = if filter.unread_only {
        format!(
            "SELECT {MESSAGE_COLUMNS} FROM inter_session_messages INDEXED BY idx_ism_inbox \
             WHERE to_session_id = ?1 AND seq > ?2 AND read_at IS NULL ORDER BY seq LIMIT ?3"
        )
    } else {
        format!(
            "SELECT {MESSAGE_COLUMNS} FROM inter_session_messages INDEXED BY idx_ism_inbox \
             WHERE to_session_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3"
        )
    };
    let mut stmt = conn.prepare_cached(&sql)?;
    let rows = stmt.query_map(
        params![filter.session_id, filter.since.unwrap_or(0), filter.limit],
        message_from_row,
    )?;
    Ok(rows.collect::<Result<_, _>>()?)
}

impl Store {
    /// Stores a message for each resolved recipient, atomically; durable when this returns.
    pub async fn send_message(&self, new: NewMessage) -> Result<SendOutcome, StoreError> {
        self.write(move |conn| send(conn, &new)).await
    }

    /// The recipient's messages matching `filter`, oldest first. The session must exist.
    pub fn poll_messages(&self, filter: &PollFilter) -> Result<Vec<Message>, StoreError> {
        self.read(|conn| {
            crate::sessions::load_session(conn, &filter.session_id)?;
            poll_in(conn, filter)
        })
    }

    /// Marks messages of `session_id` read: those named, or all up to `up_to_seq`, or (neither
    /// given) all. Returns how many changed.
    pub async fn mark_read(
        &self,
        session_id: String,
        message_ids: Option<Vec<String>>,
        up_to_seq: Option<i64>,
    ) -> Result<usize, StoreError> {
        self.write(move |conn| {
            crate::sessions::load_session(conn, &session_id)?;
            let now = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')";
            let changed = match &message_ids {
                Some(ids) => {
                    let mut stmt = conn.prepare_cached(&format!(
                        "UPDATE inter_session_messages SET read_at = {now} \
                         WHERE to_session_id = ?1 AND id = ?2 AND read_at IS NULL"
                    ))?;
                    let mut n = 0;
                    for id in ids {
                        n += stmt.execute(params![session_id, id])?;
                    }
                    n
                }
                None => conn
                    .prepare_cached(&format!(
                        "UPDATE inter_session_messages SET read_at = {now} \
                         WHERE to_session_id = ?1 AND read_at IS NULL AND seq <= ?2"
                    ))?
                    .execute(params![session_id, up_to_seq.unwrap_or(i64::MAX)])?,
            };
            Ok(changed)
        })
        .await
    }

    /// The highest message `seq` addressed to `session_id` (0 when none).
    pub fn latest_message_seq(&self, session_id: &str) -> Result<i64, StoreError> {
        self.read(|conn| {
            crate::sessions::load_session(conn, session_id)?;
            Ok(conn
                .prepare_cached(
                    "SELECT coalesce(max(seq), 0) FROM inter_session_messages \
                     WHERE to_session_id = ?1",
                )?
                .query_row([session_id], |r| r.get(0))?)
        })
    }
}
