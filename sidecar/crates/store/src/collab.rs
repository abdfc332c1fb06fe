//! The collaboration protocol's records (seed 004): a party's plan versions and their reviews,
//! the committed plan's steps with their live state, and decisions with their votes. The rules
//! (what may move where) are the engine's; this module keeps the records, refuses a move made
//! from a state that has changed since it was read, and writes each change's timeline event in
//! the same transaction. A voter has one vote per decision (the primary key).

use rusqlite::{Connection, OptionalExtension, Row, params};
use serde_json::Value;

use crate::columns::json_col;
use crate::events::append_event;
use crate::{
    DecisionRecord, DecisionStatus, NewEvent, PlanReview, PlanStatus, PlanStep, PlanVersion,
    StepState, Store, StoreError, Vote,
};

const NOW: &str = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')";

const PLAN_COLUMNS: &str = "party_id, version, status, steps, summary, proposed_by, \
                            committed_by, created_at, committed_at";

fn plan_from_row(row: &Row<'_>) -> rusqlite::Result<PlanVersion> {
    Ok(PlanVersion {
        party_id: row.get(0)?,
        version: row.get(1)?,
        status: row.get(2)?,
        steps: json_col(row, 3)?,
        summary: row.get(4)?,
        proposed_by: row.get(5)?,
        committed_by: row.get(6)?,
        created_at: row.get(7)?,
        committed_at: row.get(8)?,
        reviews: Vec::new(),
    })
}

fn load_plans(conn: &Connection, party_id: &str) -> Result<Vec<PlanVersion>, StoreError> {
    let mut plans: Vec<PlanVersion> = conn
        .prepare_cached(&format!(
            "SELECT {PLAN_COLUMNS} FROM plans WHERE party_id = ?1 ORDER BY version"
        ))?
        .query_map([party_id], plan_from_row)?
        .collect::<Result<_, _>>()?;
    let reviews: Vec<PlanReview> = conn
        .prepare_cached(
            "SELECT version, reviewer, session_id, verdict, comments, created_at FROM plan_reviews \
             WHERE party_id = ?1 ORDER BY id",
        )?
        .query_map([party_id], |r| {
            Ok(PlanReview {
                version: r.get(0)?,
                reviewer: r.get(1)?,
                session_id: r.get(2)?,
                verdict: r.get(3)?,
                comments: r.get(4)?,
                created_at: r.get(5)?,
            })
        })?
        .collect::<Result<_, _>>()?;
    for review in reviews {
        if let Some(p) = plans.iter_mut().find(|p| p.version == review.version) {
            p.reviews.push(review);
        }
    }
    Ok(plans)
}

fn load_plan(conn: &Connection, party_id: &str, version: i64) -> Result<PlanVersion, StoreError> {
    load_plans(conn, party_id)?
        .into_iter()
        .find(|p| p.version == version)
        .ok_or_else(|| StoreError::not_found("plan version", &format!("{party_id}/{version}")))
}

const STEP_COLUMNS: &str = "step_id, position, plan_version, owner_role, spec, state, reason, \
                            started_at_ms, usage_at_start, updated_at";

fn step_from_row(row: &Row<'_>) -> rusqlite::Result<PlanStep> {
    Ok(PlanStep {
        step_id: row.get(0)?,
        position: row.get(1)?,
        plan_version: row.get(2)?,
        owner_role: row.get(3)?,
        spec: json_col(row, 4)?,
        state: row.get(5)?,
        reason: row.get(6)?,
        started_at_ms: row.get(7)?,
        usage_at_start: json_col(row, 8)?,
        updated_at: row.get(9)?,
    })
}

fn load_step(conn: &Connection, party_id: &str, step_id: &str) -> Result<PlanStep, StoreError> {
    conn.prepare_cached(&format!(
        "SELECT {STEP_COLUMNS} FROM plan_steps WHERE party_id = ?1 AND step_id = ?2"
    ))?
    .query_row([party_id, step_id], step_from_row)
    .optional()?
    .ok_or_else(|| StoreError::not_found("step", step_id))
}

const DECISION_COLUMNS: &str = "id, party_id, topic, options, evidence, voters, step_id, \
     proposed_by, deadline_ms, status, chosen, how, adr_path, adr_commit, created_at, committed_at";

