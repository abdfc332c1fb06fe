//! Approvals: permission requests waiting for a person, decided once (approve, deny, abort,
//! approve_pattern, or timeout → deny), and the rules that answer matching requests
//! automatically. Pattern matching itself is the daemon's; this module stores and orders.

use rusqlite::{Connection, OptionalExtension, Row, params};
use serde_json::Value;

use crate::events::append_event;
use crate::{
    Approval, ApprovalRule, ApprovalStatus, Decision, NewApproval, NewEvent, Store, StoreError,
    new_id,
};

const NOW: &str = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')";

const COLUMNS: &str = "id, request_key, project_id, session_id, run_id, party_id, role_name, \
    tool_name, input, subject, file_path, start_line, end_line, diff, is_dangerous, danger_reason, \
    status, decision, decided_by, reason, rule_id, expires_at_ms, created_at, decided_at, \
    outside_worktree";

fn from_row(r: &Row<'_>) -> rusqlite::Result<Approval> {
    let input: String = r.get(8)?;
    Ok(Approval {
        approval_id: r.get(0)?,
        request_key: r.get(1)?,
        project_id: r.get(2)?,
        session_id: r.get(3)?,
        run_id: r.get(4)?,
        party_id: r.get(5)?,
        role_name: r.get(6)?,
        tool_name: r.get(7)?,
        input: serde_json::from_str(&input).unwrap_or(Value::Null),
        subject: r.get(9)?,
        file_path: r.get(10)?,
        start_line: r.get(11)?,
        end_line: r.get(12)?,
        diff: r.get(13)?,
        is_dangerous: r.get(14)?,
        danger_reason: r.get(15)?,
        status: r.get(16)?,
        decision: r.get(17)?,
        decided_by: r.get(18)?,
        reason: r.get(19)?,
        rule_id: r.get(20)?,
        expires_at_ms: r.get(21)?,
        created_at: r.get(22)?,
        decided_at: r.get(23)?,
        outside_worktree: r.get(24)?,
    })
}

fn rule_from_row(r: &Row<'_>) -> rusqlite::Result<ApprovalRule> {
    Ok(ApprovalRule {
        rule_id: r.get(0)?,
        project_id: r.get(1)?,
        party_id: r.get(2)?,
        tool_name: r.get(3)?,
        pattern: r.get(4)?,
        created_by: r.get(5)?,
        created_at: r.get(6)?,
        revoked_at: r.get(7)?,
    })
}

fn load(conn: &Connection, id: &str) -> Result<Approval, StoreError> {
    conn.prepare_cached(&format!("SELECT {COLUMNS} FROM approvals WHERE id = ?1"))?
        .query_row([id], from_row)
        .optional()?
        .ok_or_else(|| StoreError::not_found("approval", id))
}

fn event(a: &Approval, kind: &str, data: Value) -> NewEvent {
    NewEvent {
        kind: kind.into(),
        project_id: Some(a.project_id.clone()),
        session_id: Some(a.session_id.clone()),
        party_id: a.party_id.clone(),
        data,
    }
}

