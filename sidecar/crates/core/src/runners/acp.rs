//! `acp:<agent>` runs: an Agent Client Protocol agent (Claude Code through claude-agent-acp,
//! codex-acp, `gemini --acp`, any other) as a party member or a `start_agent` run. The daemon
//! starts it in its own process group in the run's directory, opens one session there with
//! Troupe's MCP tools attached, sends the prompt and follows the turn: updates go to the
//! timeline, permission requests become Troupe approvals (chosen by option kind), `fs/*` and
//! `terminal/*` are served inside the run's directory only. A crash, a hang (`acp.idle_secs`)
//! or a timeout ends the run for the party's recovery; a stop cancels the turn. Shutdown is
//! stdin closed, then SIGTERM to the group, then SIGKILL.
//!
//! Updates reach the timeline through one writer task per run, in order, at most 5,000 events a
//! run, over a bounded queue (a flood slows the agent, not the daemon); a rise of the session's
//! cost goes to the run's usage at once. A permission is never widened: an approved pattern
//! answers "allow once" and its rule answers the next asks. The turn's end completes the run
//! (unless the agent completed it through MCP). An agent cannot be re-attached after a daemon
//! restart: it is killed and counted as crashed.

pub mod adapter;
mod terminals;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot, watch};
use troupe_engine::{AcpOptions, AgentDefinition};
use troupe_model::{ApprovalStatus, QuestionStatus};
use troupe_store::AgentRun;

use crate::runners::process::{Exit, RunTable};
use crate::runners::wasm::confine;
use crate::runners::{RunnerHost, call};
use adapter::{
    AgentInfo, BoxFuture, Choice, ClientSide, ElicitAnswer, ElicitAsk, FieldKind, McpStdio,
    PermissionAnswer, PermissionAsk, SessionSetup, TerminalExit, TerminalOutput, TerminalSpec,
    TurnEnd, Update,
};
use troupe_api::types::{
    AskPersonParams, CHOICE_MAX_BYTES, CompleteParams, CompleteResult, CompletionStatus,
    QUESTION_MAX_BYTES, QUESTION_MAX_CHOICES, QuestionResult, RequestPermissionParams,
};

/// How long a cancelled turn may take to end before the agent is shut down anyway.
const CANCEL_GRACE: Duration = Duration::from_secs(3);
/// How long an agent may take to exit once its stdin is closed.
const EXIT_GRACE: Duration = Duration::from_secs(2);
/// Updates queued for the timeline before the agent is made to wait.
const UPDATE_QUEUE: usize = 256;
/// Timeline events one run may write from its updates; the rest are counted.
const MAX_EVENTS: usize = 5000;
/// A message's text kept in one timeline event.
const MAX_TEXT: usize = 16 * 1024;
/// A pause in a streamed message after which what came so far is written.
const TEXT_PAUSE: Duration = Duration::from_millis(200);
/// How long a permission request (or a question of an agent's form) waits per call before
/// asking again.
const APPROVAL_POLL_MS: u64 = 300_000;

/// A shell command as the rules and guardrails read it, `command` as one string, whatever shape
/// the CLI sent: Codex's `["/bin/bash", "-lc", "…"]` (the words kept as `argv`) or a `cmd`.
fn command_as_text(input: &mut serde_json::Map<String, Value>) {
    let text = match (input.get("command"), input.get("cmd")) {
        (Some(Value::String(_)), _) => return,
        (Some(Value::Array(words)), _) => {
            let words: Option<Vec<&str>> = words.iter().map(Value::as_str).collect();
            match words.as_deref() {
                Some([shell, flag, script])
                    if ["sh", "bash", "zsh", "dash"]
                        .contains(&shell.rsplit('/').next().unwrap_or(shell))
                        && (*flag == "-c" || *flag == "-lc") =>
                {
                    Some(script.to_string())
                }
                Some(words) if !words.is_empty() => shlex::try_join(words.iter().copied()).ok(),
                _ => None,
            }
        }
        (None, Some(Value::String(cmd))) => Some(cmd.clone()),
        _ => None,
    };
    if let Some(text) = text {
        if let Some(words) = input.remove("command") {
            input.insert("argv".into(), words);
        }
        input.insert("command".into(), Value::String(text));
    }
}

/// The ACP agent named by an `acp:` runner.
pub fn agent_of(agent: &AgentDefinition) -> Option<&str> {
    agent.runner.strip_prefix("acp:")
}

/// Starts the agent's process: its own process group, in `workdir`, with `env`, stdin and
/// stdout piped for the protocol, stderr into `log`.
pub fn spawn(
    agent: &AgentDefinition,
    workdir: &Path,
    env: &[(String, String)],
    log: std::fs::File,
    sandbox: &crate::sandbox::Sandbox,
) -> std::io::Result<tokio::process::Child> {
    let name = agent_of(agent).unwrap_or_default();
    let argv = agent
        .command
        .clone()
        .unwrap_or_else(|| troupe_engine::acp_default_command(name));
    let argv = sandbox.argv(argv, workdir).map_err(std::io::Error::other)?;
    let (program, args) = argv
        .split_first()
        .ok_or_else(|| std::io::Error::other("empty command"))?;
    // Its environment (`env`) carries the run's marker.
    let mut cmd = crate::spawn::command(program, crate::spawn::Group::Session, None);
    if name == "gemini" {
        // Gemini CLI leaves out every MCP server (Troupe's tools among them) in a folder it does
        // not trust, and it has never seen the run's worktree: the person launched the run in
        // their own project. The agent's `env` may say otherwise.
        cmd.env("GEMINI_CLI_TRUST_WORKSPACE", "true");
    }
    cmd.args(args)
        .current_dir(workdir)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .envs(agent.env.iter())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(log)
        // If the daemon stops mid-run, its agents go with it (they talk only to it).
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!(
                    "cannot start ACP agent {program:?} in {}: {e}",
                    workdir.display()
                ),
            )
        })
}

/// The environment `troupe mcp` needs to act as the run's session.
fn mcp_env(env: &[(String, String)]) -> Vec<(String, String)> {
    const KEEP: &[&str] = &[
        "TROUPE_SESSION_ID",
        "TROUPE_RUN_ID",
        "TROUPE_HOME",
        "TROUPE_RUNTIME_DIR",
        "TROUPE_SOCKET",
        troupe_api::layout::RUN_TOKEN,
    ];
    env.iter()
        .filter(|(k, _)| KEEP.contains(&k.as_str()))
        .cloned()
        .collect()
}

