//! Schedules that start parties: the `[schedules.<name>]` of a project's config as the daemon
//! last read it, and their durable state (paused, the next due time, the last fire and its
//! party or error). A fire is committed before its party is launched (`launching`), and each
//! state change writes its timeline event in the same transaction (the `schedule_*` kinds, which
//! the inbox follows). The times are UTC text, as SQLite writes them; the daemon works them out.

use std::collections::BTreeMap;

use rusqlite::{Connection, OptionalExtension, Row, params};
use serde_json::json;

use crate::events::append_event;
use crate::{NewEvent, Project, Store, StoreError};

const NOW: &str = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')";

const COLUMNS: &str = "project_id, name, cron, party, task, missed, paused, problem, \
    next_due_at, last_due_at, last_run_at, launching, last_party_id, last_error, state_at, \
    created_at";

/// A schedule as a project's config says it, checked by the daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleConfig {
    pub name: String,
    pub cron: String,
    pub party: String,
    pub task: String,
    /// `once` or `skip`: what becomes of the due times missed while the daemon was down.
    pub missed: String,
    /// Whether a schedule seen for the first time starts paused.
    pub paused: bool,
    /// Why it cannot fire (a bad cron, an unknown party, an unreadable config), if so.
    pub problem: Option<String>,
    /// Its next due time from now: taken when the schedule is new, or its cron changed.
    pub next_due_at: Option<String>,
}

/// A schedule and its state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    pub project_id: String,
    pub name: String,
    pub cron: String,
    pub party: String,
    pub task: String,
    pub missed: String,
    pub paused: bool,
    pub problem: Option<String>,
    /// When it fires next (none while paused or broken).
    pub next_due_at: Option<String>,
    /// The due time its last fire by the cron was for.
    pub last_due_at: Option<String>,
    /// When it last fired (by its cron or by a person).
    pub last_run_at: Option<String>,
    /// A fire committed whose party is not launched yet.
    pub launching: bool,
    pub last_party_id: Option<String>,
    /// Why its last launch failed.
    pub last_error: Option<String>,
    /// When it was last paused, resumed or added.
    pub state_at: String,
    pub created_at: String,
}

/// What fires a schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fire {
    /// Its cron, for the due time `due_at` it holds as `next_due_at`; `next_due_at` is the one
    /// after. `covers` is the latest due time this fire stands for; `missed`, when the daemon
    /// found `due_at` late (it was down), how many due times passed unrun that this one run
    /// stands for (0 when on time).
    Due {
        due_at: String,
        covers: String,
        next_due_at: Option<String>,
        missed: u64,
    },
    /// A person, now (the cron's sequence unchanged).
    Now,
}

fn from_row(r: &Row<'_>) -> rusqlite::Result<Schedule> {
    Ok(Schedule {
        project_id: r.get(0)?,
        name: r.get(1)?,
        cron: r.get(2)?,
        party: r.get(3)?,
        task: r.get(4)?,
        missed: r.get(5)?,
        paused: r.get::<_, i64>(6)? != 0,
        problem: r.get(7)?,
        next_due_at: r.get(8)?,
        last_due_at: r.get(9)?,
        last_run_at: r.get(10)?,
        launching: r.get::<_, i64>(11)? != 0,
        last_party_id: r.get(12)?,
        last_error: r.get(13)?,
        state_at: r.get(14)?,
        created_at: r.get(15)?,
    })
}

fn find(conn: &Connection, project_id: &str, name: &str) -> Result<Option<Schedule>, StoreError> {
    Ok(conn
        .prepare_cached(&format!(
            "SELECT {COLUMNS} FROM schedules WHERE project_id = ?1 AND name = ?2"
        ))?
        .query_row(params![project_id, name], from_row)
        .optional()?)
}

fn load(conn: &Connection, project_id: &str, name: &str) -> Result<Schedule, StoreError> {
    find(conn, project_id, name)?.ok_or_else(|| StoreError::not_found("schedule", name))
}