/// Marks the requests of `run_id` still waiting for a person `expired` (each with an
/// `approval_expired` event); their ids. Runs inside the caller's write transaction.
pub(crate) fn expire_for_run(
    conn: &Connection,
    run_id: &str,
    why: &str,
) -> Result<Vec<String>, StoreError> {
    let ids: Vec<String> = conn
        .prepare_cached(
            "SELECT id FROM approvals WHERE run_id = ?1 AND status = 'pending' ORDER BY created_at, id",
        )?
        .query_map([run_id], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    for id in &ids {
        conn.prepare_cached(&format!(
            "UPDATE approvals SET status = 'expired', decision = 'expired', decided_by = 'troupe', \
             reason = ?2, decided_at = {NOW} WHERE id = ?1"
        ))?
        .execute(params![id, why])?;
        let a = load(conn, id)?;
        append_event(
            conn,
            &event(
                &a,
                "approval_expired",
                serde_json::json!({ "approval_id": a.approval_id, "run_id": run_id, "reason": why }),
            ),
        )?;
    }
    // Its questions to a person wait no longer either.
    let mut ids = ids;
    ids.extend(crate::questions::expire_for_run(conn, run_id)?);
    Ok(ids)
}

impl Store {
    /// Stores a request (or returns the one with the same key). Returns it and whether it is new.
    /// A request from a run that has already ended is stored `expired`: nobody waits for it.
    pub async fn create_approval(&self, new: NewApproval) -> Result<(Approval, bool), StoreError> {
        self.write(move |conn| {
            if let Some(key) = &new.request_key {
                let existing: Option<String> = conn
                    .prepare_cached("SELECT id FROM approvals WHERE session_id = ?1 AND request_key = ?2")?
                    .query_row(params![new.session_id, key], |r| r.get(0))
                    .optional()?;
                if let Some(id) = existing {
                    return Ok((load(conn, &id)?, false));
                }
            }
            let id = new_id();
            let (status, decision) = match &new.approved_by_rule {
                Some(_) => (ApprovalStatus::Approved, Some("rule")),
                None => (ApprovalStatus::Pending, None),
            };
            conn.prepare_cached(&format!(
                "INSERT INTO approvals (id, request_key, project_id, session_id, run_id, party_id, \
                 role_name, tool_name, input, subject, file_path, start_line, end_line, diff, \
                 is_dangerous, danger_reason, status, decision, rule_id, expires_at_ms, decided_at, \
                 decided_by, outside_worktree) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, \
                 ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, \
                 CASE WHEN ?19 IS NULL THEN NULL ELSE {NOW} END, \
                 CASE WHEN ?19 IS NULL THEN NULL ELSE 'rule' END, ?21)"
            ))?
            .execute(params![
                id,
                new.request_key,
                new.project_id,
                new.session_id,
                new.run_id,
                new.party_id,
                new.role_name,
                new.tool_name,
                serde_json::to_string(&new.input)?,
                new.subject,
                new.file_path,
                new.start_line,
                new.end_line,
                new.diff,
                new.is_dangerous,
                new.danger_reason,
                status,
                decision,
                new.approved_by_rule,
                new.expires_at_ms,
                new.outside_worktree
            ])?;
            let a = load(conn, &id)?;
            append_event(
                conn,
                &event(&a, "approval_requested", serde_json::json!({
                    "approval_id": id, "tool": a.tool_name, "subject": a.subject,
                    "auto_approved_by_rule": new.approved_by_rule,
                    "is_dangerous": a.is_dangerous, "danger_reason": a.danger_reason,
                })),
            )?;
            // Asked by a run that has already ended (a straggler of a stopped attempt).
            if a.status == ApprovalStatus::Pending && let Some(run) = &new.run_id {
                let ended: Option<String> = conn
                    .prepare_cached(
                        "SELECT status FROM agent_runs WHERE id = ?1 \
                         AND status NOT IN ('pending', 'running')",
                    )?
                    .query_row([run], |r| r.get(0))
                    .optional()?;
                if let Some(status) = ended {
                    expire_for_run(conn, run, &format!("the run that asked had ended ({status})"))?;
                    return Ok((load(conn, &id)?, true));
                }
            }
            Ok((a, true))
        })
        .await
    }

    pub fn get_approval(&self, id: &str) -> Result<Approval, StoreError> {
        self.read(|conn| load(conn, id))
    }

    /// Approvals, oldest first; empty filters match all, except that `expired` ones (whose run
    /// ended before anyone decided) are left out unless `status` asks for them or
    /// `include_expired` is set.
    pub fn list_approvals(
        &self,
        status: Option<ApprovalStatus>,
        project_id: Option<&str>,
        party_id: Option<&str>,
        session_id: Option<&str>,
        include_expired: bool,
    ) -> Result<Vec<Approval>, StoreError> {
        self.read(|conn| {
            let rows = conn
                .prepare_cached(&format!(
                    "SELECT {COLUMNS} FROM approvals WHERE (?1 IS NULL OR status = ?1) \
                     AND (?1 IS NOT NULL OR ?5 OR status <> 'expired') \
                     AND (?2 IS NULL OR project_id = ?2) AND (?3 IS NULL OR party_id = ?3) \
                     AND (?4 IS NULL OR session_id = ?4) ORDER BY created_at, id"
                ))?
                .query_map(
                    params![status, project_id, party_id, session_id, include_expired],
                    from_row,
                )?
                .collect::<Result<_, _>>()?;
            Ok(rows)
        })
    }

    /// Records a decision on a pending request. Refused when it is already decided, or when the
    /// same worker has an older request still pending (requests are answered in order).
    pub async fn decide_approval(&self, d: Decision) -> Result<Approval, StoreError> {
        self.write(move |conn| {
            let a = load(conn, &d.approval_id)?;
            if a.status == ApprovalStatus::Expired {
                return Err(StoreError::Conflict(format!(
                    "approval {} has expired: {}; nothing waits for this answer any more",
                    a.approval_id,
                    a.reason.as_deref().unwrap_or("the run that asked ended")
                )));
            }
            if a.status != ApprovalStatus::Pending {
                return Err(StoreError::Conflict(format!(
                    "approval {} is already {} ({})",
                    a.approval_id,
                    a.status,
                    a.decision.as_deref().unwrap_or("-")
                )));
            }
            let older: Option<String> = if !d.in_order {
                None
            } else {
                conn
                .prepare_cached(
                    "SELECT id FROM approvals WHERE session_id = ?1 AND status = 'pending' \
                     AND (created_at, id) < (?2, ?3) ORDER BY created_at, id LIMIT 1",
                )?
                .query_row(params![a.session_id, a.created_at, a.approval_id], |r| r.get(0))
                .optional()?
            };
            if let Some(older) = older {
                return Err(StoreError::Conflict(format!(
                    "session {} asked for approval {older} first: decide that one before {}",
                    a.session_id, a.approval_id
                )));
            }
            let mut rule_id = None;
            if let Some((tool, pattern, party)) = &d.new_rule {
                let id = new_id();
                conn.prepare_cached(
                    "INSERT INTO approval_rules (id, project_id, party_id, tool_name, pattern, created_by) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                )?
                .execute(params![id, a.project_id, party, tool, pattern, d.decided_by])?;
                rule_id = Some(id);
            }
            conn.prepare_cached(&format!(
                "UPDATE approvals SET status = ?2, decision = ?3, decided_by = ?4, reason = ?5, \
                 rule_id = coalesce(?6, rule_id), decided_at = {NOW} WHERE id = ?1"
            ))?
            .execute(params![a.approval_id, d.status, d.decision, d.decided_by, d.reason, rule_id])?;
            let decided = load(conn, &a.approval_id)?;
            append_event(
                conn,
                &event(&decided, "approval_decided", serde_json::json!({
                    "approval_id": decided.approval_id, "status": decided.status,
                    "decision": decided.decision, "decided_by": decided.decided_by,
                    "reason": decided.reason, "rule_id": decided.rule_id,
                })),
            )?;
            Ok(decided)
        })
        .await
    }

    /// Pending requests whose deadline has passed (oldest first).
    pub fn expired_approvals(&self, now_ms: i64) -> Result<Vec<Approval>, StoreError> {
        self.read(|conn| {
            let rows = conn
                .prepare_cached(&format!(
                    "SELECT {COLUMNS} FROM approvals WHERE status = 'pending' AND expires_at_ms <= ?1 \
                     ORDER BY created_at, id"
                ))?
                .query_map([now_ms], from_row)?
                .collect::<Result<_, _>>()?;
            Ok(rows)
        })
    }

    /// Rules in force for a project (and, when given, a party: project-wide rules apply too).
    pub fn active_rules(
        &self,
        project_id: &str,
        party_id: Option<&str>,
    ) -> Result<Vec<ApprovalRule>, StoreError> {
        self.read(|conn| {
            let rows = conn
                .prepare_cached(
                    "SELECT id, project_id, party_id, tool_name, pattern, created_by, created_at, \
                     revoked_at FROM approval_rules WHERE project_id = ?1 AND revoked_at IS NULL \
                     AND (party_id IS NULL OR party_id = ?2) ORDER BY created_at, id",
                )?
                .query_map(params![project_id, party_id], rule_from_row)?
                .collect::<Result<_, _>>()?;
            Ok(rows)
        })
    }

    /// Every rule (revoked ones too), optionally of one project.
    pub fn list_rules(&self, project_id: Option<&str>) -> Result<Vec<ApprovalRule>, StoreError> {
        self.read(|conn| {
            let rows = conn
                .prepare_cached(
                    "SELECT id, project_id, party_id, tool_name, pattern, created_by, created_at, \
                     revoked_at FROM approval_rules WHERE ?1 IS NULL OR project_id = ?1 \
                     ORDER BY created_at, id",
                )?
                .query_map([project_id], rule_from_row)?
                .collect::<Result<_, _>>()?;
            Ok(rows)
        })
    }

    /// Revokes a rule; later requests are no longer approved by it.
    pub async fn revoke_rule(&self, rule_id: String) -> Result<ApprovalRule, StoreError> {
        self.write(move |conn| {
            let changed = conn
                .prepare_cached(&format!(
                    "UPDATE approval_rules SET revoked_at = {NOW} WHERE id = ?1 AND revoked_at IS NULL"
                ))?
                .execute([&rule_id])?;
            let rule = conn
                .prepare_cached(
                    "SELECT id, project_id, party_id, tool_name, pattern, created_by, created_at, \
                     revoked_at FROM approval_rules WHERE id = ?1",
                )?
                .query_row([&rule_id], rule_from_row)
                .optional()?
                .ok_or_else(|| StoreError::not_found("approval rule", &rule_id))?;
            if changed == 0 {
                return Err(StoreError::Conflict(format!("approval rule {rule_id} is already revoked")));
            }
            append_event(
                conn,
                &NewEvent {
                    kind: "approval_rule_revoked".into(),
                    project_id: Some(rule.project_id.clone()),
                    party_id: rule.party_id.clone(),
                    data: serde_json::json!({ "rule_id": rule_id }),
                    ..NewEvent::default()
                },
            )?;
            Ok(rule)
        })
        .await
    }
}