/// The agent's process as started: the child, when, and its log (for the transcript).
pub struct Started {
    pub child: tokio::process::Child,
    pub spawned: Instant,
    pub transcript: Option<std::fs::File>,
    /// What wraps the agent, and so the terminals it asks for.
    pub sandbox: crate::sandbox::Sandbox,
}

/// Drives the run's session to its end and shuts the agent down; the exit to report.
pub async fn drive(
    daemon: Weak<dyn RunnerHost>,
    run: AgentRun,
    agent: AgentDefinition,
    started: Started,
    env: Vec<(String, String)>,
    mut stop: oneshot::Receiver<()>,
) -> Exit {
    let Started {
        mut child,
        spawned,
        transcript,
        sandbox,
    } = started;
    let pid = child.id();
    // Everything of the run's: its group, and whatever carries its run id (Claude Code, the
    // `troupe mcp` it starts, terminals), ended with it.
    let procs = crate::procs::RunProcesses {
        run_id: run.run_id.clone(),
        pgid: pid,
        since: pid.and_then(crate::runners::process::process_start_time),
    };
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        shut_down(pid, &mut child, &procs).await;
        return Exit::Failed("the agent's stdio was not piped".into());
    };
    let options = agent.acp.clone().unwrap_or_default();
    let workdir = PathBuf::from(run.workdir.clone().unwrap_or_else(|| ".".into()));
    let (updates_tx, updates_rx) = mpsc::channel(UPDATE_QUEUE);
    let member = Arc::new(Member(Arc::new(MemberState {
        daemon: daemon.clone(),
        run: run.clone(),
        agent: agent.clone(),
        workdir: workdir.clone(),
        heard: Mutex::new(Instant::now()),
        asking: AtomicUsize::new(0),
        updates: updates_tx,
        terminals: terminals::Terminals::default(),
        sandbox,
        ended: watch::channel(false).0,
        spawned,
        first_update: std::sync::atomic::AtomicBool::new(false),
        aborted: std::sync::atomic::AtomicBool::new(false),
        pid,
        rounds: Rounds {
            line: tokio::sync::Mutex::new(match daemon.upgrade() {
                Some(d) => d.open_line(&run.run_id),
                None => mpsc::channel(1).1,
            }),
            asked: Mutex::new(None),
            answering: Mutex::new(None),
            resume: std::sync::atomic::AtomicBool::new(false),
            text: Mutex::new(String::new()),
            between: std::sync::atomic::AtomicBool::new(false),
            count: AtomicUsize::new(0),
        },
    })));
    let (timeline_done, timeline_end) = oneshot::channel();
    let timeline = tokio::spawn(record_updates(
        daemon.clone(),
        run.clone(),
        transcript,
        updates_rx,
        timeline_end,
    ));
    let mut mcp = Vec::new();
    if options.mcp {
        match std::env::current_exe() {
            Ok(exe) => mcp.push(McpStdio {
                name: "troupe".into(),
                command: exe,
                args: vec!["mcp".into()],
                env: mcp_env(&env),
            }),
            Err(e) => tracing::warn!(error = %e, "no troupe binary to offer as MCP server"),
        }
    }
    let setup = SessionSetup {
        cwd: workdir.canonicalize().unwrap_or(workdir.clone()),
        auth_method: options.auth_method.clone(),
        base_url: options.base_url.clone(),
        mcp,
        prompt: prompt(&run, &options),
        fs: options.offers_fs(agent.runner.strip_prefix("acp:").unwrap_or_default()),
    };
    let (cancel_tx, cancel_rx) = watch::channel(false);
    // Boxed so that dropping it really drops it (and the agent's stdin with it).
    let mut session = Box::pin(adapter::run_session(
        stdin,
        stdout,
        member.clone(),
        setup,
        cancel_rx,
    ));
    // No timeout: no limit (a duration too long for a timer is none either).
    let limit = agent
        .timeout_secs
        .and_then(|t| Duration::try_from_secs_f64(t).ok());
    let deadline = async {
        match limit {
            Some(limit) => tokio::time::sleep(limit).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(deadline);
    let idle = options
        .idle_secs
        .and_then(|t| Duration::try_from_secs_f64(t).ok());
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    // Why we ended the turn ourselves, if we did.
    let mut ending: Option<Exit> = None;
    let outcome = loop {
        tokio::select! {
            outcome = &mut session => break Some(outcome),
            _ = &mut stop, if ending.is_none() => ending = Some(Exit::Stopped),
            () = &mut deadline, if ending.is_none() => ending = Some(Exit::TimedOut),
            _ = tick.tick(), if ending.is_none() && idle.is_some() => {
                if let Some(idle) = idle && member.idle_for() > idle {
                    ending = Some(Exit::Failed(format!(
                        "the agent hung: no word from it for {} s mid-turn",
                        idle.as_secs_f64()
                    )));
                }
            }
        }
        if ending.is_some() {
            // session/cancel, and every waiting permission request answered `cancelled`
            // (as the protocol asks), so the agent can end its turn at once.
            cancel_tx.send_replace(true);
            member.ended.send_replace(true);
            break tokio::time::timeout(CANCEL_GRACE, &mut session).await.ok();
        }
    };
    // Dropping the session closes the agent's stdin.
    drop(session);
    if let Some(d) = daemon.upgrade() {
        d.close_line(&run.run_id);
    }
    member.ended.send_replace(true);
    member.terminals.kill_all();
    let exit_status = shut_down(pid, &mut child, &procs).await;
    let aborted = member.aborted.load(Ordering::SeqCst);
    drop(member);
    // Tasks still answering the agent may hold a sender: end the timeline explicitly.
    let _ = timeline_done.send(());
    let last_text = timeline.await.unwrap_or_default();
    if let Some(exit) = ending {
        return exit;
    }
    match outcome {
        None => Exit::Failed("the turn did not end".into()),
        // The agent went away: its exit status says why (the orchestrator decides; a run
        // that completed through MCP is done).
        Some(Err(adapter::AcpError::Closed(during))) => match exit_status {
            Some(status) => status,
            None => Exit::Failed(format!("the agent closed its output during {during}")),
        },
        Some(Err(e)) => match exit_status {
            Some(Exit::Exited {
                code: Some(0),
                signal: None,
            })
            | None => Exit::Failed(e.to_string()),
            Some(status) => Exit::Failed(format!("{e} (then it exited: {})", status.describe())),
        },
        // A person aborted at an approval: the orchestrator is stopping the run.
        Some(Ok(TurnEnd::Cancelled)) if aborted => Exit::Stopped,
        Some(Ok(end)) => finish(&daemon, &run, end, last_text).await,
    }
}

fn prompt(run: &AgentRun, options: &AcpOptions) -> String {
    // A party member's playbook already says how to call the tools, and more.
    if !options.mcp || crate::playbooks::tells_tools(&run.prompt) {
        return run.prompt.clone();
    }
    format!(
        "{}\n\nYou are a Troupe agent. Troupe's tools are on its MCP server `troupe`: \
         messaging (`send_message`, `send_to_parent`, `poll_messages`) and `complete`. When \
         the task is done, call `complete` with a summary and your artifacts.",
        run.prompt.trim_end()
    )
}

/// The turn ended: completes the run (unless the agent did, through MCP).
async fn finish(
    daemon: &Weak<dyn RunnerHost>,
    run: &AgentRun,
    end: TurnEnd,
    last_text: String,
) -> Exit {
    let Some(d) = daemon.upgrade() else {
        return Exit::Failed("the daemon is shutting down".into());
    };
    if d.store()
        .get_run(&run.run_id)
        .is_ok_and(|r| r.status.is_completed())
    {
        return Exit::Finished;
    }
    let status = match end {
        TurnEnd::EndTurn => CompletionStatus::Success,
        TurnEnd::MaxTokens | TurnEnd::MaxTurnRequests => CompletionStatus::Partial,
        TurnEnd::Refusal => CompletionStatus::Blocked,
        TurnEnd::Cancelled => {
            return Exit::Failed("the agent cancelled its turn by itself".into());
        }
    };
    let output = if last_text.trim().is_empty() {
        format!("the turn ended ({})", end.as_str())
    } else {
        last_text
    };
    let done: Result<CompleteResult, _> = call(
        &d,
        run,
        "complete",
        CompleteParams {
            session_id: run.session_id.clone(),
            run_id: Some(run.run_id.clone()),
            output,
            status,
            artifacts: Default::default(),
            files_modified: Vec::new(),
            next_steps: Vec::new(),
        },
    )
    .await;
    match done {
        Ok(_) => Exit::Finished,
        Err(e) => Exit::Failed(format!("its end of turn was refused as a completion: {e}")),
    }
}

/// Waits `EXIT_GRACE` for the agent to leave after its stdin closed, then SIGTERM and
/// SIGKILL to its group; then ends whatever of the run is left (its group, processes carrying
/// its run id that left it). How it exited, when it exited by itself.
async fn shut_down(
    pid: Option<u32>,
    child: &mut tokio::process::Child,
    procs: &crate::procs::RunProcesses,
) -> Option<Exit> {
    use std::os::unix::process::ExitStatusExt;
    let exited = match tokio::time::timeout(EXIT_GRACE, child.wait()).await {
        // Whatever it left behind is ended below, by its run's marker.
        Ok(Ok(status)) => Some(Exit::Exited {
            code: status.code(),
            signal: status.signal(),
        }),
        _ => {
            match pid {
                Some(pid) => crate::runners::process::stop_group(pid, child).await,
                None => {
                    if let Err(e) = child.kill().await {
                        tracing::debug!(error = %e, "cannot kill an ACP agent");
                    }
                }
            }
            None
        }
    };
    let killed = crate::procs::end(
        std::slice::from_ref(procs),
        crate::runners::process::TERM_GRACE,
    )
    .await;
    if killed > 0 {
        tracing::info!(run = %procs.run_id, killed, "processes the agent left were killed");
    }
    exited
}

/// What a run's timeline writer is sent, in order.
enum Record {
    Update(Update),
    /// A fact of the runner's own (agent_started, agent_first_update, agent_tool_refused).
    Event(&'static str, Value),
}

/// Writes a run's updates to the timeline: text chunks joined into one message (written when
/// something else happens or the agent pauses), tool calls when they start and end, plans, the
/// last usage. Returns the last message's text.
async fn record_updates(
    daemon: Weak<dyn RunnerHost>,
    run: AgentRun,
    transcript: Option<std::fs::File>,
    mut updates: mpsc::Receiver<Record>,
    mut end: oneshot::Receiver<()>,
) -> String {
    let mut t = Timeline {
        daemon,
        run,
        transcript,
        text: String::new(),
        last: String::new(),
        written: 0,
        dropped: 0,
    };
    let mut usage: Option<Value> = None;
    // The session's cost so far (agents report a running total): each rise goes to the run's
    // usage at once.
    let mut cost_recorded = 0.0f64;
    let mut draining = false;
    loop {
        let update = if draining {
            match updates.try_recv() {
                Ok(u) => u,
                Err(_) => break,
            }
        } else {
            tokio::select! {
                biased;
                update = updates.recv() => match update {
                    Some(u) => u,
                    None => break,
                },
                _ = &mut end => {
                    draining = true;
                    continue;
                }
                () = tokio::time::sleep(TEXT_PAUSE), if !t.text.is_empty() => {
                    t.flush().await;
                    continue;
                }
            }
        };
        let update = match update {
            Record::Update(u) => u,
            Record::Event(kind, data) => {
                t.flush().await;
                t.append(kind, data).await;
                continue;
            }
        };
        match update {
            Update::Text(chunk) => {
                if t.text.len() < MAX_TEXT {
                    t.text.push_str(&chunk);
                }
            }
            Update::Thought(_) => {}
            Update::ToolCall(call) => {
                t.flush().await;
                let ended = matches!(call.status.as_deref(), Some("completed" | "failed"));
                if call.started || ended {
                    let line = format!(
                        "[tool] {} ({})\n",
                        call.title.as_deref().unwrap_or(call.id.as_str()),
                        call.status.as_deref().unwrap_or("started")
                    );
                    t.transcribe(&line);
                    let mut data = json!({
                        "tool_call_id": call.id,
                        "title": call.title,
                        "kind": call.kind,
                        "status": call.status,
                    });
                    if !call.paths.is_empty() {
                        data["locations"] = json!(call.paths);
                    }
                    if !call.diffs.is_empty() {
                        data["diffs"] = call
                            .diffs
                            .iter()
                            .map(|(path, old, new)| {
                                json!({
                                    "path": path,
                                    "old_text": old.clone().map(cut),
                                    "new_text": cut(new.clone()),
                                })
                            })
                            .collect();
                    }
                    t.write("agent_tool_call", data).await;
                }
            }
            Update::Plan(items) => {
                t.flush().await;
                t.write(
                    "agent_plan",
                    json!({"entries": items.iter().map(|i| json!({
                        "content": i.content, "priority": i.priority, "status": i.status,
                    })).collect::<Vec<_>>()}),
                )
                .await;
            }
            Update::Usage {
                used,
                size,
                cost_usd,
            } => {
                if let Some(cost) = cost_usd
                    && cost > cost_recorded
                {
                    t.add_cost(cost - cost_recorded).await;
                    cost_recorded = cost;
                }
                usage =
                    Some(json!({"context_used": used, "context_size": size, "cost_usd": cost_usd}));
            }
        }
    }
    t.flush().await;
    if let Some(usage) = usage {
        t.append("agent_usage", usage).await;
    }
    if t.dropped > 0 {
        let data = json!({"count": t.dropped, "kept": MAX_EVENTS});
        t.append("agent_updates_dropped", data).await;
    }
    t.last
}

/// The timeline writer of one run.
struct Timeline {
    daemon: Weak<dyn RunnerHost>,
    run: AgentRun,
    /// The run's log, where its words and tool calls are written as lines too.
    transcript: Option<std::fs::File>,
    /// The message being streamed.
    text: String,
    /// The last message written.
    last: String,
    written: usize,
    dropped: usize,
}

impl Timeline {
    /// Appends one event, in order (awaited: a slow store slows the agent, through the queue).
    async fn write(&mut self, kind: &str, data: Value) {
        if self.written >= MAX_EVENTS {
            self.dropped += 1;
            return;
        }
        self.written += 1;
        self.append(kind, data).await;
    }

    /// Appends one event whatever the cap (the run's closing summary).
    async fn append(&self, kind: &str, mut data: Value) {
        let Some(d) = self.daemon.upgrade() else {
            return;
        };
        if let Value::Object(m) = &mut data {
            m.insert("run_id".into(), Value::String(self.run.run_id.clone()));
        }
        let event = troupe_store::NewEvent {
            kind: kind.into(),
            project_id: Some(self.run.project_id.clone()),
            session_id: Some(self.run.session_id.clone()),
            party_id: self.run.party_id.clone(),
            data,
        };
        if let Err(e) = d.store().append_event(event).await {
            tracing::debug!(error = %e, "ACP update not recorded");
        }
    }

    async fn add_cost(&self, cost_usd: f64) {
        let Some(d) = self.daemon.upgrade() else {
            return;
        };
        let usage = troupe_store::Usage {
            input_tokens: 0,
            output_tokens: 0,
            cost_usd,
        };
        match d.store().add_usage(self.run.run_id.clone(), usage).await {
            Ok(()) => d.usage_recorded(&self.run.run_id),
            Err(e) => tracing::debug!(error = %e, "ACP cost not recorded"),
        }
    }

    /// Appends lines to the run's log (a full disk loses the transcript, not the run).
    fn transcribe(&mut self, line: &str) {
        use std::io::Write as _;
        if let Some(f) = &mut self.transcript
            && f.write_all(line.as_bytes()).is_err()
        {
            self.transcript = None;
        }
    }

    /// Writes the message streamed so far (whitespace alone is no message).
    async fn flush(&mut self) {
        let text = std::mem::take(&mut self.text);
        if text.trim().is_empty() {
            return;
        }
        self.transcribe(&format!("[agent] {}\n", text.trim_end()));
        self.last = cut(text);
        let data = json!({"text": self.last});
        self.write("agent_message", data).await;
    }
}

fn cut(s: String) -> String {
    crate::runners::wasm::cut_at(s, MAX_TEXT, "[…]")
}

/// The Troupe name of an ACP tool kind (the names workflows and approval rules use).
fn tool_name(kind: Option<&str>, title: Option<&str>) -> String {
    match kind {
        Some("edit") => "write_file".into(),
        Some("execute") => "run_command".into(),
        Some("read") => "read_file".into(),
        Some("delete") => "delete_file".into(),
        Some("move") => "move_file".into(),
        Some("search") => "search".into(),
        Some("fetch") => "fetch".into(),
        Some(other) if other != "other" => other.into(),
        _ => title
            .and_then(|t| t.split_whitespace().next())
            .map(|w| w.to_ascii_lowercase())
            .unwrap_or_else(|| "other".into()),
    }
}

/// The Troupe operation a permission request is for, when it asks for one of Troupe's own MCP
/// tools as an agent CLI names them: Claude Code `mcp__troupe__<op>`, Gemini CLI
/// `mcp_troupe_<op>` or `<op> (troupe MCP Server)`, Codex `troupe/<op>` (its title's first
/// word, of a tool of no other kind).
fn troupe_operation<'a>(kind: Option<&str>, title: Option<&'a str>) -> Option<&'a str> {
    if kind.is_some_and(|k| k != "other") {
        return None;
    }
    let title = title?.trim();
    let word = title
        .strip_prefix("Tool: ")
        .unwrap_or(title)
        .split_whitespace()
        .next()?;
    let op = word
        .strip_prefix("mcp__troupe__")
        .or_else(|| word.strip_prefix("mcp_troupe_"))
        .or_else(|| word.strip_prefix("troupe/"))
        // Gemini CLI's display name: `<tool> (troupe MCP Server)`.
        .or_else(|| title.contains("(troupe MCP Server)").then_some(word))?;
    troupe_api::operation(op).map(|_| op)
}

