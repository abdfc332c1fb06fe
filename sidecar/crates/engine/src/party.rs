//! The party state machine: given a frozen definition, the members' states and one input, decide
//! what happens next (spawn, stop, notify, finish). No IO, no clock: the caller passes `now` and
//! carries out the returned actions; the same inputs always give the same actions. A crash
//! under a `plugin:<name>` recovery strategy leaves the member `recovering` until the plugin's
//! answer comes back as an input (`ConsultRecovery`, then `RecoveryDecided`).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::spec::{NotifyTarget, PartyDefinition, Strategy};

pub use troupe_model::{MemberStatus, PartyStatus};

/// One member (an instance of a role).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    pub role: String,
    pub index: u32,
    pub status: MemberStatus,
    pub crash_count: u32,
    /// How many times it has been spawned.
    pub attempts: u32,
    pub started_at_ms: Option<u64>,
    pub finished_at_ms: Option<u64>,
}

/// The leader's signals to a role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Signal {
    /// Let a paused role go on: its crashed members count as done.
    Proceed,
    /// Spawn the role's crashed members again.
    Retry,
    /// Abort the whole party.
    Abort,
}

/// What happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    Launch,
    Completed {
        role: String,
        index: u32,
    },
    Crashed {
        role: String,
        index: u32,
        reason: String,
    },
    /// A member's run was stopped by its budget: it pauses (no crash is counted).
    BudgetTripped {
        role: String,
        index: u32,
        reason: String,
    },
    Signal {
        role: String,
        signal: Signal,
    },
    OverrideRecovery {
        role: String,
        strategy: Strategy,
    },
    /// A recovery plugin's answer about a member's crash number `crash_count` (a restart's
    /// delay has already passed). An answer about an earlier crash is ignored.
    RecoveryDecided {
        role: String,
        index: u32,
        crash_count: u32,
        decision: Decision,
    },
    Cancel,
}

/// What a recovery plugin decided (or the fallback when it failed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Restart,
    Pause { notify: NotifyTarget, why: String },
    Abort { why: String },
}

/// What the caller must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Start a member (again, when `attempt` > 1).
    Spawn {
        role: String,
        index: u32,
        attempt: u32,
    },
    /// Stop a running member.
    Stop {
        role: String,
        index: u32,
    },
    Notify {
        target: NotifyTarget,
        text: String,
    },
    /// Ask recovery plugin `plugin` about this crash, then feed back `RecoveryDecided`.
    ConsultRecovery {
        role: String,
        index: u32,
        plugin: String,
        crash_count: u32,
        retry_limit: u32,
        reason: String,
    },
    /// Every instance of a role is done.
    RoleCompleted {
        role: String,
    },
    Finished {
        status: PartyStatus,
        reason: String,
    },
}

/// An input that does not apply to the party's state.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StepError {
    #[error("the party has no role {0:?}")]
    UnknownRole(String),
    #[error("the party has no member {0}#{1}")]
    UnknownMember(String, u32),
    #[error("the party is already {}", .0.as_str())]
    Over(PartyStatus),
    #[error("the party was already launched")]
    AlreadyLaunched,
    #[error("role {0} has no crashed members to retry")]
    NothingToRetry(String),
    #[error("role {0} is neither paused nor waiting for a signal")]
    NotPaused(String),
}

/// A party in progress.
///
/// `members` may be replaced wholesale (a party restored from the store) before a step; after
/// that only `step` changes members, roles' dependencies and pauses, because `step` keeps an
/// index of them (see `Index`) so that its cost does not grow with the number of roles.
#[derive(Debug, Clone, PartialEq)]
pub struct Party {
    pub definition: PartyDefinition,
    pub status: PartyStatus,
    /// Sorted by (role, index).
    pub members: Vec<Member>,
    /// Recovery strategies set at run time (`override_recovery`).
    pub overrides: BTreeMap<String, Strategy>,
    /// Roles not scheduled until signalled.
    pub paused: BTreeSet<String>,
    /// Roles a `proceed` signal released from their `role:signal` flow edges.
    pub released: BTreeSet<String>,
    index: Cache,
}