fn decision_from_row(row: &Row<'_>) -> rusqlite::Result<DecisionRecord> {
    Ok(DecisionRecord {
        decision_id: row.get(0)?,
        party_id: row.get(1)?,
        topic: row.get(2)?,
        options: json_col(row, 3)?,
        evidence: row.get(4)?,
        voters: json_col(row, 5)?,
        step_id: row.get(6)?,
        proposed_by: row.get(7)?,
        deadline_ms: row.get(8)?,
        status: row.get(9)?,
        chosen: row.get(10)?,
        how: row.get(11)?,
        adr_path: row.get(12)?,
        adr_commit: row.get(13)?,
        created_at: row.get(14)?,
        committed_at: row.get(15)?,
        votes: Vec::new(),
    })
}

fn load_decision(conn: &Connection, id: &str) -> Result<DecisionRecord, StoreError> {
    let mut d = conn
        .prepare_cached(&format!(
            "SELECT {DECISION_COLUMNS} FROM decisions WHERE id = ?1"
        ))?
        .query_row([id], decision_from_row)
        .optional()?
        .ok_or_else(|| StoreError::not_found("decision", id))?;
    d.votes = conn
        .prepare_cached(
            "SELECT voter, session_id, option, rationale, created_at FROM decision_votes \
             WHERE decision_id = ?1 ORDER BY created_at, voter",
        )?
        .query_map([id], |r| {
            Ok(Vote {
                voter: r.get(0)?,
                session_id: r.get(1)?,
                option: r.get(2)?,
                rationale: r.get(3)?,
                created_at: r.get(4)?,
            })
        })?
        .collect::<Result<_, _>>()?;
    Ok(d)
}

fn party_event(party_id: &str, kind: &str, data: Value) -> NewEvent {
    NewEvent {
        kind: kind.into(),
        party_id: Some(party_id.to_string()),
        data,
        ..NewEvent::default()
    }
}

/// A step's move, made only if the step is still where the caller read it.
#[derive(Debug, Clone)]
pub struct StepChange {
    pub party_id: String,
    pub step_id: String,
    /// The state it was read in; a different one now is a conflict.
    pub from: StepState,
    pub to: StepState,
    /// A new owner (a handoff).
    pub owner_role: Option<String>,
    pub reason: Option<String>,
    /// When it starts: the time and the owner's usage then.
    pub started: Option<(i64, Value)>,
    /// Its timeline event (`step_started`, `step_submitted`, …).
    pub event: String,
    pub data: Value,
}

/// A decision to record.
#[derive(Debug, Clone)]
pub struct NewDecision {
    pub party_id: String,
    pub topic: String,
    pub options: Vec<String>,
    pub evidence: Option<String>,
    pub voters: Vec<String>,
    pub step_id: Option<String>,
    pub proposed_by: Option<String>,
    pub deadline_ms: i64,
}

impl Store {
    /// Records a new plan version as a draft (the next version number); earlier drafts are
    /// superseded by it.
    pub async fn propose_plan(
        &self,
        party_id: String,
        steps: Value,
        summary: Option<String>,
        proposed_by: Option<String>,
    ) -> Result<PlanVersion, StoreError> {
        self.write(move |conn| {
            let version: i64 = conn
                .prepare_cached(
                    "SELECT COALESCE(MAX(version), 0) + 1 FROM plans WHERE party_id = ?1",
                )?
                .query_row([&party_id], |r| r.get(0))?;
            conn.prepare_cached(
                "UPDATE plans SET status = 'superseded' WHERE party_id = ?1 AND status = 'draft'",
            )?
            .execute([&party_id])?;
            conn.prepare_cached(&format!(
                "INSERT INTO plans (party_id, version, steps, summary, proposed_by, created_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, {NOW})"
            ))?
            .execute(params![
                party_id,
                version,
                serde_json::to_string(&steps)?,
                summary,
                proposed_by
            ])?;
            let count = steps.as_array().map_or(0, Vec::len);
            append_event(
                conn,
                &party_event(
                    &party_id,
                    "plan_proposed",
                    serde_json::json!({"version": version, "steps": count, "by": proposed_by}),
                ),
            )?;
            load_plan(conn, &party_id, version)
        })
        .await
    }