/// One run's side of the protocol (cheap to clone: tasks answering for it hold one).
#[derive(Clone)]
struct Member(Arc<MemberState>);

struct MemberState {
    daemon: Weak<dyn RunnerHost>,
    run: AgentRun,
    agent: AgentDefinition,
    workdir: PathBuf,
    heard: Mutex<Instant>,
    /// Permission requests waiting for a person (the agent is not hung meanwhile).
    asking: AtomicUsize,
    updates: mpsc::Sender<Record>,
    terminals: terminals::Terminals,
    /// What wraps the agent: its terminals' commands are wrapped the same way.
    sandbox: crate::sandbox::Sandbox,
    /// Turns true when the run is over: waiting answers give up.
    ended: watch::Sender<bool>,
    /// When the agent was started, and whether its first update came.
    spawned: Instant,
    first_update: std::sync::atomic::AtomicBool,
    /// A person aborted at one of its approvals (the run is being stopped).
    aborted: std::sync::atomic::AtomicBool,
    pid: Option<u32>,
    rounds: Rounds,
}

/// The turns after the first, in the same session: the person's prompts (`prompt_agent`), a
/// pause (`pause_party`, a cancelled turn resumed when let go) and the party's rounds.
struct Rounds {
    /// The person's prompts to this run.
    line: tokio::sync::Mutex<mpsc::Receiver<crate::runners::PersonPrompt>>,
    /// A prompt of the person's that interrupted a turn, to send next.
    asked: Mutex<Option<crate::runners::PersonPrompt>>,
    /// Where the answer of the turn under way goes (the person's prompt's).
    answering: Mutex<Option<oneshot::Sender<crate::runners::TurnAnswer>>>,
    /// A turn was interrupted: it is to be resumed once the person is done.
    resume: std::sync::atomic::AtomicBool,
    /// The text of the turn under way.
    text: Mutex<String>,
    /// Between turns (silence is not a hang).
    between: std::sync::atomic::AtomicBool,
    count: AtomicUsize,
}

