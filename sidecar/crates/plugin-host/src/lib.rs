//! Troupe's WebAssembly plugin host: recovery strategies, routers and LLM executors as
//! components of the `troupe:plugin` WIT worlds, run by wasmtime with no ambient authority
//! (no filesystem, environment or sockets; HTTP only through `http_gate.rs`), an epoch
//! deadline and a memory cap per call. It knows nothing of parties or the daemon: callers
//! pass plain values in and get plain values (or a `PluginError` naming the plugin) out.
//!
//! One engine (pooling allocator, an epoch ticker every 10 ms), one pre-instantiated component
//! per plugin, and a fresh store per router or recovery call and per executor run, inside a
//! wall-clock timeout. Routers and recovery strategies link WASI (everything denied) and `host`;
//! executors also get `tools` and `wasi:http`. A trap, a loop or a memory hog ends only its own
//! call.

mod bindings;
mod cache;
pub mod grants;
mod http_gate;
pub mod manifest;
mod state;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use wasmtime::component::{Component, HasSelf, Linker, ResourceTable};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store};
use wasmtime::{StoreLimitsBuilder, Trap, UpdateDeadline};
use wasmtime_wasi::WasiCtx;
use wasmtime_wasi_http::WasiHttpCtx;

use crate::bindings::v0_1_0 as v0;
pub use crate::cache::{Source, sha256_hex};
pub use crate::grants::{Grants, PluginGrant};
use crate::http_gate::{Budget, HttpGate};
pub use crate::manifest::{Kind, Manifest, SUPPORTED_WIT};
use crate::state::HostState;
pub use crate::state::ToolHandler;

/// Why a plugin could not be loaded or called. Every variant names the plugin.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    #[error("bad plugin manifest {path}: {reason}")]
    Manifest { path: String, reason: String },
    #[error("bad plugin grants {path}: {reason}")]
    Grants { path: String, reason: String },
    #[error(
        "plugin {plugin} targets WIT troupe:plugin@{wit}, which this host does not support (it supports {})",
        SUPPORTED_WIT.join(", ")
    )]
    UnsupportedWit { plugin: String, wit: String },
    #[error("plugin {plugin} cannot be loaded: {reason}")]
    Load { plugin: String, reason: String },
    #[error("no plugin named {0} is installed")]
    NotFound(String),
    #[error("plugin {plugin} is a {actual} plugin, not a {wanted}")]
    WrongKind {
        plugin: String,
        actual: &'static str,
        wanted: &'static str,
    },
    #[error("plugin {plugin} trapped: {detail}")]
    Trap { plugin: String, detail: String },
    #[error("plugin {plugin} ran past its {limit_ms} ms deadline and was stopped")]
    Timeout { plugin: String, limit_ms: u64 },
    #[error("plugin {plugin} ran out of memory (its limit is {limit_mib} MiB)")]
    Memory { plugin: String, limit_mib: u32 },
    #[error("plugin {plugin} returned an error: {message}")]
    Guest { plugin: String, message: String },
    #[error("plugin {plugin} returned an invalid result: {reason}")]
    BadResult { plugin: String, reason: String },
    #[error("plugin host: {0}")]
    Host(String),
}

/// Tokens and money spent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cost_usd: f64,
}

impl Usage {
    pub fn add(&mut self, other: &Usage) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        // Saturates like the counts: a run's cost stays a finite number whatever was reported.
        self.cost_usd = (self.cost_usd + other.cost_usd).min(f64::MAX);
    }
}

/// Facts a plugin may read with `host.context`, and the caller's config layer.
#[derive(Debug, Clone, Default)]
pub struct CallContext {
    pub facts: BTreeMap<String, String>,
    /// The innermost config layer (e.g. an agent definition's `plugin_config`).
    pub config: Option<Value>,
}

/// Who is told about a pause.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NotifyTarget {
    Leader,
    User,
    Party,
}

