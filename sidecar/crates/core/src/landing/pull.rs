//! Delivering a landing as a pull request (`to: pull_request`): the integrated, tested tip is
//! pushed by the daemon (never a member) to the project's forge remote as the integration
//! branch, and the party's pull request is opened on the target — or, on a later round, its
//! branch moved (with a lease: work someone else pushed there is never overwritten) and its
//! body updated with the delivery summary. The issue the party started from hears of it when
//! the project asks for that.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;
use troupe_api::ApiError;
use troupe_api::types::{LandResult, PullRequestView};
use troupe_forge::NewPull;
use troupe_store::{ForgeLink, NewEvent};

use super::blocking;
use crate::collab::{Ctx, PartyView};
use crate::forge::{ProjectForge, api_error, retry};

/// Who pushes and opens every pull request.
pub const PUSHED_BY: &str = "the Troupe daemon, with its owner's forge credential";

/// How long one push may take.
const PUSH_TIMEOUT: Duration = Duration::from_secs(300);

/// The view of a party's link.
pub fn view(link: &ForgeLink, project: &ProjectForge) -> PullRequestView {
    PullRequestView {
        party_id: link.party_id.clone(),
        repo: link.repo.clone(),
        number: link.pull_number,
        url: link.pull_url.clone(),
        head_branch: link.head_branch.clone(),
        base_branch: link.base_branch.clone(),
        head_sha: link.head_sha.clone(),
        state: link.state.clone(),
        ci_rounds: link.ci_rounds,
        max_ci_rounds: i64::from(project.max_ci_rounds),
        issue: link.issue_number.map(|n| format!("{}#{n}", link.repo)),
        detail: link.detail.clone(),
        pushed_by: PUSHED_BY.into(),
    }
}

/// Pushes the landing's tip and opens (or updates) the party's pull request.
pub async fn deliver(
    ctx: &Ctx,
    party: &PartyView,
    result: &LandResult,
) -> Result<PullRequestView, ApiError> {
    let root = PathBuf::from(&party.row.repo_root);
    let project = ProjectForge::of(&root).map_err(ApiError::Unavailable)?;
    let repo = ctx.forges.repo_of(&root, &project.remote)?;
    let client = ctx.forges.client().await?;
    let before = ctx.store.get_forge_link(&party.row.party_id)?;
    let branch = result.integration_branch.clone();
    // The lease: what Troupe pushed there last (nothing: the branch must not exist yet).
    let expect = before
        .as_ref()
        .filter(|l| l.head_branch.as_deref() == Some(branch.as_str()))
        .and_then(|l| l.head_sha.clone());
    if expect.as_deref() != Some(result.tip.as_str()) {
        let url =
            troupe_worktree::push::remote_url(&root, &project.remote).map_err(super::git_error)?;
        let token = ctx.forges.push_credential(&url).await?;
        let scratch = ctx.forges.scratch();
        let (root2, remote, tip, branch2) = (
            root.clone(),
            project.remote.clone(),
            result.tip.clone(),
            branch.clone(),
        );
        blocking(move || {
            troupe_worktree::push::push(
                &root2,
                &troupe_worktree::push::Push {
                    remote: &remote,
                    commit: &tip,
                    branch: &branch2,
                    expect: expect.as_deref(),
                    credential: token
                        .as_ref()
                        .map(|t| troupe_worktree::push::PushCredential {
                            username: "x-access-token",
                            password: t.expose(),
                            scratch: &scratch,
                        }),
                    timeout: PUSH_TIMEOUT,
                },
            )
        })
        .await?;
        // What was pushed is recorded before the pull request is asked for: a failure after
        // this point finds the lease's value next time.
        let mut pushed = before
            .clone()
            .unwrap_or_else(|| ForgeLink::new(&party.row.party_id, &repo.to_string()));
        pushed.head_branch = Some(branch.clone());
        pushed.base_branch = Some(result.target.clone());
        pushed.head_sha = Some(result.tip.clone());
        ctx.store.put_forge_link(pushed, None).await?;
    }
    let before = ctx.store.get_forge_link(&party.row.party_id)?;
    let summary = crate::delivery::summary(&ctx.store, &party.row.party_id)?;
    let what = format!("the pull request of party {} on {repo}", party.row.party_id);
    let known = before.as_ref().and_then(|l| l.pull_number);
    let found = match known {
        Some(n) => Some(
            retry(&what, || client.pull(&repo, n as u64))
                .await
                .map_err(|e| api_error(&what, e))?,
        )
        .filter(|p| p.state == "open"),
        None => retry(&what, || client.find_open_pull(&repo, &branch))
            .await
            .map_err(|e| api_error(&what, e))?,
    };
    let (pull, opened) = match found {
        Some(p) => (
            retry(&what, || {
                client.update_pull_body(&repo, p.number, &summary.markdown)
            })
            .await
            .map_err(|e| api_error(&what, e))?,
            false,
        ),
        None => {
            let new = NewPull {
                head: branch.clone(),
                base: result.target.clone(),
                title: pull_title(&summary.request),
                body: summary.markdown.clone(),
                draft: project.draft,
            };
            (
                retry(&what, || client.open_pull(&repo, &new))
                    .await
                    .map_err(|e| api_error(&what, e))?,
                true,
            )
        }
    };
    let link = ForgeLink {
        party_id: party.row.party_id.clone(),
        repo: repo.to_string(),
        issue_number: before.as_ref().and_then(|l| l.issue_number),
        pull_number: Some(pull.number as i64),
        pull_url: Some(pull.url.clone()),
        head_branch: Some(branch.clone()),
        base_branch: Some(result.target.clone()),
        head_sha: Some(result.tip.clone()),
        state: "open".into(),
        ci_rounds: before.as_ref().map_or(0, |l| l.ci_rounds),
        detail: None,
        created_at: String::new(),
        updated_at: String::new(),
    };
    let kind = if opened {
        "pull_request_opened"
    } else {
        "pull_request_updated"
    };
    let event = NewEvent {
        kind: kind.into(),
        project_id: Some(party.row.project_id.clone()),
        party_id: Some(party.row.party_id.clone()),
        session_id: None,
        data: json!({ "repo": link.repo, "number": pull.number, "url": pull.url,
                      "branch": branch, "tip": result.tip, "pushed_by": PUSHED_BY }),
    };
    let link = ctx.store.put_forge_link(link, Some(event)).await?;
    if opened
        && project.comment_on_pull_request
        && let Some(issue) = link.issue_number
    {
        let text = format!(
            "The Troupe party working on this opened #{}: {}",
            pull.number, pull.url
        );
        let what = format!("commenting on {repo}#{issue}");
        if let Err(e) = retry(&what, || client.comment(&repo, issue as u64, &text)).await {
            crate::collab::tell_person(
                ctx,
                party,
                "forge_error",
                &format!("{what} failed: {e}"),
                json!({ "party_id": party.row.party_id }),
            )
            .await;
        }
    }
    Ok(view(&link, &project))
}

/// A pull request's title: the request's first line, bounded.
fn pull_title(request: &str) -> String {
    let line = request.lines().next().unwrap_or("Troupe party").trim();
    let mut title: String = line.chars().take(120).collect();
    if title.is_empty() {
        title = "Troupe party".into();
    }
    title
}