/// Derived from `definition` and `members`: where each member is and how each role stands.
#[derive(Debug, Clone)]
struct Index {
    /// The `members` Vec it was built for (address, length): a replaced Vec is indexed again.
    built_for: (usize, usize),
    /// Role name → id. Ids follow name order over every role named by the definition, its
    /// flow or a member.
    ids: HashMap<String, usize>,
    roles: Vec<RoleState>,
    /// (role id, instance index) → position in `members`.
    positions: HashMap<(usize, u32), usize>,
    /// Each member's role id, by position.
    role_of: Vec<usize>,
    leader: Option<String>,
    /// Roles that have members, and how many of them have every member done.
    with_members: usize,
    done: usize,
    /// Roles whose readiness may have changed since the last `schedule` (`None`: all of
    /// them). Between two schedules of a running party no other role can become ready.
    candidates: Option<BTreeSet<usize>>,
    /// Members changed by the step in progress, with their value before it.
    touched: Vec<(usize, Member)>,
    is_touched: Vec<bool>,
    /// Positions of the members the last step changed, in member order.
    changed: Vec<usize>,
}

#[derive(Debug, Clone, Default)]
struct RoleState {
    name: String,
    /// In the definition (only those are ever scheduled).
    defined: bool,
    /// Positions in `members`, in member order.
    members: Vec<usize>,
    pending: usize,
    done: usize,
    deps: Vec<usize>,
    /// Roles it waits for a signal from (`role:signal`), or for their completion.
    signal_deps: Vec<usize>,
    dependents: Vec<usize>,
}

impl RoleState {
    /// No member has started yet.
    fn untouched(&self) -> bool {
        !self.members.is_empty() && self.pending == self.members.len()
    }

    fn is_done(&self) -> bool {
        !self.members.is_empty() && self.done == self.members.len()
    }
}

impl Default for Index {
    /// Fits no `members` Vec: built on first use.
    fn default() -> Index {
        Index {
            built_for: (0, usize::MAX),
            ids: HashMap::new(),
            roles: Vec::new(),
            positions: HashMap::new(),
            role_of: Vec::new(),
            leader: None,
            with_members: 0,
            done: 0,
            candidates: None,
            touched: Vec::new(),
            is_touched: Vec::new(),
            changed: Vec::new(),
        }
    }
}

impl Index {
    fn build(definition: &PartyDefinition, members: &[Member]) -> Index {
        let mut names: BTreeSet<&str> = definition.roles.keys().map(String::as_str).collect();
        for (role, deps) in &definition.flow {
            names.insert(role);
            names.extend(
                deps.iter()
                    .map(|d| crate::spec::flow_edge(d).map_or(d.as_str(), |(n, _)| n)),
            );
        }
        names.extend(members.iter().map(|m| m.role.as_str()));
        let ids: HashMap<String, usize> = names
            .iter()
            .enumerate()
            .map(|(id, name)| (name.to_string(), id))
            .collect();
        let mut roles: Vec<RoleState> = names
            .iter()
            .map(|name| RoleState {
                name: name.to_string(),
                defined: definition.roles.contains_key(*name),
                ..RoleState::default()
            })
            .collect();
        for role in &mut roles {
            for dep in definition.deps(&role.name) {
                let Some((name, signal)) = crate::spec::flow_edge(dep) else {
                    continue;
                };
                if let Some(id) = ids.get(name).copied() {
                    if signal {
                        role.signal_deps.push(id);
                    } else {
                        role.deps.push(id);
                    }
                }
            }
        }
        for id in 0..roles.len() {
            let all: Vec<usize> = roles[id]
                .deps
                .iter()
                .chain(&roles[id].signal_deps)
                .copied()
                .collect();
            for dep in all {
                roles[dep].dependents.push(id);
            }
        }
        let mut positions = HashMap::with_capacity(members.len());
        let mut role_of = Vec::with_capacity(members.len());
        for (pos, m) in members.iter().enumerate() {
            let id = ids[&m.role];
            role_of.push(id);
            positions.entry((id, m.index)).or_insert(pos);
            let role = &mut roles[id];
            role.members.push(pos);
            role.pending += usize::from(m.status == MemberStatus::Pending);
            role.done += usize::from(m.status.is_done());
        }
        Index {
            built_for: (members.as_ptr() as usize, members.len()),
            leader: definition.leader().map(str::to_string),
            with_members: roles.iter().filter(|r| !r.members.is_empty()).count(),
            done: roles.iter().filter(|r| r.is_done()).count(),
            ids,
            roles,
            positions,
            role_of,
            candidates: None,
            touched: Vec::new(),
            is_touched: vec![false; members.len()],
            changed: Vec::new(),
        }
    }

