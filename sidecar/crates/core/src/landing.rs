//! Landing a party's work: its members' checkouts in DAG order, measured and reviewed, and the
//! merge queue (`land`): branches integrated one at a time on `troupe/<party>/landing` in its
//! own worktree, the test command run there, the target moved only when it passes. A conflict
//! leaves that branch out, and its member and the person are told. The git work is
//! `troupe_worktree`'s; this room decides what to land, runs the tests and tells people.
//!
//! One landing at a time per repository, its git work off the async threads under the daemon's
//! git lock (which member checkouts take too). `rework` starts a finished member again in its own
//! checkout (a review to address, a conflict to resolve) as a run outside the DAG.
//!
//! This file holds the merge queue itself (`land_as`); beside it: `checkouts` (who has one, what
//! it changed), `integration` (the integration branch and worktree), `picks` (best-of-N picks
//! at landing time), `conflicts` (telling who a conflict concerns) and `rework`.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;
use troupe_api::ApiError;
use troupe_api::types::*;
use troupe_store::{MemberRow, NewEvent, Recipients};
use troupe_worktree::WorktreeError;
use troupe_worktree::land::{self as git_land, BranchOutcome};

use crate::collab::{Ctx, PartyView, tell_person};

mod checkouts;
mod conflicts;
mod integration;
mod picks;
mod pull;
mod rework;

pub use checkouts::{
    Checkout, checkout_of, checkouts, kind_of, measure, measure_with, sync_branch, try_sync_branch,
};
pub use integration::{
    check_integration_of, integration_left, integration_of, remove_integration_of,
};
pub use picks::{all_picked, judge_prompt, land_when_picked, picked_checkouts};
pub use pull::{PUSHED_BY, deliver, view as pull_view};
pub use rework::{live_reworks, rework};

use conflicts::{report_conflicts, short};
use integration::{strategy, tip_marker};

/// One landing at a time per repository: landings move its refs and share its integration
/// worktrees.
pub fn repo_lock(repo_root: &str) -> std::sync::Arc<tokio::sync::Mutex<()>> {
    type Locks = std::collections::BTreeMap<String, std::sync::Arc<tokio::sync::Mutex<()>>>;
    static LOCKS: std::sync::Mutex<Locks> = std::sync::Mutex::new(Locks::new());
    LOCKS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .entry(repo_root.to_string())
        .or_default()
        .clone()
}
/// Default and most seconds a test command may take.
const DEFAULT_TEST_SECS: u64 = 600;
/// Test output kept in the result.
const TEST_OUTPUT_TAIL: usize = 8 * 1024;

/// A git error as an API error: missing branches and targets are named as not found, a dirty
/// or moved target is a conflict, the rest internal.
pub fn git_error(e: WorktreeError) -> ApiError {
    match e {
        WorktreeError::NoBranch(b) => ApiError::NotFound {
            what: "branch".into(),
            id: b,
        },
        WorktreeError::NoTargetBranch(t) => ApiError::NotFound {
            what: "target branch".into(),
            id: t,
        },
        e @ (WorktreeError::TargetDirty { .. }
        | WorktreeError::TargetMoved { .. }
        | WorktreeError::NoTarget
        | WorktreeError::NotARepo(_)
        | WorktreeError::NoCommits(_)
        | WorktreeError::Undo { .. }
        | WorktreeError::IntegrationTouched { .. }) => ApiError::Conflict(e.to_string()),
        // A push: refused by its lease (someone else pushed there) is a conflict; anything
        // else (the network, the remote, a timeout) may pass next time.
        e @ WorktreeError::Push { .. } if e.to_string().contains("moved since Troupe") => {
            ApiError::Conflict(e.to_string())
        }
        e @ WorktreeError::Push { .. } => ApiError::Unavailable(e.to_string()),
        e => ApiError::Internal(e.to_string()),
    }
}

/// Runs git work off the async threads.
pub async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, WorktreeError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::Internal(format!("git task failed: {e}")))?
        .map_err(git_error)
}

/// A fact of the party on its timeline (a lost write is logged: the work itself is done).
pub async fn timeline(ctx: &Ctx, party: &PartyView, kind: &str, data: serde_json::Value) {
    let event = NewEvent {
        kind: kind.into(),
        project_id: Some(party.row.project_id.clone()),
        party_id: Some(party.row.party_id.clone()),
        data,
        ..NewEvent::default()
    };
    if let Err(e) = ctx.store.append_event(event).await {
        tracing::warn!(party = %party.row.party_id, error = %e, "timeline event lost");
    }
}

