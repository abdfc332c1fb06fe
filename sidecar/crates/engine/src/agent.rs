//! Agent definitions (seed 001): what runs (runner and command or model), how it is isolated,
//! what its workflow allows, and the shape its `complete` result must have. Pure data and
//! validation.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How a member's working directory is isolated.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Isolation {
    /// The project's own checkout.
    #[default]
    None,
    /// A git worktree on branch `troupe/<party>/<role>-<i>`.
    Worktree,
    /// A local clone.
    Clone,
}

/// Tool policy and the completion contract.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Workflow {
    /// Only these tools (all when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_tools: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocked_tools: Vec<String>,
    /// Fields `complete`'s `artifacts` must have: name → JSON type (string, integer, number,
    /// boolean, array, object).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_schema: Option<BTreeMap<String, String>>,
    /// Tools whose calls need a person's approval (executor runs; default `write_file` and
    /// `run_command`; approval rules still apply).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approve_tools: Option<Vec<String>>,
}

impl Workflow {
    /// Whether the policy lets a run call `tool` at all.
    pub fn permits(&self, tool: &str) -> Result<(), String> {
        if self.blocked_tools.iter().any(|t| t == tool) {
            return Err(format!("tool {tool} is blocked by this agent's workflow"));
        }
        if let Some(allowed) = &self.allowed_tools
            && !allowed.iter().any(|t| t == tool)
        {
            return Err(format!(
                "tool {tool} is not among this agent's allowed tools ({})",
                allowed.join(", ")
            ));
        }
        Ok(())
    }

    /// Whether a call of `tool` needs a person's approval.
    pub fn needs_approval(&self, tool: &str) -> bool {
        match &self.approve_tools {
            Some(list) => list.iter().any(|t| t == tool),
            None => matches!(tool, "write_file" | "run_command"),
        }
    }
}

/// An agent definition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentDefinition {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// `process` (a command), `wasm:<executor plugin>` or `acp:<agent>` (an Agent Client Protocol
    /// agent: `command`, or `claude-agent-acp`, `codex-acp`, `gemini --acp` for claude, codex, gemini).
    #[serde(default = "process")]
    pub runner: String,
    /// argv for the `process` runner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// What it is good at (routers match requests against these).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capabilities: Vec<String>,
    /// Config for a `wasm:` runner's plugin, over the plugin's defaults and the user's grant
    /// config (e.g. `base_url`, `model`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugin_config: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    #[serde(default)]
    pub workflow: Workflow,
    #[serde(default)]
    pub isolation: Isolation,
    /// Seconds before a run is stopped and counted as `timeout` (none: no limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_turns: Option<u32>,
    /// Whether runs of this agent may start agents of their own.
    #[serde(default)]
    pub allow_nested_agents: bool,
    /// Deepest session depth its runs may start (default 1: subagents cannot start subagents).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_agent_depth: Option<u32>,
    /// Seconds a permission request of this agent waits for a person before it is denied
    /// (default 300).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_timeout_secs: Option<f64>,
    /// Extra environment for the process.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// How an `acp:` runner talks to its agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acp: Option<AcpOptions>,
    /// How the `land` runner lands the party's work (a merge queue as a DAG node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub land: Option<LandOptions>,
    /// Shell commands run, in order, in a member's new worktree or clone before it starts
    /// (installing dependencies); their output goes on the timeline and a failure is a crash.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub setup: Vec<String>,
    /// Handoff (seed 002): when a run completes, its output is this agent's input, and the
    /// answer is that agent's (chains resolve at run time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handoff: Option<String>,
    /// Router (seed 002): a single-turn step picks one of `agents`, which then runs on the
    /// original input and gives the answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub router: Option<RouterSpec>,
    /// Advisors (seed 002): agents run in parallel on the same input first; this agent then runs
    /// on the enriched message (`## ORIGINAL USER REQUEST` / `## ANALYSIS GATHERED`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub advisors: Vec<String>,
    /// Seconds the advisors get; one still running then leaves a placeholder (default: no limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub advisor_timeout_secs: Option<f64>,
    /// What a run may spend before it is stopped and its member paused (a circuit breaker, not
    /// a crash): tokens and cost its executor or agent reports, its subagents' included. Wall
    /// time is `timeout_secs`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<Budget>,
    /// Team (seed 002): members deliberate in rounds on a shared channel; the coordinator owns
    /// the final answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team: Option<TeamSpec>,
    /// Run on a remote worker of this pool (`troupe worker --pool <name>`, through the hub's
    /// NATS), not on this machine: a process runner in its own checkout (isolation worktree or
    /// clone), whose code travels as git bundles.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    /// What its box lets through beyond the defaults: more paths to write or hide, hosts its
    /// egress may reach (the core's `sandbox`).
    #[serde(default, skip_serializing_if = "BoxSettings::is_empty")]
    pub sandbox: BoxSettings,
    /// Set by the daemon on a router's step (its only tool is `route_to`, with these
    /// candidates); never in a stored definition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route_only: Option<Vec<String>>,
    /// Set by the daemon on a team member's turn: `member` or `coordinator` (which may also
    /// `conclude_team`); never in a stored definition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team_seat: Option<String>,
}

