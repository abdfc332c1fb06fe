//! The collaboration protocol's daemon side (seed 004): who a caller is in a party (a role, the
//! leader, or the person), telling roles and the person what happened, the step tool policies
//! every door asks, step budgets, closing decisions (at their window's end or once everyone has
//! voted) and writing a committed decision as an ADR on the party's branch. The rules themselves
//! are the engine's (`troupe_engine::collab`); the handlers are in `ops::collab`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use troupe_api::ApiError;
use troupe_api::layout::Layout;
use troupe_engine::collab::{
    self as rules, AdrInput, StepSpec, StepState, Tally, ToolPolicy, ToolVerdict,
};
use troupe_engine::{Isolation, Spent};
use troupe_model::{DecisionStatus, MemberStatus, PartyStatus};
use troupe_store::{
    DecisionRecord, NewNotification, PlanStep, Priority, Recipients, StepChange, Store, Usage,
};

use crate::hub::Hub;
use crate::orchestrator::{Command, Orchestrator, party_label};
pub use crate::party::PartyView;

/// Who a person is, as a voter, reviewer or proposer.
pub const PERSON: &str = "person";

/// What the collaboration code needs of the daemon (cheap to clone, for timers); the daemon
/// makes one with `Ctx::of`.
#[derive(Clone)]
pub struct Ctx {
    pub store: Store,
    pub hub: Arc<Hub>,
    pub layout: Layout,
    pub orchestrator: Orchestrator,
    /// What wraps the commands run for members (tests of their work).
    pub sandbox: crate::sandbox::Sandbox,
    /// The forge (pull requests).
    pub forges: std::sync::Arc<crate::forge::Forges>,
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Who is calling, in a party.
#[derive(Debug, Clone)]
pub struct Caller {
    /// Its role, or "person".
    pub name: String,
    pub session_id: Option<String>,
    pub is_leader: bool,
}

impl Caller {
    pub fn is_person(&self) -> bool {
        self.session_id.is_none()
    }

