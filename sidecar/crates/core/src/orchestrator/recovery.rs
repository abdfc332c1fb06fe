//! Recovery at start-up: adopts the live processes an earlier daemon left (and, through the
//! pools, the remote runs it dispatched), buries the runs that cannot be adopted (with every process of theirs), rebuilds every live party from the store and
//! re-consults the decisions that were pending when the daemon stopped, and resumes the pattern
//! runs (`patterns.rs`).

use super::*;

impl Loop {
    /// Rebuilds live parties and runs after a (re)start.
    pub(super) async fn recover(&mut self) -> anyhow::Result<()> {
        // 1. Runs an earlier daemon left: adopt the live processes that can be adopted, end
        //    every process of the rest (its whole group and whatever carries its run id, the
        //    agent CLI's own children included) and bury them.
        let mut adopted = std::collections::HashSet::new();
        // Local processes taken over: their boxes' egress proxies open again (step 2b).
        let mut reboxed = Vec::new();
        let mut ended = Vec::new();
        // Pattern runs live in the daemon but are resumed, not buried (step 3).
        let flows = self.store.unfinished_flows()?;
        for run in self.store.list_runs(None, None, true)? {
            if flows.iter().any(|(root, _)| *root == run.run_id) {
                continue;
            }
            // A session leading its own party is still there: it goes on leading.
            if crate::runners::is_attached(&run.definition) && run.status == RunStatus::Running {
                crate::runners::attached::hold(&self.runner, run.run_id.clone());
                adopted.insert(run.run_id.clone());
                continue;
            }
            // A remote member may still run on its worker: the pools take it back.
            if run.status == RunStatus::Running
                && let Some(remote) = crate::runners::remote::recorded(&run)
                && let Some(pools) = self
                    .daemon
                    .get()
                    .and_then(|h| h.upgrade())
                    .and_then(|h| h.pools())
            {
                tracing::info!(run = %run.run_id, "re-attaching a remote run");
                adopted.insert(run.run_id.clone());
                self.runner
                    .spawn_managed(run.run_id.clone(), move |stop| pools.adopt(remote, stop));
                continue;
            }
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
                    // A hold (`pause_party`) lives in the daemon that made it: one that died
                    // with members held lets them go here, as a stopping daemon would.
                    if let Some(group) = run.pgid.and_then(|g| u32::try_from(g).ok()) {
                        crate::runners::process::signal_group(group, rustix::process::Signal::CONT);
                    }
                    adopted.insert(run.run_id.clone());
                    self.runner
                        .adopt(run.run_id.clone(), pid, run.pid_start, left);
                    reboxed.push(run.clone());
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
        let mut lost = std::collections::HashSet::new();
        for (procs, status, why) in ended {
            self.bury(&procs.run_id, status, why).await;
            lost.insert(procs.run_id);
        }
        // 2. Live parties, from their rows.
        for status in [PartyStatus::Running, PartyStatus::Pending] {
            // Their ids: each is read whole, once, by the loader.
            for row in self.store.list_parties_brief(None, Some(status))? {
                let party_id = row.party_id.clone();
                let party = match PartyView::load(&self.store, &party_id) {
                    Ok(party) => party,
                    Err(e) => {
                        tracing::error!(party = %party_id, error = %e, "cannot resume a party");
                        continue;
                    }
                };
                let members = party.members.clone();
                self.load(party);
                if status == PartyStatus::Pending {
                    self.inputs.push_back((party_id.clone(), Input::Launch));
                    continue;
                }
                for m in &members {
                    // A crash whose recovery plugin had not answered: ask again.
                    if m.status == MemberStatus::Recovering {
                        self.reconsult(&party_id, &m.role_name, m.instance_index, m.crash_count)
                            .await;
                        continue;
                    }
                    if m.status != MemberStatus::Running {
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
        // 2b. An adopted member's box outlived the daemon, its relay too: the relay connects
        //     to the same socket path for each connection, so a proxy opened there again
        //     (with the run's allow list planned anew) gives it back its network.
        // The boxes of runs that are gone (their temp files, a no-run box's under Landlock)
        // go; an adopted run's stays.
        let boxes = self.layout.data_dir.join("boxes");
        if let Ok(entries) = std::fs::read_dir(&boxes) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if reboxed.iter().all(|r: &AgentRun| r.run_id != name)
                    && let Err(err) = std::fs::remove_dir_all(e.path())
                {
                    tracing::debug!(dir = %e.path().display(), error = %err, "a stale box was not removed");
                }
            }
        }
        for run in reboxed {
            let Ok(agent) = serde_json::from_value::<AgentDefinition>(run.definition.clone())
            else {
                continue;
            };
            let env = supervisor::member_env(
                &self.layout,
                &self.run_key,
                &run,
                &agent,
                self.parties.get(run.party_id.as_deref().unwrap_or("")),
            );
            drop(self.box_for(&run, &agent, &env));
        }
        // 3. Pattern runs, from their saved flows.
        self.resume_flows(flows, &lost).await;
        self.drain().await;
        Ok(())
    }
}
