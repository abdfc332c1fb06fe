//! The state every operation handler sees: the store, the hub, the orchestrator's handle, the
//! plugins and the daemon's configuration. Start-up and shutdown live in `boot.rs`; the doors
//! that serve it live in the `troupe` crate.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::watch;
use troupe_api::layout::Layout;
use troupe_store::Store;

use crate::hub::Hub;

/// Default limit on one message's content.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 256 * 1024;

/// How to run the daemon.
#[derive(Debug, Clone)]
pub struct Config {
    pub layout: Layout,
    /// Where the WebSocket listens; loopback unless `allow_non_loopback`.
    pub ws_addr: SocketAddr,
    pub allow_non_loopback: bool,
    pub max_message_bytes: usize,
}

/// The state every operation handler sees.
pub struct Daemon {
    pub store: Store,
    pub hub: Arc<Hub>,
    pub orchestrator: crate::orchestrator::Orchestrator,
    pub plugins: Arc<crate::plugins::Plugins>,
    /// The conflict radar over running parties' member branches.
    pub radar: Arc<crate::radar::Radar>,
    pub config: Config,
    pub layout: Layout,
    /// Signs and checks runs' credentials (`crate::authority`).
    pub run_key: crate::authority::RunKey,
    /// The forge's client and the pull requests' watcher's wake-up (`crate::forge`).
    pub forges: Arc<crate::forge::Forges>,
    /// What members run in (`crate::sandbox`).
    pub sandbox: crate::sandbox::Sandbox,
    pub ws_addr: SocketAddr,
    pub started: Instant,
    pub(crate) shutdown: watch::Sender<bool>,
    /// The `daemon_started` event's write, awaited before `daemon_stopped` is written.
    pub(crate) started_event:
        Mutex<Option<tokio::task::JoinHandle<Result<i64, troupe_store::StoreError>>>>,
    /// The pools of remote workers (`troupe serve --nats`), installed once at start.
    pub pools: std::sync::OnceLock<Arc<dyn crate::runners::remote::Pools>>,
    /// The runs the person holds (`pause_party`): an executor waits at its next tool call
    /// while its run is here.
    pub held: watch::Sender<std::collections::HashSet<String>>,
    /// The lines to runs that keep an agent session (`prompt_agent`), by run id.
    pub lines: std::sync::Mutex<
        std::collections::HashMap<String, tokio::sync::mpsc::Sender<crate::runners::PersonPrompt>>,
    >,
    /// The roles that pick among their attempts, by party, for the last parties asked about
    /// (`ops::landing`): a launch snapshot never changes, so each is read once.
    pub(crate) pick_roles: Mutex<std::collections::HashMap<String, Arc<Vec<String>>>>,
}

impl crate::collab::Ctx {
    /// What the collaboration, landing and radar code need of the daemon.
    pub fn of(d: &Daemon) -> Self {
        Self {
            store: d.store.clone(),
            hub: d.hub.clone(),
            layout: d.layout.clone(),
            orchestrator: d.orchestrator.clone(),
            sandbox: d.sandbox.clone(),
            forges: d.forges.clone(),
        }
    }
}

impl Daemon {
    /// Asks the daemon to stop once the current requests are answered.
    pub fn request_shutdown(&self) {
        self.shutdown.send_replace(true);
    }

    /// Changes to `true` when something asked the daemon to stop.
    pub fn shutdown_requested(&self) -> watch::Receiver<bool> {
        self.shutdown.subscribe()
    }
}

/// Another daemon already holds this data dir.
#[derive(Debug, thiserror::Error)]
#[error("a troupe daemon is already running for {data_dir} (pid {pid})")]
pub struct AlreadyRunning {
    pub data_dir: String,
    pub pid: String,
}
