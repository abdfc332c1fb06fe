//! Agent operations: agent definition CRUD, and runs — `start_agent` (a child session and a
//! process, within the depth limit), `complete`, `list_agents`, `get_agent_result`,
//! `cancel_agent`. And the pattern operations: `route_to` (a router step's choice; it completes
//! the step), `team_broadcast`, `vote_conclude` and `conclude_team` (a team member's turn only;
//! `conclude_team` its coordinator's), and `get_run_tree` (a run and every run under it, by
//! session parentage and `flow_root`, with usage rolled up).

use std::path::PathBuf;

use troupe_engine::{AgentDefinition, Isolation};
use troupe_store::{AgentRun, DefinitionKind, NewRun, NewSession, Put, RunStatus, SessionStatus};

use crate::daemon::Daemon;
use crate::orchestrator::Command;
use troupe_api::ApiError;
use troupe_api::types::*;

fn parse_definition(
    op: &'static str,
    value: serde_json::Value,
) -> Result<AgentDefinition, ApiError> {
    serde_json::from_value(value)
        .map_err(|e| ApiError::Internal(format!("{op}: stored agent definition unreadable: {e}")))
}

async fn put(
    d: &Daemon,
    op: &'static str,
    def: AgentDefinition,
    mode: Put,
) -> Result<DefinitionResult, ApiError> {
    def.validate().map_err(|e| ApiError::invalid(op, e))?;
    // Patterns name other agents: they must exist, and no circle may run through them.
    let store = d.store.clone();
    let lookup = move |name: &str| -> Option<AgentDefinition> {
        store
            .get_definition(DefinitionKind::Agent, name)
            .ok()
            .and_then(|row| serde_json::from_value(row.definition).ok())
    };
    troupe_engine::pattern::check_patterns(&def, &lookup).map_err(|e| ApiError::invalid(op, e))?;
    let json = serde_json::to_value(&def).map_err(|e| ApiError::Internal(e.to_string()))?;
    let definition = d
        .store
        .put_definition(DefinitionKind::Agent, def.name, json, mode)
        .await?;
    Ok(DefinitionResult { definition })
}

pub async fn create_agent_definition(
    d: &Daemon,
    p: AgentDefinitionParams,
) -> Result<DefinitionResult, ApiError> {
    put(d, "create_agent_definition", p.definition, Put::Create).await
}

pub async fn update_agent_definition(
    d: &Daemon,
    p: AgentDefinitionParams,
) -> Result<DefinitionResult, ApiError> {
    put(d, "update_agent_definition", p.definition, Put::Update).await
}

pub async fn get_agent_definition(d: &Daemon, p: NameParams) -> Result<DefinitionResult, ApiError> {
    let definition = d.store.get_definition(DefinitionKind::Agent, &p.name)?;
    Ok(DefinitionResult { definition })
}

pub async fn list_agent_definitions(
    d: &Daemon,
    _: NoParams,
) -> Result<DefinitionsResult, ApiError> {
    let definitions = d.store.list_definitions(DefinitionKind::Agent)?;
    Ok(DefinitionsResult { definitions })
}

pub async fn delete_agent_definition(
    d: &Daemon,
    p: NameParams,
) -> Result<DefinitionResult, ApiError> {
    let definition = d
        .store
        .delete_definition(DefinitionKind::Agent, p.name)
        .await?;
    Ok(DefinitionResult { definition })
}

