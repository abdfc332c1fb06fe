//! Retention: a data dir that does not grow forever. The rules (`[retention]` of the data dir's
//! `config.toml`: `max_age_days`, `max_db_mib`, `max_log_mib`) say what may go once old — the
//! rows (`troupe_store`'s sweep: the timeline outside open parties, read messages, notifications,
//! answered requests and questions, ended runs and sessions nothing refers to), the logs of the
//! ended runs, and the checkouts no party needs any more (an ended party's members', ADR and
//! integration worktrees, an ended standalone run's), never one with unmerged or uncommitted work.
//! `gc` (the operation, `troupe gc`) applies them and ends with `VACUUM`; the daemon applies them
//! by itself at start and every hour (without `VACUUM`), and rotates the logs of running runs
//! past `max_log_mib` (`crate::run_logs::rotate`) every second.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use troupe_api::ApiError;
use troupe_api::types::{DeletedRef, GcParams, GcResult, KeptCheckout};
use troupe_store::{NewEvent, PartyRow, Swept};

use crate::daemon::Daemon;

/// How often the daemon applies the rules by itself.
pub const PASS_EVERY: Duration = Duration::from_secs(3600);
/// How often the logs of running runs are looked at for rotation.
pub const ROTATE_EVERY: Duration = Duration::from_secs(1);
/// The largest `max_age_days` (of `gc` and of `[retention]`): a hundred years, older than any
/// row. The store takes the cutoff with SQLite's date arithmetic, which has no date before the
/// year 0: a larger age gave a malformed cutoff, and past about 2,460,000 days none (NULL, an
/// untyped store failure).
pub const MAX_AGE_DAYS: f64 = 36_500.0;

/// The retention rules: `[retention]` of `<data dir>/config.toml`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rules {
    /// Rows, logs and checkouts older than this may go (at most `MAX_AGE_DAYS`).
    pub max_age_days: f64,
    /// Past this size (the pages rows use), the age is lowered until the database is under it
    /// (0: no limit).
    pub max_db_mib: f64,
    /// A run's log past this is rotated (0: never).
    pub max_log_mib: f64,
}

impl Default for Rules {
    fn default() -> Self {
        Rules {
            max_age_days: 30.0,
            max_db_mib: 1024.0,
            max_log_mib: 16.0,
        }
    }
}

const MIB: f64 = 1024.0 * 1024.0;

impl Rules {
    /// The rules of `data_dir` (the defaults for what `config.toml` leaves out); a bad value is
    /// named.
    pub fn load(data_dir: &Path) -> Result<Rules, String> {
        let path = data_dir.join("config.toml");
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Rules::default()),
            Err(e) => return Err(format!("{}: {e}", path.display())),
        };
        let table: toml::Table =
            toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut rules = Rules::default();
        let Some(section) = table.get("retention") else {
            return Ok(rules);
        };
        let section = section
            .as_table()
            .ok_or_else(|| format!("{}: [retention] must be a table", path.display()))?;
        for (key, value) in section {
            let slot = match key.as_str() {
                "max_age_days" => &mut rules.max_age_days,
                "max_db_mib" => &mut rules.max_db_mib,
                "max_log_mib" => &mut rules.max_log_mib,
                other => {
                    return Err(format!(
                        "{}: [retention] has no {other:?} (max_age_days, max_db_mib, max_log_mib)",
                        path.display()
                    ));
                }
            };
            *slot = match value {
                toml::Value::Integer(n) if *n >= 0 => *n as f64,
                toml::Value::Float(f) if f.is_finite() && *f >= 0.0 => *f,
                other => {
                    return Err(format!(
                        "{}: [retention] {key} must be a number of at least 0, not {other}",
                        path.display()
                    ));
                }
            };
            if key == "max_age_days" && *slot > MAX_AGE_DAYS {
                return Err(format!(
                    "{}: [retention] max_age_days must be between 0 and {MAX_AGE_DAYS} (100 \
                     years), not {value}",
                    path.display()
                ));
            }
        }
        Ok(rules)
    }

    fn max_log_bytes(&self) -> Option<u64> {
        (self.max_log_mib > 0.0).then_some((self.max_log_mib * MIB) as u64)
    }
}

