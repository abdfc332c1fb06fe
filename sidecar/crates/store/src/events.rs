//! The durable timeline: every write path appends here inside its own transaction.

use rusqlite::{Connection, params};

use crate::{Event, NewEvent, Store, StoreError};

/// Which timeline entries to list. Empty fields do not filter.
#[derive(Debug, Clone, Default)]
pub struct EventFilter {
    pub since: Option<i64>,
    pub session_id: Option<String>,
    pub party_id: Option<String>,
    pub project_id: Option<String>,
    pub kind: Option<String>,
    pub limit: i64,
}

/// Appends one timeline entry and marks the topic its kind changes (`changes::event_topic`).
pub(crate) fn append_event(conn: &Connection, event: &NewEvent) -> Result<i64, StoreError> {
    if let Some(topic) = crate::changes::event_topic(&event.kind) {
        crate::changes::mark(topic);
    }
    let data = if event.data.is_null() {
        "{}".to_string()
    } else {
        serde_json::to_string(&event.data)?
    };
    Ok(conn
        .prepare_cached(
            "INSERT INTO events (kind, project_id, session_id, party_id, data) \
             VALUES (?1, ?2, ?3, ?4, ?5) RETURNING seq",
        )?
        .query_row(
            params![
                event.kind,
                event.project_id,
                event.session_id,
                event.party_id,
                data
            ],
            |r| r.get(0),
        )?)
}

impl Store {
    /// Appends one entry to the timeline.
    pub async fn append_event(&self, event: NewEvent) -> Result<i64, StoreError> {
        self.write(move |conn| append_event(conn, &event)).await
    }

    /// Timeline entries matching `filter`, oldest first.
    /// A party's latest `n` timeline entries, oldest first, as `kind: data` lines.
    pub fn recent_party_events(&self, party_id: &str, n: u32) -> Result<Vec<String>, StoreError> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT kind, data FROM events WHERE party_id = ?1 ORDER BY seq DESC LIMIT ?2",
            )?;
            let mut lines = stmt
                .query_map(rusqlite::params![party_id, n], |r| {
                    Ok(format!(
                        "{}: {}",
                        r.get::<_, String>(0)?,
                        r.get::<_, String>(1)?
                    ))
                })?
                .collect::<Result<Vec<_>, _>>()?;
            lines.reverse();
            Ok(lines)
        })
    }

    /// The newest event's seq (0 when the timeline is empty).
    pub fn latest_event_seq(&self) -> Result<i64, StoreError> {
        self.read(|conn| {
            Ok(conn.query_row("SELECT coalesce(max(seq), 0) FROM events", [], |r| r.get(0))?)
        })
    }

    pub fn list_events(&self, filter: &EventFilter) -> Result<Vec<Event>, StoreError> {
        // Only the filters given: a party's events go through the party index (`party_id,
        // seq`), not a walk along the whole timeline from `since` until `limit` of them turn up.
        let since = filter.since.unwrap_or(0);
        let mut filters = crate::filters::Filters::default();
        filters
            .given("seq > ?1", 1, Some(&since))
            .given("session_id = ?2", 2, filter.session_id.as_ref())
            .given("party_id = ?3", 3, filter.party_id.as_ref())
            .given("kind = ?4", 4, filter.kind.as_ref())
            .given("project_id = ?6", 6, filter.project_id.as_ref());
        let sql = format!(
            "SELECT seq, at, kind, project_id, session_id, party_id, data FROM events \
             WHERE {} ORDER BY seq LIMIT ?5",
            filters.sql()
        );
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(&sql)?;
            stmt.raw_bind_parameter(5, filter.limit)?;
            let columns = filters.collect(&mut stmt, event_columns)?;
            events_of(columns.into_iter().map(Ok))
        })
    }

    /// A party's newest events of these kinds, newest first (the party index, never a scan of
    /// the whole timeline).
    pub fn latest_party_events(
        &self,
        party_id: &str,
        kinds: &[&str],
        limit: i64,
    ) -> Result<Vec<Event>, StoreError> {
        let kinds: Vec<String> = kinds.iter().map(|k| k.to_string()).collect();
        let kinds = serde_json::to_string(&kinds)?;
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT seq, at, kind, project_id, session_id, party_id, data FROM events \
                 WHERE party_id = ?1 AND kind IN (SELECT value FROM json_each(?2)) \
                 ORDER BY seq DESC LIMIT ?3",
            )?;
            let rows = stmt.query_map(params![party_id, kinds, limit], event_columns)?;
            events_of(rows)
        })
    }
}

/// An `events` row's columns, in `SELECT seq, at, kind, project_id, session_id, party_id, data`
/// order (the data still JSON text).
type EventColumns = (
    i64,
    String,
    String,
    Option<String>,
    Option<String>,
    Option<String>,
    String,
);

fn event_columns(r: &rusqlite::Row<'_>) -> rusqlite::Result<EventColumns> {
    Ok((
        r.get(0)?,
        r.get(1)?,
        r.get(2)?,
        r.get(3)?,
        r.get(4)?,
        r.get(5)?,
        r.get(6)?,
    ))
}

/// The events of queried rows, their data parsed.
fn events_of(
    rows: impl Iterator<Item = rusqlite::Result<EventColumns>>,
) -> Result<Vec<Event>, StoreError> {
    let mut out = Vec::new();
    for row in rows {
        let (seq, at, kind, project_id, session_id, party_id, data) = row?;
        out.push(Event {
            seq,
            at,
            kind,
            project_id,
            session_id,
            party_id,
            data: serde_json::from_str(&data)?,
        });
    }
    Ok(out)
}