pub async fn start_agent(d: &Daemon, p: StartAgentParams) -> Result<StartAgentResult, ApiError> {
    const OP: &str = "start_agent";
    if p.prompt.trim().is_empty() {
        return Err(ApiError::invalid(OP, "prompt must not be empty"));
    }
    let parent = d.store.get_session(&p.parent_session_id)?;
    if parent.status == SessionStatus::Ended {
        return Err(ApiError::Conflict(format!(
            "session {} has ended",
            parent.session_id
        )));
    }
    // The depth limit comes from the agent the parent is running (none: a person, limit 1).
    let limit = match d.store.run_of_session(&parent.session_id)? {
        Some(run) => parse_definition(OP, run.definition)?.nesting_limit(),
        None => 1,
    };
    let depth = parent.agent_depth + 1;
    if depth > i64::from(limit) {
        return Err(ApiError::Forbidden(format!(
            "session {} is at depth {}; its agent may start agents only down to depth {limit} \
             (allow_nested_agents / max_agent_depth)",
            parent.session_id, parent.agent_depth
        )));
    }
    let row = d.store.get_definition(DefinitionKind::Agent, &p.agent)?;
    let mut def = parse_definition(OP, row.definition)?;
    def.validate().map_err(|e| ApiError::invalid(OP, e))?;
    // The person's overrides change the agent for this run; a member's may only narrow it.
    let parent_run = d.store.run_of_session(&parent.session_id)?;
    let mut overrides = p.overrides.clone().unwrap_or_default();
    if let Some(t) = p.timeout {
        overrides.timeout_secs = Some(t);
    }
    if overrides != troupe_engine::AgentOverrides::default() {
        if parent_run.is_some() {
            overrides
                .narrows(&def)
                .map_err(|e| ApiError::Forbidden(format!("{OP}: {e}")))?;
        }
        def = overrides
            .apply(&def)
            .map_err(|e| ApiError::invalid(OP, e))?;
    }
    let project = d.store.get_project(&parent.project_id)?;
    let context = match &p.session_context {
        Some(spec) => Some(
            crate::context::resolve(
                &d.store,
                &parent,
                std::path::Path::new(&project.root_path),
                &d.layout.data_dir,
                parent_run.is_some(),
                spec,
            )
            .map_err(|e| match e {
                crate::context::ContextError::Store(e) => ApiError::from(e),
                bad => ApiError::invalid(OP, bad.to_string()),
            })?,
        ),
        None => None,
    };
    let workdir = match def.isolation {
        Isolation::None => PathBuf::from(&parent.cwd),
        isolation => {
            let id = uuid_like();
            let label = format!("agent-{}", &id[id.len().saturating_sub(12)..]);
            crate::orchestrator::isolate(
                &d.layout,
                &PathBuf::from(&project.root_path),
                crate::orchestrator::carried_out(isolation, &d.sandbox),
                &label,
                &def.name,
                0,
            )
            .await
            .map_err(|e| ApiError::invalid(OP, format!("cannot isolate agent {}: {e}", def.name)))?
            .0
        }
    };
    // `task: "next"`: the project's oldest open task, taken for this run (last, once the run
    // can start).
    let task = match p.task.as_deref() {
        Some("next") => Some(
            d.store
                .claim_next_task(parent.project_id.clone(), parent.session_id.clone())
                .await?
                .ok_or_else(|| {
                    ApiError::Conflict(format!(
                        "{OP}: task \"next\": project {} has no open task",
                        project.name
                    ))
                })?,
        ),
        // Another id is recorded as given (its text added when it is a task of ours).
        Some(id) => d
            .store
            .get_task(id)
            .ok()
            .filter(|t| t.project_id == parent.project_id),
        None => None,
    };
    let task_id = match p.task.as_deref() {
        Some("next") => task.as_ref().map(|t| t.task_id.clone()),
        other => other.map(str::to_string),
    };
    let mut prompt = String::new();
    if let Some(i) = &def.instructions {
        prompt.push_str(i);
        prompt.push('\n');
    }
    prompt.push_str(&p.prompt);
    if let Some(task) = &task {
        prompt.push_str(&format!("\n\nYour task ({}): {}", task.task_id, task.title));
        if let Some(d) = &task.description {
            prompt.push_str(&format!("\n{d}"));
        }
    }
    if let Some(ctx) = &context {
        prompt.push_str(&format!(
            "\n\nContext from the session that started you:\n{ctx}"
        ));
    }
    let (run, session) = d
        .store
        .create_run(NewRun {
            agent_name: def.name.clone(),
            definition: serde_json::to_value(&def)
                .map_err(|e| ApiError::Internal(e.to_string()))?,
            session: NewSession {
                cli: def.runner.clone(),
                cwd: workdir.display().to_string(),
                project_root: project.root_path.clone(),
                project_name: project.name.clone(),
                external_id: None,
                parent_session_id: Some(parent.session_id.clone()),
                spawned_by_agent_id: d
                    .store
                    .run_of_session(&parent.session_id)?
                    .map(|r| r.run_id),
                party_id: None,
            },
            party: None,
            attempt: 1,
            prompt,
            task_id,
            timeout_ms: def.timeout_secs.map(|s| (s * 1000.0) as i64),
            workdir: Some(workdir.display().to_string()),
            trigger: Some("subagent".into()),
            flow: None,
            attach_session: None,
        })
        .await?;
    let run_id = run.run_id.clone();
    d.orchestrator
        .request(|reply| Command::StartRun {
            run: Box::new(run),
            definition: Box::new(def),
            reply,
        })
        .await?;
    Ok(StartAgentResult {
        run_id,
        session_id: session.session_id,
        workdir: workdir.display().to_string(),
    })
}

