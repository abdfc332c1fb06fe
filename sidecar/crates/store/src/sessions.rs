//! Projects and sessions: register (resolving the project row), end, heartbeat, look up, list.

use rusqlite::{Connection, OptionalExtension, Row, params};

use crate::events::append_event;
use crate::{
    NewEvent, NewSession, Project, RegisterOutcome, Session, SessionFilter, SessionStatus, Store,
    StoreError, new_id,
};

const SESSION_COLUMNS: &str = "id, project_id, cli, cwd, external_id, parent_session_id, \
     agent_depth, spawned_by_agent_id, party_id, status, created_at, last_seen_at, ended_at";

pub(crate) fn session_from_row(row: &Row<'_>) -> rusqlite::Result<Session> {
    Ok(Session {
        session_id: row.get(0)?,
        project_id: row.get(1)?,
        cli: row.get(2)?,
        cwd: row.get(3)?,
        external_id: row.get(4)?,
        parent_session_id: row.get(5)?,
        agent_depth: row.get(6)?,
        spawned_by_agent_id: row.get(7)?,
        party_id: row.get(8)?,
        status: row.get(9)?,
        created_at: row.get(10)?,
        last_seen_at: row.get(11)?,
        ended_at: row.get(12)?,
    })
}

fn project_from_row(row: &Row<'_>) -> rusqlite::Result<Project> {
    Ok(Project {
        project_id: row.get(0)?,
        root_path: row.get(1)?,
        name: row.get(2)?,
        created_at: row.get(3)?,
    })
}

pub(crate) fn find_session(conn: &Connection, id: &str) -> Result<Option<Session>, StoreError> {
    let sql = format!("SELECT {SESSION_COLUMNS} FROM sessions WHERE id = ?1");
    Ok(conn
        .prepare_cached(&sql)?
        .query_row([id], session_from_row)
        .optional()?)
}

pub(crate) fn load_session(conn: &Connection, id: &str) -> Result<Session, StoreError> {
    find_session(conn, id)?.ok_or_else(|| StoreError::not_found("session", id))
}

/// What a send needs of a session: who it is, where it belongs and its parent.
#[derive(Debug, Clone)]
pub(crate) struct SessionBrief {
    pub session_id: String,
    pub project_id: String,
    pub parent_session_id: Option<String>,
    pub party_id: Option<String>,
}

impl From<&Session> for SessionBrief {
    fn from(s: &Session) -> SessionBrief {
        SessionBrief {
            session_id: s.session_id.clone(),
            project_id: s.project_id.clone(),
            parent_session_id: s.parent_session_id.clone(),
            party_id: s.party_id.clone(),
        }
    }
}

/// A session that must still be active, read narrowly (a send reads two per message).
pub(crate) fn load_active_brief(conn: &Connection, id: &str) -> Result<SessionBrief, StoreError> {
    let found: Option<(SessionBrief, SessionStatus)> = conn
        .prepare_cached(
            "SELECT project_id, parent_session_id, party_id, status FROM sessions WHERE id = ?1",
        )?
        .query_row([id], |r| {
            Ok((
                SessionBrief {
                    session_id: id.to_string(),
                    project_id: r.get(0)?,
                    parent_session_id: r.get(1)?,
                    party_id: r.get(2)?,
                },
                r.get(3)?,
            ))
        })
        .optional()?;
    match found {
        None => Err(StoreError::not_found("session", id)),
        Some((_, SessionStatus::Ended)) => {
            Err(StoreError::Conflict(format!("session {id} has ended")))
        }
        Some((brief, _)) => Ok(brief),
    }
}

/// Loads a session that must still be active.
pub(crate) fn load_active_session(conn: &Connection, id: &str) -> Result<Session, StoreError> {
    let session = load_session(conn, id)?;
    if session.status == SessionStatus::Ended {
        return Err(StoreError::Conflict(format!("session {id} has ended")));
    }
    Ok(session)
}