    /// The leader, or the person.
    pub fn may_lead(&self) -> bool {
        self.is_person() || self.is_leader
    }
}

/// The caller of a party operation: a member's session (as its role), or nobody (the person).
pub fn caller(party: &PartyView, session_id: Option<&str>) -> Result<Caller, ApiError> {
    let Some(s) = session_id else {
        return Ok(Caller {
            name: PERSON.into(),
            session_id: None,
            is_leader: false,
        });
    };
    let member = party
        .members
        .iter()
        .find(|m| m.session_id.as_deref() == Some(s))
        .ok_or_else(|| {
            ApiError::Forbidden(format!(
                "session {s} is not a member of party {}",
                party.row.party_id
            ))
        })?;
    Ok(Caller {
        name: member.role_name.clone(),
        session_id: Some(s.to_string()),
        is_leader: party.leader() == Some(member.role_name.as_str()),
    })
}

/// Sends a party notice to a role's running members; false when none is running.
pub async fn tell_role(ctx: &Ctx, party: &PartyView, role: &str, text: &str) -> bool {
    let sessions = party.live_sessions(role);
    if sessions.is_empty() {
        return false;
    }
    for s in sessions {
        send(ctx, party, Recipients::Session(s), text).await;
    }
    true
}

/// Sends a notice to every member of the party.
pub async fn tell_party(ctx: &Ctx, party: &PartyView, text: &str) {
    send(
        ctx,
        party,
        Recipients::Party(party.row.party_id.clone()),
        text,
    )
    .await;
}

/// Sends a party notice (prefixed with the party's name); false if it was not delivered.
pub async fn send(ctx: &Ctx, party: &PartyView, to: Recipients, text: &str) -> bool {
    let result = crate::system::send_system(
        &ctx.store,
        &ctx.hub,
        &party.row.repo_root,
        to,
        format!("[{}] {text}", party.row.name),
        Priority::High,
        None,
    )
    .await;
    if let Err(e) = &result {
        tracing::warn!(party = %party.row.party_id, error = %e, "collaboration notice not delivered");
    }
    result.is_ok()
}

/// A durable notification for the person (what the editor's inbox shows).
pub async fn tell_person(
    ctx: &Ctx,
    party: &PartyView,
    kind: &str,
    text: &str,
    data: serde_json::Value,
) {
    let n = NewNotification {
        project_id: Some(party.row.project_id.clone()),
        party_id: Some(party.row.party_id.clone()),
        kind: kind.into(),
        text: format!("{}: {text}", party.row.name),
        data,
    };
    if let Err(e) = ctx.store.add_notification(n).await {
        tracing::warn!(party = %party.row.party_id, error = %e, "notification lost");
    }
}

/// Tells the running leader, or the person when there is none.
pub async fn tell_leader_or_person(ctx: &Ctx, party: &PartyView, kind: &str, text: &str) {
    let told = match party.leader() {
        Some(leader) => tell_role(ctx, party, leader, text).await,
        None => false,
    };
    if !told {
        tell_person(
            ctx,
            party,
            kind,
            text,
            json!({"party_id": party.row.party_id}),
        )
        .await;
    }
}

/// A step's spec, as committed.
pub fn spec_of(step: &PlanStep) -> Result<StepSpec, ApiError> {
    serde_json::from_value(step.spec.clone())
        .map_err(|e| ApiError::Internal(format!("step {} unreadable: {e}", step.step_id)))
}

pub fn state_of(step: &PlanStep) -> StepState {
    step.state
}

/// The usage of a role's members together (what a step's budget counts from).
pub fn role_usage(store: &Store, party: &PartyView, role: &str) -> Usage {
    let mut total = Usage::default();
    for run in party.role_runs(role) {
        if let Ok(u) = store.usage("run", &run) {
            total.input_tokens += u.input_tokens;
            total.output_tokens += u.output_tokens;
            total.cost_usd += u.cost_usd;
        }
    }
    total
}

/// The steps a session is working on now: the committed plan's in-progress steps its role owns.
/// A subagent (started by a member, in no party itself) works under its member's steps: the
/// session's ancestors are searched for the first party member, a few levels at most.
fn active_steps(store: &Store, session_id: &str) -> Option<(PartyView, String, Vec<PlanStep>)> {
    let mut at = store.get_session(session_id).ok()?;
    // The member's role from its own run (an index lookup), not from the party's member list:
    // this is asked at every tool call and every `complete`, in parties of any size.
    let (party_id, role) = loop {
        if let Some(party_id) = &at.party_id
            && let Ok(Some(run)) = store.run_of_session(&at.session_id)
            && run.party_id.as_deref() == Some(party_id.as_str())
            && let Some(role) = run.role_name.clone()
        {
            break (party_id.clone(), role);
        }
        if at.agent_depth > 8 {
            return None;
        }
        at = store.get_session(at.parent_session_id.as_deref()?).ok()?;
    };
    let steps: Vec<PlanStep> = store
        .plan_steps(&party_id)
        .ok()?
        .into_iter()
        .filter(|s| s.owner_role == role && state_of(s).is_active())
        .collect();
    if steps.is_empty() {
        return None;
    }
    let party = PartyView::load(store, &party_id).ok()?;
    Some((party, role, steps))
}

/// What the tool policies of the session's active steps say of `tool`, and the steps that
/// said it.
pub fn tool_verdict(store: &Store, session_id: &str, tool: &str) -> (ToolVerdict, Vec<String>) {
    let Some((_, _, steps)) = active_steps(store, session_id) else {
        return (ToolVerdict::Default, Vec::new());
    };
    let mut verdicts = Vec::new();
    let mut by = Vec::new();
    for step in &steps {
        let Ok(spec) = spec_of(step) else { continue };
        let v = spec.tool_policy.verdict(&step.step_id, tool);
        if v != ToolVerdict::Default {
            by.push(step.step_id.clone());
        }
        verdicts.push(v);
    }
    (ToolPolicy::combine(verdicts), by)
}

/// Checks the budgets of the steps a run's session is working on; a step over budget is
/// blocked and its owner's run stopped (the member pauses: not a crash).
pub async fn check_step_budgets(ctx: &Ctx, run_id: &str) {
    let Ok(run) = ctx.store.get_run(run_id) else {
        return;
    };
    if run.status.is_finished() {
        return;
    }
    let Some((party, role, steps)) = active_steps(&ctx.store, &run.session_id) else {
        return;
    };
    for step in steps {
        let Ok(spec) = spec_of(&step) else { continue };
        let Some(budget) = &spec.budget else { continue };
        let now = role_usage(&ctx.store, &party, &role);
        let base: Usage = serde_json::from_value(step.usage_at_start.clone()).unwrap_or_default();
        let files = if budget.counts_files() {
            crate::budgets::count_files(run.workdir.as_deref(), &party.row.repo_root).await
        } else {
            None
        };
        let spent = Spent {
            input_tokens: now.input_tokens - base.input_tokens,
            output_tokens: now.output_tokens - base.output_tokens,
            cost_usd: now.cost_usd - base.cost_usd,
            secs: step
                .started_at_ms
                .map(|s| (now_ms() - s).max(0) as f64 / 1000.0),
            files_changed: files,
        };
        if let Some(why) = budget.exceeded(&spent) {
            trip_step(ctx, &party, &step, &why).await;
        }
    }
}

/// A step went over its budget: blocked, its owner's runs stopped (their role pauses), the
/// leader and the person told.
async fn trip_step(ctx: &Ctx, party: &PartyView, step: &PlanStep, why: &str) {
    let change = StepChange {
        party_id: party.row.party_id.clone(),
        step_id: step.step_id.clone(),
        from: step.state,
        to: StepState::Blocked,
        owner_role: None,
        reason: Some(format!("over its budget: {why}")),
        started: None,
        event: "step_budget_tripped".into(),
        data: json!({"reason": why, "owner_role": step.owner_role}),
    };
    // Moved already (by the owner, or by another check): nothing to do.
    if ctx.store.move_step(change).await.is_err() {
        return;
    }
    for m in party
        .members
        .iter()
        .filter(|m| m.role_name == step.owner_role && m.status == MemberStatus::Running)
    {
        if let Some(run_id) = &m.agent_run_id {
            ctx.orchestrator.tell(Command::BudgetTripped {
                run_id: run_id.clone(),
                reason: format!("step {}: {why}", step.step_id),
            });
        }
    }
    let text = format!(
        "step {} ({}) is over its budget: {why}. It is blocked and {} paused; \
         signal_role retry, or hand the step off.",
        step.step_id, step.owner_role, step.owner_role
    );
    tell_leader_or_person(ctx, party, "step_budget_tripped", &text).await;
    if party.leader().is_some() {
        tell_person(
            ctx,
            party,
            "step_budget_tripped",
            &text,
            json!({"party_id": party.row.party_id, "step_id": step.step_id}),
        )
        .await;
    }
}

/// Stops a step's owner once the step's wall-time budget has passed (if it is still being
/// worked on by then).
pub fn arm_step_clock(ctx: Ctx, party_id: String, step_id: String) {
    let Ok(step) = ctx.store.plan_step(&party_id, &step_id) else {
        return;
    };
    let Some(max) = spec_of(&step)
        .ok()
        .and_then(|s| s.budget)
        .and_then(|b| b.max_secs)
    else {
        return;
    };
    let Some(started) = step.started_at_ms else {
        return;
    };
    let due = started.saturating_add((max * 1000.0) as i64);
    tokio::spawn(async move {
        let wait = u64::try_from(due - now_ms()).unwrap_or(0);
        tokio::time::sleep(Duration::from_millis(wait)).await;
        let Ok(now) = ctx.store.plan_step(&party_id, &step_id) else {
            return;
        };
        // Still the same stretch of work (not restarted or moved since).
        if now.started_at_ms != Some(started) || !state_of(&now).is_active() {
            return;
        }
        let Ok(party) = PartyView::load(&ctx.store, &party_id) else {
            return;
        };
        let why = format!(
            "{:.0} s spent, the budget is {max} s",
            (now_ms() - started) as f64 / 1000.0
        );
        trip_step(&ctx, &party, &now, &why).await;
    });
}

/// Closes a decision if it can be: every voter voted, or (`window_closed`) its window ended.
/// A majority commits it; a tie goes to the leader's vote, else waits for the leader or the
/// person (`commit_decision`).
pub async fn settle(
    ctx: &Ctx,
    decision_id: &str,
    window_closed: bool,
) -> Result<DecisionRecord, ApiError> {
    let d = ctx.store.get_decision(decision_id)?;
    if d.status != DecisionStatus::Open {
        return Ok(d);
    }
    let all_voted = d
        .voters
        .iter()
        .all(|v| d.votes.iter().any(|vote| &vote.voter == v));
    if !all_voted && !window_closed {
        return Ok(d);
    }
    let party = PartyView::load(&ctx.store, &d.party_id)?;
    let breaker = party.leader().unwrap_or(PERSON).to_string();
    let votes: Vec<(String, String)> = d
        .votes
        .iter()
        .map(|v| (v.voter.clone(), v.option.clone()))
        .collect();
    let cast = votes.len();
    let voters = d.voters.len();
    match rules::tally(&d.options, &votes, Some(&breaker)) {
        Tally::Chosen { option, tie_broken } => {
            let how = if tie_broken {
                format!("a tie broken by the {breaker}'s vote; {cast} of {voters} voted")
            } else if all_voted {
                format!("majority: all {voters} voters voted")
            } else {
                format!("majority when the window closed: {cast} of {voters} voted")
            };
            match commit(ctx, &party, &d.decision_id, option, how).await {
                // Closed meanwhile (a last vote and the window's end at once): it stands.
                Err(ApiError::Conflict(_)) => Ok(ctx.store.get_decision(&d.decision_id)?),
                other => other,
            }
        }
        Tally::Tied(tied) => {
            let d = ctx
                .store
                .decision_tied(d.decision_id.clone(), tied.clone())
                .await?;
            let text = format!(
                "decision {} ({}) is tied between {}: choose with commit_decision",
                d.decision_id,
                d.topic,
                tied.join(", ")
            );
            tell_leader_or_person(ctx, &party, "decision_tied", &text).await;
            Ok(d)
        }
    }
}

/// Commits a decision, writes its ADR on the party's branch and tells the party. A step the
/// decision was raised for is unblocked.
pub async fn commit(
    ctx: &Ctx,
    party: &PartyView,
    decision_id: &str,
    option: String,
    how: String,
) -> Result<DecisionRecord, ApiError> {
    let d = ctx
        .store
        .commit_decision(decision_id.to_string(), option.clone(), how)
        .await?;
    let d = match write_adr(ctx, party, &d).await {
        Ok((path, commit)) => {
            ctx.store
                .decision_recorded(d.decision_id.clone(), path, commit)
                .await?
        }
        Err(e) => {
            tracing::warn!(decision = %d.decision_id, error = %e, "ADR not written");
            tell_person(
                ctx,
                party,
                "adr_failed",
                &format!("the ADR of decision {} was not written: {e}", d.topic),
                json!({"decision_id": d.decision_id}),
            )
            .await;
            d
        }
    };
    if let Some(step_id) = &d.step_id
        && let Ok(step) = ctx.store.plan_step(&party.row.party_id, step_id)
        && state_of(&step) == StepState::Blocked
    {
        // Work resumes: its budget counts from now, as after a start.
        let usage = serde_json::to_value(role_usage(&ctx.store, party, &step.owner_role))
            .unwrap_or_default();
        let change = StepChange {
            party_id: party.row.party_id.clone(),
            step_id: step_id.clone(),
            from: step.state,
            to: StepState::InProgress,
            owner_role: None,
            reason: Some(format!("decided: {option}")),
            started: Some((now_ms(), usage)),
            event: "step_unblocked".into(),
            data: json!({"decision_id": d.decision_id, "chosen": option}),
        };
        match ctx.store.move_step(change).await {
            Ok(_) => arm_step_clock(ctx.clone(), party.row.party_id.clone(), step_id.clone()),
            Err(e) => {
                tracing::debug!(step = %step_id, error = %e, "step moved before its decision")
            }
        }
    }
    tell_party(
        ctx,
        party,
        &format!(
            "decision {}: {} → {} ({}){}",
            d.decision_id,
            d.topic,
            option,
            d.how.clone().unwrap_or_default(),
            d.adr_path
                .as_deref()
                .map(|p| format!("; recorded in {p}"))
                .unwrap_or_default()
        ),
    )
    .await;
    Ok(d)
}

/// Writes the decision's ADR (`docs/adr/NNNN-<slug>.md`) in the party's checkout and commits
/// it on the party's branch (in the project itself when it is not a git repository, uncommitted).
async fn write_adr(
    ctx: &Ctx,
    party: &PartyView,
    d: &DecisionRecord,
) -> Result<(String, Option<String>), String> {
    // One ADR at a time: two decisions committed at once would take the same number (and
    // git's index lock).
    static ADR_LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let _one_at_a_time = ADR_LOCK.lock().await;
    let root = PathBuf::from(&party.row.repo_root);
    let in_git = troupe_worktree::repo_root(&root).is_ok();
    let checkout = if in_git {
        crate::orchestrator::isolate(
            &ctx.layout,
            &root,
            Isolation::Worktree,
            &party_label(&party.row),
            "adr",
            0,
        )
        .await?
        .0
    } else {
        root
    };
    let votes: Vec<(String, String, String)> = d
        .votes
        .iter()
        .map(|v| {
            (
                v.voter.clone(),
                v.option.clone(),
                v.rationale.clone().unwrap_or_default(),
            )
        })
        .collect();
    let (topic, party_name, evidence, options, chosen, how) = (
        d.topic.clone(),
        party.row.name.clone(),
        d.evidence.clone(),
        d.options.clone(),
        d.chosen.clone().unwrap_or_default(),
        d.how.clone().unwrap_or_default(),
    );
    let date = d
        .committed_at
        .clone()
        .unwrap_or_default()
        .chars()
        .take(10)
        .collect::<String>();
    tokio::task::spawn_blocking(move || {
        let dir = checkout.join("docs").join("adr");
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        // Never out of the checkout (a `docs` or `docs/adr` symlink pointing elsewhere).
        let inside = match (dir.canonicalize(), checkout.canonicalize()) {
            (Ok(d), Ok(c)) => d.starts_with(c),
            _ => false,
        };
        if !inside {
            return Err(format!("{} leads out of the checkout", dir.display()));
        }
        let number = next_adr_number(&dir);
        let file = dir.join(rules::adr_file_name(number, &topic));
        let text = rules::adr_markdown(&AdrInput {
            number,
            topic: &topic,
            date: &date,
            party: &party_name,
            evidence: evidence.as_deref(),
            options: &options,
            chosen: &chosen,
            how: &how,
            votes: &votes,
        });
        std::fs::write(&file, text).map_err(|e| format!("cannot write {}: {e}", file.display()))?;
        let commit = if in_git {
            troupe_worktree::commit_all(&checkout, &format!("ADR {number:04}: {topic}"))
                .map_err(|e| format!("cannot commit the ADR: {e}"))?
        } else {
            None
        };
        Ok((file.display().to_string(), commit))
    })
    .await
    .map_err(|e| format!("the ADR writer failed: {e}"))?
}

/// One more than the highest `NNNN-` ADR number in `dir`.
fn next_adr_number(dir: &Path) -> u32 {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.get(..4)?.parse::<u32>().ok()
        })
        .max()
        .unwrap_or(0)
        + 1
}

