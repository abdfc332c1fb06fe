//! Questions an agent asks a person (`ask_person`): stored pending, answered once (a choice, or
//! free text), expired with the run that asked. Their waiting and waking are the daemon's.

use rusqlite::{Connection, Row, params};

use crate::events::append_event;
use crate::{NewEvent, NewQuestion, Question, QuestionStatus, Store, StoreError, new_id};

const NOW: &str = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')";

const COLUMNS: &str = "id, project_id, session_id, run_id, party_id, role_name, question, \
    choices, status, answer, answered_by, created_at, answered_at";

fn from_row(r: &Row<'_>) -> rusqlite::Result<Question> {
    let choices: String = r.get(7)?;
    Ok(Question {
        question_id: r.get(0)?,
        project_id: r.get(1)?,
        session_id: r.get(2)?,
        run_id: r.get(3)?,
        party_id: r.get(4)?,
        role_name: r.get(5)?,
        question: r.get(6)?,
        choices: serde_json::from_str(&choices).unwrap_or_default(),
        status: r.get(8)?,
        answer: r.get(9)?,
        answered_by: r.get(10)?,
        created_at: r.get(11)?,
        answered_at: r.get(12)?,
    })
}

fn load(conn: &Connection, id: &str) -> Result<Question, StoreError> {
    conn.prepare_cached(&format!("SELECT {COLUMNS} FROM questions WHERE id = ?1"))?
        .query_row([id], from_row)
        .map_err(|e| match e {
            rusqlite::Error::QueryReturnedNoRows => StoreError::NotFound {
                what: "question",
                id: id.to_string(),
            },
            other => other.into(),
        })
}

fn event(q: &Question, kind: &str, data: serde_json::Value) -> NewEvent {
    NewEvent {
        kind: kind.into(),
        project_id: Some(q.project_id.clone()),
        session_id: Some(q.session_id.clone()),
        party_id: q.party_id.clone(),
        data,
    }
}

/// Expires the pending questions of a run that ended; their ids.
pub(crate) fn expire_for_run(conn: &Connection, run_id: &str) -> Result<Vec<String>, StoreError> {
    let ids: Vec<String> = conn
        .prepare_cached(
            "SELECT id FROM questions WHERE run_id = ?1 AND status = 'pending' ORDER BY created_at, id",
        )?
        .query_map([run_id], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    for id in &ids {
        expire(conn, id)?;
    }
    Ok(ids)
}

/// Expires one question if it is pending (with its event); whether it was.
fn expire(conn: &Connection, id: &str) -> Result<bool, StoreError> {
    let changed = conn
        .prepare_cached(&format!(
            "UPDATE questions SET status = 'expired', answered_at = {NOW} \
             WHERE id = ?1 AND status = 'pending'"
        ))?
        .execute([id])?;
    if changed == 0 {
        return Ok(false);
    }
    let q = load(conn, id)?;
    append_event(
        conn,
        &event(
            &q,
            "question_expired",
            serde_json::json!({ "question_id": id, "run_id": q.run_id }),
        ),
    )?;
    Ok(true)
}

impl Store {
    /// Stores a question; it is expired at once if the run that asks has already ended.
    pub async fn create_question(&self, new: NewQuestion) -> Result<Question, StoreError> {
        let id = new_id();
        self.write(move |conn| {
            let choices = serde_json::to_string(&new.choices)?;
            conn.prepare_cached(
                "INSERT INTO questions (id, project_id, session_id, run_id, party_id, role_name, \
                 question, choices) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )?
            .execute(params![
                id,
                new.project_id,
                new.session_id,
                new.run_id,
                new.party_id,
                new.role_name,
                new.question,
                choices
            ])?;
            let q = load(conn, &id)?;
            append_event(
                conn,
                &event(
                    &q,
                    "question_asked",
                    serde_json::json!({
                        "question_id": id, "question": q.question, "choices": q.choices,
                    }),
                ),
            )?;
            if let Some(run) = &new.run_id {
                let ended: bool = conn
                    .prepare_cached(
                        "SELECT count(*) > 0 FROM agent_runs WHERE id = ?1 \
                         AND status NOT IN ('pending', 'running')",
                    )?
                    .query_row([run], |r| r.get(0))?;
                if ended {
                    expire_for_run(conn, run)?;
                    return load(conn, &id);
                }
            }
            Ok(q)
        })
        .await
    }

    pub fn get_question(&self, id: &str) -> Result<Question, StoreError> {
        self.read(|conn| load(conn, id))
    }

    /// Answers a pending question (once: a second answer is a conflict).
    pub async fn answer_question(
        &self,
        id: String,
        answer: String,
        answered_by: Option<String>,
    ) -> Result<Question, StoreError> {
        self.write(move |conn| {
            let q = load(conn, &id)?;
            if q.status != QuestionStatus::Pending {
                return Err(StoreError::Conflict(format!(
                    "question {id} is {} already{}",
                    q.status,
                    q.answer
                        .as_deref()
                        .map(|a| format!(": {a:?}"))
                        .unwrap_or_default()
                )));
            }
            conn.prepare_cached(&format!(
                "UPDATE questions SET status = 'answered', answer = ?2, answered_by = ?3, \
                 answered_at = {NOW} WHERE id = ?1 AND status = 'pending'"
            ))?
            .execute(params![id, answer, answered_by])?;
            let q = load(conn, &id)?;
            append_event(
                conn,
                &event(
                    &q,
                    "question_answered",
                    serde_json::json!({
                        "question_id": id, "answer": q.answer, "answered_by": q.answered_by,
                    }),
                ),
            )?;
            Ok(q)
        })
        .await
    }

    /// Expires a pending question whose asker no longer waits for it; whether it was pending.
    pub async fn expire_question(&self, id: String) -> Result<bool, StoreError> {
        self.write(move |conn| {
            load(conn, &id)?;
            expire(conn, &id)
        })
        .await
    }

    /// Pending questions (of one project, or of all), oldest first.
    pub fn pending_questions(&self, project_id: Option<&str>) -> Result<Vec<Question>, StoreError> {
        self.read(|conn| {
            let rows = conn
                .prepare_cached(&format!(
                    "SELECT {COLUMNS} FROM questions WHERE status = 'pending' \
                     AND (?1 IS NULL OR project_id = ?1) ORDER BY created_at, id"
                ))?
                .query_map([project_id], from_row)?
                .collect::<Result<_, _>>()?;
            Ok(rows)
        })
    }
}
