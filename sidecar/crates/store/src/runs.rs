//! Agent runs: created with their session, started, finished (their waiting requests expire in the
//! same transaction), their usage, pattern flows, and the system session of a project. Every state
//! change writes its timeline events in the same transaction.

use rusqlite::{Connection, OptionalExtension, Row, params};
use serde_json::Value;

use crate::events::append_event;
use crate::sessions::{load_session, register};
use crate::{
    AgentRun, NewEvent, NewRun, NewSession, RunEnd, RunStatus, Session, Store, StoreError, Usage,
    new_id,
};

use crate::columns::{NOW, json_col, opt_json_col};

/// A run as its credential's calls need it: who it is and whether it still runs.
#[derive(Debug, Clone, PartialEq)]
pub struct RunCaller {
    pub run_id: String,
    pub session_id: String,
    pub party_id: Option<String>,
    pub role_name: Option<String>,
    pub instance_index: Option<i64>,
    pub status: RunStatus,
}

/// A run not ended yet, as its budgets are checked (`Store::active_runs_brief`).
#[derive(Debug, Clone, PartialEq)]
pub struct ActiveRun {
    pub run_id: String,
    pub party_id: Option<String>,
    pub definition: Value,
}

/// A run as `complete` checks it (`Store::run_to_complete`).
#[derive(Debug, Clone, PartialEq)]
pub struct RunToComplete {
    pub run_id: String,
    pub session_id: String,
    pub definition: Value,
}

pub(crate) fn parse_run_status(s: &str) -> Result<RunStatus, StoreError> {
    serde_json::from_value(Value::String(s.to_string())).map_err(StoreError::from)
}

/// The columns `run_from_row` reads, from `agent_runs` (not aliased): the prompt, written once,
/// is kept apart (`agent_run_prompts`) so that the run's updates leave it alone.
pub(crate) const RUN_COLUMNS: &str = "id, agent_name, definition, project_id, parent_session_id, session_id, \
    party_id, role_name, instance_index, attempt, \
    coalesce((SELECT prompt FROM agent_run_prompts WHERE run_id = agent_runs.id), ''), task_id, status, result, error, pid, \
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

pub(crate) fn load_run(conn: &Connection, id: &str) -> Result<AgentRun, StoreError> {
    conn.prepare_cached(&format!(
        "SELECT {RUN_COLUMNS} FROM agent_runs WHERE id = ?1"
    ))?
    .query_row([id], run_from_row)
    .optional()?
    .ok_or_else(|| StoreError::not_found("agent run", id))
}

