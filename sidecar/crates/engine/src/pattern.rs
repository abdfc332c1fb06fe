//! Run-level patterns (seed 002): handoff chains, routers that run their choice, and advisors in
//! parallel, around one agent run. A `Flow` is one pattern run: a tree of nodes, each "run agent
//! X on input I", stepped like a party — inputs in, actions out, time passed in. Agents are looked
//! up as the flow reaches them (chains resolve at run time). The daemon carries out the actions:
//! it starts the steps (real agent runs), asks router plugins and keeps the flow's state.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::agent::AgentDefinition;

/// A node of the flow: one "run this agent on this input", with its patterns.
pub type NodeId = usize;
/// A step: one real agent run the flow started.
pub type StepId = u32;

/// Why a run was started, as the run tree shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    /// The agent asked for (the flow's root).
    Root,
    Handoff,
    Router,
    Advisor,
    TeamMember,
    Subagent,
}

impl Trigger {
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Root => "root",
            Trigger::Handoff => "handoff",
            Trigger::Router => "router",
            Trigger::Advisor => "advisor",
            Trigger::TeamMember => "team_member",
            Trigger::Subagent => "subagent",
        }
    }
}

/// How a step's run ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Outcome {
    /// It completed with this output.
    Done { output: String },
    /// It failed (crashed, timed out, was cancelled or blocked).
    Failed { reason: String },
    /// The daemon stopped under it: run it again (a completed step is never rerun).
    Lost,
}

/// What happens to a flow.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    Start,
    StepEnded {
        step: StepId,
        outcome: Outcome,
    },
    /// A router's choice: from its run's `route_to`, or from a router plugin. `Err`: it chose
    /// nothing (the reason says why).
    Routed {
        node: NodeId,
        choice: Result<(String, String), String>,
    },
    /// Time passed (advisor deadlines).
    Tick,
    Cancel,
}

/// What the daemon is to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Start a run of `agent` (without its patterns) on `prompt`. `route`: a router step, whose
    /// only tool is `route_to` with these candidates.
    Run {
        step: StepId,
        node: NodeId,
        agent: String,
        prompt: String,
        trigger: Trigger,
        route: Option<Vec<String>>,
    },
    /// Ask a router plugin which of `candidates` should take `request`.
    AskRouter {
        node: NodeId,
        router: String,
        plugin: String,
        request: String,
        candidates: Vec<String>,
    },
    /// Stop a step's run (a cancel, an advisor past its deadline).
    Stop { step: StepId },
    /// Call back with `Tick` at this time.
    WakeAt { at_ms: u64 },
    /// A timeline fact.
    Event { kind: &'static str, data: Value },
    /// The flow ended: its root run ends with this.
    Finished(FlowEnd),
}

/// How a flow ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlowEnd {
    /// `success`, `failed` or `cancelled`.
    pub status: String,
    /// The terminal agent's output.
    pub output: String,
    /// The agents whose runs made the answer, in order (`a -> b -> c` for a handoff chain).
    pub chain: Vec<String>,
    pub error: Option<String>,
}

/// The fixed reason line that opens a handoff's input.
pub fn handoff_prompt(from: &str, output: &str) -> String {
    format!("Reason: handoff from {from}. Its output follows; continue from it.\n\n{output}")
}

/// The input of an agent with advisors: the seed's enriched message.
pub fn enriched_prompt(input: &str, advice: &[(String, String)]) -> String {
    let mut out = format!("## ORIGINAL USER REQUEST\n\n{input}\n\n## ANALYSIS GATHERED\n");
    for (advisor, text) in advice {
        out.push_str(&format!("\n### From {advisor}\n\n{text}\n"));
    }
    out
}

