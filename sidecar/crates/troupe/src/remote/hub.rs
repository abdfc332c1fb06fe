//! The hub's side of remote workers: `troupe serve --nats` installs these `Pools` in the core.
//! A remote member's attempt goes out as a `RunSpec` on its pool's work queue (stored once per
//! run id), its branch's base as a git bundle in the code bucket; the hub then follows its lease
//! (taken by the worker that claims it, renewed by heartbeat) and waits for its exit on the
//! exits stream. Its calls (`troupe call` on the worker) come back on `CALLS`, are checked
//! against the run's secret and served by the registry like any door's; a `complete` first
//! brings the member's commits into its checkout here. A call or an exit is taken only from the
//! run's pool and, once a worker claimed the run (holding its lease), from that worker, as its
//! subject names them (`Sender`): one about a run its sender does not hold is refused, logged
//! and, for a run the hub waits for, put on its timeline (`remote_refused`). A lease that lapses
//! ends the attempt as a crash (recovery may start it again, on any worker); a stop or the
//! timeout tells the worker.
//! A restarted hub takes back the runs still alive (`adopt`: the run's private record, the exits
//! kept aside, the lease). A starting hub publishes `troupe.hub.up` before it serves calls.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use anyhow::Context;
use async_nats::jetstream::consumer::{AckPolicy, pull};
use async_nats::jetstream::kv::Operation;
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::object_store::ObjectStore;
use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use serde_json::{Value, json};
use tokio::sync::oneshot;
use troupe_core::Daemon;
use troupe_core::runners::Exit;
use troupe_core::runners::remote::{Pools, RemoteRun};

use super::{
    CALLS, CallReply, CallRequest, EXITS_STREAM, HUB_UP, HUB_UP_PAUSE, Jet, OLD_CALLS, PROTOCOL,
    RunExit, RunSpec, Sender, download, git, jet, lease_key, lease_ttl, runs_subject, sender,
    stop_subject, upload,
};

/// The op a worker calls to claim a run (is the hub still waiting for it?).
pub const CLAIM: &str = "__claim";

/// What a refused call names when the hub no longer waits for its run.
pub const RUN_GONE: &str = "remote run";

/// Exits kept for runs nobody waits for (a restarted hub's runs, before it takes them back).
const MAX_ORPHANS: usize = 1024;

/// How long a stopped run's worker gets to report its end.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// How many refused messages of other senders a run's timeline tells (each sender and kind once).
const MAX_REFUSALS_TOLD: usize = 8;

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
    /// The senders (and kinds of message) refused for it that its timeline told.
    refusals: HashSet<String>,
}

/// What a restarted hub needs to take a run back: kept in `<data>/remote/<run>.json` (0600)
/// while the hub waits for the run.
#[derive(serde::Serialize, serde::Deserialize)]
struct Record {
    secret: String,
    branch: String,
    /// Its pool, and the worker that claimed it (its exit is kept for the adopter only from it).
    #[serde(default)]
    pool: String,
    #[serde(default)]
    worker: Option<String>,
}

