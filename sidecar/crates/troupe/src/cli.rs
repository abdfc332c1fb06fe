//! The command line: clap definitions, the runtime set-up, and the friendly subcommands that sit
//! on top of `troupe call`. Output goes to stdout (JSON with `--json`), logs to stderr. It is the
//! only place that prints for people.

use std::io::Read;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::{Args, Parser, Subcommand};
use serde_json::{Value, json};

use crate::client::short;
use crate::client::{self, Client};
use troupe_api::layout::Layout;
use troupe_api::types::{Message, Session};
use troupe_core::daemon::{AlreadyRunning, Config, DEFAULT_MAX_MESSAGE_BYTES};

/// `println!` for the command's output (see `print_line`).
macro_rules! out {
    ($($arg:tt)*) => {
        print_line(format_args!($($arg)*))
    };
}

mod agent;
mod collab;
mod doctor;
mod gc;
mod land;
mod review;
mod schedule;

/// Ends the command with this exit code, having said what it had to say (not an error message).
#[derive(Debug)]
pub struct QuietExit(pub u8);

impl std::fmt::Display for QuietExit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "exit code {}", self.0)
    }
}

impl std::error::Error for QuietExit {}

/// Run a troupe of AI coding agents as a team.
#[derive(Debug, Parser)]
#[command(
    name = "troupe",
    version,
    about = "Run a troupe of AI coding agents as a team, from the editor you already use."
)]
pub struct Cli {
    /// Data directory (default: $TROUPE_HOME, else $XDG_DATA_HOME/troupe).
    #[arg(long, global = true, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Print results as JSON.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the daemon in the foreground.
    Serve(ServeArgs),
    /// Stop the running daemon and every member's processes.
    Stop {
        /// Leave the members the next daemon can take back (process members) running: it
        /// adopts them when it starts.
        #[arg(long)]
        leave_running: bool,
    },
    /// Show whether the daemon runs, and its state.
    Status,
    /// Apply the retention rules now: old timeline events, read messages, ended runs and their
    /// logs, ended sessions, and checkouts no party needs (never unmerged or uncommitted work);
    /// then shrink the database (VACUUM). Says what it removed, and what it kept and why.
    Gc(gc::GcArgs),
    /// Call any operation: `troupe call send_message '{"from_session_id": …}'`.
    Call {
        operation: String,
        /// Params as a JSON object (`-` reads standard input).
        #[arg(default_value = "{}")]
        params: String,
    },
    /// Register, list and end sessions.
    #[command(subcommand)]
    Session(SessionCommand),
    /// Send, poll and watch messages.
    #[command(subcommand)]
    Msg(MsgCommand),
    /// Launch, follow, signal and cancel parties.
    #[command(subcommand)]
    Party(PartyCommand),
    /// Answer the agents' permission requests.
    #[command(subcommand)]
    Approvals(ApprovalsCommand),
    /// Start, list and follow agents; read a result or a log; take one over; cancel one.
    #[command(subcommand)]
    Agent(agent::AgentCommand),
    /// Everything waiting for you (approvals, questions, paused roles, decisions…), and answers.
    #[command(subcommand)]
    Inbox(collab::InboxCommand),
    /// The schedules that start parties (`[schedules.NAME]` of .troupe/config.toml): list them,
    /// pause, resume, run one now.
    #[command(subcommand)]
    Schedule(schedule::ScheduleCommand),
    /// A party's plan: show it, review the draft, commit it.
    #[command(subcommand)]
    Plan(collab::PlanCommand),
    /// A party's decisions, and your vote.
    #[command(subcommand)]
    Decision(collab::DecisionCommand),
    /// Land a party's members' branches on your branch through the merge queue, with a progress
    /// bar (integrate → test → move the target); exit 0 if it landed.
    Land(land::LandArgs),
    /// A member's work: its diff against its fork point, through your pager.
    Review(review::ReviewArgs),
    /// The conflict radar: members' changes that would conflict, file and lines.
    Conflicts {
        /// One party (default: this directory's project's running parties).
        party_id: Option<String>,
    },
    /// The members' checkouts: branch, ahead/behind, dirty.
    Worktrees {
        /// One party's (default: every party's still on disk).
        party_id: Option<String>,
    },
    /// A live dashboard in this terminal: parties, the inbox (answer with the keys), a member's
    /// output and diff, the timeline. `?` lists the keys.
    Ui {
        /// Every project's parties and inbox (default: this directory's project's).
        #[arg(long)]
        all: bool,
    },
    /// Install, inspect, grant and remove WebAssembly plugins.
    #[command(subcommand)]
    Plugin(PluginCommand),
    /// Describe the API.
    #[command(subcommand)]
    Api(ApiCommand),
    /// Start a throwaway daemon and show sessions messaging each other.
    Demo,
    /// Serve the Language Server Protocol on stdin/stdout (for editors).
    Lsp,
    /// Serve MCP on stdin/stdout: Troupe's tools for an agent CLI (session from
    /// TROUPE_SESSION_ID).
    Mcp,
    /// Serve the Agent Client Protocol on stdin/stdout: Troupe as an agent for ACP editors
    /// (Zed, JetBrains, Neovim, Emacs).
    Acp,
    /// Run a pool's members on this machine for a hub elsewhere (`troupe serve --nats`).
    Worker(WorkerArgs),
    /// A worker's reaper: ends its runs' process groups when the worker is gone (its stdin ends).
    #[command(hide = true)]
    WorkerReaper,
    /// Set up this project's team: finds the agent CLIs installed (Claude Code, Codex, Gemini
    /// CLI), the API keys set and the project's test command, and writes `.troupe/config.toml`
    /// with a default party of them (saying what it chose and why). With an agent CLI's name:
    /// that CLI's MCP config in this project (and Claude Code's hooks).
    Init {
        #[arg(value_parser = ["claude", "codex", "gemini"])]
        cli: Option<String>,
    },
    /// Print a completion script for a shell: `troupe completions bash > ~/.local/share/bash-completion/completions/troupe`.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff): `troupe man > troupe.1`.
    Man,
    /// Check what Troupe needs on this machine (git, agent CLIs, the sandbox, editors, NATS, the
    /// daemon) and say how to fix each miss; exit 1 if git or every agent CLI is missing.
    Doctor,
    /// Handle a Claude Code hook: reads its JSON on stdin, prints the answer on stdout.
    Hook {
        /// SessionStart, PreToolUse, PostToolUse, UserPromptSubmit, Stop, SubagentStop,
        /// Notification, SessionEnd (the payload's hook_event_name wins when present).
        event: String,
    },
    /// The process the built-in demo agents run (inside a party).
    #[command(hide = true)]
    DemoMember,
    /// What the daemon starts a member's command with inside its box: Landlock's rules, or the
    /// egress relay of a bubblewrap box (`troupe_core::sandbox::inside`).
    #[command(hide = true)]
    BoxExec {
        /// The box, as JSON.
        #[arg(long)]
        spec: String,
        /// The command.
        #[arg(last = true, required = true)]
        argv: Vec<String>,
    },
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address of the JSON-RPC WebSocket (port 0 picks a free one).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub ws_addr: SocketAddr,
    /// Allow a WebSocket address that is not loopback.
    #[arg(long)]
    pub allow_non_loopback: bool,
    /// Largest message content accepted, in bytes.
    #[arg(long, env = "TROUPE_MAX_MESSAGE_BYTES", default_value_t = DEFAULT_MAX_MESSAGE_BYTES)]
    pub max_message_bytes: usize,
    /// Be the hub of remote workers through this NATS server (JetStream), e.g.
    /// nats://127.0.0.1:4222: agents with a `pool` run on `troupe worker`s elsewhere (else `nats`
    /// in `<data dir>/config.toml`).
    #[arg(long, env = "TROUPE_NATS")]
    pub nats: Option<String>,
}

