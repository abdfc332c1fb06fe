//! Rounds in one agent session: a party member whose turn ended without `complete` is prompted
//! again, in the same session, with the messages that came for it and the party as it is now,
//! for as long as it still has a part to play (the leader's plan not done, a step of its own
//! not done, a decision awaiting its vote); and the lines the person's own prompts to a
//! running agent come on (`prompt_agent`). Whether a member is owed a round is checked on each
//! message for it and every 2 s.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::MutexGuard;
use std::time::Duration;

use troupe_api::ApiError;
use troupe_api::types::{PromptAgentParams, PromptAgentResult};
use troupe_model::{DecisionStatus, MemberStatus, PlanStatus, StepState};
use troupe_store::{AgentRun, PollFilter};

use crate::daemon::Daemon;
use crate::runners::{PersonPrompt, TurnAnswer};

/// How long a member with a part to play waits for a message before its turn's end is taken as
/// its end.
pub const ROUND_WAIT: Duration = Duration::from_secs(15 * 60);
/// How often a member waiting for its next round looks at the party again.
const RECHECK: Duration = Duration::from_secs(2);
/// Messages put into one round's prompt (the rest wait for the next).
const ROUND_MESSAGES: i64 = 20;
/// A message's text kept in a round's prompt.
const MESSAGE_TEXT: usize = 2000;
/// How long `prompt_agent` waits for the agent's answer unless told.
const ANSWER_WAIT_MS: u64 = 120_000;
/// The longest `prompt_agent` waits.
const MAX_ANSWER_WAIT_MS: u64 = 600_000;

/// The lines to runs that keep an agent session, by run id.
pub fn lines(
    d: &Daemon,
) -> MutexGuard<'_, HashMap<String, tokio::sync::mpsc::Sender<PersonPrompt>>> {
    d.lines.lock().unwrap_or_else(|p| p.into_inner())
}

