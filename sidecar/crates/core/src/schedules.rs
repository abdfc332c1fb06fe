//! Schedules that start parties: `[schedules.<name>]` of a project's `.troupe/config.toml`
//! (`cron`, `party`, `task`; optional `missed = "once" | "skip"` and `paused = true`, the state a
//! new schedule starts in). The cron (5 fields, or `@hourly`, `@daily`…) is evaluated in UTC.
//!
//! The daemon reads the schedules of the projects it knows (each minute, and at once for a
//! project whose schedules are listed or run), keeps their state in the store, and waits on a
//! timer for the next due time. A fire is committed (the due time it is for, `launching`) before
//! its party is launched (`launch_party`, as the person, with `inputs: {"task": …}`), so a kill -9
//! in between launches it at the next start — once: a party already launched for it is taken.
//! A due time found more than `LATE_AFTER` late (the daemon was down, the machine slept) was
//! missed: `missed = "once"` (the default) runs the missed ones as one run as soon as the daemon
//! sees them, `"skip"` runs none of them. A bad cron, an unknown party or an unreadable config is
//! the schedule's error (its `schedule_error` event, and `list_schedules`), never the daemon's.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use croner::parser::{CronParser, Seconds, Year};
use croner::{Cron, Direction};
use serde_json::{Value, json};
use troupe_api::ApiError;
use troupe_api::types::{InboxAnswer, InboxItem, ScheduleView};
use troupe_store::{DefinitionKind, Fire, Project, Schedule, ScheduleConfig, Store, StoreError};

use crate::daemon::Daemon;
use crate::project_config::ProjectConfig;

/// How often the daemon reads its projects' schedules again.
pub const LOOK_EVERY: Duration = Duration::from_secs(60);
/// A due time found later than this was missed (the daemon was not running then).
pub const LATE_AFTER: TimeDelta = TimeDelta::seconds(60);
/// A launch under way longer than this was lost (its caller went before it ended): it is taken
/// up again as at start.
const LOST_LAUNCH: TimeDelta = TimeDelta::minutes(5);
/// The least wait between two passes while something is still due (a failing store).
const LEAST_WAIT: Duration = Duration::from_secs(1);
/// Missed due times counted at most (a minutely cron left for years).
const MISSED_COUNTED: usize = 10_000;
/// The section of `.troupe/config.toml`.
pub const SECTION: &str = "schedules";

/// Now, in UTC.
pub fn now() -> DateTime<Utc> {
    DateTime::from(std::time::SystemTime::now())
}

/// A time as the store writes them (`2026-11-29T02:00:00.000Z`).
pub fn stamp(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
}