/// What a member's box lets through beyond its defaults. Paths may start with `~/` (the
/// member's home). Only the person's definitions and config set these; a member's overrides of
/// its subagent cannot.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BoxSettings {
    /// More paths it may write (created when missing), beyond its checkout, its private temp
    /// dir and its CLI's state dirs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub writable: Vec<String>,
    /// Default state dirs it does not get to write (e.g. `~/.claude`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_writable: Vec<String>,
    /// More paths it may not read, beyond the default secrets.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hidden: Vec<String>,
    /// Hosts its egress may reach beyond its CLI's model API hosts: `host`, `host:port`,
    /// `*.domain`, `127.0.0.1:PORT` (a loopback service, such as a local model server).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_hosts: Vec<String>,
}

impl BoxSettings {
    pub fn is_empty(&self) -> bool {
        self == &BoxSettings::default()
    }
}

/// Limits on what one run (or one plan step) may spend. A budget that trips pauses the member:
/// a circuit breaker, not a crash.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    /// Wall time, in seconds (a run's own `timeout_secs` still ends it as a crash).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_secs: Option<f64>,
    /// Input and output tokens together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<f64>,
    /// Files changed in the member's checkout (committed on its branch or not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_files_changed: Option<i64>,
}

/// What a run or a step has spent so far; a figure the caller did not measure is `None`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Spent {
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cost_usd: f64,
    pub secs: Option<f64>,
    pub files_changed: Option<i64>,
}

impl Budget {
    /// Why `spent` is over this budget, if it is.
    pub fn exceeded(&self, spent: &Spent) -> Option<String> {
        let tokens = spent.input_tokens.saturating_add(spent.output_tokens);
        if let Some(max) = self.max_tokens
            && tokens > max
        {
            return Some(format!("{tokens} tokens spent, the budget is {max}"));
        }
        if let Some(max) = self.max_cost_usd
            && spent.cost_usd > max
        {
            return Some(format!(
                "${:.4} spent, the budget is ${max:.4}",
                spent.cost_usd
            ));
        }
        if let (Some(max), Some(secs)) = (self.max_secs, spent.secs)
            && secs > max
        {
            return Some(format!("{secs:.0} s spent, the budget is {max} s"));
        }
        if let (Some(max), Some(files)) = (self.max_files_changed, spent.files_changed)
            && files > max
        {
            return Some(format!("{files} files changed, the budget is {max}"));
        }
        None
    }

    /// Whether checking this budget needs the files changed counted (a git walk).
    pub fn counts_files(&self) -> bool {
        self.max_files_changed.is_some()
    }
}

/// A team: who deliberates, who concludes, and when it ends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TeamSpec {
    /// The members (a member with a handoff chain speaks through its chain's last agent).
    pub members: Vec<String>,
    /// The member that owns the final answer (it sits at the table too).
    pub coordinator: String,
    #[serde(default)]
    pub termination: Termination,
    /// Rounds before the transcript goes to the coordinator (default 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_rounds: Option<u32>,
}

