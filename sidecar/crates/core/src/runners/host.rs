//! What a runner may use of the daemon, as four narrow capabilities. `Calls`: operations called
//! as the run's own member through the registry, admitted by each operation's declared access
//! as at every door (plus the `land` runner's merge queue). `Asks`: what a person or a step's
//! policy answers. `Turns`: the rounds and the person's prompts of an agent session. `Means`:
//! the store, the plugins, the remote pools and budget checks. `RunnerHost` is their sum, which
//! the daemon implements; a runner's helpers take the one they use.

use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde::Serialize;
use serde::de::DeserializeOwned;
use troupe_api::ApiError;
use troupe_api::types::{LandPartyParams, LandResult, PermissionResult, RequestPermissionParams};
use troupe_store::{AgentRun, Store};

use super::PersonPrompt;

/// Operations a run calls.
pub trait Calls: Send + Sync + 'static {
    /// Calls operation `op` as `caller` through the registry (admitted by its access, as at
    /// every door).
    fn call_as(
        self: Arc<Self>,
        caller: crate::authority::Caller,
        op: String,
        params: serde_json::Value,
    ) -> BoxFuture<'static, Result<serde_json::Value, ApiError>>;
    /// `land_party` for the `land` runner's run `run_id` (its test processes carry the id),
    /// once every best-of-N role has its pick (waiting up to `wait_for_picks`). Not through
    /// `call_as`: landing is the person's, and the `land` run carries out the person's launch.
    fn land_party(
        &self,
        p: LandPartyParams,
        wait_for_picks: Duration,
        run_id: &str,
    ) -> BoxFuture<'_, Result<LandResult, ApiError>>;
}

/// What a person, a rule or a step's policy answers.
pub trait Asks: Send + Sync + 'static {
    /// Asks a person (or a rule) and waits for the decision.
    fn request_permission_decided(
        &self,
        p: RequestPermissionParams,
    ) -> BoxFuture<'_, Result<PermissionResult, ApiError>>;
    /// Takes a pending question out of the inbox: its asker no longer waits (it expires).
    fn withdraw_question(&self, question_id: String) -> BoxFuture<'_, ()>;
    /// What the tool policy of the step a session works on says of a tool (seed 004).
    fn tool_verdict(&self, session_id: &str, tool: &str) -> troupe_engine::collab::ToolVerdict;
}

/// The turns of an agent session: holds, the person's prompts, the next round.
pub trait Turns: Send + Sync + 'static {
    /// The runs the person holds (`pause_party`).
    fn held(&self) -> tokio::sync::watch::Receiver<std::collections::HashSet<String>>;
    /// Opens the line the person's prompts to run `run_id` come on (`prompt_agent`), for as long
    /// as the run keeps an agent session; a second open replaces the first.
    fn open_line(&self, run_id: &str) -> tokio::sync::mpsc::Receiver<PersonPrompt>;
    /// Closes it: `prompt_agent` says the run keeps no session.
    fn close_line(&self, run_id: &str);
    /// What to say to a run whose turn ended without `complete`, in the same agent session: a
    /// new round (waited for while the run still has a part to play), or `None` when its
    /// turn's end is its end.
    fn next_round(self: Arc<Self>, run: AgentRun) -> BoxFuture<'static, Option<String>>;
}

/// What a runner works with: the store (its run's records), the plugins, the remote pools.
pub trait Means: Send + Sync + 'static {
    fn store(&self) -> &Store;
    fn plugins(&self) -> &Arc<crate::plugins::Plugins>;
    /// The pools of remote workers, when the daemon has some (`troupe serve --nats`).
    fn pools(&self) -> Option<Arc<dyn crate::runners::remote::Pools>>;
    /// A run's usage was recorded: the daemon checks the budgets of the run and of the runs
    /// above it, and stops a run that went over.
    fn usage_recorded(&self, run_id: &str);
}

/// Everything a runner may use of the daemon.
pub trait RunnerHost: Calls + Asks + Turns + Means {}

impl<T: Calls + Asks + Turns + Means> RunnerHost for T {}

/// A runner's handle on the daemon: weak, so a run never keeps a stopped daemon alive.
pub type Host = Weak<dyn RunnerHost>;

/// Calls operation `op` as run `run`'s own member, with typed params and result: what a member's
/// tool or end of turn does (`complete`, `send_message`, `ask_person`, …).
pub async fn call<P, R>(
    host: &Arc<dyn RunnerHost>,
    run: &AgentRun,
    op: &str,
    params: P,
) -> Result<R, ApiError>
where
    P: Serialize,
    R: DeserializeOwned,
{
    let params = serde_json::to_value(params)
        .map_err(|e| ApiError::Internal(format!("the params of {op} do not serialize: {e}")))?;
    let caller = crate::authority::Caller::member_of(run, false);
    let value = Arc::clone(host)
        .call_as(caller, op.to_string(), params)
        .await?;
    serde_json::from_value(value)
        .map_err(|e| ApiError::Internal(format!("the result of {op} does not read back: {e}")))
}
