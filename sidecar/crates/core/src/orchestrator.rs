//! The orchestrator: the daemon's single loop for agents and parties. Every input (a command
//! from an operation, a run's exit) arrives as one closed `Event`; party inputs go to the pure
//! engine, whose new state is persisted (with its timeline events) before its actions are
//! carried out: spawn (isolation, run row, process), stop, notify. On start-up it rebuilds every
//! live party from the store and adopts or buries the processes an earlier daemon left.
//! This file holds the handle, the commands and the loop's dispatch; the party driver is
//! `party`, the run supervisor `supervisor`, start-up recovery `recovery`.

mod party;
mod patterns;
mod recovery;
mod setup;

pub use setup::forget_setup;
mod supervisor;

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use troupe_engine::{
    Action, AgentDefinition, Decision, Input, Isolation, Member, MemberStatus, NotifyTarget, Party,
    PartyStatus, Signal, Strategy,
};
use troupe_store::{
    AgentRun, MemberState, NewEvent, NewNotification, NewRun, NewSession, PartyHead, PartyRow,
    PartyState, Priority, Recipients, RunStatus, Store,
};

use crate::hub::Hub;
use crate::runners::process::{Exit, RunExit, RunTable};
use troupe_api::ApiError;
use troupe_api::layout::Layout;

use supervisor::*;
pub(crate) use supervisor::{carried_out, isolate};

/// Why a pattern run stopped before its first step ended as it did.
const STOPPED_EARLY: &str = "stopped before it started";

/// What the error of a run stopped by its budget starts with.
pub const BUDGET_STOP: &str = "stopped by its budget: ";

/// How long a member that called `complete` may take to exit before it is stopped.
const EXIT_GRACE_AFTER_COMPLETE: Duration = Duration::from_secs(5);

type Reply = oneshot::Sender<Result<(), ApiError>>;

/// Commands from operation handlers.
#[derive(Debug)]
pub enum Command {
    /// Launch a party just created (handed over as created: not read back).
    Launch {
        party: Box<crate::party::PartyView>,
        reply: Reply,
    },
    Signal {
        party_id: String,
        role: String,
        signal: Signal,
        reply: Reply,
    },
    Override {
        party_id: String,
        role: String,
        strategy: Strategy,
        reply: Reply,
    },
    Cancel {
        party_id: String,
        reply: Reply,
    },
    /// Spawn a standalone run (`start_agent`); its row exists already.
    StartRun {
        run: Box<AgentRun>,
        definition: Box<AgentDefinition>,
        reply: Reply,
    },
    /// `complete` was recorded for this run (the run as it left it).
    RunCompleted {
        run: Box<AgentRun>,
    },
    /// Stop a standalone run (`cancel_agent`); its row is already cancelled.
    StopRun {
        run_id: String,
    },
    /// The daemon is stopping: end the runs that cannot be adopted by the next daemon (ACP
    /// agents talk to this one over stdio; executor runs live in it) and, unless
    /// `leave_running`, the process members too, with all their processes; record them
    /// crashed, then stop the loop. Left running (to be adopted): runs on remote workers,
    /// sessions leading their own party, and process members when `leave_running`.
    Shutdown {
        leave_running: bool,
        reply: oneshot::Sender<Stopped>,
    },
    /// Start a pattern run (a run of an agent with patterns); its row exists already.
    StartFlow {
        run: Box<AgentRun>,
        definition: Box<AgentDefinition>,
    },
    /// A member's setup commands ended (`error`: why they failed): start it, or crash it.
    SetupDone {
        run: Box<AgentRun>,
        definition: Box<AgentDefinition>,
        error: Option<String>,
    },
    /// A run went over its budget: stop it (a member's role pauses; not a crash).
    BudgetTripped {
        run_id: String,
        reason: String,
    },
    /// A team member's turn used a team tool (broadcast, vote, conclude).
    Team {
        run_id: String,
        input: TeamAct,
        reply: Reply,
    },
    /// A pattern run's advisor deadline may have passed.
    FlowTick {
        root: String,
    },
    /// A router plugin answered for a pattern run's router node.
    FlowRouted {
        root: String,
        node: usize,
        choice: Result<(String, String), String>,
    },
    /// Time to rewrite the projects' `.troupe/agents.jsonl` that runs ended in since the last
    /// time (at most once a second: the file lists every run of the project).
    SyncMirrors,
    /// A recovery plugin answered (after its restart delay, if any) about crash `crash_count`.
    RecoveryDecided {
        party_id: String,
        role: String,
        index: u32,
        crash_count: u32,
        decision: Decision,
    },
}

