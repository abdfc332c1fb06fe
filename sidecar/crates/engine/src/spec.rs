//! Party definitions (the seed's schema: roles, a dependency `flow`, party-wide `recovery`) and
//! their validation on write. Pure data; whether an agent definition exists is asked of the
//! caller. Validation: the flow is a DAG (petgraph's Tarjan SCCs; a cycle is named in order), at
//! most one leader, counts of at least 1, safe names. A flow edge is `role`, or `role:signal`
//! for a role released by a `proceed` signal instead of that role's completion.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What to do when a member crashes (shared with the store, which keeps a party's overrides).
pub use troupe_model::Strategy;

/// Who hears about a pause or a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum NotifyTarget {
    Leader,
    User,
    Party,
}

/// One role of a party.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RoleDefinition {
    /// The agent definition members of this role run (it decides runner and isolation).
    pub agent: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<String>,
    /// Instances run in parallel (default 1).
    #[serde(default = "one")]
    pub count: u32,
    #[serde(default)]
    pub is_leader: bool,
    /// Overrides the party-wide `recovery.on_crash`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_crash: Option<Strategy>,
    /// Overrides the party-wide `recovery.max_retries`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_attempts: Option<u32>,
    /// Overrides the party-wide `recovery.notify`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notify: Option<NotifyTarget>,
    /// Extra instructions given to this role's members.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// The playbook its members are given (`playbooks/<name>.md`, or the project's
    /// `.troupe/playbooks/<name>.md`; `none` for none). Default: `leader` for the leader,
    /// `reviewer` for a role whose name says review, `developer` for the others.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub playbook: Option<String>,
    /// Changes to its agent for this role (model, runner, isolation, timeout, budget, tool
    /// policy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overrides: Option<crate::agent::AgentOverrides>,
    /// Best of N: the `count` members are attempts at the same task, each in its own checkout;
    /// one is picked (by `judge`, or by the person) and only its branch is landed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pick: Option<PickSpec>,
    /// Run this role's members on the remote workers of this pool (overrides the agent's own
    /// `pool`; the agent must be a process runner in its own checkout).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
}

/// Who picks the best of a role's attempts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PickSpec {
    /// An agent definition that compares the attempts and calls `pick_member`; none: the person
    /// picks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judge: Option<String>,
}

fn one() -> u32 {
    1
}

/// Party-wide recovery defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RecoveryConfig {
    #[serde(default = "default_strategy")]
    pub on_crash: Strategy,
    #[serde(default = "default_notify")]
    pub notify: NotifyTarget,
    #[serde(default = "default_retries")]
    pub max_retries: u32,
}

fn default_strategy() -> Strategy {
    Strategy::Pause
}
fn default_notify() -> NotifyTarget {
    NotifyTarget::Leader
}
fn default_retries() -> u32 {
    2
}

impl Default for RecoveryConfig {
    fn default() -> Self {
        RecoveryConfig {
            on_crash: default_strategy(),
            notify: default_notify(),
            max_retries: default_retries(),
        }
    }
}

/// A party definition: roles, the dependency DAG between them, recovery defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PartyDefinition {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub roles: BTreeMap<String, RoleDefinition>,
    /// role → the roles it waits for (all their instances). Roles absent here have none. An
    /// edge `"leader:signal"` waits for a signal instead (`signal_role {role, signal: proceed}`
    /// while the leader runs) — or for the leader's completion, whichever comes first.
    #[serde(default)]
    pub flow: BTreeMap<String, Vec<String>>,
    #[serde(default)]
    pub recovery: RecoveryConfig,
}

/// Why a party definition was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("the party has no roles")]
    NoRoles,
    #[error("party name {0:?} is not allowed (use letters, digits, '-' and '_')")]
    BadName(String),
    #[error("role name {0:?} is not allowed (use letters, digits, '-' and '_')")]
    BadRoleName(String),
    #[error("role {role} uses agent definition {agent:?}, which does not exist")]
    UnknownAgent { role: String, agent: String },
    #[error("role {0} has count 0; it must be at least 1")]
    ZeroCount(String),
    #[error("role {0} picks the best of its attempts, so its count must be at least 2")]
    PickNeedsAttempts(String),
    #[error("role {role}'s judge is agent definition {agent:?}, which does not exist")]
    UnknownJudge { role: String, agent: String },
    #[error("roles {0} and {1} are both leaders; a party has at most one")]
    TwoLeaders(String, String),
    #[error("flow names role {0:?}, which the party does not define")]
    UnknownFlowRole(String),
    #[error(
        "flow edge {0:?}: write a role's name (wait for its completion) or role:signal (wait for a signal)"
    )]
    BadFlowEdge(String),
    #[error("the flow has a cycle: {}", .0.join(" -> "))]
    Cycle(Vec<String>),
    #[error("role {0}'s playbook {1:?} is not a playbook name (use letters, digits, '-' and '_')")]
    BadPlaybook(String, String),
}

