//! Run-level patterns (seed 002): handoff chains, routers that run their choice, advisors in
//! parallel and teams that deliberate in rounds, around one agent run. A `Flow` is one pattern run: a tree of nodes, each "run agent
//! X on input I", stepped like a party — inputs in, actions out, time passed in. Agents are looked
//! up as the flow reaches them (chains resolve at run time). The daemon carries out the actions:
//! it starts the steps (real agent runs), asks router plugins and keeps the flow's state. A step
//! `Lost` with the daemon runs again. `check_patterns` validates a definition against the others
//! (unknown agents, cycles through any pattern edge, routers with subagents, non-terminal
//! advisors, coordinators with a handoff).

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
    /// A team member's turn (its step) shared a message on the team's channel.
    TeamBroadcast {
        step: StepId,
        message: String,
    },
    /// A team member's turn voted to conclude.
    TeamVote {
        step: StepId,
        reason: String,
    },
    /// The team's coordinator concluded with the final answer.
    TeamConclude {
        step: StepId,
        answer: String,
    },
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
        /// A team turn: `Some(true)` for the coordinator's (it may `conclude_team`).
        team: Option<bool>,
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

/// A flow's outcome (its root run's status follows from it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FlowOutcome {
    Success,
    Failed,
    Cancelled,
}

impl std::fmt::Display for FlowOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(match self {
            FlowOutcome::Success => "success",
            FlowOutcome::Failed => "failed",
            FlowOutcome::Cancelled => "cancelled",
        })
    }
}

/// How a flow ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlowEnd {
    pub status: FlowOutcome,
    /// The terminal agent's output.
    pub output: String,
    /// The agents whose runs made the answer, in order (`a -> b -> c` for a handoff chain).
    pub chain: Vec<String>,
    pub error: Option<String>,
}

/// Rounds a team gets when its definition does not say.
pub const DEFAULT_MAX_ROUNDS: u32 = 10;

/// The agent that answers for `name`: the last of its handoff chain (a team seat's speaker).
pub fn terminal_agent(name: &str, agents: &dyn Agents) -> String {
    let mut at = name.to_string();
    for _ in 0..64 {
        match agents.agent(&at).and_then(|d| d.handoff) {
            Some(next) => at = next,
            None => break,
        }
    }
    at
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

/// One message on a team's channel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Post {
    pub from: String,
    pub round: u32,
    pub text: String,
}

fn posts(channel: &[Post]) -> String {
    if channel.is_empty() {
        return "(nothing yet)\n".into();
    }
    channel
        .iter()
        .map(|p| format!("### {} (round {})\n\n{}\n", p.from, p.round, p.text))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A team member's seat, for its turn's prompt.
pub struct SeatView<'a> {
    pub team: &'a str,
    pub speaker: &'a str,
    pub coordinator: bool,
    pub round: u32,
    pub max_rounds: u32,
    /// Its own earlier turns' answers (each turn is a fresh run: this is its memory).
    pub said: &'a [String],
}

/// A team member's turn: the request, its seat, its earlier answers, and what was broadcast
/// since its last turn.
pub fn team_prompt(request: &str, seat: &SeatView<'_>, news: &[Post]) -> String {
    let SeatView {
        team,
        speaker,
        coordinator,
        round,
        max_rounds,
        said,
    } = *seat;
    let chair = if coordinator {
        " As its coordinator, call `conclude_team` with the team's final answer once it is ready."
    } else {
        ""
    };
    format!(
        "{request}\n\n## TEAM\n\nYou are {speaker}, a member of team {team} (round {round} of at most \
         {max_rounds}). Share what the others should know with `team_broadcast`; call \
         `vote_conclude` when you think the team is done.{chair}\n\n{}## TEAM CHANNEL (since your last \
         turn)\n\n{}",
        earlier(said),
        posts(news)
    )
}

fn earlier(said: &[String]) -> String {
    if said.is_empty() {
        return String::new();
    }
    let turns: Vec<String> = said
        .iter()
        .enumerate()
        .map(|(i, text)| format!("- round {}: {text}", i + 1))
        .collect();
    format!("## YOUR EARLIER TURNS\n\n{}\n\n", turns.join("\n"))
}

