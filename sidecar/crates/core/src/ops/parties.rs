//! Party operations: party definition CRUD (validated against the agent definitions), launch,
//! status, the leader's tools (signal_role, reassign_task, override_recovery, cancel_party,
//! list_parties), cleanup of members' checkouts, tasks with escalation, notifications.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use troupe_engine::{AgentDefinition, Isolation, PartyDefinition};
use troupe_store::{DefinitionKind, PartyRow, Priority, Put, Recipients, StoreError};

use crate::daemon::Daemon;
use crate::orchestrator::{Command, Snapshot, party_label};
use crate::party::PartyView;
use crate::project::resolve_project_root;
use crate::project_config::ProjectConfig;
use troupe_api::ApiError;
use troupe_api::types::*;

fn summary(row: &PartyRow) -> PartySummary {
    PartySummary {
        party_id: row.party_id.clone(),
        name: row.name.clone(),
        status: row.status,
        status_reason: row.status_reason.clone(),
        project_id: row.project_id.clone(),
        repo_root: row.repo_root.clone(),
        task_id: row.task_id.clone(),
        created_at: row.created_at.clone(),
        completed_at: row.completed_at.clone(),
        released: row.released.iter().cloned().collect(),
        inputs: row.inputs.clone(),
    }
}

/// Checks a party definition against the stored agent definitions; returns those it uses.
fn check(
    d: &Daemon,
    op: &'static str,
    def: &PartyDefinition,
    project: Option<&ProjectConfig>,
) -> Result<BTreeMap<String, AgentDefinition>, ApiError> {
    let mut agents = BTreeMap::new();
    // The project's own agents come first; one that does not parse is an error of its own.
    if let Some(project) = project {
        for role in def.roles.values() {
            let judge = role.pick.as_ref().and_then(|p| p.judge.as_deref());
            for name in std::iter::once(role.agent.as_str()).chain(judge) {
                if let Some(agent) = project.agent(name).map_err(|e| ApiError::invalid(op, e))? {
                    agents.insert(name.to_string(), agent);
                }
            }
        }
    }
    let mut missing = None;
    def.validate(|name| {
        if agents.contains_key(name) {
            return true;
        }
        match d.store.get_definition(DefinitionKind::Agent, name) {
            Ok(row) => match serde_json::from_value::<AgentDefinition>(row.definition) {
                Ok(a) => {
                    agents.insert(name.to_string(), a);
                    true
                }
                Err(_) => false,
            },
            Err(StoreError::NotFound { .. }) => false,
            Err(e) => {
                missing = Some(e);
                false
            }
        }
    })
    .map_err(|e| ApiError::invalid(op, e.to_string()))?;
    if let Some(e) = missing {
        return Err(e.into());
    }
    for (name, role) in def.roles.iter() {
        let (Some(pool), Some(agent)) = (&role.pool, agents.get(&role.agent)) else {
            continue;
        };
        // The agent as the role runs it: checked like an agent naming the pool itself.
        let remote = AgentDefinition {
            pool: Some(pool.clone()),
            ..agent.clone()
        };
        remote.validate().map_err(|e| {
            ApiError::invalid(op, format!("role {name} runs in pool {pool:?}: {e}"))
        })?;
    }
    for (name, role) in def.roles.iter() {
        if let (Some(overrides), Some(agent)) = (&role.overrides, agents.get(&role.agent)) {
            overrides
                .apply(agent)
                .map_err(|e| ApiError::invalid(op, format!("role {name}: {e}")))?;
        }
    }
    for (name, role) in def.roles.iter().filter(|(_, r)| r.pick.is_some()) {
        if agents
            .get(&role.agent)
            .is_some_and(|a| a.isolation == Isolation::None)
        {
            return Err(ApiError::invalid(
                op,
                format!(
                    "role {name} picks the best of its attempts, so each needs a checkout of its own: agent {} must use isolation worktree or clone",
                    role.agent
                ),
            ));
        }
    }
    Ok(agents)
}

