//! The collaboration protocol (seed 004), as pure rules: a plan's steps and their validation,
//! the step state machine, a step's tool policy, the party's collaboration state, the tally of a
//! decision's votes and the ADR a committed decision is written as. No IO: the daemon keeps the
//! records and carries the results out.

use std::collections::{BTreeMap, BTreeSet};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::agent::Budget;

/// What a step's owner may use while it works on the step. Names are the agent's tool names
/// (`Bash`, `Edit`, `write_file`, an MCP tool's `mcp__troupe__send_message` or bare `send_message`);
/// a name ending in `*` matches every tool it prefixes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolPolicy {
    /// When not empty, the only tools the step may use; they are approved without asking.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_tools: Vec<String>,
    /// Tools the step may not use (denied, whatever a rule says).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocked_tools: Vec<String>,
    /// Tools that need a person's decision each time (no rule answers them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approve_tools: Vec<String>,
}

/// What a step's tool policy says of one tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolVerdict {
    /// The policy does not mention it: the usual rules and people decide.
    Default,
    /// Listed as allowed: approved without asking.
    Allow,
    /// Needs a person, whatever a rule says.
    Ask,
    /// Denied, and why.
    Deny(String),
}

/// The tools of the collaboration protocol itself, which no step policy blocks (an owner must
/// always be able to submit, hand off, ask or say it is blocked).
pub const PROTOCOL_TOOLS: &[&str] = &[
    "complete",
    "poll_messages",
    "propose_plan",
    "commit_plan",
    "propose_decision",
    "commit_decision",
    "mark_read",
    "send_to_parent",
    "request_permission",
    "get_plan",
    "start_step",
    "submit_step",
    "handoff_step",
    "block_step",
    "review_step",
    "review_plan",
    "vote",
    "list_decisions",
];

fn bare(tool: &str) -> &str {
    // `mcp__<server>__<tool>` is how Claude Code names an MCP tool.
    match tool.strip_prefix("mcp__") {
        Some(rest) => rest.split_once("__").map_or(rest, |(_, t)| t),
        None => tool,
    }
}

/// Whether `tool` is one of the protocol's own tools: bare, or Troupe's over MCP (another MCP
/// server's tool of the same name is not).
fn is_protocol_tool(tool: &str) -> bool {
    let name = tool.strip_prefix("mcp__troupe__").unwrap_or(tool);
    PROTOCOL_TOOLS.contains(&name)
}

fn listed(list: &[String], tool: &str) -> bool {
    list.iter().any(|p| {
        let matches = |t: &str| match p.strip_suffix('*') {
            Some(prefix) => t.starts_with(prefix),
            None => t == p,
        };
        matches(tool) || matches(bare(tool))
    })
}

impl ToolPolicy {
    /// What this policy says of `tool`, for the step named `step`.
    pub fn verdict(&self, step: &str, tool: &str) -> ToolVerdict {
        if is_protocol_tool(tool) {
            return ToolVerdict::Default;
        }
        if listed(&self.blocked_tools, tool) {
            return ToolVerdict::Deny(format!("step {step} blocks the tool {tool}"));
        }
        if listed(&self.approve_tools, tool) {
            return ToolVerdict::Ask;
        }
        if listed(&self.allowed_tools, tool) {
            return ToolVerdict::Allow;
        }
        if !self.allowed_tools.is_empty() {
            return ToolVerdict::Deny(format!(
                "step {step} allows only {}; not {tool}",
                self.allowed_tools.join(", ")
            ));
        }
        ToolVerdict::Default
    }

    /// The verdict of several policies at once (an owner working on more than one step): a
    /// denial wins, then asking a person, then allowing.
    pub fn combine(verdicts: impl IntoIterator<Item = ToolVerdict>) -> ToolVerdict {
        let mut out = ToolVerdict::Default;
        for v in verdicts {
            out = match (out, v) {
                (d @ ToolVerdict::Deny(_), _) | (_, d @ ToolVerdict::Deny(_)) => d,
                (ToolVerdict::Ask, _) | (_, ToolVerdict::Ask) => ToolVerdict::Ask,
                (ToolVerdict::Allow, _) | (_, ToolVerdict::Allow) => ToolVerdict::Allow,
                _ => ToolVerdict::Default,
            };
        }
        out
    }
}