/// A team tool call.
#[derive(Debug, Clone)]
pub enum TeamAct {
    Broadcast(String),
    Vote(String),
    Conclude(String),
}

/// Everything the loop reacts to.
enum Event {
    Command(Command),
    Exit(RunExit),
}

/// What a shutdown did with the runs still going.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stopped {
    /// Runs ended, with every process of theirs.
    pub ended: usize,
    /// Runs left running for the next daemon to take back.
    pub left_running: usize,
}

/// The handle operation handlers use.
#[derive(Debug, Clone)]
pub struct Orchestrator {
    commands: mpsc::UnboundedSender<Command>,
    /// Its sender goes when the loop ends.
    done: tokio::sync::watch::Receiver<()>,
}

impl Orchestrator {
    /// Sends a command and waits for its answer.
    pub async fn request(&self, make: impl FnOnce(Reply) -> Command) -> Result<(), ApiError> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(make(tx))
            .map_err(|_| ApiError::Unavailable("the daemon is shutting down".into()))?;
        rx.await
            .map_err(|_| ApiError::Unavailable("the daemon is shutting down".into()))?
    }

    /// Ends what cannot outlive this daemon, and every run's processes unless `leave_running`
    /// (see `Command::Shutdown`), and stops the loop; says what became of the runs.
    pub async fn shutdown(&self, leave_running: bool) -> Result<Stopped, ApiError> {
        let gone = || ApiError::Unavailable("the daemon is shutting down".into());
        let (reply, answer) = oneshot::channel();
        self.commands
            .send(Command::Shutdown {
                leave_running,
                reply,
            })
            .map_err(|_| gone())?;
        answer.await.map_err(|_| gone())
    }

    /// Whether a shutdown has begun (the loop takes no more commands).
    pub fn is_stopping(&self) -> bool {
        self.commands.is_closed()
    }

    /// Waits until the loop has ended.
    pub async fn stopped(&self) {
        let mut done = self.done.clone();
        // Its sender is dropped when the loop ends: that is the wait's end.
        while done.changed().await.is_ok() {}
    }

    /// Sends a command that needs no answer.
    pub fn tell(&self, command: Command) {
        if self.commands.send(command).is_err() {
            tracing::debug!("orchestrator gone; command dropped");
        }
    }
}

use crate::party::PartyView;
pub use crate::party::Snapshot;

struct LiveParty {
    party: Party,
    row: PartyRow,
    snapshot: Snapshot,
    /// The roles its members' prompts name (`playbooks::named_roles`), and how many more
    /// there are: worked out once, not at every member's start.
    named_roles: (Vec<(String, Option<String>)>, usize),
    /// The party's own fields as this loop last saved them (`None`: not saved yet).
    saved: Option<PartyHead>,
}

/// Where a party run belongs.
#[derive(Debug, Clone)]
struct MemberRef {
    party_id: String,
    role: String,
    index: u32,
    attempt: u32,
}

/// The runners' handle on the daemon, once it exists (executor and ACP runs, recovery plugins).
pub type HostCell = Arc<std::sync::OnceLock<crate::runners::Host>>;

/// Longest restart delay a recovery plugin may ask for.
const MAX_RESTART_DELAY: Duration = Duration::from_secs(3600);
/// Shortest: a restart is never immediate.
const MIN_RESTART_DELAY: Duration = Duration::from_millis(100);