/// When a team stops deliberating.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Termination {
    /// Every member voted to conclude (`vote_conclude`); then the coordinator answers.
    #[default]
    Consensus,
    /// After `max_rounds` rounds the coordinator answers from the transcript.
    MaxRounds,
    /// The coordinator concludes (`conclude_team`) when it sees fit.
    CoordinatorDecides,
}

/// How a router chooses: `llm` (the router agent's own run, with `route_to` as its one tool) or
/// `plugin:<router>` (a router plugin).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RouterSpec {
    /// The agents it may choose from.
    pub agents: Vec<String>,
    #[serde(default = "llm")]
    pub via: String,
}

fn llm() -> String {
    "llm".into()
}

/// Where the merge queue delivers the integrated, tested work.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LandTo {
    /// Move the target branch in the person's repository.
    #[default]
    Branch,
    /// Push a branch to the project's forge and open (or update) a pull request on the
    /// target, with the party's delivery summary; the target is not moved.
    PullRequest,
}

impl LandTo {
    pub fn is_branch(&self) -> bool {
        *self == LandTo::Branch
    }
}

/// How member branches join the target when a party's work lands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LandStrategy {
    /// A fast-forward when possible, else a merge commit per member.
    #[default]
    Merge,
    /// Each member's commits replayed on top (linear history, authors kept).
    Rebase,
    /// One commit per member.
    Squash,
}

/// Options of the `land` runner: the party's member branches go through the merge queue when
/// this member's turn comes (after the roles it waits for).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LandOptions {
    /// The branch to land on (default: the branch the project has out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    #[serde(default)]
    pub strategy: LandStrategy,
    /// Run in the integration worktree; the target moves only if it exits 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test_command: Option<String>,
    /// Seconds the test command may take (default 600).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test_timeout_secs: Option<u64>,
    /// `pull_request`: deliver as a pull request on the project's forge.
    #[serde(default, skip_serializing_if = "LandTo::is_branch")]
    pub to: LandTo,
}

/// Options of the `acp:<agent>` runner (an Agent Client Protocol agent over stdio).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AcpOptions {
    /// Authenticate with this method, one the agent lists in `authMethods` (e.g. `gateway`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_method: Option<String>,
    /// For `gateway`: the model server the agent is to use instead of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// Attach Troupe's MCP tools (`troupe mcp`) to the agent's session (default true).
    #[serde(default = "yes")]
    pub mcp: bool,
    /// Seconds mid-turn without a word from the agent (and no approval pending) after which
    /// it counts as hung and is stopped as crashed (default: only the run's timeout).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_secs: Option<f64>,
    /// Offer the agent the client's file system (`fs/*`: Troupe reads and writes for it, within
    /// its checkout). Default: yes, except for `acp:gemini`, whose CLI cannot create a new file
    /// through `fs/*` and then uses its own file tools: it still asks Troupe before it writes,
    /// but Troupe no longer confines those writes to the checkout (a path outside is flagged on
    /// its approval).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fs: Option<bool>,
}

impl AcpOptions {
    /// Whether the `acp:<agent>` runner offers `fs/*` to `agent` (see `fs`).
    pub fn offers_fs(&self, agent: &str) -> bool {
        self.fs.unwrap_or(agent != "gemini")
    }
}

fn yes() -> bool {
    true
}

impl Default for AcpOptions {
    fn default() -> AcpOptions {
        AcpOptions {
            auth_method: None,
            base_url: None,
            mcp: true,
            idle_secs: None,
            fs: None,
        }
    }
}

/// The command an `acp:<agent>` runner starts when the definition gives none.
pub fn acp_default_command(agent: &str) -> Vec<String> {
    match agent {
        "claude" => vec!["claude-agent-acp".into()],
        "codex" => vec!["codex-acp".into()],
        "gemini" => vec!["gemini".into(), "--acp".into()],
        other => vec![other.into()],
    }
}