fn parse_time(s: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// A stored time to the minute (`2026-11-29T02:00Z`), as titles show it.
fn minute(s: &str) -> String {
    parse_time(s).map_or_else(
        || s.to_string(),
        |t| t.format("%Y-%m-%dT%H:%MZ").to_string(),
    )
}

/// A cron expression: 5 fields (minute hour day-of-month month day-of-week), or an alias
/// (`@hourly`, `@daily`, `@weekly`, `@monthly`, `@yearly`).
pub fn parse_cron(text: &str) -> Result<Cron, String> {
    CronParser::builder()
        .seconds(Seconds::Disallowed)
        .year(Year::Disallowed)
        .build()
        .parse(text)
        .map_err(|e| format!("cron {text:?}: {e}"))
}

/// The cron's first time after `t`.
fn next_after(cron: &Cron, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
    cron.find_next_occurrence(&t, false).ok()
}

/// The cron's times from `from` (itself included) to `to`: how many (at most
/// `MISSED_COUNTED`, and at least one) and the last.
fn due_times(cron: &Cron, from: DateTime<Utc>, to: DateTime<Utc>) -> (u64, DateTime<Utc>) {
    let mut count = 0;
    let mut last = from;
    for t in cron
        .iter_from(from, Direction::Forward)
        .take_while(|t| *t <= to)
        .take(MISSED_COUNTED)
    {
        count += 1;
        last = t;
    }
    (count.max(1), last)
}

/// What `[schedules]` of a project's config says, each checked: its cron parsed, its party
/// defined (in the config or the store), its next due time from `now`.
pub fn read_config(
    store: &Store,
    config: &ProjectConfig,
    now: DateTime<Utc>,
) -> Vec<ScheduleConfig> {
    let Some(section) = config.section(SECTION) else {
        return Vec::new();
    };
    let Some(table) = section.as_table() else {
        tracing::warn!(file = %config.path().display(), "[schedules] is not a table: no schedule is read");
        return Vec::new();
    };
    table
        .iter()
        .map(|(name, entry)| one(store, config, name, entry, now))
        .collect()
}

fn one(
    store: &Store,
    config: &ProjectConfig,
    name: &str,
    entry: &toml::Value,
    now: DateTime<Utc>,
) -> ScheduleConfig {
    let mut c = ScheduleConfig {
        name: name.to_string(),
        cron: String::new(),
        party: String::new(),
        task: String::new(),
        missed: "once".into(),
        paused: false,
        problem: None,
        next_due_at: None,
    };
    let mut problems = Vec::new();
    let Some(table) = entry.as_table() else {
        c.problem = Some(format!("[schedules.{name}] must be a table"));
        return c;
    };
    let text = |key: &str, value: &toml::Value, problems: &mut Vec<String>| {
        value
            .as_str()
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|| {
                problems.push(format!("{key} must be a string, not {value}"));
                String::new()
            })
    };
    for (key, value) in table {
        match key.as_str() {
            "cron" => c.cron = text(key, value, &mut problems),
            "party" => c.party = text(key, value, &mut problems),
            "task" => c.task = text(key, value, &mut problems),
            "missed" => match value.as_str() {
                Some(m @ ("once" | "skip")) => c.missed = m.to_string(),
                _ => problems.push(format!("missed must be \"once\" or \"skip\", not {value}")),
            },
            "paused" => match value.as_bool() {
                Some(p) => c.paused = p,
                None => problems.push(format!("paused must be true or false, not {value}")),
            },
            other => problems.push(format!(
                "it has no key {other:?} (cron, party, task, missed, paused)"
            )),
        }
    }
    for key in ["cron", "party", "task"] {
        match table.get(key).map(|v| v.as_str().map(str::trim)) {
            None => problems.push(format!("{key} is missing")),
            Some(Some("")) => problems.push(format!("{key} is empty")),
            Some(_) => {}
        }
    }
    if !c.cron.is_empty() {
        match parse_cron(&c.cron) {
            Ok(cron) => match next_after(&cron, now) {
                Some(next) => c.next_due_at = Some(stamp(next)),
                None => problems.push(format!("cron {:?} is never due", c.cron)),
            },
            Err(e) => problems.push(e),
        }
    }
    if !c.party.is_empty()
        && let Err(e) = party_known(store, config, &c.party)
    {
        problems.push(e);
    }
    if !problems.is_empty() {
        c.problem = Some(problems.join("; "));
    }
    c
}

/// Whether party `name` is defined for the project: in its config, or in the store.
fn party_known(store: &Store, config: &ProjectConfig, name: &str) -> Result<(), String> {
    if config.party(name)?.is_some() {
        return Ok(());
    }
    match store.get_definition(DefinitionKind::Party, name) {
        Ok(_) => Ok(()),
        Err(StoreError::NotFound { .. }) => Err(format!(
            "party {name:?} is not defined ([parties.{name}] in {}, or a stored party definition)",
            crate::project_config::PATH
        )),
        Err(e) => Err(format!("party {name:?}: {e}")),
    }
}

/// Whether the config's schedules differ from the stored ones in anything the store keeps.
fn differs(rows: &[Schedule], configs: &[ScheduleConfig]) -> bool {
    rows.len() != configs.len()
        || configs.iter().any(|c| {
            rows.iter().find(|r| r.name == c.name).is_none_or(|r| {
                r.cron != c.cron
                    || r.party != c.party
                    || r.task != c.task
                    || r.missed != c.missed
                    || r.problem != c.problem
            })
        })
}

