//! Tasks: created, claimed, escalated to the person, reassigned. Every state change writes its
//! timeline events in the same transaction.

use rusqlite::{Connection, OptionalExtension, Row, params};

use crate::events::append_event;
use crate::{NewEvent, NewNotification, Store, StoreError, Task, TaskStatus, new_id};

use crate::columns::NOW;
use crate::notifications::add_notification;

pub(crate) const TASK_COLUMNS: &str = "id, project_id, party_id, role_name, title, description, status, \
    escalation_reason, created_at, updated_at";

pub(crate) fn task_from_row(row: &Row<'_>) -> rusqlite::Result<Task> {
    Ok(Task {
        task_id: row.get(0)?,
        project_id: row.get(1)?,
        party_id: row.get(2)?,
        role_name: row.get(3)?,
        title: row.get(4)?,
        description: row.get(5)?,
        status: row.get(6)?,
        escalation_reason: row.get(7)?,
        created_at: row.get(8)?,
        updated_at: row.get(9)?,
    })
}

pub(crate) fn load_task(conn: &Connection, id: &str) -> Result<Task, StoreError> {
    conn.prepare_cached(&format!("SELECT {TASK_COLUMNS} FROM tasks WHERE id = ?1"))?
        .query_row([id], task_from_row)
        .optional()?
        .ok_or_else(|| StoreError::not_found("task", id))
}

impl Store {
    pub async fn create_task(
        &self,
        project_id: String,
        title: String,
        description: Option<String>,
        party_id: Option<String>,
        role_name: Option<String>,
    ) -> Result<Task, StoreError> {
        self.write(move |conn| {
            let id = new_id();
            conn.prepare_cached(
                "INSERT INTO tasks (id, project_id, party_id, role_name, title, description) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )?
            .execute(params![
                id,
                project_id,
                party_id,
                role_name,
                title,
                description
            ])?;
            append_event(
                conn,
                &NewEvent {
                    kind: "task_created".into(),
                    project_id: Some(project_id.clone()),
                    party_id: party_id.clone(),
                    data: serde_json::json!({ "task_id": id, "title": title }),
                    ..NewEvent::default()
                },
            )?;
            load_task(conn, &id)
        })
        .await
    }

    /// Takes the project's oldest open task of no party (`start_agent`'s `task: "next"`): it is
    /// `in_progress` from now on, so two callers never take the same one. `None`: none is open.
    pub async fn claim_next_task(
        &self,
        project_id: String,
        session_id: String,
    ) -> Result<Option<Task>, StoreError> {
        self.write(move |conn| {
            let id: Option<String> = conn
                .prepare_cached(
                    "SELECT id FROM tasks WHERE project_id = ?1 AND party_id IS NULL \
                     AND status = 'open' ORDER BY created_at, id LIMIT 1",
                )?
                .query_row([&project_id], |r| r.get(0))
                .optional()?;
            let Some(id) = id else {
                return Ok(None);
            };
            conn.execute(
                &format!(
                    "UPDATE tasks SET status = 'in_progress', updated_at = {NOW} WHERE id = ?1"
                ),
                [&id],
            )?;
            append_event(
                conn,
                &NewEvent {
                    kind: "task_claimed".into(),
                    project_id: Some(project_id.clone()),
                    session_id: Some(session_id.clone()),
                    data: serde_json::json!({ "task_id": id }),
                    ..NewEvent::default()
                },
            )?;
            load_task(conn, &id).map(Some)
        })
        .await
    }

    pub fn get_task(&self, task_id: &str) -> Result<Task, StoreError> {
        self.read(|conn| load_task(conn, task_id))
    }

    pub fn list_tasks(&self, party_id: Option<&str>) -> Result<Vec<Task>, StoreError> {
        // A party's tasks through the party index, not a walk over every party's.
        let mut filters = crate::filters::Filters::default();
        filters.given("party_id = ?1", 1, party_id.as_ref());
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {TASK_COLUMNS} FROM tasks WHERE {} ORDER BY created_at, id",
                filters.sql()
            ))?;
            Ok(filters.collect(&mut stmt, task_from_row)?)
        })
    }

    /// Tasks waiting for a person (escalated), oldest first.
    pub fn escalated_tasks(&self) -> Result<Vec<Task>, StoreError> {
        self.read(|conn| {
            Ok(conn
                .prepare_cached(&format!(
                    "SELECT {TASK_COLUMNS} FROM tasks WHERE status = 'escalated' \
                     ORDER BY created_at, id"
                ))?
                .query_map([], task_from_row)?
                .collect::<Result<_, _>>()?)
        })
    }

    /// Marks a task escalated and records a notification for the person, atomically.
    pub async fn escalate_task(
        &self,
        task_id: String,
        reason: String,
        by_session_id: Option<String>,
    ) -> Result<Task, StoreError> {
        self.write(move |conn| {
            let task = load_task(conn, &task_id)?;
            if matches!(task.status, TaskStatus::Done | TaskStatus::Cancelled) {
                return Err(StoreError::Conflict(format!(
                    "task {task_id} is {}; it cannot be escalated",
                    task.status
                )));
            }
            conn.execute(
                &format!(
                    "UPDATE tasks SET status = 'escalated', escalation_reason = ?2, updated_at = {NOW} \
                     WHERE id = ?1"
                ),
                params![task_id, reason],
            )?;
            add_notification(
                conn,
                &NewNotification {
                    project_id: Some(task.project_id.clone()),
                    party_id: task.party_id.clone(),
                    kind: "escalation".into(),
                    text: format!("task {:?} needs you: {reason}", task.title),
                    data: serde_json::json!({ "task_id": task_id, "by_session_id": by_session_id }),
                },
            )?;
            append_event(
                conn,
                &NewEvent {
                    kind: "task_escalated".into(),
                    project_id: Some(task.project_id.clone()),
                    session_id: by_session_id.clone(),
                    party_id: task.party_id.clone(),
                    data: serde_json::json!({ "task_id": task_id, "reason": reason }),
                },
            )?;
            load_task(conn, &task_id)
        })
        .await
    }

    /// Moves a task of a party from one role to another.
    pub async fn reassign_task(
        &self,
        task_id: String,
        party_id: String,
        from_role: String,
        to_role: String,
    ) -> Result<Task, StoreError> {
        self.write(move |conn| {
            let task = load_task(conn, &task_id)?;
            if task.party_id.as_deref() != Some(party_id.as_str()) {
                return Err(StoreError::Forbidden(format!(
                    "task {task_id} does not belong to party {party_id}"
                )));
            }
            if task.role_name.as_deref().is_some_and(|r| r != from_role) {
                return Err(StoreError::Conflict(format!(
                    "task {task_id} is assigned to role {}, not {from_role}",
                    task.role_name.as_deref().unwrap_or("-")
                )));
            }
            conn.execute(
                &format!("UPDATE tasks SET role_name = ?2, updated_at = {NOW} WHERE id = ?1"),
                params![task_id, to_role],
            )?;
            append_event(
                conn,
                &NewEvent {
                    kind: "task_reassigned".into(),
                    project_id: Some(task.project_id.clone()),
                    party_id: Some(party_id.clone()),
                    data: serde_json::json!({ "task_id": task_id, "from_role": from_role, "to_role": to_role }),
                    ..NewEvent::default()
                },
            )?;
            load_task(conn, &task_id)
        })
        .await
    }
}
