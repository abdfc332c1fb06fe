//! The collaboration protocol's operations (seed 004): plans (propose, review, commit, get),
//! steps (start, submit, review, hand off, block), decisions (propose, vote, commit, list) and
//! the step tool policy check the MCP door asks. The rules are the engine's; the daemon-side
//! helpers (who is calling, notices, budgets, ADRs) are `crate::collab`'s.

use serde_json::json;
use troupe_api::ApiError;
use troupe_api::types::*;
use troupe_engine::collab::{self as rules, StepMove, StepState, ToolVerdict};
use troupe_store::{NewDecision, PlanStep, StepChange};

use crate::collab::{self, Caller, Ctx, PERSON, PartyView, now_ms, spec_of, state_of};
use crate::daemon::Daemon;

/// Default voting window.
const DEFAULT_WINDOW_SECS: f64 = 300.0;
/// Longest voting window (a week).
const MAX_WINDOW_SECS: f64 = 7.0 * 24.0 * 3600.0;

fn party_and_caller(
    d: &Daemon,
    party_id: &str,
    session_id: Option<&str>,
) -> Result<(PartyView, Caller), ApiError> {
    let party = PartyView::load(&d.store, party_id)?;
    let caller = collab::caller(&party, session_id)?;
    Ok((party, caller))
}

pub async fn propose_plan(d: &Daemon, p: ProposePlanParams) -> Result<PlanResult, ApiError> {
    const OP: &str = "propose_plan";
    let (party, caller) = party_and_caller(d, &p.party_id, p.session_id.as_deref())?;
    party.check_live()?;
    rules::validate_plan(&p.steps, party.roles())
        .map_err(|e| ApiError::invalid(OP, e.to_string()))?;
    let steps = serde_json::to_value(&p.steps).map_err(|e| ApiError::Internal(e.to_string()))?;
    let plan = d
        .store
        .propose_plan(p.party_id, steps, p.summary, Some(caller.name.clone()))
        .await?;
    let ctx = Ctx::of(d);
    collab::tell_party(
        &ctx,
        &party,
        &format!(
            "plan version {} proposed by {} ({} steps): review it with review_plan",
            plan.version,
            caller.name,
            p.steps.len()
        ),
    )
    .await;
    Ok(PlanResult { plan })
}

/// The plan version named, or the latest draft (one read of the plans for both).
fn draft(
    d: &Daemon,
    op: &'static str,
    party_id: &str,
    version: Option<i64>,
) -> Result<troupe_store::PlanVersion, ApiError> {
    let plans = d.store.plans(party_id)?;
    match version {
        Some(v) => plans
            .into_iter()
            .find(|p| p.version == v)
            .ok_or_else(|| ApiError::NotFound {
                what: "plan version".into(),
                id: format!("{party_id}/{v}"),
            }),
        None => plans
            .into_iter()
            .rev()
            .find(|p| p.status == PlanStatus::Draft)
            .ok_or_else(|| ApiError::invalid(op, format!("party {party_id} has no draft plan"))),
    }
}

pub async fn review_plan(d: &Daemon, p: ReviewPlanParams) -> Result<PlanResult, ApiError> {
    const OP: &str = "review_plan";
    let (party, caller) = party_and_caller(d, &p.party_id, p.session_id.as_deref())?;
    party.check_live()?;
    let draft = draft(d, OP, &p.party_id, p.version)?;
    let version = draft.version;
    if !caller.is_person() && draft.proposed_by.as_deref() == Some(caller.name.as_str()) {
        return Err(ApiError::Forbidden(format!(
            "{} proposed plan version {version}; a teammate reviews it",
            caller.name
        )));
    }
    let verdict = match p.verdict {
        PlanVerdict::Approve => "approve",
        PlanVerdict::RequestChanges => "request_changes",
    };
    let plan = d
        .store
        .review_plan(
            p.party_id,
            version,
            caller.name.clone(),
            caller.session_id.clone(),
            verdict.into(),
            p.comments.clone(),
        )
        .await?;
    collab::tell_leader_or_person(
        &Ctx::of(d),
        &party,
        "plan_reviewed",
        &format!(
            "{} reviewed plan version {version}: {verdict}{}",
            caller.name,
            p.comments.map(|c| format!(" ({c})")).unwrap_or_default()
        ),
    )
    .await;
    Ok(PlanResult { plan })
}

