//! Handlers for the forge: a party's delivery summary, its pull request, merging it, and the
//! events the forge sends (a delivery id seen before is refused).

use serde_json::json;
use troupe_api::ApiError;
use troupe_api::types::*;

use crate::collab::{Ctx, PartyView};
use crate::daemon::Daemon;
use crate::forge_events::{Decision, claim_start, decide, record_ignored, release_start};

pub async fn get_delivery_summary(
    d: &Daemon,
    p: PartyIdParams,
) -> Result<DeliverySummary, ApiError> {
    crate::delivery::summary(&d.store, &p.party_id)
}

pub async fn get_pull_request(d: &Daemon, p: PartyIdParams) -> Result<PullRequestView, ApiError> {
    crate::pulls::view(&Ctx::of(d), &p.party_id)
}

pub async fn merge_pull_request(
    d: &Daemon,
    p: MergePullRequestParams,
) -> Result<PullRequestView, ApiError> {
    let ctx = Ctx::of(d);
    let party = PartyView::load(&d.store, &p.party_id)?;
    let link = d
        .store
        .get_forge_link(&p.party_id)?
        .ok_or_else(|| ApiError::NotFound {
            what: "pull request of party".into(),
            id: p.party_id.clone(),
        })?;
    match link.state.as_str() {
        "open" | "ready" | "gave_up" => {}
        other => {
            return Err(ApiError::Conflict(format!(
                "party {}'s pull request is {other}: there is nothing to merge",
                p.party_id
            )));
        }
    }
    // Only the head the daemon pushed (a push someone made since is theirs to merge).
    let head = link.head_sha.clone().ok_or_else(|| {
        ApiError::Conflict(format!("party {} has pushed nothing yet", p.party_id))
    })?;
    crate::pulls::merge(&ctx, &party, link, &head).await?;
    crate::pulls::view(&ctx, &p.party_id)
}

pub async fn receive_forge_event(
    d: &Daemon,
    p: ForgeEventParams,
) -> Result<ForgeEventResult, ApiError> {
    const OP: &str = "receive_forge_event";
    let id = p.delivery_id.trim();
    if id.is_empty() || id.len() > 200 {
        return Err(ApiError::invalid(
            OP,
            "delivery_id must be 1 to 200 characters",
        ));
    }
    if p.event.trim().is_empty() {
        return Err(ApiError::invalid(OP, "event must not be empty"));
    }
    // The delivery id is not signed: the same signed body under a new id is a replay too.
    let body = serde_json::to_vec(&p.payload).map_err(|e| ApiError::Internal(e.to_string()))?;
    let digest: String = <sha2::Sha256 as sha2::Digest>::digest(&body)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let keys = vec![
        format!("delivery:{id}"),
        format!("payload:{}:{digest}", p.event),
    ];
    let fresh = d.store.claim_forge_keys(keys, None, None).await?;
    if fresh.len() < 2 {
        record_ignored(
            d,
            None,
            &p.event,
            &format!("delivery {id} was received before: a replay is refused"),
        )
        .await;
        return Err(ApiError::Conflict(format!(
            "delivery {id} was received before: a replay is refused"
        )));
    }
    match decide(d, &p.event, &p.payload).await {
        Decision::Wake => {
            d.forges.wake.notify_one();
            Ok(ForgeEventResult {
                outcome: "woke".into(),
                party_id: None,
                reason: format!("a {} event: the pull requests are looked at now", p.event),
            })
        }
        Decision::Ignore { project_id, reason } => {
            record_ignored(d, project_id, &p.event, &reason).await;
            Ok(ForgeEventResult {
                outcome: "ignored".into(),
                party_id: None,
                reason,
            })
        }
        Decision::Start {
            root,
            party,
            issue,
            project_id,
        } => {
            if !claim_start(d, &issue).await? {
                return Ok(ForgeEventResult {
                    outcome: "ignored".into(),
                    party_id: None,
                    reason: format!("{issue} has started a party before"),
                });
            }
            let launched = super::launch_party(
                d,
                LaunchPartyParams {
                    name: party.clone(),
                    task_id: None,
                    inputs: None,
                    issue: Some(issue.clone()),
                    cwd: Some(root.display().to_string()),
                    project_id: None,
                    roles: Default::default(),
                    created_by_session_id: None,
                    mode: LaunchMode::Spawn,
                },
            )
            .await;
            let launched = match launched {
                Ok(l) => l,
                Err(e) => {
                    // Not started: the next event (or the person) may start it.
                    release_start(d, &issue).await;
                    record_ignored(
                        d,
                        Some(project_id),
                        &p.event,
                        &format!("starting party {party} on {issue} failed: {e}"),
                    )
                    .await;
                    return Err(e);
                }
            };
            d.store
                .append_event(troupe_store::NewEvent {
                    kind: "forge_event_started_party".into(),
                    party_id: Some(launched.party_id.clone()),
                    data: json!({ "event": p.event, "delivery_id": id, "issue": issue, "party": party }),
                    ..troupe_store::NewEvent::default()
                })
                .await?;
            Ok(ForgeEventResult {
                outcome: "started".into(),
                party_id: Some(launched.party_id),
                reason: format!("party {party} started on {issue}"),
            })
        }
    }
}
