//! The hub's side of remote workers: `troupe serve --nats` installs these `Pools` in the core.
//! A remote member's attempt goes out as a `RunSpec` on its pool's work queue (stored once per
//! run id), its branch's base as a git bundle in the code bucket; the hub then follows its lease
//! (taken by the worker that claims it, renewed by heartbeat) and waits for its exit on the
//! exits stream. Its calls (`troupe call` on the worker) come back on `CALLS`, are checked
//! against the run's secret and served by the registry like any door's; a `complete` first
//! brings the member's commits into its checkout here. A lease that lapses ends the attempt as
//! a crash (recovery may start it again, on any worker); a stop or the timeout tells the worker.
//! A restarted hub takes back the runs still alive (`adopt`: the run's private record, the exits
//! kept aside, the lease). A starting hub publishes `troupe.hub.up` before it serves calls.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use anyhow::Context;
use async_nats::jetstream::consumer::{AckPolicy, pull};
use async_nats::jetstream::kv::Operation;
use async_nats::jetstream::message::PublishMessage;
use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use serde_json::{Value, json};
use tokio::sync::oneshot;
use troupe_core::Daemon;
use troupe_core::runners::Exit;
use troupe_core::runners::remote::{Pools, RemoteRun};

use super::{
    CALLS, CallReply, CallRequest, EXITS_STREAM, HUB_UP, HUB_UP_PAUSE, Jet, RunExit, RunSpec,
    download, git, jet, lease_ttl, runs_subject, stop_subject, upload,
};

/// The op a worker calls to claim a run (is the hub still waiting for it?).
pub const CLAIM: &str = "__claim";

/// What a refused call names when the hub no longer waits for its run.
pub const RUN_GONE: &str = "remote run";

/// Exits kept for runs nobody waits for (a restarted hub's runs, before it takes them back).
const MAX_ORPHANS: usize = 1024;

/// How long a stopped run's worker gets to report its end.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// A run the hub waits for.
struct Live {
    secret: String,
    workdir: PathBuf,
    branch: String,
    exit: Option<oneshot::Sender<RunExit>>,
    /// The worker that claimed it (it holds the lease from then on).
    claimed_by: Option<String>,
    /// The run's timeline: where its remote events go.
    run: RemoteRun,
}

/// What a restarted hub needs to take a run back: kept in `<data>/remote/<run>.json` (0600)
/// while the hub waits for the run.
#[derive(serde::Serialize, serde::Deserialize)]
struct Record {
    secret: String,
    branch: String,
}

struct NatsHub {
    client: async_nats::Client,
    jet: Jet,
    /// Exits of runs nobody waits for yet (read before a restarted hub took its runs back).
    orphans: Mutex<HashMap<String, RunExit>>,
    /// Set once the daemon is built (calls before that are refused as unavailable; the
    /// timeline waits for it: runs are taken back while the daemon is being built).
    daemon: std::sync::OnceLock<Weak<Daemon>>,
    attached: tokio::sync::watch::Sender<bool>,
    runs: Mutex<HashMap<String, Live>>,
    /// Woken each time a run is waited for (a restarted hub taking its runs back).
    registered: tokio::sync::Notify,
    scratch: PathBuf,
}

fn lock(m: &Mutex<HashMap<String, Live>>) -> std::sync::MutexGuard<'_, HashMap<String, Live>> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The pools of this hub.
pub struct NatsPools(Arc<NatsHub>);

/// A hub connected to NATS, before and after the daemon is built.
pub struct HubHandle(Arc<NatsHub>);

impl HubHandle {
    /// The pools to install in the daemon.
    pub fn pools(&self) -> Arc<dyn Pools> {
        Arc::new(NatsPools(self.0.clone()))
    }

    /// Gives the hub its daemon (for remote calls and the timeline).
    pub async fn attach(&self, daemon: &Arc<Daemon>) -> anyhow::Result<()> {
        self.0
            .daemon
            .set(Arc::downgrade(daemon))
            .map_err(|_| anyhow::anyhow!("the hub has a daemon already"))?;
        self.0.attached.send_replace(true);
        Ok(())
    }
}