/// One step of a plan, as proposed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StepSpec {
    /// Unique in the plan (letters, digits, `-`, `_`).
    pub id: String,
    pub title: String,
    /// The party role that carries the step out.
    pub owner_role: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// What a reviewer checks the submitted work against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acceptance: Option<String>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub tool_policy: ToolPolicy,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<Budget>,
    /// Steps that must be done before this one starts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<String>,
}

fn is_default(p: &ToolPolicy) -> bool {
    *p == ToolPolicy::default()
}

/// Why a plan, a step move or a vote was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CollabError {
    #[error("a plan needs at least one step")]
    EmptyPlan,
    #[error("step id {0:?} is not a safe name (letters, digits, - and _, at most 64)")]
    BadStepId(String),
    #[error("step {0} appears twice")]
    DuplicateStep(String),
    #[error("step {step}: the party has no role {role}")]
    UnknownRole { step: String, role: String },
    #[error("step {step} depends on {dep}, which is not in the plan")]
    UnknownDependency { step: String, dep: String },
    #[error("the plan's dependencies form a cycle: {0}")]
    Cycle(String),
    #[error("step {step} is {state}; it cannot be {action}")]
    BadMove {
        step: String,
        state: &'static str,
        action: &'static str,
    },
    #[error("step {step}: budget {field} must be a number above 0")]
    BadBudget { step: String, field: &'static str },
    #[error("a decision needs at least two distinct options")]
    TooFewOptions,
    #[error("{0:?} is not one of the decision's options")]
    UnknownOption(String),
}

/// Checks a plan: ids unique and safe, owners are roles of the party, dependencies exist and
/// form no cycle.
pub fn validate_plan<'a>(
    steps: &[StepSpec],
    roles: impl IntoIterator<Item = &'a str>,
) -> Result<(), CollabError> {
    if steps.is_empty() {
        return Err(CollabError::EmptyPlan);
    }
    let roles: BTreeSet<&str> = roles.into_iter().collect();
    let mut ids = BTreeSet::new();
    for s in steps {
        if !crate::spec::is_safe_name(&s.id) || s.id.len() > 64 {
            return Err(CollabError::BadStepId(s.id.clone()));
        }
        if !ids.insert(s.id.as_str()) {
            return Err(CollabError::DuplicateStep(s.id.clone()));
        }
        if let Some(b) = &s.budget {
            let bad = [
                (
                    "max_secs",
                    b.max_secs.is_some_and(|v| !(v.is_finite() && v > 0.0)),
                ),
                (
                    "max_cost_usd",
                    b.max_cost_usd.is_some_and(|v| !(v.is_finite() && v > 0.0)),
                ),
                ("max_tokens", b.max_tokens.is_some_and(|v| v <= 0)),
                (
                    "max_files_changed",
                    b.max_files_changed.is_some_and(|v| v <= 0),
                ),
            ];
            if let Some((field, _)) = bad.iter().find(|(_, bad)| *bad) {
                return Err(CollabError::BadBudget {
                    step: s.id.clone(),
                    field,
                });
            }
        }
        if !roles.contains(s.owner_role.as_str()) {
            return Err(CollabError::UnknownRole {
                step: s.id.clone(),
                role: s.owner_role.clone(),
            });
        }
    }
    for s in steps {
        if let Some(dep) = s.depends_on.iter().find(|d| !ids.contains(d.as_str())) {
            return Err(CollabError::UnknownDependency {
                step: s.id.clone(),
                dep: dep.clone(),
            });
        }
    }
    // Depth-first search for a back edge; the cycle is named in order.
    let deps: BTreeMap<&str, Vec<&str>> = steps
        .iter()
        .map(|s| {
            (
                s.id.as_str(),
                s.depends_on.iter().map(String::as_str).collect(),
            )
        })
        .collect();
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Open,
        Closed,
    }
    let mut marks: BTreeMap<&str, Mark> = deps.keys().map(|k| (*k, Mark::New)).collect();
    fn visit<'s>(
        at: &'s str,
        deps: &BTreeMap<&'s str, Vec<&'s str>>,
        marks: &mut BTreeMap<&'s str, Mark>,
        path: &mut Vec<&'s str>,
    ) -> Option<String> {
        marks.insert(at, Mark::Open);
        path.push(at);
        for next in deps.get(at).into_iter().flatten() {
            match marks.get(next).copied() {
                Some(Mark::Open) => {
                    let from = path.iter().position(|p| p == next).unwrap_or(0);
                    let mut cycle: Vec<&str> = path[from..].to_vec();
                    cycle.push(next);
                    return Some(cycle.join(" -> "));
                }
                Some(Mark::New) => {
                    if let Some(c) = visit(next, deps, marks, path) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        path.pop();
        marks.insert(at, Mark::Closed);
        None
    }
    let keys: Vec<&str> = deps.keys().copied().collect();
    for k in keys {
        if marks.get(k) == Some(&Mark::New)
            && let Some(cycle) = visit(k, &deps, &mut marks, &mut Vec::new())
        {
            return Err(CollabError::Cycle(cycle));
        }
    }
    Ok(())
}

pub use troupe_model::{PartyStatus, StepState};

/// What happens to a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepMove {
    /// Its owner starts (or, after a block, resumes) it.
    Start,
    /// Its owner submits the work for review.
    Submit,
    /// A reviewer accepts it against its acceptance text.
    Accept,
    /// A reviewer sends it back.
    Reopen,
    /// Its owner is blocked (or its budget tripped).
    Block,
    /// It changes owner; work goes on.
    Handoff,
}

impl StepMove {
    fn verb(self) -> &'static str {
        match self {
            StepMove::Start => "started",
            StepMove::Submit => "submitted",
            StepMove::Accept => "accepted",
            StepMove::Reopen => "reopened",
            StepMove::Block => "blocked",
            StepMove::Handoff => "handed off",
        }
    }
}