/// A fresh id without dashes; its tail is random (its head is a timestamp).
fn uuid_like() -> String {
    troupe_store::new_id().replace('-', "")
}

pub async fn complete(d: &Daemon, p: CompleteParams) -> Result<CompleteResult, ApiError> {
    const OP: &str = "complete";
    // Read without its prompt: the definition (its completion schema) is what is checked.
    let run = d
        .store
        .run_to_complete(p.run_id.as_deref(), &p.session_id)?
        .ok_or_else(|| {
            ApiError::invalid(
                OP,
                format!("session {} is not running an agent", p.session_id),
            )
        })?;
    if run.session_id != p.session_id {
        return Err(ApiError::Forbidden(format!(
            "run {} belongs to session {}, not {}",
            run.run_id, run.session_id, p.session_id
        )));
    }
    let def = parse_definition(OP, run.definition)?;
    def.check_completion(&p.artifacts).map_err(|e| {
        ApiError::invalid(
            OP,
            format!(
                "the result does not match agent {}'s completion schema: {e}",
                def.name
            ),
        )
    })?;
    let status = match p.status {
        CompletionStatus::Success => RunStatus::Success,
        CompletionStatus::Partial => RunStatus::Partial,
        CompletionStatus::Blocked => RunStatus::Blocked,
    };
    let result = serde_json::json!({
        "output": p.output, "status": status, "artifacts": p.artifacts,
        "files_modified": p.files_modified, "next_steps": p.next_steps,
    });
    let end = d
        .store
        .finish_run(run.run_id, status, Some(result), None)
        .await?;
    crate::hub::announce_expired(&d.hub, &end.expired_approvals);
    let run = ended_now(end.run, end.changed)?;
    d.orchestrator.tell(Command::RunCompleted {
        run: Box::new(run.clone()),
    });
    if run.party_id.is_some() {
        // A member's last commit is in: the radar looks now, and a best-of-N role whose
        // attempts are all done starts its picking.
        d.radar.kick();
        super::landing::after_member_done(d, &run).await;
    } else {
        super::landing::after_judge_done(d, &run).await;
    }
    Ok(CompleteResult {
        run_id: run.run_id,
        status: run.status,
    })
}

pub async fn list_agents(d: &Daemon, p: ListAgentsParams) -> Result<RunsResult, ApiError> {
    const OP: &str = "list_agents";
    let Some(caller) = &p.session_id else {
        if p.scope.is_some() {
            return Err(ApiError::invalid(
                OP,
                "scope goes with session_id (the caller)",
            ));
        }
        let runs = d.store.list_runs(
            p.parent_session_id.as_deref(),
            p.party_id.as_deref(),
            p.active_only,
        )?;
        return Ok(RunsResult { runs });
    };
    if p.parent_session_id.is_some() {
        return Err(ApiError::invalid(
            OP,
            "give session_id (the caller's family) or parent_session_id, not both",
        ));
    }
    d.store.get_session(caller)?;
    let keep = |r: &AgentRun| {
        p.party_id
            .as_deref()
            .is_none_or(|x| r.party_id.as_deref() == Some(x))
    };
    let mut runs = Vec::new();
    if p.scope != Some(AgentScope::Siblings) {
        runs.extend(d.store.list_runs(Some(caller), None, p.active_only)?);
    }
    if p.scope != Some(AgentScope::Children)
        && let Some(own) = d.store.run_of_session(caller)?
    {
        let siblings = match (&own.party_id, &own.parent_session_id) {
            (Some(party), _) => d.store.list_runs(None, Some(party), p.active_only)?,
            (None, Some(parent)) => d.store.list_runs(Some(parent), None, p.active_only)?,
            (None, None) => Vec::new(),
        };
        runs.extend(siblings.into_iter().filter(|r| r.run_id != own.run_id));
    }
    runs.retain(keep);
    runs.sort_by(|a, b| (&a.created_at, &a.run_id).cmp(&(&b.created_at, &b.run_id)));
    runs.dedup_by(|a, b| a.run_id == b.run_id);
    Ok(RunsResult { runs })
}

