//! Handlers for landing the work: managed worktrees, a member's diff and commits, reviews of a
//! member's work, the merge queue and the conflict radar's predictions. Best of N: once a `pick`
//! role's attempts are all done, its judge is briefed with every attempt's diff (`start_agent`)
//! and answers with `pick_member`; only the picked branch lands.

use std::path::Path;
use std::sync::Arc;

use serde_json::json;
use troupe_api::ApiError;
use troupe_api::types::*;
use troupe_store::{AgentRun, NewEvent};

use crate::collab::{Ctx, PartyView};
use crate::daemon::Daemon;
use crate::landing::{blocking, checkout_of, checkouts, measure, measure_with, tell_member};

pub async fn list_worktrees(
    d: &Daemon,
    p: ListWorktreesParams,
) -> Result<WorktreesResult, ApiError> {
    // A member sees its own party's checkouts only.
    let party_id = match (&p.session_id, &p.party_id) {
        (Some(s), asked) => {
            let own = d.store.get_session(s)?.party_id.ok_or_else(|| {
                ApiError::Forbidden(format!(
                    "session {s} is in no party: it has no checkouts to see"
                ))
            })?;
            if asked.as_ref().is_some_and(|a| a != &own) {
                return Err(ApiError::Forbidden(format!(
                    "session {s} is a member of party {own}, not of the one asked about"
                )));
            }
            Some(own)
        }
        (None, asked) => asked.clone(),
    };
    let parties = match &party_id {
        Some(id) => vec![PartyView::load(&d.store, id)?],
        None => d
            .store
            .list_parties_brief(None, None)?
            .into_iter()
            .filter_map(|row| PartyView::load(&d.store, &row.party_id).ok())
            .collect(),
    };
    let target = p.target.clone();
    blocking(move || {
        let mut worktrees = Vec::new();
        for party in &parties {
            for c in checkouts(party) {
                if !Path::new(&c.workdir).exists() {
                    continue; // cleaned up
                }
                worktrees.push(measure(party, &c, target.as_deref())?);
            }
        }
        Ok(WorktreesResult { worktrees })
    })
    .await
}

pub async fn get_member_diff(
    d: &Daemon,
    p: MemberDiffParams,
) -> Result<MemberDiffResult, ApiError> {
    let party = PartyView::load(&d.store, &p.party_id)?;
    crate::collab::caller(&party, p.session_id.as_deref())?;
    let c = checkout_of(&party, &p.role, p.index)?;
    blocking(move || {
        let root = Path::new(&party.row.repo_root);
        let (worktree, files) = measure_with(&party, &c, p.target.as_deref(), || {
            troupe_worktree::review::branch_diff(
                root,
                &c.branch,
                p.target.as_deref(),
                p.path.as_deref(),
            )
        })?;
        let mut views: Vec<FileDiffView> = files
            .into_iter()
            .map(|f| FileDiffView {
                path: f.path,
                old_path: f.old_path,
                status: f.status,
                additions: f.additions,
                deletions: f.deletions,
                binary: f.binary,
                patch: f.patch,
                base_text: None,
                head_text: None,
            })
            .collect();
        if let Some(path) = &p.path {
            let (base, head) =
                troupe_worktree::review::file_versions(root, &c.branch, p.target.as_deref(), path)?;
            match views.first_mut() {
                Some(v) => {
                    v.base_text = base;
                    v.head_text = head;
                }
                None => {
                    return Err(troupe_worktree::WorktreeError::NoBranch(format!(
                        "{} has no change to {path}; its changed files: {}",
                        c.branch,
                        worktree.changed_files.join(", ")
                    )));
                }
            }
        }
        Ok(MemberDiffResult {
            additions: views.iter().map(|f| f.additions).sum(),
            deletions: views.iter().map(|f| f.deletions).sum(),
            worktree,
            files: views,
        })
    })
    .await
}

pub async fn list_member_commits(
    d: &Daemon,
    p: MemberParams,
) -> Result<MemberCommitsResult, ApiError> {
    let party = PartyView::load(&d.store, &p.party_id)?;
    crate::collab::caller(&party, p.session_id.as_deref())?;
    let c = checkout_of(&party, &p.role, p.index)?;
    blocking(move || {
        let (worktree, commits) = measure_with(&party, &c, p.target.as_deref(), || {
            troupe_worktree::review::branch_commits(
                Path::new(&party.row.repo_root),
                &c.branch,
                p.target.as_deref(),
            )
        })?;
        Ok(MemberCommitsResult {
            worktree,
            commits: commits
                .into_iter()
                .map(|c| CommitView {
                    id: c.id,
                    summary: c.summary,
                    message: c.message,
                    author: c.author,
                    time: c.time,
                })
                .collect(),
        })
    })
    .await
}

