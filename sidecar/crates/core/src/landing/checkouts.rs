//! A party's checkouts: which members have one, in DAG order, and what each changed (measured
//! against the target); a member's branch kept in step with its checkout.

use std::path::Path;

use troupe_api::ApiError;
use troupe_api::types::*;
use troupe_engine::Isolation;
use troupe_store::MemberRow;
use troupe_worktree::WorktreeError;
use troupe_worktree::land::{self as git_land};

use crate::collab::PartyView;

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

/// What a member's checkout is, read from the checkout itself: a clone (a repository of its
/// own: `.git` is a directory) or a linked worktree (`.git` is a file); when it is gone, the data
/// dir's folder it was made in (`clones/`, `worktrees/`). A sandboxed member whose definition
/// asks for a worktree gets a clone (`orchestrator::carried_out`), and a checkout outlives the
/// daemon, and the setting, that made it: the definition (`defined`) has the last word only
/// where the checkout says nothing.
pub fn kind_of(workdir: &Path, defined: Isolation) -> Isolation {
    if troupe_worktree::is_own_repo(workdir) {
        return Isolation::Clone;
    }
    if std::fs::symlink_metadata(workdir.join(".git")).is_ok() {
        return Isolation::Worktree;
    }
    let made_in = workdir
        .parent()
        .and_then(Path::parent)
        .and_then(Path::file_name);
    match made_in.and_then(|n| n.to_str()) {
        Some("clones") => Isolation::Clone,
        Some("worktrees") => Isolation::Worktree,
        _ => defined,
    }
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
                    isolation: kind_of(Path::new(workdir), isolation),
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
