//! Landing a party's work: its members' checkouts in DAG order, measured and reviewed, and the
//! merge queue (`land`): branches integrated one at a time on `troupe/<party>/landing` in its
//! own worktree, the test command run there, the target moved only when it passes. A conflict
//! leaves that branch out, and its member and the person are told. The git work is
//! `troupe_worktree`'s; this room decides what to land, runs the tests and tells people.
//!
//! One landing at a time per repository, its git work off the async threads under the daemon's
//! git lock (which member checkouts take too). `rework` starts a finished member again in its own
//! checkout (a review to address, a conflict to resolve) as a run outside the DAG.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;
use troupe_api::ApiError;
use troupe_api::types::*;
use troupe_engine::Isolation;
use troupe_store::{MemberRow, NewEvent, Recipients};
use troupe_worktree::WorktreeError;
use troupe_worktree::land::{self as git_land, BranchOutcome, Strategy};

use crate::collab::{Ctx, PartyView, tell_person};
use crate::orchestrator::party_label;

/// One landing at a time per repository: landings move its refs and share its integration
/// worktrees.
pub fn repo_lock(repo_root: &str) -> std::sync::Arc<tokio::sync::Mutex<()>> {
    type Locks = std::collections::BTreeMap<String, std::sync::Arc<tokio::sync::Mutex<()>>>;
    static LOCKS: std::sync::Mutex<Locks> = std::sync::Mutex::new(Locks::new());
    LOCKS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .entry(repo_root.to_string())
        .or_default()
        .clone()
}
/// Default and most seconds a test command may take.
const DEFAULT_TEST_SECS: u64 = 600;
/// Test output kept in the result.
const TEST_OUTPUT_TAIL: usize = 8 * 1024;

/// A git error as an API error: missing branches and targets are named as not found, a dirty
/// or moved target is a conflict, the rest internal.
pub fn git_error(e: WorktreeError) -> ApiError {
    match e {
        WorktreeError::NoBranch(b) => ApiError::NotFound {
            what: "branch".into(),
            id: b,
        },
        WorktreeError::NoTargetBranch(t) => ApiError::NotFound {
            what: "target branch".into(),
            id: t,
        },
        e @ (WorktreeError::TargetDirty { .. }
        | WorktreeError::TargetMoved { .. }
        | WorktreeError::NoTarget
        | WorktreeError::NotARepo(_)
        | WorktreeError::NoCommits(_)
        | WorktreeError::Undo { .. }
        | WorktreeError::IntegrationTouched { .. }) => ApiError::Conflict(e.to_string()),
        e => ApiError::Internal(e.to_string()),
    }
}

/// Runs git work off the async threads.
pub async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, WorktreeError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::Internal(format!("git task failed: {e}")))?
        .map_err(git_error)
}

/// A member with a checkout of its own.
#[derive(Debug, Clone)]
pub struct Checkout {
    pub member: MemberRow,
    pub branch: String,
    pub workdir: String,
    pub isolation: Isolation,
}

impl Checkout {
    pub fn label(&self) -> String {
        format!("{}#{}", self.member.role_name, self.member.instance_index)
    }
}

/// Roles in DAG order (a role after the roles it waits for), ties by name.
fn role_order(party: &PartyView) -> Vec<String> {
    let flow = &party.snapshot.party.flow;
    let mut done: Vec<String> = Vec::new();
    let mut left: Vec<&str> = party.roles().collect();
    while !left.is_empty() {
        let ready: Vec<&str> = left
            .iter()
            .copied()
            .filter(|r| {
                flow.get(*r).into_iter().flatten().all(|dep| {
                    let dep = dep.split(':').next().unwrap_or(dep);
                    done.iter().any(|d| d == dep) || !party.has_role(dep)
                })
            })
            .collect();
        // A cycle cannot be stored; should one appear, the rest go in name order.
        let take = if ready.is_empty() {
            left.clone()
        } else {
            ready
        };
        for r in &take {
            done.push((*r).to_string());
        }
        left.retain(|r| !take.contains(r));
    }
    done
}

/// The party's members that have a branch, in DAG order, then by instance.
pub fn checkouts(party: &PartyView) -> Vec<Checkout> {
    let mut out = Vec::new();
    for role in role_order(party) {
        let isolation = party
            .snapshot
            .party
            .roles
            .get(&role)
            .and_then(|r| party.snapshot.agents.get(&r.agent))
            .map_or(Isolation::None, |a| a.isolation);
        let mut members: Vec<&MemberRow> = party
            .members
            .iter()
            .filter(|m| m.role_name == role)
            .collect();
        members.sort_by_key(|m| m.instance_index);
        for m in members {
            if let (Some(branch), Some(workdir)) = (&m.branch_name, &m.workdir) {
                out.push(Checkout {
                    member: m.clone(),
                    branch: branch.clone(),
                    workdir: workdir.clone(),
                    isolation,
                });
            }
        }
    }
    out
}