#[derive(Debug, Args)]
pub struct WorkerArgs {
    /// The hub's NATS server (JetStream), e.g. nats://hub.example:4222 (else `nats` in
    /// `<data dir>/config.toml`).
    #[arg(long, env = "TROUPE_NATS")]
    pub nats: Option<String>,
    /// The pool whose runs this worker takes (agents name it in `pool`).
    #[arg(long)]
    pub pool: String,
    /// Its name on the timeline and in its NATS subjects (letters, digits, '-' and '_';
    /// default: host name and pid).
    #[arg(long)]
    pub name: Option<String>,
    /// Runs at once.
    #[arg(long, default_value_t = 4)]
    pub slots: usize,
}

#[derive(Debug, Subcommand)]
pub enum SessionCommand {
    /// Register a session for a directory's project.
    Register {
        #[arg(long, default_value = "human")]
        cli: String,
        #[arg(long)]
        cwd: Option<PathBuf>,
        #[arg(long)]
        external_id: Option<String>,
        #[arg(long)]
        parent: Option<String>,
    },
    /// List sessions of this directory's project (all projects with --all).
    List {
        #[arg(long)]
        all: bool,
        /// Include ended sessions.
        #[arg(long)]
        ended: bool,
    },
    /// End a session.
    End { session_id: String },
}