/// The `recovery` world's input.
#[derive(Debug, Clone, Default)]
pub struct CrashContext {
    pub party: String,
    pub role: String,
    pub member: String,
    pub crash_count: u32,
    pub retry_limit: u32,
    pub exit_status: Option<i32>,
    pub reason: String,
    pub recent_events: Vec<String>,
    pub strategy: String,
}

/// What a recovery plugin decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecoveryDecision {
    Restart { delay_ms: u64 },
    Pause { notify: NotifyTarget },
    Abort,
}

/// A router candidate.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub capabilities: Vec<String>,
}

/// A router's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RouteChoice {
    pub agent: String,
    pub reason: String,
}

/// A tool offered to an executor.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSchema {
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments.
    pub parameters: Value,
}

/// An executor run's input.
#[derive(Debug, Clone)]
pub struct ExecTask {
    pub prompt: String,
    pub system_prompt: Option<String>,
    pub model: Option<String>,
    pub tools: Vec<ToolSchema>,
    pub max_turns: u32,
    pub deadline: std::time::SystemTime,
}

/// An executor run's result.
#[derive(Debug, Clone, PartialEq)]
pub struct ExecOutcome {
    pub summary: String,
    pub artifacts: Value,
    pub turns: u32,
    /// Usage as the host counted it (the sum of `report-usage` calls).
    pub usage: Usage,
    pub tool_calls: u64,
}

/// Engine-wide settings.
#[derive(Debug, Clone, Default)]
pub struct HostOptions {
    /// Where compiled components are cached (none: compile on every load).
    pub cache_dir: Option<PathBuf>,
    /// Instances the pooling allocator keeps room for (default 128).
    pub pool_instances: Option<u32>,
}

/// Default memory cap per instance.
pub const DEFAULT_MEMORY_MIB: u32 = 64;
/// Default deadline of a router or recovery call.
pub const DEFAULT_CALL_TIMEOUT_MS: u64 = 1000;
const EPOCH_TICK: Duration = Duration::from_millis(10);
/// Largest memory any grant may allow.
const MAX_MEMORY_MIB: u32 = 1024;
/// Host-side resources (streams, requests, fields…) a store may hold at once.
const MAX_RESOURCES: usize = 1024;
/// Host-side bytes of one set of HTTP headers.
const MAX_HEADER_BYTES: usize = 64 << 10;
/// Log lines a store may write (more are dropped, once said).
const MAX_LOG_LINES: u32 = 1000;

/// A loaded plugin: its manifest and a pre-instantiated component.
pub struct Plugin {
    pub manifest: Manifest,
    pub dir: PathBuf,
    pub sha256: String,
    pub source: Source,
    /// Milliseconds to load (read, hash, compile or deserialize, link).
    pub load_ms: f64,
    pre: Pre,
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin")
            .field("manifest", &self.manifest)
            .field("dir", &self.dir)
            .field("sha256", &self.sha256)
            .finish_non_exhaustive()
    }
}

/// Pre-instantiated components, one variant per (kind, WIT version).
enum Pre {
    RecoveryV0_1(v0::recovery::RecoveryPre<HostState>),
    RouterV0_1(v0::router::RouterPre<HostState>),
    ExecutorV0_1(v0::executor::ExecutorPre<HostState>),
}

struct Inner {
    engine: Engine,
    /// wasi (denied) + host: recovery and router plugins.
    linker_pure: Linker<HostState>,
    /// wasi (denied) + wasi:http (gated) + host + tools: executors.
    linker_exec: Linker<HostState>,
    cache_dir: Option<PathBuf>,
    plugins: RwLock<BTreeMap<String, Arc<Plugin>>>,
    grants: RwLock<Grants>,
    stop: Arc<AtomicBool>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The plugin host: one engine, its epoch ticker, and the loaded plugins. Cheap to clone.
#[derive(Clone)]
pub struct PluginHost {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for PluginHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginHost")
            .field("cache_dir", &self.inner.cache_dir)
            .finish_non_exhaustive()
    }
}

fn host_err(e: impl std::fmt::Display) -> PluginError {
    PluginError::Host(e.to_string())
}