/// The prompt of a router step: the request, and the one thing to do with it.
pub fn router_prompt(request: &str, candidates: &[String]) -> String {
    format!(
        "Choose the agent that should handle the request below: call `route_to` once, with one of \
         {} and your reason. Do nothing else.\n\n{request}",
        candidates.join(", ")
    )
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum Phase {
    /// Waiting for its advisors (child nodes; `None`: still running).
    Advising {
        advisors: Vec<(String, NodeId, Option<String>)>,
        deadline_ms: Option<u64>,
    },
    /// Its router step (`None`: a router plugin was asked).
    Routing {
        step: Option<StepId>,
    },
    /// Its own run.
    Running {
        step: StepId,
    },
    /// Its router's choice runs.
    Delegating {
        child: NodeId,
    },
    /// Its handoff target runs on its output.
    HandingOff {
        child: NodeId,
        own: Vec<String>,
    },
    Done(Result<(String, Vec<String>), String>),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Node {
    agent: String,
    input: String,
    trigger: Trigger,
    parent: Option<NodeId>,
    phase: Phase,
}

/// One pattern run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Flow {
    nodes: Vec<Node>,
    /// Step → its node.
    steps: BTreeMap<StepId, NodeId>,
    next_step: StepId,
    finished: bool,
}

/// Looks an agent definition up by name (the daemon's store, at run time).
pub trait Agents {
    fn agent(&self, name: &str) -> Option<AgentDefinition>;
}

impl<F: Fn(&str) -> Option<AgentDefinition>> Agents for F {
    fn agent(&self, name: &str) -> Option<AgentDefinition> {
        self(name)
    }
}

impl Flow {
    /// A flow running `agent` on `input`; step it with `Input::Start`.
    pub fn new(agent: &str, input: &str) -> Flow {
        Flow {
            nodes: vec![Node {
                agent: agent.to_string(),
                input: input.to_string(),
                trigger: Trigger::Root,
                parent: None,
                phase: Phase::Done(Err("not started".into())),
            }],
            steps: BTreeMap::new(),
            next_step: 1,
            finished: false,
        }
    }

    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// The node a step belongs to.
    pub fn node_of(&self, step: StepId) -> Option<NodeId> {
        self.steps.get(&step).copied()
    }

    /// The steps whose runs are still going.
    pub fn running_steps(&self) -> Vec<StepId> {
        self.steps
            .iter()
            .filter(|(step, node)| self.step_running(**node, **step))
            .map(|(step, _)| *step)
            .collect()
    }

    fn step_running(&self, node: NodeId, step: StepId) -> bool {
        matches!(self.nodes[node].phase, Phase::Running { step: s } | Phase::Routing { step: Some(s) } if s == step)
    }

    /// Feeds one input; the actions are appended to `out`.
    pub fn step(&mut self, input: Input, now_ms: u64, agents: &dyn Agents, out: &mut Vec<Action>) {
        if self.finished {
            return;
        }
        match input {
            Input::Start => self.enter(0, now_ms, agents, out),
            Input::StepEnded { step, outcome } => {
                let Some(node) = self.node_of(step) else {
                    return;
                };
                if !self.step_running(node, step) {
                    return; // already handled (a stop, a timeout)
                }
                match outcome {
                    Outcome::Lost => {
                        // Run it again under a new step: the old run is gone.
                        let phase = self.nodes[node].phase.clone();
                        let route = matches!(phase, Phase::Routing { .. });
                        let step = self.new_step(node);
                        self.nodes[node].phase = if route {
                            Phase::Routing { step: Some(step) }
                        } else {
                            Phase::Running { step }
                        };
                        self.run_action(node, step, route, agents, out);
                    }
                    Outcome::Failed { reason } => {
                        let agent = self.nodes[node].agent.clone();
                        self.settle(node, Err(format!("{agent}: {reason}")), now_ms, agents, out);
                    }
                    Outcome::Done { output } => match self.nodes[node].phase {
                        Phase::Routing { .. } => {
                            // The router's run ended without a choice reaching us.
                            let reason = "its run ended without calling route_to".to_string();
                            self.routed(node, Err(reason), now_ms, agents, out);
                        }
                        _ => self.own_done(node, output, now_ms, agents, out),
                    },
                }
            }
            Input::Routed { node, choice } => {
                if node < self.nodes.len()
                    && matches!(self.nodes[node].phase, Phase::Routing { .. })
                {
                    self.routed(node, choice, now_ms, agents, out);
                }
            }
            Input::Tick => {
                for node in 0..self.nodes.len() {
                    if let Phase::Advising {
                        deadline_ms: Some(deadline),
                        ..
                    } = self.nodes[node].phase
                        && now_ms >= deadline
                    {
                        self.advisors_timed_out(node, now_ms, agents, out);
                    }
                }
            }
            Input::Cancel => {
                for step in self.running_steps() {
                    out.push(Action::Stop { step });
                }
                self.finished = true;
                out.push(Action::Finished(FlowEnd {
                    status: "cancelled".into(),
                    output: String::new(),
                    chain: Vec::new(),
                    error: Some("cancelled".into()),
                }));
            }
        }
    }

    fn new_step(&mut self, node: NodeId) -> StepId {
        let step = self.next_step;
        self.next_step += 1;
        self.steps.insert(step, node);
        step
    }

    fn add_node(&mut self, agent: &str, input: String, trigger: Trigger, parent: NodeId) -> NodeId {
        self.nodes.push(Node {
            agent: agent.to_string(),
            input,
            trigger,
            parent: Some(parent),
            phase: Phase::Done(Err("not started".into())),
        });
        self.nodes.len() - 1
    }

    /// Starts a node: its advisors first, else its core.
    fn enter(&mut self, node: NodeId, now_ms: u64, agents: &dyn Agents, out: &mut Vec<Action>) {
        let name = self.nodes[node].agent.clone();
        let Some(def) = agents.agent(&name) else {
            let why = format!("agent {name} does not exist");
            return self.settle(node, Err(why), now_ms, agents, out);
        };
        if def.advisors.is_empty() {
            return self.core(node, &def, agents, out);
        }
        let input = self.nodes[node].input.clone();
        let deadline_ms = def
            .advisor_timeout_secs
            .map(|s| now_ms.saturating_add((s * 1000.0) as u64));
        let children: Vec<(String, NodeId, Option<String>)> = def
            .advisors
            .iter()
            .map(|a| {
                (
                    a.clone(),
                    self.add_node(a, input.clone(), Trigger::Advisor, node),
                    None,
                )
            })
            .collect();
        self.nodes[node].phase = Phase::Advising {
            advisors: children.clone(),
            deadline_ms,
        };
        out.push(Action::Event {
            kind: "pattern_advisors",
            data: json!({ "agent": name, "advisors": def.advisors }),
        });
        if let Some(at_ms) = deadline_ms {
            out.push(Action::WakeAt { at_ms });
        }
        for (_, child, _) in children {
            if !self.finished {
                self.enter(child, now_ms, agents, out);
            }
        }
    }

    /// The node's core: its router step, or its own run.
    fn core(
        &mut self,
        node: NodeId,
        def: &AgentDefinition,
        agents: &dyn Agents,
        out: &mut Vec<Action>,
    ) {
        match &def.router {
            Some(router) if router.via.starts_with("plugin:") => {
                self.nodes[node].phase = Phase::Routing { step: None };
                out.push(Action::AskRouter {
                    node,
                    router: def.name.clone(),
                    plugin: router.via["plugin:".len()..].to_string(),
                    request: self.nodes[node].input.clone(),
                    candidates: router.agents.clone(),
                });
            }
            Some(_) => {
                let step = self.new_step(node);
                self.nodes[node].phase = Phase::Routing { step: Some(step) };
                self.run_action(node, step, true, agents, out);
            }
            None => {
                let step = self.new_step(node);
                self.nodes[node].phase = Phase::Running { step };
                self.run_action(node, step, false, agents, out);
            }
        }
    }

    fn run_action(
        &self,
        node: NodeId,
        step: StepId,
        route: bool,
        agents: &dyn Agents,
        out: &mut Vec<Action>,
    ) {
        let n = &self.nodes[node];
        let candidates = if route {
            agents
                .agent(&n.agent)
                .and_then(|d| d.router)
                .map(|r| r.agents)
        } else {
            None
        };
        let prompt = match &candidates {
            Some(c) => router_prompt(&n.input, c),
            None => self.prompt_of(node),
        };
        out.push(Action::Run {
            step,
            node,
            agent: n.agent.clone(),
            prompt,
            trigger: n.trigger,
            route: candidates,
        });
    }

    /// The input of a node's own run: its advisors' enriched message when it has advisors.
    fn prompt_of(&self, node: NodeId) -> String {
        let n = &self.nodes[node];
        let advice: Vec<(String, String)> = self
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, c)| c.parent == Some(node) && c.trigger == Trigger::Advisor)
            .map(|(_, c)| {
                let text = match &c.phase {
                    Phase::Done(Ok((output, _))) => output.clone(),
                    Phase::Done(Err(why)) => {
                        format!("[advisor {} gave no analysis: {why}]", c.agent)
                    }
                    _ => format!("[advisor {} gave no analysis: it did not finish]", c.agent),
                };
                (c.agent.clone(), text)
            })
            .collect();
        if advice.is_empty() {
            n.input.clone()
        } else {
            enriched_prompt(&n.input, &advice)
        }
    }

    fn routed(
        &mut self,
        node: NodeId,
        choice: Result<(String, String), String>,
        now_ms: u64,
        agents: &dyn Agents,
        out: &mut Vec<Action>,
    ) {
        let router = self.nodes[node].agent.clone();
        let candidates = agents
            .agent(&router)
            .and_then(|d| d.router)
            .map(|r| r.agents)
            .unwrap_or_default();
        let (agent, reason) = match choice {
            Ok(c) => c,
            Err(why) => {
                let e = format!(
                    "router {router} found no suitable agent among {} ({why})",
                    candidates.join(", ")
                );
                return self.settle(node, Err(e), now_ms, agents, out);
            }
        };
        if !candidates.contains(&agent) {
            let e = format!(
                "router {router} chose {agent}, which is not one of its agents ({})",
                candidates.join(", ")
            );
            return self.settle(node, Err(e), now_ms, agents, out);
        }
        out.push(Action::Event {
            kind: "pattern_routed",
            data: json!({ "router": router, "agent": agent, "reason": reason }),
        });
        let input = self.nodes[node].input.clone();
        let child = self.add_node(&agent, input, Trigger::Router, node);
        self.nodes[node].phase = Phase::Delegating { child };
        self.enter(child, now_ms, agents, out);
    }

    /// A node's own run (or its router's choice) is done: hand off, or settle.
    fn own_done(
        &mut self,
        node: NodeId,
        output: String,
        now_ms: u64,
        agents: &dyn Agents,
        out: &mut Vec<Action>,
    ) {
        self.own_done_with(
            node,
            output,
            vec![self.nodes[node].agent.clone()],
            now_ms,
            agents,
            out,
        );
    }

    fn own_done_with(
        &mut self,
        node: NodeId,
        output: String,
        chain: Vec<String>,
        now_ms: u64,
        agents: &dyn Agents,
        out: &mut Vec<Action>,
    ) {
        let name = self.nodes[node].agent.clone();
        let handoff = agents.agent(&name).and_then(|d| d.handoff);
        match handoff {
            Some(next) => {
                out.push(Action::Event {
                    kind: "pattern_handoff",
                    data: json!({ "from": name, "to": next }),
                });
                let child = self.add_node(
                    &next,
                    handoff_prompt(&name, &output),
                    Trigger::Handoff,
                    node,
                );
                self.nodes[node].phase = Phase::HandingOff { child, own: chain };
                self.enter(child, now_ms, agents, out);
            }
            None => self.settle(node, Ok((output, chain)), now_ms, agents, out),
        }
    }

    fn advisors_timed_out(
        &mut self,
        node: NodeId,
        now_ms: u64,
        agents: &dyn Agents,
        out: &mut Vec<Action>,
    ) {
        let Phase::Advising { advisors, .. } = self.nodes[node].phase.clone() else {
            return;
        };
        for (name, child, _) in advisors {
            if !matches!(self.nodes[child].phase, Phase::Done(_)) {
                self.stop_subtree(child, out);
                out.push(Action::Event {
                    kind: "pattern_advisor_timeout",
                    data: json!({ "agent": self.nodes[node].agent, "advisor": name }),
                });
                self.nodes[child].phase = Phase::Done(Err("it timed out".into()));
            }
        }
        self.advice_in(node, now_ms, agents, out);
    }

    /// Stops every running step under `node` (itself included).
    fn stop_subtree(&mut self, node: NodeId, out: &mut Vec<Action>) {
        let mut stack = vec![node];
        while let Some(n) = stack.pop() {
            match self.nodes[n].phase {
                Phase::Running { step } | Phase::Routing { step: Some(step) } => {
                    out.push(Action::Stop { step });
                }
                _ => {}
            }
            for (i, c) in self.nodes.iter().enumerate() {
                if c.parent == Some(n) {
                    stack.push(i);
                }
            }
            if !matches!(self.nodes[n].phase, Phase::Done(_)) {
                self.nodes[n].phase = Phase::Done(Err("stopped".into()));
            }
        }
    }

    /// When every advisor of `node` has answered (or given up), its own core starts.
    fn advice_in(&mut self, node: NodeId, now_ms: u64, agents: &dyn Agents, out: &mut Vec<Action>) {
        let Phase::Advising { advisors, .. } = &self.nodes[node].phase else {
            return;
        };
        if advisors
            .iter()
            .any(|(_, child, _)| !matches!(self.nodes[*child].phase, Phase::Done(_)))
        {
            return;
        }
        let name = self.nodes[node].agent.clone();
        let Some(def) = agents.agent(&name) else {
            let why = format!("agent {name} does not exist");
            return self.settle(node, Err(why), now_ms, agents, out);
        };
        self.core(node, &def, agents, out);
    }

    /// A node is done: tell its parent, or finish the flow.
    fn settle(
        &mut self,
        node: NodeId,
        result: Result<(String, Vec<String>), String>,
        now_ms: u64,
        agents: &dyn Agents,
        out: &mut Vec<Action>,
    ) {
        self.nodes[node].phase = Phase::Done(result.clone());
        let Some(parent) = self.nodes[node].parent else {
            self.finished = true;
            for step in self.running_steps() {
                out.push(Action::Stop { step });
            }
            out.push(Action::Finished(match result {
                Ok((output, chain)) => FlowEnd {
                    status: "success".into(),
                    output,
                    chain,
                    error: None,
                },
                Err(e) => FlowEnd {
                    status: "failed".into(),
                    output: String::new(),
                    chain: Vec::new(),
                    error: Some(e),
                },
            }));
            return;
        };
        match self.nodes[parent].phase.clone() {
            Phase::Advising { .. } => {
                if let Err(why) = &result {
                    out.push(Action::Event {
                        kind: "pattern_advisor_failed",
                        data: json!({ "agent": self.nodes[parent].agent, "advisor": self.nodes[node].agent, "reason": why }),
                    });
                } else {
                    out.push(Action::Event {
                        kind: "pattern_advisor_done",
                        data: json!({ "agent": self.nodes[parent].agent, "advisor": self.nodes[node].agent }),
                    });
                }
                self.advice_in(parent, now_ms, agents, out);
            }
            Phase::Delegating { .. } => match result {
                Ok((output, chain)) => {
                    let mut full = vec![self.nodes[parent].agent.clone()];
                    full.extend(chain);
                    self.own_done_with(parent, output, full, now_ms, agents, out);
                }
                Err(e) => {
                    let router = self.nodes[parent].agent.clone();
                    self.settle(parent, Err(format!("{router} -> {e}")), now_ms, agents, out);
                }
            },
            Phase::HandingOff { own, .. } => match result {
                Ok((output, chain)) => {
                    let mut full = own;
                    full.extend(chain);
                    self.settle(parent, Ok((output, full)), now_ms, agents, out);
                }
                Err(e) => {
                    let from = self.nodes[parent].agent.clone();
                    self.settle(parent, Err(format!("{from} -> {e}")), now_ms, agents, out);
                }
            },
            _ => {}
        }
    }
}