/// One member's checkout, or an error naming what is missing.
pub fn checkout_of(party: &PartyView, role: &str, index: u32) -> Result<Checkout, ApiError> {
    if !party.has_role(role) {
        return Err(ApiError::NotFound {
            what: format!("role in party {}", party.row.party_id),
            id: role.to_string(),
        });
    }
    let all = checkouts(party);
    all.into_iter()
        .find(|c| c.member.role_name == role && c.member.instance_index == i64::from(index))
        .ok_or_else(|| {
            let started = party
                .members
                .iter()
                .any(|m| m.role_name == role && m.instance_index == i64::from(index));
            if started {
                ApiError::Conflict(format!(
                    "member {role}#{index} works in the project itself (isolation none): it has no branch of its own"
                ))
            } else {
                ApiError::NotFound {
                    what: format!("member of party {}", party.row.party_id),
                    id: format!("{role}#{index} (it has not started)"),
                }
            }
        })
}

/// Brings a clone's branch into the main repository so it can be measured and landed.
/// Takes the daemon's git lock (a fetch writes refs); not to be called while holding it.
pub fn sync_branch(repo_root: &Path, c: &Checkout) -> Result<(), WorktreeError> {
    if c.isolation == Isolation::Clone && Path::new(&c.workdir).exists() {
        let _git = crate::project::git_lock();
        git_land::import_clone_branch(repo_root, Path::new(&c.workdir), &c.branch)?;
    }
    Ok(())
}

/// `sync_branch`, unless another git write holds the lock (the radar tries again later).
pub fn try_sync_branch(repo_root: &Path, c: &Checkout) {
    if c.isolation == Isolation::Clone
        && Path::new(&c.workdir).exists()
        && let Some(_git) = crate::project::try_git_lock()
        && let Err(e) = git_land::import_clone_branch(repo_root, Path::new(&c.workdir), &c.branch)
    {
        tracing::debug!(branch = %c.branch, error = %e, "a clone's branch not brought over");
    }
}

/// A checkout measured against the target (errors are reported in the row, not raised).
pub fn measure(
    party: &PartyView,
    c: &Checkout,
    target: Option<&str>,
) -> Result<WorktreeInfo, WorktreeError> {
    let root = Path::new(&party.row.repo_root);
    let synced = sync_branch(root, c);
    let mut info = WorktreeInfo {
        party_id: party.row.party_id.clone(),
        party_name: party.row.name.clone(),
        role: c.member.role_name.clone(),
        index: c.member.instance_index,
        status: c.member.status,
        workdir: c.workdir.clone(),
        branch: c.branch.clone(),
        target: target.map(String::from),
        head: None,
        base: None,
        ahead: 0,
        behind: 0,
        dirty: Path::new(&c.workdir).exists()
            && troupe_worktree::is_dirty(Path::new(&c.workdir)).unwrap_or(false),
        changed_files: Vec::new(),
        error: None,
    };
    match troupe_worktree::review::branch_state(root, &c.branch, target) {
        Ok(s) => {
            info.target = Some(s.target);
            info.head = Some(s.head);
            info.base = Some(s.base);
            info.ahead = s.ahead;
            info.behind = s.behind;
            info.changed_files = s.changed_files;
        }
        Err(e) => info.error = Some(e.to_string()),
    }
    if let Err(e) = synced {
        info.error = Some(format!("the clone's branch could not be brought over: {e}"));
    }
    Ok(info)
}

/// A checkout measured together with a read of its branch (`read` gives the branch state it
/// saw): read again while the member committed between the two, so both name one tip (after
/// five reads that still disagree, a member committing without pause, the last pair is given).
pub fn measure_with<T>(
    party: &PartyView,
    c: &Checkout,
    target: Option<&str>,
    read: impl Fn() -> Result<(troupe_worktree::review::BranchState, T), WorktreeError>,
) -> Result<(WorktreeInfo, T), WorktreeError> {
    let mut reads = 0;
    loop {
        reads += 1;
        let info = measure(party, c, target)?;
        let (state, value) = read()?;
        if info.head.as_deref() == Some(state.head.as_str()) || reads == 5 {
            return Ok((info, value));
        }
    }
}

fn strategy(s: LandStrategy) -> Strategy {
    match s {
        LandStrategy::Merge => Strategy::Merge,
        LandStrategy::Rebase => Strategy::Rebase,
        LandStrategy::Squash => Strategy::Squash,
    }
}

/// The integration branch and its worktree (`<data>/landing/<party>`).
fn integration(ctx: &Ctx, party: &PartyView) -> (String, PathBuf, String) {
    integration_of(&ctx.layout, &party.row)
}

/// A party's integration branch, its worktree's directory and the worktree's git name.
pub fn integration_of(
    layout: &troupe_api::layout::Layout,
    row: &troupe_store::PartyRow,
) -> (String, PathBuf, String) {
    let label = party_label(row);
    (
        format!("troupe/{label}/landing"),
        layout.data_dir.join("landing").join(&label),
        format!("troupe-{label}-landing"),
    )
}

