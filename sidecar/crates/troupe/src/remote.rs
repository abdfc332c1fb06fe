//! Remote workers over NATS JetStream (docs/scale.md): the hub (`troupe serve --nats`, `hub.rs`)
//! dispatches the runs of agents that name a `pool` to the workers of that pool (`troupe worker`,
//! `worker.rs`), which run them in their own clones and call back through the hub. Both ends
//! share what is here: the subjects, streams and buckets, the messages, the connection, and the
//! git bundles code travels as. SQLite on the hub stays the source of truth; NATS only carries.
//! The streams are `TROUPE_RUNS` (a work queue) and `TROUPE_EXITS`; the buckets `troupe_leases`
//! (key-value, its stream made by hand for nats-server 2.9) and one `troupe_code_<pool>` per pool
//! (objects). A data dir's `config.toml` may name the NATS server (`nats = "…"`) for `serve` and
//! `worker`.
//!
//! What a worker publishes names its pool and itself (`troupe.worker.<pool>.<worker>.…`), as do
//! its leases (`<pool>.<run>`) and its pool's code bucket, so that a NATS server's per-user
//! permissions can keep a pool's user to its own pool's subjects (docs/security.md); the hub
//! takes a call or an exit only from the pool it sent the run to, and from the worker holding it.

pub mod hub;
pub mod worker;

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};
use async_nats::jetstream::{self, kv, object_store, stream};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::io::AsyncReadExt;

/// The hub's and workers' protocol: the subjects and messages here. A worker refuses a run of a
/// hub of another protocol (`RunSpec::protocol`), and a hub answers the calls of a protocol-1
/// worker (`OLD_CALLS`) with an error saying to upgrade it.
pub const PROTOCOL: u32 = 2;
/// The work queue of every pool (`troupe.pool.<pool>.runs`): a run is taken by one worker.
pub const RUNS_STREAM: &str = "TROUPE_RUNS";
/// How runs ended (`troupe.worker.<pool>.<worker>.exit.<run>`), kept until the hub read them; a
/// retried publish is stored once (`Nats-Msg-Id`).
pub const EXITS_STREAM: &str = "TROUPE_EXITS";
/// Leases (`<pool>.<run>`): a worker's claim on a run, renewed by heartbeat; one that lapses is
/// the run's crash.
pub const LEASES: &str = "troupe_leases";
/// Code: the base of a member's branch going out, its commits coming back (git bundles), in a
/// bucket per pool (`code_bucket`).
pub const CODE: &str = "troupe_code";
/// Calls of remote members to the hub's operations (request/reply, a queue group): every
/// worker's, as the hub subscribes to them.
pub const CALLS: &str = "troupe.worker.*.*.call.*";
/// Every worker's exits, as the exits stream holds them.
pub const EXITS: &str = "troupe.worker.*.*.exit.*";
/// Where the workers of protocol 1 sent their calls (any run's, under any name).
pub const OLD_CALLS: &str = "troupe.hub.call";
/// A hub (re)started: published before it serves calls, so that workers fail the calls the
/// hub before it took and died with (they would wait out their grace) rather than wait.
pub const HUB_UP: &str = "troupe.hub.up";
/// How long a starting hub leaves workers to hear `HUB_UP` before it serves calls: a call sent
/// meanwhile finds no responder and fails at once, so none is failed after the new hub took it.
pub const HUB_UP_PAUSE: Duration = Duration::from_millis(500);

/// The data dir's settings file (`<data dir>/config.toml`): what an autostarted daemon, or a
/// worker started without flags, is told.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Settings {
    /// The NATS server (JetStream) of the hub: `nats = "nats://hub.example:4222"`.
    nats: Option<String>,
    /// How to authenticate to it (never in the URL, which is logged).
    #[serde(default)]
    nats_auth: NatsAuth,
    /// The members' sandbox (`[sandbox] enabled = false`), read by the core.
    #[allow(dead_code)]
    sandbox: Option<toml::Table>,
    /// The retention rules (`[retention] max_age_days = 30`), read by the core.
    #[allow(dead_code)]
    retention: Option<toml::Table>,
    /// Notifications away from the desk (`[notify] webhook_url = "…"`), read by `crate::away`.
    #[allow(dead_code)]
    notify: Option<toml::Table>,
    /// The forge (`[forge] api_url = "…"`, the webhook receiver), read by the core.
    #[allow(dead_code)]
    forge: Option<toml::Table>,
}