/// Closes a decision when its window ends.
pub fn arm_deadline(ctx: Ctx, decision_id: String, deadline_ms: i64) {
    tokio::spawn(async move {
        let wait = u64::try_from(deadline_ms - now_ms()).unwrap_or(0);
        tokio::time::sleep(Duration::from_millis(wait)).await;
        if let Err(e) = settle(&ctx, &decision_id, true).await {
            tracing::warn!(decision = %decision_id, error = %e, "cannot close a decision");
        }
    });
}

/// After a restart: decisions still open get their windows back (one that ended while the
/// daemon was down closes now), and step clocks are re-armed.
pub fn resume(ctx: &Ctx) {
    match ctx.store.list_decisions(None) {
        Ok(open) => {
            for d in open
                .into_iter()
                .filter(|d| d.status == DecisionStatus::Open)
            {
                arm_deadline(ctx.clone(), d.decision_id, d.deadline_ms);
            }
        }
        Err(e) => tracing::warn!(error = %e, "cannot resume open decisions"),
    }
    let Ok(parties) = ctx
        .store
        .list_parties_brief(None, Some(PartyStatus::Running))
    else {
        return;
    };
    for p in parties {
        for step in ctx.store.plan_steps(&p.party_id).unwrap_or_default() {
            if state_of(&step).is_active() {
                arm_step_clock(ctx.clone(), p.party_id.clone(), step.step_id);
            }
        }
    }
}
