//! `rework`: a finished member started again in its own checkout, outside the DAG (a review to
//! address, a conflict to resolve), and the reworks still live.

use std::path::Path;

use serde_json::json;
use troupe_api::ApiError;
use troupe_api::types::*;

use super::{Checkout, timeline};
use crate::collab::{Ctx, PartyView};

/// Whether a role's recovery restarts its members.
pub(super) fn restarts(party: &PartyView, role: &str) -> bool {
    let strategy = party
        .snapshot
        .party
        .roles
        .get(role)
        .and_then(|r| r.on_crash.clone())
        .unwrap_or_else(|| party.snapshot.party.recovery.on_crash.clone());
    strategy == troupe_engine::Strategy::Restart
}

fn rework_trigger(label: &str, party_id: &str) -> String {
    format!("rework of {label} in party {party_id}")
}

/// The party's members at work again in their checkouts (`rework`): member label and run.
pub fn live_reworks(
    store: &troupe_store::Store,
    party_id: &str,
) -> Result<Vec<(String, String)>, ApiError> {
    let suffix = format!(" in party {party_id}");
    Ok(store
        .list_runs(None, None, true)?
        .into_iter()
        .filter_map(|r| {
            let who = r
                .trigger
                .as_deref()?
                .strip_prefix("rework of ")?
                .strip_suffix(suffix.as_str())?
                .to_string();
            Some((who, r.run_id))
        })
        .collect())
}

/// Starts a finished member again in its own checkout with `text` as its task (a review to
/// address, a conflict to resolve): a run of its agent outside the party's DAG, child of the
/// project's system session; its commits go on the member's branch. Its run id.
pub async fn rework(
    ctx: &Ctx,
    party: &PartyView,
    c: &Checkout,
    why: &str,
    text: &str,
) -> Result<String, ApiError> {
    if c.member.status == MemberStatus::Running {
        return Err(ApiError::Conflict(format!(
            "{} is still running: it was sent the text instead",
            c.label()
        )));
    }
    let role = party
        .snapshot
        .party
        .roles
        .get(&c.member.role_name)
        .ok_or_else(|| {
            ApiError::Internal(format!("role {} left the snapshot", c.member.role_name))
        })?;
    let mut agent = party
        .snapshot
        .agents
        .get(&role.agent)
        .cloned()
        .ok_or_else(|| ApiError::Internal(format!("agent {} left the snapshot", role.agent)))?;
    // One rework per member: claimed here until its run exists (then `live_reworks` sees it).
    static STARTING: std::sync::Mutex<std::collections::BTreeSet<String>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    struct Claim(String);
    impl Drop for Claim {
        fn drop(&mut self) {
            STARTING
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .remove(&self.0);
        }
    }
    let key = rework_trigger(&c.label(), &party.row.party_id);
    if !STARTING
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .insert(key.clone())
    {
        return Err(ApiError::Conflict(format!(
            "{} is being started again already",
            c.label()
        )));
    }
    let _claim = Claim(key);
    if let Some((_, run)) = live_reworks(&ctx.store, &party.row.party_id)?
        .into_iter()
        .find(|(who, _)| who == &c.label())
    {
        return Err(ApiError::Conflict(format!(
            "{} is already at work again (run {run}); wait for it or cancel it",
            c.label()
        )));
    }
    if agent.runner == crate::runners::land::LAND {
        return Err(ApiError::Conflict(format!(
            "{} is the merge queue: run land_party again instead",
            c.label()
        )));
    }
    // It works in the member's checkout as it is: already isolated and set up.
    agent.isolation = troupe_engine::Isolation::None;
    agent.setup.clear();
    let mut prompt = String::new();
    for part in [agent.instructions.as_deref(), role.prompt.as_deref()]
        .into_iter()
        .flatten()
    {
        prompt.push_str(part);
        prompt.push('\n');
    }
    prompt.push_str(&format!(
        "You are {} of party {} again, in your checkout on branch {}, to {why}:\n{text}\n",
        c.label(),
        party.row.name,
        c.branch
    ));
    let root = party.row.repo_root.clone();
    let project_name = Path::new(&root)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let system = ctx
        .store
        .system_session(root.clone(), project_name.clone())
        .await?;
    let (run, _) = ctx
        .store
        .create_run(troupe_store::NewRun {
            agent_name: agent.name.clone(),
            definition: serde_json::to_value(&agent)
                .map_err(|e| ApiError::Internal(e.to_string()))?,
            session: troupe_store::NewSession {
                cli: agent.runner.clone(),
                cwd: c.workdir.clone(),
                project_root: root,
                project_name,
                external_id: None,
                parent_session_id: Some(system.session_id),
                spawned_by_agent_id: None,
                party_id: None,
            },
            party: None,
            attempt: 1,
            prompt,
            task_id: None,
            timeout_ms: agent.timeout_secs.map(|s| (s * 1000.0) as i64),
            workdir: Some(c.workdir.clone()),
            trigger: Some(rework_trigger(&c.label(), &party.row.party_id)),
            flow: None,
            attach_session: None,
        })
        .await?;
    let run_id = run.run_id.clone();
    ctx.orchestrator
        .request(|reply| crate::orchestrator::Command::StartRun {
            run: Box::new(run),
            definition: Box::new(agent),
            reply,
        })
        .await?;
    timeline(
        ctx,
        party,
        "member_restarted",
        json!({ "role": c.member.role_name, "index": c.member.instance_index,
                "run_id": run_id, "why": why }),
    )
    .await;
    Ok(run_id)
}
