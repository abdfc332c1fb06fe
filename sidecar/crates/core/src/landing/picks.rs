//! Best-of-N picks at landing time: the checkouts that may land, waiting for every role's
//! pick, a picking that stalled handed to the person, and the judge's prompt.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;
use troupe_api::ApiError;
use troupe_api::types::*;
use troupe_store::MemberRow;

use super::{Checkout, blocking, checkouts, land_as, sync_branch};
use crate::collab::{Ctx, PartyView, tell_person};

/// The checkouts that may land: every member's, except that of a best-of-N role only the picked
/// attempt's (the others are returned apart). A role still waiting for its pick is an error
/// naming who picks.
pub fn picked_checkouts(
    ctx: &Ctx,
    party: &PartyView,
) -> Result<(Vec<Checkout>, Vec<Checkout>), ApiError> {
    let picks = ctx.store.member_picks(&party.row.party_id)?;
    let mut landing = Vec::new();
    let mut left = Vec::new();
    for c in checkouts(party) {
        let role = &c.member.role_name;
        let Some(spec) = party
            .snapshot
            .party
            .roles
            .get(role)
            .and_then(|r| r.pick.as_ref())
        else {
            landing.push(c);
            continue;
        };
        let picked = picks
            .iter()
            .find(|p| &p.role_name == role)
            .and_then(|p| p.instance_index);
        match picked {
            Some(i) if i == c.member.instance_index => landing.push(c),
            Some(_) => left.push(c),
            None => {
                let judge_run = picks
                    .iter()
                    .find(|p| &p.role_name == role)
                    .and_then(|p| p.judge_run_id.as_deref());
                let judge_ended = judge_run
                    .is_some_and(|r| ctx.store.get_run(r).is_ok_and(|r| r.status.is_finished()));
                let who = match (&spec.judge, judge_ended) {
                    (Some(judge), true) => {
                        format!("its judge {judge} ended without a pick: the person picks")
                    }
                    (Some(judge), false) => {
                        format!("its judge {judge} is picking, or the person may")
                    }
                    (None, _) => "the person picks".to_string(),
                };
                return Err(ApiError::Conflict(format!(
                    "role {role} runs best of {} and none is picked yet ({who} with pick_member)",
                    party.snapshot.party.roles.get(role).map_or(0, |r| r.count)
                )));
            }
        }
    }
    Ok((landing, left))
}

/// Whether every best-of-N role of the party has its pick.
pub fn all_picked(ctx: &Ctx, party: &PartyView) -> Result<bool, ApiError> {
    let picks = ctx.store.member_picks(&party.row.party_id)?;
    Ok(party
        .snapshot
        .party
        .roles
        .iter()
        .filter(|(_, r)| r.pick.is_some())
        .all(|(role, _)| {
            picks
                .iter()
                .any(|p| &p.role_name == role && p.instance_index.is_some())
        }))
}

/// `land` for the `land` runner's run `run_id`, once every best-of-N role has its pick (its turn
/// may come first), waiting up to `wait`.
pub async fn land_when_picked(
    ctx: &Ctx,
    p: LandPartyParams,
    wait: Duration,
    run_id: &str,
) -> Result<LandResult, ApiError> {
    let deadline = tokio::time::Instant::now() + wait;
    let mut asked = std::collections::HashSet::new();
    loop {
        let mut picked = ctx.store.changes(troupe_store::Topic::Picks);
        let party = PartyView::load(&ctx.store, &p.party_id)?;
        if all_picked(ctx, &party)? {
            return land_as(ctx, p, Some(run_id)).await;
        }
        // A picking that cannot finish by itself (attempts that crashed for good, a judge that
        // ended without a pick) is the person's, once.
        for (role, why) in stalled_picks(ctx, &party).await? {
            if asked.insert(role.clone()) {
                tell_person(
                    ctx,
                    &party,
                    "pick_needed",
                    &format!("role {role}: {why}; pick the attempt to land (pick_member)"),
                    json!({ "party_id": party.row.party_id, "role": role }),
                )
                .await;
            }
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(ApiError::Conflict(format!(
                "waited {} s for the picks of party {}'s best-of-N roles",
                wait.as_secs(),
                p.party_id
            )));
        }
        // The store announces every pick and every judge's end; other runs ending (attempts
        // that crashed for good) are looked at again every few seconds.
        let next = (tokio::time::Instant::now() + Duration::from_secs(2)).min(deadline);
        let _ = tokio::time::timeout_at(next, picked.changed()).await;
    }
}

