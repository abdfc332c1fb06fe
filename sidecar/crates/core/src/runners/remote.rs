//! The remote runner: a member whose agent names a `pool` runs on a worker of that pool, not
//! here. The core knows no transport: `Pools` (the `troupe` crate's NATS JetStream hub,
//! installed at start by `troupe serve --nats`) carry the run there and bring back how it ended,
//! while the run is held in the daemon (its pid is the daemon's, like an in-daemon run). A daemon
//! without pools refuses the run with how to give it some. After a restart, recovery hands the
//! remote runs still running to `Pools::adopt`.

use std::path::PathBuf;
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::sync::oneshot;
use troupe_engine::AgentDefinition;

use crate::runners::process::{Exit, RunTable};

/// One attempt of a member, to run on a worker of `pool`.
#[derive(Debug, Clone)]
pub struct RemoteRun {
    pub run_id: String,
    pub session_id: String,
    pub project_id: String,
    pub party_id: Option<String>,
    pub pool: String,
    pub agent: AgentDefinition,
    /// The prompt and how to call back (`TROUPE_SESSION_ID`, `TROUPE_RUN_ID`, …).
    pub env: Vec<(String, String)>,
    /// The member's checkout on this machine: its branch travels to the worker and back.
    pub workdir: PathBuf,
    /// The run's own limit (from its definition): queued time counts.
    pub timeout: Option<Duration>,
}

/// Carries runs to remote workers.
pub trait Pools: Send + Sync + 'static {
    /// Runs `run` on a worker of its pool until it ends, `stop` fires (the run is stopped on its
    /// worker) or its timeout passes (queued time included); how it ended.
    fn run(&self, run: RemoteRun, stop: oneshot::Receiver<()>) -> BoxFuture<'static, Exit>;
    /// Takes back a run an earlier daemon (killed) dispatched and that may still run on its
    /// worker: follows it as `run` does, or ends it at once when it cannot be re-attached.
    fn adopt(&self, run: RemoteRun, stop: oneshot::Receiver<()>) -> BoxFuture<'static, Exit>;
}

/// A remote run as recorded, for adoption after a restart (its environment is not needed).
pub fn recorded(run: &troupe_store::AgentRun) -> Option<RemoteRun> {
    let agent: AgentDefinition = serde_json::from_value(run.definition.clone()).ok()?;
    Some(RemoteRun {
        run_id: run.run_id.clone(),
        session_id: run.session_id.clone(),
        project_id: run.project_id.clone(),
        party_id: run.party_id.clone(),
        pool: agent.pool.clone()?,
        agent,
        env: Vec::new(),
        workdir: PathBuf::from(run.workdir.clone()?),
        timeout: run
            .timeout_ms
            .map(|t| Duration::from_millis(u64::try_from(t).unwrap_or(0))),
    })
}

pub struct RemoteRunner;

impl super::Runner for RemoteRunner {
    fn kind(&self) -> super::Kind {
        super::Kind::Remote
    }

    fn place(&self, _table: &RunTable, launch: super::Launch) -> Result<super::Placed, String> {
        let pool = launch.agent.pool.clone().unwrap_or_default();
        let host = launch
            .host
            .and_then(|h| h.upgrade())
            .ok_or("the daemon is still starting; a remote member needs it")?;
        let pools = host.pools().ok_or_else(|| {
            format!(
                "agent {} runs in pool {pool:?}, but this daemon has no NATS: start it with \
                 `troupe serve --nats nats://…` and a `troupe worker --pool {pool}` elsewhere",
                launch.agent.name
            )
        })?;
        let run = RemoteRun {
            run_id: launch.run.run_id.clone(),
            session_id: launch.run.session_id.clone(),
            project_id: launch.run.project_id.clone(),
            party_id: launch.run.party_id.clone(),
            pool,
            agent: launch.agent,
            env: launch.env,
            workdir: launch.workdir,
            timeout: launch.timeout,
        };
        Ok(super::Placed::in_daemon(move |table: &RunTable| {
            let run_id = run.run_id.clone();
            table.spawn_managed(run_id, move |stop| async move {
                let exit: Exit = pools.run(run, stop).await;
                exit
            });
        }))
    }
}