/// The listing's filters: only those given, so that SQLite answers through their indexes
/// (project, party, parent); a party's broadcast and a member's siblings walked every session
/// the store holds when they were written as `(?1 IS NULL OR …)`.
pub(crate) fn listing_filters(filter: &SessionFilter) -> crate::filters::Filters<'_> {
    let mut filters = crate::filters::Filters::default();
    filters
        .given("project_id = ?1", 1, filter.project_id.as_ref())
        .given("status = ?2", 2, filter.status.as_ref())
        .given("party_id = ?3", 3, filter.party_id.as_ref())
        .given(
            "parent_session_id = ?4",
            4,
            filter.parent_session_id.as_ref(),
        );
    filters
}

/// The listing's SQL (`listing_filters` binds its values).
pub(crate) fn listing_sql(filters: &crate::filters::Filters<'_>) -> String {
    format!(
        "SELECT {SESSION_COLUMNS} FROM sessions WHERE {} ORDER BY created_at, id",
        filters.sql()
    )
}

pub(crate) fn list_sessions_in(
    conn: &Connection,
    filter: &SessionFilter,
) -> Result<Vec<Session>, StoreError> {
    let filters = listing_filters(filter);
    let mut stmt = conn.prepare_cached(&listing_sql(&filters))?;
    Ok(filters.collect(&mut stmt, session_from_row)?)
}

fn upsert_project(conn: &Connection, root: &str, name: &str) -> Result<Project, StoreError> {
    conn.prepare_cached(
        "INSERT INTO projects (id, root_path, name) VALUES (?1, ?2, ?3) \
         ON CONFLICT(root_path) DO NOTHING",
    )?
    .execute(params![new_id(), root, name])?;
    Ok(conn
        .prepare_cached(
            "SELECT id, root_path, name, created_at FROM projects WHERE root_path = ?1",
        )?
        .query_row([root], project_from_row)?)
}

pub(crate) fn register(conn: &Connection, new: &NewSession) -> Result<RegisterOutcome, StoreError> {
    let project = upsert_project(conn, &new.project_root, &new.project_name)?;
    let depth = match &new.parent_session_id {
        Some(parent_id) => {
            let parent = load_session(conn, parent_id)?;
            if parent.project_id != project.project_id {
                return Err(StoreError::Forbidden(format!(
                    "parent session {parent_id} belongs to project {}, not to {} ({})",
                    parent.project_id, project.project_id, project.root_path
                )));
            }
            parent.agent_depth + 1
        }
        None => 0,
    };

    if let Some(external_id) = &new.external_id {
        let existing: Option<String> = conn
            .prepare_cached(
                "SELECT id FROM sessions WHERE project_id = ?1 AND cli = ?2 AND external_id = ?3",
            )?
            .query_row(params![project.project_id, new.cli, external_id], |r| {
                r.get(0)
            })
            .optional()?;
        if let Some(id) = existing {
            conn.prepare_cached(
                "UPDATE sessions SET status = 'active', ended_at = NULL, cwd = ?2, \
                 last_seen_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') WHERE id = ?1",
            )?
            .execute(params![id, new.cwd])?;
            let session = load_session(conn, &id)?;
            append_event(
                conn,
                &NewEvent {
                    kind: "session_resumed".into(),
                    project_id: Some(session.project_id.clone()),
                    session_id: Some(id),
                    party_id: session.party_id.clone(),
                    data: serde_json::json!({ "cli": session.cli, "external_id": external_id }),
                },
            )?;
            return Ok(RegisterOutcome {
                session,
                project,
                created: false,
            });
        }
    }

    let id = new_id();
    conn.prepare_cached(
        "INSERT INTO sessions (id, project_id, cli, cwd, external_id, parent_session_id, \
         agent_depth, spawned_by_agent_id, party_id) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
    )?
    .execute(params![
        id,
        project.project_id,
        new.cli,
        new.cwd,
        new.external_id,
        new.parent_session_id,
        depth,
        new.spawned_by_agent_id,
        new.party_id
    ])?;
    let session = load_session(conn, &id)?;
    append_event(
        conn,
        &NewEvent {
            kind: "session_registered".into(),
            project_id: Some(session.project_id.clone()),
            session_id: Some(id),
            party_id: session.party_id.clone(),
            data: serde_json::json!({
                "cli": session.cli,
                "cwd": session.cwd,
                "parent_session_id": session.parent_session_id,
                "agent_depth": session.agent_depth,
            }),
        },
    )?;
    Ok(RegisterOutcome {
        session,
        project,
        created: true,
    })
}