impl Store {
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
            let created_at = conn.prepare_cached(
                "INSERT INTO agent_runs (id, agent_name, definition, project_id, parent_session_id, \
                 session_id, party_id, role_name, instance_index, attempt, task_id, \
                 timeout_ms, workdir, run_trigger, flow_root, flow_step) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16) \
                 RETURNING created_at",
            )?
            .query_row(params![
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
                new.task_id,
                new.timeout_ms,
                new.workdir,
                new.trigger,
                new.flow.as_ref().map(|(root, _)| root.as_str()),
                new.flow.as_ref().map(|(_, step)| *step),
            ], |r| r.get::<_, String>(0))?;
            conn.prepare_cached("INSERT INTO agent_run_prompts (run_id, prompt) VALUES (?1, ?2)")?
                .execute(params![id, new.prompt])?;
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
            // The run as inserted, without reading it back (its definition and prompt are
            // the bulk of the row).
            let run = AgentRun {
                run_id: id,
                agent_name: new.agent_name.clone(),
                definition: new.definition.clone(),
                project_id: session.project_id.clone(),
                parent_session_id: session.parent_session_id.clone(),
                session_id: session.session_id.clone(),
                party_id: party_id.map(str::to_string),
                role_name: role.map(str::to_string),
                instance_index: index,
                attempt: new.attempt,
                prompt: new.prompt.clone(),
                task_id: new.task_id.clone(),
                status: RunStatus::Pending,
                result: None,
                error: None,
                pid: None,
                pid_start: None,
                pgid: None,
                trigger: new.trigger.clone(),
                flow_root: new.flow.as_ref().map(|(root, _)| root.clone()),
                flow_step: new.flow.as_ref().map(|(_, step)| *step),
                workdir: new.workdir.clone(),
                timeout_ms: new.timeout_ms,
                created_at,
                started_at: None,
                completed_at: None,
            };
            Ok((run, session))
        })
        .await
    }

    /// Records the run's process (and its process group: `None` for a run inside the daemon).
    /// `run`: the run as created (its project, session and party name the event).
    pub async fn run_started(
        &self,
        run: &AgentRun,
        pid: i64,
        pid_start: Option<i64>,
        pgid: Option<i64>,
    ) -> Result<(), StoreError> {
        let (run_id, project_id, session_id, party_id) = (
            run.run_id.clone(),
            run.project_id.clone(),
            run.session_id.clone(),
            run.party_id.clone(),
        );
        self.write(move |conn| {
            let started = conn
                .prepare_cached(&format!(
                    "UPDATE agent_runs SET status = 'running', pid = ?2, pid_start = ?3, \
                     pgid = ?4, started_at = {NOW} WHERE id = ?1 AND status = 'pending'"
                ))?
                .execute(params![run_id, pid, pid_start, pgid])?;
            // A run that was not pending (stopped meanwhile) must still exist.
            if started == 0
                && conn
                    .prepare_cached("SELECT 1 FROM agent_runs WHERE id = ?1")?
                    .query_row([&run_id], |_| Ok(()))
                    .optional()?
                    .is_none()
            {
                return Err(StoreError::not_found("agent run", &run_id));
            }
            append_event(
                conn,
                &NewEvent {
                    kind: "agent_run_started".into(),
                    project_id: Some(project_id.clone()),
                    session_id: Some(session_id.clone()),
                    party_id: party_id.clone(),
                    data: serde_json::json!({ "run_id": run_id, "pid": pid, "pgid": pgid }),
                },
            )?;
            Ok(())
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
            let completed_at: String = conn
                .prepare_cached(&format!(
                    "UPDATE agent_runs SET status = ?2, result = ?3, error = ?4, \
                     completed_at = {NOW} WHERE id = ?1 RETURNING completed_at"
                ))?
                .query_row(params![run_id, status.as_str(), result_json, error], |r| {
                    r.get(0)
                })?;
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
            let judged: bool = conn
                .prepare_cached("SELECT count(*) > 0 FROM member_picks WHERE judge_run_id = ?1")?
                .query_row([&run_id], |r| r.get(0))?;
            if judged {
                // A judge that ended without picking leaves the pick to the person.
                crate::changes::mark(crate::Topic::Picks);
            }
            let expired_approvals = crate::approvals::expire_for_run(
                conn,
                &run_id,
                &format!("the run that asked ended ({})", status.as_str()),
            )?;
            // The run as the update left it, without reading it back.
            let mut run = run;
            run.status = status;
            run.result = result.clone();
            run.error = error.clone();
            run.completed_at = Some(completed_at);
            Ok(RunEnd {
                run,
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

    /// Who a run is and whether it still runs: what admitting one of its calls needs, read
    /// without its definition, prompt or result (each member call asks this twice).
    pub fn run_caller(&self, run_id: &str) -> Result<RunCaller, StoreError> {
        self.read(|conn| {
            let row = conn
                .prepare_cached(
                    "SELECT session_id, party_id, role_name, instance_index, status \
                     FROM agent_runs WHERE id = ?1",
                )?
                .query_row([run_id], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, Option<String>>(1)?,
                        r.get::<_, Option<String>>(2)?,
                        r.get::<_, Option<i64>>(3)?,
                        r.get::<_, String>(4)?,
                    ))
                })
                .optional()?
                .ok_or_else(|| StoreError::not_found("agent run", run_id))?;
            let (session_id, party_id, role_name, instance_index, status) = row;
            Ok(RunCaller {
                run_id: run_id.to_string(),
                session_id,
                party_id,
                role_name,
                instance_index,
                status: parse_run_status(&status)?,
            })
        })
    }

    /// The runs not ended yet, each as its budgets are checked: id, party and definition
    /// (read without prompts or results, through the status index).
    pub fn active_runs_brief(&self) -> Result<Vec<ActiveRun>, StoreError> {
        self.read(|conn| {
            let rows = conn
                .prepare_cached(
                    "SELECT id, party_id, definition FROM agent_runs \
                     WHERE status IN ('pending', 'running') ORDER BY created_at, id",
                )?
                .query_map([], |r| {
                    Ok(ActiveRun {
                        run_id: r.get(0)?,
                        party_id: r.get(1)?,
                        definition: json_col(r, 2)?,
                    })
                })?
                .collect::<Result<_, _>>()?;
            Ok(rows)
        })
    }

    /// What `complete` checks of a run, read without its prompt or result: the run named, or
    /// else the newest run of `session_id` (`None`: that session runs no agent).
    pub fn run_to_complete(
        &self,
        run_id: Option<&str>,
        session_id: &str,
    ) -> Result<Option<RunToComplete>, StoreError> {
        self.read(|conn| {
            let row = |r: &Row<'_>| {
                Ok(RunToComplete {
                    run_id: r.get(0)?,
                    session_id: r.get(1)?,
                    definition: json_col(r, 2)?,
                })
            };
            match run_id {
                Some(id) => conn
                    .prepare_cached(
                        "SELECT id, session_id, definition FROM agent_runs WHERE id = ?1",
                    )?
                    .query_row([id], row)
                    .optional()?
                    .ok_or_else(|| StoreError::not_found("agent run", id))
                    .map(Some),
                None => Ok(conn
                    .prepare_cached(
                        "SELECT id, session_id, definition FROM agent_runs WHERE session_id = ?1 \
                         ORDER BY created_at DESC LIMIT 1",
                    )?
                    .query_row([session_id], row)
                    .optional()?),
            }
        })
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
        // Only the filters given, so that SQLite answers through their indexes (parent, party,
        // the active runs' status), not a walk over every run the store still holds.
        let mut filters = crate::filters::Filters::default();
        filters
            .given("parent_session_id = ?1", 1, parent_session_id.as_ref())
            .given("party_id = ?2", 2, party_id.as_ref())
            .when("status IN ('pending', 'running')", active_only);
        let sql = format!(
            "SELECT {RUN_COLUMNS} FROM agent_runs WHERE {} ORDER BY created_at, id",
            filters.sql()
        );
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(&sql)?;
            Ok(filters.collect(&mut stmt, run_from_row)?)
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
