//! The conflict radar's daemon side: while parties run, it watches their members' branch tips
//! (a kick on each `complete`, else a look every second) and, when one moved, merges every pair
//! in memory (`troupe_worktree::radar`). A new overlap is a `conflict_predicted` event, a message
//! to both members naming the other and the files, and a notification for the person (whose
//! editor puts diagnostics on the lines); one that went away is `conflict_resolved`. When a
//! party stops running, the person is told the radar stopped (`radar_stopped`).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use troupe_api::types::{ConflictRangeView, PredictedConflictView};
use troupe_model::PartyStatus;
use troupe_worktree::radar::{PredictedConflict, Radar as GitRadar};

use crate::collab::{Ctx, PartyView, tell_person};
use crate::landing::{checkouts, tell_member, timeline, try_sync_branch};

/// How often the radar looks at the branch tips of running parties when nothing kicked it.
const LOOK_EVERY: Duration = Duration::from_secs(1);
/// The least time between two looks, however often it is kicked.
const KICKED_EVERY: Duration = Duration::from_millis(250);

#[derive(Default)]
struct PartyRadar {
    git: Arc<Mutex<GitRadar>>,
    /// The tips the last scan saw (branch → tip), to skip scans when nothing moved.
    tips: Vec<Option<String>>,
    current: Vec<PredictedConflictView>,
}

/// The radar of every running party.
#[derive(Default)]
pub struct Radar {
    parties: Mutex<HashMap<String, PartyRadar>>,
    kick: tokio::sync::Notify,
}

impl Radar {
    /// Looks now (a member completed, or committed).
    pub fn kick(&self) {
        self.kick.notify_one();
    }

    /// The current predictions, of one party or all.
    pub fn current(&self, party_id: Option<&str>) -> Vec<PredictedConflictView> {
        let parties = self
            .parties
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        parties
            .iter()
            .filter(|(id, _)| party_id.is_none_or(|p| p == id.as_str()))
            .flat_map(|(_, r)| r.current.clone())
            .collect()
    }

    /// Runs until `stop` changes.
    pub async fn run(self: Arc<Self>, ctx: Ctx, mut stop: tokio::sync::watch::Receiver<bool>) {
        let mut last: Option<tokio::time::Instant> = None;
        loop {
            tokio::select! {
                _ = stop.changed() => return,
                () = self.kick.notified() => {}
                () = tokio::time::sleep(LOOK_EVERY) => {}
            }
            // Kicks (a member's end) come as fast as members end: a look at most every
            // KICKED_EVERY, the first after a quiet spell at once.
            if let Some(at) = last {
                tokio::select! {
                    _ = stop.changed() => return,
                    () = tokio::time::sleep_until(at + KICKED_EVERY) => {}
                }
            }
            if *stop.borrow() {
                return;
            }
            last = Some(tokio::time::Instant::now());
            self.look(&ctx).await;
        }
    }

    /// One look at every running party.
    pub async fn look(&self, ctx: &Ctx) {
        let running = match ctx
            .store
            .list_parties_brief(None, Some(PartyStatus::Running))
        {
            Ok(rows) => rows,
            Err(e) => {
                tracing::debug!(error = %e, "radar: parties unreadable");
                return;
            }
        };
        let live: Vec<String> = running.iter().map(|r| r.party_id.clone()).collect();
        let ended: Vec<(String, Vec<PredictedConflictView>)> = {
            let mut parties = self
                .parties
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            let ended = parties
                .iter()
                .filter(|(id, r)| !live.contains(id) && !r.current.is_empty())
                .map(|(id, r)| (id.clone(), r.current.clone()))
                .collect();
            parties.retain(|id, _| live.contains(id));
            ended
        };
        for (party_id, left) in ended {
            // Its predictions stop being watched (editors clear them); landing meets them.
            if let Ok(party) = PartyView::load(&ctx.store, &party_id) {
                let pairs: Vec<String> = left
                    .iter()
                    .map(|c| format!("{} and {}", c.a, c.b))
                    .collect();
                tell_person(
                    ctx,
                    &party,
                    "radar_stopped",
                    &format!(
                        "the party is {}; the radar stopped watching it ({} still predicted to conflict: land_party will name them)",
                        party.row.status,
                        pairs.join(", ")
                    ),
                    json!({ "party_id": party_id, "conflicts": left }),
                )
                .await;
            }
        }
        for row in running {
            if let Err(e) = self.look_at(ctx, &row.party_id).await {
                tracing::debug!(party = %row.party_id, error = %e, "radar: no look");
            }
        }
    }

