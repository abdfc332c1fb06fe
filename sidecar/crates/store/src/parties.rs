//! Launched parties and their members: created with the launch snapshot, their state saved after
//! each engine step (with its timeline events), listed with or without the snapshot. Every state
//! change writes its timeline events in the same transaction.

use rusqlite::{Connection, OptionalExtension, Row, params};

use crate::events::append_event;
use crate::{
    MemberRow, NewEvent, NewNotification, PartyHead, PartyRow, PartyState, PartyStatus, Store,
    StoreError,
};

use crate::columns::{NOW, append_all, json_col, opt_json_col};
use crate::notifications::add_notification;
use crate::tasks::load_task;

pub(crate) const PARTY_COLUMNS: &str = "id, name, project_id, status, status_reason, snapshot, inputs, \
    overrides, paused, repo_root, task_id, created_by_session_id, created_at, completed_at, \
    released";

pub(crate) fn party_from_row(row: &Row<'_>) -> rusqlite::Result<PartyRow> {
    Ok(PartyRow {
        party_id: row.get(0)?,
        name: row.get(1)?,
        project_id: row.get(2)?,
        status: row.get(3)?,
        status_reason: row.get(4)?,
        snapshot: json_col(row, 5)?,
        inputs: opt_json_col(row, 6)?,
        overrides: json_col(row, 7)?,
        paused: json_col(row, 8)?,
        repo_root: row.get(9)?,
        task_id: row.get(10)?,
        created_by_session_id: row.get(11)?,
        created_at: row.get(12)?,
        completed_at: row.get(13)?,
        released: json_col(row, 14)?,
    })
}

pub(crate) const MEMBER_COLUMNS: &str = "party_id, role_name, instance_index, status, crash_count, attempts, \
    session_id, agent_run_id, workdir, branch_name, started_at_ms, finished_at_ms";

pub(crate) fn member_from_row(row: &Row<'_>) -> rusqlite::Result<MemberRow> {
    Ok(MemberRow {
        party_id: row.get(0)?,
        role_name: row.get(1)?,
        instance_index: row.get(2)?,
        status: row.get(3)?,
        crash_count: row.get(4)?,
        attempts: row.get(5)?,
        session_id: row.get(6)?,
        agent_run_id: row.get(7)?,
        workdir: row.get(8)?,
        branch_name: row.get(9)?,
        started_at_ms: row.get(10)?,
        finished_at_ms: row.get(11)?,
    })
}

pub(crate) fn load_party(
    conn: &Connection,
    id: &str,
) -> Result<(PartyRow, Vec<MemberRow>), StoreError> {
    let party = conn
        .prepare_cached(&format!(
            "SELECT {PARTY_COLUMNS} FROM parties WHERE id = ?1"
        ))?
        .query_row([id], party_from_row)
        .optional()?
        .ok_or_else(|| StoreError::not_found("party", id))?;
    let members = conn
        .prepare_cached(&format!(
            "SELECT {MEMBER_COLUMNS} FROM party_members WHERE party_id = ?1 \
             ORDER BY role_name, instance_index"
        ))?
        .query_map([id], member_from_row)?
        .collect::<Result<_, _>>()?;
    Ok((party, members))
}