/// Reads a project's schedules again and brings the store to them (a write only when they
/// changed). An unreadable config keeps its schedules, each with that error, none firing.
pub async fn sync_project(d: &Daemon, project: &Project) -> Result<(), ApiError> {
    let rows = d.store.schedules(Some(&project.project_id))?;
    let configs = match ProjectConfig::load(Path::new(&project.root_path)) {
        Ok(None) => Vec::new(),
        Ok(Some(config)) => read_config(&d.store, &config, now()),
        Err(e) => rows
            .iter()
            .map(|r| ScheduleConfig {
                name: r.name.clone(),
                cron: r.cron.clone(),
                party: r.party.clone(),
                task: r.task.clone(),
                missed: r.missed.clone(),
                paused: r.paused,
                problem: Some(format!("the project's config is unreadable: {e}")),
                next_due_at: None,
            })
            .collect(),
    };
    if differs(&rows, &configs) {
        d.store
            .sync_schedules(project.project_id.clone(), configs)
            .await?;
    }
    Ok(())
}

/// Reads every known project's schedules again.
async fn sync_all(d: &Daemon) {
    let projects = match d.store.list_projects() {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!(error = %e, "projects unreadable: schedules not read this time");
            return;
        }
    };
    for project in &projects {
        if let Err(e) = sync_project(d, project).await {
            tracing::warn!(project = %project.root_path, error = %e, "schedules not read");
        }
    }
}

/// The project of `cwd`: known to the store, or made known when its config has schedules (a
/// person listing or running them in a project the daemon has not seen yet).
pub async fn project_of_dir(d: &Daemon, cwd: &str) -> Result<Option<Project>, String> {
    let (root, name) = crate::project::resolve_project_root(Path::new(cwd))
        .map_err(|e| format!("cwd {cwd}: {e}"))?;
    let root_text = root.to_string_lossy().into_owned();
    if let Some(p) = d
        .store
        .find_project_by_root(&root_text)
        .map_err(|e| e.to_string())?
    {
        return Ok(Some(p));
    }
    let has_schedules = ProjectConfig::load(&root)
        .ok()
        .flatten()
        .is_some_and(|c| c.section(SECTION).is_some());
    if !has_schedules {
        return Ok(None);
    }
    d.store
        .system_session(root_text.clone(), name)
        .await
        .map_err(|e| e.to_string())?;
    d.store
        .find_project_by_root(&root_text)
        .map_err(|e| e.to_string())
}

/// The schedule as the API shows it.
pub fn view(s: &Schedule, project_root: &str) -> ScheduleView {
    ScheduleView {
        project_id: s.project_id.clone(),
        project_root: project_root.to_string(),
        name: s.name.clone(),
        cron: s.cron.clone(),
        party: s.party.clone(),
        task: s.task.clone(),
        missed: s.missed.clone(),
        paused: s.paused,
        next_due_at: s.next_due_at.clone(),
        error: s.problem.clone(),
        last_due_at: s.last_due_at.clone(),
        last_run_at: s.last_run_at.clone(),
        last_party_id: s.last_party_id.clone(),
        last_error: s.last_error.clone(),
        launching: s.launching,
        state_at: s.state_at.clone(),
    }
}

/// `launch_party`'s params for a schedule's fire.
pub fn launch_params(s: &Schedule) -> Value {
    json!({ "name": s.party, "inputs": { "task": s.task }, "project_id": s.project_id })
}

/// Pauses a schedule, or resumes it at its cron's next time from now.
pub async fn set_paused(
    d: &Daemon,
    project_id: &str,
    name: &str,
    paused: bool,
) -> Result<Schedule, ApiError> {
    let next = if paused {
        None
    } else {
        let row = d.store.get_schedule(project_id, name)?;
        parse_cron(&row.cron)
            .ok()
            .and_then(|cron| next_after(&cron, now()))
            .map(stamp)
    };
    Ok(d.store
        .set_schedule_paused(project_id.to_string(), name.to_string(), paused, next)
        .await?)
}

/// Records how a committed fire's launch went.
pub async fn finish(
    d: &Daemon,
    s: &Schedule,
    outcome: Result<String, String>,
    adopted: bool,
) -> Result<Schedule, ApiError> {
    if let Err(e) = &outcome {
        tracing::warn!(schedule = %s.name, party = %s.party, error = %e, "a schedule's party did not launch");
    }
    Ok(d.store
        .finish_schedule_launch(s.project_id.clone(), s.name.clone(), outcome, adopted)
        .await?)
}