/// How the hub or a worker authenticates to NATS and checks its server: `[nats_auth]` in
/// `<data dir>/config.toml` (a creds file, an nkey seed file, or a user and a password or
/// password file; a CA file for TLS, which `tls://` or a CA requires).
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NatsAuth {
    /// A `.creds` file (a user JWT and its nkey seed), as `nsc` makes them.
    pub creds: Option<std::path::PathBuf>,
    /// A file holding an nkey seed (`SU…`).
    pub nkey_seed_file: Option<std::path::PathBuf>,
    pub user: Option<String>,
    pub password: Option<String>,
    /// A file holding the password (preferred over `password`: config files get shared).
    pub password_file: Option<std::path::PathBuf>,
    /// The CA that signed the server's certificate: TLS is then required.
    pub tls_ca: Option<std::path::PathBuf>,
    /// A client certificate and key, when the server asks for one.
    pub tls_cert: Option<std::path::PathBuf>,
    pub tls_key: Option<std::path::PathBuf>,
}

fn settings(data_dir: &Path) -> anyhow::Result<Settings> {
    let path = data_dir.join("config.toml");
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Settings::default()),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    toml::from_str(&text).with_context(|| format!("{} is not valid", path.display()))
}

/// The NATS URL to use: the flag (or `TROUPE_NATS`), else `nats` in `<data dir>/config.toml`.
/// A URL carrying credentials is refused: it is logged and members inherit it.
pub fn nats_url(flag: Option<String>, data_dir: &Path) -> anyhow::Result<Option<String>> {
    let url = match flag {
        Some(flag) => Some(flag),
        None => settings(data_dir)?.nats.filter(|u| !u.trim().is_empty()),
    };
    if let Some(u) = &url
        && u.split_once("://")
            .map_or(u.as_str(), |(_, rest)| rest)
            .split(['/', ','])
            .next()
            .is_some_and(|host| host.contains('@'))
    {
        bail!(
            "the NATS URL carries credentials: put them in {} under [nats_auth] (creds, nkey_seed_file, or user and password_file) — a URL is logged and members inherit it",
            data_dir.join("config.toml").display()
        );
    }
    Ok(url)
}

/// `[nats_auth]` of the data dir's `config.toml` (nothing when absent).
pub fn nats_auth(data_dir: &Path) -> anyhow::Result<NatsAuth> {
    Ok(settings(data_dir)?.nats_auth)
}

/// How long a lease lives without renewal (`TROUPE_LEASE_SECS` changes it, for tests).
pub fn lease_ttl() -> Duration {
    std::env::var("TROUPE_LEASE_SECS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .filter(|d| !d.is_zero())
        .unwrap_or(Duration::from_secs(10))
}

/// How often a worker renews its leases.
pub fn lease_beat() -> Duration {
    (lease_ttl() / 4).max(Duration::from_millis(200))
}

/// The pool's work queue (the hub publishes, its workers take).
pub fn runs_subject(pool: &str) -> String {
    format!("troupe.pool.{pool}.runs")
}

/// Where worker `worker` of `pool` calls the hub as run `run_id`.
pub fn call_subject(pool: &str, worker: &str, run_id: &str) -> String {
    format!("troupe.worker.{pool}.{worker}.call.{run_id}")
}

/// Where worker `worker` of `pool` says how run `run_id` ended.
pub fn exit_subject(pool: &str, worker: &str, run_id: &str) -> String {
    format!("troupe.worker.{pool}.{worker}.exit.{run_id}")
}

/// Where the hub tells the workers of `pool` to stop run `run_id`.
pub fn stop_subject(pool: &str, run_id: &str) -> String {
    format!("troupe.hub.stop.{pool}.{run_id}")
}

/// A run's lease in `LEASES` (its subject `$KV.troupe_leases.<pool>.<run>`).
pub fn lease_key(pool: &str, run_id: &str) -> String {
    format!("{pool}.{run_id}")
}

/// The code bucket of `pool` (its stream `OBJ_troupe_code_<pool>`).
pub fn code_bucket_name(pool: &str) -> String {
    format!("{CODE}_{pool}")
}

/// Who a message on a worker's subject comes from: the pool and the worker its subject names
/// (what the NATS server let that user publish on), and the run it is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sender {
    pub pool: String,
    pub worker: String,
    pub run_id: String,
}