async fn put(
    d: &Daemon,
    op: &'static str,
    def: PartyDefinition,
    mode: Put,
) -> Result<DefinitionResult, ApiError> {
    check(d, op, &def, None)?;
    let json = serde_json::to_value(&def).map_err(|e| ApiError::Internal(e.to_string()))?;
    let definition = d
        .store
        .put_definition(DefinitionKind::Party, def.name, json, mode)
        .await?;
    Ok(DefinitionResult { definition })
}

pub async fn create_party_definition(
    d: &Daemon,
    p: PartyDefinitionParams,
) -> Result<DefinitionResult, ApiError> {
    put(d, "create_party_definition", p.definition, Put::Create).await
}

pub async fn update_party_definition(
    d: &Daemon,
    p: PartyDefinitionParams,
) -> Result<DefinitionResult, ApiError> {
    put(d, "update_party_definition", p.definition, Put::Update).await
}

pub async fn get_party_definition(d: &Daemon, p: NameParams) -> Result<DefinitionResult, ApiError> {
    Ok(DefinitionResult {
        definition: d.store.get_definition(DefinitionKind::Party, &p.name)?,
    })
}

pub async fn list_party_definitions(
    d: &Daemon,
    _: NoParams,
) -> Result<DefinitionsResult, ApiError> {
    Ok(DefinitionsResult {
        definitions: d.store.list_definitions(DefinitionKind::Party)?,
    })
}

pub async fn delete_party_definition(
    d: &Daemon,
    p: NameParams,
) -> Result<DefinitionResult, ApiError> {
    Ok(DefinitionResult {
        definition: d
            .store
            .delete_definition(DefinitionKind::Party, p.name)
            .await?,
    })
}

/// The project root named by `project_id` or `cwd`.
fn project_root(
    d: &Daemon,
    op: &'static str,
    project_id: Option<&str>,
    cwd: Option<&str>,
) -> Result<PathBuf, ApiError> {
    match (project_id, cwd) {
        (Some(id), _) => Ok(PathBuf::from(d.store.get_project(id)?.root_path)),
        (None, Some(cwd)) => Ok(resolve_project_root(Path::new(cwd))
            .map_err(|e| ApiError::invalid(op, format!("cwd {cwd}: {e}")))?
            .0),
        (None, None) => Err(ApiError::invalid(op, "give cwd or project_id")),
    }
}

