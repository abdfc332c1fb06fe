//! The one integration-test binary: every test drives the real `troupe` binary and a real
//! daemon (its own process) on a temporary data dir, over its real socket and WebSocket.

// Tests start whatever processes they drive as they need them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

mod scenario;
mod support;
// The LSP client the approvals benchmark uses too (troupe-dev), shared by path.
#[path = "../../sidecar/crates/troupe/src/bin/troupe-dev/lsp_client.rs"]
mod lsp_client;

mod acp;
mod acp_door;
mod approvals;
mod architecture;
mod auth;
mod authority;
mod authority_doors;
mod bad_input;
mod collab;
mod daemon;
mod dashboard;
mod delegation;
mod durability;
mod editors;
mod fake_github;
mod fake_github_selftest;
mod forge;
mod forge_contract;
mod fuzz;
mod hooks;
mod inbox;
mod landing;
mod lsp_conflicts;
mod mcp;
mod messaging;
mod mock_llm;
mod notifications;
mod package;
mod parties;
mod patterns;
mod playbooks;
mod plugins;
mod real_clis;
mod real_team;
mod reliability;
mod remote;
mod retention;
mod rounds;
mod run_logs;
mod sandbox;
mod schedules;
mod snapshots;
mod team_brain;
mod terminal;
mod tidy;