#[derive(Debug, Subcommand)]
pub enum MsgCommand {
    /// Send a message to a session of the same project.
    Send {
        /// Sender (default: $TROUPE_SESSION_ID).
        #[arg(long)]
        from: Option<String>,
        #[arg(long)]
        to: String,
        #[arg(long, default_value = "normal")]
        priority: String,
        /// Idempotency key: a retry with the same key is stored once.
        #[arg(long)]
        key: Option<String>,
        content: String,
    },
    /// Fetch unread messages (marking them read), optionally waiting for one.
    Poll {
        /// Recipient (default: $TROUPE_SESSION_ID).
        session_id: Option<String>,
        #[arg(long, default_value_t = 0)]
        wait_ms: u64,
        /// Messages after this seq instead of unread ones.
        #[arg(long)]
        since: Option<i64>,
        /// Leave the messages unread.
        #[arg(long)]
        keep_unread: bool,
    },
    /// Print each new message for a session as it arrives, until interrupted.
    Watch {
        /// Recipient (default: $TROUPE_SESSION_ID).
        session_id: Option<String>,
        /// Replay messages after this seq first.
        #[arg(long)]
        since: Option<i64>,
        /// Stop after this many messages.
        #[arg(long)]
        count: Option<usize>,
    },
}

#[derive(Debug, Subcommand)]
pub enum PartyCommand {
    /// Launch a party definition in this directory's project (`troupe call
    /// list_party_definitions` lists them; `troupe demo` runs the scripted one in a scratch
    /// repository).
    Launch {
        name: String,
        /// What the party is to do (its members get it as the `task` input).
        #[arg(trailing_var_arg = true)]
        words: Vec<String>,
        /// A task of the project's (`create_task`) the party takes on.
        #[arg(long)]
        task_id: Option<String>,
        /// An issue of the project's forge repository as the task (`OWNER/REPO#N`, `#N` or
        /// its URL): its title, body and comments, marked as untrusted; the work arrives as a
        /// pull request.
        #[arg(long)]
        issue: Option<String>,
    },
    /// Parties of this directory's project.
    List,
    /// One party's roles and members.
    Status { party_id: String },
    /// Tell a role to proceed, retry or abort.
    Signal {
        party_id: String,
        role: String,
        #[arg(value_parser = ["proceed", "retry", "abort"])]
        signal: String,
    },
    /// Stop every member.
    Cancel { party_id: String },
}

