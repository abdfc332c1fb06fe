//! One inbox: everything that waits for a person, whatever door it came from, derived from live
//! state — pending approvals, agents' questions (`ask_person`), paused roles (budget trips included), escalated tasks, decisions
//! the person votes on or must break, best-of-N picks, merge conflicts left by a landing — each
//! with a stable id and how it is answered. An item leaves when it is answered (the state it was
//! derived from changed) or is dismissed. `subscribe_inbox` sends the whole list at each change
//! (the store's `Topic::Inbox`, bumped by the commits that change what it is made of).

use std::collections::HashSet;

use serde_json::{Value, json};
use troupe_api::ApiError;
use troupe_api::types::{InboxAnswer, InboxItem};
use troupe_model::{ApprovalStatus, DecisionStatus, PartyStatus};
use troupe_store::{PartyRow, Store};

use crate::collab::{PERSON, PartyView};

/// Landing events read per party (the newest) when looking for merge conflicts still open.
const LANDINGS_READ: i64 = 50;

fn answer(op: &str, params: Value, field: Option<&str>, choices: Vec<Value>) -> InboxAnswer {
    InboxAnswer {
        op: op.into(),
        params,
        choice_field: field.map(String::from),
        choices,
    }
}

/// The inbox of one project (`Some(Some(id))`), of a project never seen (`Some(None)`: empty),
/// or of every project (`None`), oldest first.
pub fn items(
    store: &Store,
    layout: &troupe_api::layout::Layout,
    project: Option<Option<String>>,
) -> Result<Vec<InboxItem>, ApiError> {
    let project = match project {
        Some(None) => return Ok(Vec::new()),
        Some(Some(id)) => Some(id),
        None => None,
    };
    let mine = |p: &str| project.as_deref().is_none_or(|id| id == p);
    let dismissed = store.dismissed_inbox_items()?;
    let mut out = Vec::new();
    approvals(store, project.as_deref(), &mut out)?;
    questions(store, project.as_deref(), &mut out)?;
    let parties = store.list_parties_brief(project.as_deref(), None)?;
    for row in parties.iter().filter(|r| r.status == PartyStatus::Running) {
        paused_roles(row, &mut out);
    }
    for t in store.escalated_tasks()? {
        if mine(&t.project_id) {
            // Each escalation is its own item: a task escalated again after a dismissal shows.
            let id = format!("escalation:{}:{}", t.task_id, t.updated_at);
            out.push(InboxItem {
                item_id: id.clone(),
                kind: "escalation".into(),
                project_id: Some(t.project_id.clone()),
                party_id: t.party_id.clone(),
                session_id: None,
                title: format!("task \"{}\" needs you", t.title),
                detail: t.escalation_reason.clone(),
                since: t.updated_at.clone(),
                answer: answer(
                    "dismiss_inbox_item",
                    json!({ "item_id": id }),
                    None,
                    Vec::new(),
                ),
            });
        }
    }
    let by_id = |id: &str| parties.iter().find(|p| p.party_id == id);
    for d in store.list_decisions(None)? {
        let Some(row) = by_id(&d.party_id).filter(|r| r.status == PartyStatus::Running) else {
            continue; // another project's, or a party that has ended
        };
        let voted = d.votes.iter().any(|v| v.voter == PERSON);
        let (title, op, field) = match d.status {
            DecisionStatus::Tied => (
                format!("decision \"{}\" is tied: choose", d.topic),
                "commit_decision",
                "option",
            ),
            DecisionStatus::Open if d.voters.iter().any(|v| v == PERSON) && !voted => {
                (format!("vote on \"{}\"", d.topic), "vote", "option")
            }
            _ => continue,
        };
        out.push(InboxItem {
            item_id: format!("decision:{}", d.decision_id),
            kind: "decision".into(),
            project_id: Some(row.project_id.clone()),
            party_id: Some(d.party_id.clone()),
            session_id: None,
            title,
            detail: d.evidence.clone(),
            since: d.created_at.clone(),
            answer: answer(
                op,
                json!({ "decision_id": d.decision_id }),
                Some(field),
                d.options.iter().map(|o| json!(o)).collect(),
            ),
        });
    }
    for p in store.pending_picks()? {
        // A finished best-of-N party still lands its pick; a cancelled or failed one does not.
        let Some(row) = by_id(&p.party_id)
            .filter(|r| matches!(r.status, PartyStatus::Running | PartyStatus::Completed))
        else {
            continue;
        };
        // A judge still at work picks by itself.
        let judging = p
            .judge_run_id
            .as_deref()
            .is_some_and(|r| store.get_run(r).is_ok_and(|r| !r.status.is_finished()));
        if judging {
            continue;
        }
        // The attempts that have a branch to land.
        let attempts: Vec<i64> = PartyView::load(store, &p.party_id)
            .map(|v| {
                crate::landing::checkouts(&v)
                    .into_iter()
                    .filter(|c| c.member.role_name == p.role_name)
                    .map(|c| c.member.instance_index)
                    .collect()
            })
            .unwrap_or_default();
        let count = attempts.len();
        out.push(InboxItem {
            item_id: format!("pick:{}:{}", p.party_id, p.role_name),
            kind: "pick".into(),
            project_id: Some(row.project_id.clone()),
            party_id: Some(p.party_id.clone()),
            session_id: None,
            title: format!(
                "{}: pick the attempt of {} that lands",
                row.name, p.role_name
            ),
            detail: Some(format!("{count} attempts")),
            since: p.created_at.clone(),
            answer: answer(
                "pick_member",
                json!({ "party_id": p.party_id, "role": p.role_name }),
                Some("index"),
                attempts.iter().map(|i| json!(i)).collect(),
            ),
        });
    }
    // Only parties a landing left its integration branch for (a file beside it; cleanup
    // removes it): the timeline is read for those alone.
    for row in parties
        .iter()
        .filter(|r| crate::landing::integration_left(layout, r).is_some())
    {
        merge_conflicts(store, row, &mut out)?;
    }
    out.extend(crate::schedules::inbox_items(store, project.as_deref())?);
    for link in store.forge_links_in(&["ready"])? {
        let Some(row) = by_id(&link.party_id) else {
            continue; // another project's
        };
        let number = link.pull_number.unwrap_or_default();
        out.push(InboxItem {
            item_id: format!(
                "pull_request_ready:{}:{}",
                link.party_id,
                link.head_sha.clone().unwrap_or_default()
            ),
            kind: "pull_request_ready".into(),
            project_id: Some(row.project_id.clone()),
            party_id: Some(link.party_id.clone()),
            session_id: None,
            title: format!(
                "{}: pull request #{number} on {} is ready to merge",
                row.name, link.repo
            ),
            detail: link.pull_url.clone(),
            since: link.updated_at.clone(),
            answer: answer(
                "merge_pull_request",
                json!({ "party_id": link.party_id }),
                None,
                Vec::new(),
            ),
        });
    }
    out.retain(|i| !dismissed.contains(&i.item_id));
    out.sort_by(|a, b| a.since.cmp(&b.since).then(a.item_id.cmp(&b.item_id)));
    Ok(out)
}