pub async fn commit_plan(d: &Daemon, p: CommitPlanParams) -> Result<PlanResult, ApiError> {
    const OP: &str = "commit_plan";
    let (party, caller) = party_and_caller(d, &p.party_id, p.session_id.as_deref())?;
    party.check_live()?;
    if !caller.may_lead() {
        return Err(ApiError::Forbidden(format!(
            "only the party's leader or the person commits a plan, not {}",
            caller.name
        )));
    }
    let draft = draft(d, OP, &p.party_id, p.version)?;
    let version = draft.version;
    // A reviewer's latest word on this version counts.
    let mut latest: std::collections::BTreeMap<&str, &str> = Default::default();
    for r in &draft.reviews {
        latest.insert(&r.reviewer, &r.verdict);
    }
    let objecting: Vec<&str> = latest
        .iter()
        .filter(|(_, v)| **v == "request_changes")
        .map(|(r, _)| *r)
        .collect();
    if !objecting.is_empty() && !p.force {
        return Err(ApiError::Conflict(format!(
            "plan version {version} has changes requested by {}: propose a new version, or \
             commit with force",
            objecting.join(", ")
        )));
    }
    let specs: Vec<rules::StepSpec> = serde_json::from_value(draft.steps.clone())
        .map_err(|e| ApiError::Internal(format!("plan unreadable: {e}")))?;
    rules::validate_plan(&specs, party.roles())
        .map_err(|e| ApiError::invalid(OP, e.to_string()))?;
    let steps = specs
        .iter()
        .map(|s| {
            Ok((
                s.id.clone(),
                s.owner_role.clone(),
                serde_json::to_value(s).map_err(|e| ApiError::Internal(e.to_string()))?,
            ))
        })
        .collect::<Result<Vec<_>, ApiError>>()?;
    let plan = d
        .store
        .commit_plan(
            p.party_id.clone(),
            version,
            Some(caller.name.clone()),
            steps,
        )
        .await?;
    let ctx = Ctx::of(d);
    let listing: Vec<String> = specs
        .iter()
        .map(|s| format!("{} ({}): {}", s.id, s.owner_role, s.title))
        .collect();
    collab::tell_party(
        &ctx,
        &party,
        &format!(
            "plan version {version} committed by {}. Steps: {}. Owners: start_step when its \
             dependencies are done, submit_step when finished.",
            caller.name,
            listing.join("; ")
        ),
    )
    .await;
    Ok(PlanResult { plan })
}

pub async fn get_plan(d: &Daemon, p: PartyIdParams) -> Result<PlanView, ApiError> {
    let party = PartyView::load(&d.store, &p.party_id)?;
    let plans = d.store.plans(&p.party_id)?;
    let steps = d.store.plan_steps(&p.party_id)?;
    let latest = |status: PlanStatus| plans.iter().rev().find(|v| v.status == status).cloned();
    Ok(PlanView {
        collab_state: state(party.row.status, &plans, &steps),
        committed: latest(PlanStatus::Committed),
        draft: latest(PlanStatus::Draft),
        party_id: p.party_id,
        steps,
    })
}

/// The collaboration state shown by `get_party_status`.
pub fn collab_state_of(d: &Daemon, party_id: &str, status: PartyStatus) -> rules::CollabState {
    state(
        status,
        &d.store.plans(party_id).unwrap_or_default(),
        &d.store.plan_steps(party_id).unwrap_or_default(),
    )
}

/// Where a party's collaboration is, from its status, its plan versions and its steps.
fn state(
    status: PartyStatus,
    plans: &[troupe_store::PlanVersion],
    steps: &[PlanStep],
) -> rules::CollabState {
    let states: Vec<StepState> = steps.iter().map(state_of).collect();
    let has = |status: PlanStatus| plans.iter().any(|v| v.status == status);
    rules::collab_state(
        status,
        has(PlanStatus::Draft),
        has(PlanStatus::Committed).then_some(states.as_slice()),
    )
}

fn load_step(d: &Daemon, party_id: &str, step_id: &str) -> Result<PlanStep, ApiError> {
    d.store.plan_step(party_id, step_id).map_err(|e| match e {
        troupe_store::StoreError::NotFound { .. } => ApiError::NotFound {
            what: "step".into(),
            id: format!("{step_id} (in the committed plan of party {party_id})"),
        },
        other => other.into(),
    })
}