/// The sender of a message on `subject`, a worker's subject of `kind` (`call`, `exit`); none
/// when the subject is another, or one of its names is not one a hub or worker makes.
pub fn sender(subject: &str, kind: &str) -> Option<Sender> {
    let mut tokens = subject.split('.');
    let (Some("troupe"), Some("worker"), Some(pool), Some(worker), Some(k), Some(run), None) = (
        tokens.next(),
        tokens.next(),
        tokens.next(),
        tokens.next(),
        tokens.next(),
        tokens.next(),
        tokens.next(),
    ) else {
        return None;
    };
    let safe = troupe_engine::spec::is_safe_name;
    (k == kind && safe(pool) && safe(worker) && safe(run)).then(|| Sender {
        pool: pool.into(),
        worker: worker.into(),
        run_id: run.into(),
    })
}

/// A run sent to a pool.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunSpec {
    /// The hub's `PROTOCOL` (absent: a hub of protocol 1).
    #[serde(default)]
    pub protocol: u32,
    pub run_id: String,
    pub session_id: String,
    pub pool: String,
    /// The member's command line (its agent's `command`).
    pub command: Vec<String>,
    /// Its environment (the prompt, `TROUPE_SESSION_ID`, …); the worker adds where to call.
    pub env: Vec<(String, String)>,
    /// The member's branch and the commit it starts from; the code is `CODE` object `bundle`.
    pub branch: String,
    pub base: String,
    pub bundle: String,
    /// Proves the run's calls to the hub are its own.
    pub secret: String,
    /// The member's checkout on the hub: paths in the worker's clone are told to the hub as
    /// the same paths there (what approvals, editors and rules see).
    pub workdir: String,
}

/// How a run ended on its worker.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunExit {
    pub run_id: String,
    pub worker: String,
    pub code: Option<i32>,
    pub signal: Option<i32>,
    /// It could not be run (the code could not be fetched, the command not started, …).
    pub error: Option<String>,
}

/// A remote member's call of an operation.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CallRequest {
    pub run_id: String,
    pub secret: String,
    pub op: String,
    pub params: Option<Value>,
    /// With `complete`: the `CODE` object holding the member's new commits, brought into its
    /// checkout on the hub before the run completes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_bundle: Option<String>,
}

/// The hub's answer: the result, or the error as the JSON-RPC door would send it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallReply {
    Result(Value),
    Error {
        code: i32,
        message: String,
        data: Option<Value>,
    },
}

/// A remote call as the hub reads it off `CALLS`; the answer to send when it cannot be read.
pub fn read_call(payload: &[u8]) -> Result<CallRequest, CallReply> {
    serde_json::from_slice(payload).map_err(|e| CallReply::Error {
        code: troupe_api::error::codes::INVALID_PARAMS,
        message: format!("an unreadable remote call: {e}"),
        data: None,
    })
}

/// A run as a worker reads it off its pool's queue; why it is dropped when it cannot be read,
/// comes from a hub of another protocol, or names a run no hub makes: a run id is part of a
/// lease key, of subjects and a directory name (a hub's are UUIDs), one that cannot be would be
/// taken again and again, never run.
pub fn read_run(payload: &[u8]) -> Result<RunSpec, String> {
    let spec: RunSpec =
        serde_json::from_slice(payload).map_err(|e| format!("an unreadable run: {e}"))?;
    if spec.protocol != PROTOCOL {
        return Err(format!(
            "a run from a hub of remote protocol {}, and this worker speaks {PROTOCOL}: run the same Troupe version on the hub and its workers",
            spec.protocol.max(1)
        ));
    }
    if !troupe_engine::spec::is_safe_name(&spec.run_id) {
        return Err(format!(
            "run id {:?} is not one a hub makes",
            spec.run_id.chars().take(80).collect::<String>()
        ));
    }
    Ok(spec)
}