/// The step state machine: where `state` goes on `m`, or why it cannot.
pub fn step_after(step: &str, state: StepState, m: StepMove) -> Result<StepState, CollabError> {
    use StepMove as M;
    use StepState as S;
    let next = match (m, state) {
        // Not from in_progress: starting again would reset the step's budget.
        (M::Start, S::Pending | S::Reopened | S::Blocked) => S::InProgress,
        (M::Submit, S::InProgress) => S::InReview,
        (M::Accept, S::InReview) => S::Done,
        (M::Reopen, S::InReview | S::Done) => S::Reopened,
        (M::Block, S::Pending | S::InProgress | S::Reopened) => S::Blocked,
        (M::Handoff, S::Blocked | S::InProgress) => S::InProgress,
        (M::Handoff, s @ (S::Pending | S::Reopened)) => s,
        _ => {
            return Err(CollabError::BadMove {
                step: step.to_string(),
                state: state.as_str(),
                action: m.verb(),
            });
        }
    };
    Ok(next)
}

/// Where the party's collaboration is (seed 004's per-session states).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CollabState {
    Initialized,
    TeamFormed,
    Planning,
    Executing,
    Reviewing,
    Completed,
    Cancelled,
    Error,
}

/// The collaboration state from the party's status, whether a plan is being drafted, and the
/// states of the committed plan's steps (`None`: no plan committed yet).
pub fn collab_state(
    party_status: PartyStatus,
    drafting: bool,
    steps: Option<&[StepState]>,
) -> CollabState {
    match party_status {
        PartyStatus::Cancelled => return CollabState::Cancelled,
        PartyStatus::Failed => return CollabState::Error,
        PartyStatus::Completed => return CollabState::Completed,
        PartyStatus::Pending => return CollabState::Initialized,
        PartyStatus::Running => {}
    }
    match steps {
        None if drafting => CollabState::Planning,
        None => CollabState::TeamFormed,
        Some(steps) if steps.iter().all(|s| *s == StepState::Done) => CollabState::Completed,
        Some(steps)
            if steps
                .iter()
                .all(|s| matches!(s, StepState::Done | StepState::InReview)) =>
        {
            CollabState::Reviewing
        }
        Some(_) => CollabState::Executing,
    }
}

/// The steps of `plan` whose dependencies are all done, by state.
pub fn ready(
    plan: &[StepSpec],
    state_of: impl Fn(&str) -> Option<StepState>,
) -> impl Iterator<Item = &StepSpec> {
    plan.iter().filter(move |s| {
        s.depends_on
            .iter()
            .all(|d| state_of(d) == Some(StepState::Done))
    })
}

/// The outcome of a decision's votes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tally {
    /// One option has the most votes (`tie_broken`: by the tie-breaker's vote).
    Chosen { option: String, tie_broken: bool },
    /// These options share the most votes and nobody has broken the tie yet.
    Tied(Vec<String>),
}