pub async fn launch_party(d: &Daemon, p: LaunchPartyParams) -> Result<LaunchPartyResult, ApiError> {
    const OP: &str = "launch_party";
    let root = project_root(d, OP, p.project_id.as_deref(), p.cwd.as_deref())?;
    // The project's own definitions (`.troupe/config.toml`) before the store's.
    let project = ProjectConfig::load(&root).map_err(|e| ApiError::invalid(OP, e))?;
    let own = match &project {
        Some(c) => c.party(&p.name).map_err(|e| ApiError::invalid(OP, e))?,
        None => None,
    };
    let mut def: PartyDefinition = match own {
        Some(def) => def,
        None => {
            let row = d.store.get_definition(DefinitionKind::Party, &p.name)?;
            serde_json::from_value(row.definition).map_err(|e| {
                ApiError::Internal(format!(
                    "stored party definition {} unreadable: {e}",
                    p.name
                ))
            })?
        }
    };
    // This launch's changes to its roles' agents, over the roles' own.
    for (role, overrides) in &p.roles {
        let r = def.roles.get_mut(role).ok_or_else(|| {
            ApiError::invalid(OP, format!("roles: party {} has no role {role}", def.name))
        })?;
        r.overrides = Some(match &r.overrides {
            Some(own) => own.then(overrides),
            None => overrides.clone(),
        });
    }
    let agents = check(d, OP, &def, project.as_ref())?;
    // Each role's playbook is there and readable (a typo is named now, not a crash per member).
    for (name, role) in &def.roles {
        let lands = agents
            .get(&role.agent)
            .is_some_and(|a| a.runner == crate::runners::land::LAND);
        if let Some(playbook) = crate::playbooks::of_role(name, role).filter(|_| !lands) {
            for text in ["common", playbook.as_str()] {
                crate::playbooks::text(&root, text)
                    .map_err(|e| ApiError::invalid(OP, format!("role {name}: {e}")))?;
            }
        }
    }
    let isolated = def.roles.values().find_map(|r| {
        let agent = agents.get(&r.agent)?;
        let isolation = r
            .overrides
            .as_ref()
            .and_then(|o| o.isolation)
            .unwrap_or(agent.isolation);
        (isolation != Isolation::None).then_some((&agent.name, ()))
    });
    if let Some((name, _)) = isolated {
        troupe_worktree::repo_root(&root).map_err(|_| {
            ApiError::invalid(OP, format!("agent {name} works in a git worktree or clone, but {} is not in a git repository", root.display()))
        })?;
    }
    if let Some(s) = &p.created_by_session_id {
        d.store.get_session(s)?;
    }
    // An issue as the task: read from the forge now, marked as untrusted text.
    let mut inputs = p.inputs;
    let issue = match &p.issue {
        Some(text) => {
            let r = crate::forge::issue_ref(&d.forges, &root, text)?;
            let (_issue, task) = crate::forge::fetch_issue_task(&d.forges, &r).await?;
            let mut fields = match inputs.take() {
                Some(serde_json::Value::Object(m)) => m,
                None | Some(serde_json::Value::Null) => serde_json::Map::new(),
                Some(_) => {
                    return Err(ApiError::invalid(
                        OP,
                        "inputs must be an object when an issue is the task",
                    ));
                }
            };
            fields.insert("task".into(), task.into());
            // The issue's own title stays inside the task's fence (inputs reach every
            // member's prompt); the title here is ours.
            fields.insert("title".into(), format!("Resolve issue {r}").into());
            fields.insert("issue".into(), r.to_string().into());
            inputs = Some(serde_json::Value::Object(fields));
            Some(r)
        }
        None => None,
    };
    let self_led_by = match p.mode {
        LaunchMode::Spawn => None,
        LaunchMode::SelfLed => Some(self_leader(d, &def, p.created_by_session_id.as_deref())?),
    };
    let root_str = root.display().to_string();
    let project_name = root
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let system = d
        .store
        .system_session(root_str.clone(), project_name)
        .await?;
    let members: Vec<(String, i64)> = def
        .roles
        .iter()
        .flat_map(|(role, r)| (0..r.count).map(move |i| (role.clone(), i64::from(i))))
        .collect();
    let snapshot = Snapshot {
        party: def.clone(),
        agents,
        self_led_by,
    };
    let party_id = troupe_store::new_id();
    let party = PartyRow {
        party_id: party_id.clone(),
        name: def.name.clone(),
        project_id: system.project_id,
        status: PartyStatus::Pending,
        status_reason: None,
        snapshot: serde_json::to_value(&snapshot).map_err(|e| ApiError::Internal(e.to_string()))?,
        inputs,
        overrides: Default::default(),
        paused: BTreeSet::new(),
        released: BTreeSet::new(),
        repo_root: root_str,
        task_id: p.task_id,
        created_by_session_id: p.created_by_session_id,
        created_at: String::new(),
        completed_at: None,
    };
    let (row, members) = d.store.create_party(party, members).await?;
    let party = Box::new(PartyView {
        row,
        members,
        snapshot,
    });
    if let Some(r) = &issue {
        crate::forge_events::link_issue(&crate::collab::Ctx::of(d), &party, r).await?;
    }
    d.orchestrator
        .request(|reply| Command::Launch { party, reply })
        .await?;
    let (row, _) = d.store.get_party(&party_id)?;
    Ok(LaunchPartyResult {
        party_id,
        party: summary(&row),
    })
}