fn process() -> String {
    "process".into()
}

/// Runners this build can run.
pub const RUNNERS: &[&str] = &["process", "wasm:<executor plugin>", "acp:<agent>"];

/// The longest timeout a definition (or a run) may ask for: a year, in seconds. Larger values
/// do not fit the daemon's clocks (1e300 s panicked turning into a `Duration`).
pub const MAX_TIMEOUT_SECS: f64 = 365.0 * 24.0 * 3600.0;

/// Whether `t` is a usable timeout in seconds: positive, finite and at most a year.
pub fn valid_timeout(t: f64) -> bool {
    t > 0.0 && t <= MAX_TIMEOUT_SECS
}

impl AgentDefinition {
    /// Checks the definition can run here.
    pub fn validate(&self) -> Result<(), String> {
        if !crate::names::is_safe_name(&self.name) {
            return Err(format!(
                "agent name {:?} is not allowed (use letters, digits, '-' and '_')",
                self.name
            ));
        }
        match self.runner.as_str() {
            "process" => match &self.command {
                Some(argv) if !argv.is_empty() && !argv[0].is_empty() => {}
                _ => {
                    return Err(
                        "the process runner needs a non-empty `command` (an argv array)".into(),
                    );
                }
            },
            "land" => {
                if self.command.is_some() {
                    return Err("the land runner runs no command; remove `command`".into());
                }
                if let Some(c) = self.land.as_ref().and_then(|l| l.test_command.as_deref())
                    && c.trim().is_empty()
                {
                    return Err("land.test_command must not be empty".into());
                }
            }
            other if other.starts_with("wasm:") => {
                let plugin = &other[5..];
                if plugin.is_empty()
                    || !plugin
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                {
                    return Err(format!(
                        "runner {other:?} must name an executor plugin: wasm:<name> with a-z, 0-9 and '-'"
                    ));
                }
                if let Some(c) = &self.plugin_config
                    && !c.is_object()
                {
                    return Err("plugin_config must be a JSON object".into());
                }
            }
            other if other.starts_with("acp:") => {
                let agent = &other[4..];
                if agent.is_empty()
                    || !agent
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
                {
                    return Err(format!(
                        "runner {other:?} must name an ACP agent: acp:<name> (claude, codex, \
                         gemini or any name with a `command`)"
                    ));
                }
                if matches!(&self.command, Some(argv) if argv.is_empty() || argv[0].is_empty()) {
                    return Err("`command` must be a non-empty argv array".into());
                }
                if let Some(t) = self.acp.as_ref().and_then(|a| a.idle_secs)
                    && !(t > 0.0 && t.is_finite())
                {
                    return Err(format!("acp.idle_secs must be a positive number, not {t}"));
                }
            }
            other => {
                return Err(format!(
                    "unknown runner {other:?} (expected process, land, wasm:<plugin> or acp:<agent>)"
                ));
            }
        }
        if let Some(pool) = &self.pool {
            if !crate::names::is_safe_name(pool) {
                return Err(format!(
                    "pool {pool:?} is not allowed (use letters, digits, '-' and '_')"
                ));
            }
            if self.runner != "process" {
                return Err(format!(
                    "a pool runs process members; runner {:?} runs on this machine only",
                    self.runner
                ));
            }
            if self.isolation == Isolation::None {
                return Err(
                    "a pool's member works in its own checkout: set isolation to worktree or clone"
                        .into(),
                );
            }
        }
        if self.land.is_some() && self.runner != "land" {
            return Err(format!(
                "`land` options go with runner \"land\", not {:?}",
                self.runner
            ));
        }
        if self.setup.iter().any(|c| c.trim().is_empty()) {
            return Err("a setup command must not be empty".into());
        }
        if !self.setup.is_empty() && self.isolation == Isolation::None {
            return Err(
                "setup runs in a member's own checkout: set isolation to worktree or clone".into(),
            );
        }
        if let Some(t) = self.timeout_secs
            && !valid_timeout(t)
        {
            return Err(format!(
                "timeout_secs must be a positive number of seconds up to {MAX_TIMEOUT_SECS} (a year), not {t}"
            ));
        }
        if let Some(t) = self.approval_timeout_secs
            && !valid_timeout(t)
        {
            return Err(format!(
                "approval_timeout_secs must be a positive number of seconds up to {MAX_TIMEOUT_SECS} (a year), not {t}"
            ));
        }
        if self.route_only.is_some() {
            return Err(
                "route_only is set by the daemon on a router's step; a definition cannot set it"
                    .into(),
            );
        }
        if let Some(t) = self.advisor_timeout_secs
            && !valid_timeout(t)
        {
            return Err(format!(
                "advisor_timeout_secs must be a positive number of seconds up to {MAX_TIMEOUT_SECS} (a year), not {t}"
            ));
        }
        if let Some(schema) = &self.workflow.completion_schema {
            for (field, ty) in schema {
                if !TYPES.contains(&ty.as_str()) {
                    return Err(format!(
                        "completion_schema field {field:?} has type {ty:?}; expected one of {}",
                        TYPES.join(", ")
                    ));
                }
            }
        }
        Ok(())
    }