    /// Records a review of a draft plan version.
    pub async fn review_plan(
        &self,
        party_id: String,
        version: i64,
        reviewer: String,
        session_id: Option<String>,
        verdict: String,
        comments: Option<String>,
    ) -> Result<PlanVersion, StoreError> {
        self.write(move |conn| {
            let plan = load_plan(conn, &party_id, version)?;
            if plan.status != PlanStatus::Draft {
                return Err(StoreError::Conflict(format!(
                    "plan version {version} is {}; only a draft is reviewed",
                    plan.status
                )));
            }
            conn.prepare_cached(&format!(
                "INSERT INTO plan_reviews (party_id, version, reviewer, session_id, verdict, \
                 comments, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, {NOW})"
            ))?
            .execute(params![
                party_id, version, reviewer, session_id, verdict, comments
            ])?;
            append_event(
                conn,
                &party_event(
                    &party_id,
                    "plan_reviewed",
                    serde_json::json!({"version": version, "reviewer": reviewer,
                                       "verdict": verdict, "comments": comments}),
                ),
            )?;
            load_plan(conn, &party_id, version)
        })
        .await
    }

    /// Commits a draft plan version: it becomes the party's plan (the one committed before is
    /// superseded) and its steps are the live steps. A step that was in the plan before keeps
    /// where it was; `steps` is (id, owner role, spec) in plan order.
    pub async fn commit_plan(
        &self,
        party_id: String,
        version: i64,
        committed_by: Option<String>,
        steps: Vec<(String, String, Value)>,
    ) -> Result<PlanVersion, StoreError> {
        self.write(move |conn| {
            let plan = load_plan(conn, &party_id, version)?;
            if plan.status != PlanStatus::Draft {
                return Err(StoreError::Conflict(format!(
                    "plan version {version} is {}; only a draft is committed",
                    plan.status
                )));
            }
            conn.prepare_cached(
                "UPDATE plans SET status = 'superseded' WHERE party_id = ?1 AND status = 'committed'",
            )?
            .execute([&party_id])?;
            conn.prepare_cached(&format!(
                "UPDATE plans SET status = 'committed', committed_by = ?3, committed_at = {NOW} \
                 WHERE party_id = ?1 AND version = ?2"
            ))?
            .execute(params![party_id, version, committed_by])?;
            let ids: Vec<&str> = steps.iter().map(|(id, _, _)| id.as_str()).collect();
            let kept: Vec<String> = conn
                .prepare_cached("SELECT step_id FROM plan_steps WHERE party_id = ?1")?
                .query_map([&party_id], |r| r.get(0))?
                .collect::<Result<_, _>>()?;
            for old in kept.iter().filter(|k| !ids.contains(&k.as_str())) {
                conn.prepare_cached("DELETE FROM plan_steps WHERE party_id = ?1 AND step_id = ?2")?
                    .execute([&party_id, old])?;
            }
            for (position, (id, owner, spec)) in steps.iter().enumerate() {
                conn.prepare_cached(&format!(
                    "INSERT INTO plan_steps (party_id, step_id, position, plan_version, owner_role, \
                     spec, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, {NOW}) \
                     ON CONFLICT (party_id, step_id) DO UPDATE SET position = excluded.position, \
                     plan_version = excluded.plan_version, spec = excluded.spec, \
                     owner_role = excluded.owner_role, updated_at = excluded.updated_at"
                ))?
                .execute(params![
                    party_id,
                    id,
                    position as i64,
                    version,
                    owner,
                    serde_json::to_string(spec)?
                ])?;
            }
            append_event(
                conn,
                &party_event(
                    &party_id,
                    "plan_committed",
                    serde_json::json!({"version": version, "by": committed_by, "steps": ids}),
                ),
            )?;
            load_plan(conn, &party_id, version)
        })
        .await
    }

    /// Every version of a party's plan, oldest first, with its reviews.
    pub fn plans(&self, party_id: &str) -> Result<Vec<PlanVersion>, StoreError> {
        self.read(|conn| load_plans(conn, party_id))
    }