    fn fits(&self, members: &[Member]) -> bool {
        self.built_for == (members.as_ptr() as usize, members.len())
    }

    fn position(&self, role: &str, index: u32) -> Option<usize> {
        let id = *self.ids.get(role)?;
        self.positions.get(&(id, index)).copied()
    }

    fn mark_candidate(&mut self, id: usize) {
        if let Some(c) = &mut self.candidates {
            c.insert(id);
        }
    }
}

/// The index, left out of comparisons (it is derived data).
#[derive(Clone, Default)]
struct Cache(Box<Index>);

impl PartialEq for Cache {
    fn eq(&self, _: &Cache) -> bool {
        true
    }
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("..")
    }
}

impl Party {
    /// A new, not yet launched party with every member pending.
    pub fn new(definition: PartyDefinition) -> Party {
        let members = definition
            .roles
            .iter()
            .flat_map(|(role, r)| {
                (0..r.count).map(move |index| Member {
                    role: role.clone(),
                    index,
                    status: MemberStatus::Pending,
                    crash_count: 0,
                    attempts: 0,
                    started_at_ms: None,
                    finished_at_ms: None,
                })
            })
            .collect();
        Party {
            definition,
            status: PartyStatus::Pending,
            members,
            overrides: BTreeMap::new(),
            paused: BTreeSet::new(),
            released: BTreeSet::new(),
            index: Cache::default(),
        }
    }

    /// Applies one input; returns the actions to carry out, in order. Its cost depends on the
    /// members it changes, not on how many roles or members the party has.
    pub fn step(&mut self, input: Input, now_ms: u64) -> Result<Vec<Action>, StepError> {
        self.index_mut();
        let result = self.apply(input, now_ms);
        self.settle_changes();
        result
    }

    /// The members the last `step` changed, in member order.
    pub fn changed_members(&self) -> impl Iterator<Item = &Member> {
        self.index
            .0
            .changed
            .iter()
            .filter_map(|pos| self.members.get(*pos))
    }

    /// One member, if the party has it.
    pub fn member(&self, role: &str, index: u32) -> Option<&Member> {
        let index_ = &self.index.0;
        if index_.fits(&self.members) {
            return index_.position(role, index).map(|p| &self.members[p]);
        }
        self.members
            .iter()
            .find(|m| m.role == role && m.index == index)
    }

