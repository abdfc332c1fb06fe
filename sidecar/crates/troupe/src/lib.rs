//! Troupe's front: the doors that serve the daemon's core (`doors`: JSON-RPC, LSP, MCP), the
//! daemon's process (`serve`), the command line (`cli`) and the client it and the stdio doors use
//! (`client`), and the demo. The daemon's brain is `troupe_core`; the contract every side shares is
//! `troupe_api`. The binary (`main.rs`) is a thin clap front over this library.

pub mod auth;
pub mod away;
pub mod cli;
pub mod client;
pub mod demo;
pub mod demo_member;
pub mod doors;
pub mod init;
pub mod remote;
pub mod serve;
pub mod socket;
pub mod team;
pub mod ui;

/// Exit status of `troupe serve` when another daemon already holds the data dir.
pub const EXIT_ALREADY_RUNNING: i32 = 3;
