//! `troupe worker --nats URL --pool NAME`: runs a pool's members on this machine for a hub
//! elsewhere. It takes runs from the pool's work queue one at a time (up to `--slots` at once);
//! for each it takes the run's lease (so no other worker runs it), asks the hub whether it still
//! wants it, clones the member's branch from the base bundle, and runs the member's command in
//! that clone, in its own process group, with its own `troupe` endpoint: a socket and token in
//! the run's directory whose every operation is forwarded to the hub (`call_subject`), so the
//! member's `troupe call` works as it does at home; a `complete` first sends the member's new
//! commits back as a bundle. The lease is renewed while the run lives; a renewal that fails (the
//! hub gave up on it) stops it, as does a stop from the hub. Its exit goes to the exits stream
//! (stored once), then the lease is dropped. A reaper process of ours (`reap`) ends the runs'
//! process groups when the worker goes, even killed with -9: a member cut off from its hub is not
//! left running.
//!
//! Leases are created, then renewed by compare-and-set on their revision. The member's `troupe`
//! gets `TROUPE_NO_AUTOSTART`, so it never starts a daemon of its own. The reaper is `troupe
//! worker-reaper` (hidden): it reads its stdin, a pipe from the worker, to its end, then ends the
//! runs' process groups. At start a worker ends what a killed worker and reaper on its data dir
//! left running. When `troupe.hub.up` comes, a worker fails the calls still waiting on the hub
//! before it, and sends again a call no hub received (no responders).
//!
//! Everything it publishes names its pool and its name (`troupe.worker.<pool>.<worker>.…`, the
//! leases `<pool>.<run>`, its pool's code bucket), as does its inbox (`inbox_prefix`): a NATS
//! user kept to those (docs/security.md) is enough for it, and the hub takes its calls and exits
//! only for the runs it holds.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use async_nats::jetstream::consumer::{AckPolicy, pull};
use async_nats::jetstream::kv;
use async_nats::jetstream::message::PublishMessage;
use futures_util::StreamExt;
use serde_json::Value;
use tokio::sync::{Semaphore, watch};
use troupe_api::layout::{Endpoint, Layout, write_private_file};

use super::{
    CallReply, CallRequest, HUB_UP, Jet, RUNS_STREAM, RunExit, RunSpec, call_subject, download,
    exit_subject, git, jet, lease_beat, lease_key, lease_ttl, runs_subject, stop_subject, upload,
};
use crate::doors::rpc;

/// How long a remote call may wait for the hub's answer beyond what it asks to wait for (a
/// long-poll's `wait_ms`): a request the hub took and never answered (it died meanwhile) fails
/// after this, and the member's next call finds the hub as it is now.
const CALL_GRACE: Duration = Duration::from_secs(30);
/// What the hub's long-polls wait when a call does not say (`wait_ms`).
const DEFAULT_WAIT: Duration = Duration::from_secs(30);
/// The merge queue's calls run tests: they may take as long as those.
const LANDING_TIMEOUT: Duration = Duration::from_secs(3600);

/// What `troupe worker` was told.
#[derive(Debug, Clone)]
pub struct WorkerArgs {
    pub nats: String,
    pub pool: String,
    pub name: Option<String>,
    pub slots: usize,
}

struct Worker {
    client: async_nats::Client,
    jet: Jet,
    /// Its pool's code bucket.
    code: async_nats::jetstream::object_store::ObjectStore,
    pool: String,
    /// Its name: in its subjects, its leases and on the timeline.
    name: String,
    dir: PathBuf,
    /// Turns true when the worker stops: every run is stopped.
    stopping: watch::Receiver<bool>,
    /// Counts the hub's (re)starts heard (`HUB_UP`): a call waiting when it changes went to
    /// a hub that died.
    hub_starts: watch::Receiver<u64>,
}