/// Where the integration branch's last tip written by a landing is kept (beside its worktree).
fn tip_marker(dir: &Path) -> PathBuf {
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    dir.with_file_name(format!(".{name}.tip"))
}

/// A party's integration worktree directory, if a landing left one (or its branch).
pub fn integration_left(
    layout: &troupe_api::layout::Layout,
    row: &troupe_store::PartyRow,
) -> Option<PathBuf> {
    let (_, dir, _) = integration_of(layout, row);
    (dir.exists() || tip_marker(&dir).exists()).then_some(dir)
}

/// Whether a party's integration worktree and branch may go, as `remove_integration_of` would
/// find it (nothing is changed).
pub fn check_integration_of(
    layout: &troupe_api::layout::Layout,
    row: &troupe_store::PartyRow,
) -> Result<(), WorktreeError> {
    let (branch, dir, _) = integration_of(layout, row);
    let expected = std::fs::read_to_string(tip_marker(&dir)).ok();
    git_land::check_integration(Path::new(&row.repo_root), &branch, expected.as_deref())
}

/// Removes a party's integration worktree and branch, unless someone worked there (then the
/// reason it was kept).
pub fn remove_integration_of(
    layout: &troupe_api::layout::Layout,
    row: &troupe_store::PartyRow,
) -> Result<(), WorktreeError> {
    let (branch, dir, wt_name) = integration_of(layout, row);
    let marker = tip_marker(&dir);
    let expected = std::fs::read_to_string(&marker).ok();
    let root = Path::new(&row.repo_root);
    git_land::check_integration(root, &branch, expected.as_deref())?;
    let _git = crate::project::git_lock();
    git_land::remove_integration(root, &dir, &wt_name, &branch)?;
    match std::fs::remove_file(&marker) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
        _ => Ok(()),
    }
}

/// A fact of the party on its timeline (a lost write is logged: the work itself is done).
pub async fn timeline(ctx: &Ctx, party: &PartyView, kind: &str, data: serde_json::Value) {
    let event = NewEvent {
        kind: kind.into(),
        project_id: Some(party.row.project_id.clone()),
        party_id: Some(party.row.party_id.clone()),
        data,
        ..NewEvent::default()
    };
    if let Err(e) = ctx.store.append_event(event).await {
        tracing::warn!(party = %party.row.party_id, error = %e, "timeline event lost");
    }
}

/// Sends a system message to a running member's session; false when it is not running (an
/// ended session takes no messages: the timeline and the person's notification carry it).
pub async fn tell_member(ctx: &Ctx, party: &PartyView, m: &MemberRow, text: &str) -> bool {
    let Some(session) = m
        .session_id
        .as_ref()
        .filter(|_| m.status == MemberStatus::Running)
    else {
        return false;
    };
    crate::collab::send(ctx, party, Recipients::Session(session.clone()), text).await
}

/// The checkouts that may land: every member's, except that of a best-of-N role only the picked
/// attempt's (the others are returned apart). A role still waiting for its pick is an error
/// naming who picks.
pub fn picked_checkouts(
    ctx: &Ctx,
    party: &PartyView,
) -> Result<(Vec<Checkout>, Vec<Checkout>), ApiError> {
    let picks = ctx.store.member_picks(&party.row.party_id)?;
    let mut landing = Vec::new();
    let mut left = Vec::new();
    for c in checkouts(party) {
        let role = &c.member.role_name;
        let Some(spec) = party
            .snapshot
            .party
            .roles
            .get(role)
            .and_then(|r| r.pick.as_ref())
        else {
            landing.push(c);
            continue;
        };
        let picked = picks
            .iter()
            .find(|p| &p.role_name == role)
            .and_then(|p| p.instance_index);
        match picked {
            Some(i) if i == c.member.instance_index => landing.push(c),
            Some(_) => left.push(c),
            None => {
                let judge_run = picks
                    .iter()
                    .find(|p| &p.role_name == role)
                    .and_then(|p| p.judge_run_id.as_deref());
                let judge_ended = judge_run
                    .is_some_and(|r| ctx.store.get_run(r).is_ok_and(|r| r.status.is_finished()));
                let who = match (&spec.judge, judge_ended) {
                    (Some(judge), true) => {
                        format!("its judge {judge} ended without a pick: the person picks")
                    }
                    (Some(judge), false) => {
                        format!("its judge {judge} is picking, or the person may")
                    }
                    (None, _) => "the person picks".to_string(),
                };
                return Err(ApiError::Conflict(format!(
                    "role {role} runs best of {} and none is picked yet ({who} with pick_member)",
                    party.snapshot.party.roles.get(role).map_or(0, |r| r.count)
                )));
            }
        }
    }
    Ok((landing, left))
}

/// Whether every best-of-N role of the party has its pick.
pub fn all_picked(ctx: &Ctx, party: &PartyView) -> Result<bool, ApiError> {
    let picks = ctx.store.member_picks(&party.row.party_id)?;
    Ok(party
        .snapshot
        .party
        .roles
        .iter()
        .filter(|(_, r)| r.pick.is_some())
        .all(|(role, _)| {
            picks
                .iter()
                .any(|p| &p.role_name == role && p.instance_index.is_some())
        }))
}