/// The owner, the leader or the person may move a step.
fn check_owner(caller: &Caller, step: &PlanStep, action: &str) -> Result<(), ApiError> {
    if caller.may_lead() || caller.name == step.owner_role {
        return Ok(());
    }
    Err(ApiError::Forbidden(format!(
        "step {} is owned by {}; {} cannot {action} it",
        step.step_id, step.owner_role, caller.name
    )))
}

/// Refuses to start or submit a step whose dependencies are not done.
fn check_ready(d: &Daemon, party_id: &str, step: &PlanStep) -> Result<(), ApiError> {
    let spec = spec_of(step)?;
    let steps = d.store.plan_steps(party_id)?;
    let waiting: Vec<&str> = spec
        .depends_on
        .iter()
        .filter(|dep| {
            steps
                .iter()
                .find(|s| &s.step_id == *dep)
                .is_none_or(|s| state_of(s) != StepState::Done)
        })
        .map(String::as_str)
        .collect();
    if waiting.is_empty() {
        Ok(())
    } else {
        Err(ApiError::Conflict(format!(
            "step {} waits for {} to be done",
            step.step_id,
            waiting.join(", ")
        )))
    }
}

fn moved(step: &PlanStep, m: StepMove) -> Result<StepState, ApiError> {
    rules::step_after(&step.step_id, state_of(step), m)
        .map_err(|e| ApiError::Conflict(e.to_string()))
}

fn change(step: &PlanStep, party_id: &str, to: StepState, event: &str) -> StepChange {
    StepChange {
        party_id: party_id.to_string(),
        step_id: step.step_id.clone(),
        from: step.state,
        to,
        owner_role: None,
        reason: None,
        started: None,
        event: event.into(),
        data: json!({}),
    }
}

pub async fn start_step(d: &Daemon, p: StepParams) -> Result<StepResult, ApiError> {
    let (party, caller) = party_and_caller(d, &p.party_id, p.session_id.as_deref())?;
    party.check_live()?;
    let step = load_step(d, &p.party_id, &p.step_id)?;
    check_owner(&caller, &step, "start")?;
    let to = moved(&step, StepMove::Start)?;
    check_ready(d, &p.party_id, &step)?;
    let usage = collab::role_usage(&d.store, &party, &step.owner_role);
    let mut c = change(&step, &p.party_id, to, "step_started");
    c.started = Some((
        now_ms(),
        serde_json::to_value(usage).map_err(|e| ApiError::Internal(e.to_string()))?,
    ));
    c.reason = p.summary;
    c.data = json!({"by": caller.name, "owner_role": step.owner_role});
    let step = d.store.move_step(c).await?;
    collab::arm_step_clock(Ctx::of(d), p.party_id, step.step_id.clone());
    Ok(StepResult {
        step,
        decision: None,
    })
}

pub async fn submit_step(d: &Daemon, p: StepParams) -> Result<StepResult, ApiError> {
    let (party, caller) = party_and_caller(d, &p.party_id, p.session_id.as_deref())?;
    party.check_live()?;
    let step = load_step(d, &p.party_id, &p.step_id)?;
    check_owner(&caller, &step, "submit")?;
    let to = moved(&step, StepMove::Submit)?;
    check_ready(d, &p.party_id, &step)?;
    let mut c = change(&step, &p.party_id, to, "step_submitted");
    c.reason = p.summary.clone();
    c.data = json!({"by": caller.name, "summary": p.summary});
    let step = d.store.move_step(c).await?;
    let spec = spec_of(&step)?;
    collab::tell_leader_or_person(
        &Ctx::of(d),
        &party,
        "step_submitted",
        &format!(
            "step {} ({}) submitted by {}: {}. Review it with review_step against: {}",
            step.step_id,
            spec.title,
            caller.name,
            p.summary.as_deref().unwrap_or("(no summary)"),
            spec.acceptance.as_deref().unwrap_or("(no acceptance text)")
        ),
    )
    .await;
    Ok(StepResult {
        step,
        decision: None,
    })
}