    async fn look_at(&self, ctx: &Ctx, party_id: &str) -> Result<(), String> {
        // A party of members without checkouts of their own has nothing to look at: asked in
        // SQLite, without loading its members.
        if !ctx
            .store
            .party_has_checkouts(party_id)
            .map_err(|e| e.to_string())?
        {
            return Ok(());
        }
        let party = PartyView::load(&ctx.store, party_id).map_err(|e| e.to_string())?;
        let all = checkouts(&party);
        if all.is_empty() {
            return Ok(());
        }
        let root = PathBuf::from(&party.row.repo_root);
        let branches: Vec<(String, String)> =
            all.iter().map(|c| (c.label(), c.branch.clone())).collect();
        let (git, known) = {
            let mut parties = self
                .parties
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            let r = parties.entry(party_id.to_string()).or_default();
            (r.git.clone(), r.tips.clone())
        };
        let scan = tokio::task::spawn_blocking(move || {
            for c in &all {
                // A clone's commits come over first (a local fetch; cheap when nothing moved).
                try_sync_branch(&root, c);
            }
            let names: Vec<&str> = branches.iter().map(|(_, b)| b.as_str()).collect();
            let tips = troupe_worktree::review::tips(&root, &names).map_err(|e| e.to_string())?;
            if tips == known {
                return Ok(None);
            }
            let mut git = git.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            git.scan(&root, None, &branches)
                .map(|found| Some((tips, found)))
                .map_err(|e| e.to_string())
        })
        .await
        .map_err(|e| e.to_string())??;
        let Some((tips, found)) = scan else {
            return Ok(());
        };
        // A best-of-N role's attempts are meant to overlap: never paired with each other.
        let role = |label: &str| label.rsplit_once('#').map_or(label, |(r, _)| r).to_string();
        let picks = |label: &str| {
            party
                .snapshot
                .party
                .roles
                .get(&role(label))
                .is_some_and(|r| r.pick.is_some())
        };
        let found: Vec<PredictedConflictView> = found
            .into_iter()
            .filter(|c| !(role(&c.a) == role(&c.b) && picks(&c.a)))
            .map(|c| view(&party, c))
            .collect();
        let (new, changed, gone) = {
            let mut parties = self
                .parties
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            let r = parties.entry(party_id.to_string()).or_default();
            r.tips = tips;
            // A pair is one prediction, whatever its files; a change of files is an update.
            let pair =
                |a: &PredictedConflictView, b: &PredictedConflictView| a.a == b.a && a.b == b.b;
            let new: Vec<_> = found
                .iter()
                .filter(|f| !r.current.iter().any(|c| pair(c, f)))
                .cloned()
                .collect();
            let changed: Vec<_> = found
                .iter()
                .filter(|f| r.current.iter().any(|c| pair(c, f) && c != *f))
                .cloned()
                .collect();
            let gone: Vec<_> = r
                .current
                .iter()
                .filter(|c| !found.iter().any(|f| pair(c, f)))
                .cloned()
                .collect();
            r.current = found;
            (new, changed, gone)
        };
        for c in &new {
            announce(ctx, &party, c, false).await;
        }
        for c in &changed {
            announce(ctx, &party, c, true).await;
        }
        for c in &gone {
            timeline(ctx, &party, "conflict_resolved", json!(c)).await;
            tell_person(
                ctx,
                &party,
                "conflict_resolved",
                &format!("{} and {} no longer conflict", c.a, c.b),
                json!(c),
            )
            .await;
        }
        Ok(())
    }
}

fn view(party: &PartyView, c: PredictedConflict) -> PredictedConflictView {
    PredictedConflictView {
        party_id: party.row.party_id.clone(),
        repo_root: party.row.repo_root.clone(),
        a: c.a,
        b: c.b,
        files: c.files,
        ranges: c
            .ranges
            .into_iter()
            .map(|r| ConflictRangeView {
                path: r.path,
                start_line: r.start_line,
                end_line: r.end_line,
            })
            .collect(),
    }
}

/// A new prediction (or a pair's new set of files): on the timeline, to both members (naming
/// the other), to the person.
async fn announce(ctx: &Ctx, party: &PartyView, c: &PredictedConflictView, update: bool) {
    let mut data = json!(c);
    data["update"] = json!(update);
    timeline(ctx, party, "conflict_predicted", data).await;
    let files = c.files.join(", ");
    let now = if update { " now" } else { "" };
    let all = checkouts(party);
    for (me, other) in [(&c.a, &c.b), (&c.b, &c.a)] {
        if let Some(m) = all.iter().find(|m| &m.label() == me) {
            let text = format!(
                "conflict ahead: your branch and {other}{now} both change {files} in ways git cannot merge. Talk to {other} (or the leader) before you go further."
            );
            tell_member(ctx, party, &m.member, &text).await;
        }
    }
    tell_person(
        ctx,
        party,
        "conflict_predicted",
        &format!("{} and {} will{now} conflict in {files}", c.a, c.b),
        json!(c),
    )
    .await;
}
