//! Start-up and shutdown of the daemon's core: takes the data dir's lock, opens the store, seeds
//! the built-ins, starts the orchestrator (which adopts or recovers the runs a previous daemon
//! left), the plugins and the data dir's watch (`datadir`); at the end, ends the runs no later
//! daemon can adopt (all of them, for `shutdown_daemon` without `leave_running`) and closes the
//! store. It also gives the runners their narrow handle on the daemon (`RunnerHost`). It binds
//! no socket: the doors do (`troupe` crate).

use std::fs::{self, File};
use std::io::Write;
use std::net::SocketAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::Context;
use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use tokio::sync::watch;
use troupe_api::ApiError;
use troupe_api::layout::Layout;
use troupe_api::types::*;
use troupe_store::{NewEvent, Store};

use crate::daemon::{AlreadyRunning, Config, Daemon};
use crate::hub::Hub;
use crate::runners::{Asks, Calls, Means, RunnerHost, Turns};

/// Opens the data dir's database.
pub fn open_store(layout: &Layout) -> anyhow::Result<Store> {
    Store::open(&layout.db_path())
        .with_context(|| format!("cannot open the database {}", layout.db_path().display()))
}

/// Builds the daemon's core on an open store: seeds the built-ins, starts the orchestrator and
/// the plugins. `ws_addr` is where the JSON-RPC door listens (reported by `daemon_status`);
/// `pools`, remote workers' (installed before recovery, which may start remote members).
pub async fn start(
    store: Store,
    config: Config,
    ws_addr: SocketAddr,
    started: Instant,
    pools: Option<Arc<dyn crate::runners::remote::Pools>>,
) -> anyhow::Result<Arc<Daemon>> {
    let layout = config.layout.clone();
    let (shutdown, _) = watch::channel(false);
    let hub = Arc::new(Hub::default());
    crate::builtin::seed(&store).await?;
    let run_key = crate::authority::RunKey::load_or_create(&layout).with_context(|| {
        format!(
            "cannot read or make the run key in {}",
            layout.data_dir.display()
        )
    })?;
    // The trial run of bubblewrap blocks for a moment: off the runtime's threads.
    let sandbox = {
        let layout = layout.clone();
        tokio::task::spawn_blocking(move || crate::sandbox::Sandbox::detect(&layout))
            .await
            .context("the sandbox check failed")?
    };
    tracing::info!(sandbox = sandbox.status(), "members' sandbox");
    let cell: crate::orchestrator::HostCell = Arc::default();
    let (orchestrator, boot) = crate::orchestrator::create(
        store.clone(),
        hub.clone(),
        layout.clone(),
        run_key.clone(),
        sandbox.clone(),
        cell.clone(),
    );
    let plugins = crate::plugins::Plugins::new(&layout);
    let daemon = Arc::new(Daemon {
        store: store.clone(),
        hub,
        orchestrator,
        plugins: plugins.clone(),
        radar: Arc::default(),
        forges: Arc::new(crate::forge::Forges::new(layout.data_dir.clone())),
        config,
        layout,
        run_key,
        sandbox,
        ws_addr,
        started,
        shutdown,
        started_event: Mutex::new(None),
        pools: std::sync::OnceLock::new(),
        held: watch::channel(std::collections::HashSet::new()).0,
        lines: Default::default(),
        pick_roles: Default::default(),
    });
    if let Some(pools) = pools
        && daemon.pools.set(pools).is_err()
    {
        tracing::debug!("the pools were already set");
    }
    let host: Arc<dyn RunnerHost> = daemon.clone();
    if cell.set(Arc::downgrade(&host)).is_err() {
        tracing::debug!("the runners' host was already set");
    }
    boot.start().await?;
    // Decisions still open get their voting windows back; step clocks are re-armed.
    crate::collab::resume(&crate::collab::Ctx::of(&daemon));
    tokio::spawn(
        daemon
            .radar
            .clone()
            .run(crate::collab::Ctx::of(&daemon), daemon.shutdown_requested()),
    );
    tokio::spawn(watch_budgets(
        crate::collab::Ctx::of(&daemon),
        daemon.shutdown_requested(),
    ));
    plugins.watch();
    crate::datadir::watch(&daemon);
    crate::retention::watch(&daemon);
    crate::pulls::watch(&daemon);
    crate::forge_events::poll(&daemon);
    crate::schedules::watch(&daemon);
    if plugins.any_installed() {
        // Build the engine and load the plugins off the start-up path.
        tokio::task::spawn_blocking(move || {
            if let Err(e) = plugins.host() {
                tracing::error!("plugin host unavailable: {e}");
            }
        });
    }
    let data =
        serde_json::json!({ "pid": std::process::id(), "version": env!("CARGO_PKG_VERSION") });
    let event = tokio::spawn(async move {
        store
            .append_event(NewEvent {
                kind: "daemon_started".into(),
                data,
                ..NewEvent::default()
            })
            .await
    });
    if let Ok(mut slot) = daemon.started_event.lock() {
        *slot = Some(event);
    }
    Ok(daemon)
}