impl Store {
    /// Creates a party and its members (all pending).
    pub async fn create_party(
        &self,
        party: PartyRow,
        members: Vec<(String, i64)>,
    ) -> Result<(PartyRow, Vec<MemberRow>), StoreError> {
        self.write(move |conn| {
            conn.prepare_cached(&format!(
                "INSERT INTO parties ({PARTY_COLUMNS}) VALUES \
                 (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, {NOW}, NULL, ?13)"
            ))?
            .execute(params![
                party.party_id,
                party.name,
                party.project_id,
                party.status,
                party.status_reason,
                serde_json::to_string(&party.snapshot)?,
                party.inputs.as_ref().map(serde_json::to_string).transpose()?,
                serde_json::to_string(&party.overrides)?,
                serde_json::to_string(&party.paused)?,
                party.repo_root,
                party.task_id,
                party.created_by_session_id,
                serde_json::to_string(&party.released)?,
            ])?;
            let mut insert = conn.prepare_cached(
                "INSERT INTO party_members (party_id, role_name, instance_index) VALUES (?1, ?2, ?3)",
            )?;
            for (role, index) in &members {
                insert.execute(params![party.party_id, role, index])?;
            }
            if let Some(task) = &party.task_id {
                load_task(conn, task)?;
                conn.execute(
                    &format!("UPDATE tasks SET party_id = ?2, status = 'in_progress', updated_at = {NOW} WHERE id = ?1"),
                    params![task, party.party_id],
                )?;
            }
            append_event(
                conn,
                &NewEvent {
                    kind: "party_created".into(),
                    project_id: Some(party.project_id.clone()),
                    session_id: party.created_by_session_id.clone(),
                    party_id: Some(party.party_id.clone()),
                    data: serde_json::json!({ "name": party.name, "members": members.len() }),
                },
            )?;
            load_party(conn, &party.party_id)
        })
        .await
    }

    /// Persists the scheduler's state after a step, with its timeline events and
    /// notifications, in one transaction.
    pub async fn save_party_state(
        &self,
        party_id: String,
        state: PartyState,
        events: Vec<NewEvent>,
        notifications: Vec<NewNotification>,
    ) -> Result<(), StoreError> {
        self.write(move |conn| {
            if let Some(head) = &state.head {
                save_head(conn, &party_id, head)?;
            }
            let mut update = conn.prepare_cached(
                "UPDATE party_members SET status = ?4, crash_count = ?5, attempts = ?6, \
                 started_at_ms = ?7, finished_at_ms = ?8 \
                 WHERE party_id = ?1 AND role_name = ?2 AND instance_index = ?3",
            )?;
            for m in &state.members {
                update.execute(params![
                    party_id,
                    m.role_name,
                    m.instance_index,
                    m.status,
                    m.crash_count,
                    m.attempts,
                    m.started_at_ms,
                    m.finished_at_ms
                ])?;
            }
            append_all(conn, &events)?;
            for n in &notifications {
                add_notification(conn, n)?;
            }
            Ok(())
        })
        .await
    }

    /// Records where a member works (its worktree or clone and branch).
    pub async fn set_member_checkout(
        &self,
        party_id: String,
        role: String,
        index: i64,
        workdir: String,
        branch: Option<String>,
    ) -> Result<(), StoreError> {
        self.write(move |conn| {
            conn.prepare_cached(
                "UPDATE party_members SET workdir = ?4, branch_name = ?5 \
                 WHERE party_id = ?1 AND role_name = ?2 AND instance_index = ?3",
            )?
            .execute(params![party_id, role, index, workdir, branch])?;
            Ok(())
        })
        .await
    }

    pub fn get_party(&self, party_id: &str) -> Result<(PartyRow, Vec<MemberRow>), StoreError> {
        self.read(|conn| load_party(conn, party_id))
    }

    /// The roles of a party that pick among their attempts (best-of-N: a `pick` in the
    /// launch snapshot), read in one pass over the snapshot in SQLite.
    pub fn pick_roles(&self, party_id: &str) -> Result<Vec<String>, StoreError> {
        self.read(|conn| {
            let roles = conn
                .prepare_cached(
                    "SELECT r.key FROM parties AS p, json_each(p.snapshot, '$.party.roles') AS r \
                     WHERE p.id = ?1 AND json_type(r.value, '$.pick') <> 'null' \
                     ORDER BY r.key",
                )?
                .query_map([party_id], |r| r.get(0))?
                .collect::<Result<_, _>>()?;
            Ok(roles)
        })
    }

