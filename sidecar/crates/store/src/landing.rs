//! Best of N's records (landing the work): a role's picking claimed once (so one judge starts),
//! the judge's run, and the final pick, with its timeline event in the same transaction; and the
//! inbox items a person dismissed (the inbox itself is derived from live state).

use rusqlite::{Connection, OptionalExtension, Row, params};

use crate::events::append_event;
use crate::{MemberPick, NewEvent, Store, StoreError};

const NOW: &str = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')";
const COLUMNS: &str = "party_id, role_name, judge_run_id, instance_index, picked_by, reason, \
                       created_at, picked_at";

fn from_row(r: &Row<'_>) -> rusqlite::Result<MemberPick> {
    Ok(MemberPick {
        party_id: r.get(0)?,
        role_name: r.get(1)?,
        judge_run_id: r.get(2)?,
        instance_index: r.get(3)?,
        picked_by: r.get(4)?,
        reason: r.get(5)?,
        created_at: r.get(6)?,
        picked_at: r.get(7)?,
    })
}

fn load(conn: &Connection, party_id: &str, role: &str) -> Result<Option<MemberPick>, StoreError> {
    Ok(conn
        .prepare_cached(&format!(
            "SELECT {COLUMNS} FROM member_picks WHERE party_id = ?1 AND role_name = ?2"
        ))?
        .query_row(params![party_id, role], from_row)
        .optional()?)
}

impl Store {
    /// Claims a role's picking: true for the one caller that claimed it (it starts the judge or
    /// asks the person), false when it was claimed before.
    pub async fn claim_pick(&self, party_id: String, role: String) -> Result<bool, StoreError> {
        self.write(move |conn| {
            let n = conn
                .prepare_cached(&format!(
                    "INSERT OR IGNORE INTO member_picks (party_id, role_name, created_at) \
                     VALUES (?1, ?2, {NOW})"
                ))?
                .execute(params![party_id, role])?;
            if n == 1 {
                // A pick for the person (until a judge takes it).
                crate::changes::mark(crate::Topic::Inbox);
            }
            Ok(n == 1)
        })
        .await
    }

    /// Records the judge's run for a claimed picking.
    pub async fn set_judge(
        &self,
        party_id: String,
        role: String,
        run_id: String,
    ) -> Result<(), StoreError> {
        self.write(move |conn| {
            conn.prepare_cached(
                "UPDATE member_picks SET judge_run_id = ?3 WHERE party_id = ?1 AND role_name = ?2",
            )?
            .execute(params![party_id, role, run_id])?;
            // The pick is the judge's now: out of the person's inbox.
            crate::changes::mark(crate::Topic::Inbox);
            Ok(())
        })
        .await
    }

    /// Picks a role's attempt; refused once one was picked. `member_picked` goes on the timeline.
    pub async fn pick_member(
        &self,
        party_id: String,
        role: String,
        index: i64,
        picked_by: String,
        reason: Option<String>,
    ) -> Result<MemberPick, StoreError> {
        self.write(move |conn| {
            if let Some(p) = load(conn, &party_id, &role)?
                && let Some(i) = p.instance_index
            {
                return Err(StoreError::Conflict(format!(
                    "role {role} already has its pick: {role}#{i} (by {})",
                    p.picked_by.unwrap_or_default()
                )));
            }
            conn.prepare_cached(&format!(
                "INSERT INTO member_picks (party_id, role_name, instance_index, picked_by, reason, \
                 created_at, picked_at) VALUES (?1, ?2, ?3, ?4, ?5, {NOW}, {NOW}) \
                 ON CONFLICT (party_id, role_name) DO UPDATE SET instance_index = ?3, \
                 picked_by = ?4, reason = ?5, picked_at = {NOW}"
            ))?
            .execute(params![party_id, role, index, picked_by, reason])?;
            append_event(
                conn,
                &NewEvent {
                    kind: "member_picked".into(),
                    party_id: Some(party_id.clone()),
                    data: serde_json::json!({ "role": role, "index": index,
                                              "picked_by": picked_by, "reason": reason }),
                    ..NewEvent::default()
                },
            )?;
            load(conn, &party_id, &role)?
                .ok_or_else(|| StoreError::Conflict(format!("the pick of role {role} vanished")))
        })
        .await
    }

    /// A party's picks (and pickings under way).
    pub fn member_picks(&self, party_id: &str) -> Result<Vec<MemberPick>, StoreError> {
        self.read(|conn| {
            Ok(conn
                .prepare_cached(&format!(
                    "SELECT {COLUMNS} FROM member_picks WHERE party_id = ?1 ORDER BY role_name"
                ))?
                .query_map([party_id], from_row)?
                .collect::<Result<_, _>>()?)
        })
    }

    /// The picking a judge's run is doing, if it is a judge's.
    pub fn picking_of_judge(&self, run_id: &str) -> Result<Option<MemberPick>, StoreError> {
        self.read(|conn| {
            Ok(conn
                .prepare_cached(&format!(
                    "SELECT {COLUMNS} FROM member_picks WHERE judge_run_id = ?1"
                ))?
                .query_row([run_id], from_row)
                .optional()?)
        })
    }
}

impl Store {
    /// Best-of-N pickings still waiting for their pick, in every party.
    pub fn pending_picks(&self) -> Result<Vec<MemberPick>, StoreError> {
        self.read(|conn| {
            Ok(conn
                .prepare_cached(&format!(
                    "SELECT {COLUMNS} FROM member_picks WHERE instance_index IS NULL \
                     ORDER BY created_at"
                ))?
                .query_map([], from_row)?
                .collect::<Result<_, _>>()?)
        })
    }

    /// Marks an inbox item dismissed (`inbox_dismissed` on the timeline); false if it was already.
    pub async fn dismiss_inbox_item(&self, item_id: String) -> Result<bool, StoreError> {
        self.write(move |conn| {
            let n = conn
                .prepare_cached(&format!(
                    "INSERT OR IGNORE INTO inbox_dismissed (item_id, dismissed_at) VALUES (?1, {NOW})"
                ))?
                .execute([&item_id])?;
            if n == 1 {
                append_event(
                    conn,
                    &NewEvent {
                        kind: "inbox_dismissed".into(),
                        data: serde_json::json!({ "item_id": item_id }),
                        ..NewEvent::default()
                    },
                )?;
            }
            Ok(n == 1)
        })
        .await
    }

    /// The inbox items a person dismissed.
    pub fn dismissed_inbox_items(&self) -> Result<std::collections::HashSet<String>, StoreError> {
        self.read(|conn| {
            Ok(conn
                .prepare_cached("SELECT item_id FROM inbox_dismissed")?
                .query_map([], |r| r.get(0))?
                .collect::<Result<_, _>>()?)
        })
    }
}