/// Checks that the launching session can lead the party itself (`mode: self`).
fn self_leader(
    d: &Daemon,
    def: &PartyDefinition,
    session: Option<&str>,
) -> Result<String, ApiError> {
    const OP: &str = "launch_party";
    let session = session.ok_or_else(|| {
        ApiError::invalid(
            OP,
            "mode self needs created_by_session_id (the session that leads the party)",
        )
    })?;
    let s = d.store.get_session(session)?;
    if s.status != troupe_store::SessionStatus::Active {
        return Err(ApiError::Conflict(format!(
            "session {session} has ended; it cannot lead a party"
        )));
    }
    let leader = def.leader().ok_or_else(|| {
        ApiError::invalid(
            OP,
            format!(
                "mode self needs a leader role, and party {} has none",
                def.name
            ),
        )
    })?;
    if def.roles.get(leader).is_some_and(|r| r.count != 1) {
        return Err(ApiError::invalid(
            OP,
            format!("mode self needs one leader, and role {leader} has more"),
        ));
    }
    if d.store
        .run_of_session(session)?
        .is_some_and(|r| !crate::runners::is_attached(&r.definition))
    {
        return Err(ApiError::Conflict(format!(
            "session {session} is an agent run already; a person's or CLI's own session leads              a party with mode self"
        )));
    }
    if let Some(other) = &s.party_id
        && d.store
            .get_party(other)
            .is_ok_and(|(p, _)| !p.status.is_over())
    {
        return Err(ApiError::Conflict(format!(
            "session {session} is already in party {other}, which is still going"
        )));
    }
    Ok(session.to_string())
}

pub async fn get_party_status(d: &Daemon, p: PartyIdParams) -> Result<PartyStatusResult, ApiError> {
    let party = PartyView::load(&d.store, &p.party_id)?;
    let (row, members, snapshot) = (&party.row, &party.members, &party.snapshot);
    let roles = snapshot
        .party
        .roles
        .iter()
        .map(|(name, r)| {
            let mine: Vec<_> = members.iter().filter(|m| &m.role_name == name).collect();
            let count_of = |s: MemberStatus| mine.iter().filter(|m| m.status == s).count();
            let (completed, running) = (
                mine.iter().filter(|m| m.status.is_done()).count(),
                count_of(MemberStatus::Running),
            );
            let is_paused = row.paused.contains(name);
            let status = if is_paused {
                RoleState::Paused
            } else if completed == mine.len() {
                RoleState::Completed
            } else if running > 0 {
                RoleState::Running
            } else if count_of(MemberStatus::Failed) > 0 {
                RoleState::Failed
            } else if count_of(MemberStatus::Cancelled) > 0 {
                RoleState::Cancelled
            } else {
                RoleState::Pending
            };
            RoleStatus {
                role: name.clone(),
                agent: r.agent.clone(),
                count: r.count,
                is_leader: r.is_leader,
                depends_on: snapshot.party.deps(name).to_vec(),
                on_crash: party.on_crash(name),
                paused: is_paused,
                status,
                completed,
                running,
                crashes: mine.iter().map(|m| m.crash_count).sum(),
            }
        })
        .collect();
    let mut views = Vec::with_capacity(members.len());
    for m in members {
        let run = m
            .agent_run_id
            .as_deref()
            .map(|r| d.store.get_run(r))
            .transpose()?;
        let session = m
            .session_id
            .as_deref()
            .map(|s| d.store.get_session(s))
            .transpose()?;
        views.push(MemberStatusView {
            role: m.role_name.clone(),
            index: m.instance_index,
            status: m.status,
            crash_count: m.crash_count,
            attempts: m.attempts,
            session_id: m.session_id.clone(),
            session_status: session.map(|s| s.status),
            run_id: m.agent_run_id.clone(),
            run_status: run.as_ref().map(|r| r.status),
            output: run
                .as_ref()
                .and_then(|r| r.result.as_ref())
                .and_then(|r| r.get("output"))
                .and_then(|o| o.as_str())
                .map(str::to_string),
            workdir: m.workdir.clone(),
            branch: m.branch_name.clone(),
            started_at_ms: m.started_at_ms,
            finished_at_ms: m.finished_at_ms,
        });
    }
    let tasks = d.store.list_tasks(Some(&p.party_id))?;
    Ok(PartyStatusResult {
        collab_state: super::collab::collab_state_of(d, &p.party_id, row.status),
        usage: d.store.usage("party", &p.party_id)?,
        party: summary(row),
        roles,
        members: views,
        tasks,
    })
}