fn approvals(
    store: &Store,
    project: Option<&str>,
    out: &mut Vec<InboxItem>,
) -> Result<(), ApiError> {
    for a in store.list_approvals(Some(ApprovalStatus::Pending), project, None, None, false)? {
        let mut choices = vec![json!("approve"), json!("deny")];
        if !a.outside_worktree && !a.is_dangerous {
            choices.push(json!("approve_pattern"));
        }
        choices.push(json!("abort"));
        let who = a
            .role_name
            .clone()
            .unwrap_or_else(|| format!("session {}", a.session_id));
        out.push(InboxItem {
            item_id: format!("approval:{}", a.approval_id),
            kind: "approval".into(),
            project_id: Some(a.project_id.clone()),
            party_id: a.party_id.clone(),
            session_id: Some(a.session_id.clone()),
            title: format!("{who} asks to use {}: {}", a.tool_name, a.subject),
            detail: a.danger_reason.clone().or(a.diff.clone()),
            since: a.created_at.clone(),
            answer: answer(
                "decide_approval",
                json!({ "approval_id": a.approval_id }),
                Some("decision"),
                choices,
            ),
        });
    }
    Ok(())
}

fn questions(
    store: &Store,
    project: Option<&str>,
    out: &mut Vec<InboxItem>,
) -> Result<(), ApiError> {
    for q in store.pending_questions(project)? {
        let who = q
            .role_name
            .clone()
            .unwrap_or_else(|| format!("session {}", q.session_id));
        out.push(InboxItem {
            item_id: format!("question:{}", q.question_id),
            kind: "question".into(),
            project_id: Some(q.project_id.clone()),
            party_id: q.party_id.clone(),
            session_id: Some(q.session_id.clone()),
            title: format!("{who} asks: {}", q.question),
            detail: None,
            since: q.created_at.clone(),
            // Without choices the answer is the person's own words.
            answer: answer(
                "answer_question",
                json!({ "question_id": q.question_id }),
                Some("answer"),
                q.choices.iter().map(|c| json!(c)).collect(),
            ),
        });
    }
    Ok(())
}