    fn apply(&mut self, input: Input, now_ms: u64) -> Result<Vec<Action>, StepError> {
        let mut out = Vec::new();
        match input {
            Input::Launch => {
                if self.status != PartyStatus::Pending {
                    return Err(StepError::AlreadyLaunched);
                }
                self.status = PartyStatus::Running;
                self.schedule(now_ms, &mut out);
            }
            Input::Completed { role, index } => {
                let pos = self.position(&role, index)?;
                // A late report about a member we stopped or already counted changes nothing.
                if self.members[pos].status != MemberStatus::Running {
                    return Ok(out);
                }
                self.set_status(pos, MemberStatus::Completed);
                self.touch(pos).finished_at_ms = Some(now_ms);
                self.after_member_done(&role, now_ms, &mut out);
            }
            Input::Crashed {
                role,
                index,
                reason,
            } => {
                let pos = self.position(&role, index)?;
                if self.members[pos].status != MemberStatus::Running {
                    return Ok(out);
                }
                let m = self.touch(pos);
                m.crash_count += 1;
                let crashes = m.crash_count;
                let strategy = self.strategy(&role);
                let notify = self.notify_target(&role);
                let retries = self.retries(&role);
                match strategy {
                    Strategy::Plugin(plugin) => {
                        self.set_status(pos, MemberStatus::Recovering);
                        out.push(Action::ConsultRecovery {
                            role,
                            index,
                            plugin,
                            crash_count: crashes,
                            retry_limit: retries,
                            reason,
                        });
                    }
                    Strategy::Restart if crashes <= retries => {
                        let m = self.touch(pos);
                        m.attempts += 1;
                        m.started_at_ms = Some(now_ms);
                        let attempt = m.attempts;
                        out.push(Action::Notify {
                            target: notify,
                            text: format!(
                                "{role}#{index} crashed ({reason}); restarting it (retry {crashes} of {retries})"
                            ),
                        });
                        out.push(Action::Spawn {
                            role,
                            index,
                            attempt,
                        });
                    }
                    Strategy::Restart | Strategy::Pause => {
                        self.set_status(pos, MemberStatus::Crashed);
                        self.touch(pos).finished_at_ms = Some(now_ms);
                        self.paused.insert(role.clone());
                        let why = if strategy == Strategy::Restart {
                            format!("it crashed {crashes} times, the retry limit is {retries}")
                        } else {
                            "its recovery strategy is pause".to_string()
                        };
                        out.push(Action::Notify {
                            target: notify,
                            text: format!(
                                "{role}#{index} crashed ({reason}); role {role} is paused because {why}: signal_role proceed, retry or abort"
                            ),
                        });
                    }
                    Strategy::Abort => {
                        self.set_status(pos, MemberStatus::Failed);
                        self.touch(pos).finished_at_ms = Some(now_ms);
                        let why = format!(
                            "{role}#{index} crashed ({reason}) and its recovery strategy is abort"
                        );
                        self.end(PartyStatus::Failed, why, notify, now_ms, &mut out);
                    }
                }
            }
            Input::BudgetTripped {
                role,
                index,
                reason,
            } => {
                let pos = self.position(&role, index)?;
                if self.members[pos].status != MemberStatus::Running {
                    return Ok(out);
                }
                self.set_status(pos, MemberStatus::Paused);
                self.touch(pos).finished_at_ms = Some(now_ms);
                self.paused.insert(role.clone());
                let text = format!(
                    "{role}#{index} was stopped by its budget ({reason}); role {role} is paused: \
                     signal_role retry, proceed or abort"
                );
                out.push(Action::Notify {
                    target: NotifyTarget::Leader,
                    text: text.clone(),
                });
                out.push(Action::Notify {
                    target: NotifyTarget::User,
                    text,
                });
            }
            Input::Signal { role, signal } => {
                self.check_live()?;
                self.check_role(&role)?;
                match signal {
                    Signal::Abort => {
                        let notify = self.notify_target(&role);
                        self.end(
                            PartyStatus::Failed,
                            format!("aborted by a signal to role {role}"),
                            notify,
                            now_ms,
                            &mut out,
                        );
                    }
                    Signal::Retry => {
                        let mut any = false;
                        for pos in self.role_members(&role) {
                            if matches!(
                                self.members[pos].status,
                                MemberStatus::Crashed
                                    | MemberStatus::Failed
                                    | MemberStatus::Recovering
                                    | MemberStatus::Paused
                            ) {
                                any = true;
                                self.set_status(pos, MemberStatus::Running);
                                let m = self.touch(pos);
                                m.attempts += 1;
                                m.started_at_ms = Some(now_ms);
                                m.finished_at_ms = None;
                                out.push(Action::Spawn {
                                    role: role.clone(),
                                    index: m.index,
                                    attempt: m.attempts,
                                });
                            }
                        }
                        if !any {
                            return Err(StepError::NothingToRetry(role));
                        }
                        self.unpause(&role);
                    }
                    Signal::Proceed if !self.paused.contains(&role) => {
                        // A role waiting on a `role:signal` edge is released.
                        if !self.waits_for_signal(&role) {
                            return Err(StepError::NotPaused(role));
                        }
                        self.released.insert(role.clone());
                        let index = self.index_mut();
                        if let Some(id) = index.ids.get(&role).copied() {
                            index.mark_candidate(id);
                        }
                        self.schedule(now_ms, &mut out);
                    }
                    Signal::Proceed => {
                        if !self.unpause(&role) {
                            return Err(StepError::NotPaused(role));
                        }
                        for pos in self.role_members(&role) {
                            if matches!(
                                self.members[pos].status,
                                MemberStatus::Crashed | MemberStatus::Paused
                            ) {
                                self.set_status(pos, MemberStatus::Skipped);
                            }
                        }
                        self.after_member_done(&role, now_ms, &mut out);
                    }
                }
            }
            Input::OverrideRecovery { role, strategy } => {
                self.check_live()?;
                self.check_role(&role)?;
                self.overrides.insert(role, strategy);
            }
            Input::RecoveryDecided {
                role,
                index,
                crash_count,
                decision,
            } => {
                let pos = self.position(&role, index)?;
                let m = &self.members[pos];
                // Cancelled, signalled or crashed again meanwhile: the answer is moot.
                if m.status != MemberStatus::Recovering || m.crash_count != crash_count {
                    return Ok(out);
                }
                let crashes = m.crash_count;
                let notify = self.notify_target(&role);
                match decision {
                    Decision::Restart => {
                        self.set_status(pos, MemberStatus::Running);
                        let m = self.touch(pos);
                        m.attempts += 1;
                        m.started_at_ms = Some(now_ms);
                        m.finished_at_ms = None;
                        let attempt = m.attempts;
                        out.push(Action::Notify {
                            target: notify,
                            text: format!(
                                "{role}#{index} crashed; its recovery plugin restarts it (crash {crashes})"
                            ),
                        });
                        out.push(Action::Spawn {
                            role,
                            index,
                            attempt,
                        });
                    }
                    Decision::Pause { notify, why } => {
                        self.set_status(pos, MemberStatus::Crashed);
                        self.touch(pos).finished_at_ms = Some(now_ms);
                        self.paused.insert(role.clone());
                        out.push(Action::Notify {
                            target: notify,
                            text: format!(
                                "{role}#{index} crashed {crashes} times; role {role} is paused because {why}: signal_role proceed, retry or abort"
                            ),
                        });
                    }
                    Decision::Abort { why } => {
                        self.set_status(pos, MemberStatus::Failed);
                        self.touch(pos).finished_at_ms = Some(now_ms);
                        let why = format!("{role}#{index} crashed and {why}");
                        self.end(PartyStatus::Failed, why, notify, now_ms, &mut out);
                    }
                }
            }
            Input::Cancel => {
                self.check_live()?;
                let notify = self.definition.recovery.notify;
                self.end(
                    PartyStatus::Cancelled,
                    "cancelled".into(),
                    notify,
                    now_ms,
                    &mut out,
                );
            }
        }
        Ok(out)
    }