/// Sends a system message to a running member's session; false when it is not running (an
/// ended session takes no messages: the timeline and the person's notification carry it).
pub async fn tell_member(ctx: &Ctx, party: &PartyView, m: &MemberRow, text: &str) -> bool {
    let Some(session) = m
        .session_id
        .as_ref()
        .filter(|_| m.status == MemberStatus::Running)
    else {
        return false;
    };
    crate::collab::send(ctx, party, Recipients::Session(session.clone()), text).await
}

/// The merge queue: integrates the party's member branches in DAG order, runs the tests on the
/// result and moves the target only if they pass. Conflicting branches are left out and their
/// members and the person told; nothing but the target ever moves.
pub async fn land(ctx: &Ctx, p: LandPartyParams) -> Result<LandResult, ApiError> {
    land_as(ctx, p, None).await
}

/// `land` for a run (the `land` runner): the test command's processes carry the run's id, so
/// they end with it, even after a kill -9 of the daemon (recovery ends what a dead run left).
pub async fn land_as(
    ctx: &Ctx,
    p: LandPartyParams,
    run_id: Option<&str>,
) -> Result<LandResult, ApiError> {
    const OP: &str = "land_party";
    let party = PartyView::load(&ctx.store, &p.party_id)?;
    if p.test_command
        .as_deref()
        .is_some_and(|c| c.trim().is_empty())
    {
        return Err(ApiError::invalid(OP, "test_command must not be empty"));
    }
    let root = PathBuf::from(&party.row.repo_root);
    let (all, not_picked) = picked_checkouts(ctx, &party)?;
    if all.is_empty() {
        return Err(ApiError::Conflict(format!(
            "party {} has no member with a branch of its own (roles use isolation none, or none has started)",
            party.row.party_id
        )));
    }
    let one = repo_lock(&party.row.repo_root).lock_owned().await;
    let (branch, dir, wt_name) = integration_of(&ctx.layout, &party.row);
    let target = p.target.clone();
    let list: Vec<(String, String)> = all.iter().map(|c| (c.branch.clone(), c.label())).collect();
    let (git_strategy, root2, list2, branch2, synced) = (
        strategy(p.strategy),
        root.clone(),
        list.clone(),
        branch.clone(),
        all.clone(),
    );
    let dir2 = dir.clone();
    let by_queue = run_id.is_some();
    let (integrated, held) = blocking(move || {
        for c in &synced {
            sync_branch(&root2, c)?;
        }
        let _git = crate::project::git_lock();
        // A branch that never existed (the member never started its checkout) is named. A
        // branch that changes the project's Troupe config (`.troupe/`: its team, playbooks,
        // sandbox setting) is the person's to land, never the merge queue's: a member must not
        // choose the agents of the next launch.
        let mut held = std::collections::HashMap::new();
        let mut queued = Vec::new();
        for (b, label) in &list2 {
            let state = troupe_worktree::review::branch_state(&root2, b, target.as_deref())?;
            let own: Vec<String> = state
                .changed_files
                .iter()
                .filter(|f| f.starts_with(".troupe/"))
                .cloned()
                .collect();
            if by_queue && !own.is_empty() {
                held.insert(b.clone(), own);
            } else {
                queued.push((b.clone(), label.clone()));
            }
        }
        // Never over work someone did on the integration branch since the last landing.
        let marker = tip_marker(&dir2);
        let expected = std::fs::read_to_string(&marker).ok();
        git_land::check_integration(&root2, &branch2, expected.as_deref())?;
        let done = git_land::integrate(&root2, target.as_deref(), &queued, git_strategy, &branch2)?;
        if let Some(parent) = marker.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&marker, &done.tip)?;
        Ok((done, held))
    })
    .await?;
    let mut members: Vec<MemberLanding> = not_picked
        .iter()
        .map(|c| MemberLanding {
            role: c.member.role_name.clone(),
            index: c.member.instance_index,
            branch: c.branch.clone(),
            outcome: "not_picked".into(),
            commits: 0,
            conflicts: Vec::new(),
            resolver_run_id: None,
        })
        .collect();
    let mut conflicted = Vec::new();
    let mut outcomes = integrated.outcomes.iter();
    for c in &all {
        if let Some(files) = held.get(&c.branch) {
            members.push(MemberLanding {
                role: c.member.role_name.clone(),
                index: c.member.instance_index,
                branch: c.branch.clone(),
                outcome: "held_for_person".into(),
                commits: 0,
                conflicts: Vec::new(),
                resolver_run_id: None,
            });
            tell_person(
                ctx,
                &party,
                "landing_held",
                &format!(
                    "{}#{} changes the project's Troupe config ({}): the merge queue left it out; \
                     review it (get_member_diff) and land it yourself (land_party) if you agree",
                    c.member.role_name,
                    c.member.instance_index,
                    files.join(", ")
                ),
                json!({ "party_id": party.row.party_id, "role": c.member.role_name,
                        "index": c.member.instance_index, "files": files }),
            )
            .await;
            continue;
        }
        let Some((_, outcome)) = outcomes.next() else {
            break;
        };
        let (name, commits, conflicts) = match outcome {
            BranchOutcome::Integrated { commits, .. } => ("integrated", *commits, Vec::new()),
            BranchOutcome::NothingToLand => ("nothing_to_land", 0, Vec::new()),
            BranchOutcome::Conflict(files) => (
                "conflict",
                0,
                files
                    .iter()
                    .map(|f| ConflictFileView {
                        path: f.path.clone(),
                        hunks: f.hunks.clone(),
                    })
                    .collect(),
            ),
        };
        if name == "conflict" {
            conflicted.push(c.clone());
        }
        members.push(MemberLanding {
            role: c.member.role_name.clone(),
            index: c.member.instance_index,
            branch: c.branch.clone(),
            outcome: name.into(),
            commits,
            conflicts,
            resolver_run_id: None,
        });
    }
    let mut result = LandResult {
        party_id: party.row.party_id.clone(),
        target: integrated.target.clone(),
        strategy: p.strategy,
        landed: false,
        start: integrated.start.clone(),
        tip: integrated.tip.clone(),
        integration_branch: branch.clone(),
        integration_dir: None,
        members,
        test: None,
        pull_request: None,
        summary: String::new(),
    };
    let integrated_any = result.members.iter().any(|m| m.outcome == "integrated");
    if !integrated_any {
        let waiting: Vec<String> = result
            .members
            .iter()
            .map(|m| format!("{}#{} ({})", m.role, m.index, m.outcome.replace('_', " ")))
            .collect();
        result.summary = format!(
            "nothing to land on {}: {}",
            result.target,
            waiting.join(", ")
        );
        if conflicted.is_empty() {
            return Err(ApiError::Conflict(format!(
                "party {}: {}; no member has commits that {} lacks",
                party.row.party_id, result.summary, result.target
            )));
        }
        report_conflicts(ctx, &party, &conflicted, &mut result, &branch, false).await;
        timeline(ctx, &party, "land_stopped", json!(&result)).await;
        return Ok(result);
    }
    // A party started from an issue delivers as a pull request whatever its queue says.
    let to = match p.to {
        LandTo::Branch
            if ctx
                .store
                .get_forge_link(&party.row.party_id)?
                .is_some_and(|l| l.issue_number.is_some()) =>
        {
            LandTo::PullRequest
        }
        to => to,
    };
    // Refuse early, before the tests, when the target cannot be moved anyway (a pull request
    // moves nothing of the person's: their checkout may be as dirty as it likes).
    let (root2, target2, start2, tip2) = (
        root.clone(),
        result.target.clone(),
        result.start.clone(),
        result.tip.clone(),
    );
    if to == LandTo::Branch {
        blocking(move || git_land::check_target(&root2, &target2, &start2, &tip2)).await?;
    }
    if !p.dry_run {
        // Where it stands, for whoever follows the landing (`troupe land`'s progress).
        let data = json!({ "branch": branch, "tip": result.tip, "test_command": p.test_command });
        timeline(ctx, &party, "land_integrated", data).await;
    }
    if let Some(command) = &p.test_command {
        let (root2, dir2, wt2, branch2) =
            (root.clone(), dir.clone(), wt_name.clone(), branch.clone());
        let workdir = blocking(move || {
            let _git = crate::project::git_lock();
            git_land::checkout_integration(&root2, &dir2, &wt2, &branch2)
        })
        .await?;
        result.integration_dir = Some(workdir.display().to_string());
        let secs = p
            .test_timeout_secs
            .unwrap_or(DEFAULT_TEST_SECS)
            .clamp(1, 24 * 3600);
        let marker: Vec<(String, String)> = run_id
            .map(|r| vec![("TROUPE_RUN_ID".to_string(), r.to_string())])
            .unwrap_or_default();
        let run = crate::shell::run(
            command,
            &workdir,
            &marker,
            Duration::from_secs(secs),
            TEST_OUTPUT_TAIL,
            &ctx.sandbox,
        )
        .await;
        let test = TestRun {
            command: command.clone(),
            passed: run.passed,
            exit_code: run.exit_code,
            output: run.output,
        };
        let passed = test.passed;
        if passed && !p.dry_run {
            let data = json!({ "command": command, "exit_code": test.exit_code });
            timeline(ctx, &party, "land_tests_passed", data).await;
        }
        result.test = Some(test);
        if !passed {
            result.summary = format!(
                "the tests failed on the integration branch {}; {} was not moved",
                branch, result.target
            );
            timeline(ctx, &party, "land_tests_failed", json!(&result)).await;
            tell_person(
                ctx,
                &party,
                "land_tests_failed",
                &result.summary,
                json!({ "party_id": party.row.party_id, "integration_branch": branch }),
            )
            .await;
            return Ok(result);
        }
    }
    let landed: Vec<String> = result
        .members
        .iter()
        .filter(|m| m.outcome == "integrated")
        .map(|m| format!("{}#{}", m.role, m.index))
        .collect();
    if p.dry_run {
        result.summary = format!(
            "dry run: {} would land on {} at {}",
            landed.join(", "),
            result.target,
            short(&result.tip)
        );
        return Ok(result);
    }
    if to == LandTo::PullRequest {
        let _one = one;
        let pull = pull::deliver(ctx, &party, &result).await;
        let pull = match pull {
            Ok(pull) => pull,
            Err(e) => {
                let text = format!("the pull request could not be delivered: {e}");
                timeline(
                    ctx,
                    &party,
                    "pull_request_failed",
                    json!({ "error": e.to_string() }),
                )
                .await;
                tell_person(
                    ctx,
                    &party,
                    "forge_error",
                    &text,
                    json!({ "party_id": party.row.party_id }),
                )
                .await;
                return Err(e);
            }
        };
        result.summary = format!(
            "delivered {} as pull request #{} on {} ({})",
            landed.join(", "),
            pull.number.unwrap_or_default(),
            pull.repo,
            pull.url.clone().unwrap_or_default()
        );
        if !conflicted.is_empty() {
            let left: Vec<String> = conflicted.iter().map(Checkout::label).collect();
            result
                .summary
                .push_str(&format!("; left out with conflicts: {}", left.join(", ")));
        }
        result.pull_request = Some(pull);
        timeline(ctx, &party, "party_delivered", json!(&result)).await;
        report_conflicts(ctx, &party, &conflicted, &mut result, &branch, true).await;
        return Ok(result);
    }
    // The last part runs to its end even if the caller stops waiting (a cancelled land run, a
    // dropped request): a moved target is always recorded, and its lock is held until then.
    let ctx2 = ctx.clone();
    let finish = tokio::spawn(async move {
        let _one = one;
        let (root2, target2, start2, tip2) = (
            root.clone(),
            result.target.clone(),
            result.start.clone(),
            result.tip.clone(),
        );
        blocking(move || {
            let _git = crate::project::git_lock();
            git_land::advance_target(&root2, &target2, &start2, &tip2)
        })
        .await?;
        result.landed = true;
        result.summary = format!(
            "landed {} on {} ({} → {})",
            landed.join(", "),
            result.target,
            short(&result.start),
            short(&result.tip)
        );
        if !conflicted.is_empty() {
            let left: Vec<String> = conflicted.iter().map(Checkout::label).collect();
            result
                .summary
                .push_str(&format!("; left out with conflicts: {}", left.join(", ")));
        }
        // Members it took are no longer conflicts waiting for the person (the store
        // announces the inbox's change with this event).
        timeline(&ctx2, &party, "party_landed", json!(&result)).await;
        report_conflicts(&ctx2, &party, &conflicted, &mut result, &branch, true).await;
        Ok(result)
    });
    finish
        .await
        .map_err(|e| ApiError::Internal(format!("the landing's last step failed: {e}")))?
}
