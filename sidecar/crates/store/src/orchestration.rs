//! Agents and parties: agent and party definitions (JSON documents validated by the daemon),
//! agent runs, launched parties and their members, tasks, and notifications for the person.
//! Every state change writes its timeline events in the same transaction.

use rusqlite::{Connection, OptionalExtension, Row, params};
use serde_json::Value;

use crate::events::append_event;
use crate::sessions::{load_session, register};
use crate::{
    AgentRun, DefinitionRow, MemberRow, NewEvent, NewNotification, NewRun, NewSession,
    Notification, PartyRow, PartyState, PartyStatus, RunEnd, RunStatus, Session, Store, StoreError,
    Task, TaskStatus, Usage, new_id,
};

const NOW: &str = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')";

/// Which definitions table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DefinitionKind {
    Agent,
    Party,
}

impl DefinitionKind {
    fn table(self) -> &'static str {
        match self {
            DefinitionKind::Agent => "agent_definitions",
            DefinitionKind::Party => "party_definitions",
        }
    }
    fn what(self) -> &'static str {
        match self {
            DefinitionKind::Agent => "agent definition",
            DefinitionKind::Party => "party definition",
        }
    }
}

/// How to write a definition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Put {
    /// Refuse if the name exists.
    Create,
    /// Refuse if the name does not exist.
    Update,
    /// Insert a built-in only if absent (never overwrites the user's).
    SeedBuiltin,
}

fn parse_run_status(s: &str) -> Result<RunStatus, StoreError> {
    serde_json::from_value(Value::String(s.to_string())).map_err(StoreError::from)
}

/// A JSON text column, parsed (a column that does not parse is a conversion failure).
pub(crate) fn json_col<T: serde::de::DeserializeOwned>(
    row: &Row<'_>,
    i: usize,
) -> rusqlite::Result<T> {
    let text: String = row.get(i)?;
    serde_json::from_str(&text).map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(i, rusqlite::types::Type::Text, Box::new(e))
    })
}

fn opt_json_col(row: &Row<'_>, i: usize) -> rusqlite::Result<Option<Value>> {
    let text: Option<String> = row.get(i)?;
    text.map(|t| {
        serde_json::from_str(&t).map_err(|e| {
            rusqlite::Error::FromSqlConversionFailure(i, rusqlite::types::Type::Text, Box::new(e))
        })
    })
    .transpose()
}

fn definition_from_row(row: &Row<'_>) -> rusqlite::Result<DefinitionRow> {
    Ok(DefinitionRow {
        name: row.get(0)?,
        definition: json_col(row, 1)?,
        version: row.get(2)?,
        builtin: row.get(3)?,
        created_at: row.get(4)?,
        updated_at: row.get(5)?,
    })
}

pub(crate) const RUN_COLUMNS: &str = "id, agent_name, definition, project_id, parent_session_id, session_id, \
    party_id, role_name, instance_index, attempt, prompt, task_id, status, result, error, pid, \
    pid_start, workdir, timeout_ms, created_at, started_at, completed_at, pgid, run_trigger, \
    flow_root, flow_step";

pub(crate) fn run_from_row(row: &Row<'_>) -> rusqlite::Result<AgentRun> {
    let status: String = row.get(12)?;
    Ok(AgentRun {
        run_id: row.get(0)?,
        agent_name: row.get(1)?,
        definition: json_col(row, 2)?,
        project_id: row.get(3)?,
        parent_session_id: row.get(4)?,
        session_id: row.get(5)?,
        party_id: row.get(6)?,
        role_name: row.get(7)?,
        instance_index: row.get(8)?,
        attempt: row.get(9)?,
        prompt: row.get(10)?,
        task_id: row.get(11)?,
        status: parse_run_status(&status).map_err(|e| {
            rusqlite::Error::FromSqlConversionFailure(12, rusqlite::types::Type::Text, Box::new(e))
        })?,
        result: opt_json_col(row, 13)?,
        error: row.get(14)?,
        pid: row.get(15)?,
        pid_start: row.get(16)?,
        workdir: row.get(17)?,
        timeout_ms: row.get(18)?,
        created_at: row.get(19)?,
        started_at: row.get(20)?,
        completed_at: row.get(21)?,
        pgid: row.get(22)?,
        trigger: row.get(23)?,
        flow_root: row.get(24)?,
        flow_step: row.get(25)?,
    })
}