/// How a run ended, as the hub reads it off the exits stream.
pub fn read_exit(payload: &[u8]) -> Result<RunExit, String> {
    serde_json::from_slice(payload).map_err(|e| format!("an unreadable exit: {e}"))
}

/// Where the replies to worker `worker` of `pool` come (its requests' and JetStream's): its own
/// inbox, so that its user may be kept from listening to other pools' (`_INBOX.>`).
pub fn inbox_prefix(pool: &str, worker: &str) -> String {
    format!("_INBOX.troupe.{pool}.{worker}")
}

/// Connects to NATS, its replies coming to `inbox` if given (else `_INBOX`); a clear error when
/// it cannot be reached.
pub async fn connect(
    url: &str,
    auth: &NatsAuth,
    inbox: Option<String>,
) -> anyhow::Result<async_nats::Client> {
    let read = |p: &Path| {
        std::fs::read_to_string(p)
            .map(|t| t.trim().to_string())
            .with_context(|| format!("cannot read {}", p.display()))
    };
    let mut options = match (&auth.creds, &auth.nkey_seed_file, &auth.user) {
        (Some(creds), _, _) => async_nats::ConnectOptions::with_credentials_file(creds)
            .await
            .with_context(|| format!("cannot read the NATS creds file {}", creds.display()))?,
        (None, Some(seed), _) => async_nats::ConnectOptions::with_nkey(read(seed)?),
        (None, None, Some(user)) => {
            let password = match (&auth.password_file, &auth.password) {
                (Some(file), _) => read(file)?,
                (None, Some(p)) => p.clone(),
                (None, None) => bail!("[nats_auth] user {user:?} needs password_file or password"),
            };
            async_nats::ConnectOptions::with_user_and_password(user.clone(), password)
        }
        (None, None, None) => async_nats::ConnectOptions::new(),
    };
    if let Some(ca) = &auth.tls_ca {
        options = options.add_root_certificates(ca.clone()).require_tls(true);
    } else if url.starts_with("tls://") {
        options = options.require_tls(true);
    }
    if let (Some(cert), Some(key)) = (&auth.tls_cert, &auth.tls_key) {
        options = options.add_client_certificate(cert.clone(), key.clone());
    }
    if let Some(inbox) = inbox {
        options = options.custom_inbox_prefix(inbox);
    }
    options
        .connection_timeout(Duration::from_secs(5))
        .name("troupe")
        .connect(url)
        .await
        .with_context(|| {
            format!("cannot reach NATS at {url} (is nats-server running with -js, and are [nats_auth]'s credentials and CA right?)")
        })
}

/// The streams and the leases bucket, made if missing (so either end may start first).
pub struct Jet {
    pub js: jetstream::Context,
    pub leases: kv::Store,
}

pub async fn jet(client: &async_nats::Client) -> anyhow::Result<Jet> {
    let js = jetstream::new(client.clone());
    js.get_or_create_stream(stream::Config {
        name: RUNS_STREAM.into(),
        subjects: vec!["troupe.pool.*.runs".into()],
        retention: stream::RetentionPolicy::WorkQueue,
        storage: stream::StorageType::File,
        duplicate_window: Duration::from_secs(120),
        ..Default::default()
    })
    .await
    .context("cannot make the runs stream (is JetStream enabled: nats-server -js?)")?;
    let exits = stream::Config {
        name: EXITS_STREAM.into(),
        subjects: vec![EXITS.into()],
        retention: stream::RetentionPolicy::WorkQueue,
        storage: stream::StorageType::File,
        duplicate_window: Duration::from_secs(120),
        ..Default::default()
    };
    let made = js
        .get_or_create_stream(exits.clone())
        .await
        .context("cannot make the exits stream")?;
    // Made by a Troupe of protocol 1 (`troupe.run.<run>.exit`): its subjects become ours.
    if made.cached_info().config.subjects != exits.subjects {
        js.update_stream(&exits).await.context(
            "the exits stream has the subjects of an older Troupe and cannot be updated (start the hub once: its NATS user may)",
        )?;
    }
    // The key-value bucket's own stream, made by hand: async-nats 0.50's create_key_value asks
    // for account fields nats-server 2.9 does not send.
    js.get_or_create_stream(stream::Config {
        name: format!("KV_{LEASES}"),
        subjects: vec![format!("$KV.{LEASES}.>")],
        max_messages_per_subject: 1,
        max_age: lease_ttl(),
        storage: stream::StorageType::File,
        allow_rollup: true,
        deny_delete: true,
        allow_direct: true,
        discard: stream::DiscardPolicy::New,
        ..Default::default()
    })
    .await
    .context("cannot make the leases bucket")?;
    let leases = js.get_key_value(LEASES).await?;
    Ok(Jet { js, leases })
}