async fn after(d: &Daemon, party_id: &str) -> Result<PartyResult, ApiError> {
    Ok(PartyResult {
        party: summary(&d.store.get_party(party_id)?.0),
    })
}

pub async fn signal_role(d: &Daemon, p: SignalRoleParams) -> Result<PartyResult, ApiError> {
    d.orchestrator
        .request(|reply| Command::Signal {
            party_id: p.party_id.clone(),
            role: p.role_name,
            signal: p.signal,
            reply,
        })
        .await?;
    after(d, &p.party_id).await
}

pub async fn override_recovery(
    d: &Daemon,
    p: OverrideRecoveryParams,
) -> Result<PartyResult, ApiError> {
    d.orchestrator
        .request(|reply| Command::Override {
            party_id: p.party_id.clone(),
            role: p.role_name,
            strategy: p.strategy,
            reply,
        })
        .await?;
    after(d, &p.party_id).await
}

pub async fn cancel_party(d: &Daemon, p: PartyIdParams) -> Result<PartyResult, ApiError> {
    d.orchestrator
        .request(|reply| Command::Cancel {
            party_id: p.party_id.clone(),
            reply,
        })
        .await?;
    after(d, &p.party_id).await
}

pub async fn list_parties(d: &Daemon, p: ListPartiesParams) -> Result<PartiesResult, ApiError> {
    let project = match (&p.project_id, &p.cwd) {
        (None, None) => None,
        (id, cwd) => {
            let root = project_root(d, "list_parties", id.as_deref(), cwd.as_deref())?;
            match d.store.find_project_by_root(&root.display().to_string())? {
                Some(project) => Some(project.project_id),
                None => {
                    return Ok(PartiesResult {
                        parties: Vec::new(),
                    });
                }
            }
        }
    };
    let parties = d.store.list_parties_brief(project.as_deref(), p.status)?;
    Ok(PartiesResult {
        parties: parties
            .iter()
            .filter(|row| {
                p.created_by_session_id.is_none()
                    || row.created_by_session_id == p.created_by_session_id
            })
            .map(summary)
            .collect(),
    })
}

pub async fn reassign_task(d: &Daemon, p: ReassignTaskParams) -> Result<TaskResult, ApiError> {
    let party = PartyView::load(&d.store, &p.party_id)?;
    for role in [&p.from_role, &p.to_role] {
        if !party.has_role(role) {
            return Err(ApiError::invalid(
                "reassign_task",
                format!("party {} has no role {role:?}", p.party_id),
            ));
        }
    }
    let task = d
        .store
        .reassign_task(p.task_id, p.party_id, p.from_role, p.to_role)
        .await?;
    Ok(TaskResult {
        task_id: task.task_id.clone(),
        task,
    })
}

