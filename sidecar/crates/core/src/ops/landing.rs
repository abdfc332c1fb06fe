//! Handlers for landing the work: managed worktrees, a member's diff and commits, reviews of a
//! member's work, the merge queue and the conflict radar's predictions.

use std::path::Path;

use serde_json::json;
use troupe_api::ApiError;
use troupe_api::types::*;
use troupe_store::NewEvent;

use crate::collab::{Ctx, PartyView};
use crate::daemon::Daemon;
use crate::landing::{blocking, checkout_of, checkouts, measure, tell_member};

pub async fn list_worktrees(
    d: &Daemon,
    p: ListWorktreesParams,
) -> Result<WorktreesResult, ApiError> {
    let parties = match &p.party_id {
        Some(id) => vec![PartyView::load(&d.store, id)?],
        None => d
            .store
            .list_parties(None, None)?
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
    let c = checkout_of(&party, &p.role, p.index)?;
    blocking(move || {
        let worktree = measure(&party, &c, p.target.as_deref())?;
        let root = Path::new(&party.row.repo_root);
        let (_, files) = troupe_worktree::review::branch_diff(
            root,
            &c.branch,
            p.target.as_deref(),
            p.path.as_deref(),
        )?;
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
    let c = checkout_of(&party, &p.role, p.index)?;
    blocking(move || {
        let worktree = measure(&party, &c, p.target.as_deref())?;
        let (_, commits) = troupe_worktree::review::branch_commits(
            Path::new(&party.row.repo_root),
            &c.branch,
            p.target.as_deref(),
        )?;
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
    })
}

pub async fn land_party(d: &Daemon, p: LandPartyParams) -> Result<LandResult, ApiError> {
    crate::landing::land(&Ctx::of(d), p).await
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