/// Connects to NATS (a clear error when it cannot be reached), makes the streams and buckets,
/// and starts reading exits and serving remote calls.
pub async fn connect(url: &str, layout: &troupe_api::layout::Layout) -> anyhow::Result<HubHandle> {
    let client = super::connect(url, &super::nats_auth(&layout.data_dir)?).await?;
    let jet = jet(&client).await?;
    let scratch = layout.data_dir.join("remote");
    std::fs::create_dir_all(&scratch)
        .with_context(|| format!("cannot make {}", scratch.display()))?;
    let hub = Arc::new(NatsHub {
        client,
        jet,
        daemon: std::sync::OnceLock::new(),
        attached: tokio::sync::watch::channel(false).0,
        orphans: Mutex::new(HashMap::new()),
        runs: Mutex::new(HashMap::new()),
        registered: tokio::sync::Notify::new(),
        scratch,
    });
    let exits = hub
        .jet
        .js
        .get_stream(EXITS_STREAM)
        .await?
        .get_or_create_consumer(
            "hub",
            pull::Config {
                durable_name: Some("hub".into()),
                ack_policy: AckPolicy::Explicit,
                ack_wait: Duration::from_secs(30),
                ..Default::default()
            },
        )
        .await
        .context("cannot read the exits stream")?;
    let mut messages = exits.messages().await?;
    let h = hub.clone();
    tokio::spawn(async move {
        while let Some(msg) = messages.next().await {
            let Ok(msg) = msg else { continue };
            match super::read_exit(&msg.payload) {
                Ok(exit) => {
                    let waiter = lock(&h.runs)
                        .get_mut(&exit.run_id)
                        .and_then(|l| l.exit.take());
                    match waiter {
                        Some(tx) => {
                            let _ = tx.send(exit);
                        }
                        // Nobody waits yet (a restarted hub takes its runs back after this
                        // starts reading), or any more (a stopped run): kept for an adopter.
                        None => {
                            let mut orphans = h.orphans.lock().unwrap_or_else(|p| p.into_inner());
                            // Those of stopped runs are never claimed: keep a bounded number.
                            if orphans.len() >= MAX_ORPHANS {
                                orphans.clear();
                            }
                            orphans.insert(exit.run_id.clone(), exit);
                        }
                    }
                }
                Err(e) => tracing::warn!(error = %e, "an exit message dropped"),
            }
            if let Err(e) = msg.double_ack().await {
                tracing::debug!(error = %e, "exit not acknowledged");
            }
        }
    });
    // Workers fail what they still wait for from the hub before this one, then calls are served.
    hub.client
        .publish(HUB_UP, Default::default())
        .await
        .context("cannot announce the hub")?;
    hub.client
        .flush()
        .await
        .context("cannot announce the hub")?;
    tokio::time::sleep(HUB_UP_PAUSE).await;
    let mut calls = hub
        .client
        .queue_subscribe(CALLS, "hub".into())
        .await
        .context("cannot serve remote calls")?;
    let h = hub.clone();
    tokio::spawn(async move {
        while let Some(msg) = calls.next().await {
            let h = h.clone();
            tokio::spawn(async move {
                let reply = match super::read_call(&msg.payload) {
                    Ok(call) => h.call(call).await,
                    Err(refused) => {
                        tracing::warn!(reply = ?refused, "a remote call refused");
                        refused
                    }
                };
                if let (Some(to), Ok(body)) = (msg.reply, serde_json::to_vec(&reply))
                    && let Err(e) = h.client.publish(to, body.into()).await
                {
                    tracing::debug!(error = %e, "remote call reply not sent");
                }
            });
        }
    });
    tracing::info!(nats = %url, "remote pools ready");
    Ok(HubHandle(hub))
}

fn refused(code: i32, message: String) -> CallReply {
    CallReply::Error {
        code,
        message,
        data: None,
    }
}