impl PluginHost {
    /// Builds the engine (pooling allocator, epoch interruption) and starts its ticker.
    pub fn new(options: HostOptions) -> Result<PluginHost, PluginError> {
        let slots = options.pool_instances.unwrap_or(128);
        let mut pool = PoolingAllocationConfig::default();
        pool.total_component_instances(slots)
            .total_core_instances(slots * 4)
            .total_memories(slots * 2)
            .total_tables(slots * 2)
            .total_stacks(slots)
            .max_memory_size((MAX_MEMORY_MIB as usize) << 20)
            // Reused slots keep their first pages mapped (zeroed, not decommitted): a fresh
            // instance then costs no page faults for its stack and first heap pages.
            .linear_memory_keep_resident(64 << 10)
            .table_keep_resident(64 << 10)
            .async_stack_keep_resident(256 << 10);
        let mut config = Config::new();
        config
            .epoch_interruption(true)
            .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        let engine = Engine::new(&config).map_err(host_err)?;

        let mut linker_pure = Linker::<HostState>::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker_pure).map_err(host_err)?;
        v0::router::Router::add_to_linker::<_, HasSelf<HostState>>(&mut linker_pure, |s| s)
            .map_err(host_err)?;

        let mut linker_exec = Linker::<HostState>::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker_exec).map_err(host_err)?;
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker_exec)
            .map_err(host_err)?;
        v0::executor::Executor::add_to_linker::<_, HasSelf<HostState>>(&mut linker_exec, |s| s)
            .map_err(host_err)?;

        let stop = Arc::new(AtomicBool::new(false));
        let ticker_engine = engine.clone();
        let ticker_stop = stop.clone();
        std::thread::Builder::new()
            .name("troupe-plugin-epoch".into())
            .spawn(move || {
                while !ticker_stop.load(Ordering::Relaxed) {
                    std::thread::sleep(EPOCH_TICK);
                    ticker_engine.increment_epoch();
                }
            })
            .map_err(host_err)?;
        if let Some(dir) = &options.cache_dir {
            std::fs::create_dir_all(dir).map_err(host_err)?;
            set_private_dir(dir).map_err(host_err)?;
        }
        Ok(PluginHost {
            inner: Arc::new(Inner {
                engine,
                linker_pure,
                linker_exec,
                cache_dir: options.cache_dir,
                plugins: RwLock::new(BTreeMap::new()),
                grants: RwLock::new(Grants::default()),
                stop,
            }),
        })
    }

    /// Replaces the user's grants.
    pub fn set_grants(&self, grants: Grants) {
        if let Ok(mut g) = self.inner.grants.write() {
            *g = grants;
        }
    }

    pub fn grants(&self) -> Grants {
        self.inner
            .grants
            .read()
            .map(|g| g.clone())
            .unwrap_or_default()
    }

    fn grant(&self, name: &str) -> PluginGrant {
        self.inner
            .grants
            .read()
            .ok()
            .and_then(|g| g.plugins.get(name).cloned())
            .unwrap_or_default()
    }

    /// Loads (or reloads) the plugin in `dir` (a `plugin.toml` and its component).
    pub fn load(&self, dir: &Path) -> Result<Arc<Plugin>, PluginError> {
        self.load_named(dir, None)
    }

    /// Like `load`, but refuses (before replacing anything) a plugin whose manifest does not
    /// name it `expected`.
    pub fn load_named(
        &self,
        dir: &Path,
        expected: Option<&str>,
    ) -> Result<Arc<Plugin>, PluginError> {
        let started = Instant::now();
        let manifest = Manifest::read(dir)?;
        let label = manifest.label();
        if let Some(want) = expected
            && want != manifest.name
        {
            return Err(PluginError::Load {
                plugin: label,
                reason: format!("it is in folder {want:?}; a plugin's folder must carry its name"),
            });
        }
        if !SUPPORTED_WIT.contains(&manifest.wit.as_str()) {
            return Err(PluginError::UnsupportedWit {
                plugin: label,
                wit: manifest.wit.clone(),
            });
        }
        let load_err = |reason: String| PluginError::Load {
            plugin: label.clone(),
            reason,
        };
        let file = dir.join(manifest.component_file());
        // The component must be a regular file inside the plugin's folder.
        let meta = std::fs::symlink_metadata(&file)
            .map_err(|e| load_err(format!("cannot read {}: {e}", file.display())))?;
        if !meta.is_file() {
            return Err(load_err(format!(
                "{} is not a regular file",
                file.display()
            )));
        }
        let bytes = std::fs::read(&file)
            .map_err(|e| load_err(format!("cannot read {}: {e}", file.display())))?;
        let sha256 = cache::sha256_hex(&bytes);
        let (component, source) = cache::load(
            &self.inner.engine,
            self.inner.cache_dir.as_deref(),
            &sha256,
            &bytes,
        )
        .map_err(|e| load_err(format!("not a valid component: {e:#}")))?;
        let pre = self.prepare(&manifest, &component).map_err(load_err)?;
        let plugin = Arc::new(Plugin {
            manifest,
            dir: dir.to_path_buf(),
            sha256,
            source,
            load_ms: started.elapsed().as_secs_f64() * 1e3,
            pre,
        });
        if let Ok(mut plugins) = self.inner.plugins.write() {
            plugins.insert(plugin.manifest.name.clone(), plugin.clone());
        }
        tracing::info!(plugin = %plugin.manifest.label(), kind = plugin.manifest.kind.as_str(), "plugin loaded");
        Ok(plugin)
    }

    fn prepare(&self, manifest: &Manifest, component: &Component) -> Result<Pre, String> {
        let linker = match manifest.kind {
            Kind::Executor => &self.inner.linker_exec,
            Kind::Recovery | Kind::Router => &self.inner.linker_pure,
        };
        let instance_pre = linker.instantiate_pre(component).map_err(|e| {
            format!(
                "it imports something a {} plugin is not given: {e:#}",
                manifest.kind.as_str()
            )
        })?;
        let wrong = |e: wasmtime::Error| {
            format!(
                "it does not implement the troupe:plugin@{} {} world: {e:#}",
                manifest.wit,
                manifest.kind.as_str()
            )
        };
        Ok(match manifest.kind {
            Kind::Recovery => {
                Pre::RecoveryV0_1(v0::recovery::RecoveryPre::new(instance_pre).map_err(wrong)?)
            }
            Kind::Router => {
                Pre::RouterV0_1(v0::router::RouterPre::new(instance_pre).map_err(wrong)?)
            }
            Kind::Executor => {
                Pre::ExecutorV0_1(v0::executor::ExecutorPre::new(instance_pre).map_err(wrong)?)
            }
        })
    }

    /// Forgets a plugin; returns whether it was loaded.
    pub fn unload(&self, name: &str) -> bool {
        self.inner
            .plugins
            .write()
            .map(|mut p| p.remove(name).is_some())
            .unwrap_or(false)
    }

    pub fn get(&self, name: &str) -> Option<Arc<Plugin>> {
        self.inner
            .plugins
            .read()
            .ok()
            .and_then(|p| p.get(name).cloned())
    }

    pub fn list(&self) -> Vec<Arc<Plugin>> {
        self.inner
            .plugins
            .read()
            .map(|p| p.values().cloned().collect())
            .unwrap_or_default()
    }

    fn plugin(&self, name: &str, wanted: Kind) -> Result<Arc<Plugin>, PluginError> {
        let plugin = self
            .get(name)
            .ok_or_else(|| PluginError::NotFound(name.to_string()))?;
        if plugin.manifest.kind != wanted {
            return Err(PluginError::WrongKind {
                plugin: plugin.manifest.label(),
                actual: plugin.manifest.kind.as_str(),
                wanted: wanted.as_str(),
            });
        }
        Ok(plugin)
    }

    /// A fresh store for one call or run of `plugin`.
    fn store(
        &self,
        plugin: &Plugin,
        call: &CallContext,
        tools: Option<Arc<dyn ToolHandler>>,
    ) -> (Store<HostState>, Limits) {
        let grant = self.grant(&plugin.manifest.name);
        let memory_mib = grant
            .memory_mib
            .unwrap_or(DEFAULT_MEMORY_MIB)
            .clamp(1, MAX_MEMORY_MIB);
        let limits = StoreLimitsBuilder::new()
            .memory_size((memory_mib as usize) << 20)
            .instances(32)
            .tables(8)
            // One memory per guest module (the cap is per memory).
            .memories(2)
            .trap_on_grow_failure(true)
            .build();
        let mut config = plugin
            .manifest
            .config
            .clone()
            .unwrap_or_else(|| Value::Object(Default::default()));
        for layer in [grant.config.as_ref(), call.config.as_ref()]
            .into_iter()
            .flatten()
        {
            if let (Value::Object(base), Value::Object(over)) = (&mut config, layer) {
                for (k, v) in over {
                    base.insert(k.clone(), v.clone());
                }
            }
        }
        let http = plugin.manifest.http.clone().unwrap_or_default();
        let key = match (&http.key_header, &grant.key_env) {
            (Some(header), Some(var)) => match (
                http::HeaderName::from_bytes(header.as_bytes()),
                std::env::var(var),
            ) {
                (Ok(h), Ok(v)) if !v.is_empty() => Some((
                    h,
                    format!("{}{v}", http.key_prefix.clone().unwrap_or_default()),
                )),
                _ => None,
            },
            _ => None,
        };
        let granted = grant
            .allow_http
            .iter()
            .filter_map(|o| grants::Origin::parse(o).ok())
            .collect();
        let mut facts = call.facts.clone();
        facts.insert("plugin".into(), plugin.manifest.name.clone());
        facts.insert("plugin-version".into(), plugin.manifest.version.clone());
        let denied = Arc::new(std::sync::Mutex::new(Vec::new()));
        let state = HostState {
            // No preopens, environment, arguments, stdio or network.
            wasi: WasiCtx::builder().build(),
            table: {
                let mut t = ResourceTable::new();
                t.set_max_capacity(MAX_RESOURCES);
                t
            },
            http: {
                let mut h = WasiHttpCtx::new();
                h.set_field_size_limit(MAX_HEADER_BYTES);
                h
            },
            gate: HttpGate {
                label: plugin.manifest.label(),
                manifest_hosts: http.hosts,
                granted,
                allow_private: grant.allow_private,
                key,
                budget: Budget::new(
                    grant.max_requests.unwrap_or(200),
                    grant.max_response_bytes.unwrap_or(64 << 20),
                ),
                denied: denied.clone(),
            },
            limits,
            label: plugin.manifest.label(),
            context: facts,
            config: config.to_string(),
            tools,
            usage: Usage::default(),
            tool_calls: 0,
            logs_left: MAX_LOG_LINES,
        };
        let mut store = Store::new(&self.inner.engine, state);
        store.limiter(|s| &mut s.limits);
        (
            store,
            Limits {
                memory_mib,
                call_timeout_ms: grant.call_timeout_ms.unwrap_or(DEFAULT_CALL_TIMEOUT_MS),
                denied,
            },
        )
    }

    /// Asks a recovery plugin what to do about a crash.
    pub async fn recover(
        &self,
        name: &str,
        ctx: CrashContext,
        call: &CallContext,
    ) -> Result<RecoveryDecision, PluginError> {
        use v0::recovery::exports::troupe::plugin::recovery_strategy as wit;
        let plugin = self.plugin(name, Kind::Recovery)?;
        let label = plugin.manifest.label();
        let Pre::RecoveryV0_1(pre) = &plugin.pre else {
            return Err(host_err("recovery plugin without recovery bindings"));
        };
        let (mut store, limits) = self.store(&plugin, call, None);
        let input = wit::CrashContext {
            party: ctx.party,
            role: ctx.role,
            member: ctx.member,
            crash_count: ctx.crash_count,
            retry_limit: ctx.retry_limit,
            exit_status: ctx.exit_status,
            reason: ctx.reason,
            recent_events: ctx.recent_events,
            strategy: ctx.strategy,
        };
        let timeout = limits.call_timeout_ms;
        let out = bounded(&mut store, &label, &limits, timeout, async |store| {
            let instance = pre.instantiate_async(&mut *store).await?;
            instance
                .troupe_plugin_recovery_strategy()
                .call_decide(&mut *store, &input)
                .await
        })
        .await?;
        Ok(decision_from_wit(out))
    }

    /// Asks a router plugin which candidate should take `text`.
    pub async fn route(
        &self,
        name: &str,
        text: String,
        metadata: Vec<(String, String)>,
        candidates: Vec<Candidate>,
        call: &CallContext,
    ) -> Result<RouteChoice, PluginError> {
        use v0::router::exports::troupe::plugin::routing as wit;
        let plugin = self.plugin(name, Kind::Router)?;
        let label = plugin.manifest.label();
        let Pre::RouterV0_1(pre) = &plugin.pre else {
            return Err(host_err("router plugin without router bindings"));
        };
        let (mut store, limits) = self.store(&plugin, call, None);
        let request = wit::Request { text, metadata };
        let wit_candidates = wit_candidates(&candidates);
        let timeout = limits.call_timeout_ms;
        let out = bounded(&mut store, &label, &limits, timeout, async |store| {
            let instance = pre.instantiate_async(&mut *store).await?;
            instance
                .troupe_plugin_routing()
                .call_route(&mut *store, &request, &wit_candidates)
                .await
        })
        .await?;
        route_from_wit(out, &candidates, label)
    }

    /// Runs an executor's agentic loop to the end (or the task's deadline).
    pub async fn execute(
        &self,
        name: &str,
        task: ExecTask,
        call: &CallContext,
        tools: Arc<dyn ToolHandler>,
    ) -> Result<ExecOutcome, PluginError> {
        use v0::executor::exports::troupe::plugin::execution as wit;
        let plugin = self.plugin(name, Kind::Executor)?;
        let label = plugin.manifest.label();
        let Pre::ExecutorV0_1(pre) = &plugin.pre else {
            return Err(host_err("executor plugin without executor bindings"));
        };
        let (mut store, limits) = self.store(&plugin, call, Some(tools));
        let deadline_ms = task
            .deadline
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        let timeout = task
            .deadline
            .duration_since(std::time::SystemTime::now())
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        let input = wit::Task {
            prompt: task.prompt,
            system_prompt: task.system_prompt,
            model: task.model,
            tools: task
                .tools
                .into_iter()
                .map(|t| wit::ToolSchema {
                    name: t.name,
                    description: t.description,
                    parameters: t.parameters.to_string(),
                })
                .collect(),
            max_turns: task.max_turns,
            deadline_ms,
        };
        let out = bounded(&mut store, &label, &limits, timeout, async |store| {
            let instance = pre.instantiate_async(&mut *store).await?;
            instance
                .troupe_plugin_execution()
                .call_run(&mut *store, &input)
                .await
        })
        .await?;
        let usage = store.data().usage;
        let tool_calls = store.data().tool_calls;
        let denied = limits.denied.lock().map(|d| d.clone()).unwrap_or_default();
        outcome_from_wit(out, label, usage, tool_calls, &denied)
    }
}