pub async fn get_agent_result(d: &Daemon, p: RunIdParams) -> Result<RunResult, ApiError> {
    let run = d.store.get_run(&p.run_id)?;
    let usage = d.store.usage("run", &run.run_id)?;
    Ok(RunResult { run, usage })
}

pub async fn cancel_agent(d: &Daemon, p: RunIdParams) -> Result<RunResult, ApiError> {
    let run = d.store.get_run(&p.run_id)?;
    if let Some(party) = &run.party_id {
        return Err(ApiError::Conflict(format!(
            "run {} is a member of party {party}: use cancel_party or signal_role",
            run.run_id
        )));
    }
    let end = d
        .store
        .finish_run(
            run.run_id,
            RunStatus::Cancelled,
            None,
            Some("cancelled".into()),
        )
        .await?;
    crate::hub::announce_expired(&d.hub, &end.expired_approvals);
    let run = ended_now(end.run, end.changed)?;
    d.orchestrator.tell(Command::StopRun {
        run_id: run.run_id.clone(),
    });
    let usage = d.store.usage("run", &run.run_id)?;
    Ok(RunResult { run, usage })
}

/// The run, if this call is what ended it; otherwise a conflict naming how it had ended.
fn ended_now(run: AgentRun, changed: bool) -> Result<AgentRun, ApiError> {
    if changed {
        Ok(run)
    } else {
        Err(ApiError::Conflict(format!(
            "run {} already ended as {}",
            run.run_id,
            run.status.as_str()
        )))
    }
}

pub async fn route_to(d: &Daemon, p: RouteToParams) -> Result<RouteToResult, ApiError> {
    const OP: &str = "route_to";
    let run = d.store.run_of_session(&p.session_id)?.ok_or_else(|| {
        ApiError::Forbidden(format!(
            "session {} is not an agent run: route_to is a router step's tool",
            p.session_id
        ))
    })?;
    let def = parse_definition(OP, run.definition)?;
    let Some(candidates) = def.route_only else {
        return Err(ApiError::Forbidden(format!(
            "run {} ({}) is not a router's step: only a router chooses with route_to",
            run.run_id, run.agent_name
        )));
    };
    let router = run.agent_name.clone();
    // The step ends with its choice either way; the pattern run then goes on with it, or fails
    // naming the router.
    let mut artifacts = std::collections::BTreeMap::new();
    artifacts.insert(
        "route".to_string(),
        serde_json::json!({ "agent": p.agent, "reason": p.reason }),
    );
    complete(
        d,
        CompleteParams {
            session_id: p.session_id,
            run_id: Some(run.run_id.clone()),
            output: format!("routed to {}: {}", p.agent, p.reason),
            status: CompletionStatus::Success,
            artifacts,
            files_modified: Vec::new(),
            next_steps: Vec::new(),
        },
    )
    .await?;
    if !candidates.contains(&p.agent) {
        return Err(ApiError::invalid(
            OP,
            format!(
                "router {router} chose {}, which is not one of its agents ({}); the request fails",
                p.agent,
                candidates.join(", ")
            ),
        ));
    }
    Ok(RouteToResult {
        run_id: run.run_id,
        agent: p.agent,
    })
}