/// Removes the worktrees and clones of a finished party's members, keeping (and naming) any
/// with uncommitted changes or a commit merged nowhere (not into the target, not in a branch
/// that is kept: every ref the removal would delete is checked) unless `force`; says which
/// branches it deleted, and their tips.
pub async fn cleanup_party(d: &Daemon, p: CleanupPartyParams) -> Result<CleanupResult, ApiError> {
    let PartyView {
        row,
        members,
        snapshot,
        ..
    } = PartyView::load(&d.store, &p.party_id)?;
    if !row.status.is_over() {
        return Err(ApiError::Conflict(format!(
            "party {} is still {}; cancel it first",
            row.party_id, row.status
        )));
    }
    // Never under a landing of this repository (its tests use the integration worktree).
    let _no_landing = crate::landing::repo_lock(&row.repo_root).lock_owned().await;
    if let Some((who, run)) = crate::landing::live_reworks(&d.store, &row.party_id)?
        .into_iter()
        .next()
    {
        return Err(ApiError::Conflict(format!(
            "{who} of party {} is at work again in its checkout (run {run}); wait for it or cancel it first",
            row.party_id
        )));
    }
    let label = party_label(&row);
    let mut removed = Vec::new();
    let mut kept = Vec::new();
    let mut deleted = Vec::new();
    // Only checkouts still on disk (an earlier cleanup may have removed some).
    let present = |m: &&troupe_store::MemberRow| {
        m.branch_name.is_some() && m.workdir.as_deref().is_some_and(|w| Path::new(w).exists())
    };
    for m in members.iter().filter(present) {
        let Some(defined) = snapshot
            .party
            .roles
            .get(&m.role_name)
            .and_then(|r| snapshot.agents.get(&r.agent))
            .map(|a| a.isolation)
        else {
            continue;
        };
        // What the checkout is, not what was asked (a sandboxed member's worktree is a clone).
        let workdir = Path::new(m.workdir.as_deref().unwrap_or_default());
        let isolation = crate::landing::kind_of(workdir, defined);
        let (root, base) = (PathBuf::from(&row.repo_root), d.layout.data_dir.clone());
        let (label, role, index, force) = (
            label.clone(),
            m.role_name.clone(),
            m.instance_index,
            p.force,
        );
        let result = tokio::task::spawn_blocking(move || {
            let name = troupe_worktree::MemberName {
                party: &label,
                role: &role,
                index: u32::try_from(index).unwrap_or(0),
            };
            match isolation {
                Isolation::Worktree => {
                    troupe_worktree::remove_worktree(&root, &base.join("worktrees"), name, force)
                }
                Isolation::Clone => {
                    troupe_worktree::remove_clone(&root, &base.join("clones"), name, force)
                }
                Isolation::None => Ok(Vec::new()),
            }
        })
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?;
        let workdir = m.workdir.clone().unwrap_or_default();
        if result.is_ok() {
            crate::orchestrator::forget_setup(Path::new(&workdir));
        }
        match result {
            Ok(refs) => {
                removed.push(workdir);
                deleted.extend(refs.into_iter().map(crate::retention::deleted_ref));
            }
            Err(e) => kept.push(KeptCheckout {
                workdir,
                reason: e.to_string(),
                unmerged: match e {
                    troupe_worktree::WorktreeError::Unmerged { refs, .. } => refs
                        .into_iter()
                        .map(crate::retention::deleted_ref)
                        .collect(),
                    _ => Vec::new(),
                },
            }),
        }
    }
    // The integration branch and its worktree, if the party was ever landed.
    if let Some(landing_dir) = crate::landing::integration_left(&d.layout, &row) {
        let had_checkout = landing_dir.exists();
        let (layout, row2) = (d.layout.clone(), row.clone());
        let result = tokio::task::spawn_blocking(move || {
            crate::landing::remove_integration_of(&layout, &row2)
        })
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?;
        let workdir = landing_dir.display().to_string();
        match result {
            // A landing without tests left a branch only: no checkout to report.
            Ok(()) if !had_checkout => {}
            Ok(()) => removed.push(workdir),
            Err(e) => kept.push(KeptCheckout {
                workdir,
                reason: e.to_string(),
                unmerged: Vec::new(),
            }),
        }
    }
    // Its merge conflicts leave the inbox with its integration branch.
    d.store.announce(troupe_store::Topic::Inbox);
    for lost in deleted.iter().filter(|r| r.unmerged) {
        tracing::warn!(
            party = %row.party_id, branch = %lost.branch, tip = %lost.tip, repo = %lost.repo,
            "a forced cleanup deleted commits merged nowhere"
        );
    }
    Ok(CleanupResult {
        removed,
        kept,
        deleted,
    })
}