    /// Whether runs of this agent are a pattern (handoff, router, advisors, team) around its
    /// own run.
    pub fn has_pattern(&self) -> bool {
        self.handoff.is_some()
            || self.router.is_some()
            || !self.advisors.is_empty()
            || self.team.is_some()
    }

    /// This agent's own run, without its patterns: what one step of a pattern runs.
    pub fn plain(&self) -> AgentDefinition {
        AgentDefinition {
            handoff: None,
            router: None,
            advisors: Vec::new(),
            advisor_timeout_secs: None,
            team: None,
            route_only: None,
            team_seat: None,
            ..self.clone()
        }
    }

    /// The deepest session depth this agent's runs may start agents at.
    pub fn nesting_limit(&self) -> u32 {
        if self.allow_nested_agents {
            self.max_agent_depth.unwrap_or(2).max(1)
        } else {
            1
        }
    }

    /// Checks `complete`'s artifacts against the workflow's completion schema.
    pub fn check_completion(&self, artifacts: &BTreeMap<String, Value>) -> Result<(), String> {
        let Some(schema) = &self.workflow.completion_schema else {
            return Ok(());
        };
        for (field, ty) in schema {
            let Some(value) = artifacts.get(field) else {
                return Err(format!(
                    "artifacts.{field} is missing (the workflow requires a {ty})"
                ));
            };
            let ok = match ty.as_str() {
                "string" => value.is_string(),
                "integer" => value.is_i64() || value.is_u64(),
                "number" => value.is_number(),
                "boolean" => value.is_boolean(),
                "array" => value.is_array(),
                "object" => value.is_object(),
                _ => false,
            };
            if !ok {
                return Err(format!("artifacts.{field} must be a {ty}, not {value}"));
            }
        }
        Ok(())
    }
}

const TYPES: &[&str] = &["string", "integer", "number", "boolean", "array", "object"];

/// What a person changes of an agent for one run (`start_agent`) or one party role (a role's
/// `overrides`, `launch_party`'s `roles`): its model, runner, isolation, timeout, budget and
/// tool policy. A member starting a subagent may only narrow (`AgentOverrides::narrows`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentOverrides {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Another runner: `process`, `wasm:<executor plugin>`, `acp:<agent>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runner: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolation: Option<Isolation>,
    /// Seconds; 0 is no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<Budget>,
    /// Only these tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_tools: Option<Vec<String>>,
    /// These tools never (added to the agent's own).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocked_tools: Vec<String>,
    /// Tools whose calls need a person's approval (replaces the agent's list).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approve_tools: Option<Vec<String>>,
}