/// A recovery plugin's answer, converted at the WIT boundary.
fn decision_from_wit(
    out: v0::recovery::exports::troupe::plugin::recovery_strategy::Decision,
) -> RecoveryDecision {
    use v0::recovery::exports::troupe::plugin::recovery_strategy as wit;
    match out {
        wit::Decision::Restart(delay_ms) => RecoveryDecision::Restart { delay_ms },
        wit::Decision::Pause(target) => RecoveryDecision::Pause {
            notify: match target {
                wit::NotifyTarget::Leader => NotifyTarget::Leader,
                wit::NotifyTarget::User => NotifyTarget::User,
                wit::NotifyTarget::Party => NotifyTarget::Party,
            },
        },
        wit::Decision::Abort => RecoveryDecision::Abort,
    }
}

/// A router's answer, converted at the WIT boundary: it must name one of the candidates.
fn route_from_wit(
    out: Result<v0::router::exports::troupe::plugin::routing::Choice, String>,
    candidates: &[Candidate],
    label: String,
) -> Result<RouteChoice, PluginError> {
    match out {
        Ok(choice) => {
            if !candidates.iter().any(|c| c.name == choice.agent) {
                return Err(PluginError::BadResult {
                    plugin: label,
                    reason: format!("it chose {:?}, which is not a candidate", choice.agent),
                });
            }
            Ok(RouteChoice {
                agent: choice.agent,
                reason: choice.reason,
            })
        }
        Err(message) => Err(PluginError::Guest {
            plugin: label,
            message,
        }),
    }
}

