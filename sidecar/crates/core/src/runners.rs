//! The runners: how an agent run executes, each behind the one `Runner` trait. `process` starts a
//! command in its own process group, `wasm` runs an executor plugin's model loop inside the
//! daemon, `acp` drives an agent CLI over the Agent Client Protocol, `land` is a party's merge
//! queue, `remote` a process member on a worker of its pool (elsewhere) and `attached` a session
//! already there. The orchestrator picks one per run (`runner_for`), records where the run lives, lets it
//! go, and hears back an `Exit` through the `RunTable`. A runner reaches the daemon only through
//! `RunnerHost`, four narrow capabilities (`host.rs`): operations called as the run's own
//! member, the person's answers, the turns of an agent session, and the means (the store, the
//! plugins, the pools); it knows nothing of parties.

pub mod acp;
pub mod attached;
pub mod host;
pub mod land;
pub mod process;
pub mod remote;
pub mod wasm;

use std::path::PathBuf;
use std::time::Duration;

use troupe_engine::AgentDefinition;
use troupe_store::AgentRun;

pub use host::{Asks, Calls, Host, Means, RunnerHost, Turns, call};
pub use process::{Exit, RunTable};

/// The person's own prompt to a running agent (`prompt_agent`): the agent's turn under way is
/// cancelled, and this goes into the same agent session as the next one.
pub struct PersonPrompt {
    pub text: String,
    /// The agent's answer: that turn's text and how it ended.
    pub answer: tokio::sync::oneshot::Sender<TurnAnswer>,
}

/// What a run's agent said in one turn.
#[derive(Debug, Clone)]
pub struct TurnAnswer {
    pub text: String,
    pub stop_reason: String,
}

/// Everything a runner needs to start a run.
pub struct Launch {
    pub run: AgentRun,
    pub agent: AgentDefinition,
    /// Where it works (its worktree, clone or the project).
    pub workdir: PathBuf,
    /// Its environment: how to call back (`TROUPE_SESSION_ID`, `TROUPE_RUN_ID`, …).
    pub env: Vec<(String, String)>,
    /// The log file its output goes to (`runs/<log>.log`).
    pub log: String,
    pub timeout: Option<Duration>,
    /// The daemon, for runners that call operations (none while the daemon is still starting).
    pub host: Option<Host>,
    /// What wraps the processes it starts (`crate::sandbox`).
    pub sandbox: crate::sandbox::Sandbox,
}

/// Where a started run lives, and how to let it proceed once that is recorded.
pub struct Placed {
    /// Its leader process (the daemon's own pid for an in-daemon run).
    pub pid: u32,
    pub start_time: Option<i64>,
    /// Its own process group, ended with the run (none for an in-daemon run).
    pub pgid: Option<u32>,
    /// Lets the run proceed; called once the run's start is recorded, so nothing the run does
    /// (a `complete`) can be recorded before it.
    pub go: Box<dyn FnOnce(&RunTable) + Send>,
}

impl Placed {
    /// A run that lives in the daemon itself (its pid and start time are the daemon's; it has
    /// no process group of its own).
    pub fn in_daemon(go: impl FnOnce(&RunTable) + Send + 'static) -> Placed {
        let pid = std::process::id();
        Placed {
            pid,
            start_time: crate::runners::process::process_start_time(pid),
            pgid: None,
            go: Box::new(go),
        }
    }
}

/// A way to run an agent.
pub trait Runner: Send + Sync {
    /// Which runner this is.
    fn kind(&self) -> Kind;
    /// Starts the run's process (if it has one) under `table`, which will hear its exit.
    fn place(&self, table: &RunTable, launch: Launch) -> Result<Placed, String>;
}

/// The runner an agent definition asks for.
pub fn runner_for(agent: &AgentDefinition) -> &'static dyn Runner {
    match kind_of(agent) {
        Kind::Attached => &attached::AttachedRunner,
        Kind::Land => &land::LandRunner,
        Kind::Wasm => &wasm::WasmRunner,
        Kind::Acp => &acp::AcpRunner,
        Kind::Remote => &remote::RemoteRunner,
        Kind::Process => &process::ProcessRunner,
    }
}

/// Which runner runs an agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// An executor plugin (`runner: "plugin:<name>"`), in the daemon.
    Wasm,
    /// An agent CLI over ACP (`runner: "acp:<agent>"`).
    Acp,
    /// A command in its own process group.
    Process,
    /// A session that was already there (a party's self-led leader): nothing to start.
    Attached,
    /// The party's merge queue, in the daemon (`runner: "land"`).
    Land,
    /// A process member on a remote worker of its `pool`.
    Remote,
}

/// The runner of a session that leads the party it launched (`launch_party {mode: "self"}`).
pub const ATTACHED: &str = "attached";

/// Whether a run's definition (as stored) is an attached session's.
pub fn is_attached(definition: &serde_json::Value) -> bool {
    definition.get("runner").and_then(serde_json::Value::as_str) == Some(ATTACHED)
}

/// The runner an agent definition asks for.
pub fn kind_of(agent: &AgentDefinition) -> Kind {
    if agent.runner == ATTACHED {
        Kind::Attached
    } else if agent.runner == land::LAND {
        Kind::Land
    } else if wasm::plugin_of(agent).is_some() {
        Kind::Wasm
    } else if acp::agent_of(agent).is_some() {
        Kind::Acp
    } else if agent.pool.is_some() {
        Kind::Remote
    } else {
        Kind::Process
    }
}
