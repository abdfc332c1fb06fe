//! The run supervisor: starts a run on its runner (process, wasm executor, ACP agent), hears its
//! exit, records how it ended (expiring its waiting approvals), tells its parent, mirrors agent
//! state for the project, and at shutdown ends the runs no later daemon can adopt (all of them,
//! unless asked to leave the adoptable ones running).

use super::*;

impl Loop {
    /// The daemon is stopping: the runs no later daemon can adopt (ACP agents, executors) and,
    /// unless `leave_running`, the process members too are recorded crashed (so their pending
    /// approvals expire; one not started yet, cancelled) and every process of theirs is ended.
    /// Left to the next daemon: runs on remote workers, sessions leading their own party, and
    /// process members when `leave_running`.
    pub(super) async fn shut_down(&mut self, leave_running: bool) -> Stopped {
        let runs = match self.store.list_runs(None, None, true) {
            Ok(runs) => runs,
            Err(e) => {
                tracing::error!(error = %e, "cannot list the runs to stop");
                return Stopped::default();
            }
        };
        let mut procs = Vec::new();
        let mut left_running = 0;
        for run in runs {
            let runner = run
                .definition
                .get("runner")
                .and_then(Value::as_str)
                .unwrap_or("process")
                .to_string();
            // A pattern run is resumed by the next daemon (its steps are runs of their own); a
            // landing lives in the daemon and ends with it.
            if self.flows.contains_key(&run.run_id) || runner == crate::runners::land::LAND {
                continue;
            }
            let in_daemon = runner.starts_with("acp:") || runner.starts_with("wasm:");
            let remote = run.definition.get("pool").is_some_and(|p| !p.is_null());
            if crate::runners::is_attached(&run.definition)
                || !in_daemon && (remote || leave_running)
            {
                // One the person held (`pause_party`) is let go: no member is left frozen
                // with nobody to resume it.
                if !remote
                    && let Some(pgid) = run
                        .pgid
                        .and_then(|g| i32::try_from(g).ok())
                        .and_then(rustix::process::Pid::from_raw)
                {
                    let _not_ours_any_more =
                        rustix::process::kill_process_group(pgid, rustix::process::Signal::CONT);
                }
                left_running += 1;
                continue;
            }
            // A pattern run's step is left running in the store: the next daemon finds it gone
            // and runs it again (the pattern run resumes); any other run ends here.
            if !self.flow_steps.contains_key(&run.run_id) {
                let (status, why) = if in_daemon {
                    (RunStatus::Crashed, not_adoptable(&runner))
                } else if run.status == RunStatus::Pending {
                    (RunStatus::Cancelled, STOPPED_FIRST.to_string())
                } else {
                    (RunStatus::Crashed, STOPPED_WITH_DAEMON.to_string())
                };
                self.bury(&run.run_id, status, why).await;
            }
            // A member still setting up: its setup commands end too.
            let setup = self
                .setups
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .remove(&run.run_id);
            if let Some(stop) = setup {
                let _ended_already = stop.send(());
            }
            self.runner.stop(&run.run_id);
            procs.push(crate::procs::RunProcesses {
                run_id: run.run_id.clone(),
                pgid: run.pgid.and_then(|g| u32::try_from(g).ok()),
                since: run.pid_start,
            });
        }
        let killed = crate::procs::end(&procs, crate::runners::process::TERM_GRACE).await;
        tracing::info!(
            ended = procs.len(),
            killed,
            left_running,
            "runs ended with the daemon"
        );
        Stopped {
            ended: procs.len(),
            left_running,
        }
    }