/// `land` for the `land` runner's run `run_id`, once every best-of-N role has its pick (its turn
/// may come first), waiting up to `wait`.
pub async fn land_when_picked(
    ctx: &Ctx,
    p: LandPartyParams,
    wait: Duration,
    run_id: &str,
) -> Result<LandResult, ApiError> {
    let deadline = tokio::time::Instant::now() + wait;
    let mut asked = std::collections::HashSet::new();
    loop {
        let mut picked = ctx.store.changes(troupe_store::Topic::Picks);
        let party = PartyView::load(&ctx.store, &p.party_id)?;
        if all_picked(ctx, &party)? {
            return land_as(ctx, p, Some(run_id)).await;
        }
        // A picking that cannot finish by itself (attempts that crashed for good, a judge that
        // ended without a pick) is the person's, once.
        for (role, why) in stalled_picks(ctx, &party).await? {
            if asked.insert(role.clone()) {
                tell_person(
                    ctx,
                    &party,
                    "pick_needed",
                    &format!("role {role}: {why}; pick the attempt to land (pick_member)"),
                    json!({ "party_id": party.row.party_id, "role": role }),
                )
                .await;
            }
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(ApiError::Conflict(format!(
                "waited {} s for the picks of party {}'s best-of-N roles",
                wait.as_secs(),
                p.party_id
            )));
        }
        // The store announces every pick and every judge's end; other runs ending (attempts
        // that crashed for good) are looked at again every few seconds.
        let next = (tokio::time::Instant::now() + Duration::from_secs(2)).min(deadline);
        let _ = tokio::time::timeout_at(next, picked.changed()).await;
    }
}

/// Best-of-N roles whose picking is stuck: every attempt has stopped and none completed its
/// picking's way (no judge started), or the judge ended without a pick. Claims an unclaimed one.
async fn stalled_picks(ctx: &Ctx, party: &PartyView) -> Result<Vec<(String, String)>, ApiError> {
    let picks = ctx.store.member_picks(&party.row.party_id)?;
    let mut stalled = Vec::new();
    for (role, def) in party
        .snapshot
        .party
        .roles
        .iter()
        .filter(|(_, r)| r.pick.is_some())
    {
        let picking = picks.iter().find(|p| &p.role_name == role);
        if picking.is_some_and(|p| p.instance_index.is_some()) {
            continue;
        }
        if let Some(judge) = picking.and_then(|p| p.judge_run_id.as_deref()) {
            if ctx
                .store
                .get_run(judge)
                .is_ok_and(|r| r.status.is_finished())
            {
                stalled.push((
                    role.clone(),
                    format!("its judge's run {judge} ended without a pick"),
                ));
            }
            continue;
        }
        let members: Vec<&MemberRow> = party
            .members
            .iter()
            .filter(|m| &m.role_name == role)
            .collect();
        let idle = members.len() == def.count as usize
            && members
                .iter()
                .all(|m| !matches!(m.status, MemberStatus::Running | MemberStatus::Pending));
        // (A claimed picking without a judge has asked the person already.)
        if idle
            && picking.is_none()
            && ctx
                .store
                .claim_pick(party.row.party_id.clone(), role.clone())
                .await?
        {
            stalled.push((
                role.clone(),
                "its attempts have all stopped and no judge was started".to_string(),
            ));
        }
    }
    Ok(stalled)
}

/// What a role's judge is asked: every attempt's summary and diff, and how to answer.
pub async fn judge_prompt(ctx: &Ctx, party: &PartyView, role: &str) -> Result<String, ApiError> {
    const MAX_PATCH: usize = 12 * 1024;
    let mut prompt = format!(
        "You judge {} attempts at the same task by role {role} of party {} ({}). Compare them and pick the best one.\n",
        party.snapshot.party.roles.get(role).map_or(0, |r| r.count),
        party.row.name,
        party.row.party_id
    );
    let root = PathBuf::from(&party.row.repo_root);
    for c in checkouts(party)
        .into_iter()
        .filter(|c| c.member.role_name == role)
    {
        let output = c
            .member
            .agent_run_id
            .as_deref()
            .and_then(|r| ctx.store.get_run(r).ok())
            .and_then(|r| r.result)
            .and_then(|r| r["output"].as_str().map(String::from))
            .unwrap_or_default();
        let (root2, c2) = (root.clone(), c.clone());
        let files = blocking(move || {
            sync_branch(&root2, &c2)?;
            troupe_worktree::review::branch_diff(&root2, &c2.branch, None, None)
        })
        .await?
        .1;
        let mut patch: String = files.iter().map(|f| f.patch.as_str()).collect();
        if patch.len() > MAX_PATCH {
            let cut = (0..=MAX_PATCH)
                .rev()
                .find(|i| patch.is_char_boundary(*i))
                .unwrap_or(0);
            patch.truncate(cut);
            patch.push_str("\n[… cut]\n");
        }
        prompt.push_str(&format!(
            "\n## Attempt {} (branch {}, {} files, +{} -{})\nIts own summary: {output}\n```diff\n{patch}```\n",
            c.member.instance_index,
            c.branch,
            files.len(),
            files.iter().map(|f| f.additions).sum::<usize>(),
            files.iter().map(|f| f.deletions).sum::<usize>(),
        ));
    }
    prompt.push_str(&format!(
        "\nAnswer with the pick_member tool, or run: troupe call pick_member '{{\"party_id\":\"{}\",\"role\":\"{role}\",\"index\":<attempt>,\"reason\":\"<why>\",\"session_id\":\"<your $TROUPE_SESSION_ID>\"}}', then complete.\n",
        party.row.party_id
    ));
    Ok(prompt)
}

