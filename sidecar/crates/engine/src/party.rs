//! The party state machine: given a frozen definition, the members' states and one input, decide
//! what happens next (spawn, stop, notify, finish). No IO, no clock: the caller passes `now` and
//! carries out the returned actions; the same inputs always give the same actions.

use std::collections::{BTreeMap, BTreeSet};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::spec::{NotifyTarget, PartyDefinition, Strategy};

/// A member's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum MemberStatus {
    /// Waiting for its role's dependencies.
    Pending,
    Running,
    Completed,
    /// Crashed and waiting for a signal (its role is paused).
    Crashed,
    /// Crashed; a recovery plugin is deciding (or its restart delay is running).
    Recovering,
    /// Given up on (the party failed).
    Failed,
    Cancelled,
    /// Crashed, then let go with `signal_role proceed`: counts as done.
    Skipped,
}

impl MemberStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            MemberStatus::Pending => "pending",
            MemberStatus::Running => "running",
            MemberStatus::Completed => "completed",
            MemberStatus::Crashed => "crashed",
            MemberStatus::Recovering => "recovering",
            MemberStatus::Failed => "failed",
            MemberStatus::Cancelled => "cancelled",
            MemberStatus::Skipped => "skipped",
        }
    }

    fn is_done(self) -> bool {
        matches!(self, MemberStatus::Completed | MemberStatus::Skipped)
    }
}

/// A party's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PartyStatus {
    Pending,
    Running,
    Completed,
    Failed,
    Cancelled,
}

impl PartyStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            PartyStatus::Pending => "pending",
            PartyStatus::Running => "running",
            PartyStatus::Completed => "completed",
            PartyStatus::Failed => "failed",
            PartyStatus::Cancelled => "cancelled",
        }
    }

    pub fn is_over(self) -> bool {
        matches!(
            self,
            PartyStatus::Completed | PartyStatus::Failed | PartyStatus::Cancelled
        )
    }
}

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
    #[error("role {0} is not paused")]
    NotPaused(String),
}