    /// Starts a run's process and records it.
    pub(super) async fn spawn_run(
        &self,
        run: &AgentRun,
        agent: &AgentDefinition,
    ) -> Result<(), String> {
        if agent.has_pattern() {
            // A pattern run is driven by the loop itself (`patterns.rs`), which needs `&mut`.
            return self
                .commands
                .send(Command::StartFlow {
                    run: Box::new(run.clone()),
                    definition: Box::new(agent.clone()),
                })
                .map_err(|_| "the daemon is shutting down".to_string());
        }
        let env = member_env(
            &self.layout,
            &self.run_key,
            run,
            agent,
            self.parties.get(run.party_id.as_deref().unwrap_or("")),
        );
        let sandbox = self.box_for(run, agent, &env);
        if super::setup::needed(run, agent) {
            // Off the loop: the loop hears back with `SetupDone` and comes here again.
            let (stop, stopped) = tokio::sync::oneshot::channel();
            self.setups
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .insert(run.run_id.clone(), stop);
            tokio::spawn(super::setup::run(
                self.store.clone(),
                self.commands.clone(),
                run.clone(),
                agent.clone(),
                env,
                sandbox,
                stopped,
            ));
            return Ok(());
        }
        let launch = crate::runners::Launch {
            run: run.clone(),
            agent: agent.clone(),
            workdir: PathBuf::from(run.workdir.clone().unwrap_or_else(|| ".".into())),
            env,
            // Each run its own log (`get_run_log`), closed when it ends.
            log: run.run_id.clone(),
            timeout: agent
                .timeout_secs
                .and_then(|s| Duration::try_from_secs_f64(s).ok()),
            host: self.daemon.get().cloned(),
            sandbox,
        };
        let placed = crate::runners::runner_for(agent).place(&self.runner, launch)?;
        self.store
            .run_started(
                run,
                i64::from(placed.pid),
                placed.start_time,
                placed.pgid.map(i64::from),
            )
            .await
            .map_err(|e| e.to_string())?;
        (placed.go)(&self.runner);
        Ok(())
    }

    /// A member's setup ended: it starts now, unless it was stopped meanwhile; a failed setup
    /// is its crash.
    pub(super) async fn setup_done(
        &mut self,
        run: &AgentRun,
        agent: &AgentDefinition,
        error: Option<String>,
    ) {
        self.setups
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .remove(&run.run_id);
        if self.stopped_early.remove(&run.run_id) {
            // Stopped (its party cancelled) while it set up: it never starts.
            self.bury(
                &run.run_id,
                RunStatus::Cancelled,
                "stopped during its setup".into(),
            )
            .await;
            if let Ok(run) = self.store.get_run(&run.run_id) {
                self.after_run_end(&run, None, true).await;
            }
            return;
        }
        if self
            .store
            .run_caller(&run.run_id)
            .map_or(true, |r| r.status.is_finished())
        {
            return; // ended meanwhile
        }
        let started = match error {
            None => self.spawn_run(run, agent).await,
            Some(e) => Err(e),
        };
        if let Err(e) = started {
            self.bury(&run.run_id, RunStatus::Crashed, e).await;
            if let Ok(run) = self.store.get_run(&run.run_id) {
                self.after_run_end(&run, None, true).await;
            }
        }
    }

    /// A run went over its budget: recorded on the timeline, then stopped; its end (in
    /// `run_exited`) says why, and a member's role pauses.
    pub(super) async fn budget_tripped(&mut self, run_id: String, reason: String) {
        if self.tripped.contains_key(&run_id) {
            return;
        }
        let Ok(run) = self.store.get_run(&run_id) else {
            return;
        };
        if run.status.is_finished() {
            return;
        }
        let event = NewEvent {
            kind: "budget_tripped".into(),
            project_id: Some(run.project_id.clone()),
            session_id: Some(run.session_id.clone()),
            party_id: run.party_id.clone(),
            data: json!({ "run_id": run_id, "agent": run.agent_name, "reason": reason }),
        };
        if let Err(e) = self.store.append_event(event).await {
            tracing::warn!(run = %run_id, error = %e, "cannot record a budget trip");
        }
        tracing::info!(run = %run_id, %reason, "budget tripped: stopping the run");
        self.tripped.insert(run_id.clone(), reason);
        self.stop_any(&run_id).await;
    }

    /// Records a run's end (when nothing recorded it yet).
    pub(super) async fn bury(&self, run_id: &str, status: RunStatus, error: String) {
        match self
            .store
            .finish_run(run_id.to_string(), status, None, Some(error))
            .await
        {
            Ok(end) => crate::hub::announce_expired(&self.hub, &end.expired_approvals),
            Err(e) => tracing::warn!(run = %run_id, error = %e, "cannot record a run's end"),
        }
    }