/// Turns one session may take (a guard against a loop of rounds).
const MAX_ROUNDS: usize = 200;
/// What a turn resumed after a pause or the person's prompt is told.
const RESUME: &str = "Go on with your task where you left off.";

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl std::ops::Deref for Member {
    type Target = MemberState;
    fn deref(&self) -> &MemberState {
        &self.0
    }
}

impl Member {
    fn idle_for(&self) -> Duration {
        if self.asking.load(Ordering::SeqCst) > 0
            || self.terminals.running() > 0
            || self.rounds.between.load(Ordering::SeqCst)
        {
            return Duration::ZERO;
        }
        self.heard
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .elapsed()
    }

    fn touch(&self) {
        *self.heard.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }

    fn permits(&self, tool: &str) -> Result<(), String> {
        self.agent.workflow.permits(tool)
    }

    /// What the session's next turn is told, if it has one (`ClientSide::next_turn`).
    async fn next_turn_of(&self, end: TurnEnd) -> Option<String> {
        let text = std::mem::take(&mut *lock(&self.rounds.text));
        if let Some(answer) = lock(&self.rounds.answering).take() {
            let _ = answer.send(crate::runners::TurnAnswer {
                text,
                stop_reason: end.as_str().to_string(),
            });
        }
        let d = self.daemon.upgrade()?;
        let run_id = self.run.run_id.clone();
        if d.store()
            .get_run(&run_id)
            .is_ok_and(|r| r.status.is_completed() || r.status.is_finished())
        {
            return None;
        }
        if self.rounds.count.fetch_add(1, Ordering::SeqCst) >= MAX_ROUNDS {
            return None;
        }
        let mut ended = self.ended.subscribe();
        let mut held = d.held();
        let mut line = self.rounds.line.lock().await;
        loop {
            if let Some(asked) = lock(&self.rounds.asked).take() {
                *lock(&self.rounds.answering) = Some(asked.answer);
                return Some(asked.text);
            }
            if held.borrow().contains(&run_id) {
                tokio::select! {
                    free = async { held.wait_for(|h| !h.contains(&run_id)).await.map(|_| ()) } => {
                        if free.is_err() {
                            return None;
                        }
                    }
                    asked = line.recv() => {
                        *lock(&self.rounds.asked) = Some(asked?);
                    }
                    _ = async { ended.wait_for(|e| *e).await.map(|_| ()) } => {
                        return None;
                    }
                }
                continue;
            }
            if self.rounds.resume.swap(false, Ordering::SeqCst) {
                return Some(RESUME.to_string());
            }
            if end == TurnEnd::Cancelled {
                return None;
            }
            let round = Arc::clone(&d).next_round(self.run.clone());
            tokio::select! {
                next = round => return next,
                asked = line.recv() => {
                    *lock(&self.rounds.asked) = Some(asked?);
                }
                paused = async { held.wait_for(|h| h.contains(&run_id)).await.map(|_| ()) } => {
                    paused.ok()?;
                }
                _ = async { ended.wait_for(|e| *e).await.map(|_| ()) } => return None,
            }
        }
    }

