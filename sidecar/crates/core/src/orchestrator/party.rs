//! The party driver: feeds a party's inputs to the pure engine, persists its new state (with
//! the timeline events) and carries out its actions: spawn members (isolation, run row, the
//! runner), stop them, notify the leader or the person, consult recovery plugins.

use super::*;

impl Loop {
    /// Applies an input from an operation: errors go back to the caller.
    pub(super) async fn input(&mut self, party_id: &str, input: Input) -> Result<(), ApiError> {
        if !self.parties.contains_key(party_id) {
            let (row, _) = self.store.get_party(party_id)?;
            return Err(ApiError::Conflict(format!(
                "party {party_id} is {}; it no longer runs",
                row.status
            )));
        }
        self.step(party_id, input).await
    }

    pub(super) async fn launch(&mut self, party: PartyView) -> Result<(), ApiError> {
        let party_id = party.row.party_id.clone();
        self.load(party);
        self.step(&party_id, Input::Launch).await
    }

    /// Builds the engine's party from the stored one and makes it live.
    pub(super) fn load(&mut self, view: PartyView) {
        let PartyView {
            row,
            members,
            snapshot,
        } = view;
        let mut party = Party::new(snapshot.party.clone());
        party.status = row.status;
        party.overrides = row.overrides.clone();
        party.paused = row.paused.clone();
        party.released = row.released.clone();
        party.members = members
            .iter()
            .map(|m| Member {
                role: m.role_name.clone(),
                index: u32::try_from(m.instance_index).unwrap_or(0),
                status: m.status,
                crash_count: u32::try_from(m.crash_count).unwrap_or(0),
                attempts: u32::try_from(m.attempts).unwrap_or(0),
                started_at_ms: m.started_at_ms.and_then(|v| u64::try_from(v).ok()),
                finished_at_ms: m.finished_at_ms.and_then(|v| u64::try_from(v).ok()),
            })
            .collect();
        let named_roles =
            crate::playbooks::named_roles(snapshot.party.roles.iter().map(|(name, r)| {
                let lands = snapshot
                    .agents
                    .get(&r.agent)
                    .is_some_and(|a| a.runner == crate::runners::land::LAND);
                let part = if lands {
                    Some("merge queue".to_string())
                } else {
                    crate::playbooks::of_role(name, r)
                };
                (name.clone(), part)
            }));
        self.parties.insert(
            row.party_id.clone(),
            LiveParty {
                party,
                row,
                snapshot,
                named_roles,
                saved: None,
            },
        );
    }

    /// Processes inputs queued by earlier steps (a spawn that failed, a recovered exit).
    pub(super) async fn drain(&mut self) {
        while let Some((party_id, input)) = self.inputs.pop_front() {
            if self.parties.contains_key(&party_id)
                && let Err(e) = self.step(&party_id, input).await
            {
                tracing::warn!(party = %party_id, error = %e, "queued party input failed");
            }
        }
    }

    /// One engine step: decide, persist, act.
    pub(super) async fn step(&mut self, party_id: &str, input: Input) -> Result<(), ApiError> {
        let now = now_ms();
        let Some(live) = self.parties.get_mut(party_id) else {
            return Err(ApiError::NotFound {
                what: "live party".into(),
                id: party_id.into(),
            });
        };
        let input_event = describe_input(&input);
        let actions = live
            .party
            .step(input, now)
            .map_err(|e| ApiError::Conflict(e.to_string()))?;
        let row = &live.row;
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
        let head = PartyHead {
            status: live.party.status,
            status_reason: reason.or(row.status_reason.clone()),
            overrides: live.party.overrides.clone(),
            paused: live.party.paused.clone(),
            released: live.party.released.clone(),
        };
        // The party's row (which also holds its launch snapshot, as large as the party) is
        // written only when its own fields changed: most steps start or end one member.
        let head = (live.saved.as_ref() != Some(&head)).then_some(head);
        let state = PartyState {
            head: head.clone(),
            // Only the members the step changed are written back (the engine keeps them: no
            // walk over the whole party per step).
            members: live
                .party
                .changed_members()
                .map(|m| MemberState {
                    role_name: m.role.clone(),
                    instance_index: i64::from(m.index),
                    status: m.status,
                    crash_count: i64::from(m.crash_count),
                    attempts: i64::from(m.attempts),
                    started_at_ms: m.started_at_ms.and_then(|v| i64::try_from(v).ok()),
                    finished_at_ms: m.finished_at_ms.and_then(|v| i64::try_from(v).ok()),
                })
                .collect(),
        };
        // The store announces what this changes for the person (notifications, a role paused
        // or resumed, the party's end) once it has committed.
        self.store
            .save_party_state(party_id.to_string(), state, events, notifications)
            .await?;
        if let Some(head) = head
            && let Some(live) = self.parties.get_mut(party_id)
        {
            live.saved = Some(head);
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

    pub(super) async fn act(&mut self, party_id: &str, action: Action) {
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
                    self.stop_any(&run).await;
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
                if let Some(live) = self.parties.remove(party_id) {
                    self.sync_mirror(&live.row.project_id, Path::new(&live.row.repo_root));
                }
            }
        }
    }