/// Launches a fire's party, as the person would.
async fn launch(d: &Arc<Daemon>, s: &Schedule) -> Result<String, String> {
    use crate::runners::Calls as _;
    let caller = crate::authority::Caller::person("schedule");
    match d
        .clone()
        .call_as(caller, "launch_party".into(), launch_params(s))
        .await
    {
        Ok(r) => r["party_id"]
            .as_str()
            .map(String::from)
            .ok_or_else(|| format!("launch_party answered without a party: {r}")),
        Err(e) => Err(e.to_string()),
    }
}

/// The party a fire committed by an earlier daemon launched before it was killed, if any: one
/// of the schedule's party, task and project, created since the fire.
fn launched_already(d: &Daemon, s: &Schedule) -> Option<String> {
    let since = s.last_run_at.as_deref()?;
    let inputs = json!({ "task": s.task });
    d.store
        .list_parties_brief(Some(&s.project_id), None)
        .ok()?
        .into_iter()
        .find(|p| {
            p.name == s.party
                && p.created_at.as_str() >= since
                && p.inputs.as_ref() == Some(&inputs)
        })
        .map(|p| p.party_id)
}

/// The fires committed and not seen launched: at start, those an earlier daemon left; later,
/// those under way since before `lost_before` (a `run_schedule_now` whose caller went).
async fn resume_launches(d: &Arc<Daemon>, lost_before: Option<DateTime<Utc>>) {
    let rows = match d.store.schedules(None) {
        Ok(rows) => rows,
        Err(e) => {
            tracing::warn!(error = %e, "schedules unreadable: their launches under way wait");
            return;
        }
    };
    let lost = |s: &&Schedule| match lost_before {
        None => true,
        Some(t) => s
            .last_run_at
            .as_deref()
            .and_then(parse_time)
            .is_none_or(|at| at < t),
    };
    for s in rows.iter().filter(|s| s.launching).filter(lost) {
        let (outcome, adopted) = match launched_already(d, s) {
            Some(party_id) => (Ok(party_id), true),
            None => (launch(d, s).await, false),
        };
        if let Err(e) = finish(d, s, outcome, adopted).await {
            tracing::warn!(schedule = %s.name, error = %e, "a schedule's launch was not recorded");
        }
    }
}

/// Whether a schedule fires by its cron (not paused, not broken, no launch under way), and when.
fn due_at(s: &Schedule) -> Option<DateTime<Utc>> {
    if s.paused || s.problem.is_some() || s.launching {
        return None;
    }
    parse_time(s.next_due_at.as_deref()?)
}

/// Fires the schedules due by now, the earliest first.
async fn fire_due(d: &Arc<Daemon>, shutdown: &tokio::sync::watch::Receiver<bool>) {
    let now = now();
    let rows = match d.store.schedules(None) {
        Ok(rows) => rows,
        Err(e) => {
            tracing::warn!(error = %e, "schedules unreadable: none fired this time");
            return;
        }
    };
    let mut due: Vec<(DateTime<Utc>, Schedule)> = rows
        .into_iter()
        .filter_map(|s| due_at(&s).filter(|t| *t <= now).map(|t| (t, s)))
        .collect();
    due.sort_by_key(|(t, _)| *t);
    for (at, s) in due {
        if *shutdown.borrow() {
            return;
        }
        if let Err(e) = fire_one(d, &s, at, now).await {
            tracing::warn!(schedule = %s.name, error = %e, "a schedule did not fire");
        }
    }
}

