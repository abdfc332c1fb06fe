//! `troupe-dev`: the developers' tool binary, kept out of the product: the benchmarks
//! (`troupe-dev bench …`) and the scripted ACP agent the tests and benchmarks run
//! (`troupe-dev scripted-acp-agent`). It drives the `troupe` binary next to it. Built with the
//! `dev` feature, which the integration tests need too; `cargo install … --bin troupe` and
//! `scripts/package` leave it out.

// A developer tool: it starts the daemons and agents it measures as it needs them.
#![allow(clippy::disallowed_methods)]

mod bench;
mod bench_acp_door;
mod bench_agents;
mod bench_approvals;
mod bench_authority;
mod bench_forge;
mod bench_gc;
mod bench_messaging;
mod bench_parties;
mod bench_patterns;
mod bench_radar;
mod bench_remote;
mod bench_soak;
mod bench_ui;
mod harness;
mod lsp_client;
mod scripted_agent;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "troupe-dev", about = "Troupe's benchmarks and test agents")]
struct Cli {
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Measure the daemon.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// A scripted Agent Client Protocol agent on stdio (tests, benchmarks).
    ScriptedAcpAgent {
        /// write, crash, crash-once, hang, hang-hard, wait, malformed, flood (default:
        /// $TROUPE_ACP_SCRIPT, else write).
        #[arg(long)]
        script: Option<String>,
    },
    /// The size of each role's playbook as a member's prompt starts with it (characters and
    /// estimated tokens, at ~4 characters a token), for a party of a leader and two others.
    Playbooks,
}

/// The `troupe` binary this tool measures: the one next to it (`TROUPE_BIN` overrides).
pub fn troupe_exe() -> anyhow::Result<PathBuf> {
    if let Some(bin) = std::env::var_os("TROUPE_BIN") {
        return Ok(PathBuf::from(bin));
    }
    let me = std::env::current_exe().context("cannot find troupe-dev's own path")?;
    let dir = me.parent().context("troupe-dev has no directory")?;
    Ok(dir.join("troupe"))
}

/// `troupe-dev playbooks`: each built-in role playbook's prompt head, measured.
fn playbook_sizes(json: bool) -> anyhow::Result<()> {
    use troupe_core::playbooks::{Seat, Tools, compose};
    let nowhere = std::env::temp_dir().join("troupe-dev-no-project");
    let seat = |role: &'static str| Seat {
        party_id: "01a2140b-3325-73e5-88bb-5654d748b21a",
        role,
        index: 0,
        roles: vec![
            ("dev".into(), Some("developer".into())),
            ("lead".into(), Some("leader".into())),
            ("reviewer".into(), Some("reviewer".into())),
        ],
        more_roles: 0,
    };
    let mut rows = Vec::new();
    for (role, playbook) in [
        ("lead", "leader"),
        ("dev", "developer"),
        ("reviewer", "reviewer"),
    ] {
        let head = compose(&nowhere, &seat(role), Some(playbook), Tools::Mcp)
            .map_err(anyhow::Error::msg)?;
        let chars = head.chars().count();
        rows.push(serde_json::json!({
            "playbook": playbook, "chars": chars, "est_tokens": chars.div_ceil(4) }));
    }
    if json {
        println!("{}", serde_json::Value::Array(rows));
    } else {
        println!("{:<10} {:>6} {:>7}", "playbook", "chars", "~tokens");
        for r in rows {
            println!(
                "{:<10} {:>6} {:>7}",
                r["playbook"].as_str().unwrap_or_default(),
                r["chars"],
                r["est_tokens"]
            );
        }
        println!(
            "(the common playbook and the MCP tools line included; the party's state is added at each turn)"
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_env("TROUPE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("troupe-dev: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Bench(cmd) => bench::run(cmd, cli.json).await,
            Command::ScriptedAcpAgent { script } => scripted_agent::run(script).await,
            Command::Playbooks => playbook_sizes(cli.json),
        }
    });
    runtime.shutdown_timeout(std::time::Duration::from_millis(250));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("troupe-dev: {e:#}");
            ExitCode::FAILURE
        }
    }
}