impl AgentOverrides {
    /// `agent` with these changes, checked as a definition.
    pub fn apply(&self, agent: &AgentDefinition) -> Result<AgentDefinition, String> {
        let mut a = agent.clone();
        if let Some(m) = &self.model {
            a.model = Some(m.clone());
        }
        if let Some(r) = &self.runner {
            a.runner = r.clone();
        }
        if let Some(i) = self.isolation {
            a.isolation = i;
        }
        match self.timeout_secs {
            Some(0.0) => a.timeout_secs = None,
            Some(t) if valid_timeout(t) => a.timeout_secs = Some(t),
            Some(t) => {
                return Err(format!(
                    "timeout_secs must be 0 (no limit) or a positive number of seconds up to {MAX_TIMEOUT_SECS}, not {t}"
                ));
            }
            None => {}
        }
        if let Some(b) = &self.budget {
            a.budget = Some(b.clone());
        }
        if let Some(t) = &self.allowed_tools {
            a.workflow.allowed_tools = Some(t.clone());
        }
        for t in &self.blocked_tools {
            if !a.workflow.blocked_tools.contains(t) {
                a.workflow.blocked_tools.push(t.clone());
            }
        }
        if let Some(t) = &self.approve_tools {
            a.workflow.approve_tools = Some(t.clone());
        }
        a.validate()
            .map_err(|e| format!("agent {} with these overrides: {e}", a.name))?;
        Ok(a)
    }

    /// Whether these only narrow what `agent` may do (all a member may ask of its subagent):
    /// another model, a shorter timeout, a lower budget, fewer tools; not another runner or
    /// isolation, nor fewer approvals.
    pub fn narrows(&self, agent: &AgentDefinition) -> Result<(), String> {
        let refuse = |what: &str| Err(format!("a member may not change a subagent's {what}"));
        if self.runner.as_ref().is_some_and(|r| *r != agent.runner) {
            return refuse("runner");
        }
        if self.isolation.is_some_and(|i| i != agent.isolation) {
            return refuse("isolation");
        }
        if self.approve_tools.is_some() {
            return refuse("approved tools");
        }
        if let Some(t) = self.timeout_secs {
            let longer = match agent.timeout_secs {
                Some(limit) => t == 0.0 || t > limit,
                None => false,
            };
            if longer {
                return refuse("timeout to a longer one");
            }
        }
        if let (Some(wanted), Some(allowed)) = (&self.allowed_tools, &agent.workflow.allowed_tools)
            && wanted.iter().any(|t| !allowed.contains(t))
        {
            return refuse("tools to ones its agent is not allowed");
        }
        if let (Some(b), Some(limit)) = (&self.budget, &agent.budget) {
            let over = |x: Option<f64>, l: Option<f64>| {
                matches!((x, l), (None, Some(_))) || matches!((x, l), (Some(x), Some(l)) if x > l)
            };
            let as_f = |v: Option<i64>| v.map(|v| v as f64);
            if over(b.max_secs, limit.max_secs)
                || over(as_f(b.max_tokens), as_f(limit.max_tokens))
                || over(b.max_cost_usd, limit.max_cost_usd)
                || over(as_f(b.max_files_changed), as_f(limit.max_files_changed))
            {
                return refuse("budget to a larger one");
            }
        }
        Ok(())
    }
}

impl AgentOverrides {
    /// These, with `later`'s set fields over them (a launch's over a role's own).
    pub fn then(&self, later: &AgentOverrides) -> AgentOverrides {
        let mut blocked = self.blocked_tools.clone();
        for t in &later.blocked_tools {
            if !blocked.contains(t) {
                blocked.push(t.clone());
            }
        }
        AgentOverrides {
            model: later.model.clone().or_else(|| self.model.clone()),
            runner: later.runner.clone().or_else(|| self.runner.clone()),
            isolation: later.isolation.or(self.isolation),
            timeout_secs: later.timeout_secs.or(self.timeout_secs),
            budget: later.budget.clone().or_else(|| self.budget.clone()),
            allowed_tools: later
                .allowed_tools
                .clone()
                .or_else(|| self.allowed_tools.clone()),
            blocked_tools: blocked,
            approve_tools: later
                .approve_tools
                .clone()
                .or_else(|| self.approve_tools.clone()),
        }
    }
}