/// Stops the core once the doors are closed: ends the runs no later daemon can adopt (with
/// every process of theirs; a signal leaves process members running, to be adopted), unless a
/// `shutdown_daemon` or the data dir's watch did it already, records `daemon_stopped` and closes
/// the store.
pub async fn stop(daemon: &Daemon) -> anyhow::Result<()> {
    if !daemon.orchestrator.is_stopping()
        && let Err(e) = daemon.orchestrator.shutdown(true).await
    {
        tracing::warn!(error = %e, "runs not ended at shutdown");
    }
    daemon.orchestrator.stopped().await;
    let started_event = daemon.started_event.lock().ok().and_then(|mut s| s.take());
    if let Some(started_event) = started_event {
        log_write_failure(started_event.await);
    }
    log_write_failure(Ok(daemon
        .store
        .append_event(NewEvent {
            kind: "daemon_stopped".into(),
            ..NewEvent::default()
        })
        .await));
    daemon.store.close().await?;
    Ok(())
}

fn log_write_failure(
    result: Result<Result<i64, troupe_store::StoreError>, tokio::task::JoinError>,
) {
    match result {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => tracing::warn!(error = %e, "cannot record a daemon event"),
        Err(e) => tracing::warn!(error = %e, "daemon event task failed"),
    }
}

/// Takes the data dir's lock (held until the returned file is dropped) and records our pid.
pub fn take_lock(layout: &Layout) -> anyhow::Result<File> {
    let path = layout.lock_path();
    let mut file = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("cannot open the lock file {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(fs::TryLockError::WouldBlock) => {
            let pid = fs::read_to_string(&path).unwrap_or_default();
            return Err(AlreadyRunning {
                data_dir: layout.data_dir.display().to_string(),
                pid: pid.trim().to_string(),
            }
            .into());
        }
        Err(fs::TryLockError::Error(e)) => {
            return Err(e).with_context(|| format!("cannot lock {}", path.display()));
        }
    }
    file.set_len(0)?;
    writeln!(file, "{}", std::process::id())?;
    Ok(file)
}

/// The runners reach the daemon only through this: the store, the plugins, and the operations an
/// agent's tools call.
impl Calls for Daemon {
    fn call_as(
        self: Arc<Self>,
        caller: crate::authority::Caller,
        op: String,
        params: serde_json::Value,
    ) -> BoxFuture<'static, Result<serde_json::Value, ApiError>> {
        match crate::registry::handler(&op) {
            Some(handler) => handler(self, caller, Some(params)),
            None => async move {
                Err(ApiError::NotFound {
                    what: "operation".into(),
                    id: op,
                })
            }
            .boxed(),
        }
    }

    fn land_party(
        &self,
        p: LandPartyParams,
        wait_for_picks: std::time::Duration,
        run_id: &str,
    ) -> BoxFuture<'_, Result<LandResult, ApiError>> {
        let run_id = run_id.to_string();
        async move {
            let ctx = crate::collab::Ctx::of(self);
            crate::landing::land_when_picked(&ctx, p, wait_for_picks, &run_id).await
        }
        .boxed()
    }
}