/// The merge queue: integrates the party's member branches in DAG order, runs the tests on the
/// result and moves the target only if they pass. Conflicting branches are left out and their
/// members and the person told; nothing but the target ever moves.
pub async fn land(ctx: &Ctx, p: LandPartyParams) -> Result<LandResult, ApiError> {
    land_as(ctx, p, None).await
}

/// `land` for a run (the `land` runner): the test command's processes carry the run's id, so
/// they end with it, even after a kill -9 of the daemon (recovery ends what a dead run left).
pub async fn land_as(
    ctx: &Ctx,
    p: LandPartyParams,
    run_id: Option<&str>,
) -> Result<LandResult, ApiError> {
    const OP: &str = "land_party";
    let party = PartyView::load(&ctx.store, &p.party_id)?;
    if p.test_command
        .as_deref()
        .is_some_and(|c| c.trim().is_empty())
    {
        return Err(ApiError::invalid(OP, "test_command must not be empty"));
    }
    let root = PathBuf::from(&party.row.repo_root);
    let (all, not_picked) = picked_checkouts(ctx, &party)?;
    if all.is_empty() {
        return Err(ApiError::Conflict(format!(
            "party {} has no member with a branch of its own (roles use isolation none, or none has started)",
            party.row.party_id
        )));
    }
    let one = repo_lock(&party.row.repo_root).lock_owned().await;
    let (branch, dir, wt_name) = integration(ctx, &party);
    let target = p.target.clone();
    let list: Vec<(String, String)> = all.iter().map(|c| (c.branch.clone(), c.label())).collect();
    let (git_strategy, root2, list2, branch2, synced) = (
        strategy(p.strategy),
        root.clone(),
        list.clone(),
        branch.clone(),
        all.clone(),
    );
    let dir2 = dir.clone();
    let by_queue = run_id.is_some();
    let (integrated, held) = blocking(move || {
        for c in &synced {
            sync_branch(&root2, c)?;
        }
        let _git = crate::project::git_lock();
        // A branch that never existed (the member never started its checkout) is named. A
        // branch that changes the project's Troupe config (`.troupe/`: its team, playbooks,
        // sandbox setting) is the person's to land, never the merge queue's: a member must not
        // choose the agents of the next launch.
        let mut held = std::collections::HashMap::new();
        let mut queued = Vec::new();
        for (b, label) in &list2 {
            let state = troupe_worktree::review::branch_state(&root2, b, target.as_deref())?;
            let own: Vec<String> = state
                .changed_files
                .iter()
                .filter(|f| f.starts_with(".troupe/"))
                .cloned()
                .collect();
            if by_queue && !own.is_empty() {
                held.insert(b.clone(), own);
            } else {
                queued.push((b.clone(), label.clone()));
            }
        }
        // Never over work someone did on the integration branch since the last landing.
        let marker = tip_marker(&dir2);
        let expected = std::fs::read_to_string(&marker).ok();
        git_land::check_integration(&root2, &branch2, expected.as_deref())?;
        let done = git_land::integrate(&root2, target.as_deref(), &queued, git_strategy, &branch2)?;
        if let Some(parent) = marker.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&marker, &done.tip)?;
        Ok((done, held))
    })
    .await?;
    let mut members: Vec<MemberLanding> = not_picked
        .iter()
        .map(|c| MemberLanding {
            role: c.member.role_name.clone(),
            index: c.member.instance_index,
            branch: c.branch.clone(),
            outcome: "not_picked".into(),
            commits: 0,
            conflicts: Vec::new(),
            resolver_run_id: None,
        })
        .collect();
    let mut conflicted = Vec::new();
    let mut outcomes = integrated.outcomes.iter();
    for c in &all {
        if let Some(files) = held.get(&c.branch) {
            members.push(MemberLanding {
                role: c.member.role_name.clone(),
                index: c.member.instance_index,
                branch: c.branch.clone(),
                outcome: "held_for_person".into(),
                commits: 0,
                conflicts: Vec::new(),
                resolver_run_id: None,
            });
            tell_person(
                ctx,
                &party,
                "landing_held",
                &format!(
                    "{}#{} changes the project's Troupe config ({}): the merge queue left it out; \
                     review it (get_member_diff) and land it yourself (land_party) if you agree",
                    c.member.role_name,
                    c.member.instance_index,
                    files.join(", ")
                ),
                json!({ "party_id": party.row.party_id, "role": c.member.role_name,
                        "index": c.member.instance_index, "files": files }),
            )
            .await;
            continue;
        }
        let Some((_, outcome)) = outcomes.next() else {
            break;
        };
        let (name, commits, conflicts) = match outcome {
            BranchOutcome::Integrated { commits, .. } => ("integrated", *commits, Vec::new()),
            BranchOutcome::NothingToLand => ("nothing_to_land", 0, Vec::new()),
            BranchOutcome::Conflict(files) => (
                "conflict",
                0,
                files
                    .iter()
                    .map(|f| ConflictFileView {
                        path: f.path.clone(),
                        hunks: f.hunks.clone(),
                    })
                    .collect(),
            ),
        };
        if name == "conflict" {
            conflicted.push(c.clone());
        }
        members.push(MemberLanding {
            role: c.member.role_name.clone(),
            index: c.member.instance_index,
            branch: c.branch.clone(),
            outcome: name.into(),
            commits,
            conflicts,
            resolver_run_id: None,
        });
    }
    let mut result = LandResult {
        party_id: party.row.party_id.clone(),
        target: integrated.target.clone(),
        strategy: p.strategy,
        landed: false,
        start: integrated.start.clone(),
        tip: integrated.tip.clone(),
        integration_branch: branch.clone(),
        integration_dir: None,
        members,
        test: None,
        summary: String::new(),
    };
    let integrated_any = result.members.iter().any(|m| m.outcome == "integrated");
    if !integrated_any {
        let waiting: Vec<String> = result
            .members
            .iter()
            .map(|m| format!("{}#{} ({})", m.role, m.index, m.outcome.replace('_', " ")))
            .collect();
        result.summary = format!(
            "nothing to land on {}: {}",
            result.target,
            waiting.join(", ")
        );
        if conflicted.is_empty() {
            return Err(ApiError::Conflict(format!(
                "party {}: {}; no member has commits that {} lacks",
                party.row.party_id, result.summary, result.target
            )));
        }
        report_conflicts(ctx, &party, &conflicted, &mut result, &branch, false).await;
        timeline(ctx, &party, "land_stopped", json!(&result)).await;
        return Ok(result);
    }
    // Refuse early, before the tests, when the target cannot be moved anyway.
    let (root2, target2, start2, tip2) = (
        root.clone(),
        result.target.clone(),
        result.start.clone(),
        result.tip.clone(),
    );
    blocking(move || git_land::check_target(&root2, &target2, &start2, &tip2)).await?;
    if !p.dry_run {
        // Where it stands, for whoever follows the landing (`troupe land`'s progress).
        let data = json!({ "branch": branch, "tip": result.tip, "test_command": p.test_command });
        timeline(ctx, &party, "land_integrated", data).await;
    }
    if let Some(command) = &p.test_command {
        let (root2, dir2, wt2, branch2) =
            (root.clone(), dir.clone(), wt_name.clone(), branch.clone());
        let workdir = blocking(move || {
            let _git = crate::project::git_lock();
            git_land::checkout_integration(&root2, &dir2, &wt2, &branch2)
        })
        .await?;
        result.integration_dir = Some(workdir.display().to_string());
        let secs = p
            .test_timeout_secs
            .unwrap_or(DEFAULT_TEST_SECS)
            .clamp(1, 24 * 3600);
        let marker: Vec<(String, String)> = run_id
            .map(|r| vec![("TROUPE_RUN_ID".to_string(), r.to_string())])
            .unwrap_or_default();
        let run = crate::shell::run(
            command,
            &workdir,
            &marker,
            Duration::from_secs(secs),
            TEST_OUTPUT_TAIL,
            &ctx.sandbox,
        )
        .await;
        let test = TestRun {
            command: command.clone(),
            passed: run.passed,
            exit_code: run.exit_code,
            output: run.output,
        };
        let passed = test.passed;
        if passed && !p.dry_run {
            let data = json!({ "command": command, "exit_code": test.exit_code });
            timeline(ctx, &party, "land_tests_passed", data).await;
        }
        result.test = Some(test);
        if !passed {
            result.summary = format!(
                "the tests failed on the integration branch {}; {} was not moved",
                branch, result.target
            );
            timeline(ctx, &party, "land_tests_failed", json!(&result)).await;
            tell_person(
                ctx,
                &party,
                "land_tests_failed",
                &result.summary,
                json!({ "party_id": party.row.party_id, "integration_branch": branch }),
            )
            .await;
            return Ok(result);
        }
    }
    let landed: Vec<String> = result
        .members
        .iter()
        .filter(|m| m.outcome == "integrated")
        .map(|m| format!("{}#{}", m.role, m.index))
        .collect();
    if p.dry_run {
        result.summary = format!(
            "dry run: {} would land on {} at {}",
            landed.join(", "),
            result.target,
            short(&result.tip)
        );
        return Ok(result);
    }
    // The last part runs to its end even if the caller stops waiting (a cancelled land run, a
    // dropped request): a moved target is always recorded, and its lock is held until then.
    let ctx2 = ctx.clone();
    let finish = tokio::spawn(async move {
        let _one = one;
        let (root2, target2, start2, tip2) = (
            root.clone(),
            result.target.clone(),
            result.start.clone(),
            result.tip.clone(),
        );
        blocking(move || {
            let _git = crate::project::git_lock();
            git_land::advance_target(&root2, &target2, &start2, &tip2)
        })
        .await?;
        result.landed = true;
        result.summary = format!(
            "landed {} on {} ({} → {})",
            landed.join(", "),
            result.target,
            short(&result.start),
            short(&result.tip)
        );
        if !conflicted.is_empty() {
            let left: Vec<String> = conflicted.iter().map(Checkout::label).collect();
            result
                .summary
                .push_str(&format!("; left out with conflicts: {}", left.join(", ")));
        }
        // Members it took are no longer conflicts waiting for the person (the store
        // announces the inbox's change with this event).
        timeline(&ctx2, &party, "party_landed", json!(&result)).await;
        report_conflicts(&ctx2, &party, &conflicted, &mut result, &branch, true).await;
        Ok(result)
    });
    finish
        .await
        .map_err(|e| ApiError::Internal(format!("the landing's last step failed: {e}")))?
}