    /// The strategy in force for `role`: run-time override, else the role's, else the party's.
    pub fn strategy(&self, role: &str) -> Strategy {
        self.overrides
            .get(role)
            .cloned()
            .or_else(|| {
                self.definition
                    .roles
                    .get(role)
                    .and_then(|r| r.on_crash.clone())
            })
            .unwrap_or_else(|| self.definition.recovery.on_crash.clone())
    }

    fn notify_target(&self, role: &str) -> NotifyTarget {
        self.definition
            .roles
            .get(role)
            .and_then(|r| r.notify)
            .unwrap_or(self.definition.recovery.notify)
    }

    fn retries(&self, role: &str) -> u32 {
        self.definition
            .roles
            .get(role)
            .and_then(|r| r.retry_attempts)
            .unwrap_or(self.definition.recovery.max_retries)
    }

    fn check_live(&self) -> Result<(), StepError> {
        if self.status.is_over() {
            return Err(StepError::Over(self.status));
        }
        Ok(())
    }

    fn check_role(&self, role: &str) -> Result<(), StepError> {
        if self.definition.roles.contains_key(role) {
            Ok(())
        } else {
            Err(StepError::UnknownRole(role.to_string()))
        }
    }

    /// The index, (re)built if `members` was replaced since it was built.
    fn index_mut(&mut self) -> &mut Index {
        if !self.index.0.fits(&self.members) {
            *self.index.0 = Index::build(&self.definition, &self.members);
        }
        &mut self.index.0
    }