fn of_project(conn: &Connection, project_id: &str) -> Result<Vec<Schedule>, StoreError> {
    Ok(conn
        .prepare_cached(&format!(
            "SELECT {COLUMNS} FROM schedules WHERE project_id = ?1 ORDER BY name"
        ))?
        .query_map([project_id], from_row)?
        .collect::<Result<_, _>>()?)
}

/// Appends a `kind` event of schedule `name` in `project_id`, its data with the schedule's name.
fn event(
    conn: &Connection,
    kind: &str,
    project_id: &str,
    name: &str,
    party_id: Option<&str>,
    mut data: serde_json::Value,
) -> Result<i64, StoreError> {
    if let Some(fields) = data.as_object_mut() {
        fields.insert("schedule".into(), json!(name));
    }
    append_event(
        conn,
        &NewEvent {
            kind: kind.into(),
            project_id: Some(project_id.to_string()),
            session_id: None,
            party_id: party_id.map(String::from),
            data,
        },
    )
}

/// Brings `project_id`'s schedules to what its config says; how many changed.
fn sync(
    conn: &Connection,
    project_id: &str,
    configs: &[ScheduleConfig],
) -> Result<usize, StoreError> {
    let mut existing: BTreeMap<String, Schedule> = of_project(conn, project_id)?
        .into_iter()
        .map(|s| (s.name.clone(), s))
        .collect();
    let mut changed = 0;
    for c in configs {
        let Some(row) = existing.remove(&c.name) else {
            let next = if c.paused || c.problem.is_some() {
                None
            } else {
                c.next_due_at.clone()
            };
            conn.prepare_cached(
                "INSERT INTO schedules (project_id, name, cron, party, task, missed, paused, \
                 problem, next_due_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            )?
            .execute(params![
                project_id,
                c.name,
                c.cron,
                c.party,
                c.task,
                c.missed,
                i64::from(c.paused),
                c.problem,
                next
            ])?;
            event(
                conn,
                "schedule_added",
                project_id,
                &c.name,
                None,
                json!({ "cron": c.cron, "party": c.party, "missed": c.missed,
                        "paused": c.paused, "next_due_at": next }),
            )?;
            if let Some(problem) = &c.problem {
                event(
                    conn,
                    "schedule_error",
                    project_id,
                    &c.name,
                    None,
                    json!({ "error": problem }),
                )?;
            }
            changed += 1;
            continue;
        };
        let definition_changed = row.cron != c.cron
            || row.party != c.party
            || row.task != c.task
            || row.missed != c.missed;
        if !definition_changed && row.problem == c.problem {
            continue;
        }
        let next = if c.problem.is_some() || row.paused {
            None
        } else if row.cron != c.cron || row.problem.is_some() || row.next_due_at.is_none() {
            c.next_due_at.clone()
        } else {
            row.next_due_at.clone()
        };
        conn.prepare_cached(
            "UPDATE schedules SET cron = ?3, party = ?4, task = ?5, missed = ?6, problem = ?7, \
             next_due_at = ?8 WHERE project_id = ?1 AND name = ?2",
        )?
        .execute(params![
            project_id, c.name, c.cron, c.party, c.task, c.missed, c.problem, next
        ])?;
        match &c.problem {
            Some(problem) if row.problem.as_ref() != Some(problem) => event(
                conn,
                "schedule_error",
                project_id,
                &c.name,
                None,
                json!({ "error": problem }),
            )?,
            _ => event(
                conn,
                "schedule_changed",
                project_id,
                &c.name,
                None,
                json!({ "cron": c.cron, "party": c.party, "missed": c.missed,
                        "next_due_at": next }),
            )?,
        };
        changed += 1;
    }
    // What the config no longer has.
    for name in existing.into_keys() {
        conn.prepare_cached("DELETE FROM schedules WHERE project_id = ?1 AND name = ?2")?
            .execute(params![project_id, name])?;
        event(conn, "schedule_removed", project_id, &name, None, json!({}))?;
        changed += 1;
    }
    Ok(changed)
}

/// Commits a fire (`launching`), if it still stands: `None` when the cron's due time is no
/// longer the schedule's (fired already, paused, broken, changed) or a launch is under way.
fn fire(
    conn: &Connection,
    project_id: &str,
    name: &str,
    fire: &Fire,
) -> Result<Option<Schedule>, StoreError> {
    let row = load(conn, project_id, name)?;
    match fire {
        Fire::Now => {
            if row.launching {
                return Err(StoreError::Conflict(format!(
                    "schedule {name} is launching its party already"
                )));
            }
            if let Some(problem) = &row.problem {
                return Err(StoreError::Conflict(format!(
                    "schedule {name} cannot run: {problem}"
                )));
            }
            conn.prepare_cached(&format!(
                "UPDATE schedules SET launching = 1, last_run_at = {NOW}, last_party_id = NULL, \
                 last_error = NULL WHERE project_id = ?1 AND name = ?2"
            ))?
            .execute(params![project_id, name])?;
            event(
                conn,
                "schedule_fired",
                project_id,
                name,
                None,
                json!({ "by": "person", "party": row.party }),
            )?;
        }
        Fire::Due {
            due_at,
            covers,
            next_due_at,
            missed,
        } => {
            let stands = !row.launching
                && !row.paused
                && row.problem.is_none()
                && row.next_due_at.as_deref() == Some(due_at.as_str());
            if !stands {
                return Ok(None);
            }
            conn.prepare_cached(&format!(
                "UPDATE schedules SET launching = 1, last_due_at = ?3, last_run_at = {NOW}, \
                 next_due_at = ?4, last_party_id = NULL, last_error = NULL \
                 WHERE project_id = ?1 AND name = ?2"
            ))?
            .execute(params![project_id, name, covers, next_due_at])?;
            if *missed > 0 {
                event(
                    conn,
                    "schedule_missed",
                    project_id,
                    name,
                    None,
                    json!({ "policy": "once", "missed": missed, "from": due_at,
                            "to": covers, "runs": 1 }),
                )?;
            }
            event(
                conn,
                "schedule_fired",
                project_id,
                name,
                None,
                json!({ "by": "cron", "due_at": covers, "party": row.party,
                        "next_due_at": next_due_at }),
            )?;
        }
    }
    load(conn, project_id, name).map(Some)
}

impl Store {
    /// Every project the daemon has seen, oldest first.
    pub fn list_projects(&self) -> Result<Vec<Project>, StoreError> {
        self.read(|conn| {
            Ok(conn
                .prepare_cached(
                    "SELECT id, root_path, name, created_at FROM projects ORDER BY created_at, id",
                )?
                .query_map([], |r| {
                    Ok(Project {
                        project_id: r.get(0)?,
                        root_path: r.get(1)?,
                        name: r.get(2)?,
                        created_at: r.get(3)?,
                    })
                })?
                .collect::<Result<_, _>>()?)
        })
    }

    /// The schedules of one project, or of every project, by project and name.
    pub fn schedules(&self, project_id: Option<&str>) -> Result<Vec<Schedule>, StoreError> {
        self.read(|conn| match project_id {
            Some(id) => of_project(conn, id),
            None => Ok(conn
                .prepare_cached(&format!(
                    "SELECT {COLUMNS} FROM schedules ORDER BY project_id, name"
                ))?
                .query_map([], from_row)?
                .collect::<Result<_, _>>()?),
        })
    }

    pub fn get_schedule(&self, project_id: &str, name: &str) -> Result<Schedule, StoreError> {
        self.read(|conn| load(conn, project_id, name))
    }

    /// Brings a project's schedules to its config: adds the new ones (paused if the config says
    /// so), takes the changes (a new cron takes `next_due_at`), records the problems and
    /// removes what the config no longer has, each with its event. Paused state, the last fire
    /// and a due time not changed are kept. How many schedules changed.
    pub async fn sync_schedules(
        &self,
        project_id: String,
        configs: Vec<ScheduleConfig>,
    ) -> Result<usize, StoreError> {
        self.write(move |conn| sync(conn, &project_id, &configs))
            .await
    }

    /// Commits a fire before its party is launched (see [`Fire`]); a coalesced one records
    /// `schedule_missed` too. `None` when a cron's fire no longer stands; a person's is refused
    /// (`Conflict`) while a launch is under way or the schedule is broken.
    pub async fn fire_schedule(
        &self,
        project_id: String,
        name: String,
        what: Fire,
    ) -> Result<Option<Schedule>, StoreError> {
        self.write(move |conn| fire(conn, &project_id, &name, &what))
            .await
    }

    /// Skips the due times from `due_at` (the schedule's own) to now (`missed` of them): the
    /// next is `next_due_at`, and nothing runs. `None` when `due_at` is no longer its own.
    pub async fn skip_schedule(
        &self,
        project_id: String,
        name: String,
        due_at: String,
        next_due_at: Option<String>,
        missed: u64,
    ) -> Result<Option<Schedule>, StoreError> {
        self.write(move |conn| {
            let row = load(conn, &project_id, &name)?;
            let stands = !row.launching
                && !row.paused
                && row.problem.is_none()
                && row.next_due_at.as_deref() == Some(due_at.as_str());
            if !stands {
                return Ok(None);
            }
            conn.prepare_cached(
                "UPDATE schedules SET next_due_at = ?3 WHERE project_id = ?1 AND name = ?2",
            )?
            .execute(params![project_id, name, next_due_at])?;
            event(
                conn,
                "schedule_missed",
                &project_id,
                &name,
                None,
                json!({ "policy": "skip", "missed": missed, "from": due_at, "runs": 0,
                        "next_due_at": next_due_at }),
            )?;
            load(conn, &project_id, &name).map(Some)
        })
        .await
    }

    /// Ends a committed fire: the party it launched, or why it could not.
    pub async fn finish_schedule_launch(
        &self,
        project_id: String,
        name: String,
        outcome: Result<String, String>,
        adopted: bool,
    ) -> Result<Schedule, StoreError> {
        self.write(move |conn| {
            let row = load(conn, &project_id, &name)?;
            if !row.launching {
                return Err(StoreError::Conflict(format!(
                    "schedule {name} has no launch under way"
                )));
            }
            match &outcome {
                Ok(party_id) => {
                    conn.prepare_cached(
                        "UPDATE schedules SET launching = 0, last_party_id = ?3, \
                         last_error = NULL WHERE project_id = ?1 AND name = ?2",
                    )?
                    .execute(params![project_id, name, party_id])?;
                    event(
                        conn,
                        "schedule_launched",
                        &project_id,
                        &name,
                        Some(party_id),
                        json!({ "party": row.party, "party_id": party_id,
                                "adopted": adopted }),
                    )?;
                }
                Err(error) => {
                    conn.prepare_cached(
                        "UPDATE schedules SET launching = 0, last_party_id = NULL, \
                         last_error = ?3 WHERE project_id = ?1 AND name = ?2",
                    )?
                    .execute(params![project_id, name, error])?;
                    event(
                        conn,
                        "schedule_failed",
                        &project_id,
                        &name,
                        None,
                        json!({ "party": row.party, "error": error }),
                    )?;
                }
            }
            load(conn, &project_id, &name)
        })
        .await
    }

    /// Pauses a schedule (it has no next due time until resumed), or resumes it with
    /// `next_due_at`; with its event. One already so is left as it is.
    pub async fn set_schedule_paused(
        &self,
        project_id: String,
        name: String,
        paused: bool,
        next_due_at: Option<String>,
    ) -> Result<Schedule, StoreError> {
        self.write(move |conn| {
            let row = load(conn, &project_id, &name)?;
            if row.paused == paused {
                return Ok(row);
            }
            let next = if paused || row.problem.is_some() {
                None
            } else {
                next_due_at.clone()
            };
            conn.prepare_cached(&format!(
                "UPDATE schedules SET paused = ?3, next_due_at = ?4, state_at = {NOW} \
                 WHERE project_id = ?1 AND name = ?2"
            ))?
            .execute(params![project_id, name, i64::from(paused), next])?;
            let kind = if paused {
                "schedule_paused"
            } else {
                "schedule_resumed"
            };
            event(
                conn,
                kind,
                &project_id,
                &name,
                None,
                json!({ "next_due_at": next }),
            )?;
            load(conn, &project_id, &name)
        })
        .await
    }
}

#[cfg(test)]
mod tests;