/// Checks the patterns of `agent` (about to be written) against the other definitions: every
/// agent it names exists, a router lists agents and has no subagents, an advisor is terminal
/// (no handoff, not a router), and no circle runs through handoffs, router choices and advisors
/// ("handoff cycle: a -> b -> a").
pub fn check_patterns(agent: &AgentDefinition, agents: &dyn Agents) -> Result<(), String> {
    let lookup = |name: &str| {
        if name == agent.name {
            Some(agent.clone())
        } else {
            agents.agent(name)
        }
    };
    let name = &agent.name;
    let exists = |what: &str, other: &str| -> Result<(), String> {
        if lookup(other).is_some() {
            Ok(())
        } else {
            Err(format!(
                "{what} of agent {name} names agent {other}, which does not exist"
            ))
        }
    };
    if let Some(next) = &agent.handoff {
        exists("the handoff", next)?;
    }
    if let Some(router) = &agent.router {
        if router.agents.is_empty() {
            return Err(format!("router {name} lists no agents to choose from"));
        }
        if router.via != "llm" {
            let plugin = router.via.strip_prefix("plugin:").unwrap_or("");
            if plugin.is_empty() {
                return Err(format!(
                    "router {name}: via must be \"llm\" or \"plugin:<router plugin>\", not {:?}",
                    router.via
                ));
            }
        }
        if agent.allow_nested_agents {
            return Err(format!(
                "router {name} cannot have subagents (allow_nested_agents): a router only routes"
            ));
        }
        for choice in &router.agents {
            exists("the router", choice)?;
        }
    }
    for advisor in &agent.advisors {
        exists("an advisor", advisor)?;
        if let Some(def) = lookup(advisor) {
            if let Some(next) = &def.handoff {
                return Err(format!(
                    "advisor {advisor} of agent {name} is not terminal: it hands off to {next}"
                ));
            }
            if def.router.is_some() {
                return Err(format!(
                    "advisor {advisor} of agent {name} is not terminal: it is a router"
                ));
            }
        }
    }
    // A circle through any pattern edge would run forever.
    let edges = |def: &AgentDefinition| -> Vec<(String, &'static str)> {
        let mut e: Vec<(String, &'static str)> = Vec::new();
        if let Some(next) = &def.handoff {
            e.push((next.clone(), "handoff"));
        }
        if let Some(r) = &def.router {
            e.extend(r.agents.iter().map(|a| (a.clone(), "router")));
        }
        e.extend(def.advisors.iter().map(|a| (a.clone(), "advisor")));
        e
    };
    fn walk(
        at: &str,
        path: &mut Vec<(String, &'static str)>,
        lookup: &dyn Fn(&str) -> Option<AgentDefinition>,
        edges: &dyn Fn(&AgentDefinition) -> Vec<(String, &'static str)>,
        seen: &mut std::collections::BTreeSet<String>,
    ) -> Option<String> {
        if let Some(i) = path.iter().position(|(n, _)| n == at) {
            let cycle = &path[i..];
            let kinds: std::collections::BTreeSet<&str> = cycle.iter().map(|(_, k)| *k).collect();
            let mut names: Vec<&str> = cycle.iter().map(|(n, _)| n.as_str()).collect();
            names.push(at);
            let label = if kinds.len() == 1 {
                kinds.into_iter().next().unwrap_or("pattern")
            } else {
                "pattern"
            };
            return Some(format!("{label} cycle: {}", names.join(" -> ")));
        }
        if !seen.insert(at.to_string()) {
            return None;
        }
        let def = lookup(at)?;
        for (next, kind) in edges(&def) {
            path.push((at.to_string(), kind));
            let found = walk(&next, path, lookup, edges, seen);
            path.pop();
            if found.is_some() {
                return found;
            }
        }
        None
    }
    let mut seen = std::collections::BTreeSet::new();
    match walk(name, &mut Vec::new(), &lookup, &edges, &mut seen) {
        Some(cycle) => Err(cycle),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests;