/// `gc`: the rules applied now, and `VACUUM` when pages were freed (not on a dry run).
pub async fn gc(d: &Daemon, p: GcParams) -> Result<GcResult, ApiError> {
    const OP: &str = "gc";
    let rules = Rules::load(&d.layout.data_dir).map_err(|e| ApiError::invalid(OP, e))?;
    let age = p.max_age_days.unwrap_or(rules.max_age_days);
    if !(age.is_finite() && (0.0..=MAX_AGE_DAYS).contains(&age)) {
        return Err(ApiError::invalid(
            OP,
            format!("max_age_days must be between 0 and {MAX_AGE_DAYS} (100 years), not {age}"),
        ));
    }
    pass(d, &rules, age, p.dry_run, true).await
}

/// One `gc` at a time (the daemon's own passes included).
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Applies the rules with `age`: the rows (then, past `max_db_mib`, younger ones until under
/// it), the ended runs' logs, the checkouts; `VACUUM` after, if asked and pages were freed.
pub async fn pass(
    d: &Daemon,
    rules: &Rules,
    age: f64,
    dry_run: bool,
    vacuum: bool,
) -> Result<GcResult, ApiError> {
    let _one = ONE_AT_A_TIME.lock().await;
    let store = &d.store;
    let before = store.db_size()?;
    let cutoff = store.cutoff(age)?;
    let mut result = GcResult {
        dry_run,
        max_age_days: age,
        db_bytes_before: before.bytes,
        ..GcResult::default()
    };
    // First, while the runs that own checkouts are still on record.
    checkouts(d, &cutoff, age, dry_run, &mut result).await?;
    let mut swept = store.sweep(&cutoff, dry_run).await?;
    let mut logs_seen = HashSet::new();
    remove_logs(d, &swept, dry_run, &mut logs_seen, &mut result).await?;
    // Past the size limit: younger rows go too, the oldest first (the age halves each time).
    let cap = (rules.max_db_mib > 0.0).then_some((rules.max_db_mib * MIB) as u64);
    let mut lowered = age;
    while let Some(cap) = cap
        && !dry_run
        && lowered > 0.0
        && store.db_size()?.live_bytes() > cap
    {
        lowered = if lowered > 1.0 / 24.0 {
            lowered / 2.0
        } else {
            0.0
        };
        let more = store.sweep(&store.cutoff(lowered)?, false).await?;
        remove_logs(d, &more, false, &mut logs_seen, &mut result).await?;
        swept.add(more);
        result.size_limit_age_days = Some(lowered);
    }
    result.events = swept.events;
    result.messages = swept.messages;
    result.notifications = swept.notifications;
    result.approvals = swept.approvals;
    result.questions = swept.questions;
    result.runs = swept.runs;
    result.sessions = swept.sessions;
    if !dry_run && let Some(max) = rules.max_log_bytes() {
        rotate_all(d, max).await;
    }
    if vacuum && !dry_run && store.db_size()?.free_bytes > 0 {
        store.vacuum().await?;
        result.vacuumed = true;
    }
    result.db_bytes_after = store.db_size()?.bytes;
    let removed_any =
        swept.rows() > 0 || result.log_files > 0 || !result.checkouts_removed.is_empty();
    if !dry_run && removed_any {
        let summary = serde_json::json!({
            "max_age_days": age, "events": result.events, "messages": result.messages,
            "notifications": result.notifications, "approvals": result.approvals,
            "questions": result.questions, "runs": result.runs, "sessions": result.sessions,
            "log_bytes": result.log_bytes, "checkouts_removed": result.checkouts_removed.len(),
            "checkouts_kept": result.checkouts_kept.len(), "vacuumed": result.vacuumed,
            "db_bytes_before": result.db_bytes_before, "db_bytes_after": result.db_bytes_after,
        });
        store
            .append_event(NewEvent {
                kind: "gc".into(),
                data: summary,
                ..NewEvent::default()
            })
            .await?;
        tracing::info!(
            events = result.events,
            messages = result.messages,
            runs = result.runs,
            sessions = result.sessions,
            log_bytes = result.log_bytes,
            checkouts = result.checkouts_removed.len(),
            "retention applied"
        );
    }
    Ok(result)
}

fn runs_dir(d: &Daemon) -> PathBuf {
    d.layout.data_dir.join("runs")
}

/// The logs of the runs the sweep let go: counted, and removed unless dry.
async fn remove_logs(
    d: &Daemon,
    swept: &Swept,
    dry_run: bool,
    seen: &mut HashSet<String>,
    result: &mut GcResult,
) -> Result<(), ApiError> {
    let logs: Vec<PathBuf> = swept
        .ended_runs
        .iter()
        .filter(|id| seen.insert((*id).clone()))
        .map(|id| runs_dir(d).join(format!("{id}.log")))
        .collect();
    let (files, bytes) = tokio::task::spawn_blocking(move || {
        let (mut files, mut bytes) = (0, 0);
        for log in logs {
            match crate::run_logs::files(&log, !dry_run) {
                Ok((f, b)) => {
                    files += f;
                    bytes += b;
                }
                Err(e) => {
                    tracing::warn!(log = %log.display(), error = %e, "a run's log was not removed")
                }
            }
        }
        (files, bytes)
    })
    .await
    .map_err(|e| ApiError::Internal(format!("removing run logs: {e}")))?;
    result.log_files += files;
    result.log_bytes += bytes;
    Ok(())
}

/// Rotates every log in `runs/` past `max` bytes (those of ended runs too: a run that wrote
/// fast and ended between two looks).
async fn rotate_all(d: &Daemon, max: u64) {
    let dir = runs_dir(d);
    let done = tokio::task::spawn_blocking(move || {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "log")
                && let Err(e) = crate::run_logs::rotate(&path, max)
            {
                tracing::warn!(log = %path.display(), error = %e, "a run's log was not rotated");
            }
        }
    })
    .await;
    if let Err(e) = done {
        tracing::warn!(error = %e, "log rotation failed");
    }
}