pub async fn get_run_tree(d: &Daemon, p: RunIdParams) -> Result<RunTreeResult, ApiError> {
    let runs = d.store.run_tree(&p.run_id)?;
    let by_session: std::collections::HashMap<&str, &AgentRun> =
        runs.iter().map(|r| (r.session_id.as_str(), r)).collect();
    let parent_of = |r: &AgentRun| -> Option<String> {
        if r.run_id == p.run_id {
            return None;
        }
        r.flow_root.clone().or_else(|| {
            r.parent_session_id
                .as_deref()
                .and_then(|s| by_session.get(s))
                .map(|parent| parent.run_id.clone())
        })
    };
    // Each run after the run that started it (depth first, oldest first).
    let mut ordered = Vec::with_capacity(runs.len());
    let mut stack = vec![(p.run_id.clone(), 0u32)];
    while let Some((id, depth)) = stack.pop() {
        let Some(run) = runs.iter().find(|r| r.run_id == id) else {
            continue;
        };
        let output = run
            .result
            .as_ref()
            .and_then(|r| r.get("output"))
            .and_then(serde_json::Value::as_str)
            .map(String::from);
        ordered.push(RunTreeEntry {
            run_id: run.run_id.clone(),
            agent: run.agent_name.clone(),
            trigger: run.trigger.clone(),
            status: run.status,
            parent_run_id: parent_of(run),
            depth,
            output,
            error: run.error.clone(),
            usage: d.store.usage("run", &run.run_id)?,
        });
        let children: Vec<&AgentRun> = runs
            .iter()
            .filter(|c| parent_of(c).as_deref() == Some(run.run_id.as_str()))
            .collect();
        for child in children.into_iter().rev() {
            stack.push((child.run_id.clone(), depth + 1));
        }
    }
    let Some(root) = runs.iter().find(|r| r.run_id == p.run_id) else {
        return Err(ApiError::NotFound {
            what: "agent run".into(),
            id: p.run_id,
        });
    };
    let chain = root
        .result
        .as_ref()
        .and_then(|r| r.get("chain"))
        .and_then(|c| serde_json::from_value(c.clone()).ok())
        .unwrap_or_default();
    let total = d.store.usage("run", &p.run_id)?;
    Ok(RunTreeResult {
        runs: ordered,
        chain,
        total,
    })
}

/// The run of a team member's turn, and the team it sits in; `coordinator`: only its coordinator.
fn team_turn(
    d: &Daemon,
    op: &'static str,
    session_id: &str,
    coordinator: bool,
) -> Result<(AgentRun, String), ApiError> {
    let run = d.store.run_of_session(session_id)?.ok_or_else(|| {
        ApiError::Forbidden(format!(
            "session {session_id} is not an agent run: {op} is a team member's tool"
        ))
    })?;
    let def = parse_definition(op, run.definition.clone())?;
    match def.team_seat.as_deref() {
        None => Err(ApiError::Forbidden(format!(
            "run {} ({}) is not a team member's turn: {op} is a team member's tool",
            run.run_id, run.agent_name
        ))),
        Some("coordinator") => {
            let team = run_team(d, &run)?;
            Ok((run, team))
        }
        Some(_) if coordinator => Err(ApiError::Forbidden(format!(
            "{} is not the coordinator of its team: only the coordinator concludes",
            run.agent_name
        ))),
        Some(_) => {
            let team = run_team(d, &run)?;
            Ok((run, team))
        }
    }
}

fn run_team(d: &Daemon, run: &AgentRun) -> Result<String, ApiError> {
    let root = run.flow_root.as_deref().unwrap_or_default();
    Ok(d.store.get_run(root)?.agent_name)
}

async fn team_tell(
    d: &Daemon,
    run: AgentRun,
    team: String,
    input: crate::orchestrator::TeamAct,
) -> Result<TeamActResult, ApiError> {
    let run_id = run.run_id.clone();
    d.orchestrator
        .request(|reply| Command::Team {
            run_id: run_id.clone(),
            input,
            reply,
        })
        .await?;
    Ok(TeamActResult { run_id, team })
}

pub async fn team_broadcast(d: &Daemon, p: TeamBroadcastParams) -> Result<TeamActResult, ApiError> {
    const OP: &str = "team_broadcast";
    if p.message.trim().is_empty() {
        return Err(ApiError::invalid(OP, "message must not be empty"));
    }
    let (run, team) = team_turn(d, OP, &p.session_id, false)?;
    team_tell(
        d,
        run,
        team,
        crate::orchestrator::TeamAct::Broadcast(p.message),
    )
    .await
}

pub async fn vote_conclude(d: &Daemon, p: VoteConcludeParams) -> Result<TeamActResult, ApiError> {
    let (run, team) = team_turn(d, "vote_conclude", &p.session_id, false)?;
    team_tell(d, run, team, crate::orchestrator::TeamAct::Vote(p.reason)).await
}

pub async fn conclude_team(d: &Daemon, p: ConcludeTeamParams) -> Result<TeamActResult, ApiError> {
    const OP: &str = "conclude_team";
    if p.answer.trim().is_empty() {
        return Err(ApiError::invalid(OP, "answer must not be empty"));
    }
    let (run, team) = team_turn(d, OP, &p.session_id, true)?;
    team_tell(
        d,
        run,
        team,
        crate::orchestrator::TeamAct::Conclude(p.answer),
    )
    .await
}