    /// The committed plan's steps, in plan order.
    pub fn plan_steps(&self, party_id: &str) -> Result<Vec<PlanStep>, StoreError> {
        self.read(|conn| {
            Ok(conn
                .prepare_cached(&format!(
                    "SELECT {STEP_COLUMNS} FROM plan_steps WHERE party_id = ?1 ORDER BY position"
                ))?
                .query_map([party_id], step_from_row)?
                .collect::<Result<_, _>>()?)
        })
    }

    pub fn plan_step(&self, party_id: &str, step_id: &str) -> Result<PlanStep, StoreError> {
        self.read(|conn| load_step(conn, party_id, step_id))
    }

    /// Moves a step, if it is still in `change.from` (else a conflict naming where it is now).
    pub async fn move_step(&self, change: StepChange) -> Result<PlanStep, StoreError> {
        self.write(move |conn| {
            let step = load_step(conn, &change.party_id, &change.step_id)?;
            if step.state != change.from {
                return Err(StoreError::Conflict(format!(
                    "step {} is {} now, not {}",
                    change.step_id, step.state, change.from
                )));
            }
            let (started_ms, usage) = match &change.started {
                Some((ms, usage)) => (Some(*ms), Some(serde_json::to_string(usage)?)),
                None => (None, None),
            };
            conn.prepare_cached(&format!(
                "UPDATE plan_steps SET state = ?3, owner_role = COALESCE(?4, owner_role), \
                 reason = COALESCE(?5, reason), started_at_ms = COALESCE(?6, started_at_ms), \
                 usage_at_start = COALESCE(?7, usage_at_start), updated_at = {NOW} \
                 WHERE party_id = ?1 AND step_id = ?2"
            ))?
            .execute(params![
                change.party_id,
                change.step_id,
                change.to,
                change.owner_role,
                change.reason,
                started_ms,
                usage
            ])?;
            let mut data = change.data.clone();
            if let Some(obj) = data.as_object_mut() {
                obj.insert("step_id".into(), Value::String(change.step_id.clone()));
                obj.insert("from".into(), change.from.as_str().into());
                obj.insert("to".into(), change.to.as_str().into());
            }
            append_event(conn, &party_event(&change.party_id, &change.event, data))?;
            load_step(conn, &change.party_id, &change.step_id)
        })
        .await
    }

    /// Records a decision, open for votes until its deadline.
    pub async fn propose_decision(&self, new: NewDecision) -> Result<DecisionRecord, StoreError> {
        self.write(move |conn| {
            let id = crate::new_id();
            conn.prepare_cached(&format!(
                "INSERT INTO decisions (id, party_id, topic, options, evidence, voters, step_id, \
                 proposed_by, deadline_ms, created_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, {NOW})"
            ))?
            .execute(params![
                id,
                new.party_id,
                new.topic,
                serde_json::to_string(&new.options)?,
                new.evidence,
                serde_json::to_string(&new.voters)?,
                new.step_id,
                new.proposed_by,
                new.deadline_ms
            ])?;
            append_event(
                conn,
                &party_event(
                    &new.party_id,
                    "decision_proposed",
                    serde_json::json!({"decision_id": id, "topic": new.topic,
                        "options": new.options, "voters": new.voters, "step_id": new.step_id,
                        "by": new.proposed_by}),
                ),
            )?;
            load_decision(conn, &id)
        })
        .await
    }

    /// Records a vote on an open (or tied) decision; a second vote by the same voter is refused.
    pub async fn vote(
        &self,
        decision_id: String,
        voter: String,
        session_id: Option<String>,
        option: String,
        rationale: Option<String>,
    ) -> Result<DecisionRecord, StoreError> {
        self.write(move |conn| {
            let d = load_decision(conn, &decision_id)?;
            if d.status == DecisionStatus::Committed {
                return Err(StoreError::Conflict(format!(
                    "decision {decision_id} is already committed ({})",
                    d.chosen.unwrap_or_default()
                )));
            }
            if d.votes.iter().any(|v| v.voter == voter) {
                return Err(StoreError::Conflict(format!(
                    "{voter} has already voted on decision {decision_id}"
                )));
            }
            conn.prepare_cached(&format!(
                "INSERT INTO decision_votes (decision_id, voter, session_id, option, rationale, \
                 created_at) VALUES (?1, ?2, ?3, ?4, ?5, {NOW})"
            ))?
            .execute(params![decision_id, voter, session_id, option, rationale])?;
            append_event(
                conn,
                &party_event(
                    &d.party_id,
                    "decision_voted",
                    serde_json::json!({"decision_id": decision_id, "voter": voter,
                                       "option": option, "rationale": rationale}),
                ),
            )?;
            load_decision(conn, &decision_id)
        })
        .await
    }