/// The coordinator's last turn: the whole transcript, and the final answer to give.
pub fn final_prompt(request: &str, team: &str, coordinator: &str, channel: &[Post]) -> String {
    format!(
        "{request}\n\n## TEAM TRANSCRIPT\n\n{}\nYou are {coordinator}, the coordinator of team {team}: give \
         the team's final answer.",
        posts(channel)
    )
}

/// A seat at a team's table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Seat {
    /// Who speaks: the member's terminal agent (a handoff chain's last).
    speaker: String,
    coordinator: bool,
    step: Option<StepId>,
    /// Channel posts already shown to it.
    seen: usize,
    /// The posts its current turn was shown (to show them again if the turn is lost).
    turn: (usize, usize),
    voted: bool,
    /// What its turns answered, in order.
    #[serde(default)]
    said: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum Phase {
    /// Created, not entered yet.
    Pending,
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
    /// Its team deliberates, a round at a time.
    Teaming {
        round: u32,
        seats: Vec<Seat>,
        channel: Vec<Post>,
        concluded: Option<String>,
        /// The coordinator's last turn, once the rounds are over.
        final_step: Option<StepId>,
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
    /// How it ended, once it has (kept so a restarted daemon can still end its run).
    #[serde(default)]
    end: Option<FlowEnd>,
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
                phase: Phase::Pending,
            }],
            steps: BTreeMap::new(),
            next_step: 1,
            finished: false,
            end: None,
        }
    }

    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// How the flow ended, once it has.
    pub fn end(&self) -> Option<&FlowEnd> {
        self.end.as_ref()
    }

    /// Whether the flow has not started a step yet (a restart right after it was created).
    pub fn is_fresh(&self) -> bool {
        !self.finished && self.steps.is_empty() && matches!(self.nodes[0].phase, Phase::Pending)
    }

    fn finish(&mut self, end: FlowEnd, out: &mut Vec<Action>) {
        self.finished = true;
        self.end = Some(end.clone());
        out.push(Action::Finished(end));
    }

    /// What a restarted daemon must do again for the flow to go on: ask the router plugins
    /// that had not answered, and wake for the advisor deadlines still ahead.
    pub fn pending_actions(&self, agents: &dyn Agents) -> Vec<Action> {
        let mut out = Vec::new();
        if self.finished {
            return out;
        }
        for (node, n) in self.nodes.iter().enumerate() {
            match &n.phase {
                Phase::Routing { step: None } => {
                    if let Some(router) = agents.agent(&n.agent).and_then(|d| d.router)
                        && let Some(plugin) = router.via.strip_prefix("plugin:")
                    {
                        out.push(Action::AskRouter {
                            node,
                            router: n.agent.clone(),
                            plugin: plugin.to_string(),
                            request: n.input.clone(),
                            candidates: router.agents,
                        });
                    }
                }
                Phase::Advising {
                    deadline_ms: Some(at_ms),
                    ..
                } => out.push(Action::WakeAt { at_ms: *at_ms }),
                _ => {}
            }
        }
        out
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
        match &self.nodes[node].phase {
            Phase::Running { step: s } | Phase::Routing { step: Some(s) } => *s == step,
            Phase::Teaming {
                seats, final_step, ..
            } => *final_step == Some(step) || seats.iter().any(|s| s.step == Some(step)),
            _ => false,
        }
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
                if matches!(self.nodes[node].phase, Phase::Teaming { .. }) {
                    return self.team_turn_ended(node, step, outcome, now_ms, agents, out);
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
            Input::TeamBroadcast { step, message } => {
                self.team_post(step, out, |seat, round, channel, _| {
                    channel.push(Post {
                        from: seat.speaker.clone(),
                        round,
                        text: message.clone(),
                    });
                    (
                        "team_broadcast",
                        json!({ "member": seat.speaker, "round": round, "message": message }),
                    )
                });
            }
            Input::TeamVote { step, reason } => {
                self.team_post(step, out, |seat, round, _, _| {
                    seat.voted = true;
                    (
                        "team_vote",
                        json!({ "member": seat.speaker, "round": round, "reason": reason }),
                    )
                });
            }
            Input::TeamConclude { step, answer } => {
                self.team_post(step, out, |seat, round, _, concluded| {
                    if seat.coordinator {
                        *concluded = Some(answer.clone());
                        (
                            "team_concluded",
                            json!({ "coordinator": seat.speaker, "round": round }),
                        )
                    } else {
                        (
                            "team_conclude_refused",
                            json!({ "member": seat.speaker, "round": round }),
                        )
                    }
                });
            }
            Input::Cancel => {
                for step in self.running_steps() {
                    out.push(Action::Stop { step });
                }
                self.finish(
                    FlowEnd {
                        status: FlowOutcome::Cancelled,
                        output: String::new(),
                        chain: Vec::new(),
                        error: Some("cancelled".into()),
                    },
                    out,
                );
            }
        }
    }

    /// Seats the team of `node` and starts its first round.
    fn start_team(
        &mut self,
        node: NodeId,
        team: &crate::agent::TeamSpec,
        agents: &dyn Agents,
        out: &mut Vec<Action>,
    ) {
        let mut names = team.members.clone();
        if !names.contains(&team.coordinator) {
            names.push(team.coordinator.clone());
        }
        let seats = names
            .iter()
            .map(|m| Seat {
                speaker: terminal_agent(m, agents),
                coordinator: *m == team.coordinator,
                step: None,
                seen: 0,
                turn: (0, 0),
                voted: false,
                said: Vec::new(),
            })
            .collect();
        self.nodes[node].phase = Phase::Teaming {
            round: 0,
            seats,
            channel: Vec::new(),
            concluded: None,
            final_step: None,
        };
        out.push(Action::Event {
            kind: "team_started",
            data: json!({ "team": self.nodes[node].agent, "members": names, "coordinator": team.coordinator }),
        });
        self.next_round(node, agents, out);
    }

    fn team_spec(&self, node: NodeId, agents: &dyn Agents) -> Option<crate::agent::TeamSpec> {
        agents.agent(&self.nodes[node].agent).and_then(|d| d.team)
    }

    /// Starts every seat's turn of the next round, each seeing what was said since its last.
    fn next_round(&mut self, node: NodeId, agents: &dyn Agents, out: &mut Vec<Action>) {
        let max = self.max_rounds(node, agents);
        let team = self.nodes[node].agent.clone();
        let request = self.prompt_of(node);
        let mut turns = Vec::new();
        let Phase::Teaming {
            round,
            seats,
            channel,
            ..
        } = &mut self.nodes[node].phase
        else {
            return;
        };
        *round += 1;
        // A vote counts for the round it was cast in: consensus is every member, this round.
        for seat in seats.iter_mut() {
            seat.voted = false;
        }
        let shown = channel.len();
        for (i, seat) in seats.iter_mut().enumerate() {
            let news = channel[seat.seen.min(shown)..].to_vec();
            let view = SeatView {
                team: &team,
                speaker: &seat.speaker,
                coordinator: seat.coordinator,
                round: *round,
                max_rounds: max,
                said: &seat.said,
            };
            turns.push((i, team_prompt(&request, &view, &news)));
            // What this turn is shown, to show it again if the turn is lost.
            seat.turn = (seat.seen.min(shown), shown);
            seat.seen = shown;
        }
        let round = *round;
        out.push(Action::Event {
            kind: "team_round",
            data: json!({ "team": team, "round": round }),
        });
        for (i, prompt) in turns {
            self.seat_turn(node, i, prompt, out);
        }
    }

    /// Applies a team tool call made from `step` (a seat's turn, or the coordinator's last).
    fn team_post(
        &mut self,
        step: StepId,
        out: &mut Vec<Action>,
        apply: impl FnOnce(&mut Seat, u32, &mut Vec<Post>, &mut Option<String>) -> (&'static str, Value),
    ) {
        let Some(node) = self.node_of(step) else {
            return;
        };
        let team = self.nodes[node].agent.clone();
        let Phase::Teaming {
            round,
            seats,
            channel,
            concluded,
            final_step,
        } = &mut self.nodes[node].phase
        else {
            return;
        };
        let seat = if *final_step == Some(step) {
            seats.iter_mut().find(|s| s.coordinator)
        } else {
            seats.iter_mut().find(|s| s.step == Some(step))
        };
        let Some(seat) = seat else {
            return;
        };
        let (kind, mut data) = apply(seat, *round, channel, concluded);
        data["team"] = json!(team);
        out.push(Action::Event { kind, data });
    }

    fn team_turn_ended(
        &mut self,
        node: NodeId,
        step: StepId,
        outcome: Outcome,
        now_ms: u64,
        agents: &dyn Agents,
        out: &mut Vec<Action>,
    ) {
        let team = self.nodes[node].agent.clone();
        let Phase::Teaming {
            round,
            seats,
            channel,
            concluded,
            final_step,
        } = &mut self.nodes[node].phase
        else {
            return;
        };
        let round = *round;
        if *final_step == Some(step) {
            let coordinator = seats
                .iter()
                .find(|s| s.coordinator)
                .map(|s| s.speaker.clone())
                .unwrap_or_default();
            let answer = match (outcome, concluded.clone()) {
                (Outcome::Lost, _) => return self.final_turn(node, out),
                (_, Some(answer)) => Ok(answer),
                (Outcome::Done { output }, None) => Ok(output),
                (Outcome::Failed { reason }, None) => Err(format!(
                    "team {team}: its coordinator {coordinator} gave no final answer: {reason}"
                )),
            };
            return match answer {
                Ok(answer) => {
                    self.own_done_with(node, answer, vec![team, coordinator], now_ms, agents, out)
                }
                Err(e) => self.settle(node, Err(e), now_ms, agents, out),
            };
        }
        let Some(i) = seats.iter().position(|s| s.step == Some(step)) else {
            return;
        };
        match outcome {
            Outcome::Lost => {
                // Its turn went with the daemon: take it again, with the same news.
                let (speaker, coordinator, (from, to), said) = (
                    seats[i].speaker.clone(),
                    seats[i].coordinator,
                    seats[i].turn,
                    seats[i].said.clone(),
                );
                let news = channel[from.min(channel.len())..to.min(channel.len())].to_vec();
                let view = SeatView {
                    team: &team,
                    speaker: &speaker,
                    coordinator,
                    round,
                    max_rounds: self.max_rounds(node, agents),
                    said: &said,
                };
                let prompt = team_prompt(&self.prompt_of(node), &view, &news);
                self.seat_turn(node, i, prompt, out);
                return;
            }
            Outcome::Failed { reason } => {
                channel.push(Post {
                    from: "troupe".into(),
                    round,
                    text: format!("[{}'s turn failed: {reason}]", seats[i].speaker),
                });
                seats[i].step = None;
            }
            Outcome::Done { output } => {
                seats[i].said.push(output);
                seats[i].step = None;
            }
        }
        if seats.iter().any(|s| s.step.is_some()) {
            return;
        }
        self.round_over(node, now_ms, agents, out);
    }

    /// Every seat has spoken this round: conclude, hand to the coordinator, or go on.
    fn round_over(
        &mut self,
        node: NodeId,
        now_ms: u64,
        agents: &dyn Agents,
        out: &mut Vec<Action>,
    ) {
        let team = self.nodes[node].agent.clone();
        let termination = self
            .team_spec(node, agents)
            .map(|t| t.termination)
            .unwrap_or_default();
        let max = self.max_rounds(node, agents);
        let Phase::Teaming {
            round,
            seats,
            concluded,
            ..
        } = &self.nodes[node].phase
        else {
            return;
        };
        let coordinator = seats
            .iter()
            .find(|s| s.coordinator)
            .map(|s| s.speaker.clone())
            .unwrap_or_default();
        if let Some(answer) = concluded.clone() {
            out.push(Action::Event {
                kind: "team_finished",
                data: json!({ "team": team, "round": round, "by": "coordinator" }),
            });
            return self.own_done_with(node, answer, vec![team, coordinator], now_ms, agents, out);
        }
        let consensus =
            termination == crate::agent::Termination::Consensus && seats.iter().all(|s| s.voted);
        if consensus || *round >= max {
            out.push(Action::Event {
                kind: "team_finished",
                data: json!({ "team": team, "round": round,
                              "by": if consensus { "consensus" } else { "max_rounds" } }),
            });
            self.final_turn(node, out);
            return;
        }
        self.next_round(node, agents, out);
    }

    /// Rounds a team gets: its definition's `max_rounds`, else the default.
    fn max_rounds(&self, node: NodeId, agents: &dyn Agents) -> u32 {
        self.team_spec(node, agents)
            .and_then(|t| t.max_rounds)
            .unwrap_or(DEFAULT_MAX_ROUNDS)
    }

    /// Starts seat `i`'s turn of a team with `prompt`.
    fn seat_turn(&mut self, node: NodeId, i: usize, prompt: String, out: &mut Vec<Action>) {
        let step = self.new_step(node);
        let Phase::Teaming { seats, .. } = &mut self.nodes[node].phase else {
            return;
        };
        seats[i].step = Some(step);
        out.push(Action::Run {
            step,
            node,
            agent: seats[i].speaker.clone(),
            prompt,
            trigger: Trigger::TeamMember,
            route: None,
            team: Some(seats[i].coordinator),
        });
    }

    /// Starts the coordinator's last turn: the whole transcript, and the final answer to give.
    fn final_turn(&mut self, node: NodeId, out: &mut Vec<Action>) {
        let (team, request) = (self.nodes[node].agent.clone(), self.prompt_of(node));
        let step = self.new_step(node);
        let Phase::Teaming {
            seats,
            channel,
            final_step,
            ..
        } = &mut self.nodes[node].phase
        else {
            return;
        };
        let coordinator = seats
            .iter()
            .find(|s| s.coordinator)
            .map(|s| s.speaker.clone())
            .unwrap_or_default();
        *final_step = Some(step);
        out.push(Action::Run {
            step,
            node,
            prompt: final_prompt(&request, &team, &coordinator, channel),
            agent: coordinator,
            trigger: Trigger::TeamMember,
            route: None,
            team: Some(true),
        });
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
            phase: Phase::Pending,
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
        if let Some(team) = &def.team {
            return self.start_team(node, team, agents, out);
        }
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
            team: None,
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
            // Every running step of the node: its own run, its router step, its team's turns.
            let running: Vec<StepId> = self
                .steps
                .iter()
                .filter(|(step, owner)| **owner == n && self.step_running(n, **step))
                .map(|(step, _)| *step)
                .collect();
            for step in running {
                out.push(Action::Stop { step });
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
            let end = match result {
                Ok((output, chain)) => FlowEnd {
                    status: FlowOutcome::Success,
                    output,
                    chain,
                    error: None,
                },
                Err(e) => FlowEnd {
                    status: FlowOutcome::Failed,
                    output: String::new(),
                    chain: Vec::new(),
                    error: Some(e),
                },
            };
            self.finish(end, out);
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
/// (no handoff, not a router), a team's coordinator has no handoff, and no circle runs through
/// handoffs, router choices, advisors and team membership ("handoff cycle: a -> b -> a").
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
    if let Some(team) = &agent.team {
        if team.members.is_empty() {
            return Err(format!("team {name} has no members"));
        }
        for member in &team.members {
            exists("the team", member)?;
        }
        exists("the team", &team.coordinator)?;
        if let Some(next) = lookup(&team.coordinator).and_then(|d| d.handoff) {
            return Err(format!(
                "team coordinator {} of team {name} cannot have a handoff (to {next}): the team owns the final answer",
                team.coordinator
            ));
        }
        if team.termination == crate::agent::Termination::MaxRounds && team.max_rounds.is_none() {
            return Err(format!(
                "team {name} ends after max_rounds: say how many (max_rounds)"
            ));
        }
        if team.max_rounds == Some(0) {
            return Err(format!("team {name}: max_rounds must be at least 1"));
        }
        if agent.router.is_some() {
            return Err(format!(
                "agent {name} cannot be both a router and a team: a router delegates the whole request"
            ));
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
        if let Some(t) = &def.team {
            e.extend(t.members.iter().map(|m| (m.clone(), "team")));
            e.push((t.coordinator.clone(), "team"));
        }
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