#[derive(Debug, Subcommand)]
pub enum ApprovalsCommand {
    /// Pending requests.
    List,
    /// Answer one.
    Decide {
        approval_id: String,
        #[arg(value_parser = ["approve", "deny", "abort", "approve_pattern"])]
        decision: String,
        /// For approve_pattern: a glob over the file path or command.
        #[arg(long)]
        pattern: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum PluginCommand {
    /// Installed plugins, and folders that failed to load.
    List,
    /// Install or upgrade the plugin in a folder (plugin.toml + its component).
    Install { path: PathBuf },
    /// Unload a plugin and delete it.
    Remove { name: String },
    /// One plugin's manifest, grant and hash.
    Info { name: String },
    /// Grant a plugin HTTP origins, a provider key variable or config.
    Grant {
        name: String,
        /// An origin it may reach (repeat): api.openai.com, https://host:port, http://127.0.0.1:8080.
        #[arg(long = "http")]
        http: Vec<String>,
        /// The environment variable (of the daemon) holding the provider key.
        #[arg(long)]
        key_env: Option<String>,
        /// Let granted host names resolve to private addresses.
        #[arg(long)]
        allow_private: bool,
        /// Config as a JSON object (replaces the granted config).
        #[arg(long)]
        config: Option<String>,
    },
    /// Ask a router plugin which agent should take a request.
    Route { router: String, request: String },
}

#[derive(Debug, Subcommand)]
pub enum ApiCommand {
    /// Print the JSON Schema of every operation's params and result.
    Schema,
    /// List the operations.
    List,
}

/// Entry point of the binary.
/// Writes a line of the command's output. A reader that went away (`troupe call … | head`) ends
/// the command quietly, as other command-line tools do; any other failure to write is said on
/// stderr.
fn print_line(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    let written = stdout
        .write_fmt(args)
        .and_then(|()| stdout.write_all(b"\n"))
        .and_then(|()| stdout.flush());
    if let Err(e) = written {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("troupe: cannot write the output: {e}");
        std::process::exit(1);
    }
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::BoxExec { spec, argv } = &cli.command {
        // Before anything else starts a thread: Landlock binds the thread that asks.
        let code = troupe_core::sandbox::inside::main(spec, argv);
        return ExitCode::from(u8::try_from(code.clamp(0, 255)).unwrap_or(1));
    }
    // The dashboard owns the terminal: its warnings would tear the screen.
    if !matches!(cli.command, Command::Ui { .. }) {
        init_tracing(matches!(cli.command, Command::Serve(_)));
    }
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.downcast_ref::<QuietExit>().is_some() => {
            ExitCode::from(e.downcast_ref::<QuietExit>().map_or(1, |q| q.0))
        }
        Err(e) => {
            eprintln!("troupe: {e:#}");
            if e.downcast_ref::<AlreadyRunning>().is_some() {
                ExitCode::from(crate::EXIT_ALREADY_RUNNING as u8)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

fn init_tracing(daemon: bool) {
    // The ACP crate warns about every line an agent gets wrong (with a long handler list):
    // an agent's garbage must not flood the daemon's log.
    let default = if daemon {
        "info,agent_client_protocol=error"
    } else {
        "warn,agent_client_protocol=error"
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("TROUPE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    // Logs never go to stdout: stdout carries results (and, later, stdio protocols).
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let layout = Layout::resolve(cli.data_dir.as_deref())?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    // The door this process's calls come through: the person's, or an agent CLI's.
    match &cli.command {
        Command::Lsp => client::set_door("lsp", false),
        Command::Acp => client::set_door("acp", false),
        Command::Mcp => client::set_door("mcp", true),
        Command::Hook { .. } => client::set_door("hook", true),
        _ => client::set_door("cli", false),
    }
    let result = runtime.block_on(async move {
        match cli.command {
            // On a worker, not on this thread: a connection accepted there starts on the same
            // worker, where this thread would wake a worker (and be woken) for each one.
            Command::Serve(args) => tokio::spawn(crate::serve::serve(
                Config {
                    layout,
                    ws_addr: args.ws_addr,
                    allow_non_loopback: args.allow_non_loopback,
                    max_message_bytes: args.max_message_bytes,
                },
                args.nats,
            ))
            .await
            .context("the daemon's task failed")?,
            Command::Stop { leave_running } => stop(&layout, leave_running, cli.json).await,
            Command::Status => status(&layout, cli.json).await,
            Command::Gc(args) => gc::run(&layout, args, cli.json).await,
            Command::Call { operation, params } => call(&layout, &operation, &params).await,
            Command::Session(cmd) => session(&layout, cmd, cli.json).await,
            Command::Msg(cmd) => msg(&layout, cmd, cli.json).await,
            Command::Party(cmd) => party(&layout, cmd, cli.json).await,
            Command::Approvals(cmd) => approvals(&layout, cmd, cli.json).await,
            Command::Agent(cmd) => agent::run(&layout, cmd, cli.json).await,
            Command::Inbox(cmd) => collab::inbox(&layout, cmd, cli.json).await,
            Command::Schedule(cmd) => schedule::run(&layout, cmd, cli.json).await,
            Command::Land(args) => land::run(&layout, args, cli.json).await,
            Command::Review(args) => review::run(&layout, args, cli.json).await,
            Command::Plan(cmd) => collab::plan(&layout, cmd, cli.json).await,
            Command::Decision(cmd) => collab::decision(&layout, cmd, cli.json).await,
            Command::Conflicts { party_id } => collab::conflicts(&layout, party_id, cli.json).await,
            Command::Worktrees { party_id } => collab::worktrees(&layout, party_id, cli.json).await,
            Command::Ui { all } => crate::ui::run(&layout, all).await,
            Command::Plugin(cmd) => plugin(&layout, cmd, cli.json).await,
            Command::Api(ApiCommand::Schema) => print_json(&troupe_api::schema_document()),
            Command::Api(ApiCommand::List) => {
                for op in troupe_api::OPERATIONS {
                    out!("{:<24} {}", op.name, op.summary.trim());
                }
                for sub in troupe_api::SUBSCRIPTIONS {
                    out!("{:<24} {}", sub.name, sub.summary);
                }
                Ok(())
            }
            Command::Demo => crate::demo::run().await,
            Command::Lsp => crate::doors::lsp::run(layout).await,
            Command::Acp => crate::doors::acp::run(layout).await,
            Command::Worker(args) => {
                let Some(nats) = crate::remote::nats_url(args.nats, &layout.data_dir)? else {
                    bail!(
                        "a worker needs its hub's NATS: pass --nats, set TROUPE_NATS or put `nats = \"nats://…\"` in {}",
                        layout.data_dir.join("config.toml").display()
                    );
                };
                crate::remote::worker::run(
                    layout,
                    crate::remote::worker::WorkerArgs {
                        nats,
                        pool: args.pool,
                        name: args.name,
                        slots: args.slots,
                    },
                )
                .await
            }
            Command::WorkerReaper => crate::remote::worker::reap(layout).await,
            Command::Mcp => crate::doors::mcp::serve_stdio(&layout).await,
            Command::Hook { event } => hook(&layout, &event).await,
            Command::Init { cli: Some(cli) } => {
                let exe = std::env::current_exe().context("locating the troupe binary")?;
                let cwd = std::env::current_dir().context("reading the current directory")?;
                for line in crate::init::init(&cli, &cwd, &exe)? {
                    out!("{line}");
                }
                Ok(())
            }
            Command::Init { cli: None } => {
                let cwd = std::env::current_dir().context("reading the current directory")?;
                let (root, _) = troupe_core::project::resolve_project_root(&cwd)
                    .with_context(|| format!("finding the project of {}", cwd.display()))?;
                let found = crate::team::detect(&root, std::env::var_os("PATH"), |k| {
                    std::env::var(k).ok()
                });
                let outcome = crate::team::init(&root, &found)?;
                for line in &outcome.lines {
                    out!("{line}");
                }
                if found.installed.is_empty() && !root.join(troupe_core::project_config::PATH).exists()
                {
                    bail!("no agent CLI is installed: nothing was set up");
                }
                Ok(())
            }
            Command::DemoMember => crate::demo_member::run().await,
            Command::BoxExec { .. } => Ok(()), // handled in `main`, before the runtime
            Command::Completions { shell } => {
                let mut out = Vec::new();
                clap_complete::generate(shell, &mut <Cli as clap::CommandFactory>::command(), "troupe", &mut out);
                print_raw(&out);
                Ok(())
            }
            Command::Doctor => doctor::run(&layout, cli.json).await,
            Command::Man => {
                let mut out = Vec::new();
                clap_mangen::Man::new(<Cli as clap::CommandFactory>::command())
                    .render(&mut out)
                    .context("rendering the man page")?;
                print_raw(&out);
                Ok(())
            }
        }
    });
    // A stdio door (`troupe lsp`, `troupe mcp`) may have a read of stdin in flight on a blocking
    // thread, which returns only when the editor closes its end: the command is over, so the
    // process does not wait for it (dropping the runtime would, for as long as stdin is open).
    runtime.shutdown_timeout(std::time::Duration::from_millis(250));
    result
}

/// Writes bytes as they are (a completion script, a man page), ending quietly when the reader
/// went away.
fn print_raw(bytes: &[u8]) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("troupe: cannot write the output: {e}");
        std::process::exit(1);
    }
}

fn print_json(value: &Value) -> anyhow::Result<()> {
    out!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

fn env_session(given: Option<String>, what: &str) -> anyhow::Result<String> {
    match given.or_else(|| {
        std::env::var("TROUPE_SESSION_ID")
            .ok()
            .filter(|s| !s.is_empty())
    }) {
        Some(id) => Ok(id),
        None => bail!("no {what}: pass one or set TROUPE_SESSION_ID"),
    }
}

fn cwd_string() -> anyhow::Result<String> {
    Ok(std::env::current_dir()
        .context("cannot read the current directory")?
        .display()
        .to_string())
}

async fn stop(layout: &Layout, leave_running: bool, json: bool) -> anyhow::Result<()> {
    let client = match client::connect(layout, false).await {
        Ok(client) => client,
        Err(_) => {
            if json {
                return print_json(&json!({ "running": false }));
            }
            out!("no daemon is running for {}", layout.data_dir.display());
            return Ok(());
        }
    };
    let status = client.call("daemon_status", json!({})).await?;
    // The runs end before the answer; the daemon may close the connection before its answer
    // arrives: that is success too (what became of the runs is then unknown).
    let answer = client
        .call("shutdown_daemon", json!({ "leave_running": leave_running }))
        .await
        .ok();
    drop(client);
    client::wait_until_unlocked(layout).await?;
    let count = |key: &str| answer.as_ref().and_then(|a| a[key].as_u64());
    let (ended, left) = (count("ended_runs"), count("left_running"));
    if json {
        return print_json(&json!({
            "running": false,
            "stopped_pid": status["pid"],
            "ended_runs": ended,
            "left_running": left,
        }));
    }
    let runs = |n: u64| {
        if n == 1 {
            "1 run".to_string()
        } else {
            format!("{n} runs")
        }
    };
    let what = match (ended, left) {
        (Some(0), Some(0)) => "no run was going".to_string(),
        (Some(ended), Some(left)) => {
            let mut said = Vec::new();
            if ended > 0 {
                said.push(format!("{} ended with their processes", runs(ended)));
            }
            if left > 0 {
                said.push(format!(
                    "{} left running for the next daemon to take back",
                    runs(left)
                ));
            }
            said.join(", ")
        }
        _ => "what became of the runs is unknown (no answer)".to_string(),
    };
    out!("stopped the daemon (pid {}): {what}", status["pid"]);
    Ok(())
}

async fn status(layout: &Layout, json: bool) -> anyhow::Result<()> {
    let client = match client::connect(layout, false).await {
        Ok(client) => client,
        Err(e) => {
            if json {
                return print_json(&json!({ "running": false, "reason": format!("{e:#}") }));
            }
            out!("not running ({e:#})");
            return Ok(());
        }
    };
    let status = client.call("daemon_status", json!({})).await?;
    if json {
        let mut out = status;
        out["running"] = true.into();
        return print_json(&out);
    }
    out!(
        "running: pid {} version {} up {:.1}s\n  data dir  {}\n  socket    {}\n  websocket {}\n  sandbox   {}\n  {} projects, {} sessions ({} active), {} messages, {} events",
        status["pid"],
        status["version"].as_str().unwrap_or("?"),
        status["uptime_ms"].as_f64().unwrap_or(0.0) / 1000.0,
        status["data_dir"].as_str().unwrap_or("?"),
        status["socket_path"].as_str().unwrap_or("?"),
        status["ws_url"].as_str().unwrap_or("?"),
        status["sandbox"].as_str().unwrap_or("?"),
        status["projects"],
        status["sessions"],
        status["active_sessions"],
        status["messages"],
        status["events"],
    );
    Ok(())
}

/// `troupe call`: fills in `cwd` and the caller's session from the environment where the
/// operation takes them and they are missing.
async fn call(layout: &Layout, operation: &str, params: &str) -> anyhow::Result<()> {
    let Some(op) = troupe_api::operation(operation) else {
        bail!("unknown operation {operation:?}; `troupe api list` lists them");
    };
    let text = if params == "-" {
        let mut buf = String::new();
        std::io::stdin()
            .read_to_string(&mut buf)
            .context("cannot read params from standard input")?;
        buf
    } else {
        params.to_string()
    };
    let mut args: Value = serde_json::from_str(&text)
        .with_context(|| format!("params are not valid JSON: {text}"))?;
    if let Value::Object(map) = &mut args {
        use troupe_api::{Field, param_field};
        if param_field(op.name, "cwd") != Field::Absent
            && !map.contains_key("cwd")
            && !map.contains_key("project_id")
        {
            map.insert("cwd".into(), cwd_string()?.into());
        }
        if let Ok(session) = std::env::var("TROUPE_SESSION_ID") {
            for field in ["session_id", "from_session_id"] {
                if param_field(op.name, field) == Field::Required && !map.contains_key(field) {
                    map.insert(field.into(), session.clone().into());
                }
            }
        }
    }
    let result = client::call_once(layout, true, operation, args).await?;
    print_json(&result)
}

async fn session(layout: &Layout, cmd: SessionCommand, json: bool) -> anyhow::Result<()> {
    let client = client::connect(layout, true).await?;
    match cmd {
        SessionCommand::Register {
            cli,
            cwd,
            external_id,
            parent,
        } => {
            let cwd = match cwd {
                Some(cwd) => cwd.display().to_string(),
                None => cwd_string()?,
            };
            let result = client
                .call(
                    "register_session",
                    json!({ "cli": cli, "cwd": cwd, "external_id": external_id, "parent_session_id": parent }),
                )
                .await?;
            if json {
                return print_json(&result);
            }
            out!("{}", result["session_id"].as_str().unwrap_or("?"));
        }
        SessionCommand::List { all, ended } => {
            let mut args = json!({});
            if !all {
                args["cwd"] = cwd_string()?.into();
            }
            if !ended {
                args["status"] = "active".into();
            }
            let result = client.call("list_sessions", args).await?;
            if json {
                return print_json(&result);
            }
            let sessions: Vec<Session> = serde_json::from_value(result["sessions"].clone())?;
            for s in sessions {
                out!(
                    "{}  {:<8} depth {}  {:?}  {}",
                    s.session_id,
                    s.cli,
                    s.agent_depth,
                    s.status,
                    s.cwd
                );
            }
        }
        SessionCommand::End { session_id } => {
            let result = client
                .call("end_session", json!({ "session_id": session_id }))
                .await?;
            if json {
                return print_json(&result);
            }
            out!("ended {session_id}");
        }
    }
    Ok(())
}

async fn msg(layout: &Layout, cmd: MsgCommand, json: bool) -> anyhow::Result<()> {
    let client = client::connect(layout, true).await?;
    match cmd {
        MsgCommand::Send {
            from,
            to,
            priority,
            key,
            content,
        } => {
            let from = env_session(from, "sender")?;
            let result = client
                .call(
                    "send_message",
                    json!({ "from_session_id": from, "to_session_id": to, "content": content,
                            "priority": priority, "idempotency_key": key }),
                )
                .await?;
            if json {
                return print_json(&result);
            }
            out!(
                "{} seq {}{}",
                result["message_id"].as_str().unwrap_or("?"),
                result["seq"],
                if result["duplicate"] == true {
                    " (duplicate: stored earlier)"
                } else {
                    ""
                }
            );
        }
        MsgCommand::Poll {
            session_id,
            wait_ms,
            since,
            keep_unread,
        } => {
            let session_id = env_session(session_id, "recipient")?;
            let result = client
                .call(
                    "poll_messages",
                    json!({ "session_id": session_id, "wait_ms": wait_ms, "since": since,
                            "mark_read": !keep_unread }),
                )
                .await?;
            if json {
                return print_json(&result);
            }
            let messages: Vec<Message> = serde_json::from_value(result["messages"].clone())?;
            for m in &messages {
                print_message(m);
            }
        }
        MsgCommand::Watch {
            session_id,
            since,
            count,
        } => {
            watch(
                &client,
                env_session(session_id, "recipient")?,
                since,
                count,
                json,
            )
            .await?
        }
    }
    Ok(())
}

async fn party(layout: &Layout, cmd: PartyCommand, json: bool) -> anyhow::Result<()> {
    let client = client::connect(layout, true).await?;
    let (op, args) = match cmd {
        PartyCommand::Launch {
            name,
            words,
            task_id,
            issue,
        } => {
            let mut params = json!({ "name": name, "task_id": task_id, "cwd": cwd_string()? });
            if let Some(issue) = issue {
                params["issue"] = json!(issue);
            }
            if !words.is_empty() {
                params["inputs"] = json!({ "task": words.join(" ") });
            }
            ("launch_party", params)
        }
        PartyCommand::List => ("list_parties", json!({ "cwd": cwd_string()? })),
        PartyCommand::Status { party_id } => ("get_party_status", json!({ "party_id": party_id })),
        PartyCommand::Signal {
            party_id,
            role,
            signal,
        } => (
            "signal_role",
            json!({ "party_id": party_id, "role_name": role, "signal": signal }),
        ),
        PartyCommand::Cancel { party_id } => ("cancel_party", json!({ "party_id": party_id })),
    };
    let result = client.call(op, args).await?;
    if json {
        return print_json(&result);
    }
    if let Some(parties) = result["parties"].as_array() {
        for p in parties {
            out!(
                "{}  {:<22} {:<10} {}",
                p["party_id"].as_str().unwrap_or(""),
                p["name"].as_str().unwrap_or(""),
                p["status"].as_str().unwrap_or(""),
                p["created_at"].as_str().unwrap_or("")
            );
        }
        return Ok(());
    }
    let summary = if result["party"].is_object() {
        &result["party"]
    } else {
        &result
    };
    out!(
        "party {} {} — {}",
        summary["party_id"].as_str().unwrap_or(""),
        summary["name"].as_str().unwrap_or(""),
        summary["status"].as_str().unwrap_or("")
    );
    for r in result["roles"].as_array().into_iter().flatten() {
        out!(
            "  {:<12} {:<10} {}/{} done  on_crash {}{}",
            r["role"].as_str().unwrap_or(""),
            r["status"].as_str().unwrap_or(""),
            r["completed"],
            r["count"],
            r["on_crash"].as_str().unwrap_or(""),
            if r["crashes"].as_i64().unwrap_or(0) > 0 {
                format!("  ({} crashes)", r["crashes"])
            } else {
                String::new()
            }
        );
    }
    Ok(())
}

/// `troupe hook <event>`: never blocks the CLI on Troupe's account. If the daemon cannot be
/// reached the hook says nothing and exits 0, so Claude Code goes on as without Troupe.
async fn hook(layout: &Layout, event: &str) -> anyhow::Result<()> {
    let mut text = String::new();
    std::io::stdin()
        .read_to_string(&mut text)
        .context("reading the hook's JSON from stdin")?;
    let mut payload: Value = serde_json::from_str(&text).context("the hook's input is not JSON")?;
    // Anything else (found by fuzzing: `[]` panicked here) is refused as the HTTP form does.
    let Some(fields) = payload.as_object_mut() else {
        bail!("the hook's input must be a JSON object");
    };
    fields
        .entry("hook_event_name")
        .or_insert_with(|| json!(event));
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let params = json!({
        "payload": payload,
        "session_id": env("TROUPE_SESSION_ID"),
        "parent_session_id": env("TROUPE_PARENT_SESSION_ID"),
    });
    let answer = async {
        let client = client::connect(layout, true).await?;
        client
            .call("claude_hook", params)
            .await
            .map_err(anyhow::Error::from)
    }
    .await;
    match answer {
        Ok(r) => {
            let out = &r["output"];
            if out.as_object().is_some_and(|o| !o.is_empty()) {
                out!("{out}");
            }
        }
        Err(e) => eprintln!("troupe hook {event}: {e:#}"),
    }
    Ok(())
}

fn plugin_line(p: &Value) -> String {
    format!(
        "{} {}  {}  wit {}  {}",
        p["name"].as_str().unwrap_or(""),
        p["version"].as_str().unwrap_or(""),
        p["kind"].as_str().unwrap_or(""),
        p["wit"].as_str().unwrap_or(""),
        p["description"].as_str().unwrap_or("")
    )
}

async fn plugin(layout: &Layout, cmd: PluginCommand, json: bool) -> anyhow::Result<()> {
    let client = client::connect(layout, true).await?;
    let result = match cmd {
        PluginCommand::List => {
            let r = client.call("list_plugins", json!({})).await?;
            if !json {
                for p in r["plugins"].as_array().into_iter().flatten() {
                    out!("{}", plugin_line(p));
                }
                for b in r["broken"].as_array().into_iter().flatten() {
                    out!(
                        "{}  NOT LOADED: {}",
                        b["dir"].as_str().unwrap_or(""),
                        b["error"].as_str().unwrap_or("")
                    );
                }
                return Ok(());
            }
            r
        }
        PluginCommand::Install { path } => {
            let path = std::path::absolute(&path).context("resolving the plugin folder")?;
            let r = client
                .call("install_plugin", json!({ "path": path }))
                .await?;
            if !json {
                out!("installed {}", plugin_line(&r["plugin"]));
                return Ok(());
            }
            r
        }
        PluginCommand::Remove { name } => {
            client
                .call("remove_plugin", json!({ "name": name }))
                .await?
        }
        PluginCommand::Info { name } => client.call("get_plugin", json!({ "name": name })).await?,
        PluginCommand::Grant {
            name,
            http,
            key_env,
            allow_private,
            config,
        } => {
            let config: Option<Value> = match config {
                Some(c) => Some(serde_json::from_str(&c).context("--config is not JSON")?),
                None => None,
            };
            let mut params = json!({ "name": name, "key_env": key_env, "config": config });
            if !http.is_empty() {
                params["allow_http"] = json!(http);
            }
            if allow_private {
                params["allow_private"] = json!(true);
            }
            client.call("grant_plugin", params).await?
        }
        PluginCommand::Route { router, request } => {
            let r = client
                .call(
                    "route_request",
                    json!({ "router": router, "request": request }),
                )
                .await?;
            if !json {
                out!(
                    "{}  ({})",
                    r["agent"].as_str().unwrap_or(""),
                    r["reason"].as_str().unwrap_or("")
                );
                return Ok(());
            }
            r
        }
    };
    print_json(&result)
}

async fn approvals(layout: &Layout, cmd: ApprovalsCommand, json: bool) -> anyhow::Result<()> {
    let client = client::connect(layout, true).await?;
    match cmd {
        ApprovalsCommand::List => {
            let result = client
                .call("list_approvals", json!({ "status": "pending" }))
                .await?;
            if json {
                return print_json(&result);
            }
            for a in result["approvals"].as_array().into_iter().flatten() {
                out!(
                    "{}  {} {}  ({})",
                    a["approval_id"].as_str().unwrap_or(""),
                    a["tool_name"].as_str().unwrap_or(""),
                    a["subject"].as_str().unwrap_or(""),
                    a["role_name"]
                        .as_str()
                        .unwrap_or_else(|| a["session_id"].as_str().unwrap_or(""))
                );
            }
        }
        ApprovalsCommand::Decide {
            approval_id,
            decision,
            pattern,
        } => {
            let result = client
                .call(
                    "decide_approval",
                    json!({ "approval_id": approval_id, "decision": decision, "pattern": pattern }),
                )
                .await?;
            if json {
                return print_json(&result);
            }
            out!("{}", result["approval"]["status"].as_str().unwrap_or("?"));
        }
    }
    Ok(())
}

async fn watch(
    client: &Client,
    session_id: String,
    since: Option<i64>,
    count: Option<usize>,
    json: bool,
) -> anyhow::Result<()> {
    let mut sub = client
        .subscribe_messages(json!({ "session_id": session_id, "since": since }))
        .await?;
    let mut seen = 0;
    while count.is_none_or(|n| seen < n) {
        let Some(item) = sub.next().await else {
            bail!("the daemon closed the subscription");
        };
        let value = item.context("bad message from the daemon")?;
        if json {
            out!("{}", serde_json::to_string(&value)?);
        } else {
            print_message(&serde_json::from_value(value)?);
        }
        seen += 1;
    }
    Ok(())
}

fn print_message(m: &Message) {
    out!(
        "#{} {} → {} [{}{}] {}",
        m.seq,
        short(&m.from_session_id),
        short(&m.to_session_id),
        m.message_type.as_str(),
        if m.priority == troupe_api::types::Priority::Normal {
            String::new()
        } else {
            format!(", {}", m.priority.as_str())
        },
        m.content
    );
}
