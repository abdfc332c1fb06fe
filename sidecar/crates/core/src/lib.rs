//! The troupe daemon's core: the operation handlers (`ops`, bound by name in `registry`), the
//! orchestrator that drives parties and supervises runs, the runners (`runners`: process, wasm
//! executor, ACP agent), the hub that wakes waiters, the plugins, and start-up and shutdown
//! (`boot`). It knows no wire format: the doors (JSON-RPC, LSP, MCP, the CLI) live in the `troupe`
//! crate and reach it through `registry::handler` and `daemon::Daemon`.

pub mod acp;
pub mod authority;
pub mod boot;
pub mod budgets;
pub mod builtin;
pub mod collab;
pub mod context;
pub mod daemon;
mod datadir;
pub mod delivery;
pub mod egress;
pub mod feeds;
pub mod forge;
pub mod forge_events;
pub mod guardrails;
#[cfg(test)]
mod harness;
pub mod hub;
pub mod inbox;
pub mod landing;
pub mod ops;
pub mod orchestrator;
pub mod party;
pub mod playbooks;
pub mod plugins;
pub mod procs;
pub mod project;
pub mod project_config;
pub mod pulls;
pub mod radar;
pub mod registry;
pub mod retention;
pub mod rounds;
pub mod run_logs;
pub mod runners;
pub mod sandbox;
pub mod schedules;
pub mod shell;
pub mod spawn;
pub mod system;

pub use authority::Caller;
pub use daemon::{Config, Daemon};