/// The next round of `run`, a party member whose turn ended without `complete`: the unread
/// messages for it (waited for, up to `ROUND_WAIT`, while it has a part to play) and the party's
/// state. `None`: it is not a party member, it completed, the party ended, or it has no part
/// left.
pub async fn next_round(d: &Daemon, run: &AgentRun) -> Option<String> {
    let party_id = run.party_id.as_deref()?;
    let role = run.role_name.as_deref()?;
    // Watch before the first read so a message committed in between still wakes us.
    let mut wake = d.hub.watch(&run.session_id);
    let deadline = tokio::time::Instant::now() + ROUND_WAIT;
    loop {
        let current = d.store.get_run(&run.run_id).ok()?;
        if current.status.is_finished() || current.status.is_completed() {
            return None;
        }
        let filter = PollFilter {
            session_id: run.session_id.clone(),
            since: None,
            unread_only: true,
            limit: ROUND_MESSAGES,
        };
        let messages = d.store.poll_messages(&filter).ok()?;
        if !messages.is_empty() {
            let ids = messages.iter().map(|m| m.message_id.clone()).collect();
            if let Err(e) = d
                .store
                .mark_read(run.session_id.clone(), Some(ids), None)
                .await
            {
                tracing::warn!(error = %e, "a round's messages were not marked read");
            }
            let members = d
                .store
                .get_party(party_id)
                .map(|(_, members)| members)
                .unwrap_or_default();
            let mut prompt = String::from("Messages came for you:\n");
            for m in &messages {
                let from = members
                    .iter()
                    .find(|x| x.session_id.as_deref() == Some(m.from_session_id.as_str()))
                    .map(|x| format!("{}#{}", x.role_name, x.instance_index))
                    .unwrap_or_else(|| m.from_session_id.clone());
                let _ = writeln!(prompt, "- from {from}: {}", clip(&m.content));
            }
            prompt.push('\n');
            prompt.push_str(&crate::playbooks::state(&d.store, party_id, role));
            prompt.push_str(
                "\nGo on with your part. End with `complete` when it is done (or blocked).",
            );
            return Some(prompt);
        }
        if !has_part(d, party_id, role) {
            return None;
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        // A message wakes it at once; the party's state (a leader that ended, a step done
        // elsewhere) is looked at again every `RECHECK`.
        let until = deadline.min(tokio::time::Instant::now() + RECHECK);
        if let Ok(Err(_)) = tokio::time::timeout_at(until, wake.changed()).await {
            return None;
        }
    }
}

/// Whether `role` still has a part in the party's plan: a decision awaits its vote; or the
/// party has a leader and, with no plan yet, the leader is still at work (the others wait for
/// its plan); with a draft, the leader commits it; with a committed plan not done, the role is
/// the leader, owns one of the steps left, or owns none (a reviewer).
fn has_part(d: &Daemon, party_id: &str, role: &str) -> bool {
    let Ok(party) = crate::collab::PartyView::load(&d.store, party_id) else {
        return false;
    };
    if party.check_live().is_err() {
        return false;
    }
    let decisions = d.store.list_decisions(Some(party_id)).unwrap_or_default();
    if decisions.iter().any(|x| {
        x.status != DecisionStatus::Committed
            && x.voters.iter().any(|v| v == role)
            && !x.votes.iter().any(|v| v.voter == role)
    }) {
        return true;
    }
    let Some(leader) = party.leader() else {
        return false;
    };
    // The leader is still at work (or about to be, or recovering).
    let leader_on = party.members.iter().any(|m| {
        m.role_name == leader
            && matches!(
                m.status,
                MemberStatus::Pending | MemberStatus::Running | MemberStatus::Recovering
            )
    });
    let plans = d.store.plans(party_id).unwrap_or_default();
    if plans.is_empty() {
        // A party that plans: its members wait for the leader's plan. A leader whose turn
        // ended without one, or a party without plans, is done with this turn.
        return role != leader && leader_on;
    }
    if !plans.iter().any(|p| p.status == PlanStatus::Committed) {
        return role == leader || leader_on;
    }
    let steps = d.store.plan_steps(party_id).unwrap_or_default();
    let left: Vec<_> = steps
        .iter()
        .filter(|s| s.state != StepState::Done)
        .collect();
    if left.is_empty() {
        return false;
    }
    role == leader
        || left.iter().any(|s| s.owner_role == role)
        || !steps.iter().any(|s| s.owner_role == role)
}

fn clip(text: &str) -> String {
    if text.len() <= MESSAGE_TEXT {
        return text.to_string();
    }
    let mut end = MESSAGE_TEXT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// `prompt_agent`: the person's own prompt into a running agent's session. Its turn under way is
/// cancelled; the prompt goes in as the next turn, whose answer is returned (waited for up to
/// `wait_ms`); then the agent goes on with its task.
pub async fn prompt_agent(d: &Daemon, p: PromptAgentParams) -> Result<PromptAgentResult, ApiError> {
    const OP: &str = "prompt_agent";
    let wait_ms = p.wait_ms.unwrap_or(ANSWER_WAIT_MS);
    if wait_ms > MAX_ANSWER_WAIT_MS {
        return Err(ApiError::invalid(
            OP,
            format!("wait_ms {wait_ms} is over the maximum of {MAX_ANSWER_WAIT_MS}"),
        ));
    }
    if p.text.trim().is_empty() {
        return Err(ApiError::invalid(OP, "text is empty"));
    }
    let run = d.store.get_run(&p.run_id)?;
    if run.status.is_finished() || run.status.is_completed() {
        return Err(ApiError::invalid(
            OP,
            format!("run {} has ended ({})", run.run_id, run.status.as_str()),
        ));
    }
    let line = lines(d).get(&run.run_id).cloned();
    let Some(line) = line else {
        return Err(ApiError::invalid(
            OP,
            format!(
                "run {} keeps no agent session to prompt (only ACP agents do, while they run)",
                run.run_id
            ),
        ));
    };
    let (tx, rx) = tokio::sync::oneshot::channel();
    line.try_send(PersonPrompt {
        text: p.text.clone(),
        answer: tx,
    })
    .map_err(|e| match e {
        tokio::sync::mpsc::error::TrySendError::Full(_) => ApiError::Conflict(format!(
            "run {} has prompts of yours waiting already: wait for their answers",
            run.run_id
        )),
        tokio::sync::mpsc::error::TrySendError::Closed(_) => {
            ApiError::invalid(OP, format!("run {} is ending", run.run_id))
        }
    })?;
    d.store
        .append_event(troupe_store::NewEvent {
            kind: "agent_prompted".into(),
            project_id: Some(run.project_id.clone()),
            session_id: Some(run.session_id.clone()),
            party_id: run.party_id.clone(),
            data: serde_json::json!({ "run_id": run.run_id, "text": clip(&p.text) }),
        })
        .await?;
    match tokio::time::timeout(Duration::from_millis(wait_ms), rx).await {
        Ok(Ok(TurnAnswer { text, stop_reason })) => Ok(PromptAgentResult {
            run_id: run.run_id,
            answered: true,
            answer: Some(text),
            stop_reason: Some(stop_reason),
        }),
        Ok(Err(_)) => Err(ApiError::invalid(
            OP,
            format!("run {} ended before it answered", run.run_id),
        )),
        Err(_) => Ok(PromptAgentResult {
            run_id: run.run_id,
            answered: false,
            answer: None,
            stop_reason: None,
        }),
    }
}