    /// Marks an open decision tied: it waits for the leader or the person to choose.
    pub async fn decision_tied(
        &self,
        decision_id: String,
        tied: Vec<String>,
    ) -> Result<DecisionRecord, StoreError> {
        self.write(move |conn| {
            let d = load_decision(conn, &decision_id)?;
            if d.status != DecisionStatus::Open {
                return Ok(d);
            }
            conn.prepare_cached("UPDATE decisions SET status = 'tied' WHERE id = ?1")?
                .execute([&decision_id])?;
            append_event(
                conn,
                &party_event(
                    &d.party_id,
                    "decision_tied",
                    serde_json::json!({"decision_id": decision_id, "tied": tied}),
                ),
            )?;
            load_decision(conn, &decision_id)
        })
        .await
    }

    /// Commits a decision (once: a committed one is a conflict).
    pub async fn commit_decision(
        &self,
        decision_id: String,
        chosen: String,
        how: String,
    ) -> Result<DecisionRecord, StoreError> {
        self.write(move |conn| {
            let d = load_decision(conn, &decision_id)?;
            if d.status == DecisionStatus::Committed {
                return Err(StoreError::Conflict(format!(
                    "decision {decision_id} is already committed ({})",
                    d.chosen.unwrap_or_default()
                )));
            }
            conn.prepare_cached(&format!(
                "UPDATE decisions SET status = 'committed', chosen = ?2, how = ?3, \
                 committed_at = {NOW} WHERE id = ?1"
            ))?
            .execute(params![decision_id, chosen, how])?;
            append_event(
                conn,
                &party_event(
                    &d.party_id,
                    "decision_committed",
                    serde_json::json!({"decision_id": decision_id, "topic": d.topic,
                                       "chosen": chosen, "how": how}),
                ),
            )?;
            load_decision(conn, &decision_id)
        })
        .await
    }

    /// Records where a committed decision's ADR was written (and the commit that holds it).
    pub async fn decision_recorded(
        &self,
        decision_id: String,
        adr_path: String,
        adr_commit: Option<String>,
    ) -> Result<DecisionRecord, StoreError> {
        self.write(move |conn| {
            let d = load_decision(conn, &decision_id)?;
            conn.prepare_cached(
                "UPDATE decisions SET adr_path = ?2, adr_commit = ?3 WHERE id = ?1",
            )?
            .execute(params![decision_id, adr_path, adr_commit])?;
            append_event(
                conn,
                &party_event(
                    &d.party_id,
                    "adr_written",
                    serde_json::json!({"decision_id": decision_id, "path": adr_path,
                                       "commit": adr_commit}),
                ),
            )?;
            load_decision(conn, &decision_id)
        })
        .await
    }

    pub fn get_decision(&self, decision_id: &str) -> Result<DecisionRecord, StoreError> {
        self.read(|conn| load_decision(conn, decision_id))
    }

    /// A party's decisions (or, with `None`, those not yet committed in every party), oldest
    /// first.
    pub fn list_decisions(
        &self,
        party_id: Option<&str>,
    ) -> Result<Vec<DecisionRecord>, StoreError> {
        self.read(|conn| {
            let ids: Vec<String> = conn
                .prepare_cached(
                    "SELECT id FROM decisions WHERE (?1 IS NOT NULL AND party_id = ?1) \
                     OR (?1 IS NULL AND status != 'committed') ORDER BY created_at, id",
                )?
                .query_map([party_id], |r| r.get(0))?
                .collect::<Result<_, _>>()?;
            ids.iter().map(|id| load_decision(conn, id)).collect()
        })
    }
}