/// The code bucket of `pool`, made if missing: a pool's code is in its own bucket, so a NATS
/// user kept to its pool's subjects reads and writes no other pool's.
pub async fn code_bucket(
    js: &jetstream::Context,
    pool: &str,
) -> anyhow::Result<object_store::ObjectStore> {
    js.create_object_store(object_store::Config {
        bucket: code_bucket_name(pool),
        storage: stream::StorageType::File,
        ..Default::default()
    })
    .await
    .with_context(|| format!("cannot make the code bucket of pool {pool}"))
}

/// Runs git in `dir`; its output, or an error naming the command and what git said.
pub async fn git(dir: &Path, args: &[&str]) -> anyhow::Result<String> {
    #[allow(clippy::disallowed_methods)] // Git on the worker's own files, not an agent's process.
    let out = tokio::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .stdin(std::process::Stdio::null())
        // A run stopped mid-bundle takes its git with it.
        .kill_on_drop(true)
        .output()
        .await
        .context("cannot run git")?;
    if !out.status.success() {
        bail!(
            "git {} in {}: {}",
            args.join(" "),
            dir.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Puts a file in the code bucket under `name`.
pub async fn upload(
    code: &object_store::ObjectStore,
    name: &str,
    file: &Path,
) -> anyhow::Result<()> {
    let mut f = tokio::fs::File::open(file).await?;
    match code.put(name, &mut f).await {
        Ok(_) => Ok(()),
        // Stored; only the chunks of an earlier object of that name are left (a worker's user
        // may not purge, and the hub deletes what it read).
        Err(e) if e.kind() == object_store::PutErrorKind::PurgeOldChunks => {
            tracing::debug!(error = %e, "an earlier {name}'s chunks not purged");
            Ok(())
        }
        Err(e) => Err(e).with_context(|| format!("cannot store {name} in NATS")),
    }
}

/// Fetches `name` from the code bucket into `file`, trying again (three times) when NATS
/// stumbles: async-nats 0.50's object reader panics on a timeout (a NATS restart), so each try
/// reads in a task of its own and a panic is one failed try.
pub async fn download(
    code: &object_store::ObjectStore,
    name: &str,
    file: &Path,
) -> anyhow::Result<()> {
    let mut last = None;
    for attempt in 0..3u32 {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_millis(500 * u64::from(attempt))).await;
        }
        let (code, name) = (code.clone(), name.to_string());
        let read = tokio::spawn(async move {
            let mut obj = code.get(&name).await?;
            let mut bytes = Vec::new();
            obj.read_to_end(&mut bytes).await?;
            anyhow::Ok(bytes)
        })
        .await;
        match read {
            Ok(Ok(bytes)) => {
                tokio::fs::write(file, bytes).await?;
                return Ok(());
            }
            Ok(Err(e)) => last = Some(e),
            Err(e) => last = Some(anyhow::anyhow!("the read failed: {e}")),
        }
    }
    Err(last
        .unwrap_or_else(|| anyhow::anyhow!("no try"))
        .context(format!("cannot fetch {name} from NATS")))
}

#[cfg(test)]
mod tests;