/// A party in progress.
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
        }
    }

    /// Applies one input; returns the actions to carry out, in order.
    pub fn step(&mut self, input: Input, now_ms: u64) -> Result<Vec<Action>, StepError> {
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
                let m = self.member_mut(&role, index)?;
                // A late report about a member we stopped or already counted changes nothing.
                if m.status != MemberStatus::Running {
                    return Ok(out);
                }
                m.status = MemberStatus::Completed;
                m.finished_at_ms = Some(now_ms);
                self.after_member_done(&role, now_ms, &mut out);
            }
            Input::Crashed {
                role,
                index,
                reason,
            } => {
                let m = self.member_mut(&role, index)?;
                if m.status != MemberStatus::Running {
                    return Ok(out);
                }
                m.crash_count += 1;
                let crashes = m.crash_count;
                let strategy = self.strategy(&role);
                let notify = self.notify_target(&role);
                let retries = self.retries(&role);
                match strategy {
                    Strategy::Plugin(plugin) => {
                        let m = self.member_mut(&role, index)?;
                        m.status = MemberStatus::Recovering;
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
                        let m = self.member_mut(&role, index)?;
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
                        let m = self.member_mut(&role, index)?;
                        m.status = MemberStatus::Crashed;
                        m.finished_at_ms = Some(now_ms);
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
                        let m = self.member_mut(&role, index)?;
                        m.status = MemberStatus::Failed;
                        m.finished_at_ms = Some(now_ms);
                        let why = format!(
                            "{role}#{index} crashed ({reason}) and its recovery strategy is abort"
                        );
                        self.end(PartyStatus::Failed, why, notify, now_ms, &mut out);
                    }
                }
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
                        for m in self.members.iter_mut().filter(|m| m.role == role) {
                            if matches!(
                                m.status,
                                MemberStatus::Crashed
                                    | MemberStatus::Failed
                                    | MemberStatus::Recovering
                            ) {
                                any = true;
                                m.status = MemberStatus::Running;
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
                        self.paused.remove(&role);
                    }
                    Signal::Proceed => {
                        if !self.paused.remove(&role) {
                            return Err(StepError::NotPaused(role));
                        }
                        for m in self.members.iter_mut().filter(|m| m.role == role) {
                            if m.status == MemberStatus::Crashed {
                                m.status = MemberStatus::Skipped;
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
                let m = self.member_mut(&role, index)?;
                // Cancelled, signalled or crashed again meanwhile: the answer is moot.
                if m.status != MemberStatus::Recovering || m.crash_count != crash_count {
                    return Ok(out);
                }
                let crashes = m.crash_count;
                let notify = self.notify_target(&role);
                match decision {
                    Decision::Restart => {
                        let m = self.member_mut(&role, index)?;
                        m.status = MemberStatus::Running;
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
                        let m = self.member_mut(&role, index)?;
                        m.status = MemberStatus::Crashed;
                        m.finished_at_ms = Some(now_ms);
                        self.paused.insert(role.clone());
                        out.push(Action::Notify {
                            target: notify,
                            text: format!(
                                "{role}#{index} crashed {crashes} times; role {role} is paused because {why}: signal_role proceed, retry or abort"
                            ),
                        });
                    }
                    Decision::Abort { why } => {
                        let m = self.member_mut(&role, index)?;
                        m.status = MemberStatus::Failed;
                        m.finished_at_ms = Some(now_ms);
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

    fn member_mut(&mut self, role: &str, index: u32) -> Result<&mut Member, StepError> {
        self.members
            .iter_mut()
            .find(|m| m.role == role && m.index == index)
            .ok_or_else(|| StepError::UnknownMember(role.to_string(), index))
    }

    fn role_done(&self, role: &str) -> bool {
        self.members
            .iter()
            .filter(|m| m.role == role)
            .all(|m| m.status.is_done())
    }

    fn after_member_done(&mut self, role: &str, now_ms: u64, out: &mut Vec<Action>) {
        if self.role_done(role) {
            out.push(Action::RoleCompleted {
                role: role.to_string(),
            });
            if self.definition.leader() != Some(role) {
                out.push(Action::Notify {
                    target: NotifyTarget::Leader,
                    text: format!("role {role} completed"),
                });
            }
        }
        self.schedule(now_ms, out);
    }

    /// Starts every instance of each role whose dependencies are all done; finishes the party
    /// when every member is done.
    fn schedule(&mut self, now_ms: u64, out: &mut Vec<Action>) {
        if self.status != PartyStatus::Running {
            return;
        }
        // One pass over the members: which roles are untouched, which are done.
        let mut untouched: BTreeMap<&str, bool> = BTreeMap::new();
        let mut done: BTreeMap<&str, bool> = BTreeMap::new();
        for m in &self.members {
            let u = untouched.entry(&m.role).or_insert(true);
            *u &= m.status == MemberStatus::Pending;
            let d = done.entry(&m.role).or_insert(true);
            *d &= m.status.is_done();
        }
        let ready: Vec<String> = self
            .definition
            .roles
            .keys()
            .filter(|role| {
                !self.paused.contains(*role)
                    && untouched.get(role.as_str()).copied().unwrap_or(false)
                    && self
                        .definition
                        .deps(role)
                        .iter()
                        .all(|dep| done.get(dep.as_str()).copied().unwrap_or(false))
            })
            .cloned()
            .collect();
        let all_done = done.values().all(|d| *d);
        let any_ready = !ready.is_empty();
        for role in ready {
            for m in self.members.iter_mut().filter(|m| m.role == role) {
                m.status = MemberStatus::Running;
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
        for m in &mut self.members {
            match m.status {
                MemberStatus::Running => {
                    m.status = MemberStatus::Cancelled;
                    m.finished_at_ms = Some(now_ms);
                    out.push(Action::Stop {
                        role: m.role.clone(),
                        index: m.index,
                    });
                }
                MemberStatus::Pending | MemberStatus::Crashed | MemberStatus::Recovering => {
                    m.status = MemberStatus::Cancelled;
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
