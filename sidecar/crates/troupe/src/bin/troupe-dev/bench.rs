//! `troupe-dev bench`: the benchmarks' subcommands, each dispatched to its module (the shared
//! scaffolding is `harness`).

use clap::Subcommand;

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Durable sends, delivery latency, start-up time and memory of the daemon.
    Messaging(crate::bench_messaging::MessagingArgs),
    /// A party of many roles and members (trivial real processes): scheduling overhead.
    Parties(crate::bench_parties::PartiesArgs),
    /// The approval round trip through a real `troupe lsp`, excluding the human.
    Approvals(crate::bench_approvals::ApprovalArgs),
    /// What admitting a call costs: the policy check per call, against a round trip.
    Authority(crate::bench_authority::AuthorityArgs),
    /// MCP tool call round trips over stdio (`troupe mcp`).
    Mcp(crate::bench_agents::McpArgs),
    /// ACP member spawn → first update (the scripted agent, or any ACP command).
    Acp(crate::bench_agents::AcpArgs),
    /// `troupe acp` for ACP editors: prompt → first update, and the permission round trip.
    AcpDoor(crate::bench_acp_door::AcpDoorArgs),
    /// Remote workers over NATS: dispatch latency and the calls per second of 8 remote members.
    Remote(crate::bench_remote::RemoteArgs),
    /// The pattern layer's overhead per hop: a handoff chain and an advisor fan-out.
    Patterns(crate::bench_patterns::PatternArgs),
    /// The conflict radar's cost: N members × M changed files on a real repository.
    Radar(crate::bench_radar::RadarArgs),
    /// `troupe ui` in a real terminal: status change → screen, beside a bare subscriber; idle CPU.
    Ui(crate::bench_ui::UiArgs),
    /// The forge: a failing check → its owner's fix pushed to the same pull request, requests
    /// to GitHub per party and per hour of watching (against the tests' fake GitHub).
    Forge(crate::bench_forge::ForgeArgs),
    /// A store that does not grow forever: size and send rate after a million messages and
    /// after `gc`.
    Gc(crate::bench_gc::GcArgs),
    /// kill -9 soaks: keyed sends (nothing acknowledged lost or doubled) and parties (no rerun,
    /// no double spawn, no orphan process).
    #[command(subcommand)]
    Soak(crate::bench_soak::SoakCommand),
}

pub async fn run(cmd: BenchCommand, json: bool) -> anyhow::Result<()> {
    match cmd {
        BenchCommand::Messaging(args) => crate::bench_messaging::run(args, json).await,
        BenchCommand::Parties(args) => crate::bench_parties::run(args, json).await,
        BenchCommand::Approvals(args) => crate::bench_approvals::run(args, json).await,
        BenchCommand::Authority(args) => crate::bench_authority::run(args, json).await,
        BenchCommand::Mcp(args) => crate::bench_agents::mcp(args, json).await,
        BenchCommand::Acp(args) => crate::bench_agents::acp(args, json).await,
        BenchCommand::AcpDoor(args) => crate::bench_acp_door::run(args, json).await,
        BenchCommand::Remote(args) => crate::bench_remote::run(args, json).await,
        BenchCommand::Soak(cmd) => crate::bench_soak::run(cmd, json).await,
        BenchCommand::Patterns(args) => crate::bench_patterns::run(args, json).await,
        BenchCommand::Radar(args) => crate::bench_radar::run(args, json).await,
        BenchCommand::Ui(args) => crate::bench_ui::run(args, json).await,
        BenchCommand::Gc(args) => crate::bench_gc::run(args, json).await,
        BenchCommand::Forge(args) => crate::bench_forge::run(args, json).await,
    }
}