pub async fn review_step(d: &Daemon, p: ReviewStepParams) -> Result<StepResult, ApiError> {
    let (party, caller) = party_and_caller(d, &p.party_id, p.session_id.as_deref())?;
    party.check_live()?;
    let step = load_step(d, &p.party_id, &p.step_id)?;
    if !caller.is_person() && caller.name == step.owner_role {
        return Err(ApiError::Forbidden(format!(
            "{} owns step {}; another member, the leader or the person reviews it",
            caller.name, step.step_id
        )));
    }
    let (m, event) = match p.verdict {
        StepVerdict::Accept => (StepMove::Accept, "step_accepted"),
        StepVerdict::Reopen => (StepMove::Reopen, "step_reopened"),
    };
    let to = moved(&step, m)?;
    let mut c = change(&step, &p.party_id, to, event);
    c.reason = p.reason.clone();
    c.data = json!({"by": caller.name, "reason": p.reason});
    let step = d.store.move_step(c).await?;
    let ctx = Ctx::of(d);
    let why = p.reason.as_deref().unwrap_or("no reason given");
    match p.verdict {
        StepVerdict::Reopen => {
            let text = format!(
                "step {} was reopened by {}: {why}. start_step it again, then submit_step.",
                step.step_id, caller.name
            );
            if !collab::tell_role(&ctx, &party, &step.owner_role, &text).await {
                collab::tell_leader_or_person(&ctx, &party, "step_reopened", &text).await;
            }
        }
        StepVerdict::Accept => {
            collab::tell_role(
                &ctx,
                &party,
                &step.owner_role,
                &format!(
                    "step {} was accepted by {}: {why}",
                    step.step_id, caller.name
                ),
            )
            .await;
            let steps = d.store.plan_steps(&p.party_id)?;
            if steps.iter().all(|s| state_of(s) == StepState::Done) {
                collab::tell_leader_or_person(
                    &ctx,
                    &party,
                    "plan_done",
                    "every step of the plan is done",
                )
                .await;
            }
        }
    }
    Ok(StepResult {
        step,
        decision: None,
    })
}

pub async fn handoff_step(d: &Daemon, p: HandoffStepParams) -> Result<StepResult, ApiError> {
    const OP: &str = "handoff_step";
    let (party, caller) = party_and_caller(d, &p.party_id, p.session_id.as_deref())?;
    party.check_live()?;
    if !party.has_role(&p.to_role) {
        return Err(ApiError::invalid(
            OP,
            format!("party {} has no role {}", p.party_id, p.to_role),
        ));
    }
    let step = load_step(d, &p.party_id, &p.step_id)?;
    check_owner(&caller, &step, "hand off")?;
    if step.owner_role == p.to_role {
        return Err(ApiError::invalid(
            OP,
            format!("{} already owns step {}", p.to_role, step.step_id),
        ));
    }
    let to = moved(&step, StepMove::Handoff)?;
    let before = step.reason.clone();
    let usage = collab::role_usage(&d.store, &party, &p.to_role);
    let mut c = change(&step, &p.party_id, to, "step_handed_off");
    c.owner_role = Some(p.to_role.clone());
    c.reason = Some(format!(
        "handed off by {} to {}{}",
        caller.name,
        p.to_role,
        p.note
            .as_deref()
            .map(|n| format!(": {n}"))
            .unwrap_or_default()
    ));
    if to.is_active() {
        c.started = Some((
            now_ms(),
            serde_json::to_value(usage).map_err(|e| ApiError::Internal(e.to_string()))?,
        ));
    }
    c.data = json!({"by": caller.name, "from_role": step.owner_role, "to_role": p.to_role,
                    "note": p.note});
    let step = d.store.move_step(c).await?;
    let spec = spec_of(&step)?;
    let ctx = Ctx::of(d);
    let context = format!(
        "step {} ({}) is yours now, handed off by {} (it was {}'s). {}{}Acceptance: {}. \
         So far: {}.{} Carry on and submit_step when done.",
        step.step_id,
        spec.title,
        caller.name,
        spec.owner_role,
        spec.description
            .as_deref()
            .map(|d| format!("What: {d}. "))
            .unwrap_or_default(),
        format_args!("It is {}. ", step.state),
        spec.acceptance.as_deref().unwrap_or("(none)"),
        before.as_deref().unwrap_or("nothing recorded"),
        p.note
            .as_deref()
            .map(|n| format!(" Note: {n}."))
            .unwrap_or_default(),
    );
    if !collab::tell_role(&ctx, &party, &p.to_role, &context).await {
        collab::tell_leader_or_person(
            &ctx,
            &party,
            "step_handed_off",
            &format!(
                "step {} was handed off to {}, which has no running member yet",
                step.step_id, p.to_role
            ),
        )
        .await;
    }
    if to.is_active() {
        collab::arm_step_clock(ctx, p.party_id, step.step_id.clone());
    }
    Ok(StepResult {
        step,
        decision: None,
    })
}