impl Asks for Daemon {
    fn request_permission_decided(
        &self,
        p: RequestPermissionParams,
    ) -> BoxFuture<'_, Result<PermissionResult, ApiError>> {
        crate::ops::request_permission_decided(self, p).boxed()
    }

    fn withdraw_question(&self, question_id: String) -> BoxFuture<'_, ()> {
        async move {
            match self.store.expire_question(question_id.clone()).await {
                Ok(true) => {
                    self.hub.publish(&crate::hub::wake_key(&question_id), 1);
                }
                Ok(false) => {}
                Err(e) => tracing::warn!(error = %e, "a withdrawn question was not expired"),
            }
        }
        .boxed()
    }

    fn tool_verdict(&self, session_id: &str, tool: &str) -> troupe_engine::collab::ToolVerdict {
        crate::collab::tool_verdict(&self.store, session_id, tool).0
    }
}

impl Turns for Daemon {
    fn held(&self) -> watch::Receiver<std::collections::HashSet<String>> {
        self.held.subscribe()
    }

    fn open_line(&self, run_id: &str) -> tokio::sync::mpsc::Receiver<crate::runners::PersonPrompt> {
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        crate::rounds::lines(self).insert(run_id.to_string(), tx);
        rx
    }

    fn close_line(&self, run_id: &str) {
        crate::rounds::lines(self).remove(run_id);
    }

    fn next_round(self: Arc<Self>, run: AgentRun) -> BoxFuture<'static, Option<String>> {
        async move { crate::rounds::next_round(&self, &run).await }.boxed()
    }
}

impl Means for Daemon {
    fn store(&self) -> &Store {
        &self.store
    }

    fn plugins(&self) -> &Arc<crate::plugins::Plugins> {
        &self.plugins
    }

    fn pools(&self) -> Option<Arc<dyn crate::runners::remote::Pools>> {
        self.pools.get().cloned()
    }

    fn usage_recorded(&self, run_id: &str) {
        let ctx = crate::collab::Ctx::of(self);
        let run_id = run_id.to_string();
        tokio::spawn(async move {
            crate::budgets::check_run_budgets(&ctx.store, &ctx.orchestrator, &run_id).await;
            crate::collab::check_step_budgets(&ctx, &run_id).await;
        });
    }
}

/// How often running runs' wall-time and files-changed budgets are checked without a usage
/// report (a process or ACP member that reports none is held to them all the same).
const BUDGETS_EVERY: std::time::Duration = std::time::Duration::from_secs(3);

/// Checks, every `BUDGETS_EVERY` until the daemon stops, the budgets that need no usage report:
/// the wall time and files changed of each running run whose agent has such a budget, and the
/// budgets of the steps party members work on.
async fn watch_budgets(ctx: crate::collab::Ctx, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(BUDGETS_EVERY) => {}
            _ = shutdown.changed() => return,
        }
        if *shutdown.borrow() {
            return;
        }
        let Ok(runs) = ctx.store.active_runs_brief() else {
            continue;
        };
        for run in &runs {
            let timed =
                serde_json::from_value::<troupe_engine::AgentDefinition>(run.definition.clone())
                    .ok()
                    .and_then(|d| d.budget)
                    .is_some_and(|b| b.max_secs.is_some() || b.counts_files());
            if timed {
                crate::budgets::check_run_budgets(&ctx.store, &ctx.orchestrator, &run.run_id).await;
            }
            if run.party_id.is_some() {
                crate::collab::check_step_budgets(&ctx, &run.run_id).await;
            }
        }
    }
}