    fn position(&mut self, role: &str, index: u32) -> Result<usize, StepError> {
        self.index_mut()
            .position(role, index)
            .ok_or_else(|| StepError::UnknownMember(role.to_string(), index))
    }

    /// Positions of `role`'s members, in member order.
    fn role_members(&mut self, role: &str) -> Vec<usize> {
        let index = self.index_mut();
        match index.ids.get(role) {
            Some(id) => index.roles[*id].members.clone(),
            None => Vec::new(),
        }
    }

    /// A member about to change: its value before the step is kept for `changed_members`.
    fn touch(&mut self, pos: usize) -> &mut Member {
        self.index_mut();
        let index = &mut self.index.0;
        if !index.is_touched[pos] {
            index.is_touched[pos] = true;
            index.touched.push((pos, self.members[pos].clone()));
        }
        &mut self.members[pos]
    }

    /// Changes a member's status, keeping its role's counts and the roles to look at next.
    fn set_status(&mut self, pos: usize, status: MemberStatus) {
        let old = self.touch(pos).status;
        if old == status {
            return;
        }
        self.members[pos].status = status;
        let index = self.index_mut();
        let id = index.role_of[pos];
        let role = &mut index.roles[id];
        let (was_done, was_untouched) = (role.is_done(), role.untouched());
        role.pending = role.pending + usize::from(status == MemberStatus::Pending)
            - usize::from(old == MemberStatus::Pending);
        role.done = role.done + usize::from(status.is_done()) - usize::from(old.is_done());
        let (is_done, is_untouched) = (role.is_done(), role.untouched());
        if is_done != was_done {
            if is_done {
                index.done += 1;
                for k in 0..index.roles[id].dependents.len() {
                    let dependent = index.roles[id].dependents[k];
                    index.mark_candidate(dependent);
                }
            } else {
                index.done -= 1;
            }
        }
        if is_untouched && !was_untouched {
            index.mark_candidate(id);
        }
    }

    /// Whether `role` has not started and waits on a `role:signal` edge not yet satisfied.
    fn waits_for_signal(&mut self, role: &str) -> bool {
        if self.released.contains(role) {
            return false;
        }
        let index = self.index_mut();
        let Some(id) = index.ids.get(role).copied() else {
            return false;
        };
        let r = &index.roles[id];
        r.untouched() && r.signal_deps.iter().any(|dep| !index.roles[*dep].is_done())
    }

    /// Lets a paused role go; false when it was not paused.
    fn unpause(&mut self, role: &str) -> bool {
        if !self.paused.remove(role) {
            return false;
        }
        let index = self.index_mut();
        if let Some(id) = index.ids.get(role).copied() {
            index.mark_candidate(id);
        }
        true
    }