/// Runs the worker until SIGTERM or SIGINT.
pub async fn run(layout: Layout, args: WorkerArgs) -> anyhow::Result<()> {
    if args.slots == 0 {
        bail!("--slots must be at least 1");
    }
    if !troupe_engine::spec::is_safe_name(&args.pool) {
        bail!(
            "pool {:?} is not allowed (use letters, digits, '-' and '_')",
            args.pool
        );
    }
    let name = match args.name.clone() {
        Some(name) if troupe_engine::spec::is_safe_name(&name) => name,
        Some(name) => bail!(
            "worker name {name:?} is not allowed: it is part of NATS subjects (use up to 64 letters, digits, '-' and '_')"
        ),
        None => default_name(&host_name(), std::process::id()),
    };
    layout.prepare_dirs()?;
    // A reaper of an earlier worker may still hold it for a moment, ending that one's runs.
    let _lock = lock_within(&layout, Duration::from_secs(5)).await?;
    let inbox = super::inbox_prefix(&args.pool, &name);
    let client = super::connect(
        &args.nats,
        &super::nats_auth(&layout.data_dir)?,
        Some(inbox),
    )
    .await?;
    let jet = jet(&client).await?;
    let code = super::code_bucket(&jet.js, &args.pool).await?;
    let dir = layout.data_dir.join("worker");
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot make {}", dir.display()))?;
    end_leftovers(&dir);
    // Held until this process ends, however it ends: its stdin closing is the reaper's cue.
    let _reaper = start_reaper(&layout)?;
    let consumer = jet
        .js
        .get_stream(RUNS_STREAM)
        .await?
        .get_or_create_consumer(
            &format!("pool-{}", args.pool),
            pull::Config {
                durable_name: Some(format!("pool-{}", args.pool)),
                filter_subject: runs_subject(&args.pool),
                ack_policy: AckPolicy::Explicit,
                ack_wait: Duration::from_secs(60),
                ..Default::default()
            },
        )
        .await
        .context("cannot read the pool's work queue")?;
    let (stop_all, stopping) = watch::channel(false);
    let mut hub_up = client
        .subscribe(HUB_UP)
        .await
        .context("cannot hear the hub")?;
    let (hub_started, hub_starts) = watch::channel(0u64);
    tokio::spawn(async move {
        while hub_up.next().await.is_some() {
            tracing::info!("the hub (re)started: calls still waiting on the one before fail");
            hub_started.send_modify(|n| *n += 1);
        }
    });
    let worker = Arc::new(Worker {
        client,
        jet,
        code,
        pool: args.pool.clone(),
        name,
        dir,
        stopping,
        hub_starts,
    });
    tracing::info!(pool = %args.pool, worker = %worker.name, "worker ready");
    eprintln!("troupe worker {} ready for pool {}", worker.name, args.pool);
    let slots = Arc::new(Semaphore::new(args.slots));
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut running = tokio::task::JoinSet::new();
    loop {
        let permit = tokio::select! {
            permit = slots.clone().acquire_owned() => permit?,
            _ = sigterm.recv() => break,
            _ = tokio::signal::ctrl_c() => break,
        };
        let mut batch = match consumer
            .batch()
            .max_messages(1)
            .expires(Duration::from_secs(5))
            .messages()
            .await
        {
            Ok(batch) => batch,
            Err(e) => {
                tracing::warn!(error = %e, "cannot ask for a run; trying again");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        let next = tokio::select! {
            next = batch.next() => next,
            _ = sigterm.recv() => break,
            _ = tokio::signal::ctrl_c() => break,
        };
        let Some(Ok(msg)) = next else { continue };
        let w = worker.clone();
        running.spawn(async move {
            let _permit = permit;
            w.take(msg).await;
        });
        while running.try_join_next().is_some() {}
    }
    // Stop every run (each reports its end) before going.
    stop_all.send_replace(true);
    while running.join_next().await.is_some() {}
    Ok(())
}

impl Worker {
    /// Renews a run's lease until aborted; says so on `lost` when it is gone (the hub dropped
    /// it, or it lapsed) or could not be renewed for a whole lease (NATS out of reach: the hub
    /// may have started the member elsewhere).
    async fn renew(
        self: Arc<Self>,
        run_id: String,
        mut revision: u64,
        lost: Arc<watch::Sender<bool>>,
    ) {
        let mut beat = tokio::time::interval(lease_beat());
        let mut renewed = tokio::time::Instant::now();
        loop {
            beat.tick().await;
            match self
                .jet
                .leases
                .update(
                    lease_key(&self.pool, &run_id),
                    self.name.clone().into(),
                    revision,
                )
                .await
            {
                Ok(r) => {
                    revision = r;
                    renewed = tokio::time::Instant::now();
                }
                Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => {
                    tracing::warn!(run = %run_id, error = %e, "the run's lease is gone");
                    lost.send_replace(true);
                    return;
                }
                Err(e) if renewed.elapsed() > lease_ttl() => {
                    tracing::warn!(run = %run_id, error = %e, "lease not renewed for its lifetime");
                    lost.send_replace(true);
                    return;
                }
                // A blip (NATS restarting): the client reconnects by itself.
                Err(e) => {
                    tracing::info!(run = %run_id, error = %e, "lease not renewed; trying again")
                }
            }
        }
    }
}

/// The params as the hub must read them: a `cwd` or `file_path` in the run's clone becomes the
/// same path in the member's checkout on the hub.
fn on_hub(mut params: Value, clone: &Path, hub: &Path) -> Value {
    if let Value::Object(map) = &mut params {
        for key in ["cwd", "file_path"] {
            if let Some(Value::String(path)) = map.get_mut(key)
                && let Ok(rel) = Path::new(path.as_str()).strip_prefix(clone)
            {
                *path = hub.join(rel).display().to_string();
            }
        }
    }
    params
}

/// Starts the worker's reaper (`troupe worker-reaper`, in the worker's process group): it waits
/// for its stdin to end, which happens when the worker is gone, and then (holding the data dir's
/// lock, so not under a worker started again meanwhile) ends the process groups of the runs the
/// worker recorded. A kill of the worker's whole group takes the reaper too: then the next
/// worker on the data dir ends them.
fn start_reaper(layout: &Layout) -> anyhow::Result<tokio::process::Child> {
    let exe = std::env::current_exe().context("cannot find the troupe executable")?;
    #[allow(clippy::disallowed_methods)] // The worker's own reaper, not an agent's process.
    tokio::process::Command::new(exe)
        .arg("--data-dir")
        .arg(&layout.data_dir)
        .arg("worker-reaper")
        .env("TROUPE_RUNTIME_DIR", &layout.runtime_dir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .context("cannot start the worker's reaper")
}

/// The reaper's process (see `start_reaper`). The signals a terminal sends the whole group (^C,
/// a hang-up) and a TERM are the worker's to act on: the reaper outlives them until the worker
/// has gone.
pub async fn reap(layout: Layout) -> anyhow::Result<()> {
    use tokio::io::AsyncReadExt;
    use tokio::signal::unix::{SignalKind, signal};
    let _ignored = [
        signal(SignalKind::interrupt())?,
        signal(SignalKind::hangup())?,
        signal(SignalKind::terminate())?,
    ];
    let mut stdin = tokio::io::stdin();
    let mut buf = [0u8; 64];
    while stdin.read(&mut buf).await.unwrap_or(0) > 0 {}
    // The data dir's lock, once the worker's exit released it. Held by someone else for
    // longer, it is a worker started again meanwhile: that one ended the leftovers when it
    // started, and the runs recorded now are its own.
    let _lock = match lock_within(&layout, Duration::from_secs(3)).await {
        Ok(lock) => lock,
        Err(e) => {
            tracing::info!(error = %e, "a worker runs on this data dir again: nothing to end");
            return Ok(());
        }
    };
    kill_leftovers(&layout.data_dir.join("worker"));
    Ok(())
}

/// The data dir's lock, tried again for up to `patience` while someone else holds it.
async fn lock_within(layout: &Layout, patience: Duration) -> anyhow::Result<std::fs::File> {
    let deadline = tokio::time::Instant::now() + patience;
    loop {
        match troupe_core::boot::take_lock(layout) {
            Ok(lock) => return Ok(lock),
            Err(_) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Ends the process groups of the runs recorded under `dir` that still run, each the same process
/// as recorded (its start time matches, so a number reused since is left alone).
fn kill_leftovers(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let run = entry.path();
        let recorded = std::fs::read_to_string(run.join("pgid")).unwrap_or_default();
        let mut parts = recorded.split_whitespace();
        let group = parts.next().and_then(|p| p.parse::<i32>().ok());
        let start = parts.next().and_then(|s| s.parse::<i64>().ok());
        // The same process as recorded, still leading its group.
        let same = group.and_then(|g| u32::try_from(g).ok()).is_some_and(|g| {
            start.is_some() && troupe_core::runners::process::process_start_time(g) == start
        });
        if let Some(pid) = group
            .filter(|_| same)
            .and_then(rustix::process::Pid::from_raw)
        {
            match rustix::process::kill_process_group(pid, rustix::process::Signal::KILL) {
                Ok(()) => {
                    tracing::warn!(run = %run.display(), "ended a run its worker left running")
                }
                Err(e) => tracing::trace!(error = %e, "no process left of an earlier run"),
            }
        }
    }
}

/// Ends what an earlier worker on this data dir left running (it and its reaper were killed: its
/// members' process groups outlived them, and their leases have lapsed, so they may be running
/// elsewhere by now) and removes their directories.
fn end_leftovers(dir: &Path) {
    kill_leftovers(dir);
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if let Err(e) = std::fs::remove_dir_all(entry.path()) {
            tracing::debug!(error = %e, "an earlier run's directory not removed");
        }
    }
}

/// A worker's name when it is not given one: its host's and its pid, as a subject token.
pub(super) fn default_name(host: &str, pid: u32) -> String {
    let host: String = host
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .take(48)
        .collect();
    format!("{host}-{pid}")
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "worker".into())
}

impl Worker {
    /// One message of the work queue: a run to claim and run, or to drop.
    async fn take(self: &Arc<Self>, msg: async_nats::jetstream::Message) {
        let spec: RunSpec = match super::read_run(&msg.payload) {
            Ok(spec) => spec,
            Err(e) => {
                tracing::warn!(error = %e, "a run that cannot be taken; dropped");
                let _ = msg.double_ack().await;
                return;
            }
        };
        // The lease first: whoever holds it runs it.
        let lease = lease_key(&self.pool, &spec.run_id);
        let revision = match self
            .jet
            .leases
            .create(lease.as_str(), self.name.clone().into())
            .await
        {
            Ok(r) => r,
            Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => {
                tracing::info!(run = %spec.run_id, "another worker has this run");
                let _ = msg.double_ack().await;
                return;
            }
            Err(e) => {
                // Left unacknowledged: it comes back after the ack wait.
                tracing::warn!(run = %spec.run_id, error = %e, "cannot take the run's lease");
                return;
            }
        };
        // Renewed from now on, through the claim and the checkout too.
        let (lost_tx, lost) = watch::channel(false);
        let lost_tx = Arc::new(lost_tx);
        let beat = tokio::spawn(
            self.clone()
                .renew(spec.run_id.clone(), revision, lost_tx.clone()),
        );
        let claimed = self.call(&spec, super::hub::CLAIM, None, None).await;
        match claimed {
            Ok(_) => {
                if let Err(e) = msg.double_ack().await {
                    tracing::warn!(run = %spec.run_id, error = %e, "run not acknowledged");
                }
            }
            Err((code, why, _)) => {
                beat.abort();
                let _ = self.jet.leases.delete(lease.as_str()).await;
                let gone = code == troupe_api::error::codes::NOT_FOUND
                    || code == troupe_api::error::codes::UNAUTHORIZED;
                if gone {
                    tracing::info!(run = %spec.run_id, %why, "the hub no longer wants this run");
                    let _ = msg.double_ack().await;
                } else {
                    // The hub is out of reach for now: the run comes back to the queue.
                    tracing::warn!(run = %spec.run_id, %why, "cannot claim the run; it goes back to the queue");
                    let nak = async_nats::jetstream::AckKind::Nak(Some(Duration::from_secs(1)));
                    let _ = msg.ack_with(nak).await;
                }
                return;
            }
        }
        let exit = self.execute(&spec, lost, lost_tx).await;
        beat.abort();
        let body = match serde_json::to_vec(&exit) {
            Ok(b) => b,
            Err(e) => {
                tracing::error!(error = %e, "exit unencodable");
                return;
            }
        };
        // Stored once however often this is retried; the lease goes after it. Its id is not one
        // another sender could guess and take first (ids are unique across the whole stream).
        let id = match crate::auth::new_token() {
            Ok(nonce) => format!("{}:exit:{nonce}", spec.run_id),
            Err(e) => {
                tracing::warn!(error = %e, "no random id for the exit");
                format!("{}:exit:{}", spec.run_id, self.name)
            }
        };
        let subject = exit_subject(&self.pool, &self.name, &spec.run_id);
        for attempt in 0..5 {
            let sent = self
                .jet
                .js
                .send_publish(
                    subject.clone(),
                    PublishMessage::build()
                        .payload(body.clone().into())
                        .message_id(id.clone()),
                )
                .await;
            let acked = match sent {
                Ok(ack) => ack.await.map(|_| ()).map_err(anyhow::Error::from),
                Err(e) => Err(e.into()),
            };
            match acked {
                Ok(()) => break,
                Err(e) => {
                    tracing::warn!(run = %spec.run_id, attempt, error = %e, "exit not stored; retrying");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
        if let Err(e) = self.jet.leases.delete(lease.as_str()).await {
            tracing::debug!(error = %e, "lease not dropped");
        }
        let _ = tokio::fs::remove_dir_all(self.dir.join(&spec.run_id)).await;
    }

    /// Calls an operation of the hub as run `spec`.
    async fn call(
        &self,
        spec: &RunSpec,
        op: &str,
        params: Option<Value>,
        result_bundle: Option<String>,
    ) -> Result<Value, (i32, String, Option<Value>)> {
        let request = CallRequest {
            run_id: spec.run_id.clone(),
            secret: spec.secret.clone(),
            op: op.into(),
            params,
            result_bundle,
        };
        let internal = |m: String| (troupe_api::error::codes::INTERNAL, m, None);
        let body = serde_json::to_vec(&request).map_err(|e| internal(e.to_string()))?;
        // The client's own request timeout (10 s) would cut a member's long-poll short.
        let waits = request
            .params
            .as_ref()
            .and_then(|p| p.get("wait_ms"))
            .and_then(Value::as_u64)
            .map(Duration::from_millis)
            .unwrap_or_else(|| {
                // A long-poll that does not say waits the hub's own default; others not at all.
                match troupe_api::param_field(op, "wait_ms") {
                    troupe_api::Field::Absent => Duration::ZERO,
                    _ => DEFAULT_WAIT,
                }
            });
        let timeout = if op == "land_party" {
            LANDING_TIMEOUT
        } else {
            waits + CALL_GRACE
        };
        let body = bytes::Bytes::from(body);
        let unavailable = |m: String| (troupe_api::error::codes::UNAVAILABLE, m, None);
        // No hub serving calls (one starting, or NATS without it for a moment) delivers nothing:
        // the call is sent again until one serves, for its grace at most.
        let serving = tokio::time::Instant::now() + CALL_GRACE;
        let subject = call_subject(&self.pool, &self.name, &spec.run_id);
        let reply = loop {
            let request = async_nats::Request::new()
                .payload(body.clone())
                .timeout(Some(timeout));
            let mut hub_starts = self.hub_starts.clone();
            hub_starts.borrow_and_update();
            tokio::select! {
                reply = self.client.send_request(subject.clone(), request) => match reply {
                    Ok(reply) => break reply,
                    Err(e) if e.kind() == async_nats::RequestErrorKind::NoResponders
                        && tokio::time::Instant::now() < serving =>
                    {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    Err(e) => {
                        return Err(unavailable(format!("the hub did not answer {op}: {e}")));
                    }
                },
                // The hub that took it died: it will never be answered.
                Ok(()) = hub_starts.changed() => {
                    return Err(unavailable(format!(
                        "the hub restarted while {op} waited for it: call again"
                    )));
                }
            }
        };
        match serde_json::from_slice::<CallReply>(&reply.payload) {
            Ok(CallReply::Result(v)) => Ok(v),
            Ok(CallReply::Error {
                code,
                message,
                data,
            }) => Err((code, message, data)),
            Err(e) => Err(internal(format!("an unreadable answer from the hub: {e}"))),
        }
    }

    /// Fetches the code, serves the run's endpoint, runs the command; how it ended.
    async fn execute(
        self: &Arc<Self>,
        spec: &RunSpec,
        lost: watch::Receiver<bool>,
        lose: Arc<watch::Sender<bool>>,
    ) -> RunExit {
        let ended = |code, signal, error: Option<String>| RunExit {
            run_id: spec.run_id.clone(),
            worker: self.name.clone(),
            code,
            signal,
            error,
        };
        let home = self.dir.join(&spec.run_id);
        let code_dir = home.join("code");
        if let Err(e) = self.checkout(spec, &home, &code_dir).await {
            return ended(None, None, Some(format!("{e:#}")));
        }
        let layout = Layout {
            data_dir: home.join("home"),
            runtime_dir: home.join("run"),
        };
        let endpoint = match self.serve_endpoint(spec, &layout, &code_dir, lose).await {
            Ok(e) => e,
            Err(e) => return ended(None, None, Some(format!("{e:#}"))),
        };
        if *lost.borrow() {
            endpoint.abort();
            return ended(
                None,
                None,
                Some("the run's lease was lost before it started".into()),
            );
        }
        let result = self.spawn_and_wait(spec, &layout, &code_dir, lost).await;
        endpoint.abort();
        match result {
            Ok((code, signal)) => ended(code, signal, None),
            Err(e) => ended(None, None, Some(format!("{e:#}"))),
        }
    }

    async fn checkout(&self, spec: &RunSpec, home: &Path, code_dir: &Path) -> anyhow::Result<()> {
        tokio::fs::create_dir_all(home).await?;
        let bundle = home.join("base.bundle");
        download(&self.code, &spec.bundle, &bundle).await?;
        let (from, to) = (bundle.display().to_string(), code_dir.display().to_string());
        git(
            home,
            &["clone", "--quiet", "--branch", &spec.branch, &from, &to],
        )
        .await?;
        let _ = tokio::fs::remove_file(&bundle).await;
        Ok(())
    }

    /// The run's own `troupe` endpoint: a private socket and token under the run's directory,
    /// every operation forwarded to the hub as this run.
    async fn serve_endpoint(
        self: &Arc<Self>,
        spec: &RunSpec,
        layout: &Layout,
        code_dir: &Path,
        lose: Arc<watch::Sender<bool>>,
    ) -> anyhow::Result<tokio::task::JoinHandle<()>> {
        layout.prepare_dirs()?;
        let token = crate::auth::new_token()?;
        write_private_file(&layout.token_path(), token.as_bytes())?;
        let socket = layout.socket_path();
        let unix = crate::socket::bind_private_socket(&socket)?;
        let endpoint = Endpoint {
            pid: std::process::id(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            socket_path: socket.display().to_string(),
            ws_url: String::new(),
            mcp_url: None,
        };
        write_private_file(
            &layout.endpoint_path(),
            &serde_json::to_vec_pretty(&endpoint)?,
        )?;
        let (w, spec2, code_dir) = (self.clone(), spec.clone(), code_dir.to_path_buf());
        let forward: rpc::Forward = Arc::new(move |op, params| {
            let (w, spec, code_dir, lose) =
                (w.clone(), spec2.clone(), code_dir.clone(), lose.clone());
            Box::pin(async move {
                let bundle = if op == "complete" {
                    w.send_back(&spec, &code_dir)
                        .await
                        .map_err(|e| (troupe_api::error::codes::INTERNAL, format!("{e:#}"), None))?
                } else {
                    None
                };
                let params = params.map(|p| on_hub(p, &code_dir, Path::new(&spec.workdir)));
                let answer = w.call(&spec, op, params, bundle).await;
                // The hub no longer waits for this run (it was restarted without it, or gave
                // it up): the member stops here too.
                if let Err((_, _, Some(data))) = &answer
                    && data["what"] == super::hub::RUN_GONE
                {
                    tracing::warn!(run = %spec.run_id, "the hub no longer waits for this run: stopping it");
                    lose.send_replace(true);
                }
                answer
            })
        });
        let methods = rpc::build_forwarding_module(forward)?;
        let config = rpc::server_config(troupe_core::daemon::DEFAULT_MAX_MESSAGE_BYTES);
        let token: Arc<str> = token.into();
        Ok(tokio::spawn(async move {
            let (stop, _server) = jsonrpsee::server::stop_channel();
            let mut connections = tokio::task::JoinSet::new();
            loop {
                tokio::select! {
                    accepted = unix.accept() => match accepted {
                        Ok((stream, _)) => rpc::serve_connection(
                            &mut connections, stream, methods.clone(), config.clone(),
                            crate::auth::Gate::Token(token.clone()), stop.clone()),
                        Err(e) => tracing::warn!(error = %e, "accept on a run's socket failed"),
                    },
                    Some(_) = connections.join_next(), if !connections.is_empty() => {}
                }
            }
        }))
    }

    /// The member's commits since its base, as a bundle in the code bucket (none if it made
    /// none).
    async fn send_back(&self, spec: &RunSpec, code_dir: &Path) -> anyhow::Result<Option<String>> {
        let range = format!("{}..{}", spec.base, spec.branch);
        let count = git(code_dir, &["rev-list", "--count", &range]).await?;
        if count.trim() == "0" {
            return Ok(None);
        }
        let file = code_dir.parent().unwrap_or(code_dir).join("result.bundle");
        let path = file.display().to_string();
        let exclude = format!("^{}", spec.base);
        git(
            code_dir,
            &["bundle", "create", &path, &spec.branch, &exclude],
        )
        .await?;
        let name = format!("{}/result", spec.run_id);
        upload(&self.code, &name, &file).await?;
        let _ = tokio::fs::remove_file(&file).await;
        Ok(Some(name))
    }

    /// Runs the command until it exits, the hub stops it, its lease is lost or the worker stops.
    async fn spawn_and_wait(
        &self,
        spec: &RunSpec,
        layout: &Layout,
        code_dir: &Path,
        mut lost: watch::Receiver<bool>,
    ) -> anyhow::Result<(Option<i32>, Option<i32>)> {
        let (program, args) = spec
            .command
            .split_first()
            .context("the run has an empty command")?;
        let log = std::fs::File::create(layout.data_dir.join("member.log"))?;
        let exe_dir = std::env::current_exe()?
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        let path = match std::env::var_os("PATH") {
            Some(p) => {
                let mut dirs = vec![exe_dir];
                dirs.extend(std::env::split_paths(&p));
                std::env::join_paths(dirs)?
            }
            None => exe_dir.into_os_string(),
        };
        let mut child = troupe_core::spawn::command(program, troupe_core::spawn::Group::Own, None)
            .args(args)
            .current_dir(code_dir)
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            // It calls through this run's own endpoint, with its token (never a credential
            // of the hub's, which does not travel).
            .env_remove(troupe_api::layout::RUN_TOKEN)
            .env("TROUPE_HOME", &layout.data_dir)
            .env("TROUPE_RUNTIME_DIR", &layout.runtime_dir)
            .env("TROUPE_WORKER", &self.name)
            .env("TROUPE_NO_AUTOSTART", "1")
            .env("PATH", path)
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("cannot start {program}"))?;
        let group = child.id().and_then(|p| i32::try_from(p).ok());
        if let Some(g) = group
            && let Some(home) = layout.data_dir.parent()
        {
            // Read by the next worker on this data dir if this one is killed: the group, and
            // its leader's start, so that a number reused since (a reboot) is left alone.
            let start = u32::try_from(g)
                .ok()
                .and_then(troupe_core::runners::process::process_start_time)
                .unwrap_or(-1);
            std::fs::write(home.join("pgid"), format!("{g} {start}"))?;
        }
        let kill = || {
            if let Some(pid) = group.and_then(rustix::process::Pid::from_raw)
                && let Err(e) =
                    rustix::process::kill_process_group(pid, rustix::process::Signal::KILL)
            {
                tracing::trace!(error = %e, "ending a run's process group");
            }
        };
        let mut stops = self
            .client
            .subscribe(stop_subject(&self.pool, &spec.run_id))
            .await?;
        let mut stopping = self.stopping.clone();
        let mut watching = true;
        loop {
            tokio::select! {
                status = child.wait() => {
                    let status = status?;
                    use std::os::unix::process::ExitStatusExt;
                    kill(); // what it left behind in its group
                    return Ok((status.code(), status.signal()));
                }
                _ = stops.next() => {
                    tracing::info!(run = %spec.run_id, "stopped by the hub");
                    kill();
                }
                changed = lost.changed(), if watching => {
                    // Once: the renewals have ended (lost, or stopped with the run).
                    watching = false;
                    if changed.is_ok() && *lost.borrow() {
                        tracing::warn!(run = %spec.run_id, "lease lost: stopping the run");
                        kill();
                    }
                }
                _ = stopping.changed() => {
                    tracing::info!(run = %spec.run_id, "the worker is stopping");
                    kill();
                }
            }
        }
    }
}
