//! Playbooks: what a party member is told of its part in the team's protocol. The texts live in
//! the repository's `playbooks/` folder (built in here), a project may override or add one in
//! `.troupe/playbooks/`; a member's prompt is its runner's way to call the tools, the common
//! playbook, its role's, its own instructions and task, and the party's state as its turn starts.

use std::fmt::Write as _;
use std::path::Path;

use troupe_engine::RoleDefinition;
use troupe_model::{DecisionStatus, PlanStatus, StepState};
use troupe_store::Store;

/// The playbooks built into the binary, by name.
pub const BUILT_IN: &[(&str, &str)] = &[
    ("common", include_str!("../../../../playbooks/common.md")),
    ("leader", include_str!("../../../../playbooks/leader.md")),
    (
        "developer",
        include_str!("../../../../playbooks/developer.md"),
    ),
    (
        "reviewer",
        include_str!("../../../../playbooks/reviewer.md"),
    ),
];

/// The largest project playbook read (a bigger one is refused).
const MAX_PLAYBOOK: u64 = 16 * 1024;
/// The most plan steps and decisions the state lists.
const MAX_LISTED: usize = 30;

/// How a member reaches Troupe's tools, by its runner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tools {
    /// An agent CLI with Troupe's MCP server.
    Mcp,
    /// A command that can run `troupe call` (a process member, an ACP agent without MCP).
    Shell,
    /// An executor plugin, whose tools are Troupe's.
    Executor,
}

impl Tools {
    fn line(self) -> &'static str {
        match self {
            Tools::Mcp => {
                "Troupe's tools are on its MCP server `troupe`; the tools named below are those."
            }
            Tools::Shell => {
                "Call Troupe's tools from your shell: `troupe call <tool> '<JSON params>'` (for \
                 example `troupe call get_plan '{\"party_id\": \"…\"}'`); it prints the result as \
                 JSON."
            }
            Tools::Executor => "Troupe's tools named below are among your tools.",
        }
    }
}

/// Whether a prompt starts with a playbook's word on the tools (a runner then adds none).
pub fn tells_tools(prompt: &str) -> bool {
    [Tools::Mcp, Tools::Shell, Tools::Executor]
        .iter()
        .any(|t| prompt.starts_with(t.line()))
}

/// Which playbook a role's members get (`None`: none).
pub fn of_role(name: &str, role: &RoleDefinition) -> Option<String> {
    match role.playbook.as_deref() {
        Some("none") => None,
        Some(chosen) => Some(chosen.to_string()),
        None if role.is_leader => Some("leader".into()),
        None if name.to_ascii_lowercase().contains("review") => Some("reviewer".into()),
        None => Some("developer".into()),
    }
}

/// A playbook's text: the project's `.troupe/playbooks/<name>.md`, else the built-in one.
pub fn text(repo_root: &Path, name: &str) -> Result<String, String> {
    if !troupe_engine::is_safe_name(name) {
        return Err(format!("{name:?} is not a playbook name"));
    }
    let path = repo_root
        .join(".troupe/playbooks")
        .join(format!("{name}.md"));
    match crate::project::read_project_file(&path, MAX_PLAYBOOK)? {
        Some(bytes) => Ok(String::from_utf8_lossy(&bytes).into_owned()),
        None => BUILT_IN
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, t)| (*t).to_string())
            .ok_or_else(|| {
                format!(
                    "no playbook {name:?} (built in: {}; a project adds one as {})",
                    BUILT_IN
                        .iter()
                        .map(|(n, _)| *n)
                        .collect::<Vec<_>>()
                        .join(", "),
                    path.display()
                )
            }),
    }
}

/// Who a member is, for the playbooks' `{{…}}`.
pub struct Seat<'a> {
    pub party_id: &'a str,
    pub role: &'a str,
    pub index: u32,
    /// The party's roles, in order, each with its part (its playbook's name, `merge queue`, or
    /// none): at most `MAX_ROLES_NAMED` of them (`named_roles`).
    pub roles: Vec<(String, Option<String>)>,
    /// The party's roles left unnamed past that.
    pub more_roles: usize,
}

/// At most this many roles are named in a member's prompt (`{{roles}}`): a party of thousands
/// of roles would otherwise give every member a prompt the size of the party.
pub const MAX_ROLES_NAMED: usize = 24;

/// The roles a member's prompt names, in the party's order: every part other than a
/// developer's first (the leader, reviewers, the merge queue: whom a member deals with), then
/// developers, up to `MAX_ROLES_NAMED`; and how many are left out.
pub fn named_roles(
    all: impl IntoIterator<Item = (String, Option<String>)>,
) -> (Vec<(String, Option<String>)>, usize) {
    let all: Vec<(String, Option<String>)> = all.into_iter().collect();
    let developer = |part: &Option<String>| part.as_deref() == Some("developer");
    let mut chosen: Vec<usize> = (0..all.len()).filter(|i| !developer(&all[*i].1)).collect();
    chosen.truncate(MAX_ROLES_NAMED);
    let room = MAX_ROLES_NAMED - chosen.len();
    chosen.extend((0..all.len()).filter(|i| developer(&all[*i].1)).take(room));
    chosen.sort_unstable();
    let more = all.len() - chosen.len();
    let mut all: Vec<Option<(String, Option<String>)>> = all.into_iter().map(Some).collect();
    (
        chosen.into_iter().filter_map(|i| all[i].take()).collect(),
        more,
    )
}

