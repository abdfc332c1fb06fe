//! Notifications for the person.

use rusqlite::{Connection, params};

use crate::{NewNotification, Notification, Store, StoreError};

use crate::columns::json_col;

pub(crate) fn add_notification(conn: &Connection, n: &NewNotification) -> Result<i64, StoreError> {
    crate::changes::mark(crate::Topic::Notifications);
    Ok(conn
        .prepare_cached(
            "INSERT INTO notifications (project_id, party_id, kind, text, data) \
             VALUES (?1, ?2, ?3, ?4, ?5) RETURNING seq",
        )?
        .query_row(
            params![
                n.project_id,
                n.party_id,
                n.kind,
                n.text,
                serde_json::to_string(&n.data)?
            ],
            |r| r.get(0),
        )?)
}

impl Store {
    pub async fn add_notification(&self, n: NewNotification) -> Result<i64, StoreError> {
        self.write(move |conn| add_notification(conn, &n)).await
    }

    /// The newest notification's seq (0 when there is none).
    pub fn latest_notification_seq(&self) -> Result<i64, StoreError> {
        self.read(|conn| {
            Ok(
                conn.query_row("SELECT coalesce(max(seq), 0) FROM notifications", [], |r| {
                    r.get(0)
                })?,
            )
        })
    }

    /// Notifications after `since`, oldest first.
    pub fn list_notifications(
        &self,
        since: i64,
        party_id: Option<&str>,
        limit: i64,
    ) -> Result<Vec<Notification>, StoreError> {
        self.read(|conn| {
            let rows = conn
                .prepare_cached(
                    "SELECT seq, project_id, party_id, kind, text, data, created_at, read_at \
                     FROM notifications WHERE seq > ?1 AND (?2 IS NULL OR party_id = ?2) \
                     ORDER BY seq LIMIT ?3",
                )?
                .query_map(params![since, party_id, limit], |r| {
                    Ok(Notification {
                        seq: r.get(0)?,
                        project_id: r.get(1)?,
                        party_id: r.get(2)?,
                        kind: r.get(3)?,
                        text: r.get(4)?,
                        data: json_col(r, 5)?,
                        created_at: r.get(6)?,
                        read_at: r.get(7)?,
                    })
                })?
                .collect::<Result<_, _>>()?;
            Ok(rows)
        })
    }
}