    /// The box run `run` starts in: its paths and its egress proxy, opened now and closed when
    /// its processes have exited (`run_exited`). A run whose proxy cannot open has no network.
    pub(super) fn box_for(
        &self,
        run: &AgentRun,
        agent: &AgentDefinition,
        env: &[(String, String)],
    ) -> crate::sandbox::Sandbox {
        use crate::sandbox::plan;
        if !self.sandbox.is_on() {
            return self.sandbox.clone();
        }
        let root = run
            .party_id
            .as_deref()
            .and_then(|p| self.parties.get(p))
            .map(|live| PathBuf::from(&live.row.repo_root))
            .or_else(|| {
                self.store
                    .get_project(&run.project_id)
                    .ok()
                    .map(|p| PathBuf::from(p.root_path))
            });
        let project = root.as_deref().and_then(|root| {
            crate::project_config::ProjectConfig::load(root)
                .ok()
                .flatten()
                .map(|c| c.sandbox())
        });
        let mut planned = plan::plan(
            self.sandbox.base(),
            plan::PlanInput {
                run_id: &run.run_id,
                agent,
                env,
                project: project.as_ref(),
                troupe_exe: &self.sandbox.base().troupe_exe,
                project_root: root.as_deref(),
            },
        );
        let mut boxes = self
            .boxes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        // Opened already (the run set up its checkout first): the same proxy goes on.
        if !boxes.contains_key(&run.run_id) {
            let gate = crate::egress::Gate::new(
                run.run_id.clone(),
                run.session_id.clone(),
                Some(run.project_id.clone()),
                run.party_id.clone(),
                agent.name.clone(),
                planned.allow_hosts.clone(),
                Duration::from_secs_f64(
                    agent
                        .approval_timeout_secs
                        .unwrap_or(300.0)
                        .clamp(1.0, 3600.0),
                ),
                self.store.clone(),
                self.daemon.get().cloned(),
            );
            let landlock = self.sandbox.layer() == crate::sandbox::LayerKind::Landlock;
            let socket = planned.box_dir.join("egress").join("sock");
            match crate::egress::open(std::sync::Arc::new(gate), &socket, landlock) {
                Ok(endpoint) => {
                    boxes.insert(run.run_id.clone(), endpoint);
                }
                Err(e) => {
                    tracing::warn!(run = %run.run_id, error = %e, "the run's egress proxy cannot open: it has no network");
                }
            }
        }
        planned.egress = boxes.get(&run.run_id).map(|endpoint| plan::Egress {
            socket: endpoint.socket.clone(),
            tcp_port: endpoint.tcp_port,
            forwards: crate::egress::loopback_ports(&planned.allow_hosts),
        });
        drop(boxes);
        self.sandbox.for_run(planned)
    }