pub async fn create_task(d: &Daemon, p: CreateTaskParams) -> Result<TaskResult, ApiError> {
    const OP: &str = "create_task";
    if p.title.trim().is_empty() {
        return Err(ApiError::invalid(OP, "title must not be empty"));
    }
    let project_id = match (&p.party_id, &p.project_id, &p.cwd) {
        (Some(party), _, _) => d.store.get_party(party)?.0.project_id,
        (None, Some(id), _) => d.store.get_project(id)?.project_id,
        (None, None, Some(cwd)) => {
            let root = project_root(d, OP, None, Some(cwd))?;
            let name = root
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            d.store
                .system_session(root.display().to_string(), name)
                .await?
                .project_id
        }
        (None, None, None) => {
            return Err(ApiError::invalid(OP, "give party_id, project_id or cwd"));
        }
    };
    let task = d
        .store
        .create_task(project_id, p.title, p.description, p.party_id, p.role_name)
        .await?;
    Ok(TaskResult {
        task_id: task.task_id.clone(),
        task,
    })
}

/// Marks a task escalated: a durable notification for the person and, when the task belongs
/// to a party with a live leader, a message to the leader. The party goes on.
pub async fn escalate_task(d: &Daemon, p: EscalateTaskParams) -> Result<TaskResult, ApiError> {
    if p.reason.trim().is_empty() {
        return Err(ApiError::invalid(
            "escalate_task",
            "reason must not be empty",
        ));
    }
    let task = d
        .store
        .escalate_task(p.task_id, p.reason.clone(), p.session_id)
        .await?;
    if let Some(party_id) = &task.party_id {
        // The escalation is stored: a party that cannot be read only leaves its leader untold.
        let party = PartyView::load(&d.store, party_id)
            .inspect_err(|e| tracing::warn!(party = %party_id, error = %e, "escalation not told"))
            .ok();
        let leader_session = party.as_ref().and_then(|party| {
            let leader = party.leader()?;
            party.live_sessions(leader).into_iter().next()
        });
        if let (Some(session), Some(party)) = (leader_session, &party) {
            let row = &party.row;
            let text = format!(
                "[{}] task {:?} was escalated: {}",
                row.name, task.title, p.reason
            );
            crate::system::send_system(
                &d.store,
                &d.hub,
                &row.repo_root,
                Recipients::Session(session),
                text,
                Priority::Urgent,
                None,
            )
            .await?;
        }
    }
    Ok(TaskResult {
        task_id: task.task_id.clone(),
        task,
    })
}

pub async fn list_tasks(d: &Daemon, p: ListTasksParams) -> Result<TasksResult, ApiError> {
    Ok(TasksResult {
        tasks: d.store.list_tasks(p.party_id.as_deref())?,
    })
}

pub async fn list_notifications(
    d: &Daemon,
    p: ListNotificationsParams,
) -> Result<NotificationsResult, ApiError> {
    let limit = i64::from(p.limit.unwrap_or(100).clamp(1, 1000));
    let notifications =
        d.store
            .list_notifications(p.since.unwrap_or(0), p.party_id.as_deref(), limit)?;
    let next_since = notifications.last().map_or(p.since.unwrap_or(0), |n| n.seq);
    Ok(NotificationsResult {
        notifications,
        next_since,
    })
}

/// Which way `hold` goes.
#[derive(Clone, Copy, PartialEq)]
enum Hold {
    Pause,
    Resume,
}