    /// Ends a step: which members it changed (and really differ), in member order.
    fn settle_changes(&mut self) {
        let index = &mut self.index.0;
        let mut changed: Vec<usize> = Vec::with_capacity(index.touched.len());
        for (pos, before) in index.touched.drain(..) {
            index.is_touched[pos] = false;
            if self.members[pos] != before {
                changed.push(pos);
            }
        }
        changed.sort_unstable();
        index.changed = changed;
    }

    fn role_done(&mut self, role: &str) -> bool {
        let index = self.index_mut();
        index
            .ids
            .get(role)
            .is_some_and(|id| index.roles[*id].is_done())
    }

    fn after_member_done(&mut self, role: &str, now_ms: u64, out: &mut Vec<Action>) {
        if self.role_done(role) {
            out.push(Action::RoleCompleted {
                role: role.to_string(),
            });
            if self.index_mut().leader.as_deref() != Some(role) {
                out.push(Action::Notify {
                    target: NotifyTarget::Leader,
                    text: format!("role {role} completed"),
                });
            }
        }
        self.schedule(now_ms, out);
    }

    /// Starts every instance of each role whose dependencies are all done; finishes the party
    /// when every member is done. Looks only at the roles whose readiness may have changed
    /// since the last time (every role, the first time).
    fn schedule(&mut self, now_ms: u64, out: &mut Vec<Action>) {
        if self.status != PartyStatus::Running {
            return;
        }
        let index = self.index_mut();
        let candidates: Vec<usize> = match index.candidates.replace(BTreeSet::new()) {
            Some(c) => c.into_iter().collect(),
            None => (0..index.roles.len()).collect(),
        };
        let index = &self.index.0;
        let ready: Vec<usize> = candidates
            .into_iter()
            .filter(|id| {
                let r = &index.roles[*id];
                r.defined
                    && !self.paused.contains(&r.name)
                    && r.untouched()
                    && r.deps.iter().all(|dep| index.roles[*dep].is_done())
                    && (self.released.contains(&r.name)
                        || r.signal_deps.iter().all(|dep| index.roles[*dep].is_done()))
            })
            .collect();
        let all_done = index.done == index.with_members;
        let any_ready = !ready.is_empty();
        for id in ready {
            let r = &self.index.0.roles[id];
            let (role, positions) = (r.name.clone(), r.members.clone());
            for pos in positions {
                self.set_status(pos, MemberStatus::Running);
                let m = self.touch(pos);
                m.attempts += 1;
                m.started_at_ms = Some(now_ms);
                out.push(Action::Spawn {
                    role: role.clone(),
                    index: m.index,
                    attempt: m.attempts,
                });
            }
        }
        if all_done && !any_ready {
            self.status = PartyStatus::Completed;
            out.push(Action::Finished {
                status: PartyStatus::Completed,
                reason: "every role completed".into(),
            });
        }
    }

    /// Stops every running member and ends the party.
    fn end(
        &mut self,
        status: PartyStatus,
        reason: String,
        notify: NotifyTarget,
        now_ms: u64,
        out: &mut Vec<Action>,
    ) {
        for pos in 0..self.members.len() {
            match self.members[pos].status {
                MemberStatus::Running => {
                    self.set_status(pos, MemberStatus::Cancelled);
                    let m = self.touch(pos);
                    m.finished_at_ms = Some(now_ms);
                    out.push(Action::Stop {
                        role: m.role.clone(),
                        index: m.index,
                    });
                }
                MemberStatus::Pending
                | MemberStatus::Crashed
                | MemberStatus::Recovering
                | MemberStatus::Paused => {
                    self.set_status(pos, MemberStatus::Cancelled);
                }
                _ => {}
            }
        }
        self.status = status;
        out.push(Action::Notify {
            target: notify,
            text: format!(
                "party {} {}: {reason}",
                self.definition.name,
                status.as_str()
            ),
        });
        out.push(Action::Finished { status, reason });
    }
}