pub async fn review_member(
    d: &Daemon,
    p: ReviewMemberParams,
) -> Result<ReviewMemberResult, ApiError> {
    const OP: &str = "review_member";
    let party = PartyView::load(&d.store, &p.party_id)?;
    let c = checkout_of(&party, &p.role, p.index)?;
    if p.comments.iter().any(|c| c.text.trim().is_empty()) {
        return Err(ApiError::invalid(OP, "a comment's text must not be empty"));
    }
    if p.restart && p.verdict == ReviewVerdict::Approve {
        return Err(ApiError::invalid(
            OP,
            "restart goes with request_changes or comment, not approve",
        ));
    }
    if p.verdict == ReviewVerdict::Comment && p.comments.is_empty() && p.summary.is_none() {
        return Err(ApiError::invalid(
            OP,
            "a comment review needs comments or a summary",
        ));
    }
    let verdict = match p.verdict {
        ReviewVerdict::Approve => "approved",
        ReviewVerdict::RequestChanges => "requested changes to",
        ReviewVerdict::Comment => "commented on",
    };
    let reviewer = crate::collab::caller(&party, p.session_id.as_deref())?;
    if !reviewer.may_lead() {
        return Err(ApiError::Forbidden(format!(
            "only the leader or the person reviews members' work; {} is neither",
            reviewer.name
        )));
    }
    if reviewer.session_id.is_some() && reviewer.session_id == c.member.session_id {
        return Err(ApiError::Forbidden(format!(
            "{}#{} cannot review its own work",
            p.role, p.index
        )));
    }
    let who = if reviewer.is_person() {
        "the person".to_string()
    } else {
        format!("{} (the reviewer)", reviewer.name)
    };
    let mut text = format!("{who} {verdict} your work on {}", c.branch);
    if let Some(s) = &p.summary {
        text.push_str(&format!(": {s}"));
    }
    for comment in &p.comments {
        let at = match (&comment.path, comment.line) {
            (Some(path), Some(line)) => format!("{path}:{line}: "),
            (Some(path), None) => format!("{path}: "),
            _ => String::new(),
        };
        text.push_str(&format!("\n- {at}{}", comment.text));
    }
    let ctx = Ctx::of(d);
    let delivered = tell_member(&ctx, &party, &c.member, &text).await;
    let restarted_run_id = if p.restart && !delivered {
        Some(crate::landing::rework(&ctx, &party, &c, "address this review", &text).await?)
    } else {
        None
    };
    d.store
        .append_event(NewEvent {
            kind: "member_reviewed".into(),
            project_id: Some(party.row.project_id.clone()),
            party_id: Some(party.row.party_id.clone()),
            session_id: c.member.session_id.clone(),
            data: json!({ "role": p.role, "index": p.index, "branch": c.branch, "reviewer": reviewer.name,
                          "verdict": p.verdict, "summary": p.summary, "comments": p.comments }),
        })
        .await?;
    Ok(ReviewMemberResult {
        party_id: party.row.party_id,
        role: p.role,
        index: c.member.instance_index,
        verdict: p.verdict,
        delivered,
        restarted_run_id,
    })
}

pub async fn land_party(d: &Daemon, p: LandPartyParams) -> Result<LandResult, ApiError> {
    let party_id = p.party_id.clone();
    let result = crate::landing::land(&Ctx::of(d), p).await?;
    if result.landed {
        resume_paused_land_roles(d, &party_id).await;
    }
    Ok(result)
}

