//! The pattern driver: carries out a pattern run (handoff, router, advisors) as the engine's
//! `pattern::Flow` decides. Its steps are child runs of the pattern run (same project and
//! directory, `flow_root`/`flow_step` recorded); their ends are fed back; router plugins are asked
//! off the loop; advisor deadlines wake it. The flow's state is saved before its actions are
//! carried out, so a restarted daemon resumes it without running a completed step again. The
//! pattern run ends with the terminal agent's answer and its chain. A team's tool calls arrive
//! as commands on the loop; cancelling the pattern run (`cancel_agent`, a party stop) cancels
//! every step it started.

use troupe_engine::pattern::{
    self, Action as Step, Flow as PatternFlow, FlowOutcome, Outcome, StepId,
};
use troupe_store::DefinitionKind;

use super::*;

/// A pattern run in flight.
pub(super) struct LiveFlow {
    pub(super) flow: PatternFlow,
    /// The pattern run's own row.
    pub(super) root: AgentRun,
    /// Step → the run carrying it out.
    pub(super) steps: HashMap<StepId, String>,
}

/// One step to start: the engine's `Action::Run`.
struct StepSpec {
    step: StepId,
    agent: String,
    prompt: String,
    trigger: pattern::Trigger,
    route: Option<Vec<String>>,
    /// A team turn: `member` or `coordinator`.
    seat: Option<&'static str>,
}

/// The definition of an agent, as stored now (patterns resolve at run time).
fn stored_agent(store: &Store, name: &str) -> Option<AgentDefinition> {
    store
        .get_definition(DefinitionKind::Agent, name)
        .ok()
        .and_then(|row| serde_json::from_value(row.definition).ok())
}