pub async fn pause_party(d: &Daemon, p: HoldParams) -> Result<HoldResult, ApiError> {
    hold(d, p, Hold::Pause).await
}

pub async fn resume_party(d: &Daemon, p: HoldParams) -> Result<HoldResult, ApiError> {
    hold(d, p, Hold::Resume).await
}

/// Holds (or lets go) a party's running members: a process is stopped where it is (SIGSTOP to
/// its process group; SIGCONT lets it go on), an ACP agent's turn is cancelled (and resumed in
/// the same agent session when let go), an executor waits at its next tool call. Its run's own timeout keeps counting. A remote worker's member and a run in the
/// daemon (a landing, an attached leader) are left as they are, and said so.
async fn hold(d: &Daemon, p: HoldParams, way: Hold) -> Result<HoldResult, ApiError> {
    let op = match way {
        Hold::Pause => "pause_party",
        Hold::Resume => "resume_party",
    };
    let party = crate::collab::PartyView::load(&d.store, &p.party_id)?;
    if let Some(role) = &p.role
        && !party.snapshot.party.roles.contains_key(role)
    {
        return Err(ApiError::invalid(
            op,
            format!("party {} has no role {role}", p.party_id),
        ));
    }
    // Runs that ended while held are forgotten (an executor's wait ended with its run).
    let ended: Vec<String> = d
        .held
        .borrow()
        .iter()
        .filter(|id| d.store.get_run(id).map_or(true, |r| r.status.is_finished()))
        .cloned()
        .collect();
    if !ended.is_empty() {
        d.held
            .send_modify(|held| held.retain(|id| !ended.contains(id)));
    }
    let runs = d.store.list_runs(None, Some(&p.party_id), true)?;
    let mut members = Vec::new();
    let mut skipped = Vec::new();
    for run in runs {
        let (Some(role), Some(index)) = (run.role_name.clone(), run.instance_index) else {
            continue;
        };
        if p.role.as_ref().is_some_and(|r| *r != role)
            || p.index.is_some_and(|i| i64::from(i) != index)
        {
            continue;
        }
        let name = format!("{role}#{index}");
        let runner = run
            .definition
            .get("runner")
            .and_then(serde_json::Value::as_str)
            .unwrap_or("process");
        let remote = run.definition.get("pool").is_some_and(|v| !v.is_null());
        if remote {
            skipped.push(format!("{name}: it runs on a remote worker"));
            continue;
        }
        // An ACP agent's turn is cancelled by its runner, and resumed in the same session when
        // let go; an executor waits at its next tool call.
        if !runner.starts_with("wasm:") && !runner.starts_with("acp:") {
            let Some(pgid) = run
                .pgid
                .and_then(|g| i32::try_from(g).ok())
                .and_then(rustix::process::Pid::from_raw)
            else {
                skipped.push(format!(
                    "{name}: it runs in the daemon, with no process of its own"
                ));
                continue;
            };
            let signal = match way {
                Hold::Pause => rustix::process::Signal::STOP,
                Hold::Resume => rustix::process::Signal::CONT,
            };
            if let Err(e) = rustix::process::kill_process_group(pgid, signal) {
                skipped.push(format!(
                    "{name}: its processes could not be signalled ({e})"
                ));
                continue;
            }
        }
        d.held.send_modify(|held| {
            match way {
                Hold::Pause => held.insert(run.run_id.clone()),
                Hold::Resume => held.remove(&run.run_id),
            };
        });
        d.store
            .append_event(troupe_store::NewEvent {
                kind: match way {
                    Hold::Pause => "member_held",
                    Hold::Resume => "member_released",
                }
                .into(),
                project_id: Some(run.project_id.clone()),
                session_id: Some(run.session_id.clone()),
                party_id: Some(p.party_id.clone()),
                data: serde_json::json!({ "role": role, "index": index, "run_id": run.run_id }),
            })
            .await?;
        members.push(name);
    }
    Ok(HoldResult { members, skipped })
}
