//! Troupe: the daemon, its operation registry and doors, and the client side the CLI uses.
//! The binary (`main.rs`) is a thin clap front over this library.

pub mod acp;
pub mod api;
pub mod bench;
pub mod bench_agents;
pub mod bench_approvals;
pub mod bench_parties;
pub mod bench_soak;
pub mod builtin;
pub mod cli;
pub mod client;
pub mod daemon;
pub mod demo;
pub mod demo_member;
pub mod executor;
pub mod hub;
pub mod init;
pub mod lsp;
pub mod lsp_client;
pub mod mcp;
pub mod ops;
pub mod orchestrator;
pub mod paths;
pub mod plugins;
pub mod procs;
pub mod project;
pub mod runner;
pub mod scripted_agent;
pub mod system;

/// Exit status of `troupe serve` when another daemon already holds the data dir.
pub const EXIT_ALREADY_RUNNING: i32 = 3;