pub async fn block_step(d: &Daemon, p: BlockStepParams) -> Result<StepResult, ApiError> {
    const OP: &str = "block_step";
    if p.blocker.trim().is_empty() {
        return Err(ApiError::invalid(
            OP,
            "blocker must say what blocks the step",
        ));
    }
    let (party, caller) = party_and_caller(d, &p.party_id, p.session_id.as_deref())?;
    party.check_live()?;
    let step = load_step(d, &p.party_id, &p.step_id)?;
    check_owner(&caller, &step, "block")?;
    let options = if p.options.is_empty() {
        vec![
            "proceed as planned".to_string(),
            "hand the step off".to_string(),
            "drop the step".to_string(),
        ]
    } else {
        p.options.clone()
    };
    rules::validate_options(&options).map_err(|e| ApiError::invalid(OP, e.to_string()))?;
    let to = moved(&step, StepMove::Block)?;
    let mut c = change(&step, &p.party_id, to, "step_blocked");
    c.reason = Some(p.blocker.clone());
    c.data = json!({"by": caller.name, "blocker": p.blocker});
    let step = d.store.move_step(c).await?;
    let decision = raise(
        d,
        &party,
        &caller,
        NewDecision {
            party_id: p.party_id.clone(),
            topic: format!("step {} is blocked: {}", step.step_id, p.blocker),
            options,
            evidence: step.reason.clone(),
            voters: default_voters(&party),
            step_id: Some(step.step_id.clone()),
            proposed_by: Some(caller.name.clone()),
            deadline_ms: now_ms() + (DEFAULT_WINDOW_SECS * 1000.0) as i64,
        },
    )
    .await?;
    Ok(StepResult {
        step,
        decision: Some(decision),
    })
}

fn default_voters(party: &PartyView) -> Vec<String> {
    party.roles().map(str::to_string).collect()
}

/// Records a decision, arms its window and asks the voters.
async fn raise(
    d: &Daemon,
    party: &PartyView,
    caller: &Caller,
    new: NewDecision,
) -> Result<troupe_store::DecisionRecord, ApiError> {
    let decision = d.store.propose_decision(new).await?;
    let ctx = Ctx::of(d);
    collab::arm_deadline(
        ctx.clone(),
        decision.decision_id.clone(),
        decision.deadline_ms,
    );
    let ask = format!(
        "{} raised decision {}: {}. Options: {}. Vote with vote {{decision_id, option, rationale}}.",
        caller.name,
        decision.decision_id,
        decision.topic,
        decision.options.join(" | ")
    );
    for voter in &decision.voters {
        if voter == PERSON {
            collab::tell_person(
                &ctx,
                party,
                "decision_proposed",
                &ask,
                json!({"party_id": party.row.party_id, "decision_id": decision.decision_id}),
            )
            .await;
        } else {
            collab::tell_role(&ctx, party, voter, &ask).await;
        }
    }
    Ok(decision)
}

pub async fn propose_decision(
    d: &Daemon,
    p: ProposeDecisionParams,
) -> Result<DecisionResult, ApiError> {
    const OP: &str = "propose_decision";
    let (party, caller) = party_and_caller(d, &p.party_id, p.session_id.as_deref())?;
    party.check_live()?;
    if p.topic.trim().is_empty() {
        return Err(ApiError::invalid(OP, "topic is empty"));
    }
    rules::validate_options(&p.options).map_err(|e| ApiError::invalid(OP, e.to_string()))?;
    let window = p.window_secs.unwrap_or(DEFAULT_WINDOW_SECS);
    if !(window.is_finite() && window > 0.0 && window <= MAX_WINDOW_SECS) {
        return Err(ApiError::invalid(
            OP,
            format!("window_secs must be over 0 and at most {MAX_WINDOW_SECS}"),
        ));
    }
    let voters = match p.voters {
        Some(v) if v.is_empty() => return Err(ApiError::invalid(OP, "voters is empty")),
        Some(v) => {
            if let Some(bad) = v.iter().find(|v| *v != PERSON && !party.has_role(v)) {
                return Err(ApiError::invalid(
                    OP,
                    format!("voter {bad} is neither a role of the party nor \"person\""),
                ));
            }
            let mut seen = std::collections::BTreeSet::new();
            v.into_iter().filter(|x| seen.insert(x.clone())).collect()
        }
        None => default_voters(&party),
    };
    let decision = raise(
        d,
        &party,
        &caller,
        NewDecision {
            party_id: p.party_id,
            topic: p.topic,
            options: p.options,
            evidence: p.evidence,
            voters,
            step_id: None,
            proposed_by: Some(caller.name.clone()),
            deadline_ms: now_ms() + (window * 1000.0) as i64,
        },
    )
    .await?;
    Ok(DecisionResult { decision })
}