/// Rotates the logs of the runs not ended yet that passed `max` bytes.
async fn rotate_running(d: &Daemon, max: u64) {
    let runs = match d.store.active_run_ids() {
        Ok(runs) => runs,
        Err(e) => {
            tracing::debug!(error = %e, "running runs unreadable: no log rotation this time");
            return;
        }
    };
    if runs.is_empty() {
        return;
    }
    let dir = runs_dir(d);
    let done = tokio::task::spawn_blocking(move || {
        for run in runs {
            let log = dir.join(format!("{run}.log"));
            match crate::run_logs::rotate(&log, max) {
                Ok(true) => tracing::debug!(run = %run, "log rotated"),
                Ok(false) => {}
                Err(e) => tracing::warn!(run = %run, error = %e, "a run's log was not rotated"),
            }
        }
    })
    .await;
    if let Err(e) = done {
        tracing::warn!(error = %e, "log rotation failed");
    }
}

/// What a checkout under `worktrees/` or `clones/` is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Isolation {
    Worktree,
    Clone,
}

/// A checkout the rules let go, if it holds no work.
struct Candidate {
    path: PathBuf,
    isolation: Isolation,
    /// The repository git checks against: a worktree's own (its `.git` names it), a clone's
    /// origin (its owner's project).
    repo_root: String,
    /// The owner's project, as landings lock it.
    project_root: String,
    label: String,
    role: String,
    index: u32,
}