const PARTY_COLUMNS: &str = "id, name, project_id, status, status_reason, snapshot, inputs, \
    overrides, paused, repo_root, task_id, created_by_session_id, created_at, completed_at, \
    released";

fn party_from_row(row: &Row<'_>) -> rusqlite::Result<PartyRow> {
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

const MEMBER_COLUMNS: &str = "party_id, role_name, instance_index, status, crash_count, attempts, \
    session_id, agent_run_id, workdir, branch_name, started_at_ms, finished_at_ms";

fn member_from_row(row: &Row<'_>) -> rusqlite::Result<MemberRow> {
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

const TASK_COLUMNS: &str = "id, project_id, party_id, role_name, title, description, status, \
    escalation_reason, created_at, updated_at";

fn task_from_row(row: &Row<'_>) -> rusqlite::Result<Task> {
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

fn load_run(conn: &Connection, id: &str) -> Result<AgentRun, StoreError> {
    conn.prepare_cached(&format!(
        "SELECT {RUN_COLUMNS} FROM agent_runs WHERE id = ?1"
    ))?
    .query_row([id], run_from_row)
    .optional()?
    .ok_or_else(|| StoreError::not_found("agent run", id))
}

fn load_party(conn: &Connection, id: &str) -> Result<(PartyRow, Vec<MemberRow>), StoreError> {
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

fn load_task(conn: &Connection, id: &str) -> Result<Task, StoreError> {
    conn.prepare_cached(&format!("SELECT {TASK_COLUMNS} FROM tasks WHERE id = ?1"))?
        .query_row([id], task_from_row)
        .optional()?
        .ok_or_else(|| StoreError::not_found("task", id))
}

pub(crate) fn add_notification(conn: &Connection, n: &NewNotification) -> Result<i64, StoreError> {
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

fn append_all(conn: &Connection, events: &[NewEvent]) -> Result<(), StoreError> {
    for e in events {
        append_event(conn, e)?;
    }
    Ok(())
}

impl Store {
    /// Creates or updates a definition.
    pub async fn put_definition(
        &self,
        kind: DefinitionKind,
        name: String,
        definition: Value,
        put: Put,
    ) -> Result<DefinitionRow, StoreError> {
        self.write(move |conn| {
            let table = kind.table();
            let json = serde_json::to_string(&definition)?;
            let exists: bool = conn
                .prepare_cached(&format!("SELECT count(*) FROM {table} WHERE name = ?1"))?
                .query_row([&name], |r| r.get::<_, i64>(0))?
                > 0;
            match (put, exists) {
                (Put::Create, true) => {
                    return Err(StoreError::Conflict(format!(
                        "{} {name} already exists (use update)",
                        kind.what()
                    )));
                }
                (Put::Update, false) => return Err(StoreError::not_found(kind.what(), &name)),
                (Put::SeedBuiltin, true) => {}
                (Put::Create | Put::SeedBuiltin, false) => {
                    let builtin = kind == DefinitionKind::Party && put == Put::SeedBuiltin;
                    let sql = if kind == DefinitionKind::Party {
                        format!("INSERT INTO {table} (name, definition, builtin) VALUES (?1, ?2, ?3)")
                    } else {
                        format!("INSERT INTO {table} (name, definition) VALUES (?1, ?2)")
                    };
                    if kind == DefinitionKind::Party {
                        conn.execute(&sql, params![name, json, builtin])?;
                    } else {
                        conn.execute(&sql, params![name, json])?;
                    }
                    append_event(
                        conn,
                        &NewEvent {
                            kind: format!("{}_created", table.trim_end_matches('s')),
                            data: serde_json::json!({ "name": name }),
                            ..NewEvent::default()
                        },
                    )?;
                }
                (Put::Update, true) => {
                    let bump = if kind == DefinitionKind::Party {
                        ", version = version + 1"
                    } else {
                        ""
                    };
                    conn.execute(
                        &format!(
                            "UPDATE {table} SET definition = ?2, updated_at = {NOW}{bump} WHERE name = ?1"
                        ),
                        params![name, json],
                    )?;
                    append_event(
                        conn,
                        &NewEvent {
                            kind: format!("{}_updated", table.trim_end_matches('s')),
                            data: serde_json::json!({ "name": name }),
                            ..NewEvent::default()
                        },
                    )?;
                }
            }
            get_definition_in(conn, kind, &name)
        })
        .await
    }

    pub fn get_definition(
        &self,
        kind: DefinitionKind,
        name: &str,
    ) -> Result<DefinitionRow, StoreError> {
        self.read(|conn| get_definition_in(conn, kind, name))
    }

    pub fn list_definitions(&self, kind: DefinitionKind) -> Result<Vec<DefinitionRow>, StoreError> {
        self.read(|conn| {
            let sql = definition_select(kind, "ORDER BY name");
            let rows = conn
                .prepare_cached(&sql)?
                .query_map([], definition_from_row)?
                .collect::<Result<_, _>>()?;
            Ok(rows)
        })
    }

    /// Deletes a definition; returns it.
    pub async fn delete_definition(
        &self,
        kind: DefinitionKind,
        name: String,
    ) -> Result<DefinitionRow, StoreError> {
        self.write(move |conn| {
            let row = get_definition_in(conn, kind, &name)?;
            conn.execute(
                &format!("DELETE FROM {} WHERE name = ?1", kind.table()),
                [&name],
            )?;
            append_event(
                conn,
                &NewEvent {
                    kind: format!("{}_deleted", kind.table().trim_end_matches('s')),
                    data: serde_json::json!({ "name": name }),
                    ..NewEvent::default()
                },
            )?;
            Ok(row)
        })
        .await
    }

    /// Creates a run and its child session (depth = parent's + 1).
    pub async fn create_run(&self, new: NewRun) -> Result<(AgentRun, Session), StoreError> {
        self.write(move |conn| {
            let session = match &new.attach_session {
                Some(existing) => {
                    conn.prepare_cached("UPDATE sessions SET party_id = ?2 WHERE id = ?1")?
                        .execute(params![existing, new.party.as_ref().map(|(p, _, _)| p)])?;
                    load_session(conn, existing)?
                }
                None => register(conn, &new.session)?.session,
            };
            let id = new_id();
            let (party_id, role, index) = match &new.party {
                Some((p, r, i)) => (Some(p.as_str()), Some(r.as_str()), Some(*i)),
                None => (None, None, None),
            };
            conn.prepare_cached(
                "INSERT INTO agent_runs (id, agent_name, definition, project_id, parent_session_id, \
                 session_id, party_id, role_name, instance_index, attempt, prompt, task_id, \
                 timeout_ms, workdir, run_trigger, flow_root, flow_step) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)",
            )?
            .execute(params![
                id,
                new.agent_name,
                serde_json::to_string(&new.definition)?,
                session.project_id,
                session.parent_session_id,
                session.session_id,
                party_id,
                role,
                index,
                new.attempt,
                new.prompt,
                new.task_id,
                new.timeout_ms,
                new.workdir,
                new.trigger,
                new.flow.as_ref().map(|(root, _)| root.as_str()),
                new.flow.as_ref().map(|(_, step)| *step),
            ])?;
            append_event(
                conn,
                &NewEvent {
                    kind: "agent_run_created".into(),
                    project_id: Some(session.project_id.clone()),
                    session_id: Some(session.session_id.clone()),
                    party_id: party_id.map(str::to_string),
                    data: serde_json::json!({
                        "run_id": id, "agent": new.agent_name, "role": role,
                        "instance_index": index, "attempt": new.attempt,
                        "parent_session_id": session.parent_session_id,
                        "trigger": new.trigger,
                        "flow_root": new.flow.as_ref().map(|(root, _)| root),
                    }),
                },
            )?;
            if let Some((p, r, i)) = &new.party {
                conn.prepare_cached(
                    "UPDATE party_members SET session_id = ?4, agent_run_id = ?5, workdir = ?6 \
                     WHERE party_id = ?1 AND role_name = ?2 AND instance_index = ?3",
                )?
                .execute(params![p, r, i, session.session_id, id, new.workdir])?;
            }
            Ok((load_run(conn, &id)?, session))
        })
        .await
    }

    /// Records the run's process (and its process group: `None` for a run inside the daemon).
    pub async fn run_started(
        &self,
        run_id: String,
        pid: i64,
        pid_start: Option<i64>,
        pgid: Option<i64>,
    ) -> Result<AgentRun, StoreError> {
        self.write(move |conn| {
            conn.prepare_cached(&format!(
                "UPDATE agent_runs SET status = 'running', pid = ?2, pid_start = ?3, pgid = ?4, \
                 started_at = {NOW} WHERE id = ?1 AND status = 'pending'"
            ))?
            .execute(params![run_id, pid, pid_start, pgid])?;
            let run = load_run(conn, &run_id)?;
            append_event(
                conn,
                &NewEvent {
                    kind: "agent_run_started".into(),
                    project_id: Some(run.project_id.clone()),
                    session_id: Some(run.session_id.clone()),
                    party_id: run.party_id.clone(),
                    data: serde_json::json!({ "run_id": run_id, "pid": pid, "pgid": pgid }),
                },
            )?;
            Ok(run)
        })
        .await
    }

    /// Ends a run that has not ended yet; ends its session too. Returns the run and whether
    /// this call ended it (false: it had already ended, and nothing changed).
    ///
    /// Its requests still waiting for a person become `expired` in the same transaction (a
    /// ghost's request must not be answered in place of the live attempt's).
    pub async fn finish_run(
        &self,
        run_id: String,
        status: RunStatus,
        result: Option<Value>,
        error: Option<String>,
    ) -> Result<RunEnd, StoreError> {
        self.write(move |conn| {
            let run = load_run(conn, &run_id)?;
            if run.status.is_finished() {
                return Ok(RunEnd {
                    run,
                    changed: false,
                    expired_approvals: Vec::new(),
                });
            }
            let result_json = result.as_ref().map(serde_json::to_string).transpose()?;
            conn.prepare_cached(&format!(
                "UPDATE agent_runs SET status = ?2, result = ?3, error = ?4, completed_at = {NOW} \
                 WHERE id = ?1"
            ))?
            .execute(params![run_id, status.as_str(), result_json, error])?;
            conn.prepare_cached(&format!(
                "UPDATE sessions SET status = 'ended', ended_at = {NOW} \
                 WHERE id = ?1 AND status = 'active'"
            ))?
            .execute([&run.session_id])?;
            append_event(
                conn,
                &NewEvent {
                    kind: "agent_run_finished".into(),
                    project_id: Some(run.project_id.clone()),
                    session_id: Some(run.session_id.clone()),
                    party_id: run.party_id.clone(),
                    data: serde_json::json!({
                        "run_id": run_id, "status": status.as_str(), "error": error,
                        "output": result.as_ref().and_then(|r| r.get("output")),
                    }),
                },
            )?;
            let expired_approvals = crate::approvals::expire_for_run(
                conn,
                &run_id,
                &format!("the run that asked ended ({})", status.as_str()),
            )?;
            Ok(RunEnd {
                run: load_run(conn, &run_id)?,
                changed: true,
                expired_approvals,
            })
        })
        .await
    }

    /// Adds an executor's usage to its run, every run above it (the runs whose sessions
    /// started it, transitively) and its party.
    pub async fn add_usage(&self, run_id: String, usage: Usage) -> Result<(), StoreError> {
        self.write(move |conn| {
            let mut add = conn.prepare_cached(
                "INSERT INTO usage_totals (scope, id, input_tokens, output_tokens, cost_usd) \
                 VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (scope, id) DO UPDATE SET \
                 input_tokens = input_tokens + excluded.input_tokens, \
                 output_tokens = output_tokens + excluded.output_tokens, \
                 cost_usd = cost_usd + excluded.cost_usd",
            )?;
            let mut run = load_run(conn, &run_id)?;
            if let Some(party) = &run.party_id {
                add.execute(params![
                    "party",
                    party,
                    usage.input_tokens,
                    usage.output_tokens,
                    usage.cost_usd
                ])?;
            }
            // Up the chain of runs; the depth limit keeps it short, the cap keeps it finite.
            for _ in 0..32 {
                add.execute(params![
                    "run",
                    run.run_id,
                    usage.input_tokens,
                    usage.output_tokens,
                    usage.cost_usd
                ])?;
                let Some(parent) = run.parent_session_id.clone() else {
                    break;
                };
                let up: Option<String> = conn
                    .prepare_cached(
                        "SELECT id FROM agent_runs WHERE session_id = ?1 \
                         ORDER BY created_at DESC LIMIT 1",
                    )?
                    .query_row([parent], |r| r.get(0))
                    .optional()?;
                match up {
                    Some(id) => run = load_run(conn, &id)?,
                    None => break,
                }
            }
            Ok(())
        })
        .await
    }

    /// Usage of a run (`scope` "run") or a party ("party"); zero when none was reported.
    pub fn usage(&self, scope: &'static str, id: &str) -> Result<Usage, StoreError> {
        self.read(|conn| {
            Ok(conn
                .prepare_cached(
                    "SELECT input_tokens, output_tokens, cost_usd FROM usage_totals \
                     WHERE scope = ?1 AND id = ?2",
                )?
                .query_row(params![scope, id], |r| {
                    Ok(Usage {
                        input_tokens: r.get(0)?,
                        output_tokens: r.get(1)?,
                        cost_usd: r.get(2)?,
                    })
                })
                .optional()?
                .unwrap_or_default())
        })
    }

    /// Keeps a pattern run's state (the engine's flow as JSON); `finished` once it has ended.
    pub async fn save_flow(
        &self,
        root_run_id: String,
        state: Value,
        finished: bool,
    ) -> Result<(), StoreError> {
        self.write(move |conn| {
            conn.prepare_cached(&format!(
                "INSERT INTO pattern_flows (root_run_id, state, finished, updated_at) \
                 VALUES (?1, ?2, ?3, {NOW}) ON CONFLICT (root_run_id) DO UPDATE SET \
                 state = excluded.state, finished = excluded.finished, updated_at = excluded.updated_at"
            ))?
            .execute(params![root_run_id, serde_json::to_string(&state)?, finished])?;
            Ok(())
        })
        .await
    }

    /// The pattern runs that have not ended: (root run id, state).
    pub fn unfinished_flows(&self) -> Result<Vec<(String, Value)>, StoreError> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT root_run_id, state FROM pattern_flows WHERE finished = 0 ORDER BY updated_at",
            )?;
            let rows = stmt.query_map([], |row| Ok((row.get::<_, String>(0)?, json_col(row, 1)?)))?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }

    /// A run and every run started under it (its steps, their subagents, …), oldest first.
    pub fn run_tree(&self, root_run_id: &str) -> Result<Vec<AgentRun>, StoreError> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(&format!(
                "WITH RECURSIVE tree(id, session_id) AS ( \
                     SELECT id, session_id FROM agent_runs WHERE id = ?1 \
                     UNION SELECT r.id, r.session_id FROM agent_runs r \
                     JOIN tree t ON r.parent_session_id = t.session_id OR r.flow_root = t.id) \
                 SELECT {RUN_COLUMNS} FROM agent_runs WHERE id IN (SELECT id FROM tree) \
                 ORDER BY created_at, id"
            ))?;
            let rows = stmt.query_map(params![root_run_id], run_from_row)?;
            let runs = rows.collect::<Result<Vec<_>, _>>()?;
            if runs.is_empty() {
                return Err(StoreError::not_found("agent run", root_run_id));
            }
            Ok(runs)
        })
    }

    pub fn get_run(&self, run_id: &str) -> Result<AgentRun, StoreError> {
        self.read(|conn| load_run(conn, run_id))
    }

    /// The newest run whose session is `session_id`.
    pub fn run_of_session(&self, session_id: &str) -> Result<Option<AgentRun>, StoreError> {
        self.read(|conn| {
            Ok(conn
                .prepare_cached(&format!(
                    "SELECT {RUN_COLUMNS} FROM agent_runs WHERE session_id = ?1 \
                     ORDER BY created_at DESC LIMIT 1"
                ))?
                .query_row([session_id], run_from_row)
                .optional()?)
        })
    }

    /// Runs filtered by parent session, party and status (empty filters match all).
    pub fn list_runs(
        &self,
        parent_session_id: Option<&str>,
        party_id: Option<&str>,
        active_only: bool,
    ) -> Result<Vec<AgentRun>, StoreError> {
        self.read(|conn| {
            let rows = conn
                .prepare_cached(&format!(
                    "SELECT {RUN_COLUMNS} FROM agent_runs \
                     WHERE (?1 IS NULL OR parent_session_id = ?1) AND (?2 IS NULL OR party_id = ?2) \
                       AND (?3 = 0 OR status IN ('pending', 'running')) \
                     ORDER BY created_at, id"
                ))?
                .query_map(params![parent_session_id, party_id, active_only], run_from_row)?
                .collect::<Result<_, _>>()?;
            Ok(rows)
        })
    }

    /// The project's runs that worked outside `root` (its main checkout): in checkouts of
    /// their own. Those in the main checkout are never read (a large party's members there
    /// made every read of the project's runs as long as the party).
    pub fn isolated_runs_in_project(
        &self,
        project_id: &str,
        root: &str,
    ) -> Result<Vec<AgentRun>, StoreError> {
        self.read(|conn| {
            let rows = conn
                .prepare_cached(&format!(
                    "SELECT {RUN_COLUMNS} FROM agent_runs WHERE project_id = ?1 \
                     AND workdir IS NOT NULL AND workdir != ?2 ORDER BY created_at, id"
                ))?
                .query_map([project_id, root], run_from_row)?
                .collect::<Result<_, _>>()?;
            Ok(rows)
        })
    }

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
            let over = state.status.is_over();
            conn.prepare_cached(&format!(
                "UPDATE parties SET status = ?2, status_reason = ?3, overrides = ?4, paused = ?5, \
                 completed_at = CASE WHEN ?6 AND completed_at IS NULL THEN {NOW} ELSE completed_at END, \
                 released = ?7 WHERE id = ?1"
            ))?
            .execute(params![
                party_id,
                state.status,
                state.status_reason,
                serde_json::to_string(&state.overrides)?,
                serde_json::to_string(&state.paused)?,
                over,
                serde_json::to_string(&state.released)?,
            ])?;
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
            if state.status == PartyStatus::Completed {
                // The party's task is done with it (an escalated one still waits for a person).
                conn.execute(
                    &format!(
                        "UPDATE tasks SET status = 'done', updated_at = {NOW} \
                         WHERE id = (SELECT task_id FROM parties WHERE id = ?1) \
                           AND status IN ('open', 'in_progress')"
                    ),
                    [&party_id],
                )?;
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
    pub fn list_parties_brief(
        &self,
        project_id: Option<&str>,
        status: Option<PartyStatus>,
    ) -> Result<Vec<PartyRow>, StoreError> {
        self.parties_where(
            &PARTY_COLUMNS.replacen("snapshot", "'null'", 1),
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
        self.read(|conn| {
            let rows = conn
                .prepare_cached(&format!(
                    "SELECT {columns} FROM parties WHERE (?1 IS NULL OR project_id = ?1) \
                     AND (?2 IS NULL OR status = ?2) ORDER BY created_at DESC, id"
                ))?
                .query_map(params![project_id, status], party_from_row)?
                .collect::<Result<_, _>>()?;
            Ok(rows)
        })
    }

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
        self.read(|conn| {
            let rows = conn
                .prepare_cached(&format!(
                    "SELECT {TASK_COLUMNS} FROM tasks WHERE (?1 IS NULL OR party_id = ?1) \
                     ORDER BY created_at, id"
                ))?
                .query_map([party_id], task_from_row)?
                .collect::<Result<_, _>>()?;
            Ok(rows)
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

    /// The session's project's system session (cli `troupe`), created on first use: the sender
    /// of the daemon's own messages.
    pub async fn system_session(
        &self,
        project_root: String,
        project_name: String,
    ) -> Result<Session, StoreError> {
        self.write(move |conn| {
            let new = NewSession {
                cli: "troupe".into(),
                cwd: project_root.clone(),
                project_root: project_root.clone(),
                project_name: project_name.clone(),
                external_id: Some("troupe-system".into()),
                ..NewSession::default()
            };
            let existing: Option<String> = conn
                .prepare_cached(
                    "SELECT s.id FROM sessions s JOIN projects p ON p.id = s.project_id \
                     WHERE p.root_path = ?1 AND s.cli = 'troupe' AND s.external_id = 'troupe-system'",
                )?
                .query_row([&project_root], |r| r.get::<_, String>(0))
                .optional()?;
            match existing {
                Some(id) => {
                    conn.execute(
                        "UPDATE sessions SET status = 'active', ended_at = NULL WHERE id = ?1",
                        [&id],
                    )?;
                    load_session(conn, &id)
                }
                None => Ok(register(conn, &new)?.session),
            }
        })
        .await
    }
}

fn definition_select(kind: DefinitionKind, tail: &str) -> String {
    let builtin = if kind == DefinitionKind::Party {
        "builtin"
    } else {
        "0"
    };
    let version = if kind == DefinitionKind::Party {
        "version"
    } else {
        "1"
    };
    format!(
        "SELECT name, definition, {version}, {builtin}, created_at, updated_at FROM {} {tail}",
        kind.table()
    )
}

fn get_definition_in(
    conn: &Connection,
    kind: DefinitionKind,
    name: &str,
) -> Result<DefinitionRow, StoreError> {
    conn.prepare_cached(&definition_select(kind, "WHERE name = ?1"))?
        .query_row([name], definition_from_row)
        .optional()?
        .ok_or_else(|| StoreError::not_found(kind.what(), name))
}
