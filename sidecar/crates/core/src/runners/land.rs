//! The `land` runner: a party member that is the merge queue. When its turn comes (after the
//! roles it waits for), the party's member branches are landed through `land_party` with the
//! definition's `land` options, in the daemon; nothing is started. Landed (even with some
//! branches left out on conflicts) is a completion; failing tests, nothing integrated or a
//! refused target is a crash, so the role's recovery (pause and tell the person) applies.

use std::sync::Weak;

use serde_json::json;
use troupe_engine::AgentDefinition;
use troupe_store::AgentRun;

use crate::runners::RunnerHost;
use crate::runners::process::{Exit, RunTable};
use troupe_api::types::{CompleteParams, CompleteResult, CompletionStatus, LandPartyParams};

/// The runner's name in a definition.
pub const LAND: &str = "land";

/// How long a land run without `timeout_secs` waits for best-of-N picks.
const DEFAULT_PICK_WAIT: std::time::Duration = std::time::Duration::from_secs(3600);

/// Lands the party's work in the daemon.
pub struct LandRunner;

impl super::Runner for LandRunner {
    fn kind(&self) -> super::Kind {
        super::Kind::Land
    }

    fn place(&self, _table: &RunTable, launch: super::Launch) -> Result<super::Placed, String> {
        let host = launch
            .host
            .ok_or("the daemon is still starting; the land runner needs it")?;
        let (run, agent) = (launch.run, launch.agent);
        Ok(super::Placed::in_daemon(move |table: &RunTable| {
            let run_id = run.run_id.clone();
            table.spawn_managed(run_id, |stop| async move {
                tokio::select! {
                    _ = stop => Exit::Stopped,
                    exit = land(host, run, agent) => exit,
                }
            });
        }))
    }
}

async fn land(host: Weak<dyn RunnerHost>, run: AgentRun, agent: AgentDefinition) -> Exit {
    let Some(party_id) = run.party_id.clone() else {
        return Exit::Failed(
            "the land runner lands a party's work; this run is in no party".into(),
        );
    };
    let Some(d) = host.upgrade() else {
        return Exit::Failed("the daemon is shutting down".into());
    };
    let options = agent.land.clone().unwrap_or_default();
    // A best-of-N role's pick may still be coming: wait for it within the run's own time.
    let wait = agent
        .timeout_secs
        .and_then(|s| std::time::Duration::try_from_secs_f64(s).ok())
        .unwrap_or(DEFAULT_PICK_WAIT);
    let result = d
        .land_party(
            LandPartyParams {
                party_id,
                target: options.target,
                strategy: options.strategy,
                test_command: options.test_command,
                test_timeout_secs: options.test_timeout_secs,
                dry_run: false,
                to: options.to,
            },
            wait,
            &run.run_id,
        )
        .await;
    let result = match result {
        Ok(r) if r.landed || r.pull_request.is_some() => r,
        Ok(r) => return Exit::Failed(r.summary),
        Err(e) => return Exit::Failed(e.to_string()),
    };
    let left_out = result.members.iter().any(|m| m.outcome == "conflict");
    let mut artifacts = std::collections::BTreeMap::new();
    artifacts.insert("landing".to_string(), json!(&result));
    let completed: Result<CompleteResult, _> = crate::runners::call(
        &d,
        &run,
        "complete",
        CompleteParams {
            session_id: run.session_id.clone(),
            run_id: Some(run.run_id.clone()),
            output: result.summary.clone(),
            status: if left_out {
                CompletionStatus::Partial
            } else {
                CompletionStatus::Success
            },
            artifacts,
            files_modified: Vec::new(),
            next_steps: Vec::new(),
        },
    )
    .await;
    match completed {
        Ok(_) => Exit::Finished,
        Err(e) => Exit::Failed(format!("landed, but the completion was refused: {e}")),
    }
}
