//! Agent budgets (an agent definition's `budget`): after each usage report, and every few
//! seconds for wall time and files changed (which need no report), a run and the runs above it
//! are checked against their budgets (tokens, cost, wall time, files changed) and one over its
//! budget is stopped (`Command::BudgetTripped`; a party member pauses). Step budgets are the
//! collaboration protocol's, counted with the same `count_files`.

use std::path::PathBuf;

use troupe_store::Store;

use crate::orchestrator::Orchestrator;

/// Files changed in a checkout (none counted outside a git repository).
pub async fn count_files(workdir: Option<&str>, repo_root: &str) -> Option<i64> {
    let workdir = PathBuf::from(workdir?);
    let root = PathBuf::from(repo_root);
    tokio::task::spawn_blocking(move || troupe_worktree::changed_files(&workdir, &root).ok())
        .await
        .ok()
        .flatten()
        .map(|n| i64::try_from(n).unwrap_or(i64::MAX))
}

/// Checks the budgets of a run and of the runs above it (usage rolls up), a few levels at most;
/// a run over its budget is stopped (a party member pauses).
pub async fn check_run_budgets(store: &Store, orchestrator: &Orchestrator, run_id: &str) {
    let mut at = store.get_run(run_id).ok();
    for _ in 0..8 {
        let Some(run) = at.take() else { break };
        let budget =
            serde_json::from_value::<troupe_engine::AgentDefinition>(run.definition.clone())
                .ok()
                .and_then(|d| d.budget);
        if let (Some(budget), Ok(spent), false) = (
            budget,
            store.usage("run", &run.run_id),
            run.status.is_finished(),
        ) {
            let files = match (budget.counts_files(), &run.workdir) {
                (true, Some(_)) => {
                    let root = store
                        .get_project(&run.project_id)
                        .map(|p| p.root_path)
                        .unwrap_or_default();
                    count_files(run.workdir.as_deref(), &root).await
                }
                _ => None,
            };
            let secs = run.started_at.as_deref().and_then(elapsed_secs);
            let spent = troupe_engine::Spent {
                input_tokens: spent.input_tokens,
                output_tokens: spent.output_tokens,
                cost_usd: spent.cost_usd,
                secs,
                files_changed: files,
            };
            if let Some(reason) = budget.exceeded(&spent) {
                orchestrator.tell(crate::orchestrator::Command::BudgetTripped {
                    run_id: run.run_id.clone(),
                    reason,
                });
            }
        }
        at = run
            .parent_session_id
            .as_deref()
            .and_then(|s| store.run_of_session(s).ok().flatten());
    }
}

/// Seconds since a stored UTC timestamp (`YYYY-MM-DDTHH:MM:SS.fffZ`).
fn elapsed_secs(stamp: &str) -> Option<f64> {
    let num = |r: std::ops::Range<usize>| stamp.get(r)?.parse::<i64>().ok();
    let (y, m, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hh, mm) = (num(11..13)?, num(14..16)?);
    let ss: f64 = stamp.get(17..)?.trim_end_matches('Z').parse().ok()?;
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let at = (days * 86_400 + hh * 3600 + mm * 60) as f64 + ss;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?
        .as_secs_f64();
    Some((now - at).max(0.0))
}