impl NatsHub {
    /// A run the hub waits for: its secret, checkout, branch and timeline.
    fn waited(&self, run_id: &str) -> Option<(String, PathBuf, String, RemoteRun)> {
        lock(&self.runs).get(run_id).map(|l| {
            (
                l.secret.clone(),
                l.workdir.clone(),
                l.branch.clone(),
                l.run.clone(),
            )
        })
    }

    /// The run the hub waits for, if it does; a restarted hub that has not taken back a run it
    /// recorded yet is waited for (its daemon's start and recovery), not answered "gone".
    async fn live(&self, run_id: &str) -> Option<(String, PathBuf, String, RemoteRun)> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let registered = self.registered.notified();
            let found = self.waited(run_id);
            if found.is_some() || !self.record_path(run_id).exists() {
                return found;
            }
            // Recorded, not (yet) waited for: wait for the daemon's recovery to take it back.
            let mut attached = self.attached.subscribe();
            let attached_now = *attached.borrow();
            let woke = tokio::time::timeout_at(deadline, async {
                if attached_now {
                    registered.await;
                } else {
                    tokio::select! {
                        () = registered => {}
                        () = async { drop(attached.wait_for(|a| *a).await) } => {
                            // Recovery spawned the adoptions: let them register.
                            tokio::time::sleep(Duration::from_millis(200)).await;
                        }
                    }
                }
            })
            .await;
            if woke.is_err() {
                return self.waited(run_id);
            }
        }
    }

    /// Serves one remote call: the run must be one the hub waits for, with its secret.
    async fn call(&self, call: CallRequest) -> CallReply {
        tracing::debug!(op = %call.op, run = %call.run_id, "remote call");
        let live = self.live(&call.run_id).await;
        tracing::debug!(op = %call.op, run = %call.run_id, found = live.is_some(), "remote call's run");
        let Some((secret, workdir, branch, run)) = live else {
            // Said so that the worker stops the member (`RUN_GONE`).
            return CallReply::Error {
                code: troupe_api::error::codes::NOT_FOUND,
                message: format!(
                    "run {} is not waited for by this hub (it ended or was stopped)",
                    call.run_id
                ),
                data: Some(json!({ "kind": "not_found", "what": RUN_GONE, "id": call.run_id })),
            };
        };
        if !crate::auth::token_matches(&call.secret, &secret) {
            return refused(
                troupe_api::error::codes::UNAUTHORIZED,
                format!("unauthorized: a wrong secret for run {}", call.run_id),
            );
        }
        if call.op == CLAIM {
            let worker = call
                .params
                .as_ref()
                .and_then(|p| p.get("worker"))
                .and_then(Value::as_str)
                .unwrap_or("?")
                .to_string();
            if let Some(l) = lock(&self.runs).get_mut(&call.run_id) {
                l.claimed_by = Some(worker.clone());
            }
            self.event(&run, "remote_started", json!({ "worker": worker }))
                .await;
            return CallReply::Result(json!({ "claimed": true }));
        }
        if let Some(bundle) = &call.result_bundle
            && *bundle != format!("{}/result", call.run_id)
        {
            return refused(
                troupe_api::error::codes::INVALID_PARAMS,
                format!(
                    "a run's result bundle is {}/result, not {bundle:?}",
                    call.run_id
                ),
            );
        }
        if let Some(bundle) = &call.result_bundle
            && let Err(e) = self
                .bring_back(&call.run_id, bundle, &workdir, &branch)
                .await
        {
            return refused(
                troupe_api::error::codes::INTERNAL,
                format!("the member's commits could not be brought back: {e:#}"),
            );
        }
        let Some(handler) = troupe_core::registry::handler(&call.op) else {
            return refused(
                troupe_api::error::codes::METHOD_NOT_FOUND,
                format!("unknown operation {:?}", call.op),
            );
        };
        // A restarted hub serves calls before its daemon is built: wait for it (a call
        // refused meanwhile would fail a member that did nothing wrong).
        let mut attached = self.attached.subscribe();
        let ready = tokio::time::timeout(Duration::from_secs(60), async {
            drop(attached.wait_for(|a| *a).await)
        })
        .await;
        let (Ok(()), Some(daemon)) = (ready, self.daemon()) else {
            return refused(
                troupe_api::error::codes::UNAVAILABLE,
                "the hub is starting or stopping".into(),
            );
        };
        // The run calls as itself: what a local member may, nothing more.
        let caller = match daemon.store.run_caller(&call.run_id) {
            Ok(run) => troupe_core::Caller::member_from(run, true),
            Err(e) => {
                let e = troupe_api::ApiError::from(e);
                let (code, _) = e.code_and_kind();
                return refused(code, e.to_string());
            }
        };
        match handler(daemon, caller, call.params).await {
            Ok(v) => CallReply::Result(v),
            Err(e) => {
                let (code, _) = e.code_and_kind();
                CallReply::Error {
                    code,
                    message: e.to_string(),
                    data: Some(e.data()),
                }
            }
        }
    }

    /// Fetches the member's commits into its branch here (a fast-forward of its checkout).
    async fn bring_back(
        &self,
        run_id: &str,
        bundle: &str,
        workdir: &std::path::Path,
        branch: &str,
    ) -> anyhow::Result<()> {
        let file = self.scratch.join(format!("{run_id}.result.bundle"));
        download(&self.jet.code, bundle, &file).await?;
        let path = file.display().to_string();
        let fetched = git(workdir, &["fetch", "--no-tags", &path, branch]).await;
        let merged = match fetched {
            Ok(_) => git(workdir, &["merge", "--ff-only", "FETCH_HEAD"]).await,
            Err(e) => Err(e),
        };
        let _ = tokio::fs::remove_file(&file).await;
        if let Err(e) = self.jet.code.delete(bundle).await {
            tracing::debug!(error = %e, "result bundle not deleted");
        }
        merged.map(|_| ())
    }

    fn daemon(&self) -> Option<Arc<Daemon>> {
        self.daemon.get().and_then(Weak::upgrade)
    }

    async fn event(&self, run: &RemoteRun, kind: &str, data: Value) {
        let mut attached = self.attached.subscribe();
        let ready = tokio::time::timeout(Duration::from_secs(60), attached.wait_for(|a| *a));
        if !matches!(ready.await, Ok(Ok(_))) {
            return;
        }
        let Some(d) = self.daemon() else {
            return;
        };
        let mut data = data;
        data["run_id"] = json!(run.run_id);
        let event = troupe_store::NewEvent {
            kind: kind.into(),
            project_id: Some(run.project_id.clone()),
            session_id: Some(run.session_id.clone()),
            party_id: run.party_id.clone(),
            data,
        };
        if let Err(e) = d.store.append_event(event).await {
            tracing::debug!(error = %e, "remote event not recorded");
        }
    }

    /// Tells the run's worker to stop it (a message, and its lease dropped: the next renewal
    /// fails even if the message was missed); waits a little for its end if a worker has it.
    async fn stop(&self, run_id: &str, exit: &mut oneshot::Receiver<RunExit>, claimed: bool) {
        if let Err(e) = self
            .client
            .publish(stop_subject(run_id), "stop".into())
            .await
        {
            tracing::debug!(error = %e, "stop not sent");
        }
        if let Err(e) = self.jet.leases.delete(run_id).await {
            tracing::debug!(error = %e, "lease not dropped");
        }
        if claimed {
            let _ended = tokio::time::timeout(STOP_GRACE, exit).await;
        }
    }

    async fn dispatch(
        self: &Arc<Self>,
        run: RemoteRun,
        stop: oneshot::Receiver<()>,
    ) -> anyhow::Result<Exit> {
        let command = run
            .agent
            .command
            .clone()
            .context("a remote member needs a command")?;
        let branch = git(&run.workdir, &["rev-parse", "--abbrev-ref", "HEAD"]).await?;
        let base = git(&run.workdir, &["rev-parse", "HEAD"]).await?;
        let file = self.scratch.join(format!("{}.base.bundle", run.run_id));
        let path = file.display().to_string();
        git(&run.workdir, &["bundle", "create", &path, &branch]).await?;
        let bundle = format!("{}/base", run.run_id);
        let uploaded = upload(&self.jet.code, &bundle, &file).await;
        let _ = tokio::fs::remove_file(&file).await;
        uploaded?;
        let secret = crate::auth::new_token()?;
        let (exit, _forget) =
            self.wait_for(&run, secret.clone(), branch.clone(), Some(bundle.clone()))?;
        let spec = RunSpec {
            run_id: run.run_id.clone(),
            session_id: run.session_id.clone(),
            pool: run.pool.clone(),
            command,
            // The run's credential is for this machine's socket: it does not travel.
            env: run
                .env
                .iter()
                .filter(|(k, _)| k != troupe_api::layout::RUN_TOKEN)
                .cloned()
                .collect(),
            branch,
            base,
            bundle,
            secret,
            workdir: run.workdir.display().to_string(),
        };
        self.jet
            .js
            .send_publish(
                runs_subject(&run.pool),
                PublishMessage::build()
                    .payload(serde_json::to_vec(&spec)?.into())
                    .message_id(run.run_id.clone()),
            )
            .await?
            .await
            .context("the run was not queued")?;
        self.event(&run, "remote_queued", json!({ "pool": run.pool }))
            .await;
        self.follow(&run, exit, stop).await
    }

    /// Registers the run as waited for (its calls are served from now on) and records what a
    /// restarted hub needs to take it back; forgotten when the guard drops.
    fn wait_for(
        self: &Arc<Self>,
        run: &RemoteRun,
        secret: String,
        branch: String,
        bundle: Option<String>,
    ) -> anyhow::Result<(oneshot::Receiver<RunExit>, Forget)> {
        let record = serde_json::to_vec(&Record {
            secret: secret.clone(),
            branch: branch.clone(),
        })?;
        troupe_api::layout::write_private_file(&self.record_path(&run.run_id), &record)?;
        let (tx, exit) = oneshot::channel();
        lock(&self.runs).insert(
            run.run_id.clone(),
            Live {
                secret,
                workdir: run.workdir.clone(),
                branch,
                exit: Some(tx),
                claimed_by: None,
                run: run.clone(),
            },
        );
        self.registered.notify_waiters();
        Ok((exit, Forget(self.clone(), run.run_id.clone(), bundle)))
    }

    fn record_path(&self, run_id: &str) -> PathBuf {
        self.scratch.join(format!("{run_id}.json"))
    }

    /// Takes back a run a killed hub dispatched: its record gives its secret; its lease (or an
    /// exit read meanwhile) says whether it still lives.
    async fn adopt(
        self: &Arc<Self>,
        run: RemoteRun,
        stop: oneshot::Receiver<()>,
    ) -> anyhow::Result<Exit> {
        let record: Record = match std::fs::read(self.record_path(&run.run_id))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
        {
            Some(r) => r,
            None => anyhow::bail!("the remote run cannot be re-attached: its record is gone"),
        };
        let base = format!("{}/base", run.run_id);
        let (exit, _forget) = self.wait_for(&run, record.secret, record.branch, Some(base))?;
        let orphan = self
            .orphans
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&run.run_id);
        if let Some(ended) = orphan {
            return Ok(exit_of(ended));
        }
        let holder = match self.jet.leases.entry(&run.run_id).await {
            Ok(Some(e)) if e.operation == Operation::Put => {
                Some(String::from_utf8_lossy(&e.value).into_owned())
            }
            _ => None,
        };
        match holder {
            Some(worker) => {
                if let Some(l) = lock(&self.runs).get_mut(&run.run_id) {
                    l.claimed_by = Some(worker.clone());
                }
                self.event(&run, "remote_reattached", json!({ "worker": worker }))
                    .await;
                self.follow(&run, exit, stop).await
            }
            // Queued and not taken yet, or its worker is gone too: it starts again.
            None => anyhow::bail!(
                "the remote run could not be re-attached after a restart: no worker holds its lease"
            ),
        }
    }

    /// Waits for the run's end: its exit, a stop, its timeout, or its lease lapsing.
    async fn follow(
        self: &Arc<Self>,
        run: &RemoteRun,
        mut exit: oneshot::Receiver<RunExit>,
        mut stop: oneshot::Receiver<()>,
    ) -> anyhow::Result<Exit> {
        let deadline = run.timeout.map(|t| tokio::time::Instant::now() + t);
        let claimed = || {
            lock(&self.runs)
                .get(&run.run_id)
                .and_then(|l| l.claimed_by.clone())
        };
        let mut tick = tokio::time::interval(Duration::from_millis(250));
        loop {
            tokio::select! {
                ended = &mut exit => {
                    return Ok(exit_of(ended.context("the hub stopped waiting")?));
                }
                _ = &mut stop => {
                    self.stop(&run.run_id, &mut exit, claimed().is_some()).await;
                    return Ok(Exit::Stopped);
                }
                () = sleep_until(deadline) => {
                    self.stop(&run.run_id, &mut exit, claimed().is_some()).await;
                    return Ok(Exit::TimedOut);
                }
                _ = tick.tick() => {
                    // Only a claimed run has a lease to lose.
                    let Some(worker) = claimed() else { continue };
                    let held = match self.jet.leases.entry(&run.run_id).await {
                        Ok(entry) => entry.is_some_and(|e| e.operation == Operation::Put),
                        Err(e) => {
                            tracing::debug!(error = %e, "lease unread");
                            continue;
                        }
                    };
                    if held {
                        continue;
                    }
                    // A worker ends by reporting its exit, then dropping its lease: give the
                    // exit a moment to arrive.
                    if let Ok(Ok(ended)) = tokio::time::timeout(Duration::from_secs(2), &mut exit).await {
                        return Ok(exit_of(ended));
                    }
                    let why = format!(
                        "the lease of worker {worker} lapsed ({} s without a heartbeat): the worker is gone",
                        lease_ttl().as_secs_f64()
                    );
                    self.event(run, "remote_lease_lapsed", json!({ "worker": worker })).await;
                    return Ok(Exit::Failed(why));
                }
            }
        }
    }
}

