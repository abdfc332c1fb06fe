//! The orchestrator: the daemon's single loop for agents and parties. Every input (a command
//! from an operation, a run's exit) arrives as one closed `Event`; party inputs go to the pure
//! engine, whose new state is persisted (with its timeline events) before its actions are
//! carried out: spawn (isolation, run row, process), stop, notify. On start-up it rebuilds every
//! live party from the store and adopts or buries the processes an earlier daemon left.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use troupe_engine::{
    Action, AgentDefinition, Decision, Input, Isolation, Member, MemberStatus, NotifyTarget, Party,
    PartyDefinition, PartyStatus, Signal, Strategy,
};
use troupe_store::{
    AgentRun, MemberState, NewEvent, NewNotification, NewRun, NewSession, PartyRow, PartyState,
    Priority, Recipients, RunStatus, Store,
};

use crate::hub::Hub;
use crate::runners::process::{Exit, RunExit, Runner, SpawnSpec};
use troupe_api::ApiError;
use troupe_api::layout::Layout;

/// How long a member that called `complete` may take to exit before it is stopped.
const EXIT_GRACE_AFTER_COMPLETE: Duration = Duration::from_secs(5);

type Reply = oneshot::Sender<Result<(), ApiError>>;

/// Commands from operation handlers.
#[derive(Debug)]
pub enum Command {
    Launch {
        party_id: String,
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
    /// `complete` was recorded for this run.
    RunCompleted {
        run_id: String,
    },
    /// Stop a standalone run (`cancel_agent`); its row is already cancelled.
    StopRun {
        run_id: String,
    },
    /// The daemon is stopping: end the runs that cannot be adopted by the next daemon (ACP
    /// agents talk to this one over stdio; executor runs live in it) with all their processes,
    /// record them crashed, then stop the loop. Process members keep running, to be adopted.
    Shutdown {
        reply: Reply,
    },
    /// A recovery plugin answered (after its restart delay, if any) about crash `crash_count`.
    RecoveryDecided {
        party_id: String,
        role: String,
        index: u32,
        crash_count: u32,
        decision: Decision,
    },
}

/// Everything the loop reacts to.
enum Event {
    Command(Command),
    Exit(RunExit),
}

/// The handle operation handlers use.
#[derive(Debug, Clone)]
pub struct Orchestrator {
    commands: mpsc::UnboundedSender<Command>,
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

    /// Ends what cannot outlive this daemon (see `Command::Shutdown`) and stops the loop.
    pub async fn shutdown(&self) -> Result<(), ApiError> {
        self.request(|reply| Command::Shutdown { reply }).await
    }

    /// Sends a command that needs no answer.
    pub fn tell(&self, command: Command) {
        if self.commands.send(command).is_err() {
            tracing::debug!("orchestrator gone; command dropped");
        }
    }
}

/// The frozen launch snapshot of a party: its definition and the agent definitions it uses.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Snapshot {
    pub party: PartyDefinition,
    pub agents: std::collections::BTreeMap<String, AgentDefinition>,
}

struct LiveParty {
    party: Party,
    row: PartyRow,
    snapshot: Snapshot,
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
    runner: Runner,
    parties: HashMap<String, LiveParty>,
    /// Runs of live parties, by run id.
    members: HashMap<String, MemberRef>,
    inputs: VecDeque<(String, Input)>,
}

/// The loop, built but not yet running: `start` it once the daemon it serves exists (recovery
/// may need the whole daemon: executor runs, recovery plugins).
pub struct Boot {
    state: Loop,
    command_rx: mpsc::UnboundedReceiver<Command>,
    exit_rx: mpsc::UnboundedReceiver<RunExit>,
}

impl std::fmt::Debug for Boot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Boot").finish_non_exhaustive()
    }
}

/// Builds the loop; commands sent to the handle wait until `Boot::start`.
pub fn create(
    store: Store,
    hub: Arc<Hub>,
    layout: Layout,
    daemon: HostCell,
) -> (Orchestrator, Boot) {
    let (commands, command_rx) = mpsc::unbounded_channel();
    let (exits, exit_rx) = mpsc::unbounded_channel();
    let runner = Runner::new(layout.data_dir.join("runs"), exits);
    let state = Loop {
        daemon,
        commands: commands.clone(),
        store,
        hub,
        layout,
        runner,
        parties: HashMap::new(),
        members: HashMap::new(),
        inputs: VecDeque::new(),
    };
    (
        Orchestrator { commands },
        Boot {
            state,
            command_rx,
            exit_rx,
        },
    )
}