struct Loop {
    daemon: HostCell,
    commands: mpsc::UnboundedSender<Command>,
    store: Store,
    hub: Arc<Hub>,
    layout: Layout,
    /// Signs each run's credential (`member_env`).
    run_key: crate::authority::RunKey,
    /// Wraps the processes of runs (`crate::sandbox`).
    sandbox: crate::sandbox::Sandbox,
    /// The egress proxies of boxed runs whose processes may still run, by run id.
    boxes: std::sync::Mutex<HashMap<String, crate::egress::Endpoint>>,
    runner: RunTable,
    parties: HashMap<String, LiveParty>,
    /// Runs of live parties, by run id.
    members: HashMap<String, MemberRef>,
    inputs: VecDeque<(String, Input)>,
    /// Pattern runs in flight, by their root run id.
    flows: HashMap<String, patterns::LiveFlow>,
    /// Runs that are steps of a pattern run: run id → (root, step).
    flow_steps: HashMap<String, (String, troupe_engine::pattern::StepId)>,
    flow_inputs: VecDeque<(String, troupe_engine::pattern::Input)>,
    /// Runs being stopped by their budget, and why.
    tripped: HashMap<String, String>,
    /// Runs stopped before they started (a pattern run whose start is still queued, a member
    /// still setting up).
    stopped_early: std::collections::HashSet<String>,
    /// Runs whose `complete` the loop has handled while their process still ran: their exit
    /// needs no look at the store (`supervisor::run_exited`).
    ended: std::collections::HashSet<String>,
    /// Members setting up their checkout: stopping one ends its setup commands.
    setups: std::sync::Mutex<HashMap<String, oneshot::Sender<()>>>,
    /// Projects (id → main checkout) whose `agents.jsonl` is due a rewrite (`SyncMirrors`).
    mirrors_due: std::collections::BTreeMap<String, std::path::PathBuf>,
    /// How long after the first mark the rewrite comes (`supervisor::MIRROR_EVERY`, longer
    /// when the last rewrite was long).
    mirror_pause: Duration,
}

/// The loop, built but not yet running: `start` it once the daemon it serves exists (recovery
/// may need the whole daemon: executor runs, recovery plugins).
pub struct UnstartedLoop {
    state: Loop,
    command_rx: mpsc::UnboundedReceiver<Command>,
    exit_rx: mpsc::UnboundedReceiver<RunExit>,
    /// Dropped when the loop ends (`Orchestrator::stopped`).
    done: tokio::sync::watch::Sender<()>,
}

impl std::fmt::Debug for UnstartedLoop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UnstartedLoop").finish_non_exhaustive()
    }
}

/// Builds the loop; commands sent to the handle wait until `UnstartedLoop::start`.
pub fn create(
    store: Store,
    hub: Arc<Hub>,
    layout: Layout,
    run_key: crate::authority::RunKey,
    sandbox: crate::sandbox::Sandbox,
    daemon: HostCell,
) -> (Orchestrator, UnstartedLoop) {
    let (commands, command_rx) = mpsc::unbounded_channel();
    let (ended, done) = tokio::sync::watch::channel(());
    let (exits, exit_rx) = mpsc::unbounded_channel();
    let runner = RunTable::new(layout.data_dir.join("runs"), exits);
    let state = Loop {
        daemon,
        commands: commands.clone(),
        store,
        hub,
        layout,
        run_key,
        sandbox,
        boxes: std::sync::Mutex::default(),
        runner,
        parties: HashMap::new(),
        members: HashMap::new(),
        inputs: VecDeque::new(),
        flows: HashMap::new(),
        flow_steps: HashMap::new(),
        flow_inputs: VecDeque::new(),
        tripped: HashMap::new(),
        stopped_early: std::collections::HashSet::new(),
        ended: std::collections::HashSet::new(),
        setups: std::sync::Mutex::default(),
        mirrors_due: std::collections::BTreeMap::new(),
        mirror_pause: supervisor::MIRROR_EVERY,
    };
    (
        Orchestrator { commands, done },
        UnstartedLoop {
            state,
            command_rx,
            exit_rx,
            done: ended,
        },
    )
}