    /// Sends the engine's notification: to the live leader (or the person when there is none),
    /// to every live member, or (already recorded) to the person.
    pub(super) async fn notify(&mut self, party_id: &str, target: NotifyTarget, text: &str) {
        let Some(live) = self.parties.get(party_id) else {
            return;
        };
        let row = &live.row;
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
                    if let Err(e) = self.store.add_notification(n).await {
                        tracing::warn!(party = %party_id, error = %e, "notice lost");
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

    pub(super) fn live_leader_session(&self, party_id: &str) -> Option<String> {
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
    pub(super) async fn spawn_member(
        &self,
        party_id: &str,
        role: &str,
        index: u32,
        attempt: u32,
    ) -> Result<(String, bool), String> {
        let live = self.parties.get(party_id).ok_or("the party is not live")?;
        let row = &live.row;
        let role_def = live
            .snapshot
            .party
            .roles
            .get(role)
            .ok_or_else(|| format!("no role {role}"))?
            .clone();
        let mut agent = live
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
        if let Some(pool) = &role_def.pool {
            agent.pool = Some(pool.clone());
        }
        if let Some(overrides) = &role_def.overrides {
            agent = overrides.apply(&agent)?;
        }
        // A party led by the session that launched it (`mode: self`): that session is the
        // leader's run; nothing is started and it works where it is.
        let attach = live
            .snapshot
            .self_led_by
            .clone()
            .filter(|_| role_def.is_leader);
        if attach.is_some() {
            agent.runner = crate::runners::ATTACHED.into();
            agent.isolation = Isolation::None;
            agent.timeout_secs = None;
        }
        let repo_root = PathBuf::from(&row.repo_root);
        let label = party_label(row);
        let (workdir, branch) = isolate(
            &self.layout,
            &repo_root,
            super::carried_out(agent.isolation, &self.sandbox),
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
        // Its playbook first (how it plays its part, `crate::playbooks`), then its own
        // instructions and task, then the party as its turn starts.
        let seat = crate::playbooks::Seat {
            party_id,
            role,
            index,
            roles: live.named_roles.0.clone(),
            more_roles: live.named_roles.1,
        };
        let tools = if crate::runners::wasm::plugin_of(&agent).is_some() {
            crate::playbooks::Tools::Executor
        } else if agent.runner == crate::runners::ATTACHED
            || crate::runners::acp::agent_of(&agent).is_some()
                && agent.acp.as_ref().is_none_or(|o| o.mcp)
        {
            crate::playbooks::Tools::Mcp
        } else {
            crate::playbooks::Tools::Shell
        };
        // The merge queue runs no agent: it is told nothing.
        let playbook = (agent.runner != crate::runners::land::LAND)
            .then(|| crate::playbooks::of_role(role, &role_def))
            .flatten();
        let mut prompt = crate::playbooks::compose(&repo_root, &seat, playbook.as_deref(), tools)?;
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
        if playbook.is_some() {
            prompt.push('\n');
            prompt.push_str(&crate::playbooks::state(&self.store, party_id, role));
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
                trigger: None,
                flow: None,
                attach_session: attach,
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
    pub(super) async fn spawn_members(&mut self, party_id: &str, spawns: Vec<(String, u32, u32)>) {
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
            let (project, root) = (live.row.project_id.clone(), live.row.repo_root.clone());
            self.mirror_later(&project, Path::new(&root));
        }
    }

    pub(super) async fn reconsult(&mut self, party_id: &str, role: &str, index: i64, crashes: i64) {
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

    pub(super) async fn spawn_or_queue(
        &mut self,
        party_id: &str,
        role: &str,
        index: u32,
        attempt: u32,
    ) {
        self.spawn_members(party_id, vec![(role.to_string(), index, attempt)])
            .await;
    }
}

/// Asks a recovery plugin; a plugin that cannot answer is an error the caller turns into a
/// pause (a person decides), never a crash of the daemon.
pub(super) async fn consult(
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

/// Whether a member of the party's leader role is running (none when it has no leader).
pub(super) fn leader_running(live: &LiveParty) -> bool {
    live.snapshot.party.leader().is_some_and(|leader| {
        live.party
            .members
            .iter()
            .any(|m| m.role == leader && m.status == MemberStatus::Running)
    })
}

pub(super) fn describe_input(input: &Input) -> (String, Value) {
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
        Input::BudgetTripped {
            role,
            index,
            reason,
        } => (
            "member_paused_by_budget".into(),
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