fn paused_roles(row: &PartyRow, out: &mut Vec<InboxItem>) {
    for role in &row.paused {
        out.push(InboxItem {
            item_id: format!("paused_role:{}:{role}", row.party_id),
            kind: "paused_role".into(),
            project_id: Some(row.project_id.clone()),
            party_id: Some(row.party_id.clone()),
            session_id: None,
            title: format!("{}: role {role} is paused", row.name),
            detail: row.status_reason.clone(),
            since: row.created_at.clone(),
            answer: answer(
                "signal_role",
                json!({ "party_id": row.party_id, "role_name": role }),
                Some("signal"),
                vec![json!("proceed"), json!("retry"), json!("abort")],
            ),
        });
    }
}

/// Members a party's last landing left out with conflicts (until a later landing takes them).
fn merge_conflicts(
    store: &Store,
    row: &PartyRow,
    out: &mut Vec<InboxItem>,
) -> Result<(), ApiError> {
    let events = store.latest_party_events(
        &row.party_id,
        &["merge_conflict", "party_landed"],
        LANDINGS_READ,
    )?;
    let (conflicts, landed): (Vec<_>, Vec<_>) =
        events.into_iter().partition(|e| e.kind == "merge_conflict");
    if conflicts.is_empty() {
        return Ok(());
    }
    let mut seen = HashSet::new();
    // Newest first: a member's latest conflict stands for it.
    for e in &conflicts {
        let (role, index) = (
            e.data["role"].as_str().unwrap_or(""),
            e.data["index"].as_i64().unwrap_or(0),
        );
        if !seen.insert((role.to_string(), index)) {
            continue; // an older conflict of the same member
        }
        let taken_later = landed.iter().any(|l| {
            l.seq > e.seq
                && l.data["members"].as_array().is_some_and(|ms| {
                    ms.iter().any(|m| {
                        m["role"] == role && m["index"] == index && m["outcome"] == "integrated"
                    })
                })
        });
        if taken_later {
            continue;
        }
        let id = format!("merge_conflict:{}:{role}#{index}:{}", row.party_id, e.seq);
        let files: Vec<&str> = e.data["files"]
            .as_array()
            .map(|f| f.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        out.push(InboxItem {
            item_id: id.clone(),
            kind: "merge_conflict".into(),
            project_id: Some(row.project_id.clone()),
            party_id: Some(row.party_id.clone()),
            session_id: None,
            title: format!(
                "{}: {role}#{index} conflicts and was left out of the landing",
                row.name
            ),
            detail: Some(format!("conflicting files: {}", files.join(", "))),
            since: e.at.clone(),
            answer: answer(
                "dismiss_inbox_item",
                json!({ "item_id": id }),
                None,
                Vec::new(),
            ),
        });
    }
    Ok(())
}