impl UnstartedLoop {
    /// Recovers the state an earlier daemon left, then runs the loop.
    pub async fn start(self) -> anyhow::Result<()> {
        let UnstartedLoop {
            mut state,
            mut command_rx,
            mut exit_rx,
            done,
        } = self;
        state.recover().await?;
        tokio::spawn(async move {
            loop {
                // Commands first: a run's `RunCompleted` is sent before its process can exit,
                // so its exit is always heard after it (`Loop::ended`).
                let event = tokio::select! {
                    biased;
                    Some(c) = command_rx.recv() => Event::Command(c),
                    Some(e) = exit_rx.recv() => Event::Exit(e),
                    else => break,
                };
                // A shutdown takes no command after it (they fail at once).
                if matches!(event, Event::Command(Command::Shutdown { .. })) {
                    command_rx.close();
                }
                if state.handle(event).await == Next::Stop {
                    break;
                }
            }
            drop(done);
        });
        Ok(())
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// A short, branch-safe label for a party: `<name>-<first 8 of its id>`.
pub fn party_label(row: &PartyRow) -> String {
    format!(
        "{}-{}",
        row.name,
        &row.party_id[..8.min(row.party_id.len())]
    )
}

/// Whether the loop goes on after an event.
#[derive(Debug, PartialEq, Eq)]
enum Next {
    Continue,
    Stop,
}

impl Loop {
    async fn handle(&mut self, event: Event) -> Next {
        match event {
            Event::Command(Command::Shutdown {
                leave_running,
                reply,
            }) => {
                let stopped = self.shut_down(leave_running).await;
                let _caller_gone = reply.send(stopped);
                return Next::Stop;
            }
            Event::Command(Command::Launch { party, reply }) => {
                let result = self.launch(*party).await;
                let _caller_gone = reply.send(result);
            }
            Event::Command(Command::Signal {
                party_id,
                role,
                signal,
                reply,
            }) => {
                let result = self.input(&party_id, Input::Signal { role, signal }).await;
                let _caller_gone = reply.send(result);
            }
            Event::Command(Command::Override {
                party_id,
                role,
                strategy,
                reply,
            }) => {
                let result = self
                    .input(&party_id, Input::OverrideRecovery { role, strategy })
                    .await;
                let _caller_gone = reply.send(result);
            }
            Event::Command(Command::Cancel { party_id, reply }) => {
                let result = self.input(&party_id, Input::Cancel).await;
                let _caller_gone = reply.send(result);
            }
            Event::Command(Command::StartRun {
                run,
                definition,
                reply,
            }) => {
                let result = self
                    .spawn_run(&run, &definition)
                    .await
                    .map_err(ApiError::Internal);
                if let Err(e) = &result {
                    self.bury(&run.run_id, RunStatus::Crashed, e.to_string())
                        .await;
                }
                let _caller_gone = reply.send(result);
            }
            Event::Command(Command::RunCompleted { run }) => self.run_completed(&run).await,
            Event::Command(Command::StopRun { run_id }) => self.stop_any(&run_id).await,
            Event::Command(Command::StartFlow { run, definition }) => {
                if let Err(e) = self.start_flow(&run, &definition).await {
                    let status = if e == STOPPED_EARLY {
                        RunStatus::Cancelled
                    } else {
                        RunStatus::Crashed
                    };
                    self.bury(&run.run_id, status, e).await;
                    if let Ok(run) = self.store.get_run(&run.run_id) {
                        self.after_run_end(&run, None, true).await;
                    }
                }
            }
            Event::Command(Command::SetupDone {
                run,
                definition,
                error,
            }) => self.setup_done(&run, &definition, error).await,
            Event::Command(Command::BudgetTripped { run_id, reason }) => {
                self.budget_tripped(run_id, reason).await
            }
            Event::Command(Command::Team {
                run_id,
                input,
                reply,
            }) => {
                let result = self.team_act(&run_id, input).await;
                let _caller_gone = reply.send(result);
            }
            Event::Command(Command::FlowTick { root }) => {
                self.flow_input(&root, troupe_engine::pattern::Input::Tick)
                    .await
            }
            Event::Command(Command::FlowRouted { root, node, choice }) => {
                self.flow_input(
                    &root,
                    troupe_engine::pattern::Input::Routed { node, choice },
                )
                .await
            }
            Event::Command(Command::RecoveryDecided {
                party_id,
                role,
                index,
                crash_count,
                decision,
            }) => {
                if let Err(e) = self
                    .input(
                        &party_id,
                        Input::RecoveryDecided {
                            role,
                            index,
                            crash_count,
                            decision,
                        },
                    )
                    .await
                {
                    tracing::debug!(party = %party_id, error = %e, "recovery decision not applied");
                }
            }
            Event::Command(Command::SyncMirrors) => {
                let started = std::time::Instant::now();
                for (project, root) in std::mem::take(&mut self.mirrors_due) {
                    self.sync_mirror(&project, &root);
                }
                self.mirror_pause =
                    supervisor::MIRROR_EVERY.max(started.elapsed() * supervisor::MIRROR_SHARE);
            }
            Event::Exit(exit) => self.run_exited(exit).await,
        }
        self.drain().await;
        Next::Continue
    }
}