async fn fire_one(
    d: &Arc<Daemon>,
    s: &Schedule,
    at: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<(), ApiError> {
    let Ok(cron) = parse_cron(&s.cron) else {
        return Ok(()); // its error is recorded at the next read
    };
    let next = next_after(&cron, now).map(stamp);
    let (count, last) = due_times(&cron, at, now);
    let late = now - at > LATE_AFTER;
    let key = s.next_due_at.clone().unwrap_or_default();
    let (project, name) = (s.project_id.clone(), s.name.clone());
    if late && s.missed == "skip" {
        d.store
            .skip_schedule(project, name, key, next, count)
            .await?;
        return Ok(());
    }
    let fire = Fire::Due {
        due_at: key,
        covers: stamp(last),
        next_due_at: next,
        missed: if late { count } else { 0 },
    };
    let Some(fired) = d.store.fire_schedule(project, name, fire).await? else {
        return Ok(()); // paused, changed or fired meanwhile
    };
    let outcome = launch(d, &fired).await;
    finish(d, &fired, outcome, false).await?;
    Ok(())
}

/// When the next pass is due: the earliest due time, or the next read of the configs.
fn next_pass(d: &Daemon, read_at: tokio::time::Instant) -> tokio::time::Instant {
    let reread = read_at + LOOK_EVERY;
    let now = now();
    let earliest = d
        .store
        .schedules(None)
        .ok()
        .into_iter()
        .flatten()
        .filter_map(|s| due_at(&s))
        .min();
    match earliest {
        Some(t) => {
            let wait = (t - now).to_std().unwrap_or(Duration::ZERO).max(LEAST_WAIT);
            reread.min(tokio::time::Instant::now() + wait)
        }
        None => reread,
    }
}

/// The inbox's items for the schedules of one project (or every project): each schedule, to
/// pause (or to resume, when paused); its id changes with its state.
pub fn inbox_items(store: &Store, project: Option<&str>) -> Result<Vec<InboxItem>, ApiError> {
    Ok(store.schedules(project)?.iter().map(inbox_item).collect())
}

fn inbox_item(s: &Schedule) -> InboxItem {
    let (state, op) = if s.paused {
        ("paused", "resume_schedule")
    } else {
        ("active", "pause_schedule")
    };
    let title = match (&s.problem, s.paused, &s.next_due_at) {
        (Some(problem), _, _) => format!("schedule {}: not running: {problem}", s.name),
        (None, true, _) => format!("schedule {}: paused, party {}", s.name, s.party),
        (None, false, Some(next)) => {
            format!(
                "schedule {}: next {}, party {}",
                s.name,
                minute(next),
                s.party
            )
        }
        (None, false, None) => format!("schedule {}: party {}", s.name, s.party),
    };
    let mut detail = vec![format!(
        "cron {} (UTC), missed runs: {}; task: {}",
        s.cron, s.missed, s.task
    )];
    if let Some(at) = &s.last_run_at {
        let party = s
            .last_party_id
            .as_deref()
            .map(|p| format!(", party {p}"))
            .unwrap_or_default();
        detail.push(format!("last run {}{party}", minute(at)));
    }
    if let Some(error) = &s.last_error {
        detail.push(format!("its last launch failed: {error}"));
    }
    InboxItem {
        item_id: format!("schedule:{}:{}:{state}", s.project_id, s.name),
        kind: "schedule".into(),
        project_id: Some(s.project_id.clone()),
        party_id: s.last_party_id.clone(),
        session_id: None,
        title,
        detail: Some(detail.join("\n")),
        since: s.state_at.clone(),
        answer: InboxAnswer {
            op: op.into(),
            params: json!({ "project_id": s.project_id, "name": s.name }),
            choice_field: None,
            choices: Vec::new(),
        },
    }
}

/// Fires the schedules of the projects the daemon knows until it stops: at start, the launches
/// an earlier daemon committed and did not finish; then at each due time (a timer, woken early
/// when a schedule changes), reading the projects' configs again (and taking up a launch lost
/// for `LOST_LAUNCH`) every `LOOK_EVERY`.
pub fn watch(daemon: &Arc<Daemon>) {
    let weak = Arc::downgrade(daemon);
    let mut shutdown = daemon.shutdown_requested();
    let mut changes = daemon.store.changes(troupe_store::Topic::Inbox);
    tokio::spawn(async move {
        if let Some(d) = weak.upgrade() {
            resume_launches(&d, None).await;
        }
        let mut read_at: Option<tokio::time::Instant> = None;
        loop {
            let wake = {
                let Some(d) = weak.upgrade() else { return };
                if *shutdown.borrow() {
                    return;
                }
                // What changes from here on wakes the next pass.
                changes.borrow_and_update();
                let reread = read_at.is_none_or(|at| at.elapsed() >= LOOK_EVERY);
                if reread {
                    sync_all(&d).await;
                    resume_launches(&d, Some(now() - LOST_LAUNCH)).await;
                    read_at = Some(tokio::time::Instant::now());
                }
                fire_due(&d, &shutdown).await;
                next_pass(&d, read_at.unwrap_or_else(tokio::time::Instant::now))
            };
            tokio::select! {
                () = tokio::time::sleep_until(wake) => {}
                changed = changes.changed() => if changed.is_err() { return },
                _ = shutdown.changed() => return,
            }
        }
    });
}

#[cfg(test)]
mod tests;