/// An executor's outcome, converted at the WIT boundary: `artifacts` must be JSON (empty means
/// `{}`); usage and tool calls are the host's own counts, never the guest's claim.
fn outcome_from_wit(
    out: Result<v0::executor::exports::troupe::plugin::execution::Outcome, String>,
    label: String,
    usage: Usage,
    tool_calls: u64,
    denied: &[String],
) -> Result<ExecOutcome, PluginError> {
    match out {
        Ok(outcome) => {
            let artifacts: Value = if outcome.artifacts.trim().is_empty() {
                Value::Object(Default::default())
            } else {
                serde_json::from_str(&outcome.artifacts).map_err(|e| PluginError::BadResult {
                    plugin: label.clone(),
                    reason: format!("artifacts are not JSON: {e}"),
                })?
            };
            Ok(ExecOutcome {
                summary: outcome.summary,
                artifacts,
                turns: outcome.turns,
                usage,
                tool_calls,
            })
        }
        Err(message) => {
            let message = if denied.is_empty() {
                message
            } else {
                format!("{message} (the host refused: {})", denied.join("; "))
            };
            Err(PluginError::Guest {
                plugin: label,
                message,
            })
        }
    }
}

/// The phases of router calls, measured by `benches/plugins.rs`.
#[derive(Debug, Default)]
pub struct RouterTimings {
    /// A fresh store (its WASI context, limits, config) alone.
    pub store: Vec<Duration>,
    /// A fresh store and a pooled instance from the `InstancePre`.
    pub instantiate: Vec<Duration>,
    /// A call on an instance that already exists.
    pub warm_call: Vec<Duration>,
    /// The first call on a fresh instance (the guest's own start-up included).
    pub first_call: Vec<Duration>,
    /// What `route` costs: store, instance, call, result conversion.
    pub full_call: Vec<Duration>,
}