struct NatsHub {
    client: async_nats::Client,
    jet: Jet,
    /// The code bucket of each pool a run went to.
    code: Mutex<HashMap<String, ObjectStore>>,
    /// Exits of runs nobody waits for yet (read before a restarted hub took its runs back), from
    /// the pool and worker their record names.
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
    let client = super::connect(url, &super::nats_auth(&layout.data_dir)?, None).await?;
    let jet = jet(&client).await?;
    let scratch = layout.data_dir.join("remote");
    std::fs::create_dir_all(&scratch)
        .with_context(|| format!("cannot make {}", scratch.display()))?;
    let hub = Arc::new(NatsHub {
        client,
        jet,
        code: Mutex::new(HashMap::new()),
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
            h.take_exit(&msg.subject, &msg.payload);
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
                let reply = match (sender(&msg.subject, "call"), super::read_call(&msg.payload)) {
                    (Some(from), Ok(call)) => h.call(&from, call).await,
                    (None, _) => refused(
                        troupe_api::error::codes::INVALID_REQUEST,
                        format!(
                            "a remote call on subject {} names no pool, worker and run",
                            msg.subject
                        ),
                    ),
                    (_, Err(refused)) => refused,
                };
                if let CallReply::Error { code, message, .. } = &reply
                    && *code == troupe_api::error::codes::INVALID_PARAMS
                {
                    tracing::warn!(subject = %msg.subject, %message, "a remote call refused");
                }
                h.reply(msg.reply, &reply).await;
            });
        }
    });
    // A worker of protocol 1 calls where no hub listens any more: it is told why.
    let mut old_calls = hub
        .client
        .queue_subscribe(OLD_CALLS, "hub".into())
        .await
        .context("cannot serve remote calls")?;
    let h = hub.clone();
    tokio::spawn(async move {
        while let Some(msg) = old_calls.next().await {
            tracing::warn!("a call from a worker of an older Troupe (remote protocol 1) refused");
            let reply = refused(
                troupe_api::error::codes::INVALID_REQUEST,
                format!(
                    "this hub speaks remote protocol {PROTOCOL} and this worker protocol 1: run the same Troupe version on the hub and its workers"
                ),
            );
            h.reply(msg.reply, &reply).await;
        }
    });
    tracing::info!(nats = %url, "remote pools ready");
    Ok(HubHandle(hub))
}

/// The answer for a run the hub does not wait for: said so that the worker stops the member
/// (`RUN_GONE`).
fn gone(run_id: &str) -> CallReply {
    CallReply::Error {
        code: troupe_api::error::codes::NOT_FOUND,
        message: format!("run {run_id} is not waited for by this hub (it ended or was stopped)"),
        data: Some(json!({ "kind": "not_found", "what": RUN_GONE, "id": run_id })),
    }
}

fn refused(code: i32, message: String) -> CallReply {
    CallReply::Error {
        code,
        message,
        data: None,
    }
}

impl NatsHub {
    /// Answers a remote call.
    async fn reply(&self, to: Option<async_nats::Subject>, reply: &CallReply) {
        if let (Some(to), Ok(body)) = (to, serde_json::to_vec(reply))
            && let Err(e) = self.client.publish(to, body.into()).await
        {
            tracing::debug!(error = %e, "remote call reply not sent");
        }
    }

    /// The code bucket of `pool`.
    async fn code(&self, pool: &str) -> anyhow::Result<ObjectStore> {
        let known = self
            .code
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(pool)
            .cloned();
        if let Some(code) = known {
            return Ok(code);
        }
        let code = super::code_bucket(&self.jet.js, pool).await?;
        self.code
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(pool.to_string(), code.clone());
        Ok(code)
    }

    /// An exit read off the exits stream: handed to the run's waiter if its sender holds the
    /// run, kept for an adopter if the hub recorded the run and its sender claimed it, else
    /// dropped (and told on the run's timeline when the hub waits for it).
    fn take_exit(self: &Arc<Self>, subject: &str, payload: &[u8]) {
        let Some(from) = sender(subject, "exit") else {
            tracing::warn!(%subject, "an exit on a subject that names no pool, worker and run dropped");
            return;
        };
        let mut exit = match super::read_exit(payload) {
            Ok(exit) => exit,
            Err(e) => {
                tracing::warn!(error = %e, %subject, "an exit message dropped");
                return;
            }
        };
        if exit.run_id != from.run_id {
            let why = format!(
                "the exit names run {} on a subject of run {}",
                exit.run_id, from.run_id
            );
            self.refused_spawn(from, "exit", why);
            return;
        }
        // Its worker is the one its subject names (what NATS let its user publish on).
        exit.worker = from.worker.clone();
        let mut runs = lock(&self.runs);
        if let Some(l) = runs.get_mut(&from.run_id) {
            match holds(l, &from, false) {
                Ok(()) => {
                    if let Some(tx) = l.exit.take() {
                        let _ = tx.send(exit);
                    }
                }
                Err(why) => {
                    drop(runs);
                    self.refused_spawn(from, "exit", why);
                }
            }
            return;
        }
        drop(runs);
        // Nobody waits yet (a restarted hub takes its runs back after this starts reading), or
        // any more (a stopped run, whose record is gone): kept for an adopter if its record says
        // its sender held it.
        match self.record(&from.run_id) {
            Some(r) if r.pool == from.pool && r.worker.as_deref() == Some(from.worker.as_str()) => {
                let mut orphans = self.orphans.lock().unwrap_or_else(|p| p.into_inner());
                // Only runs this hub recorded: bounded by them, but bounded anyway.
                if orphans.len() >= MAX_ORPHANS {
                    orphans.clear();
                }
                orphans.insert(from.run_id.clone(), exit);
            }
            Some(r) => tracing::warn!(
                run = %from.run_id, pool = %from.pool, worker = %from.worker,
                "an exit of a run sent to pool {} and claimed by {} dropped",
                r.pool, r.worker.as_deref().unwrap_or("no worker")
            ),
            None => {
                tracing::debug!(run = %from.run_id, "an exit of a run this hub does not wait for dropped")
            }
        }
    }