/// A flow edge: the role it names, and whether it waits for a signal (`role:signal`) rather
/// than the role's completion. `None`: not an edge.
pub fn flow_edge(dep: &str) -> Option<(&str, bool)> {
    match dep.split_once(':') {
        None => Some((dep, false)),
        Some((name, "signal")) => Some((name, true)),
        Some(_) => None,
    }
}

pub use crate::names::is_safe_name;

impl PartyDefinition {
    /// Checks the definition; `agent_exists` says whether an agent definition exists.
    pub fn validate(&self, mut agent_exists: impl FnMut(&str) -> bool) -> Result<(), SpecError> {
        if !is_safe_name(&self.name) {
            return Err(SpecError::BadName(self.name.clone()));
        }
        if self.roles.is_empty() {
            return Err(SpecError::NoRoles);
        }
        let mut leader: Option<&str> = None;
        for (name, role) in &self.roles {
            if !is_safe_name(name) {
                return Err(SpecError::BadRoleName(name.clone()));
            }
            if role.count == 0 {
                return Err(SpecError::ZeroCount(name.clone()));
            }
            if let Some(playbook) = &role.playbook
                && !is_safe_name(playbook)
            {
                return Err(SpecError::BadPlaybook(name.clone(), playbook.clone()));
            }
            if !agent_exists(&role.agent) {
                return Err(SpecError::UnknownAgent {
                    role: name.clone(),
                    agent: role.agent.clone(),
                });
            }
            if let Some(pick) = &role.pick {
                if role.count < 2 {
                    return Err(SpecError::PickNeedsAttempts(name.clone()));
                }
                if let Some(judge) = &pick.judge
                    && !agent_exists(judge)
                {
                    return Err(SpecError::UnknownJudge {
                        role: name.clone(),
                        agent: judge.clone(),
                    });
                }
            }
            if role.is_leader {
                if let Some(first) = leader {
                    return Err(SpecError::TwoLeaders(first.to_string(), name.clone()));
                }
                leader = Some(name);
            }
        }
        for (role, deps) in &self.flow {
            if !self.roles.contains_key(role) {
                return Err(SpecError::UnknownFlowRole(role.clone()));
            }
            for dep in deps {
                let (name, _) =
                    flow_edge(dep).ok_or_else(|| SpecError::BadFlowEdge(dep.clone()))?;
                if !self.roles.contains_key(name) {
                    return Err(SpecError::UnknownFlowRole(name.to_string()));
                }
            }
        }
        if let Some(cycle) = self.find_cycle() {
            return Err(SpecError::Cycle(cycle));
        }
        Ok(())
    }

    /// The roles `role` waits for.
    pub fn deps(&self, role: &str) -> &[String] {
        self.flow.get(role).map_or(&[], Vec::as_slice)
    }

    /// The leader role, if any.
    pub fn leader(&self) -> Option<&str> {
        self.roles
            .iter()
            .find(|(_, r)| r.is_leader)
            .map(|(n, _)| n.as_str())
    }

    /// A cycle in the flow, named role by role and closed (`a -> b -> a`), if there is one.
    fn find_cycle(&self) -> Option<Vec<String>> {
        use petgraph::graph::DiGraph;
        let mut graph = DiGraph::<&str, ()>::new();
        let nodes: BTreeMap<&str, _> = self
            .roles
            .keys()
            .map(|r| (r.as_str(), graph.add_node(r.as_str())))
            .collect();
        for (role, deps) in &self.flow {
            for dep in deps {
                let dep = flow_edge(dep).map_or(dep.as_str(), |(name, _)| name);
                if let (Some(&a), Some(&b)) = (nodes.get(dep), nodes.get(role.as_str())) {
                    graph.add_edge(a, b, ());
                }
            }
        }
        // Tarjan's SCCs: any component with more than one node (or a self-loop) is a cycle.
        for scc in petgraph::algo::tarjan_scc(&graph) {
            let is_cycle = scc.len() > 1 || graph.contains_edge(scc[0], scc[0]);
            if !is_cycle {
                continue;
            }
            // Walk the component from its first role back to itself to name the cycle in order.
            let in_scc = |n| scc.contains(&n);
            let start = *scc.iter().min_by_key(|n| graph[**n])?;
            let mut path = vec![start];
            let mut current = start;
            loop {
                let next = graph
                    .neighbors(current)
                    .filter(|n| in_scc(*n))
                    .min_by_key(|n| graph[*n])?;
                if next == start {
                    break;
                }
                if path.contains(&next) {
                    // Close the inner loop instead: trim the prefix before `next`.
                    let at = path.iter().position(|n| *n == next)?;
                    path.drain(..at);
                    let mut names: Vec<String> =
                        path.iter().map(|n| graph[*n].to_string()).collect();
                    names.push(graph[next].to_string());
                    return Some(names);
                }
                path.push(next);
                current = next;
            }
            let mut names: Vec<String> = path.iter().map(|n| graph[*n].to_string()).collect();
            names.push(graph[start].to_string());
            return Some(names);
        }
        None
    }
}