    pub(super) async fn run_exited(&mut self, exit: RunExit) {
        let endpoint = self
            .boxes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .remove(&exit.run_id);
        if endpoint.is_some() {
            let dir = self.layout.data_dir.join("boxes").join(&exit.run_id);
            if let Err(e) = std::fs::remove_dir_all(&dir) {
                tracing::debug!(dir = %dir.display(), error = %e, "a run's box dir was not removed");
            }
        }
        let status = match exit.exit {
            Exit::TimedOut => RunStatus::Timeout,
            Exit::Stopped => RunStatus::Cancelled,
            _ => RunStatus::Crashed,
        };
        let error = match self.tripped.remove(&exit.run_id) {
            Some(reason) => format!("{BUDGET_STOP}{reason}"),
            None => exit.exit.describe(),
        };
        // The usual end: the process exits after its `complete`, which recorded the run's end
        // and fed its party. Nothing is left to write then, so the run's status is read rather
        // than the run sent through the writer (an ended run never changes its status again),
        // or not read at all when the loop already handled that `complete`; unless something
        // still waits for this end, only the loop's own records change.
        let completed = self.ended.remove(&exit.run_id);
        if completed
            || self
                .store
                .run_caller(&exit.run_id)
                .is_ok_and(|caller| caller.status.is_finished())
        {
            if !self.flow_steps.contains_key(&exit.run_id) && !self.member_is_current(&exit.run_id)
            {
                self.members.remove(&exit.run_id);
                return;
            }
            if let Ok(run) = self.store.get_run(&exit.run_id) {
                self.after_run_end(&run, Some(&exit.exit), false).await;
                return;
            }
        }
        let end = match self
            .store
            .finish_run(exit.run_id.clone(), status, None, Some(error))
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

    /// `run`: as `complete` left it.
    pub(super) async fn run_completed(&mut self, run: &AgentRun) {
        let run_id = &run.run_id;
        self.after_run_end(run, None, true).await;
        // Give the process a moment to exit by itself, then stop it.
        if self.runner.is_running(run_id) {
            // Its exit is still to come (the runner reports every process it started).
            self.ended.insert(run_id.clone());
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
    pub(super) async fn after_run_end(
        &mut self,
        run: &AgentRun,
        exit: Option<&Exit>,
        changed: bool,
    ) {
        if let Some((root, step)) = self.flow_steps.get(&run.run_id).cloned() {
            self.step_ended(run, root, step).await;
            return;
        }
        // Mirror first: once the party's new state is visible, its files must be settled.
        if changed && run.party_id.is_some() {
            self.write_agent_state(run);
        }
        if let Some(m) = self.members.get(&run.run_id).cloned() {
            let current = self.member_is_current(&run.run_id);
            // Kept while its process may linger after `complete` (a stop must still reach it);
            // a run with no process left (an exit, a pattern run's end) is forgotten.
            if exit.is_some() || (run.status.is_finished() && !self.runner.is_running(&run.run_id))
            {
                self.members.remove(&run.run_id);
            }
            if current {
                let budget = run
                    .error
                    .as_deref()
                    .and_then(|e| e.strip_prefix(BUDGET_STOP))
                    .filter(|_| run.status == RunStatus::Cancelled);
                if run.status == RunStatus::Success {
                    self.commit_leftovers(run, &m).await;
                }
                if changed {
                    self.bring_over(run).await;
                }
                let input = if run.status.is_completed() {
                    Input::Completed {
                        role: m.role.clone(),
                        index: m.index,
                    }
                } else if let Some(reason) = budget {
                    Input::BudgetTripped {
                        role: m.role.clone(),
                        index: m.index,
                        reason: reason.to_string(),
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
            self.bring_over(run).await;
            self.tell_parent(run).await;
            self.write_agent_state(run);
        }
    }

    /// A run that worked in a clone of its own (a sandboxed member's worktree is one, and a
    /// landing's rework runs in it too): when it ends, its branch is brought into the project's
    /// repository, where a worktree's commits would be already (the radar and the landing bring
    /// it over too; this is for the person's own `git log`). The branch is the one the folder
    /// was made for (`<data>/clones/<label>/<role>-<i>`), never what the clone's HEAD says.
    async fn bring_over(&self, run: &AgentRun) {
        let Some(workdir) = run.workdir.as_deref().map(PathBuf::from) else {
            return;
        };
        let clones = self.layout.data_dir.join("clones");
        if workdir.parent().and_then(Path::parent) != Some(clones.as_path())
            || !troupe_worktree::is_own_repo(&workdir)
        {
            return;
        }
        let names = workdir
            .parent()
            .and_then(Path::file_name)
            .and_then(|l| l.to_str())
            .zip(workdir.file_name().and_then(|e| e.to_str()))
            .and_then(|(label, entry)| {
                let (role, index) = entry.rsplit_once('-')?;
                let name = troupe_worktree::MemberName {
                    party: label,
                    role,
                    index: index.parse().ok()?,
                };
                name.branch().ok()
            });
        let (Some(branch), Ok(project)) = (names, self.store.get_project(&run.project_id)) else {
            return;
        };
        let root = PathBuf::from(project.root_path);
        let brought = tokio::task::spawn_blocking(move || {
            let _git = crate::project::git_lock();
            troupe_worktree::land::import_clone_branch(&root, &workdir, &branch)
        })
        .await;
        if let Ok(Err(e)) = brought {
            tracing::debug!(run = %run.run_id, error = %e, "a clone's branch was not brought over");
        }
    }

    /// Whether `run_id` is a party member's current attempt and its party still waits for it.
    fn member_is_current(&self, run_id: &str) -> bool {
        self.members.get(run_id).is_some_and(|m| {
            self.parties
                .get(&m.party_id)
                .and_then(|live| live.party.member(&m.role, m.index))
                .is_some_and(|x| x.attempts == m.attempt && x.status == MemberStatus::Running)
        })
    }

    pub(super) async fn tell_parent(&self, run: &AgentRun) {
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

    /// `.troupe/agents.jsonl` in the main checkout: one line per isolated agent run.
    pub(super) fn sync_mirror(&self, project_id: &str, repo_root: &Path) {
        let runs = match self
            .store
            .isolated_runs_in_project(project_id, &repo_root.display().to_string())
        {
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
    /// A member that completed successfully in a checkout of its own and left work uncommitted
    /// (an agent CLI that edits files and never commits): that work is committed on its branch,
    /// saying so, before its completion reaches the party, so the merge queue lands it. A
    /// partial or blocked completion's edits are left as they are, for the person.
    async fn commit_leftovers(&self, run: &AgentRun, m: &MemberRef) {
        let Some(live) = self.parties.get(&m.party_id) else {
            return;
        };
        let Some(workdir) = run.workdir.clone() else {
            return;
        };
        // Only a checkout of its own on this machine (not the person's, not a remote worker's).
        let remote = run.definition.get("pool").is_some_and(|p| !p.is_null());
        let canonical = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
        let checkout = Path::new(&workdir);
        if remote
            || canonical(checkout) == canonical(Path::new(&live.row.repo_root))
            || !checkout.join(".git").exists()
        {
            return;
        }
        let message = format!(
            "{}#{}: the work it left uncommitted when it completed\n\nCommitted by Troupe for the merge queue.",
            m.role, m.index
        );
        let clones = self.layout.data_dir.join("clones");
        let committed = tokio::task::spawn_blocking(move || {
            let _git = crate::project::git_lock();
            // A clone is the member's to write: committed in only as Troupe made it.
            if troupe_worktree::is_own_repo(Path::new(&workdir))
                || Path::new(&workdir).starts_with(&clones)
            {
                troupe_worktree::commit_all_own(Path::new(&workdir), &message)
            } else {
                troupe_worktree::commit_all(Path::new(&workdir), &message)
            }
        })
        .await;
        let commit = match committed {
            Ok(Ok(Some(commit))) => commit,
            Ok(Ok(None)) => return,
            Ok(Err(e)) => {
                tracing::warn!(run = %run.run_id, error = %e, "a member's leftover work was not committed");
                return;
            }
            Err(e) => {
                tracing::warn!(run = %run.run_id, error = %e, "committing a member's leftover work failed");
                return;
            }
        };
        let event = troupe_store::NewEvent {
            kind: "member_work_committed".into(),
            project_id: Some(run.project_id.clone()),
            session_id: Some(run.session_id.clone()),
            party_id: Some(m.party_id.clone()),
            data: serde_json::json!({
                "role": m.role, "index": m.index, "run_id": run.run_id, "commit": commit }),
        };
        if let Err(e) = self.store.append_event(event).await {
            tracing::debug!(error = %e, "member_work_committed not recorded");
        }
    }

    pub(super) fn write_agent_state(&mut self, run: &AgentRun) {
        let Some(workdir) = &run.workdir else { return };
        // A checkout removed by cleanup is not brought back.
        if !Path::new(workdir).exists() {
            return;
        }
        // `run` is as its end left it (every caller has just written or read it).
        let isolated = serde_json::from_value::<AgentDefinition>(run.definition.clone())
            .is_ok_and(|d| d.isolation != Isolation::None);
        if !isolated {
            return;
        }
        let text = serde_json::to_string_pretty(&mirror_line(run)).unwrap_or_default();
        if let Err(e) = write_mirror(
            &Path::new(workdir).join(".troupe"),
            "agent-state.json",
            &text,
        ) {
            tracing::debug!(error = %e, "cannot write agent-state.json");
        }
        // The project's list of runs is rewritten at most once a second (and when a party
        // ends): rewriting it at every run's end would cost a party the square of its size.
        if let Ok(project) = self.store.get_project(&run.project_id) {
            self.mirror_later(&run.project_id, Path::new(&project.root_path));
        }
    }

    /// Marks a project's `agents.jsonl` due; the first mark schedules the rewrite.
    pub(super) fn mirror_later(&mut self, project_id: &str, root: &Path) {
        if self.mirrors_due.is_empty() {
            let commands = self.commands.clone();
            let pause = self.mirror_pause;
            tokio::spawn(async move {
                tokio::time::sleep(pause).await;
                let _stopping = commands.send(Command::SyncMirrors);
            });
        }
        self.mirrors_due
            .insert(project_id.to_string(), root.to_path_buf());
    }
}

/// How often a project's `.troupe/agents.jsonl` may be rewritten while its runs end: at most
/// once a second, and never more than a twentieth of the time (a rewrite reads every isolated
/// run of the project: a party of thousands of them makes it long).
pub(super) const MIRROR_EVERY: std::time::Duration = std::time::Duration::from_secs(1);
pub(super) const MIRROR_SHARE: u32 = 20;

/// Why a process member ended with its daemon (`troupe stop` without `--leave-running`).
const STOPPED_WITH_DAEMON: &str = "the daemon stopped and ended it (nothing was left running)";
/// Why a run not started yet ended with its daemon.
const STOPPED_FIRST: &str = "never started: the daemon stopped first";

/// Why a run that no later daemon can take over ended with its daemon.
pub(super) fn not_adoptable(runner: &str) -> String {
    if runner.starts_with("acp:") {
        "the daemon driving this ACP agent stopped".into()
    } else {
        "the daemon running this executor stopped".into()
    }
}

pub(super) fn mirror_line(r: &AgentRun) -> Value {
    json!({
        "run_id": r.run_id, "agent": r.agent_name, "status": r.status,
        "party_id": r.party_id, "role": r.role_name, "instance_index": r.instance_index,
        "attempt": r.attempt, "session_id": r.session_id, "workdir": r.workdir,
        "started_at": r.started_at, "completed_at": r.completed_at,
        "output": r.result.as_ref().and_then(|x| x.get("output")),
    })
}

/// Writes a derived view atomically, in a `.troupe` folder git ignores.
pub(super) fn write_mirror(dir: &Path, file: &str, text: &str) -> std::io::Result<()> {
    // A member may have made the folder a link in its checkout: the daemon writes through none.
    if std::fs::symlink_metadata(dir).is_ok_and(|m| m.file_type().is_symlink()) {
        return Err(std::io::Error::other(format!(
            "{} is a link: the mirror is not written through it",
            dir.display()
        )));
    }
    std::fs::create_dir_all(dir)?;
    let ignore = dir.join(".gitignore");
    if !ignore.exists() {
        std::fs::write(&ignore, "*\n")?;
    }
    let tmp = dir.join(format!(".{file}.tmp"));
    std::fs::write(&tmp, text)?;
    std::fs::rename(tmp, dir.join(file))
}

/// How a member's checkout is made, given what its definition asks. With members sandboxed, a
/// worktree is made a borrowing clone (`troupe_worktree::ensure_clone`): a linked worktree's refs
/// and objects are the person's repository's, which its member could then rewrite; a clone's are
/// its own. Unsandboxed (a member can write the person's files anyway), worktrees stay.
pub(crate) fn carried_out(isolation: Isolation, sandbox: &crate::sandbox::Sandbox) -> Isolation {
    match isolation {
        Isolation::Worktree if sandbox.is_on() => Isolation::Clone,
        other => other,
    }
}

/// The member's working directory: the project itself, a worktree, or a clone (what `isolation`
/// says: `carried_out` gives a member's).
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
        let _one_at_a_time = crate::project::git_lock();
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

/// The PATH members get: the directory of the binary that runs this daemon first, then the
/// daemon's own PATH. Worked out once (`current_exe` reads `/proc/self/exe`).
fn member_path() -> Option<&'static str> {
    static PATH: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        let dir = std::env::current_exe()
            .ok()
            .and_then(|p| p.parent().map(Path::to_path_buf))?;
        let path = std::env::var("PATH").unwrap_or_default();
        Some(format!("{}:{path}", dir.display()))
    })
    .as_deref()
}

/// The environment a run's process gets: enough to call back with `troupe call …` as the run
/// (its own credential, `TROUPE_RUN_TOKEN`), never the person's token or where it is kept.
pub(super) fn member_env(
    layout: &Layout,
    run_key: &crate::authority::RunKey,
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
            troupe_api::layout::RUN_TOKEN.into(),
            run_key.mint(&run.run_id),
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
    if let Some(path) = member_path() {
        env.push(("PATH".into(), path.to_string()));
    }
    for (k, v) in &agent.env {
        env.push((k.clone(), v.clone()));
    }
    env
}