    /// Queues a record for the timeline writer. Waiting here holds the agent's output: a flood
    /// is slowed, never buffered without end.
    async fn record(&self, record: Record) {
        if self.updates.send(record).await.is_err() {
            tracing::debug!("ACP record after the timeline closed");
        }
    }

    /// Puts an agent's form (`elicitation/create`) to a person as inbox questions, a field
    /// each (its choices where it has them and they fit a question, else free text); an answer
    /// that does not read as the field's kind is asked again. `/decline` refuses the form; an
    /// optional field's `-` leaves it out; a question that expires cancels it. A form without
    /// fields is asked as accept or decline.
    async fn fill(&self, ask: ElicitAsk) -> ElicitAnswer {
        const DECLINE: &str = "/decline";
        const LEAVE_OUT: &str = "-";
        const ACCEPT: &str = "accept";
        let Some(d) = self.daemon.upgrade() else {
            return ElicitAnswer::Cancel;
        };
        let data = json!({
            "message": ask.message,
            "fields": ask.fields.iter().map(|f| &f.name).collect::<Vec<_>>(),
        });
        self.record(Record::Event("agent_elicitation", data)).await;
        // The agent's words, within what a question holds (its field's lines follow).
        let message = clip(ask.message.trim(), QUESTION_MAX_BYTES / 2);
        if ask.fields.is_empty() {
            let choices = vec![ACCEPT.to_string(), DECLINE.to_string()];
            return match self.question(&d, message, choices).await.as_deref() {
                Some(ACCEPT) => ElicitAnswer::Accept(Vec::new()),
                Some(_) => ElicitAnswer::Decline,
                None => ElicitAnswer::Cancel,
            };
        }
        let mut values = Vec::new();
        let total = ask.fields.len();
        for (i, field) in ask.fields.iter().enumerate() {
            let mut choices = field.kind.choices();
            if !choices.is_empty() {
                if !field.required {
                    choices.push(LEAVE_OUT.into());
                }
                choices.push(DECLINE.into());
            }
            // Too many, or too long, to offer: the person names one in their words.
            let offered = choices.len() <= QUESTION_MAX_CHOICES
                && choices.iter().all(|c| c.len() <= CHOICE_MAX_BYTES);
            let mut retry_note = None;
            loop {
                let free_text = choices.is_empty() || !offered;
                let about = field_text(field, (i, total), free_text, retry_note.as_deref());
                let question = format!(
                    "{message}\n\n{}",
                    clip(&about, QUESTION_MAX_BYTES - message.len() - 2)
                );
                let offer = if offered { choices.clone() } else { Vec::new() };
                let Some(answer) = self.question(&d, question, offer).await else {
                    return ElicitAnswer::Cancel;
                };
                let answer = answer.trim();
                if answer == DECLINE {
                    return ElicitAnswer::Decline;
                }
                if !field.required && answer == LEAVE_OUT {
                    break;
                }
                match field.parse(answer) {
                    Ok(value) => {
                        values.push((field.name.clone(), value));
                        break;
                    }
                    Err(why) => retry_note = Some(why),
                }
            }
        }
        ElicitAnswer::Accept(values)
    }