/// The person landed the party's work: a `land` role paused on an earlier refusal (a dirty or
/// moved target, failing tests) has nothing left to do. Its pause is lifted as `signal_role
/// proceed` would (its crashed member skipped), so the party goes on instead of waiting in the
/// inbox after its work landed.
async fn resume_paused_land_roles(d: &Daemon, party_id: &str) {
    let Ok(status) = crate::ops::get_party_status(
        d,
        PartyIdParams {
            party_id: party_id.to_string(),
        },
    )
    .await
    else {
        return;
    };
    let Ok(party) = PartyView::load(&d.store, party_id) else {
        return;
    };
    // The runner the role runs, its overrides applied.
    let lands = |role: &str| {
        party.snapshot.party.roles.get(role).is_some_and(|r| {
            let runner = r
                .overrides
                .as_ref()
                .and_then(|o| o.runner.clone())
                .or_else(|| {
                    party
                        .snapshot
                        .agents
                        .get(&r.agent)
                        .map(|a| a.runner.clone())
                });
            runner.as_deref() == Some(crate::runners::land::LAND)
        })
    };
    for role in status.roles.iter().filter(|r| r.paused && lands(&r.role)) {
        let signalled = d
            .orchestrator
            .request(|reply| crate::orchestrator::Command::Signal {
                party_id: party_id.to_string(),
                role: role.role.clone(),
                signal: troupe_engine::Signal::Proceed,
                reply,
            })
            .await;
        if let Err(e) = signalled {
            tracing::warn!(party = %party_id, role = %role.role, error = %e, "a paused land role was not resumed after the landing");
        }
    }
}

pub async fn list_conflicts(
    d: &Daemon,
    p: ListConflictsParams,
) -> Result<ConflictsResult, ApiError> {
    if let Some(id) = &p.party_id {
        d.store.get_party(id)?;
    }
    let root = match &p.cwd {
        Some(cwd) => Some(
            crate::project::resolve_project_root(Path::new(cwd))
                .map_err(|e| ApiError::invalid("list_conflicts", format!("cwd {cwd}: {e}")))?
                .0
                .display()
                .to_string(),
        ),
        None => None,
    };
    let conflicts = d
        .radar
        .current(p.party_id.as_deref())
        .into_iter()
        .filter(|c| root.as_ref().is_none_or(|r| &c.repo_root == r))
        .collect();
    Ok(ConflictsResult { conflicts })
}

pub async fn pick_member(d: &Daemon, p: PickMemberParams) -> Result<PickResult, ApiError> {
    let party = PartyView::load(&d.store, &p.party_id)?;
    let role = party
        .snapshot
        .party
        .roles
        .get(&p.role)
        .ok_or_else(|| ApiError::NotFound {
            what: format!("role in party {}", party.row.party_id),
            id: p.role.clone(),
        })?;
    let Some(spec) = &role.pick else {
        return Err(ApiError::invalid(
            "pick_member",
            format!(
                "role {} does not pick the best of its attempts (no `pick` in the party definition)",
                p.role
            ),
        ));
    };
    checkout_of(&party, &p.role, p.index)?;
    let picking = d
        .store
        .member_picks(&party.row.party_id)?
        .into_iter()
        .find(|x| x.role_name == p.role);
    let picked_by = match &p.session_id {
        None => crate::collab::PERSON.to_string(),
        Some(s) => {
            let judge = d.store.run_of_session(s)?.filter(|r| {
                picking.as_ref().and_then(|x| x.judge_run_id.as_ref()) == Some(&r.run_id)
            });
            match judge {
                Some(run) => run.agent_name,
                None => {
                    let caller = crate::collab::caller(&party, Some(s))?;
                    if !caller.is_leader {
                        return Err(ApiError::Forbidden(format!(
                            "only role {}'s judge ({}), the leader or the person picks its attempt",
                            p.role,
                            spec.judge.as_deref().unwrap_or("none")
                        )));
                    }
                    caller.name
                }
            }
        }
    };
    let pick = d
        .store
        .pick_member(
            party.row.party_id.clone(),
            p.role,
            i64::from(p.index),
            picked_by,
            p.reason,
        )
        .await?;
    Ok(PickResult { pick })
}

/// Whether a party's role picks among its attempts. A party's launch snapshot never changes, so
/// its picking roles are read once per party (reading the snapshot at each member's end cost
/// as much as the party is large) and kept for the last parties asked about.
fn picks(d: &Daemon, party_id: &str, role: &str) -> bool {
    const KEPT: usize = 256;
    let known = || {
        d.pick_roles
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    };
    let cached = known().get(party_id).cloned();
    let roles = match cached {
        Some(roles) => roles,
        None => {
            let Ok(roles) = d.store.pick_roles(party_id) else {
                return false;
            };
            let roles = Arc::new(roles);
            let mut map = known();
            if map.len() >= KEPT {
                map.clear();
            }
            map.insert(party_id.to_string(), roles.clone());
            roles
        }
    };
    roles.iter().any(|r| r == role)
}