impl Boot {
    /// Recovers the state an earlier daemon left, then runs the loop.
    pub async fn start(self) -> anyhow::Result<()> {
        let Boot {
            mut state,
            mut command_rx,
            mut exit_rx,
        } = self;
        state.recover().await?;
        tokio::spawn(async move {
            loop {
                let event = tokio::select! {
                    Some(c) = command_rx.recv() => Event::Command(c),
                    Some(e) = exit_rx.recv() => Event::Exit(e),
                    else => break,
                };
                if state.handle(event).await == Flow::Stop {
                    break;
                }
            }
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

fn parse_member_status(s: &str) -> MemberStatus {
    serde_json::from_value(Value::String(s.into())).unwrap_or(MemberStatus::Failed)
}

fn parse_party_status(s: &str) -> PartyStatus {
    serde_json::from_value(Value::String(s.into())).unwrap_or(PartyStatus::Failed)
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
enum Flow {
    Continue,
    Stop,
}

impl Loop {
    async fn handle(&mut self, event: Event) -> Flow {
        match event {
            Event::Command(Command::Shutdown { reply }) => {
                self.shut_down().await;
                let _caller_gone = reply.send(Ok(()));
                return Flow::Stop;
            }
            Event::Command(Command::Launch { party_id, reply }) => {
                let result = self.launch(&party_id).await;
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
            Event::Command(Command::RunCompleted { run_id }) => self.run_completed(&run_id).await,
            Event::Command(Command::StopRun { run_id }) => {
                self.runner.stop(&run_id);
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
            Event::Exit(exit) => self.run_exited(exit).await,
        }
        self.drain().await;
        Flow::Continue
    }

    /// The daemon is stopping: the runs no later daemon can adopt are recorded crashed (so
    /// their pending approvals expire) and every process of theirs is ended.
    async fn shut_down(&mut self) {
        let runs = match self.store.list_runs(None, None, true) {
            Ok(runs) => runs,
            Err(e) => {
                tracing::error!(error = %e, "cannot list the runs to stop");
                return;
            }
        };
        let mut procs = Vec::new();
        for run in runs {
            let runner = run
                .definition
                .get("runner")
                .and_then(Value::as_str)
                .unwrap_or("process")
                .to_string();
            if !runner.starts_with("acp:") && !runner.starts_with("wasm:") {
                continue;
            }
            self.bury(&run.run_id, RunStatus::Crashed, not_adoptable(&runner))
                .await;
            self.runner.stop(&run.run_id);
            procs.push(crate::procs::RunProcesses {
                run_id: run.run_id.clone(),
                pgid: run.pgid.and_then(|g| u32::try_from(g).ok()),
                since: run.pid_start,
            });
        }
        let killed = crate::procs::end(&procs, crate::runners::process::TERM_GRACE).await;
        tracing::info!(
            runs = procs.len(),
            killed,
            "runs that cannot outlive the daemon were ended"
        );
    }

    /// Applies an input from an operation: errors go back to the caller.
    async fn input(&mut self, party_id: &str, input: Input) -> Result<(), ApiError> {
        if !self.parties.contains_key(party_id) {
            let (row, _) = self.store.get_party(party_id)?;
            return Err(ApiError::Conflict(format!(
                "party {party_id} is {}; it no longer runs",
                row.status
            )));
        }
        self.step(party_id, input).await
    }

    async fn launch(&mut self, party_id: &str) -> Result<(), ApiError> {
        let (row, members) = self.store.get_party(party_id)?;
        self.load(row, &members)?;
        self.step(party_id, Input::Launch).await
    }

    /// Builds the engine's party from its rows and makes it live.
    fn load(&mut self, row: PartyRow, members: &[troupe_store::MemberRow]) -> Result<(), ApiError> {
        let snapshot: Snapshot = serde_json::from_value(row.snapshot.clone())
            .map_err(|e| ApiError::Internal(format!("party {} snapshot: {e}", row.party_id)))?;
        let mut party = Party::new(snapshot.party.clone());
        party.status = parse_party_status(&row.status);
        party.overrides = serde_json::from_value(row.overrides.clone()).unwrap_or_default();
        party.paused = serde_json::from_value(row.paused.clone()).unwrap_or_default();
        party.members = members
            .iter()
            .map(|m| Member {
                role: m.role_name.clone(),
                index: u32::try_from(m.instance_index).unwrap_or(0),
                status: parse_member_status(&m.status),
                crash_count: u32::try_from(m.crash_count).unwrap_or(0),
                attempts: u32::try_from(m.attempts).unwrap_or(0),
                started_at_ms: m.started_at_ms.and_then(|v| u64::try_from(v).ok()),
                finished_at_ms: m.finished_at_ms.and_then(|v| u64::try_from(v).ok()),
            })
            .collect();
        self.parties.insert(
            row.party_id.clone(),
            LiveParty {
                party,
                row,
                snapshot,
            },
        );
        Ok(())
    }

    /// Processes inputs queued by earlier steps (a spawn that failed, a recovered exit).
    async fn drain(&mut self) {
        while let Some((party_id, input)) = self.inputs.pop_front() {
            if self.parties.contains_key(&party_id)
                && let Err(e) = self.step(&party_id, input).await
            {
                tracing::warn!(party = %party_id, error = %e, "queued party input failed");
            }
        }
    }

    /// One engine step: decide, persist, act.
    async fn step(&mut self, party_id: &str, input: Input) -> Result<(), ApiError> {
        let now = now_ms();
        let Some(live) = self.parties.get_mut(party_id) else {
            return Err(ApiError::NotFound {
                what: "live party".into(),
                id: party_id.into(),
            });
        };
        let input_event = describe_input(&input);
        // Only members the step changed are written back.
        let before = live.party.members.clone();
        let actions = live
            .party
            .step(input, now)
            .map_err(|e| ApiError::Conflict(e.to_string()))?;
        let row = live.row.clone();
        let mut events = vec![NewEvent {
            kind: input_event.0,
            project_id: Some(row.project_id.clone()),
            party_id: Some(party_id.to_string()),
            data: input_event.1,
            ..NewEvent::default()
        }];
        let mut notifications = Vec::new();
        let mut reason = None;
        for action in &actions {
            let (kind, data) = match action {
                Action::Spawn {
                    role,
                    index,
                    attempt,
                } => (
                    "member_spawning",
                    json!({ "role": role, "index": index, "attempt": attempt }),
                ),
                Action::Stop { role, index } => {
                    ("member_stopping", json!({ "role": role, "index": index }))
                }
                Action::Notify { target, text } => {
                    // A notice for the leader when no leader member is live (none, it
                    // finished, it is being restarted) goes to the person instead.
                    if *target == NotifyTarget::User
                        || *target == NotifyTarget::Leader && !leader_running(live)
                    {
                        notifications.push(NewNotification {
                            project_id: Some(row.project_id.clone()),
                            party_id: Some(party_id.to_string()),
                            kind: "party".into(),
                            text: format!("{}: {text}", row.name),
                            data: json!({ "party_id": party_id }),
                        });
                    }
                    ("notification", json!({ "target": target, "text": text }))
                }
                Action::RoleCompleted { role } => ("role_completed", json!({ "role": role })),
                Action::ConsultRecovery {
                    role,
                    index,
                    plugin,
                    crash_count,
                    ..
                } => (
                    "recovery_consulting",
                    json!({ "role": role, "index": index, "plugin": plugin, "crash_count": crash_count }),
                ),
                Action::Finished {
                    status,
                    reason: why,
                } => {
                    reason = Some(why.clone());
                    notifications.push(NewNotification {
                        project_id: Some(row.project_id.clone()),
                        party_id: Some(party_id.to_string()),
                        kind: "party_finished".into(),
                        text: format!("party {} {}: {why}", row.name, status.as_str()),
                        data: json!({ "party_id": party_id, "status": status }),
                    });
                    ("party_finished", json!({ "status": status, "reason": why }))
                }
            };
            events.push(NewEvent {
                kind: kind.into(),
                project_id: Some(row.project_id.clone()),
                party_id: Some(party_id.to_string()),
                data,
                ..NewEvent::default()
            });
        }
        let state = PartyState {
            status: live.party.status.as_str().into(),
            status_reason: reason.or(row.status_reason.clone()),
            overrides: serde_json::to_value(&live.party.overrides).unwrap_or(Value::Null),
            paused: serde_json::to_value(&live.party.paused).unwrap_or(Value::Null),
            members: live
                .party
                .members
                .iter()
                .zip(&before)
                .filter(|(now, was)| now != was)
                .map(|(m, _)| MemberState {
                    role_name: m.role.clone(),
                    instance_index: i64::from(m.index),
                    status: m.status.as_str().into(),
                    crash_count: i64::from(m.crash_count),
                    attempts: i64::from(m.attempts),
                    started_at_ms: m.started_at_ms.and_then(|v| i64::try_from(v).ok()),
                    finished_at_ms: m.finished_at_ms.and_then(|v| i64::try_from(v).ok()),
                })
                .collect(),
        };
        let notified = !notifications.is_empty();
        self.store
            .save_party_state(party_id.to_string(), state, events, notifications)
            .await?;
        if notified {
            self.hub.bump(crate::hub::NOTIFICATIONS_KEY);
        }
        let mut spawns = Vec::new();
        for action in actions {
            match action {
                Action::Spawn {
                    role,
                    index,
                    attempt,
                } => spawns.push((role, index, attempt)),
                other => self.act(party_id, other).await,
            }
        }
        if !spawns.is_empty() {
            self.spawn_members(party_id, spawns).await;
        }
        Ok(())
    }

    async fn act(&mut self, party_id: &str, action: Action) {
        match action {
            Action::Spawn {
                role,
                index,
                attempt,
            } => {
                self.spawn_members(party_id, vec![(role, index, attempt)])
                    .await;
            }
            Action::Stop { role, index } => {
                let runs: Vec<String> = self
                    .members
                    .iter()
                    .filter(|(_, m)| m.party_id == party_id && m.role == role && m.index == index)
                    .map(|(run, _)| run.clone())
                    .collect();
                for run in runs {
                    self.runner.stop(&run);
                }
            }
            Action::Notify { target, text } => self.notify(party_id, target, &text).await,
            Action::RoleCompleted { .. } => {}
            Action::ConsultRecovery {
                role,
                index,
                plugin,
                crash_count,
                retry_limit,
                reason,
            } => {
                let Some(live) = self.parties.get(party_id) else {
                    return;
                };
                let notify = live
                    .snapshot
                    .party
                    .roles
                    .get(&role)
                    .and_then(|r| r.notify)
                    .unwrap_or(live.snapshot.party.recovery.notify);
                let ctx = troupe_plugin_host::CrashContext {
                    party: live.row.name.clone(),
                    role: role.clone(),
                    member: format!("{role}#{index}"),
                    crash_count,
                    retry_limit,
                    exit_status: reason
                        .strip_prefix("exit status ")
                        .and_then(|c| c.parse().ok()),
                    reason,
                    recent_events: self
                        .store
                        .recent_party_events(party_id, 10)
                        .unwrap_or_default(),
                    strategy: format!("plugin:{plugin}"),
                };
                let daemon = self.daemon.get().cloned();
                let commands = self.commands.clone();
                let party_id = party_id.to_string();
                tokio::spawn(async move {
                    let decision = consult(daemon, &plugin, ctx, notify).await;
                    let decision = match decision {
                        Ok((Decision::Restart, delay)) => {
                            // A plugin answering restart(0) forever must not spin the member.
                            tokio::time::sleep(delay.clamp(MIN_RESTART_DELAY, MAX_RESTART_DELAY))
                                .await;
                            Decision::Restart
                        }
                        Ok((d, _)) => d,
                        Err(why) => {
                            tracing::warn!(party = %party_id, %role, index, "{why}");
                            Decision::Pause { notify, why }
                        }
                    };
                    let _gone = commands.send(Command::RecoveryDecided {
                        party_id,
                        role,
                        index,
                        crash_count,
                        decision,
                    });
                });
            }
            Action::Finished { .. } => {
                self.runner.close_log(&format!("party-{party_id}"));
                if let Some(live) = self.parties.remove(party_id) {
                    self.sync_mirror(&live.row.project_id, Path::new(&live.row.repo_root));
                }
            }
        }
    }

    /// Sends the engine's notification: to the live leader (or the person when there is none),
    /// to every live member, or (already recorded) to the person.
    async fn notify(&mut self, party_id: &str, target: NotifyTarget, text: &str) {
        let Some(live) = self.parties.get(party_id) else {
            return;
        };
        let row = live.row.clone();
        let recipients = match target {
            NotifyTarget::User => return,
            // No leader member running: `step` recorded it for the person instead.
            NotifyTarget::Leader if !leader_running(live) => return,
            NotifyTarget::Leader => match self.live_leader_session(party_id) {
                Some(s) => Recipients::Session(s),
                None => {
                    // Running, but its run is not known yet: the person hears it instead.
                    let n = NewNotification {
                        project_id: Some(row.project_id.clone()),
                        party_id: Some(party_id.to_string()),
                        kind: "party".into(),
                        text: format!("{}: {text}", row.name),
                        data: json!({ "party_id": party_id }),
                    };
                    match self.store.add_notification(n).await {
                        Ok(_) => self.hub.bump(crate::hub::NOTIFICATIONS_KEY),
                        Err(e) => tracing::warn!(party = %party_id, error = %e, "notice lost"),
                    }
                    return;
                }
            },
            NotifyTarget::Party => Recipients::Party(party_id.to_string()),
        };
        let result = crate::system::send_system(
            &self.store,
            &self.hub,
            &row.repo_root,
            recipients,
            format!("[{}] {text}", row.name),
            Priority::High,
            None,
        )
        .await;
        if let Err(e) = result {
            tracing::warn!(party = %party_id, error = %e, "party notification not delivered");
        }
    }

    fn live_leader_session(&self, party_id: &str) -> Option<String> {
        let live = self.parties.get(party_id)?;
        let leader = live.snapshot.party.leader()?;
        let running = live
            .party
            .members
            .iter()
            .any(|m| m.role == leader && m.status == MemberStatus::Running);
        if !running {
            return None;
        }
        let run = self
            .members
            .iter()
            .find(|(_, m)| m.party_id == party_id && m.role == leader)?
            .0;
        self.store.get_run(run).ok().map(|r| r.session_id)
    }

    /// Starts one member: its checkout, its run (and session), its process. Touches nothing
    /// but the store and the runner, so a step's spawns run concurrently (and their writes share
    /// group commits). Returns the run id and whether the member is isolated.
    async fn spawn_member(
        &self,
        party_id: &str,
        role: &str,
        index: u32,
        attempt: u32,
    ) -> Result<(String, bool), String> {
        let live = self.parties.get(party_id).ok_or("the party is not live")?;
        let row = live.row.clone();
        let role_def = live
            .snapshot
            .party
            .roles
            .get(role)
            .ok_or_else(|| format!("no role {role}"))?
            .clone();
        let agent = live
            .snapshot
            .agents
            .get(&role_def.agent)
            .ok_or_else(|| {
                format!(
                    "agent definition {} missing from the snapshot",
                    role_def.agent
                )
            })?
            .clone();
        let repo_root = PathBuf::from(&row.repo_root);
        let label = party_label(&row);
        let (workdir, branch) = isolate(
            &self.layout,
            &repo_root,
            agent.isolation,
            &label,
            role,
            index,
        )
        .await?;
        if agent.isolation != Isolation::None {
            self.store
                .set_member_checkout(
                    party_id.into(),
                    role.into(),
                    i64::from(index),
                    workdir.display().to_string(),
                    branch.clone(),
                )
                .await
                .map_err(|e| e.to_string())?;
        }
        let mut prompt = String::new();
        for part in [agent.instructions.as_deref(), role_def.prompt.as_deref()]
            .into_iter()
            .flatten()
        {
            prompt.push_str(part);
            prompt.push('\n');
        }
        if let Some(inputs) = &row.inputs {
            prompt.push_str(&format!("Inputs: {inputs}\n"));
        }
        let project_name = repo_root
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let (run, _) = self
            .store
            .create_run(NewRun {
                agent_name: agent.name.clone(),
                definition: serde_json::to_value(&agent).map_err(|e| e.to_string())?,
                session: NewSession {
                    cli: agent.runner.clone(),
                    cwd: workdir.display().to_string(),
                    project_root: row.repo_root.clone(),
                    project_name,
                    external_id: None,
                    parent_session_id: row.created_by_session_id.clone(),
                    spawned_by_agent_id: None,
                    party_id: Some(party_id.to_string()),
                },
                party: Some((party_id.to_string(), role.to_string(), i64::from(index))),
                attempt: i64::from(attempt),
                prompt,
                task_id: row.task_id.clone(),
                timeout_ms: agent.timeout_secs.map(|s| (s * 1000.0) as i64),
                workdir: Some(workdir.display().to_string()),
            })
            .await
            .map_err(|e| e.to_string())?;
        if let Err(e) = self.spawn_run(&run, &agent).await {
            self.bury(
                &run.run_id,
                RunStatus::Crashed,
                format!("could not start: {e}"),
            )
            .await;
            return Err(e);
        }
        Ok((run.run_id, agent.isolation != Isolation::None))
    }

    /// Spawns a step's members concurrently, then registers them; a member that cannot start
    /// is reported to its party as crashed.
    async fn spawn_members(&mut self, party_id: &str, spawns: Vec<(String, u32, u32)>) {
        let results = futures_util::future::join_all(
            spawns
                .iter()
                .map(|(role, index, attempt)| self.spawn_member(party_id, role, *index, *attempt)),
        )
        .await;
        let mut isolated = false;
        for ((role, index, attempt), result) in spawns.into_iter().zip(results) {
            match result {
                Ok((run_id, iso)) => {
                    isolated |= iso;
                    self.members.insert(
                        run_id,
                        MemberRef {
                            party_id: party_id.to_string(),
                            role,
                            index,
                            attempt,
                        },
                    );
                }
                Err(reason) => {
                    tracing::warn!(party = %party_id, %role, index, %reason, "member did not start");
                    self.inputs.push_back((
                        party_id.to_string(),
                        Input::Crashed {
                            role,
                            index,
                            reason: format!("could not start: {reason}"),
                        },
                    ));
                }
            }
        }
        if isolated && let Some(live) = self.parties.get(party_id) {
            self.sync_mirror(&live.row.project_id, Path::new(&live.row.repo_root));
        }
    }

    /// Starts a run's process and records it.
    async fn spawn_run(&self, run: &AgentRun, agent: &AgentDefinition) -> Result<(), String> {
        if crate::runners::wasm::plugin_of(agent).is_some() {
            let daemon = self
                .daemon
                .get()
                .cloned()
                .ok_or("the daemon is still starting")?;
            // An in-daemon run carries the daemon's own pid: after a restart it reads as gone.
            let pid = std::process::id();
            self.store
                .run_started(
                    run.run_id.clone(),
                    i64::from(pid),
                    crate::runners::process::process_start_time(pid),
                    None,
                )
                .await
                .map_err(|e| e.to_string())?;
            let timeout = agent
                .timeout_secs
                .and_then(|s| Duration::try_from_secs_f64(s).ok());
            self.runner.spawn_task(
                run.run_id.clone(),
                timeout,
                crate::runners::wasm::run(daemon, run.clone(), agent.clone()),
            );
            return Ok(());
        }
        let workdir = PathBuf::from(run.workdir.clone().unwrap_or_else(|| ".".into()));
        let env = member_env(
            &self.layout,
            run,
            agent,
            self.parties.get(run.party_id.as_deref().unwrap_or("")),
        );
        if crate::runners::acp::agent_of(agent).is_some() {
            let daemon = self
                .daemon
                .get()
                .cloned()
                .ok_or("the daemon is still starting")?;
            let log = self
                .runner
                .log_file(&match &run.party_id {
                    Some(party) => format!("party-{party}"),
                    None => run.run_id.clone(),
                })
                .map_err(|e| e.to_string())?;
            let spawned = std::time::Instant::now();
            let child = crate::runners::acp::spawn(agent, &workdir, &env, log)
                .map_err(|e| e.to_string())?;
            let pid = child.id().ok_or("the agent exited at once")?;
            // Its own process group: the group is the leader's pid.
            self.store
                .run_started(
                    run.run_id.clone(),
                    i64::from(pid),
                    crate::runners::process::process_start_time(pid),
                    Some(i64::from(pid)),
                )
                .await
                .map_err(|e| e.to_string())?;
            let (run, agent) = (run.clone(), agent.clone());
            self.runner.spawn_managed(run.run_id.clone(), move |stop| {
                crate::runners::acp::drive(daemon, run, agent, child, spawned, env, stop)
            });
            return Ok(());
        }
        let argv = agent
            .command
            .clone()
            .ok_or_else(|| format!("agent {} has no command", agent.name))?;
        let timeout = agent
            .timeout_secs
            .and_then(|s| Duration::try_from_secs_f64(s).ok());
        let (pid, start) = self
            .runner
            .spawn(SpawnSpec {
                run_id: run.run_id.clone(),
                log: match &run.party_id {
                    Some(party) => format!("party-{party}"),
                    None => run.run_id.clone(),
                },
                argv,
                cwd: workdir,
                env,
                timeout,
            })
            .map_err(|e| e.to_string())?;
        self.store
            .run_started(
                run.run_id.clone(),
                i64::from(pid),
                start,
                Some(i64::from(pid)),
            )
            .await
            .map_err(|e| e.to_string())?;
        Ok(())
    }

    /// Records a run's end (when nothing recorded it yet).
    async fn bury(&self, run_id: &str, status: RunStatus, error: String) {
        match self
            .store
            .finish_run(run_id.to_string(), status, None, Some(error))
            .await
        {
            Ok(end) => crate::hub::announce_expired(&self.hub, &end.expired_approvals),
            Err(e) => tracing::warn!(run = %run_id, error = %e, "cannot record a run's end"),
        }
    }

    async fn run_exited(&mut self, exit: RunExit) {
        let status = match exit.exit {
            Exit::TimedOut => RunStatus::Timeout,
            Exit::Stopped => RunStatus::Cancelled,
            _ => RunStatus::Crashed,
        };
        let end = match self
            .store
            .finish_run(
                exit.run_id.clone(),
                status,
                None,
                Some(exit.exit.describe()),
            )
            .await
        {
            Ok(end) => end,
            Err(e) => {
                tracing::warn!(run = %exit.run_id, error = %e, "run exit not recorded");
                return;
            }
        };
        crate::hub::announce_expired(&self.hub, &end.expired_approvals);
        self.after_run_end(&end.run, Some(&exit.exit), end.changed)
            .await;
    }

    async fn run_completed(&mut self, run_id: &str) {
        let Ok(run) = self.store.get_run(run_id) else {
            return;
        };
        self.after_run_end(&run, None, true).await;
        // Give the process a moment to exit by itself, then stop it.
        if self.runner.is_running(run_id) {
            let runner = self.runner.clone();
            let run_id = run_id.to_string();
            tokio::spawn(async move {
                tokio::time::sleep(EXIT_GRACE_AFTER_COMPLETE).await;
                runner.stop(&run_id);
            });
        }
    }

    /// Feeds a finished run to its party (if it is the member's current attempt), or tells a
    /// standalone run's parent how it went. `changed`: this event is what ended the run (not a
    /// process exiting after its `complete`), so its mirrors need rewriting.
    async fn after_run_end(&mut self, run: &AgentRun, exit: Option<&Exit>, changed: bool) {
        // Mirror first: once the party's new state is visible, its files must be settled.
        if changed && run.party_id.is_some() {
            self.write_agent_state(run);
        }
        if let Some(m) = self.members.get(&run.run_id).cloned() {
            let current = self
                .parties
                .get(&m.party_id)
                .and_then(|live| {
                    live.party
                        .members
                        .iter()
                        .find(|x| x.role == m.role && x.index == m.index)
                })
                .is_some_and(|x| x.attempts == m.attempt && x.status == MemberStatus::Running);
            if exit.is_some() {
                self.members.remove(&run.run_id);
            }
            if current {
                let input = if run.status.is_completed() {
                    Input::Completed {
                        role: m.role.clone(),
                        index: m.index,
                    }
                } else {
                    Input::Crashed {
                        role: m.role.clone(),
                        index: m.index,
                        reason: run
                            .error
                            .clone()
                            .unwrap_or_else(|| run.status.as_str().into()),
                    }
                };
                if let Err(e) = self.step(&m.party_id, input).await {
                    tracing::warn!(party = %m.party_id, error = %e, "member result not applied");
                }
            }
            return;
        }
        if run.party_id.is_none() && changed {
            self.tell_parent(run).await;
            self.write_agent_state(run);
        }
    }

    async fn tell_parent(&self, run: &AgentRun) {
        let Some(parent) = &run.parent_session_id else {
            return;
        };
        let output = run
            .result
            .as_ref()
            .and_then(|r| r.get("output"))
            .and_then(Value::as_str)
            .unwrap_or("");
        let text = match &run.error {
            Some(e) if !run.status.is_completed() => {
                format!(
                    "agent {} ({}) ended {}: {e}",
                    run.agent_name,
                    run.run_id,
                    run.status.as_str()
                )
            }
            _ => format!(
                "agent {} ({}) finished {}: {output}",
                run.agent_name,
                run.run_id,
                run.status.as_str()
            ),
        };
        let result = async {
            let parent = self.store.get_session(parent)?;
            let project = self.store.get_project(&parent.project_id)?;
            crate::system::send_system(
                &self.store,
                &self.hub,
                &project.root_path,
                Recipients::Session(parent.session_id),
                text,
                Priority::Normal,
                Some(format!("run-end-{}", run.run_id)),
            )
            .await
        }
        .await;
        if let Err(e) = result {
            tracing::debug!(run = %run.run_id, error = %e, "parent not told about its agent");
        }
    }

    /// Rebuilds live parties and runs after a (re)start.
    async fn recover(&mut self) -> anyhow::Result<()> {
        // 1. Runs an earlier daemon left: adopt the live processes that can be adopted, end
        //    every process of the rest (its whole group and whatever carries its run id, the
        //    agent CLI's own children included) and bury them.
        let mut adopted = std::collections::HashSet::new();
        let mut ended = Vec::new();
        for run in self.store.list_runs(None, None, true)? {
            let alive = run
                .pid
                .and_then(|p| u32::try_from(p).ok())
                .filter(|p| crate::runners::process::is_alive(*p, run.pid_start));
            // An ACP agent talked to the daemon that stopped over its stdio, and an in-daemon
            // run lived in it: neither can be taken over.
            let runner = run
                .definition
                .get("runner")
                .and_then(serde_json::Value::as_str)
                .unwrap_or("process");
            let adoptable = !runner.starts_with("acp:") && !runner.starts_with("wasm:");
            let procs = crate::procs::RunProcesses {
                run_id: run.run_id.clone(),
                pgid: run.pgid.and_then(|g| u32::try_from(g).ok()),
                since: run.pid_start,
            };
            match alive {
                Some(pid) if adoptable && run.pgid.is_some() => {
                    let left = run
                        .timeout_ms
                        .map(|t| Duration::from_millis(u64::try_from(t).unwrap_or(0)));
                    tracing::info!(run = %run.run_id, pid, "adopting a running agent");
                    adopted.insert(run.run_id.clone());
                    self.runner
                        .adopt(run.run_id.clone(), pid, run.pid_start, left);
                }
                _ if run.status == RunStatus::Pending => {
                    ended.push((
                        procs,
                        RunStatus::Cancelled,
                        "never started: the daemon stopped first".to_string(),
                    ));
                }
                Some(_) => {
                    ended.push((procs, RunStatus::Crashed, not_adoptable(runner)));
                }
                None => {
                    ended.push((procs, RunStatus::Crashed, Exit::Vanished.describe()));
                }
            }
        }
        // Runs that ended (before or now) whose processes are still about: a member that
        // completed just before a kill -9, a child that left its group.
        let mut leftovers: Vec<crate::procs::RunProcesses> =
            ended.iter().map(|(p, _, _)| p.clone()).collect();
        for run_id in crate::procs::marked_runs() {
            if adopted.contains(&run_id) || leftovers.iter().any(|p| p.run_id == run_id) {
                continue;
            }
            // Only runs of this data dir: another daemon's runs are its own business.
            if self
                .store
                .get_run(&run_id)
                .is_ok_and(|r| r.status.is_finished())
            {
                leftovers.push(crate::procs::RunProcesses {
                    run_id,
                    pgid: None,
                    since: None,
                });
            }
        }
        let killed = crate::procs::end(&leftovers, crate::runners::process::TERM_GRACE).await;
        if killed > 0 {
            tracing::info!(
                killed,
                "processes of runs an earlier daemon left were killed"
            );
        }
        for (procs, status, why) in ended {
            self.bury(&procs.run_id, status, why).await;
        }
        // 2. Live parties, from their rows.
        for status in ["running", "pending"] {
            for row in self.store.list_parties(None, Some(status))? {
                let party_id = row.party_id.clone();
                let (row, members) = self.store.get_party(&party_id)?;
                if let Err(e) = self.load(row, &members) {
                    tracing::error!(party = %party_id, error = %e, "cannot resume a party");
                    continue;
                }
                if status == "pending" {
                    self.inputs.push_back((party_id.clone(), Input::Launch));
                    continue;
                }
                for m in &members {
                    // A crash whose recovery plugin had not answered: ask again.
                    if m.status == "recovering" {
                        self.reconsult(&party_id, &m.role_name, m.instance_index, m.crash_count)
                            .await;
                        continue;
                    }
                    if m.status != "running" {
                        continue;
                    }
                    let index = u32::try_from(m.instance_index).unwrap_or(0);
                    let attempt = u32::try_from(m.attempts).unwrap_or(0);
                    let run = m
                        .agent_run_id
                        .as_deref()
                        .and_then(|r| self.store.get_run(r).ok());
                    match run {
                        // The spawn of this attempt never happened: do it now (not a crash).
                        None => {
                            self.spawn_or_queue(&party_id, &m.role_name, index, attempt)
                                .await
                        }
                        Some(run) if run.attempt < i64::from(attempt) => {
                            self.spawn_or_queue(&party_id, &m.role_name, index, attempt)
                                .await
                        }
                        Some(run) => {
                            self.members.insert(
                                run.run_id.clone(),
                                MemberRef {
                                    party_id: party_id.clone(),
                                    role: m.role_name.clone(),
                                    index,
                                    attempt,
                                },
                            );
                            if run.status.is_completed() {
                                self.inputs.push_back((
                                    party_id.clone(),
                                    Input::Completed {
                                        role: m.role_name.clone(),
                                        index,
                                    },
                                ));
                            } else if run.status.is_finished() {
                                self.inputs.push_back((
                                    party_id.clone(),
                                    Input::Crashed {
                                        role: m.role_name.clone(),
                                        index,
                                        reason: run
                                            .error
                                            .clone()
                                            .unwrap_or_else(|| run.status.as_str().into()),
                                    },
                                ));
                            }
                        }
                    }
                }
            }
        }
        self.drain().await;
        Ok(())
    }

    async fn reconsult(&mut self, party_id: &str, role: &str, index: i64, crashes: i64) {
        let Some(live) = self.parties.get(party_id) else {
            return;
        };
        let strategy = live.party.strategy(role);
        let retry_limit = live
            .snapshot
            .party
            .roles
            .get(role)
            .and_then(|r| r.retry_attempts)
            .unwrap_or(live.snapshot.party.recovery.max_retries);
        let index = u32::try_from(index).unwrap_or(0);
        let crash_count = u32::try_from(crashes).unwrap_or(0);
        match strategy {
            Strategy::Plugin(plugin) => {
                self.act(
                    party_id,
                    Action::ConsultRecovery {
                        role: role.to_string(),
                        index,
                        plugin,
                        crash_count,
                        retry_limit,
                        reason: "the daemon restarted while its recovery was being decided".into(),
                    },
                )
                .await;
            }
            // The strategy was overridden meanwhile: a person decides.
            _ => self.inputs.push_back((
                party_id.to_string(),
                Input::RecoveryDecided {
                    role: role.to_string(),
                    index,
                    crash_count,
                    decision: Decision::Pause {
                        notify: live.snapshot.party.recovery.notify,
                        why: "its recovery strategy changed while a plugin was deciding".into(),
                    },
                },
            )),
        }
    }

    async fn spawn_or_queue(&mut self, party_id: &str, role: &str, index: u32, attempt: u32) {
        self.spawn_members(party_id, vec![(role.to_string(), index, attempt)])
            .await;
    }

    /// `.troupe/agents.jsonl` in the main checkout: one line per isolated agent run.
    fn sync_mirror(&self, project_id: &str, repo_root: &Path) {
        let runs = match self.store.list_runs_in_project(project_id) {
            Ok(runs) => runs,
            Err(e) => {
                tracing::warn!(error = %e, "cannot list runs for the mirror");
                return;
            }
        };
        let lines: Vec<String> = runs
            .iter()
            .filter(|r| {
                r.workdir
                    .as_deref()
                    .is_some_and(|w| Path::new(w) != repo_root)
            })
            .filter_map(|r| serde_json::to_string(&mirror_line(r)).ok())
            .collect();
        if lines.is_empty() {
            return;
        }
        if let Err(e) = write_mirror(
            &repo_root.join(".troupe"),
            "agents.jsonl",
            &(lines.join("\n") + "\n"),
        ) {
            tracing::warn!(error = %e, "cannot write .troupe/agents.jsonl");
        }
    }

    /// `.troupe/agent-state.json` in an isolated run's worktree.
    fn write_agent_state(&self, run: &AgentRun) {
        let Some(workdir) = &run.workdir else { return };
        // A checkout removed by cleanup is not brought back.
        if !Path::new(workdir).exists() {
            return;
        }
        let Ok(run) = self.store.get_run(&run.run_id) else {
            return;
        };
        let isolated = serde_json::from_value::<AgentDefinition>(run.definition.clone())
            .is_ok_and(|d| d.isolation != Isolation::None);
        if !isolated {
            return;
        }
        let text = serde_json::to_string_pretty(&mirror_line(&run)).unwrap_or_default();
        if let Err(e) = write_mirror(
            &Path::new(workdir).join(".troupe"),
            "agent-state.json",
            &text,
        ) {
            tracing::debug!(error = %e, "cannot write agent-state.json");
        }
        if let Ok(project) = self.store.get_project(&run.project_id) {
            self.sync_mirror(&run.project_id, Path::new(&project.root_path));
        }
    }
}

/// Asks a recovery plugin; a plugin that cannot answer is an error the caller turns into a
/// pause (a person decides), never a crash of the daemon.
async fn consult(
    daemon: Option<crate::runners::Host>,
    plugin: &str,
    ctx: troupe_plugin_host::CrashContext,
    notify: NotifyTarget,
) -> Result<(Decision, Duration), String> {
    use troupe_plugin_host::RecoveryDecision as R;
    let daemon = daemon
        .and_then(|d| d.upgrade())
        .ok_or("the daemon is shutting down")?;
    let host = tokio::task::spawn_blocking(move || daemon.plugins().host().cloned())
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("its recovery plugin {plugin} is unavailable: {e}"))?;
    let call = troupe_plugin_host::CallContext::default();
    match host.recover(plugin, ctx, &call).await {
        Ok(R::Restart { delay_ms }) => Ok((Decision::Restart, Duration::from_millis(delay_ms))),
        Ok(R::Pause { notify: target }) => Ok((
            Decision::Pause {
                notify: match target {
                    troupe_plugin_host::NotifyTarget::Leader => NotifyTarget::Leader,
                    troupe_plugin_host::NotifyTarget::User => NotifyTarget::User,
                    troupe_plugin_host::NotifyTarget::Party => NotifyTarget::Party,
                },
                why: format!("its recovery plugin {plugin} paused it"),
            },
            Duration::ZERO,
        )),
        Ok(R::Abort) => Ok((
            Decision::Abort {
                why: format!("its recovery plugin {plugin} aborted the party"),
            },
            Duration::ZERO,
        )),
        Err(e) => {
            let _ = notify;
            Err(format!("its recovery plugin failed ({e})"))
        }
    }
}

/// Why a run that no later daemon can take over ended with its daemon.
fn not_adoptable(runner: &str) -> String {
    if runner.starts_with("acp:") {
        "the daemon driving this ACP agent stopped".into()
    } else {
        "the daemon running this executor stopped".into()
    }
}

/// Whether a member of the party's leader role is running (none when it has no leader).
fn leader_running(live: &LiveParty) -> bool {
    live.snapshot.party.leader().is_some_and(|leader| {
        live.party
            .members
            .iter()
            .any(|m| m.role == leader && m.status == MemberStatus::Running)
    })
}

fn describe_input(input: &Input) -> (String, Value) {
    match input {
        Input::Launch => ("party_launched".into(), json!({})),
        Input::Completed { role, index } => (
            "member_completed".into(),
            json!({ "role": role, "index": index }),
        ),
        Input::Crashed {
            role,
            index,
            reason,
        } => (
            "member_crashed".into(),
            json!({ "role": role, "index": index, "reason": reason }),
        ),
        Input::Signal { role, signal } => (
            "role_signalled".into(),
            json!({ "role": role, "signal": signal }),
        ),
        Input::OverrideRecovery { role, strategy } => (
            "recovery_overridden".into(),
            json!({ "role": role, "strategy": strategy }),
        ),
        Input::RecoveryDecided {
            role,
            index,
            decision,
            ..
        } => (
            "recovery_decided".into(),
            match decision {
                Decision::Restart => json!({ "role": role, "index": index, "decision": "restart" }),
                Decision::Pause { notify, why } => json!({
                    "role": role, "index": index, "decision": "pause", "notify": notify, "why": why
                }),
                Decision::Abort { why } => {
                    json!({ "role": role, "index": index, "decision": "abort", "why": why })
                }
            },
        ),
        Input::Cancel => ("party_cancel_requested".into(), json!({})),
    }
}

fn mirror_line(r: &AgentRun) -> Value {
    json!({
        "run_id": r.run_id, "agent": r.agent_name, "status": r.status,
        "party_id": r.party_id, "role": r.role_name, "instance_index": r.instance_index,
        "attempt": r.attempt, "session_id": r.session_id, "workdir": r.workdir,
        "started_at": r.started_at, "completed_at": r.completed_at,
        "output": r.result.as_ref().and_then(|x| x.get("output")),
    })
}

/// Writes a derived view atomically, in a `.troupe` folder git ignores.
fn write_mirror(dir: &Path, file: &str, text: &str) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let ignore = dir.join(".gitignore");
    if !ignore.exists() {
        std::fs::write(&ignore, "*\n")?;
    }
    let tmp = dir.join(format!(".{file}.tmp"));
    std::fs::write(&tmp, text)?;
    std::fs::rename(tmp, dir.join(file))
}

/// Serialises git checkouts (see `isolate`).
static GIT_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The member's working directory: the project itself, a worktree, or a clone.
pub(crate) async fn isolate(
    layout: &Layout,
    repo_root: &Path,
    isolation: Isolation,
    label: &str,
    role: &str,
    index: u32,
) -> Result<(PathBuf, Option<String>), String> {
    let (base, clone) = match isolation {
        Isolation::None => return Ok((repo_root.to_path_buf(), None)),
        Isolation::Worktree => (layout.data_dir.join("worktrees"), false),
        Isolation::Clone => (layout.data_dir.join("clones"), true),
    };
    let (root, label, role) = (repo_root.to_path_buf(), label.to_string(), role.to_string());
    tokio::task::spawn_blocking(move || {
        // git takes locks in the repository (refs, worktree admin dirs): one checkout at a
        // time, even when a step spawns many members at once.
        let _one_at_a_time = GIT_LOCK
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let name = troupe_worktree::MemberName {
            party: &label,
            role: &role,
            index,
        };
        let checkout = if clone {
            troupe_worktree::ensure_clone(&root, &base, name)
        } else {
            troupe_worktree::ensure_worktree(&root, &base, name)
        };
        checkout
            .map(|c| (c.path, Some(c.branch)))
            .map_err(|e| e.to_string())
    })
    .await
    .map_err(|e| format!("isolation task failed: {e}"))?
}

/// The environment a run's process gets: enough to call back with `troupe call …`.
fn member_env(
    layout: &Layout,
    run: &AgentRun,
    agent: &AgentDefinition,
    party: Option<&LiveParty>,
) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = vec![
        ("TROUPE_SESSION_ID".into(), run.session_id.clone()),
        ("TROUPE_RUN_ID".into(), run.run_id.clone()),
        ("TROUPE_AGENT".into(), run.agent_name.clone()),
        ("TROUPE_PROMPT".into(), run.prompt.clone()),
        ("TROUPE_HOME".into(), layout.data_dir.display().to_string()),
        (
            "TROUPE_RUNTIME_DIR".into(),
            layout.runtime_dir.display().to_string(),
        ),
        (
            "TROUPE_SOCKET".into(),
            layout.socket_path().display().to_string(),
        ),
        (
            "TROUPE_TOKEN_FILE".into(),
            layout.token_path().display().to_string(),
        ),
        ("TROUPE_ATTEMPT".into(), run.attempt.to_string()),
    ];
    if let Some(workdir) = &run.workdir {
        env.push(("TROUPE_WORKDIR".into(), workdir.clone()));
    }
    if let (Some(live), Some(role)) = (party, &run.role_name) {
        env.push(("TROUPE_PARTY_ID".into(), live.row.party_id.clone()));
        env.push(("TROUPE_PARTY_NAME".into(), live.row.name.clone()));
        env.push(("TROUPE_ROLE".into(), role.clone()));
        env.push((
            "TROUPE_INSTANCE".into(),
            run.instance_index.unwrap_or(0).to_string(),
        ));
        if let Some(task) = &run.task_id {
            env.push(("TROUPE_TASK_ID".into(), task.clone()));
        }
    }
    // Members find `troupe` first on their PATH: the binary that runs this daemon.
    if let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
    {
        let path = std::env::var("PATH").unwrap_or_default();
        env.push(("PATH".into(), format!("{}:{path}", dir.display())));
    }
    for (k, v) in &agent.env {
        env.push((k.clone(), v.clone()));
    }
    env
}