impl PluginHost {
    /// Times `n` of each phase of a router call (for the benchmark, not the daemon).
    #[doc(hidden)]
    pub async fn bench_router(
        &self,
        name: &str,
        candidates: Vec<Candidate>,
        text: &str,
        n: usize,
    ) -> Result<RouterTimings, PluginError> {
        use v0::router::exports::troupe::plugin::routing as wit;
        let plugin = self.plugin(name, Kind::Router)?;
        let Pre::RouterV0_1(pre) = &plugin.pre else {
            return Err(host_err("router plugin without router bindings"));
        };
        let call = CallContext::default();
        let mut t = RouterTimings::default();
        for _ in 0..n {
            let started = Instant::now();
            let store = self.store(&plugin, &call, None);
            t.store.push(started.elapsed());
            drop(store);
        }
        for _ in 0..n {
            let started = Instant::now();
            let (mut store, _) = self.store(&plugin, &call, None);
            store.set_epoch_deadline(100);
            pre.instantiate_async(&mut store).await.map_err(host_err)?;
            t.instantiate.push(started.elapsed());
        }
        let request = wit::Request {
            text: text.to_string(),
            metadata: Vec::new(),
        };
        let wit_candidates = wit_candidates(&candidates);
        let (mut store, _) = self.store(&plugin, &call, None);
        store.set_epoch_deadline(u64::MAX / 2);
        let instance = pre.instantiate_async(&mut store).await.map_err(host_err)?;
        for _ in 0..n {
            let started = Instant::now();
            let out = instance
                .troupe_plugin_routing()
                .call_route(&mut store, &request, &wit_candidates)
                .await
                .map_err(host_err)?;
            t.warm_call.push(started.elapsed());
            if out.is_err() {
                return Err(host_err("the router refused the benchmark request"));
            }
        }
        for _ in 0..n {
            let (mut store, _) = self.store(&plugin, &call, None);
            store.set_epoch_deadline(100);
            let instance = pre.instantiate_async(&mut store).await.map_err(host_err)?;
            let started = Instant::now();
            instance
                .troupe_plugin_routing()
                .call_route(&mut store, &request, &wit_candidates)
                .await
                .map_err(host_err)?
                .map_err(host_err)?;
            t.first_call.push(started.elapsed());
        }
        for _ in 0..n {
            let started = Instant::now();
            self.route(
                name,
                text.to_string(),
                Vec::new(),
                candidates.clone(),
                &call,
            )
            .await?;
            t.full_call.push(started.elapsed());
        }
        Ok(t)
    }
}