    /// One question in the inbox, waited on until answered: its answer, or None once it
    /// expired (or could not be asked). Dropped while it waits (the agent withdrew its form,
    /// or the run ended), it takes the question out of the inbox.
    async fn question(
        &self,
        d: &Arc<dyn RunnerHost>,
        question: String,
        choices: Vec<String>,
    ) -> Option<String> {
        let session = self.run.session_id.clone();
        let asked: Result<QuestionResult, _> = call(
            d,
            &self.run,
            "ask_person",
            AskPersonParams {
                session_id: session.clone(),
                question: Some(question),
                choices,
                question_id: None,
                wait_ms: Some(0),
            },
        )
        .await;
        let asked = match asked {
            Ok(asked) => asked,
            Err(e) => {
                tracing::warn!(error = %e, "an agent's form could not be asked");
                return None;
            }
        };
        let mut waiting = Withdraw {
            host: d.clone(),
            question_id: Some(asked.question_id.clone()),
        };
        loop {
            let r: Result<QuestionResult, _> = call(
                d,
                &self.run,
                "ask_person",
                AskPersonParams {
                    session_id: session.clone(),
                    question_id: Some(asked.question_id.clone()),
                    wait_ms: Some(APPROVAL_POLL_MS),
                    ..AskPersonParams::default()
                },
            )
            .await;
            match r {
                Ok(r) if r.status == QuestionStatus::Pending => continue,
                Ok(r) => {
                    waiting.question_id = None;
                    return r.answer.filter(|_| r.status == QuestionStatus::Answered);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "an agent's form could not be waited on");
                    return None;
                }
            }
        }
    }

    /// Puts a permission request to Troupe: the workflow first, then approval rules and a
    /// person (timeout denies).
    async fn ask(&self, ask: PermissionAsk) -> PermissionAnswer {
        let mut ended = self.ended.subscribe();
        tokio::select! {
            answer = self.decide(ask) => answer,
            _ = ended.wait_for(|e| *e) => PermissionAnswer::Cancelled,
        }
    }

    async fn decide(&self, ask: PermissionAsk) -> PermissionAnswer {
        let tool = tool_name(ask.tool.kind.as_deref(), ask.tool.title.as_deref());
        let mut input = match ask.tool.raw_input.clone() {
            Some(Value::Object(m)) => m,
            Some(other) => {
                let mut m = serde_json::Map::new();
                m.insert("input".into(), other);
                m
            }
            None => serde_json::Map::new(),
        };
        if let Some(title) = &ask.tool.title {
            input
                .entry("title")
                .or_insert_with(|| Value::String(title.clone()));
        }
        if tool == "run_command" {
            command_as_text(&mut input);
        }
        // The edits the call shows, in ACP's own shape: the guardrails read their paths and
        // count their lines (`crate::guardrails::edits`).
        if !ask.tool.diffs.is_empty() {
            let diffs = ask.tool.diffs.iter().map(|(path, old, new)| {
                json!({ "type": "diff", "path": path, "oldText": old, "newText": new })
            });
            input.insert("diffs".into(), Value::Array(diffs.collect()));
        }
        if let Err(why) = self.permits(&tool) {
            let data = json!({"tool": tool, "title": ask.tool.title, "reason": why});
            self.record(Record::Event("agent_tool_refused", data)).await;
            return PermissionAnswer::Choose(Choice::RejectOnce);
        }
        if let Some(op) = troupe_operation(ask.tool.kind.as_deref(), ask.tool.title.as_deref()) {
            // One of Troupe's own tools, which the agent calls on Troupe's MCP server with its
            // run's credential: the operation's access rules decide at that door (a member is
            // refused the person's), so the person is not asked to approve each `get_plan`.
            let data = json!({"tool": op, "title": ask.tool.title});
            self.record(Record::Event("agent_troupe_tool_allowed", data))
                .await;
            return PermissionAnswer::Choose(Choice::AllowOnce);
        }
        let Some(d) = self.daemon.upgrade() else {
            return PermissionAnswer::Cancelled;
        };
        let file_path = ask
            .tool
            .paths
            .first()
            .or(ask.tool.diffs.first().map(|(path, _, _)| path))
            .map(|p| p.to_string_lossy().into_owned())
            .or_else(|| {
                ["file_path", "path", "abs_path"]
                    .iter()
                    .find_map(|k| input.get(*k).and_then(Value::as_str).map(str::to_string))
            })
            // A path outside the worktree is kept as asked: the request is flagged for it.
            .map(|p| match confine(&self.workdir, &p) {
                Ok(inside) => inside.display().to_string(),
                Err(_) => self.workdir.join(&p).display().to_string(),
            });
        let dangerous = tool == "run_command" || tool == "delete_file";
        let params = RequestPermissionParams {
            session_id: self.run.session_id.clone(),
            tool_name: Some(tool.clone()),
            input: Some(Value::Object(input)),
            file_path,
            is_dangerous: dangerous,
            danger_reason: dangerous.then(|| format!("{tool} asked by an ACP agent")),
            request_key: Some(format!("acp:{}:{}", self.run.run_id, ask.tool.id)),
            wait_ms: Some(APPROVAL_POLL_MS),
            ..RequestPermissionParams::default()
        };
        let r = match d.request_permission_decided(params).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(run = %self.run.run_id, error = %e, "ACP permission request failed");
                return PermissionAnswer::Choose(Choice::RejectOnce);
            }
        };
        match r.status {
            // Once, even for a pattern: the new rule answers the agent's next asks, and the
            // agent's own "always" could be wider than the rule.
            ApprovalStatus::Approved => PermissionAnswer::Choose(Choice::AllowOnce),
            ApprovalStatus::Aborted => {
                self.aborted.store(true, Ordering::SeqCst);
                PermissionAnswer::Cancelled
            }
            // The run ended while it waited (a cancel, a stop): the turn is being cancelled.
            ApprovalStatus::Expired => PermissionAnswer::Cancelled,
            _ => PermissionAnswer::Choose(Choice::RejectOnce),
        }
    }
}

/// Counts a permission request as waiting while alive.
struct Asking(Member);

impl Asking {
    fn new(member: &Member) -> Asking {
        member.asking.fetch_add(1, Ordering::SeqCst);
        Asking(member.clone())
    }
}