/// The checkouts no party needs: those of parties that ended, and of standalone runs that
/// ended, before `cutoff`. Each is removed (or, dry, checked) as `cleanup_party` would, never
/// forced; one holding work, or whose owner is unknown, is listed as kept with why.
async fn checkouts(
    d: &Daemon,
    cutoff: &str,
    age: f64,
    dry_run: bool,
    result: &mut GcResult,
) -> Result<(), ApiError> {
    let data_dir = d.layout.data_dir.clone();
    // By label (`<name>-<id8>`: two parties of one name started within a minute share one).
    let mut parties: HashMap<String, Vec<PartyRow>> = HashMap::new();
    for row in d.store.list_parties_brief(None, None)? {
        parties
            .entry(crate::orchestrator::party_label(&row))
            .or_default()
            .push(row);
    }
    let prefix = format!("{}/", data_dir.display());
    let mut runs_at: HashMap<String, Vec<troupe_store::AgentRun>> = HashMap::new();
    for run in d.store.runs_working_under(&prefix)? {
        if let Some(w) = run.workdir.clone() {
            runs_at.entry(w).or_default().push(run);
        }
    }
    let ended = |row: &PartyRow| {
        row.status.is_over() && row.completed_at.as_deref().unwrap_or(&row.created_at) < cutoff
    };
    let mut candidates = Vec::new();
    for (base, isolation) in [
        ("worktrees", Isolation::Worktree),
        ("clones", Isolation::Clone),
    ] {
        for (label, entry, path) in two_levels(&data_dir.join(base)) {
            let shown = path.display().to_string();
            let runs = runs_at.get(&shown).map(Vec::as_slice).unwrap_or_default();
            let owners = parties.get(&label).map(Vec::as_slice).unwrap_or_default();
            if let Some(run) = runs.iter().find(|r| !r.status.is_finished()) {
                // At work in it (a landing's rework): not for now, and said only when old.
                if !owners.is_empty() && owners.iter().all(ended) {
                    result
                        .checkouts_kept
                        .push(kept(&shown, format!("run {} is at work in it", run.run_id)));
                }
                continue;
            }
            let repo_root = match owners {
                // Open, or ended too recently.
                [..] if owners.iter().any(|r| !ended(r)) => continue,
                [.., last] => last.repo_root.clone(),
                [] if !runs.is_empty() => {
                    let last = runs
                        .iter()
                        .map(|r| r.completed_at.as_deref().unwrap_or(&r.created_at))
                        .max()
                        .unwrap_or_default();
                    if last >= cutoff {
                        continue;
                    }
                    match d.store.get_project(&runs[0].project_id) {
                        Ok(p) => p.root_path,
                        Err(e) => {
                            result.checkouts_kept.push(kept(&shown, e.to_string()));
                            continue;
                        }
                    }
                }
                [] => {
                    if older_than(&path, age) {
                        result.checkouts_kept.push(kept(
                            &shown,
                            "no party or run of this data dir owns it".into(),
                        ));
                    }
                    continue;
                }
            };
            let Some((role, index)) = entry
                .rsplit_once('-')
                .and_then(|(role, i)| Some((role.to_string(), i.parse::<u32>().ok()?)))
            else {
                result
                    .checkouts_kept
                    .push(kept(&shown, "not a checkout Troupe made".into()));
                continue;
            };
            let own = match isolation {
                Isolation::Worktree => troupe_worktree::repo_root(&path)
                    .map(|r| r.display().to_string())
                    .unwrap_or_else(|_| repo_root.clone()),
                Isolation::Clone => repo_root.clone(),
            };
            candidates.push(Candidate {
                path,
                isolation,
                repo_root: own,
                project_root: repo_root,
                label,
                role,
                index,
            });
        }
    }
    for c in candidates {
        remove_checkout(c, dry_run, result).await?;
    }
    // Ended parties' integration worktrees (a landing's).
    for row in parties.values().flatten().filter(|r| ended(r)) {
        let Some(dir) = crate::landing::integration_left(&d.layout, row) else {
            continue;
        };
        let (layout, row) = (d.layout.clone(), row.clone());
        let _no_landing = crate::landing::repo_lock(&row.repo_root).lock_owned().await;
        let had_checkout = dir.exists();
        let outcome = tokio::task::spawn_blocking(move || {
            if dry_run {
                crate::landing::check_integration_of(&layout, &row)
            } else {
                crate::landing::remove_integration_of(&layout, &row)
            }
        })
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?;
        let shown = dir.display().to_string();
        match outcome {
            Ok(()) if had_checkout => result.checkouts_removed.push(shown),
            Ok(()) => {}
            Err(e) => result.checkouts_kept.push(kept(&shown, e.to_string())),
        }
    }
    if !dry_run && !result.checkouts_removed.is_empty() {
        // Merge conflicts leave the inbox with their integration branch.
        d.store.announce(troupe_store::Topic::Inbox);
    }
    Ok(())
}