/// Best-of-N roles whose picking is stuck: every attempt has stopped and none completed its
/// picking's way (no judge started), or the judge ended without a pick. Claims an unclaimed one.
async fn stalled_picks(ctx: &Ctx, party: &PartyView) -> Result<Vec<(String, String)>, ApiError> {
    let picks = ctx.store.member_picks(&party.row.party_id)?;
    let mut stalled = Vec::new();
    for (role, def) in party
        .snapshot
        .party
        .roles
        .iter()
        .filter(|(_, r)| r.pick.is_some())
    {
        let picking = picks.iter().find(|p| &p.role_name == role);
        if picking.is_some_and(|p| p.instance_index.is_some()) {
            continue;
        }
        if let Some(judge) = picking.and_then(|p| p.judge_run_id.as_deref()) {
            if ctx
                .store
                .get_run(judge)
                .is_ok_and(|r| r.status.is_finished())
            {
                stalled.push((
                    role.clone(),
                    format!("its judge's run {judge} ended without a pick"),
                ));
            }
            continue;
        }
        let members: Vec<&MemberRow> = party
            .members
            .iter()
            .filter(|m| &m.role_name == role)
            .collect();
        let idle = members.len() == def.count as usize
            && members
                .iter()
                .all(|m| !matches!(m.status, MemberStatus::Running | MemberStatus::Pending));
        // (A claimed picking without a judge has asked the person already.)
        if idle
            && picking.is_none()
            && ctx
                .store
                .claim_pick(party.row.party_id.clone(), role.clone())
                .await?
        {
            stalled.push((
                role.clone(),
                "its attempts have all stopped and no judge was started".to_string(),
            ));
        }
    }
    Ok(stalled)
}

/// What a role's judge is asked: every attempt's summary and diff, and how to answer.
pub async fn judge_prompt(ctx: &Ctx, party: &PartyView, role: &str) -> Result<String, ApiError> {
    const MAX_PATCH: usize = 12 * 1024;
    let mut prompt = format!(
        "You judge {} attempts at the same task by role {role} of party {} ({}). Compare them and pick the best one.\n",
        party.snapshot.party.roles.get(role).map_or(0, |r| r.count),
        party.row.name,
        party.row.party_id
    );
    let root = PathBuf::from(&party.row.repo_root);
    for c in checkouts(party)
        .into_iter()
        .filter(|c| c.member.role_name == role)
    {
        let output = c
            .member
            .agent_run_id
            .as_deref()
            .and_then(|r| ctx.store.get_run(r).ok())
            .and_then(|r| r.result)
            .and_then(|r| r["output"].as_str().map(String::from))
            .unwrap_or_default();
        let (root2, c2) = (root.clone(), c.clone());
        let files = blocking(move || {
            sync_branch(&root2, &c2)?;
            troupe_worktree::review::branch_diff(&root2, &c2.branch, None, None)
        })
        .await?
        .1;
        let mut patch: String = files.iter().map(|f| f.patch.as_str()).collect();
        if patch.len() > MAX_PATCH {
            let cut = (0..=MAX_PATCH)
                .rev()
                .find(|i| patch.is_char_boundary(*i))
                .unwrap_or(0);
            patch.truncate(cut);
            patch.push_str("\n[… cut]\n");
        }
        prompt.push_str(&format!(
            "\n## Attempt {} (branch {}, {} files, +{} -{})\nIts own summary: {output}\n```diff\n{patch}```\n",
            c.member.instance_index,
            c.branch,
            files.len(),
            files.iter().map(|f| f.additions).sum::<usize>(),
            files.iter().map(|f| f.deletions).sum::<usize>(),
        ));
    }
    prompt.push_str(&format!(
        "\nAnswer with the pick_member tool, or run: troupe call pick_member '{{\"party_id\":\"{}\",\"role\":\"{role}\",\"index\":<attempt>,\"reason\":\"<why>\",\"session_id\":\"<your $TROUPE_SESSION_ID>\"}}', then complete.\n",
        party.row.party_id
    ));
    Ok(prompt)
}