fn wit_candidates(
    candidates: &[Candidate],
) -> Vec<v0::router::exports::troupe::plugin::routing::Candidate> {
    candidates
        .iter()
        .map(
            |c| v0::router::exports::troupe::plugin::routing::Candidate {
                name: c.name.clone(),
                description: c.description.clone(),
                capabilities: c.capabilities.clone(),
            },
        )
        .collect()
}

/// Per-store limits the call wrapper needs.
struct Limits {
    memory_mib: u32,
    call_timeout_ms: u64,
    denied: Arc<std::sync::Mutex<Vec<String>>>,
}

/// Runs `f` under an epoch deadline of `timeout_ms` (a trap once it passes while guest code
/// runs) and a wall-clock timeout (for time spent in host calls), and turns wasmtime's
/// errors into `PluginError`s naming the plugin.
async fn bounded<R>(
    store: &mut Store<HostState>,
    label: &str,
    limits: &Limits,
    timeout_ms: u64,
    f: impl AsyncFnOnce(&mut Store<HostState>) -> wasmtime::Result<R>,
) -> Result<R, PluginError> {
    // Every tick the guest yields to the async executor (so a timeout or a cancel can drop the
    // call even while guest code spins), and once the deadline has passed it traps.
    let deadline = Instant::now() + Duration::from_millis(timeout_ms);
    store.epoch_deadline_callback(move |_| {
        Ok(if Instant::now() >= deadline {
            UpdateDeadline::Interrupt
        } else {
            UpdateDeadline::Yield(1)
        })
    });
    store.set_epoch_deadline(1);
    let limit = Duration::from_millis(timeout_ms.saturating_add(50));
    match tokio::time::timeout(limit, f(store)).await {
        Err(_) => Err(PluginError::Timeout {
            plugin: label.to_string(),
            limit_ms: timeout_ms,
        }),
        Ok(Ok(r)) => Ok(r),
        Ok(Err(e)) => Err(classify(e, label, limits, timeout_ms)),
    }
}

fn classify(e: wasmtime::Error, label: &str, limits: &Limits, timeout_ms: u64) -> PluginError {
    let plugin = label.to_string();
    if let Some(trap) = e.downcast_ref::<Trap>()
        && *trap == Trap::Interrupt
    {
        return PluginError::Timeout {
            plugin,
            limit_ms: timeout_ms,
        };
    }
    let detail = format!("{e:#}");
    if detail.contains("growing memory") || detail.contains("memory growth failure") {
        return PluginError::Memory {
            plugin,
            limit_mib: limits.memory_mib,
        };
    }
    PluginError::Trap { plugin, detail }
}

/// Creates or truncates `path` with mode 0600 and writes `bytes` atomically (via a rename).
pub fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

/// Makes `dir` 0700.
pub fn set_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}