/// Removes (or, dry, checks) one checkout, never forced.
async fn remove_checkout(
    c: Candidate,
    dry_run: bool,
    result: &mut GcResult,
) -> Result<(), ApiError> {
    // Never under a landing of its repository.
    let _no_landing = crate::landing::repo_lock(&c.project_root)
        .lock_owned()
        .await;
    let base = c
        .path
        .parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf);
    let Some(base) = base else {
        return Ok(());
    };
    let (root, label, role, index, isolation) = (
        PathBuf::from(&c.repo_root),
        c.label.clone(),
        c.role.clone(),
        c.index,
        c.isolation,
    );
    let outcome = tokio::task::spawn_blocking(move || {
        let _git = crate::project::git_lock();
        let name = troupe_worktree::MemberName {
            party: &label,
            role: &role,
            index,
        };
        match (isolation, dry_run) {
            (Isolation::Worktree, true) => {
                troupe_worktree::check_remove_worktree(&root, &base, name)
            }
            (Isolation::Worktree, false) => {
                troupe_worktree::remove_worktree(&root, &base, name, false)
            }
            (Isolation::Clone, true) => troupe_worktree::check_remove_clone(&root, &base, name),
            (Isolation::Clone, false) => troupe_worktree::remove_clone(&root, &base, name, false),
        }
    })
    .await
    .map_err(|e| ApiError::Internal(e.to_string()))?;
    let shown = c.path.display().to_string();
    match outcome {
        Ok(refs) => {
            if !dry_run {
                crate::orchestrator::forget_setup(&c.path);
                // The party's (or run's) folder goes with its last checkout.
                if let Some(folder) = c.path.parent() {
                    let _left_if_not_empty = std::fs::remove_dir(folder);
                }
            }
            result.checkouts_removed.push(shown);
            result.deleted.extend(refs.into_iter().map(deleted_ref));
        }
        Err(e) => {
            let reason = e.to_string();
            let unmerged = match e {
                troupe_worktree::WorktreeError::Unmerged { refs, .. } => {
                    refs.into_iter().map(deleted_ref).collect()
                }
                _ => Vec::new(),
            };
            result.checkouts_kept.push(KeptCheckout {
                workdir: shown,
                reason,
                unmerged,
            });
        }
    }
    Ok(())
}

fn kept(workdir: &str, reason: String) -> KeptCheckout {
    KeptCheckout {
        workdir: workdir.to_string(),
        reason,
        unmerged: Vec::new(),
    }
}

/// A ref a checkout's removal deleted (or would), as the API says it (`gc`, `cleanup_party`).
pub(crate) fn deleted_ref(r: troupe_worktree::DroppedRef) -> DeletedRef {
    DeletedRef {
        repo: r.repo.display().to_string(),
        branch: r.name,
        tip: r.tip,
        unmerged: r.unmerged,
    }
}

/// The directories two levels under `base` (`<label>/<entry>`), in name order.
fn two_levels(base: &Path) -> Vec<(String, String, PathBuf)> {
    let dirs = |dir: &Path| -> Vec<(String, PathBuf)> {
        let mut out: Vec<(String, PathBuf)> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
            .collect();
        out.sort();
        out
    };
    let mut out = Vec::new();
    for (label, dir) in dirs(base) {
        for (entry, path) in dirs(&dir) {
            out.push((label.clone(), entry, path));
        }
    }
    out
}

/// Whether `path` was last changed more than `days` ago.
fn older_than(path: &Path, days: f64) -> bool {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|modified| modified.elapsed().ok())
        .is_some_and(|age| age.as_secs_f64() > days * 86_400.0)
}

/// Applies the rules at start and every `PASS_EVERY` (no `VACUUM`: it would hold writes), and
/// rotates the logs of running runs every `ROTATE_EVERY`, until the daemon stops. A
/// `config.toml` whose `[retention]` is wrong stops both until it is fixed, said in the daemon's
/// log.
pub fn watch(daemon: &Arc<Daemon>) {
    let weak = Arc::downgrade(daemon);
    let mut shutdown = daemon.shutdown_requested();
    tokio::spawn(async move {
        loop {
            {
                let Some(d) = weak.upgrade() else { return };
                match Rules::load(&d.layout.data_dir) {
                    Ok(r) => {
                        if let Err(e) = pass(&d, &r, r.max_age_days, false, false).await {
                            tracing::warn!(error = %e, "the retention pass failed");
                        }
                    }
                    Err(e) => tracing::error!("retention is off until this is fixed: {e}"),
                }
            }
            tokio::select! {
                () = tokio::time::sleep(PASS_EVERY) => {}
                _ = shutdown.changed() => return,
            }
        }
    });
    let weak = Arc::downgrade(daemon);
    let mut shutdown = daemon.shutdown_requested();
    tokio::spawn(async move {
        // The rules, read again every `RULES_EVERY` looks.
        const RULES_EVERY: u32 = 60;
        let mut rules = None;
        let mut looks = 0;
        loop {
            {
                let Some(d) = weak.upgrade() else { return };
                if looks % RULES_EVERY == 0 {
                    rules = Rules::load(&d.layout.data_dir).ok();
                }
                looks = looks.wrapping_add(1);
                if let Some(max) = rules.as_ref().and_then(Rules::max_log_bytes) {
                    rotate_running(&d, max).await;
                }
            }
            tokio::select! {
                () = tokio::time::sleep(ROTATE_EVERY) => {}
                _ = shutdown.changed() => return,
            }
        }
    });
}

#[cfg(test)]
mod tests;