pub async fn vote(d: &Daemon, p: VoteParams) -> Result<DecisionResult, ApiError> {
    const OP: &str = "vote";
    let decision = d.store.get_decision(&p.decision_id)?;
    let (_, caller) = party_and_caller(d, &decision.party_id, p.session_id.as_deref())?;
    if !decision.voters.contains(&caller.name) {
        return Err(ApiError::Forbidden(format!(
            "{} is not a voter on decision {} (voters: {})",
            caller.name,
            decision.decision_id,
            decision.voters.join(", ")
        )));
    }
    if !decision.options.contains(&p.option) {
        return Err(ApiError::invalid(
            OP,
            rules::CollabError::UnknownOption(p.option).to_string(),
        ));
    }
    d.store
        .vote(
            p.decision_id.clone(),
            caller.name,
            caller.session_id,
            p.option,
            p.rationale,
        )
        .await?;
    let decision = collab::settle(&Ctx::of(d), &p.decision_id, false).await?;
    Ok(DecisionResult { decision })
}

pub async fn commit_decision(
    d: &Daemon,
    p: CommitDecisionParams,
) -> Result<DecisionResult, ApiError> {
    const OP: &str = "commit_decision";
    let decision = d.store.get_decision(&p.decision_id)?;
    let (party, caller) = party_and_caller(d, &decision.party_id, p.session_id.as_deref())?;
    if !caller.may_lead() {
        return Err(ApiError::Forbidden(format!(
            "only the party's leader or the person chooses for the party, not {}",
            caller.name
        )));
    }
    if !decision.options.contains(&p.option) {
        return Err(ApiError::invalid(
            OP,
            rules::CollabError::UnknownOption(p.option).to_string(),
        ));
    }
    if decision.status == DecisionStatus::Committed {
        return Err(ApiError::Conflict(format!(
            "decision {} is already committed ({})",
            decision.decision_id,
            decision.chosen.unwrap_or_default()
        )));
    }
    let who = if caller.is_person() {
        "the person".to_string()
    } else {
        format!("the leader ({})", caller.name)
    };
    let how = if decision.status == DecisionStatus::Tied {
        format!("a tie broken by {who}")
    } else {
        format!("chosen by {who} with {} votes cast", decision.votes.len())
    };
    let decision = collab::commit(&Ctx::of(d), &party, &p.decision_id, p.option, how).await?;
    Ok(DecisionResult { decision })
}

pub async fn list_decisions(
    d: &Daemon,
    p: ListDecisionsParams,
) -> Result<DecisionsResult, ApiError> {
    if let Some(party) = &p.party_id {
        d.store.get_party(party)?;
    }
    Ok(DecisionsResult {
        decisions: d.store.list_decisions(p.party_id.as_deref())?,
    })
}

pub async fn check_tool_policy(
    d: &Daemon,
    p: ToolPolicyParams,
) -> Result<ToolPolicyResult, ApiError> {
    d.store.get_session(&p.session_id)?;
    let (verdict, steps) = collab::tool_verdict(&d.store, &p.session_id, &p.tool_name);
    let by = || format!("step {}", steps.join(", "));
    Ok(match verdict {
        ToolVerdict::Default => ToolPolicyResult {
            verdict: "default".into(),
            reason: None,
        },
        ToolVerdict::Allow => ToolPolicyResult {
            verdict: "allow".into(),
            reason: Some(format!("{} allows {}", by(), p.tool_name)),
        },
        ToolVerdict::Ask => ToolPolicyResult {
            verdict: "ask".into(),
            reason: Some(format!(
                "{} needs a person's approval for {}",
                by(),
                p.tool_name
            )),
        },
        ToolVerdict::Deny(why) => ToolPolicyResult {
            verdict: "deny".into(),
            reason: Some(why),
        },
    })
}