fn exit_of(ended: RunExit) -> Exit {
    match ended.error {
        Some(e) => Exit::Failed(format!("on worker {}: {e}", ended.worker)),
        None => Exit::Exited {
            code: ended.code,
            signal: ended.signal,
        },
    }
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Forgets a run the hub no longer waits for (its calls are refused from then on, and a worker
/// that claims it late is told so), and its base bundle.
struct Forget(Arc<NatsHub>, String, Option<String>);

impl Drop for Forget {
    fn drop(&mut self) {
        lock(&self.0.runs).remove(&self.1);
        let _ = std::fs::remove_file(self.0.record_path(&self.1));
        if let Some(bundle) = self.2.clone() {
            let hub = self.0.clone();
            tokio::spawn(async move {
                if let Err(e) = hub.jet.code.delete(&bundle).await {
                    tracing::debug!(error = %e, "base bundle not deleted");
                }
            });
        }
    }
}

impl Pools for NatsPools {
    fn run(&self, run: RemoteRun, stop: oneshot::Receiver<()>) -> BoxFuture<'static, Exit> {
        let hub = self.0.clone();
        Box::pin(async move {
            match hub.dispatch(run, stop).await {
                Ok(exit) => exit,
                Err(e) => Exit::Failed(format!("{e:#}")),
            }
        })
    }

    fn adopt(&self, run: RemoteRun, stop: oneshot::Receiver<()>) -> BoxFuture<'static, Exit> {
        let hub = self.0.clone();
        Box::pin(async move {
            match hub.adopt(run, stop).await {
                Ok(exit) => exit,
                Err(e) => Exit::Failed(format!("{e:#}")),
            }
        })
    }
}