/// Reports each conflicting member (see `report_conflict`); `rework`: a finished member whose
/// role recovers by restart may be started again to resolve it (only once the target moved).
async fn report_conflicts(
    ctx: &Ctx,
    party: &PartyView,
    conflicted: &[Checkout],
    result: &mut LandResult,
    integration_branch: &str,
    rework: bool,
) {
    let target = result.target.clone();
    for (c, m) in conflicted.iter().zip(
        result
            .members
            .iter_mut()
            .filter(|m| m.outcome == "conflict"),
    ) {
        m.resolver_run_id =
            report_conflict(ctx, party, c, m, &target, integration_branch, rework).await;
    }
}

fn short(id: &str) -> &str {
    &id[..id.len().min(8)]
}

/// A conflict at landing: on the timeline, to the member (files and hunks) and to the person;
/// a finished member whose role recovers by restart is started again to resolve it (its run).
async fn report_conflict(
    ctx: &Ctx,
    party: &PartyView,
    c: &Checkout,
    m: &MemberLanding,
    target: &str,
    integration_branch: &str,
    may_rework: bool,
) -> Option<String> {
    let files: Vec<&str> = m.conflicts.iter().map(|f| f.path.as_str()).collect();
    timeline(
        ctx,
        party,
        "merge_conflict",
        json!({ "role": m.role, "index": m.index, "branch": m.branch, "target": target,
                "files": files, "conflicts": m.conflicts }),
    )
    .await;
    // A clone has no integration branch of its own: it fetches it from the project.
    let merge = if c.isolation == Isolation::Clone {
        format!(
            "Fetch what was integrated before you (git fetch {} {integration_branch}) and merge it (git merge FETCH_HEAD)",
            party.row.repo_root
        )
    } else {
        format!("Merge {integration_branch} (what was integrated before you) into your branch")
    };
    let mut text = format!(
        "your branch {} conflicts with the work landed before it and was left out of the landing on {target}. Conflicting files: {}. {merge}, resolve the conflicts, commit, and say so.",
        m.branch,
        files.join(", ")
    );
    for f in &m.conflicts {
        for h in &f.hunks {
            text.push_str(&format!("\n--- {}\n{h}", f.path));
        }
    }
    let told = tell_member(ctx, party, &c.member, &text).await;
    let resolver = if told || !may_rework || !restarts(party, &c.member.role_name) {
        None
    } else {
        match rework(ctx, party, c, "resolve a merge conflict", &text).await {
            Ok(run) => Some(run),
            Err(e) => {
                tracing::warn!(party = %party.row.party_id, error = %e, "conflict resolver not started");
                None
            }
        }
    };
    let then = match &resolver {
        Some(_) => "it was started again to resolve it",
        None => "it was left out of the landing",
    };
    tell_person(
        ctx,
        party,
        "merge_conflict",
        &format!(
            "{} conflicts with the work landed before it in {}; {then}",
            c.label(),
            files.join(", ")
        ),
        json!({ "party_id": party.row.party_id, "role": m.role, "index": m.index,
                "branch": m.branch, "files": files, "resolver_run_id": resolver }),
    )
    .await;
    resolver
}

