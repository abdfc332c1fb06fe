//! The runners: how an agent run executes. `process` starts a command in its own process group,
//! `wasm` runs an executor plugin's model loop inside the daemon, `acp` drives an agent CLI over
//! the Agent Client Protocol. The orchestrator picks one per run (`kind_of`) and hears back an
//! `Exit`. A runner reaches the daemon only through `RunnerHost`: the store, the plugins and the
//! operations an agent's tools call; it knows nothing of parties.

pub mod acp;
pub mod process;
pub mod wasm;

use std::sync::{Arc, Weak};

use futures_util::future::BoxFuture;
use troupe_api::ApiError;
use troupe_api::types::*;
use troupe_store::Store;

pub use process::Exit;

/// What a runner may use of the daemon.
pub trait RunnerHost: Send + Sync + 'static {
    fn store(&self) -> &Store;
    fn plugins(&self) -> &Arc<crate::plugins::Plugins>;
    /// `complete`: ends the run with its result.
    fn complete(&self, p: CompleteParams) -> BoxFuture<'_, Result<CompleteResult, ApiError>>;
    fn send_message(&self, p: SendMessageParams) -> BoxFuture<'_, Result<SentMessage, ApiError>>;
    fn send_to_parent(&self, p: SendToParentParams)
    -> BoxFuture<'_, Result<SentMessage, ApiError>>;
    fn poll_messages(
        &self,
        p: PollMessagesParams,
    ) -> BoxFuture<'_, Result<PollMessagesResult, ApiError>>;
    /// Asks a person (or a rule) and waits for the decision.
    fn request_permission_decided(
        &self,
        p: RequestPermissionParams,
    ) -> BoxFuture<'_, Result<PermissionResult, ApiError>>;
}

/// A runner's handle on the daemon: weak, so a run never keeps a stopped daemon alive.
pub type Host = Weak<dyn RunnerHost>;

/// Which runner runs an agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// An executor plugin (`runner: "plugin:<name>"`), in the daemon.
    Wasm,
    /// An agent CLI over ACP (`runner: "acp:<agent>"`).
    Acp,
    /// A command in its own process group.
    Process,
}

/// The runner an agent definition asks for.
pub fn kind_of(agent: &troupe_engine::AgentDefinition) -> Kind {
    if wasm::plugin_of(agent).is_some() {
        Kind::Wasm
    } else if acp::agent_of(agent).is_some() {
        Kind::Acp
    } else {
        Kind::Process
    }
}