impl Drop for Asking {
    fn drop(&mut self) {
        self.0.asking.fetch_sub(1, Ordering::SeqCst);
        self.0.touch();
    }
}

/// A question of an agent's form still waited on: taken out of the inbox when no one waits.
struct Withdraw {
    host: Arc<dyn RunnerHost>,
    question_id: Option<String>,
}

impl Drop for Withdraw {
    fn drop(&mut self) {
        // (Outside a runtime, at shutdown, it is left to expire with its run.)
        if let Some(id) = self.question_id.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            let host = self.host.clone();
            runtime.spawn(async move { host.withdraw_question(id).await });
        }
    }
}

/// What a person reads of a form's field (its place in the form: index, count): its label and
/// description, the picks it takes, why the last answer did not do, and (answered in words)
/// how to leave it out or refuse.
fn field_text(
    field: &adapter::ElicitField,
    (i, total): (usize, usize),
    free_text: bool,
    retry_note: Option<&str>,
) -> String {
    let mut about = String::new();
    if total > 1 {
        about.push_str(&format!("({}/{total}) ", i + 1));
    }
    about.push_str(&field.label);
    if let Some(desc) = &field.description {
        about.push_str(&format!(": {desc}"));
    }
    let titles = |options: &[(String, String)]| {
        options
            .iter()
            .map(|(_, t)| t.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    match &field.kind {
        FieldKind::ManyOf(options) => {
            about.push_str(&format!(
                "\n(any of: {}, separated by commas)",
                titles(options)
            ));
        }
        FieldKind::OneOf(options) if free_text => {
            about.push_str(&format!("\n(one of: {})", titles(options)));
        }
        _ => {}
    }
    if let Some(note) = retry_note {
        about.push_str(&format!("\n({note}: answer again.)"));
    }
    if free_text {
        about.push_str(if field.required {
            "\n(Answer /decline to refuse.)"
        } else {
            "\n(Optional: - leaves it out. Answer /decline to refuse.)"
        });
    }
    about
}

/// `text` cut to at most `max` bytes (at a character), an ellipsis marking a cut.
fn clip(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max.saturating_sub('…'.len_utf8());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

impl ClientSide for Member {
    fn heard(&self) {
        self.touch();
    }

    fn updated(&self) -> BoxFuture<()> {
        let me = self.clone();
        Box::pin(async move {
            if !me.first_update.swap(true, Ordering::SeqCst) {
                let ms = me.spawned.elapsed().as_secs_f64() * 1000.0;
                let data = json!({ "ms_since_spawn": ms });
                me.record(Record::Event("agent_first_update", data)).await;
            }
        })
    }

    fn started(&self, info: AgentInfo) -> BoxFuture<()> {
        let me = self.clone();
        Box::pin(async move {
            let data = json!({"name": info.name, "version": info.version, "pid": me.pid});
            me.record(Record::Event("agent_started", data)).await;
        })
    }

    fn update(&self, update: Update) -> BoxFuture<()> {
        if let Update::Text(chunk) = &update {
            let mut text = lock(&self.rounds.text);
            if text.len() < MAX_TEXT {
                text.push_str(chunk);
            }
        }
        let me = self.clone();
        Box::pin(async move { me.record(Record::Update(update)).await })
    }

    fn interrupt(&self) -> BoxFuture<()> {
        let me = self.clone();
        Box::pin(async move {
            let Some(mut held) = me.daemon.upgrade().map(|d| d.held()) else {
                return std::future::pending().await;
            };
            let run_id = me.run.run_id.clone();
            let mut line = me.rounds.line.lock().await;
            tokio::select! {
                paused = async { held.wait_for(|h| h.contains(&run_id)).await.map(|_| ()) } => {
                    if paused.is_err() {
                        return std::future::pending().await;
                    }
                    me.record(Record::Event("agent_interrupted", json!({ "why": "paused" }))).await;
                }
                asked = line.recv() => match asked {
                    Some(asked) => {
                        *lock(&me.rounds.asked) = Some(asked);
                        me.record(Record::Event("agent_interrupted", json!({ "why": "prompted" }))).await;
                    }
                    None => return std::future::pending().await,
                },
            }
            me.rounds.resume.store(true, Ordering::SeqCst);
        })
    }

    fn next_turn(&self, end: TurnEnd) -> BoxFuture<Option<String>> {
        let me = self.clone();
        Box::pin(async move {
            me.rounds.between.store(true, Ordering::SeqCst);
            let next = me.next_turn_of(end).await;
            me.rounds.between.store(false, Ordering::SeqCst);
            me.touch();
            if next.is_some() {
                let round = me.rounds.count.load(Ordering::SeqCst);
                me.record(Record::Event("agent_round", json!({ "round": round + 1 })))
                    .await;
            }
            next
        })
    }

    fn permission(&self, ask: PermissionAsk) -> BoxFuture<PermissionAnswer> {
        let asking = Asking::new(self);
        Box::pin(async move {
            let answer = asking.0.ask(ask).await;
            drop(asking);
            answer
        })
    }

    fn elicit(&self, ask: ElicitAsk) -> BoxFuture<ElicitAnswer> {
        let asking = Asking::new(self);
        Box::pin(async move {
            let mut ended = asking.0.ended.subscribe();
            let answer = tokio::select! {
                answer = asking.0.fill(ask) => answer,
                _ = ended.wait_for(|e| *e) => ElicitAnswer::Cancel,
            };
            drop(asking);
            answer
        })
    }

    fn read_text(
        &self,
        path: PathBuf,
        line: Option<u32>,
        limit: Option<u32>,
    ) -> BoxFuture<Result<String, String>> {
        let checked = self
            .permits("read_file")
            .and_then(|()| confine(&self.workdir, &path.to_string_lossy()));
        Box::pin(async move {
            let path = checked?;
            let shown = path.display().to_string();
            // Regular files only, at most what a tool may return (a FIFO or a huge file must
            // not hold a thread or the daemon's memory).
            let text = tokio::task::spawn_blocking(move || {
                crate::runners::wasm::read_capped(&path, &shown)
            })
            .await
            .map_err(|e| e.to_string())??;
            let start = line.unwrap_or(1).max(1) as usize - 1;
            if start == 0 && limit.is_none() {
                return Ok(text);
            }
            let take = limit.map_or(usize::MAX, |l| l as usize);
            Ok(text
                .split_inclusive('\n')
                .skip(start)
                .take(take)
                .collect::<String>())
        })
    }

    fn write_text(&self, path: PathBuf, content: String) -> BoxFuture<Result<(), String>> {
        let checked = self
            .permits("write_file")
            .and_then(|()| confine(&self.workdir, &path.to_string_lossy()));
        Box::pin(async move {
            let path = checked?;
            if let Some(parent) = path.parent() {
                tokio::fs::create_dir_all(parent)
                    .await
                    .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
            }
            tokio::fs::write(&path, content.as_bytes())
                .await
                .map_err(|e| format!("cannot write {}: {e}", path.display()))
        })
    }

    fn terminal_create(&self, mut spec: TerminalSpec) -> Result<String, String> {
        self.permits("run_command")?;
        let cwd = match &spec.cwd {
            Some(dir) => confine(&self.workdir, &dir.to_string_lossy())?,
            None => self.workdir.clone(),
        };
        // Marked with the run, so that a daemon started after a kill -9 finds and ends it.
        spec.env.retain(|(k, _)| k != crate::procs::RUN_MARKER);
        spec.env
            .push((crate::procs::RUN_MARKER.into(), self.run.run_id.clone()));
        // In the agent's sandbox, like the agent itself: the command sees neither the person's
        // token nor the database. The sandbox enters the run's checkout; a shell then enters
        // the asked directory (inside it) and runs the command.
        if self.sandbox.layer() != crate::sandbox::LayerKind::Off {
            let mut argv = vec![
                "sh".to_string(),
                "-c".to_string(),
                r#"cd "$0" && exec "$@""#.to_string(),
                cwd.display().to_string(),
                std::mem::take(&mut spec.command),
            ];
            argv.append(&mut spec.args);
            let mut wrapped = self.sandbox.argv(argv, &self.workdir)?.into_iter();
            spec.command = wrapped.next().unwrap_or_default();
            spec.args = wrapped.collect();
        }
        self.terminals.create(spec, &cwd)
    }

    fn terminal_output(&self, id: &str) -> Result<TerminalOutput, String> {
        self.terminals.output(id)
    }

    fn terminal_wait(&self, id: &str) -> BoxFuture<Result<TerminalExit, String>> {
        self.terminals.wait(id)
    }

    fn terminal_kill(&self, id: &str) -> Result<(), String> {
        self.terminals.kill(id)
    }

    fn terminal_release(&self, id: &str) -> Result<(), String> {
        self.terminals.release(id)
    }
}

/// Agents that are an ACP agent CLI (`runner: "acp:<agent>"`): its process in its own group,
/// driven by a task that hears its updates and answers its requests.
pub struct AcpRunner;

impl super::Runner for AcpRunner {
    fn kind(&self) -> super::Kind {
        super::Kind::Acp
    }

    fn place(&self, table: &RunTable, launch: super::Launch) -> Result<super::Placed, String> {
        let host = launch.host.ok_or("the daemon is still starting")?;
        let log = table.log_file(&launch.log).map_err(|e| e.to_string())?;
        // The agent's words and tool calls go to the same log as its stderr (`get_run_log`).
        let transcript = log.try_clone().ok();
        let spawned = std::time::Instant::now();
        let child = spawn(
            &launch.agent,
            &launch.workdir,
            &launch.env,
            log,
            &launch.sandbox,
        )
        .map_err(|e| e.to_string())?;
        let pid = child.id().ok_or("the agent exited at once")?;
        let (run, agent, env, sandbox) = (launch.run, launch.agent, launch.env, launch.sandbox);
        Ok(super::Placed {
            pid,
            start_time: crate::runners::process::process_start_time(pid),
            // Its own process group: the group is the leader's pid.
            pgid: Some(pid),
            go: Box::new(move |table: &RunTable| {
                table.spawn_managed(run.run_id.clone(), move |stop| {
                    let started = Started {
                        child,
                        spawned,
                        transcript,
                        sandbox,
                    };
                    drive(host, run, agent, started, env, stop)
                });
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acp_tool_kinds_map_to_troupe_tool_names() {
        assert_eq!(tool_name(Some("edit"), Some("Write a.txt")), "write_file");
        assert_eq!(tool_name(Some("execute"), None), "run_command");
        let as_text = |v: Value| {
            let mut m = v.as_object().cloned().unwrap_or_default();
            command_as_text(&mut m);
            m.get("command").cloned()
        };
        assert_eq!(
            as_text(json!({ "command": ["/bin/bash", "-lc", "make test && git add -A"] })),
            Some(json!("make test && git add -A"))
        );
        assert_eq!(
            as_text(json!({ "command": ["git", "commit", "-m", "a b"] })),
            Some(json!("git commit -m 'a b'"))
        );
        assert_eq!(as_text(json!({ "cmd": "ls" })), Some(json!("ls")));
        assert_eq!(
            as_text(json!({ "command": "ls -la" })),
            Some(json!("ls -la"))
        );
        assert_eq!(as_text(json!({ "title": "Run the tests" })), None);
        assert_eq!(tool_name(Some("read"), None), "read_file");
        assert_eq!(tool_name(Some("fetch"), None), "fetch");
        assert_eq!(tool_name(Some("other"), Some("Deploy now")), "deploy");
        assert_eq!(tool_name(None, None), "other");
    }

    #[test]
    fn troupe_own_tools_are_known_by_each_clis_name_for_them() {
        for title in [
            "mcp__troupe__get_plan",
            "mcp_troupe_get_plan",
            "Tool: troupe/get_plan",
            "mcp__troupe__get_plan {\"party_id\":\"p\"}",
            "get_plan (troupe MCP Server)",
        ] {
            assert_eq!(
                super::troupe_operation(Some("other"), Some(title)),
                Some("get_plan")
            );
            assert_eq!(super::troupe_operation(None, Some(title)), Some("get_plan"));
        }
        // Another kind, another server, or no such operation: asked as any tool.
        assert_eq!(
            super::troupe_operation(Some("edit"), Some("mcp__troupe__get_plan")),
            None
        );
        assert_eq!(
            super::troupe_operation(Some("other"), Some("mcp__other__get_plan")),
            None
        );
        assert_eq!(
            super::troupe_operation(Some("other"), Some("mcp__troupe__rm_rf")),
            None
        );
        assert_eq!(
            super::troupe_operation(Some("other"), Some("Write notes.md")),
            None
        );
    }

    #[test]
    fn long_messages_are_cut_on_a_character_boundary() {
        let long = "é".repeat(MAX_TEXT);
        let kept = cut(long);
        assert!(kept.ends_with("[…]"));
        assert!(kept.len() <= MAX_TEXT + "[…]".len());
        assert_eq!(cut("short".into()), "short");
    }
}