impl Store {
    /// Registers a session (or resumes the one with the same cli and external id).
    pub async fn register_session(&self, new: NewSession) -> Result<RegisterOutcome, StoreError> {
        self.write(move |conn| register(conn, &new)).await
    }

    /// Marks a session ended. Ending an ended session is a no-op that returns it.
    pub async fn end_session(&self, id: String) -> Result<Session, StoreError> {
        self.write(move |conn| {
            let session = load_session(conn, &id)?;
            if session.status == SessionStatus::Ended {
                return Ok(session);
            }
            conn.prepare_cached(
                "UPDATE sessions SET status = 'ended', \
                 ended_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') WHERE id = ?1",
            )?
            .execute([&id])?;
            append_event(
                conn,
                &NewEvent {
                    kind: "session_ended".into(),
                    project_id: Some(session.project_id.clone()),
                    session_id: Some(id.clone()),
                    party_id: session.party_id.clone(),
                    data: serde_json::json!({}),
                },
            )?;
            load_session(conn, &id)
        })
        .await
    }

    /// Records that an active session is alive.
    pub async fn heartbeat(&self, id: String) -> Result<Session, StoreError> {
        self.write(move |conn| {
            load_active_session(conn, &id)?;
            conn.prepare_cached(
                "UPDATE sessions SET last_seen_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') \
                 WHERE id = ?1",
            )?
            .execute([&id])?;
            load_session(conn, &id)
        })
        .await
    }

    pub fn get_session(&self, id: &str) -> Result<Session, StoreError> {
        self.read(|conn| load_session(conn, id))
    }

    pub fn list_sessions(&self, filter: &SessionFilter) -> Result<Vec<Session>, StoreError> {
        self.read(|conn| list_sessions_in(conn, filter))
    }

    /// Active sessions sharing `id`'s parent, `id` excluded. A session without a parent has no
    /// siblings.
    pub fn list_siblings(&self, id: &str) -> Result<Vec<Session>, StoreError> {
        self.read(|conn| {
            let session = load_session(conn, id)?;
            let Some(parent) = session.parent_session_id else {
                return Ok(Vec::new());
            };
            let filter = SessionFilter {
                parent_session_id: Some(parent),
                status: Some(SessionStatus::Active),
                ..SessionFilter::default()
            };
            let mut all = list_sessions_in(conn, &filter)?;
            all.retain(|s| s.session_id != id);
            Ok(all)
        })
    }

    pub fn get_project(&self, id: &str) -> Result<Project, StoreError> {
        self.read(|conn| {
            conn.prepare_cached(
                "SELECT id, root_path, name, created_at FROM projects WHERE id = ?1",
            )?
            .query_row([id], project_from_row)
            .optional()?
            .ok_or_else(|| StoreError::not_found("project", id))
        })
    }

    /// The project rooted at `root`, if one has been seen.
    pub fn find_project_by_root(&self, root: &str) -> Result<Option<Project>, StoreError> {
        self.read(|conn| {
            Ok(conn
                .prepare_cached(
                    "SELECT id, root_path, name, created_at FROM projects WHERE root_path = ?1",
                )?
                .query_row([root], project_from_row)
                .optional()?)
        })
    }

    /// Row counts for the status report: (projects, sessions, active sessions, messages, events).
    pub fn counts(&self) -> Result<[i64; 5], StoreError> {
        self.read(|conn| {
            Ok(conn.query_row(
                "SELECT (SELECT count(*) FROM projects), (SELECT count(*) FROM sessions), \
                 (SELECT count(*) FROM sessions WHERE status = 'active'), \
                 (SELECT count(*) FROM inter_session_messages), (SELECT count(*) FROM events)",
                [],
                |r| Ok([r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?]),
            )?)
        })
    }
}
