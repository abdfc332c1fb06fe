//! A conflict a landing met: the member left out is told, with the files, and so is the
//! person (its inbox item lasts until a later landing takes the member).

use serde_json::json;
use troupe_api::types::*;
use troupe_engine::Isolation;

use crate::collab::{Ctx, PartyView, tell_person};

use super::rework::restarts;
use super::{Checkout, rework, tell_member, timeline};

/// Reports each conflicting member (see `report_conflict`); `rework`: a finished member whose
/// role recovers by restart may be started again to resolve it (only once the target moved).
pub(super) async fn report_conflicts(
    ctx: &Ctx,
    party: &PartyView,
    conflicted: &[Checkout],
    result: &mut LandResult,
    integration_branch: &str,
    rework: bool,
) {
    let target = result.target.clone();
    for (c, m) in conflicted.iter().zip(
        result
            .members
            .iter_mut()
            .filter(|m| m.outcome == "conflict"),
    ) {
        m.resolver_run_id =
            report_conflict(ctx, party, c, m, &target, integration_branch, rework).await;
    }
}

pub(super) fn short(id: &str) -> &str {
    &id[..id.len().min(8)]
}

/// A conflict at landing: on the timeline, to the member (files and hunks) and to the person;
/// a finished member whose role recovers by restart is started again to resolve it (its run).
async fn report_conflict(
    ctx: &Ctx,
    party: &PartyView,
    c: &Checkout,
    m: &MemberLanding,
    target: &str,
    integration_branch: &str,
    may_rework: bool,
) -> Option<String> {
    let files: Vec<&str> = m.conflicts.iter().map(|f| f.path.as_str()).collect();
    timeline(
        ctx,
        party,
        "merge_conflict",
        json!({ "role": m.role, "index": m.index, "branch": m.branch, "target": target,
                "files": files, "conflicts": m.conflicts }),
    )
    .await;
    // A clone (a sandboxed member's worktree is one too) has no integration branch of its own:
    // it fetches it from the project.
    let merge = if c.isolation == Isolation::Clone {
        format!(
            "Fetch {integration_branch} (what was integrated before you) from the project (git fetch {} {integration_branch}) and merge it (git merge FETCH_HEAD)",
            party.row.repo_root
        )
    } else {
        format!("Merge {integration_branch} (what was integrated before you) into your branch")
    };
    let mut text = format!(
        "your branch {} conflicts with the work landed before it and was left out of the landing on {target}. Conflicting files: {}. {merge}, resolve the conflicts, commit, and say so.",
        m.branch,
        files.join(", ")
    );
    for f in &m.conflicts {
        for h in &f.hunks {
            text.push_str(&format!("\n--- {}\n{h}", f.path));
        }
    }
    let told = tell_member(ctx, party, &c.member, &text).await;
    let resolver = if told || !may_rework || !restarts(party, &c.member.role_name) {
        None
    } else {
        match rework(ctx, party, c, "resolve a merge conflict", &text).await {
            Ok(run) => Some(run),
            Err(e) => {
                tracing::warn!(party = %party.row.party_id, error = %e, "conflict resolver not started");
                None
            }
        }
    };
    let then = match &resolver {
        Some(_) => "it was started again to resolve it",
        None => "it was left out of the landing",
    };
    tell_person(
        ctx,
        party,
        "merge_conflict",
        &format!(
            "{} conflicts with the work landed before it in {}; {then}",
            c.label(),
            files.join(", ")
        ),
        json!({ "party_id": party.row.party_id, "role": m.role, "index": m.index,
                "branch": m.branch, "files": files, "resolver_run_id": resolver }),
    )
    .await;
    resolver
}