/// After a party member's `complete`: when it was the last attempt of a best-of-N role to
/// finish, the picking starts (its judge, or a notification asking the person).
pub(super) async fn after_member_done(d: &Daemon, run: &AgentRun) {
    let (Some(party_id), Some(role)) = (&run.party_id, &run.role_name) else {
        return;
    };
    // Most roles pick nothing: that is known without loading the party (its members).
    if !picks(d, party_id, role) {
        return;
    }
    let Ok(party) = PartyView::load(&d.store, party_id) else {
        return;
    };
    let Some(spec) = party
        .snapshot
        .party
        .roles
        .get(role)
        .and_then(|r| r.pick.clone())
    else {
        return;
    };
    let done = party
        .members
        .iter()
        .filter(|m| &m.role_name == role)
        .all(|m| {
            m.agent_run_id
                .as_deref()
                .and_then(|r| d.store.get_run(r).ok())
                .is_some_and(|r| r.status.is_completed())
        });
    if !done
        || !d
            .store
            .claim_pick(party_id.clone(), role.clone())
            .await
            .unwrap_or(false)
    {
        return;
    }
    let ctx = Ctx::of(d);
    let asked = match &spec.judge {
        Some(judge) => start_judge(d, &party, role, judge).await,
        None => Err("it has no judge".to_string()),
    };
    if let Err(why) = asked {
        crate::collab::tell_person(
            &ctx,
            &party,
            "pick_needed",
            &format!(
                "role {role}'s attempts are done and {why}: pick the one to land (pick_member)"
            ),
            json!({ "party_id": party_id, "role": role }),
        )
        .await;
    }
}

async fn start_judge(d: &Daemon, party: &PartyView, role: &str, judge: &str) -> Result<(), String> {
    let ctx = Ctx::of(d);
    let prompt = crate::landing::judge_prompt(&ctx, party, role)
        .await
        .map_err(|e| format!("its judge could not be briefed ({e})"))?;
    let root = party.row.repo_root.clone();
    let name = Path::new(&root)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let system = d
        .store
        .system_session(root, name)
        .await
        .map_err(|e| e.to_string())?;
    let started = super::start_agent(
        d,
        StartAgentParams {
            agent: judge.to_string(),
            prompt,
            parent_session_id: system.session_id,
            task: None,
            timeout: None,
            session_context: None,
            overrides: None,
        },
    )
    .await
    .map_err(|e| format!("its judge {judge} did not start ({e})"))?;
    d.store
        .set_judge(party.row.party_id.clone(), role.to_string(), started.run_id)
        .await
        .map_err(|e| e.to_string())?;
    Ok(())
}

/// After a run's `complete`: a judge that finished without `pick_member` may have answered in
/// its artifacts (`pick`: the attempt); else the person is asked.
pub(super) async fn after_judge_done(d: &Daemon, run: &AgentRun) {
    let Ok(Some(picking)) = d.store.picking_of_judge(&run.run_id) else {
        return;
    };
    if picking.instance_index.is_some() {
        return;
    }
    let answer = d
        .store
        .get_run(&run.run_id)
        .ok()
        .and_then(|r| r.result)
        .and_then(|r| r["artifacts"]["pick"].as_u64())
        .and_then(|i| u32::try_from(i).ok());
    let picked = match answer {
        Some(index) => pick_member(
            d,
            PickMemberParams {
                party_id: picking.party_id.clone(),
                role: picking.role_name.clone(),
                index,
                reason: Some("the judge's answer".into()),
                session_id: Some(run.session_id.clone()),
            },
        )
        .await
        .map_err(|e| e.to_string()),
        None => Err("it gave no pick".to_string()),
    };
    if let Err(why) = picked
        && let Ok(party) = PartyView::load(&d.store, &picking.party_id)
    {
        crate::collab::tell_person(
            &Ctx::of(d),
            &party,
            "pick_needed",
            &format!(
                "the judge of role {} finished without a pick ({why}): pick the attempt to land (pick_member)",
                picking.role_name
            ),
            json!({ "party_id": picking.party_id, "role": picking.role_name }),
        )
        .await;
    }
}