/// Counts `votes` (voter, option) over `options`; a tie is broken by the tie-breaker's vote when
/// it is one of the tied options. No votes at all is a tie of every option.
pub fn tally(options: &[String], votes: &[(String, String)], tie_breaker: Option<&str>) -> Tally {
    let mut counts: BTreeMap<&str, usize> = options.iter().map(|o| (o.as_str(), 0)).collect();
    for (_, option) in votes {
        if let Some(c) = counts.get_mut(option.as_str()) {
            *c += 1;
        }
    }
    let top = counts.values().copied().max().unwrap_or(0);
    // In the options' own order, not alphabetical.
    let leaders: Vec<String> = options
        .iter()
        .filter(|o| counts.get(o.as_str()) == Some(&top))
        .cloned()
        .collect();
    if let [only] = leaders.as_slice() {
        return Tally::Chosen {
            option: only.clone(),
            tie_broken: false,
        };
    }
    let breaker_choice = tie_breaker.and_then(|b| {
        votes
            .iter()
            .find(|(voter, _)| voter == b)
            .map(|(_, o)| o.clone())
    });
    match breaker_choice {
        Some(o) if leaders.contains(&o) => Tally::Chosen {
            option: o,
            tie_broken: true,
        },
        _ => Tally::Tied(leaders),
    }
}

/// Checks a decision's options: at least two, distinct, none empty.
pub fn validate_options(options: &[String]) -> Result<(), CollabError> {
    let distinct: BTreeSet<&str> = options.iter().map(|o| o.trim()).collect();
    if options.len() < 2 || distinct.len() != options.len() || distinct.contains("") {
        return Err(CollabError::TooFewOptions);
    }
    Ok(())
}

/// A committed decision, as its ADR records it.
#[derive(Debug, Clone)]
pub struct AdrInput<'a> {
    pub number: u32,
    pub topic: &'a str,
    pub date: &'a str,
    pub party: &'a str,
    pub evidence: Option<&'a str>,
    pub options: &'a [String],
    pub chosen: &'a str,
    /// How it was decided ("majority of 3 votes", "tie broken by the leader", …).
    pub how: &'a str,
    /// (voter, option, rationale).
    pub votes: &'a [(String, String, String)],
}

/// `docs/adr/NNNN-<slug>.md`'s file name for decision `number` on `topic`.
pub fn adr_file_name(number: u32, topic: &str) -> String {
    let mut slug = String::new();
    for c in topic.chars() {
        if c.is_ascii_alphanumeric() {
            slug.push(c.to_ascii_lowercase());
        } else if !slug.ends_with('-') && !slug.is_empty() {
            slug.push('-');
        }
        if slug.len() >= 60 {
            break;
        }
    }
    let slug = slug.trim_end_matches('-');
    let slug = if slug.is_empty() { "decision" } else { slug };
    format!("{number:04}-{slug}.md")
}

/// The ADR's markdown, in the common format (Michael Nygard's: title, status, context,
/// decision, consequences), with the options and the votes and their rationale.
pub fn adr_markdown(a: &AdrInput<'_>) -> String {
    let mut out = format!(
        "# {}. {}\n\nDate: {}\n\n## Status\n\nAccepted\n\n## Context\n\nDecided by the party {} \
         ({}).\n",
        a.number, a.topic, a.date, a.party, a.how
    );
    if let Some(e) = a.evidence.filter(|e| !e.trim().is_empty()) {
        out.push_str(&format!("\n{}\n", e.trim()));
    }
    out.push_str("\n## Options\n\n");
    for o in a.options {
        let n = a.votes.iter().filter(|(_, v, _)| v == o).count();
        let mark = if o == a.chosen { " (chosen)" } else { "" };
        out.push_str(&format!(
            "- {o}{mark}: {n} vote{}\n",
            if n == 1 { "" } else { "s" }
        ));
    }
    out.push_str(&format!("\n## Decision\n\n{}\n", a.chosen));
    out.push_str(&format!(
        "\n## Consequences\n\nThe party proceeds with \"{}\"; the other options are set aside.\n",
        a.chosen
    ));
    out.push_str("\n## Votes\n\n");
    if a.votes.is_empty() {
        out.push_str("No votes were cast.\n");
    }
    for (voter, option, rationale) in a.votes {
        let why = rationale.trim();
        if why.is_empty() {
            out.push_str(&format!("- {voter}: {option}\n"));
        } else {
            out.push_str(&format!("- {voter}: {option} ({why})\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests;