    fn refused_spawn(self: &Arc<Self>, from: Sender, what: &'static str, why: String) {
        let hub = self.clone();
        tokio::spawn(async move { hub.refuse(&from, what, &why).await });
    }

    /// A message from a worker about a run it does not hold: logged, and told once on the run's
    /// timeline (`remote_refused`) when the hub waits for the run.
    async fn refuse(&self, from: &Sender, what: &str, why: &str) {
        tracing::warn!(
            run = %from.run_id, pool = %from.pool, worker = %from.worker, %why,
            "a worker's {what} about a run it does not hold refused"
        );
        let run = {
            let mut runs = lock(&self.runs);
            runs.get_mut(&from.run_id).and_then(|l| {
                let key = format!("{what} {}/{}", from.pool, from.worker);
                (l.refusals.len() < MAX_REFUSALS_TOLD && l.refusals.insert(key))
                    .then(|| l.run.clone())
            })
        };
        if let Some(run) = run {
            let data =
                json!({ "pool": from.pool, "worker": from.worker, "what": what, "why": why });
            self.event(&run, "remote_refused", data).await;
        }
    }

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

    /// Serves one remote call: the run must be one the hub waits for, its sender the run's pool
    /// and the worker holding it (a claim: its lease), with its secret.
    async fn call(&self, from: &Sender, call: CallRequest) -> CallReply {
        tracing::debug!(op = %call.op, run = %call.run_id, worker = %from.worker, "remote call");
        if call.run_id != from.run_id {
            return refused(
                troupe_api::error::codes::INVALID_PARAMS,
                format!(
                    "the call names run {} on a subject of run {}",
                    call.run_id, from.run_id
                ),
            );
        }
        let live = self.live(&call.run_id).await;
        tracing::debug!(op = %call.op, run = %call.run_id, found = live.is_some(), "remote call's run");
        let Some((secret, workdir, branch, run)) = live else {
            return gone(&call.run_id);
        };
        // Who calls: what NATS let its user publish on says (and the hub checks) its pool and
        // its worker.
        let holding = lock(&self.runs)
            .get(&call.run_id)
            .map(|l| holds(l, from, call.op == CLAIM));
        if let Some(Err(why)) = holding {
            self.refuse(from, "call", &why).await;
            return refused(
                troupe_api::error::codes::FORBIDDEN,
                format!("refused: {why}"),
            );
        }
        if !crate::auth::token_matches(&call.secret, &secret) {
            return refused(
                troupe_api::error::codes::UNAUTHORIZED,
                format!("unauthorized: a wrong secret for run {}", call.run_id),
            );
        }
        if call.op == CLAIM {
            return self.claim(from, &run, secret, branch).await;
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
            && let Err(e) = self.bring_back(&run, bundle, &workdir, &branch).await
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

    /// A worker claims a run it took off the queue: it must hold the run's lease. It holds the
    /// run from then on (its calls and its exit are taken), as the run's record says too.
    async fn claim(
        &self,
        from: &Sender,
        run: &RemoteRun,
        secret: String,
        branch: String,
    ) -> CallReply {
        let key = lease_key(&run.pool, &run.run_id);
        let holder = match self.jet.leases.entry(key.as_str()).await {
            Ok(Some(e)) if e.operation == Operation::Put => {
                Some(String::from_utf8_lossy(&e.value).into_owned())
            }
            Ok(_) => None,
            Err(e) => {
                return refused(
                    troupe_api::error::codes::UNAVAILABLE,
                    format!("the lease of run {} cannot be read: {e}", run.run_id),
                );
            }
        };
        if holder.as_deref() != Some(from.worker.as_str()) {
            let why = format!(
                "worker {} claims run {} without holding its lease (held by {})",
                from.worker,
                run.run_id,
                holder.as_deref().unwrap_or("no worker")
            );
            self.refuse(from, "claim", &why).await;
            return refused(
                troupe_api::error::codes::FORBIDDEN,
                format!("refused: {why}"),
            );
        }
        let record = Record {
            secret,
            branch,
            pool: run.pool.clone(),
            worker: Some(from.worker.clone()),
        };
        // Recorded before the worker hears it holds the run (a hub restarted later takes its
        // exit from it alone), while the run is waited for (its record goes when it is not).
        let written = {
            let mut runs = lock(&self.runs);
            match runs.get_mut(&run.run_id) {
                Some(l) => {
                    l.claimed_by = Some(from.worker.clone());
                    serde_json::to_vec(&record)
                        .map_err(anyhow::Error::from)
                        .and_then(|b| {
                            troupe_api::layout::write_private_file(
                                &self.record_path(&run.run_id),
                                &b,
                            )
                        })
                }
                None => return gone(&run.run_id),
            }
        };
        if let Err(e) = written {
            return refused(
                troupe_api::error::codes::INTERNAL,
                format!("the claim of run {} cannot be recorded: {e:#}", run.run_id),
            );
        }
        self.event(run, "remote_started", json!({ "worker": from.worker }))
            .await;
        CallReply::Result(json!({ "claimed": true }))
    }

    /// Fetches the member's commits into its branch here (a fast-forward of its checkout).
    async fn bring_back(
        &self,
        run: &RemoteRun,
        bundle: &str,
        workdir: &std::path::Path,
        branch: &str,
    ) -> anyhow::Result<()> {
        let file = self.scratch.join(format!("{}.result.bundle", run.run_id));
        let code = self.code(&run.pool).await?;
        download(&code, bundle, &file).await?;
        let path = file.display().to_string();
        let fetched = git(workdir, &["fetch", "--no-tags", &path, branch]).await;
        let merged = match fetched {
            Ok(_) => git(workdir, &["merge", "--ff-only", "FETCH_HEAD"]).await,
            Err(e) => Err(e),
        };
        let _ = tokio::fs::remove_file(&file).await;
        if let Err(e) = code.delete(bundle).await {
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
    async fn stop(&self, run: &RemoteRun, exit: &mut oneshot::Receiver<RunExit>, claimed: bool) {
        if let Err(e) = self
            .client
            .publish(stop_subject(&run.pool, &run.run_id), "stop".into())
            .await
        {
            tracing::debug!(error = %e, "stop not sent");
        }
        if let Err(e) = self
            .jet
            .leases
            .delete(lease_key(&run.pool, &run.run_id))
            .await
        {
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
        // It names subjects, a lease and a bucket.
        anyhow::ensure!(
            troupe_engine::spec::is_safe_name(&run.pool),
            "pool {:?} is not a name a pool may have",
            run.pool
        );
        let branch = git(&run.workdir, &["rev-parse", "--abbrev-ref", "HEAD"]).await?;
        let base = git(&run.workdir, &["rev-parse", "HEAD"]).await?;
        let file = self.scratch.join(format!("{}.base.bundle", run.run_id));
        let path = file.display().to_string();
        git(&run.workdir, &["bundle", "create", &path, &branch]).await?;
        let bundle = format!("{}/base", run.run_id);
        let code = self.code(&run.pool).await?;
        let uploaded = upload(&code, &bundle, &file).await;
        let _ = tokio::fs::remove_file(&file).await;
        uploaded?;
        let secret = crate::auth::new_token()?;
        let (exit, _forget) = self.wait_for(
            &run,
            secret.clone(),
            branch.clone(),
            None,
            Some((code, bundle.clone())),
        )?;
        let spec = RunSpec {
            protocol: PROTOCOL,
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
        claimed_by: Option<String>,
        bundle: Option<(ObjectStore, String)>,
    ) -> anyhow::Result<(oneshot::Receiver<RunExit>, Forget)> {
        let record = serde_json::to_vec(&Record {
            secret: secret.clone(),
            branch: branch.clone(),
            pool: run.pool.clone(),
            worker: claimed_by.clone(),
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
                claimed_by,
                run: run.clone(),
                refusals: HashSet::new(),
            },
        );
        self.registered.notify_waiters();
        Ok((exit, Forget(self.clone(), run.run_id.clone(), bundle)))
    }

    fn record_path(&self, run_id: &str) -> PathBuf {
        self.scratch.join(format!("{run_id}.json"))
    }

    /// The run's record, if the hub keeps one (a run id from a subject is a safe name).
    fn record(&self, run_id: &str) -> Option<Record> {
        std::fs::read(self.record_path(run_id))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
    }

    /// Takes back a run a killed hub dispatched: its record gives its secret; its lease (or an
    /// exit read meanwhile) says whether it still lives.
    async fn adopt(
        self: &Arc<Self>,
        run: RemoteRun,
        stop: oneshot::Receiver<()>,
    ) -> anyhow::Result<Exit> {
        let Some(record) = self.record(&run.run_id) else {
            anyhow::bail!("the remote run cannot be re-attached: its record is gone");
        };
        let base = format!("{}/base", run.run_id);
        let code = self.code(&run.pool).await?;
        // Its exit is taken from the worker that claimed it (the lease may be gone already).
        let (exit, _forget) = self.wait_for(
            &run,
            record.secret,
            record.branch,
            record.worker,
            Some((code, base)),
        )?;
        let orphan = self
            .orphans
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&run.run_id);
        if let Some(ended) = orphan {
            return Ok(exit_of(ended));
        }
        let holder = match self
            .jet
            .leases
            .entry(lease_key(&run.pool, &run.run_id))
            .await
        {
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
                    self.stop(run, &mut exit, claimed().is_some()).await;
                    return Ok(Exit::Stopped);
                }
                () = sleep_until(deadline) => {
                    self.stop(run, &mut exit, claimed().is_some()).await;
                    return Ok(Exit::TimedOut);
                }
                _ = tick.tick() => {
                    // Only a claimed run has a lease to lose.
                    let Some(worker) = claimed() else { continue };
                    let lease = lease_key(&run.pool, &run.run_id);
                    let held = match self.jet.leases.entry(lease).await {
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

/// Whether `from` speaks for the run of `l`: the run went to its pool and (but for a claim, which
/// the lease decides) its worker holds the run.
fn holds(l: &Live, from: &Sender, claiming: bool) -> Result<(), String> {
    let run = &l.run.run_id;
    if l.run.pool != from.pool {
        return Err(format!(
            "run {run} went to pool {}, not to pool {}",
            l.run.pool, from.pool
        ));
    }
    match &l.claimed_by {
        _ if claiming => Ok(()),
        Some(w) if *w == from.worker => Ok(()),
        Some(w) => Err(format!(
            "run {run} is held by worker {w}, not by {}",
            from.worker
        )),
        None => Err(format!(
            "run {run} is held by no worker yet, not by {}",
            from.worker
        )),
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
struct Forget(Arc<NatsHub>, String, Option<(ObjectStore, String)>);

impl Drop for Forget {
    fn drop(&mut self) {
        lock(&self.0.runs).remove(&self.1);
        let _ = std::fs::remove_file(self.0.record_path(&self.1));
        if let Some((code, bundle)) = self.2.take() {
            tokio::spawn(async move {
                if let Err(e) = code.delete(&bundle).await {
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