impl Seat<'_> {
    fn fill(&self, text: &str) -> String {
        let roles = self
            .roles
            .iter()
            .map(|(r, part)| match part {
                Some(part) => format!("{r} ({part})"),
                None => r.clone(),
            })
            .collect::<Vec<_>>()
            .join(", ");
        let roles = if self.more_roles > 0 {
            format!(
                "{roles}, and {} more (get_party_status lists every role)",
                self.more_roles
            )
        } else {
            roles
        };
        text.replace("{{member}}", &format!("{}#{}", self.role, self.index))
            .replace("{{role}}", self.role)
            .replace("{{party_id}}", self.party_id)
            .replace("{{roles}}", &roles)
    }
}

/// The head of a member's prompt: how it calls the tools, the common playbook and its role's.
pub fn compose(
    repo_root: &Path,
    seat: &Seat<'_>,
    playbook: Option<&str>,
    tools: Tools,
) -> Result<String, String> {
    let Some(playbook) = playbook else {
        return Ok(String::new());
    };
    let mut out = format!("{}\n\n", tools.line());
    for name in ["common", playbook] {
        out.push_str(seat.fill(&text(repo_root, name)?).trim_end());
        out.push_str("\n\n");
    }
    Ok(out)
}

/// The party's state as a member's turn starts: the plan, the member's own steps and their
/// reviews, the steps waiting for a review, and the open decisions (its votes among them).
pub fn state(store: &Store, party_id: &str, role: &str) -> String {
    let mut out = String::from("## The party now\n");
    let plans = store.plans(party_id).unwrap_or_default();
    let steps = store.plan_steps(party_id).unwrap_or_default();
    let committed = plans
        .iter()
        .rev()
        .find(|p| p.status == PlanStatus::Committed);
    let draft = plans.iter().rev().find(|p| p.status == PlanStatus::Draft);
    match committed {
        None => out.push_str("No plan is committed yet.\n"),
        Some(plan) => {
            let _ = writeln!(
                out,
                "The committed plan (v{}, {} steps):",
                plan.version,
                steps.len()
            );
            for step in steps.iter().take(MAX_LISTED) {
                let title = step.spec["title"].as_str().unwrap_or_default();
                let owner = if step.owner_role == role {
                    "you".to_string()
                } else {
                    step.owner_role.clone()
                };
                let _ = writeln!(out, "- {} [{}] {title} ({owner})", step.step_id, step.state);
            }
        }
    }
    if let Some(d) = draft {
        let reviews = d
            .reviews
            .iter()
            .filter(|r| r.version == d.version)
            .map(|r| {
                format!(
                    "{} {}{}",
                    r.reviewer,
                    r.verdict,
                    r.comments
                        .as_deref()
                        .map(|c| format!(": {c}"))
                        .unwrap_or_default()
                )
            })
            .collect::<Vec<_>>();
        let _ = writeln!(
            out,
            "A draft plan v{} by {} waits: reviews {}.",
            d.version,
            d.proposed_by.as_deref().unwrap_or("?"),
            if reviews.is_empty() {
                "none yet".to_string()
            } else {
                reviews.join("; ")
            }
        );
    }
    let mine: Vec<_> = steps
        .iter()
        .filter(|s| s.owner_role == role && s.state != StepState::Done)
        .collect();
    for step in mine.iter().take(MAX_LISTED) {
        let _ = write!(out, "Your step {} is {}", step.step_id, step.state);
        if let Some(a) = step.spec["acceptance"].as_str() {
            let _ = write!(out, "; acceptance: {a}");
        }
        if let Some(deps) = step.spec["depends_on"].as_array().filter(|d| !d.is_empty()) {
            let deps: Vec<_> = deps.iter().filter_map(|d| d.as_str()).collect();
            let _ = write!(out, "; after: {}", deps.join(", "));
        }
        if let Some(r) = &step.reason
            && matches!(
                step.state,
                StepState::Reopened | StepState::Blocked | StepState::Pending
            )
        {
            let _ = write!(out, "; last word: {r}");
        }
        out.push_str(".\n");
    }
    let in_review: Vec<_> = steps
        .iter()
        .filter(|s| s.state == StepState::InReview && s.owner_role != role)
        .map(|s| format!("{} ({})", s.step_id, s.owner_role))
        .collect();
    if !in_review.is_empty() {
        let _ = writeln!(out, "Waiting for a review: {}.", in_review.join(", "));
    }
    let decisions = store.list_decisions(Some(party_id)).unwrap_or_default();
    for d in decisions
        .iter()
        .filter(|d| d.status != DecisionStatus::Committed)
        .take(MAX_LISTED)
    {
        let votes_here = d.voters.iter().any(|v| v == role);
        let voted = d.votes.iter().any(|v| v.voter == role);
        let _ = writeln!(
            out,
            "Decision {} ({}) on {:?}: options {}; {}.",
            d.decision_id,
            d.status,
            d.topic,
            d.options.join(" | "),
            match (votes_here, voted) {
                (true, false) => "your vote is awaited",
                (true, true) => "you voted",
                _ => "you do not vote on it",
            }
        );
    }
    for d in decisions
        .iter()
        .filter(|d| d.status == DecisionStatus::Committed)
        .rev()
        .take(5)
    {
        let _ = writeln!(
            out,
            "Decided: {} → {}.",
            d.topic,
            d.chosen.as_deref().unwrap_or("?")
        );
    }
    out
}

#[cfg(test)]
mod tests;
