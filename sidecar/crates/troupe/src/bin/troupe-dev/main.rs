//! `troupe-dev`: the developers' tool binary, kept out of the product: the benchmarks
//! (`troupe-dev bench …`) and the scripted ACP agent the tests and benchmarks run
//! (`troupe-dev scripted-acp-agent`). It drives the `troupe` binary next to it.

mod bench;
mod bench_acp_door;
mod bench_agents;
mod bench_approvals;
mod bench_authority;
mod bench_parties;
mod bench_patterns;
mod bench_radar;
mod bench_remote;
mod bench_soak;
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