/// Whether a role's recovery restarts its members.
fn restarts(party: &PartyView, role: &str) -> bool {
    let strategy = party
        .snapshot
        .party
        .roles
        .get(role)
        .and_then(|r| r.on_crash.clone())
        .unwrap_or_else(|| party.snapshot.party.recovery.on_crash.clone());
    strategy == troupe_engine::Strategy::Restart
}

fn rework_trigger(label: &str, party_id: &str) -> String {
    format!("rework of {label} in party {party_id}")
}

/// The party's members at work again in their checkouts (`rework`): member label and run.
pub fn live_reworks(
    store: &troupe_store::Store,
    party_id: &str,
) -> Result<Vec<(String, String)>, ApiError> {
    let suffix = format!(" in party {party_id}");
    Ok(store
        .list_runs(None, None, true)?
        .into_iter()
        .filter_map(|r| {
            let who = r
                .trigger
                .as_deref()?
                .strip_prefix("rework of ")?
                .strip_suffix(suffix.as_str())?
                .to_string();
            Some((who, r.run_id))
        })
        .collect())
}

/// Starts a finished member again in its own checkout with `text` as its task (a review to
/// address, a conflict to resolve): a run of its agent outside the party's DAG, child of the
/// project's system session; its commits go on the member's branch. Its run id.
pub async fn rework(
    ctx: &Ctx,
    party: &PartyView,
    c: &Checkout,
    why: &str,
    text: &str,
) -> Result<String, ApiError> {
    if c.member.status == MemberStatus::Running {
        return Err(ApiError::Conflict(format!(
            "{} is still running: it was sent the text instead",
            c.label()
        )));
    }
    let role = party
        .snapshot
        .party
        .roles
        .get(&c.member.role_name)
        .ok_or_else(|| {
            ApiError::Internal(format!("role {} left the snapshot", c.member.role_name))
        })?;
    let mut agent = party
        .snapshot
        .agents
        .get(&role.agent)
        .cloned()
        .ok_or_else(|| ApiError::Internal(format!("agent {} left the snapshot", role.agent)))?;
    // One rework per member: claimed here until its run exists (then `live_reworks` sees it).
    static STARTING: std::sync::Mutex<std::collections::BTreeSet<String>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    struct Claim(String);
    impl Drop for Claim {
        fn drop(&mut self) {
            STARTING
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .remove(&self.0);
        }
    }
    let key = rework_trigger(&c.label(), &party.row.party_id);
    if !STARTING
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .insert(key.clone())
    {
        return Err(ApiError::Conflict(format!(
            "{} is being started again already",
            c.label()
        )));
    }
    let _claim = Claim(key);
    if let Some((_, run)) = live_reworks(&ctx.store, &party.row.party_id)?
        .into_iter()
        .find(|(who, _)| who == &c.label())
    {
        return Err(ApiError::Conflict(format!(
            "{} is already at work again (run {run}); wait for it or cancel it",
            c.label()
        )));
    }
    if agent.runner == crate::runners::land::LAND {
        return Err(ApiError::Conflict(format!(
            "{} is the merge queue: run land_party again instead",
            c.label()
        )));
    }
    // It works in the member's checkout as it is: already isolated and set up.
    agent.isolation = troupe_engine::Isolation::None;
    agent.setup.clear();
    let mut prompt = String::new();
    for part in [agent.instructions.as_deref(), role.prompt.as_deref()]
        .into_iter()
        .flatten()
    {
        prompt.push_str(part);
        prompt.push('\n');
    }
    prompt.push_str(&format!(
        "You are {} of party {} again, in your checkout on branch {}, to {why}:\n{text}\n",
        c.label(),
        party.row.name,
        c.branch
    ));
    let root = party.row.repo_root.clone();
    let project_name = Path::new(&root)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let system = ctx
        .store
        .system_session(root.clone(), project_name.clone())
        .await?;
    let (run, _) = ctx
        .store
        .create_run(troupe_store::NewRun {
            agent_name: agent.name.clone(),
            definition: serde_json::to_value(&agent)
                .map_err(|e| ApiError::Internal(e.to_string()))?,
            session: troupe_store::NewSession {
                cli: agent.runner.clone(),
                cwd: c.workdir.clone(),
                project_root: root,
                project_name,
                external_id: None,
                parent_session_id: Some(system.session_id),
                spawned_by_agent_id: None,
                party_id: None,
            },
            party: None,
            attempt: 1,
            prompt,
            task_id: None,
            timeout_ms: agent.timeout_secs.map(|s| (s * 1000.0) as i64),
            workdir: Some(c.workdir.clone()),
            trigger: Some(rework_trigger(&c.label(), &party.row.party_id)),
            flow: None,
            attach_session: None,
        })
        .await?;
    let run_id = run.run_id.clone();
    ctx.orchestrator
        .request(|reply| crate::orchestrator::Command::StartRun {
            run: Box::new(run),
            definition: Box::new(agent),
            reply,
        })
        .await?;
    timeline(
        ctx,
        party,
        "member_restarted",
        json!({ "role": c.member.role_name, "index": c.member.instance_index,
                "run_id": run_id, "why": why }),
    )
    .await;
    Ok(run_id)
}