/// How a step's run ended, for its flow.
fn outcome_of(run: &AgentRun) -> Outcome {
    let output = run
        .result
        .as_ref()
        .and_then(|r| r.get("output"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    match run.status {
        RunStatus::Success | RunStatus::Partial => Outcome::Done { output },
        RunStatus::Blocked => Outcome::Failed {
            reason: format!("blocked: {output}"),
        },
        status => Outcome::Failed {
            reason: run
                .error
                .clone()
                .unwrap_or_else(|| status.as_str().to_string()),
        },
    }
}

/// A router step's choice, from its run's result (`route_to` puts it in its artifacts).
fn route_of(run: &AgentRun) -> Option<(String, String)> {
    let route = run.result.as_ref()?.get("artifacts")?.get("route")?;
    Some((
        route.get("agent")?.as_str()?.to_string(),
        route
            .get("reason")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
    ))
}

impl Loop {
    /// Starts the pattern run `run` (a run of an agent with patterns) instead of a process.
    pub(super) async fn start_flow(
        &mut self,
        run: &AgentRun,
        agent: &AgentDefinition,
    ) -> Result<(), String> {
        if self.stopped_early.remove(&run.run_id) {
            return Err(super::STOPPED_EARLY.into());
        }
        let flow = PatternFlow::new(&agent.name, &run.prompt);
        let state = serde_json::to_value(&flow).map_err(|e| e.to_string())?;
        self.store
            .save_flow(run.run_id.clone(), state, false)
            .await
            .map_err(|e| e.to_string())?;
        // The pattern run lives in the daemon: its pid is the daemon's, it has no group.
        let pid = std::process::id();
        self.store
            .run_started(
                run,
                i64::from(pid),
                crate::runners::process::process_start_time(pid),
                None,
            )
            .await
            .map_err(|e| e.to_string())?;
        let root = self.store.get_run(&run.run_id).map_err(|e| e.to_string())?;
        self.flows.insert(
            run.run_id.clone(),
            LiveFlow {
                flow,
                root,
                steps: HashMap::new(),
            },
        );
        self.flow_input(&run.run_id, pattern::Input::Start).await;
        Ok(())
    }

    /// Feeds an input to a pattern run, saves its state, then carries out what it decided (and
    /// whatever that feeds back, in order).
    pub(super) async fn flow_input(&mut self, root: &str, input: pattern::Input) {
        self.flow_inputs.push_back((root.to_string(), input));
        while let Some((root, input)) = self.flow_inputs.pop_front() {
            let Some(live) = self.flows.get_mut(&root) else {
                continue;
            };
            let store = self.store.clone();
            let agents = move |name: &str| stored_agent(&store, name);
            let mut actions = Vec::new();
            live.flow.step(input, now_ms(), &agents, &mut actions);
            // Saved as unfinished even when the flow has ended: it is closed (`finish_flow`)
            // only once its run's end is recorded, so a restart in between still ends the run.
            match serde_json::to_value(&live.flow) {
                Ok(state) => {
                    if let Err(e) = self.store.save_flow(root.clone(), state, false).await {
                        tracing::warn!(run = %root, error = %e, "cannot save a pattern run's state");
                    }
                }
                Err(e) => tracing::warn!(run = %root, error = %e, "cannot encode a pattern run"),
            }
            for action in actions {
                self.flow_act(&root, action).await;
            }
        }
    }

    async fn flow_act(&mut self, root: &str, action: Step) {
        let Some(live) = self.flows.get(root) else {
            return;
        };
        let root_run = live.root.clone();
        match action {
            Step::Run {
                step,
                agent,
                prompt,
                trigger,
                route,
                team,
                ..
            } => {
                let spec = StepSpec {
                    step,
                    agent,
                    prompt,
                    trigger,
                    route,
                    seat: team.map(|chair| if chair { "coordinator" } else { "member" }),
                };
                if let Err(reason) = self.start_step(&root_run, spec).await {
                    self.flow_inputs.push_back((
                        root.to_string(),
                        pattern::Input::StepEnded {
                            step,
                            outcome: Outcome::Failed { reason },
                        },
                    ));
                }
            }
            Step::AskRouter {
                node,
                router,
                plugin,
                request,
                candidates,
            } => self.ask_router(root, node, router, plugin, request, candidates),
            Step::Stop { step } => {
                if let Some(run_id) = live.steps.get(&step).cloned() {
                    self.bury(
                        &run_id,
                        RunStatus::Cancelled,
                        "stopped by its pattern run".into(),
                    )
                    .await;
                    self.runner.stop(&run_id);
                }
            }
            Step::WakeAt { at_ms } => {
                let commands = self.commands.clone();
                let root = root.to_string();
                let wait = Duration::from_millis(at_ms.saturating_sub(now_ms()));
                tokio::spawn(async move {
                    tokio::time::sleep(wait).await;
                    if commands.send(Command::FlowTick { root }).is_err() {
                        tracing::debug!("orchestrator gone; advisor deadline dropped");
                    }
                });
            }
            Step::Event { kind, mut data } => {
                data["run_id"] = json!(root_run.run_id);
                let event = NewEvent {
                    kind: kind.into(),
                    project_id: Some(root_run.project_id.clone()),
                    session_id: Some(root_run.session_id.clone()),
                    party_id: root_run.party_id.clone(),
                    data,
                };
                if let Err(e) = self.store.append_event(event).await {
                    tracing::warn!(run = %root, error = %e, "cannot record a pattern event");
                }
            }
            Step::Finished(end) => self.finish_flow(root, end).await,
        }
    }

    /// Creates and starts the run of one step, a child of the pattern run.
    async fn start_step(&mut self, root: &AgentRun, spec: StepSpec) -> Result<(), String> {
        let StepSpec {
            step,
            agent,
            prompt,
            trigger,
            route,
            seat,
        } = spec;
        let def = stored_agent(&self.store, &agent)
            .ok_or_else(|| format!("agent {agent} does not exist"))?;
        let mut leaf = def.plain();
        if route.is_some() {
            // A router's step only chooses: `route_to` is what ends it.
            leaf.workflow.completion_schema = None;
        }
        leaf.route_only = route;
        leaf.team_seat = seat.map(String::from);
        let project = self
            .store
            .get_project(&root.project_id)
            .map_err(|e| e.to_string())?;
        let root_session = self
            .store
            .get_session(&root.session_id)
            .map_err(|e| e.to_string())?;
        let mut full = String::new();
        if let Some(i) = &leaf.instructions {
            full.push_str(i);
            full.push('\n');
        }
        full.push_str(&prompt);
        let workdir = root.workdir.clone().unwrap_or(root_session.cwd.clone());
        let (run, _) = self
            .store
            .create_run(NewRun {
                agent_name: leaf.name.clone(),
                definition: serde_json::to_value(&leaf).map_err(|e| e.to_string())?,
                session: NewSession {
                    cli: leaf.runner.clone(),
                    cwd: workdir.clone(),
                    project_root: project.root_path.clone(),
                    project_name: project.name.clone(),
                    external_id: None,
                    parent_session_id: Some(root.session_id.clone()),
                    spawned_by_agent_id: Some(root.run_id.clone()),
                    party_id: None,
                },
                party: None,
                attempt: 1,
                prompt: full,
                task_id: root.task_id.clone(),
                timeout_ms: leaf.timeout_secs.map(|s| (s * 1000.0) as i64),
                workdir: Some(workdir),
                trigger: Some(trigger.as_str().into()),
                flow: Some((root.run_id.clone(), i64::from(step))),
                attach_session: None,
            })
            .await
            .map_err(|e| e.to_string())?;
        if let Some(live) = self.flows.get_mut(&root.run_id) {
            live.steps.insert(step, run.run_id.clone());
        }
        self.flow_steps
            .insert(run.run_id.clone(), (root.run_id.clone(), step));
        // A step is a plain run: its patterns are the flow's.
        if let Err(e) = self.spawn_run(&run, &leaf).await {
            self.bury(&run.run_id, RunStatus::Crashed, e.clone()).await;
            self.flow_steps.remove(&run.run_id);
            return Err(e);
        }
        Ok(())
    }

    /// Asks a router plugin off the loop; its answer comes back as `Command::FlowRouted`.
    fn ask_router(
        &self,
        root: &str,
        node: usize,
        router: String,
        plugin: String,
        request: String,
        candidates: Vec<String>,
    ) {
        let host = self.daemon.get().cloned();
        let store = self.store.clone();
        let commands = self.commands.clone();
        let root = root.to_string();
        tokio::spawn(async move {
            let choice = async {
                let host = host
                    .and_then(|h| h.upgrade())
                    .ok_or("the daemon is shutting down")?;
                let plugins = host.plugins().clone();
                let engine = tokio::task::spawn_blocking(move || plugins.host().cloned())
                    .await
                    .map_err(|e| e.to_string())?
                    .map_err(|e| e.to_string())?;
                let offered: Vec<troupe_plugin_host::Candidate> = candidates
                    .iter()
                    .map(|name| {
                        let def = stored_agent(&store, name);
                        troupe_plugin_host::Candidate {
                            name: name.clone(),
                            description: def
                                .as_ref()
                                .and_then(|d| d.description.clone())
                                .unwrap_or_default(),
                            capabilities: def.map(|d| d.capabilities).unwrap_or_default(),
                        }
                    })
                    .collect();
                let choice = engine
                    .route(
                        &plugin,
                        request,
                        vec![("router".into(), router.clone())],
                        offered,
                        &troupe_plugin_host::CallContext::default(),
                    )
                    .await
                    .map_err(|e| e.to_string())?;
                if choice.agent.is_empty() {
                    return Err(format!(
                        "plugin {plugin} chose no agent ({})",
                        choice.reason
                    ));
                }
                Ok::<_, String>((choice.agent, choice.reason))
            }
            .await;
            if commands
                .send(Command::FlowRouted { root, node, choice })
                .is_err()
            {
                tracing::debug!("orchestrator gone; a router's answer dropped");
            }
        });
    }

    /// A step's run ended: feed it to its flow.
    pub(super) async fn step_ended(&mut self, run: &AgentRun, root: String, step: StepId) {
        let Some(live) = self.flows.get(&root) else {
            return;
        };
        let input = ended_input(&live.flow, run, step);
        if run.status.is_finished() {
            self.flow_steps.remove(&run.run_id);
        }
        self.flow_input(&root, input).await;
    }

    /// The flow ended: the pattern run ends with its answer, and whoever waits hears of it.
    async fn finish_flow(&mut self, root: &str, end: pattern::FlowEnd) {
        let Some(live) = self.flows.remove(root) else {
            return;
        };
        for run_id in live.steps.values() {
            self.flow_steps.remove(run_id);
        }
        let state = serde_json::to_value(&live.flow).unwrap_or(Value::Null);
        let (status, error) = match (end.status, self.tripped.remove(root)) {
            // Cancelled because the pattern run went over its budget: say so.
            (FlowOutcome::Cancelled, Some(reason)) => {
                (RunStatus::Cancelled, Some(format!("{BUDGET_STOP}{reason}")))
            }
            (FlowOutcome::Success, _) => (RunStatus::Success, None),
            (FlowOutcome::Cancelled, None) => (RunStatus::Cancelled, end.error.clone()),
            (FlowOutcome::Failed, _) => (RunStatus::Crashed, end.error.clone()),
        };
        let result = json!({
            "output": end.output,
            "status": end.status,
            "chain": end.chain,
            "error": end.error,
        });
        let ended = match self
            .store
            .finish_run(root.to_string(), status, Some(result), error)
            .await
        {
            Ok(ended) => ended,
            Err(e) => {
                tracing::warn!(run = %root, error = %e, "cannot record a pattern run's end");
                return;
            }
        };
        crate::hub::announce_expired(&self.hub, &ended.expired_approvals);
        if let Err(e) = self.store.save_flow(root.to_string(), state, true).await {
            tracing::warn!(run = %root, error = %e, "cannot close a pattern run");
        }
        let event = NewEvent {
            kind: "pattern_finished".into(),
            project_id: Some(ended.run.project_id.clone()),
            session_id: Some(ended.run.session_id.clone()),
            party_id: ended.run.party_id.clone(),
            data: json!({ "run_id": root, "status": end.status, "chain": end.chain, "error": end.error }),
        };
        if let Err(e) = self.store.append_event(event).await {
            tracing::warn!(run = %root, error = %e, "cannot record a pattern event");
        }
        Box::pin(self.after_run_end(&ended.run, None, ended.changed)).await;
    }

    /// A team tool call from a member's turn: fed to its team's flow.
    pub(super) async fn team_act(
        &mut self,
        run_id: &str,
        act: super::TeamAct,
    ) -> Result<(), ApiError> {
        let Some((root, step)) = self.flow_steps.get(run_id).cloned() else {
            return Err(ApiError::Conflict(format!(
                "run {run_id} is not a team member's turn in progress"
            )));
        };
        let input = match act {
            super::TeamAct::Broadcast(message) => pattern::Input::TeamBroadcast { step, message },
            super::TeamAct::Vote(reason) => pattern::Input::TeamVote { step, reason },
            super::TeamAct::Conclude(answer) => pattern::Input::TeamConclude { step, answer },
        };
        self.flow_input(&root, input).await;
        Ok(())
    }

    /// Stops a run, whatever it is: a pattern run is cancelled with every step it started.
    pub(super) async fn stop_any(&mut self, run_id: &str) {
        if self.flows.contains_key(run_id) {
            self.flow_input(run_id, pattern::Input::Cancel).await;
        } else {
            if !self.runner.is_running(run_id)
                && self
                    .store
                    .get_run(run_id)
                    .is_ok_and(|r| r.status == RunStatus::Pending)
            {
                // Not started yet: a pattern run whose start is still queued must not start,
                // nor a member still setting up (its setup ends now).
                self.stopped_early.insert(run_id.to_string());
                let setup = self
                    .setups
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .remove(run_id);
                if let Some(stop) = setup {
                    let _already_done = stop.send(());
                }
            }
            self.runner.stop(run_id);
        }
    }

    /// At start-up: resumes the pattern runs an earlier daemon left. A step whose run went with
    /// that daemon (`lost`: buried just now, or never created) runs again; a step that ended is
    /// fed to its flow; a running one is waited for.
    pub(super) async fn resume_flows(
        &mut self,
        flows: Vec<(String, Value)>,
        lost: &std::collections::HashSet<String>,
    ) {
        for (root, state) in flows {
            let flow: PatternFlow = match serde_json::from_value(state) {
                Ok(flow) => flow,
                Err(e) => {
                    tracing::error!(run = %root, error = %e, "cannot resume a pattern run");
                    continue;
                }
            };
            let Ok(root_run) = self.store.get_run(&root) else {
                continue;
            };
            if root_run.status.is_finished() {
                // It ended (a cancel) without its flow hearing of it: end its steps too.
                for step in self.store.run_tree(&root).unwrap_or_default() {
                    if step.flow_root.as_deref() == Some(root.as_str())
                        && !step.status.is_finished()
                    {
                        self.bury(
                            &step.run_id,
                            RunStatus::Cancelled,
                            "its pattern run had ended".into(),
                        )
                        .await;
                        self.runner.stop(&step.run_id);
                    }
                }
                if let Err(e) = self.store.save_flow(root.clone(), json!(flow), true).await {
                    tracing::warn!(run = %root, error = %e, "cannot close a pattern run");
                }
                continue;
            }
            if let Some(end) = flow.end().cloned() {
                // It had ended, but its run's end was not recorded: record it now.
                self.flows.insert(
                    root.clone(),
                    LiveFlow {
                        flow,
                        root: root_run,
                        steps: HashMap::new(),
                    },
                );
                self.finish_flow(&root, end).await;
                continue;
            }
            let fresh = flow.is_fresh();
            let runs = self.store.run_tree(&root).unwrap_or_default();
            let mut steps = HashMap::new();
            let mut inputs = Vec::new();
            for step in flow.running_steps() {
                let run = runs.iter().rev().find(|r| {
                    r.flow_root.as_deref() == Some(root.as_str())
                        && r.flow_step == Some(i64::from(step))
                });
                match run {
                    None => inputs.push(pattern::Input::StepEnded {
                        step,
                        outcome: Outcome::Lost,
                    }),
                    Some(run) if lost.contains(&run.run_id) => {
                        inputs.push(pattern::Input::StepEnded {
                            step,
                            outcome: Outcome::Lost,
                        })
                    }
                    Some(run) if run.status.is_finished() => {
                        steps.insert(step, run.run_id.clone());
                        inputs.push(ended_input(&flow, run, step));
                    }
                    Some(run) => {
                        steps.insert(step, run.run_id.clone());
                        self.flow_steps
                            .insert(run.run_id.clone(), (root.clone(), step));
                    }
                }
            }
            self.flows.insert(
                root.clone(),
                LiveFlow {
                    flow,
                    root: root_run,
                    steps,
                },
            );
            tracing::info!(run = %root, "resuming a pattern run");
            if fresh {
                // Saved, then the daemon stopped before its first step: start it now.
                self.flow_input(&root, pattern::Input::Start).await;
                continue;
            }
            // Router plugins that had not answered are asked again; deadlines still ahead are
            // armed again (those passed meanwhile are handled by the tick below).
            let store = self.store.clone();
            let agents = move |name: &str| stored_agent(&store, name);
            let again = self
                .flows
                .get(&root)
                .map(|live| live.flow.pending_actions(&agents))
                .unwrap_or_default();
            for action in again {
                self.flow_act(&root, action).await;
            }
            inputs.push(pattern::Input::Tick);
            for input in inputs {
                self.flow_input(&root, input).await;
            }
        }
    }
}

/// What a step's ended run means to its flow: a router step's choice, or the step's outcome.
fn ended_input(flow: &PatternFlow, run: &AgentRun, step: StepId) -> pattern::Input {
    let router_step = run
        .definition
        .get("route_only")
        .is_some_and(|r| !r.is_null());
    match flow.node_of(step) {
        // A router's step ends with its choice, or without one (whatever stopped it).
        Some(node) if router_step => pattern::Input::Routed {
            node,
            choice: route_of(run).ok_or_else(|| match (&run.error, run.status.is_completed()) {
                (Some(e), false) => format!("its run ended without calling route_to: {e}"),
                _ => "its run ended without calling route_to".to_string(),
            }),
        },
        _ => pattern::Input::StepEnded {
            step,
            outcome: outcome_of(run),
        },
    }
}