    /// Whether any member of the party has a checkout of its own (a branch): the radar's
    /// question before it loads the party.
    pub fn party_has_checkouts(&self, party_id: &str) -> Result<bool, StoreError> {
        self.read(|conn| {
            Ok(conn
                .prepare_cached(
                    "SELECT EXISTS (SELECT 1 FROM party_members \
                     WHERE party_id = ?1 AND branch_name IS NOT NULL)",
                )?
                .query_row([party_id], |r| r.get(0))?)
        })
    }

    /// Parties of a project (all projects when `None`), newest first.
    pub fn list_parties(
        &self,
        project_id: Option<&str>,
        status: Option<PartyStatus>,
    ) -> Result<Vec<PartyRow>, StoreError> {
        self.parties_where(PARTY_COLUMNS, project_id, status)
    }

    /// `list_parties` without the launch snapshots (each row's `snapshot` is `null`): a
    /// snapshot holds the whole party definition, so reading and parsing it made every listing
    /// (the radar's looks, the inbox's, `list_parties`) cost as much as the parties are large.
    /// Nor the recovery overrides (`{}`): one party's unreadable overrides fail its own load
    /// (`get_party`), not every listing, and start-up recovers the others.
    pub fn list_parties_brief(
        &self,
        project_id: Option<&str>,
        status: Option<PartyStatus>,
    ) -> Result<Vec<PartyRow>, StoreError> {
        self.parties_where(
            &PARTY_COLUMNS
                .replacen("snapshot", "'null'", 1)
                .replacen("overrides", "'{}'", 1),
            project_id,
            status,
        )
    }

    fn parties_where(
        &self,
        columns: &str,
        project_id: Option<&str>,
        status: Option<PartyStatus>,
    ) -> Result<Vec<PartyRow>, StoreError> {
        let mut filters = crate::filters::Filters::default();
        filters
            .given("project_id = ?1", 1, project_id.as_ref())
            .given("status = ?2", 2, status.as_ref());
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {columns} FROM parties WHERE {} ORDER BY created_at DESC, id",
                filters.sql()
            ))?;
            Ok(filters.collect(&mut stmt, party_from_row)?)
        })
    }
}

/// Writes a party's own fields (the step changed them) and, once it completed, marks its task
/// done. The row's launch snapshot is left as it is.
fn save_head(conn: &Connection, party_id: &str, head: &PartyHead) -> Result<(), StoreError> {
    let over = head.status.is_over();
    // The inbox lists a running party's paused roles (with its status reason) and open
    // decisions.
    let paused = serde_json::to_string(&head.paused)?;
    let before: Option<(String, String, Option<String>)> = conn
        .prepare_cached("SELECT status, paused, status_reason FROM parties WHERE id = ?1")?
        .query_row([party_id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()?;
    if before.is_none_or(|(status, was, reason)| {
        status != head.status.as_str() || was != paused || reason != head.status_reason
    }) {
        crate::changes::mark(crate::Topic::Inbox);
    }
    conn.prepare_cached(&format!(
        "UPDATE parties SET status = ?2, status_reason = ?3, overrides = ?4, paused = ?5, \
         completed_at = CASE WHEN ?6 AND completed_at IS NULL THEN {NOW} ELSE completed_at END, \
         released = ?7 WHERE id = ?1"
    ))?
    .execute(params![
        party_id,
        head.status,
        head.status_reason,
        serde_json::to_string(&head.overrides)?,
        paused,
        over,
        serde_json::to_string(&head.released)?,
    ])?;
    if head.status == PartyStatus::Completed {
        // The party's task is done with it (an escalated one still waits for a person).
        conn.execute(
            &format!(
                "UPDATE tasks SET status = 'done', updated_at = {NOW} \
                 WHERE id = (SELECT task_id FROM parties WHERE id = ?1) \
                   AND status IN ('open', 'in_progress')"
            ),
            [party_id],
        )?;
    }
    Ok(())
}
