//! Handlers of the schedules that start parties (`crate::schedules`): list them (each project's
//! config read again first), pause, resume, and run one now.

use troupe_api::ApiError;
use troupe_api::types::*;
use troupe_store::{Fire, Project};

use crate::daemon::Daemon;
use crate::schedules;

/// The project a schedule call names: `project_id`, or the project of `cwd`; `None` when `cwd`'s
/// project is unknown and has no schedules.
async fn project(
    d: &Daemon,
    op: &'static str,
    project_id: Option<String>,
    cwd: Option<String>,
) -> Result<Option<Project>, ApiError> {
    match (project_id, cwd) {
        (Some(id), _) => Ok(Some(d.store.get_project(&id)?)),
        (None, Some(cwd)) => schedules::project_of_dir(d, &cwd)
            .await
            .map_err(|e| ApiError::invalid(op, e)),
        (None, None) => Err(ApiError::invalid(op, "give cwd or project_id")),
    }
}

/// The project of the named schedule, its config read again; the schedule must be there.
async fn schedule_project(
    d: &Daemon,
    op: &'static str,
    p: &ScheduleParams,
) -> Result<Project, ApiError> {
    super::non_empty(op, "name", &p.name)?;
    let not_found = || ApiError::NotFound {
        what: "schedule".into(),
        id: p.name.clone(),
    };
    let project = project(d, op, p.project_id.clone(), p.cwd.clone())
        .await?
        .ok_or_else(not_found)?;
    schedules::sync_project(d, &project).await?;
    d.store.get_schedule(&project.project_id, &p.name)?;
    Ok(project)
}

pub async fn list_schedules(
    d: &Daemon,
    p: ListSchedulesParams,
) -> Result<SchedulesResult, ApiError> {
    const OP: &str = "list_schedules";
    let projects = if p.project_id.is_none() && p.cwd.is_none() {
        d.store.list_projects()?
    } else {
        project(d, OP, p.project_id, p.cwd)
            .await?
            .into_iter()
            .collect()
    };
    let mut out = Vec::new();
    for project in &projects {
        schedules::sync_project(d, project).await?;
        out.extend(
            d.store
                .schedules(Some(&project.project_id))?
                .iter()
                .map(|s| schedules::view(s, &project.root_path)),
        );
    }
    Ok(SchedulesResult { schedules: out })
}

pub async fn pause_schedule(d: &Daemon, p: ScheduleParams) -> Result<ScheduleResult, ApiError> {
    paused(d, "pause_schedule", p, true).await
}

pub async fn resume_schedule(d: &Daemon, p: ScheduleParams) -> Result<ScheduleResult, ApiError> {
    paused(d, "resume_schedule", p, false).await
}

async fn paused(
    d: &Daemon,
    op: &'static str,
    p: ScheduleParams,
    paused: bool,
) -> Result<ScheduleResult, ApiError> {
    let project = schedule_project(d, op, &p).await?;
    let s = schedules::set_paused(d, &project.project_id, &p.name, paused).await?;
    Ok(ScheduleResult {
        schedule: schedules::view(&s, &project.root_path),
    })
}

/// Commits the fire, then launches the party (a daemon killed in between launches it when it
/// starts again), then records the party or the failure, which it answers with.
pub async fn run_schedule_now(
    d: &Daemon,
    p: ScheduleParams,
) -> Result<RunScheduleNowResult, ApiError> {
    const OP: &str = "run_schedule_now";
    let project = schedule_project(d, OP, &p).await?;
    let fired = d
        .store
        .fire_schedule(project.project_id.clone(), p.name.clone(), Fire::Now)
        .await?
        .ok_or_else(|| ApiError::Conflict(format!("schedule {} did not fire", p.name)))?;
    let launched = match troupe_api::parse_params::<LaunchPartyParams>(
        OP,
        Some(schedules::launch_params(&fired)),
    ) {
        Ok(params) => super::launch_party(d, params).await,
        Err(e) => Err(e),
    };
    let outcome = launched
        .as_ref()
        .map(|r| r.party_id.clone())
        .map_err(ToString::to_string);
    let s = schedules::finish(d, &fired, outcome, false).await?;
    let launched = launched?;
    Ok(RunScheduleNowResult {
        party_id: launched.party_id,
        schedule: schedules::view(&s, &project.root_path),
    })
}
