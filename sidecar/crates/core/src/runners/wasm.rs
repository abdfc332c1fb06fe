//! `wasm:<executor>` runs: an executor plugin's agentic loop as a party member or a
//! `start_agent` run (seed 001's in-process mode). Its tool calls come back here: the
//! workflow's policy is checked, approvals are asked as for any worker, and the workspace
//! tools (read_file, write_file, list_files, run_command) are confined to the run's
//! directory (`confine`: no `..`, no absolute path elsewhere, no symlink out). Usage is stored
//! per run and rolled up to its parent runs and the party. It does not schedule anything: the
//! orchestrator starts it through the runner and hears its exit like a process's.

use std::path::{Component, Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime};

use serde::Deserialize;
use serde_json::{Value, json};
use troupe_engine::AgentDefinition;
use troupe_engine::collab::ToolVerdict;
use troupe_model::ApprovalStatus;
use troupe_plugin_host::{CallContext, ExecTask, ToolHandler, ToolSchema, Usage};
use troupe_store::AgentRun;

use crate::runners::process::{Exit, RunTable};
use crate::runners::{RunnerHost, call};
use troupe_api::types::{
    CompleteParams, CompleteResult, CompletionStatus, ConcludeTeamParams, PollMessagesParams,
    PollMessagesResult, RequestPermissionParams, RouteToParams, RouteToResult, SendMessageParams,
    SendToParentParams, SentMessage, TeamActResult, TeamBroadcastParams, VoteConcludeParams,
};

/// Default and most turns of a run without `max_turns`.
const DEFAULT_MAX_TURNS: u32 = 50;
/// A run without `timeout_secs` gets this long.
const DEFAULT_RUN_SECS: u64 = 3600;
/// Most bytes a tool returns to the model.
const MAX_TOOL_OUTPUT: usize = 64 * 1024;
/// Most a `run_command` may take.
const MAX_COMMAND_SECS: f64 = 600.0;

/// The executor plugin named by a `wasm:` runner.
pub fn plugin_of(agent: &AgentDefinition) -> Option<&str> {
    agent.runner.strip_prefix("wasm:")
}

/// Runs `run` with its executor to the end; the exit the runner reports.
pub async fn run(
    daemon: Weak<dyn RunnerHost>,
    run: AgentRun,
    agent: AgentDefinition,
    sandbox: crate::sandbox::Sandbox,
) -> Exit {
    let Some(d) = daemon.upgrade() else {
        return Exit::Failed("the daemon is shutting down".into());
    };
    let Some(plugin) = plugin_of(&agent).map(str::to_string) else {
        return Exit::Failed(format!("agent {} has no wasm: runner", agent.name));
    };
    let plugins = d.plugins().clone();
    let host = match tokio::task::spawn_blocking(move || plugins.host().cloned()).await {
        Ok(Ok(h)) => h,
        Ok(Err(e)) => return Exit::Failed(e.to_string()),
        Err(e) => return Exit::Failed(e.to_string()),
    };
    let workdir = PathBuf::from(run.workdir.clone().unwrap_or_else(|| ".".into()));
    let tools = Arc::new(Tools {
        daemon: daemon.clone(),
        run: run.clone(),
        agent: agent.clone(),
        workdir: workdir.clone(),
        sandbox,
        usage_writes: Arc::default(),
    });
    let timeout = agent
        .timeout_secs
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .unwrap_or(Duration::from_secs(DEFAULT_RUN_SECS));
    let task = ExecTask {
        prompt: run.prompt.clone(),
        system_prompt: Some(system_prompt(&agent, &workdir)),
        model: agent.model.clone(),
        tools: {
            let mut tools = schemas(&agent);
            // A router's step has `route_to` alone.
            if run.party_id.is_some() && agent.route_only.is_none() {
                tools.extend(protocol_schemas(&agent));
            }
            tools
        },
        max_turns: agent.max_turns.unwrap_or(DEFAULT_MAX_TURNS),
        deadline: SystemTime::now() + timeout,
    };
    let mut facts = std::collections::BTreeMap::new();
    facts.insert("agent".to_string(), agent.name.clone());
    facts.insert("run".to_string(), run.run_id.clone());
    facts.insert("session".to_string(), run.session_id.clone());
    facts.insert("project".to_string(), run.project_id.clone());
    if let Some(p) = &run.party_id {
        facts.insert("party".to_string(), p.clone());
    }
    if let (Some(role), Some(i)) = (&run.role_name, run.instance_index) {
        facts.insert("role".to_string(), role.clone());
        facts.insert("member".to_string(), format!("{role}#{i}"));
    }
    let context = CallContext {
        facts,
        config: agent.plugin_config.clone(),
    };
    drop(d);
    let outcome = host.execute(&plugin, task, &context, tools.clone()).await;
    tools.usage_recorded().await;
    let Some(d) = daemon.upgrade() else {
        return Exit::Failed("the daemon is shutting down".into());
    };
    match outcome {
        Err(e) => Exit::Failed(e.to_string()),
        Ok(outcome) => {
            // The loop may end on the model's last answer without calling `complete`.
            let done = d
                .store()
                .get_run(&run.run_id)
                .is_ok_and(|r| r.status.is_completed());
            if !done {
                let artifacts = match outcome.artifacts {
                    Value::Object(m) => m.into_iter().collect(),
                    _ => Default::default(),
                };
                let completed: Result<CompleteResult, _> = call(
                    &d,
                    &run,
                    "complete",
                    CompleteParams {
                        session_id: run.session_id.clone(),
                        run_id: Some(run.run_id.clone()),
                        output: outcome.summary,
                        status: CompletionStatus::default(),
                        artifacts,
                        files_modified: Vec::new(),
                        next_steps: Vec::new(),
                    },
                )
                .await;
                if let Err(e) = completed {
                    return Exit::Failed(format!("its final answer was refused: {e}"));
                }
            }
            Exit::Finished
        }
    }
}

fn system_prompt(agent: &AgentDefinition, workdir: &Path) -> String {
    if let Some(candidates) = &agent.route_only {
        return format!(
            "You are {}, a Troupe router. Choose the agent that should handle the request: call \
             `route_to` once, with one of {} and your reason. You have no other tool.",
            agent.name,
            candidates.join(", ")
        );
    }
    let mut s = format!(
        "You are {}, a Troupe agent working in {}. Use the tools to read and change files \
         there (paths are relative to it). When the task is done call `complete` with a \
         summary and your artifacts.",
        agent.name,
        workdir.display()
    );
    if let Some(schema) = &agent.workflow.completion_schema {
        s.push_str(&format!(
            " `complete`'s artifacts must have: {}.",
            schema
                .iter()
                .map(|(k, v)| format!("{k} ({v})"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    // The agent's instructions are already at the head of the prompt (as for every runner).
    s
}

/// The tools a run is offered: every built-in its workflow permits (`complete` always); a
/// router's step gets `route_to` alone, its agent an enum of the candidates.
pub fn schemas(agent: &AgentDefinition) -> Vec<ToolSchema> {
    if let Some(candidates) = &agent.route_only {
        return vec![ToolSchema {
            name: "route_to".into(),
            description: "Select the agent to handle this request".into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "agent": { "type": "string", "enum": candidates },
                    "reason": { "type": "string" }
                },
                "required": ["agent", "reason"]
            }),
        }];
    }
    let all = [
        (
            "read_file",
            "Read a UTF-8 text file of the working directory.",
            json!({"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}),
        ),
        (
            "write_file",
            "Create or replace a file of the working directory with `content`.",
            json!({"type":"object","properties":{"path":{"type":"string"},"content":{"type":"string"}},"required":["path","content"]}),
        ),
        (
            "list_files",
            "List the files under a directory of the working directory (default: its root).",
            json!({"type":"object","properties":{"path":{"type":"string"}}}),
        ),
        (
            "run_command",
            "Run a shell command in the working directory; returns its exit status and output.",
            json!({"type":"object","properties":{"command":{"type":"string"},"timeout_secs":{"type":"number"}},"required":["command"]}),
        ),
        (
            "send_message",
            "Send a message to another session of the project.",
            json!({"type":"object","properties":{"to_session_id":{"type":"string"},"content":{"type":"string"}},"required":["to_session_id","content"]}),
        ),
        (
            "send_to_parent",
            "Send a message to the session that started you (a party's leader or creator).",
            json!({"type":"object","properties":{"content":{"type":"string"}},"required":["content"]}),
        ),
        (
            "check_messages",
            "Read your unread messages.",
            json!({"type":"object","properties":{}}),
        ),
        (
            "complete",
            "Finish the task: a summary of what you did and your artifacts (a JSON object).",
            json!({"type":"object","properties":{"summary":{"type":"string"},"artifacts":{"type":"object"},"status":{"type":"string","enum":["success","partial","blocked"]}},"required":["summary"]}),
        ),
    ];
    let mut tools: Vec<ToolSchema> = all
        .into_iter()
        .filter(|(name, _, _)| *name == "complete" || agent.workflow.permits(name).is_ok())
        .map(|(name, description, parameters)| ToolSchema {
            name: name.into(),
            description: description.into(),
            parameters,
        })
        .collect();
    // A team member's turn also gets the team's tools.
    if let Some(seat) = &agent.team_seat {
        tools.push(ToolSchema {
            name: "team_broadcast".into(),
            description: "Share a message with the other team members (they see it before their next turn).".into(),
            parameters: json!({"type":"object","properties":{"message":{"type":"string"}},"required":["message"]}),
        });
        tools.push(ToolSchema {
            name: "vote_conclude".into(),
            description: "Vote that the team is done.".into(),
            parameters: json!({"type":"object","properties":{"reason":{"type":"string"}}}),
        });
        if seat == "coordinator" {
            tools.push(ToolSchema {
                name: "conclude_team".into(),
                description: "As the coordinator, give the team's final answer.".into(),
                parameters: json!({"type":"object","properties":{"answer":{"type":"string"}},"required":["answer"]}),
            });
        }
    }
    tools
}

/// The team tools (a team member's turn only).
const TEAM_TOOLS: &[&str] = &["team_broadcast", "vote_conclude", "conclude_team"];

/// The party's protocol (seed 004) and the agent tools, as a party member's executor gets them:
/// each is the operation of the same name, called as the member (its access applies).
pub const PROTOCOL_TOOLS: &[&str] = &[
    "get_plan",
    "propose_plan",
    "review_plan",
    "commit_plan",
    "start_step",
    "submit_step",
    "review_step",
    "handoff_step",
    "block_step",
    "propose_decision",
    "vote",
    "commit_decision",
    "list_decisions",
    "ask_person",
    "get_party_status",
    "get_member_diff",
    "list_member_commits",
    "review_member",
    "start_agent",
    "get_agent_result",
];

/// The protocol tools a party member's workflow permits, with their operations' schemas.
pub fn protocol_schemas(agent: &AgentDefinition) -> Vec<ToolSchema> {
    PROTOCOL_TOOLS
        .iter()
        .filter(|name| agent.workflow.permits(name).is_ok())
        .filter_map(|name| troupe_api::operation(name))
        .map(|op| ToolSchema {
            name: op.name.into(),
            description: op.summary.trim().into(),
            parameters: Value::Object(troupe_api::agent_tool_schema(op)),
        })
        .collect()
}

/// Answers one run's tool calls.
struct Tools {
    daemon: Weak<dyn RunnerHost>,
    run: AgentRun,
    agent: AgentDefinition,
    workdir: PathBuf,
    /// What wraps the shell commands it runs (`run_command`).
    sandbox: crate::sandbox::Sandbox,
    /// Usage writes under way: awaited before the run completes, so its result shows them all.
    usage_writes: Arc<std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>>,
}

impl ToolHandler for Tools {
    fn call(
        &self,
        name: String,
        arguments: String,
    ) -> Pin<Box<dyn Future<Output = Result<String, String>> + Send + 'static>> {
        let me = Tools {
            daemon: self.daemon.clone(),
            run: self.run.clone(),
            agent: self.agent.clone(),
            workdir: self.workdir.clone(),
            sandbox: self.sandbox.clone(),
            usage_writes: self.usage_writes.clone(),
        };
        Box::pin(async move {
            // Held by the person (`pause_party`): the run waits here, between the model's turns.
            if let Some(d) = me.daemon.upgrade() {
                let mut held = d.held();
                drop(d);
                let run = me.run.run_id.clone();
                let _ = held.wait_for(|h| !h.contains(&run)).await;
            }
            let result = me.dispatch(&name, &arguments).await;
            if let Some(d) = me.daemon.upgrade() {
                let event = troupe_store::NewEvent {
                    kind: "tool_called".into(),
                    project_id: Some(me.run.project_id.clone()),
                    session_id: Some(me.run.session_id.clone()),
                    party_id: me.run.party_id.clone(),
                    data: json!({
                        "run_id": me.run.run_id,
                        "tool": name,
                        "ok": result.is_ok(),
                        "error": result.as_ref().err(),
                    }),
                };
                if let Err(e) = d.store().append_event(event).await {
                    tracing::debug!(error = %e, "tool call not recorded");
                }
            }
            result
        })
    }

    fn usage(&self, delta: Usage) {
        let Some(d) = self.daemon.upgrade() else {
            return;
        };
        let run_id = self.run.run_id.clone();
        let write = tokio::spawn(async move {
            let usage = troupe_store::Usage {
                input_tokens: i64::try_from(delta.input_tokens).unwrap_or(i64::MAX),
                output_tokens: i64::try_from(delta.output_tokens).unwrap_or(i64::MAX),
                cost_usd: delta.cost_usd,
            };
            match d.store().add_usage(run_id.clone(), usage).await {
                Ok(()) => d.usage_recorded(&run_id),
                Err(e) => tracing::warn!(error = %e, "usage not recorded"),
            }
        });
        self.usage_writes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(write);
    }
}

impl Tools {
    /// Waits for the usage writes reported so far.
    async fn usage_recorded(&self) {
        let writes: Vec<_> =
            std::mem::take(&mut *self.usage_writes.lock().unwrap_or_else(|p| p.into_inner()));
        for w in writes {
            if let Err(e) = w.await {
                tracing::debug!(error = %e, "a usage write failed");
            }
        }
    }
}

#[derive(Deserialize)]
struct PathArgs {
    #[serde(default)]
    path: Option<String>,
}

#[derive(Deserialize)]
struct WriteArgs {
    path: String,
    content: String,
}

#[derive(Deserialize)]
struct CommandArgs {
    command: String,
    #[serde(default)]
    timeout_secs: Option<f64>,
}

#[derive(Deserialize)]
struct MessageArgs {
    #[serde(default)]
    to_session_id: Option<String>,
    content: String,
}

#[derive(Deserialize)]
struct CompleteArgs {
    #[serde(default, alias = "output")]
    summary: String,
    #[serde(default)]
    artifacts: Option<Value>,
    #[serde(default)]
    status: Option<CompletionStatus>,
}

fn args<T: serde::de::DeserializeOwned>(tool: &str, raw: &str) -> Result<T, String> {
    let raw = if raw.trim().is_empty() { "{}" } else { raw };
    serde_json::from_str(raw).map_err(|e| format!("bad arguments for {tool}: {e}"))
}

fn cut(s: String) -> String {
    cut_at(s, MAX_TOOL_OUTPUT, "\n[output truncated]")
}

/// `s` cut to at most `max` bytes on a character boundary, `marker` appended when cut.
pub(crate) fn cut_at(mut s: String, max: usize, marker: &str) -> String {
    if s.len() > max {
        let mut at = max;
        while !s.is_char_boundary(at) {
            at -= 1;
        }
        s.truncate(at);
        s.push_str(marker);
    }
    s
}

impl Tools {
    async fn dispatch(&self, name: &str, raw: &str) -> Result<String, String> {
        let d = self.daemon.upgrade().ok_or("the daemon is shutting down")?;
        // A router's step has one tool, `route_to`, whatever its workflow says.
        if self.agent.route_only.is_some() && name != "route_to" {
            return Err(format!(
                "there is no tool named {name}: a router's step only has route_to"
            ));
        }
        let team_tool = self.agent.team_seat.is_some() && TEAM_TOOLS.contains(&name);
        if name != "complete" && name != "route_to" && !team_tool {
            self.agent.workflow.permits(name)?;
        }
        let input: Value = serde_json::from_str(if raw.trim().is_empty() { "{}" } else { raw })
            .map_err(|e| format!("arguments of {name} are not JSON: {e}"))?;
        // A step's tool policy (seed 004) can allow, ask for or deny a tool whatever the
        // workflow says; the request records the verdict either way.
        let by_step = name != "complete"
            && d.tool_verdict(&self.run.session_id, name) != ToolVerdict::Default;
        if name != "route_to" && !team_tool && (by_step || self.agent.workflow.needs_approval(name))
        {
            self.approve(&d, name, &input).await?;
        }
        if self.run.party_id.is_some() && PROTOCOL_TOOLS.contains(&name) {
            let caller = crate::authority::Caller::member_of(&self.run, false);
            let result = d
                .call_as(caller, name.to_string(), input)
                .await
                .map_err(|e| e.to_string())?;
            return Ok(cut(serde_json::to_string(&result).unwrap_or_default()));
        }
        match name {
            "read_file" => {
                let a: PathArgs = args(name, raw)?;
                let shown = a.path.clone().unwrap_or_default();
                let path = confine(&self.workdir, a.path.as_deref().unwrap_or(""))?;
                tokio::task::spawn_blocking(move || read_capped(&path, &shown))
                    .await
                    .map_err(|e| e.to_string())?
            }
            "write_file" => {
                let a: WriteArgs = args(name, raw)?;
                let path = confine(&self.workdir, &a.path)?;
                if let Some(parent) = path.parent() {
                    tokio::fs::create_dir_all(parent)
                        .await
                        .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
                }
                tokio::fs::write(&path, a.content.as_bytes())
                    .await
                    .map_err(|e| format!("cannot write {}: {e}", a.path))?;
                Ok(format!("wrote {} bytes to {}", a.content.len(), a.path))
            }
            "list_files" => {
                let a: PathArgs = args(name, raw)?;
                let root = confine(&self.workdir, a.path.as_deref().unwrap_or(""))?;
                let workdir = self.workdir.clone();
                tokio::task::spawn_blocking(move || list_files(&workdir, &root))
                    .await
                    .map_err(|e| e.to_string())?
            }
            "run_command" => {
                let a: CommandArgs = args(name, raw)?;
                run_command(
                    &self.workdir,
                    &a.command,
                    a.timeout_secs,
                    &self.run.run_id,
                    &self.sandbox,
                )
                .await
            }
            "send_message" => {
                let a: MessageArgs = args(name, raw)?;
                let to = a.to_session_id.ok_or("send_message needs to_session_id")?;
                let sent: SentMessage = call(
                    &d,
                    &self.run,
                    "send_message",
                    SendMessageParams {
                        from_session_id: self.run.session_id.clone(),
                        to_session_id: to,
                        content: a.content,
                        priority: troupe_store::Priority::Normal,
                        message_type: None,
                        idempotency_key: None,
                    },
                )
                .await
                .map_err(|e| e.to_string())?;
                Ok(serde_json::to_string(&sent).unwrap_or_default())
            }
            "send_to_parent" => {
                let a: MessageArgs = args(name, raw)?;
                let sent: SentMessage = call(
                    &d,
                    &self.run,
                    "send_to_parent",
                    SendToParentParams {
                        session_id: self.run.session_id.clone(),
                        content: a.content,
                        priority: troupe_store::Priority::Normal,
                        idempotency_key: None,
                    },
                )
                .await
                .map_err(|e| e.to_string())?;
                Ok(serde_json::to_string(&sent).unwrap_or_default())
            }
            "check_messages" => {
                let got: PollMessagesResult = call(
                    &d,
                    &self.run,
                    "poll_messages",
                    PollMessagesParams {
                        session_id: self.run.session_id.clone(),
                        since: None,
                        mark_read: Some(true),
                        wait_ms: None,
                        limit: Some(50),
                    },
                )
                .await
                .map_err(|e| e.to_string())?;
                Ok(cut(serde_json::to_string(&got.messages).unwrap_or_default()))
            }
            "complete" => {
                self.usage_recorded().await;
                let a: CompleteArgs = args(name, raw)?;
                let artifacts = match a.artifacts {
                    None | Some(Value::Null) => Default::default(),
                    Some(Value::Object(m)) => m.into_iter().collect(),
                    Some(other) => {
                        return Err(format!("artifacts must be a JSON object, not {other}"));
                    }
                };
                let done: CompleteResult = call(
                    &d,
                    &self.run,
                    "complete",
                    CompleteParams {
                        session_id: self.run.session_id.clone(),
                        run_id: Some(self.run.run_id.clone()),
                        output: a.summary,
                        status: a.status.unwrap_or_default(),
                        artifacts,
                        files_modified: Vec::new(),
                        next_steps: Vec::new(),
                    },
                )
                .await
                .map_err(|e| e.to_string())?;
                Ok(serde_json::to_string(&done).unwrap_or_default())
            }
            "route_to" if self.agent.route_only.is_some() => {
                self.usage_recorded().await;
                #[derive(Deserialize)]
                struct RouteArgs {
                    agent: String,
                    #[serde(default)]
                    reason: String,
                }
                let a: RouteArgs = args(name, raw)?;
                let routed: RouteToResult = call(
                    &d,
                    &self.run,
                    "route_to",
                    RouteToParams {
                        session_id: self.run.session_id.clone(),
                        agent: a.agent,
                        reason: a.reason,
                    },
                )
                .await
                .map_err(|e| e.to_string())?;
                Ok(serde_json::to_string(&routed).unwrap_or_default())
            }
            "team_broadcast" | "vote_conclude" | "conclude_team" if team_tool => {
                #[derive(Deserialize)]
                struct TeamArgs {
                    #[serde(default)]
                    message: String,
                    #[serde(default)]
                    reason: String,
                    #[serde(default)]
                    answer: String,
                }
                let a: TeamArgs = args(name, raw)?;
                let session_id = self.run.session_id.clone();
                let run = &self.run;
                let done: TeamActResult = match name {
                    "team_broadcast" => {
                        let p = TeamBroadcastParams {
                            session_id,
                            message: a.message,
                        };
                        call(&d, run, name, p).await
                    }
                    "vote_conclude" => {
                        let p = VoteConcludeParams {
                            session_id,
                            reason: a.reason,
                        };
                        call(&d, run, name, p).await
                    }
                    _ => {
                        let p = ConcludeTeamParams {
                            session_id,
                            answer: a.answer,
                        };
                        call(&d, run, name, p).await
                    }
                }
                .map_err(|e| e.to_string())?;
                Ok(serde_json::to_string(&done).unwrap_or_default())
            }
            other => Err(format!("there is no tool named {other}")),
        }
    }

    /// Asks for a person's approval of a tool call, as a worker would (rules apply; timeout
    /// denies); waits for the decision.
    async fn approve(
        &self,
        d: &Arc<dyn RunnerHost>,
        tool: &str,
        input: &Value,
    ) -> Result<(), String> {
        let file_path = input
            .get("path")
            .and_then(Value::as_str)
            .and_then(|p| confine(&self.workdir, p).ok())
            .map(|p| p.display().to_string());
        let params = RequestPermissionParams {
            session_id: self.run.session_id.clone(),
            tool_name: Some(tool.to_string()),
            input: Some(input.clone()),
            file_path,
            is_dangerous: tool == "run_command",
            danger_reason: (tool == "run_command").then(|| "runs a shell command".to_string()),
            wait_ms: Some(300_000),
            ..RequestPermissionParams::default()
        };
        let r = d
            .request_permission_decided(params)
            .await
            .map_err(|e| format!("approval failed: {e}"))?;
        match r.status {
            ApprovalStatus::Approved => Ok(()),
            other => {
                let why = r.reason.map(|r| format!(": {r}")).unwrap_or_default();
                Err(format!("the call to {tool} was {other}{why}"))
            }
        }
    }
}

/// Reads at most `MAX_TOOL_OUTPUT` bytes of a regular file (not a FIFO or a device).
pub(crate) fn read_capped(path: &Path, shown: &str) -> Result<String, String> {
    use std::io::Read;
    // Checked before opening: opening a FIFO for reading blocks until a writer comes.
    let kind = std::fs::metadata(path).map_err(|e| format!("cannot read {shown}: {e}"))?;
    if !kind.is_file() {
        return Err(format!("{shown} is not a regular file"));
    }
    let file = std::fs::File::open(path).map_err(|e| format!("cannot read {shown}: {e}"))?;
    let meta = file
        .metadata()
        .map_err(|e| format!("cannot read {shown}: {e}"))?;
    if !meta.is_file() {
        return Err(format!("{shown} is not a regular file"));
    }
    let mut bytes = Vec::new();
    file.take(MAX_TOOL_OUTPUT as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read {shown}: {e}"))?;
    // A cut may split a character: keep what decodes.
    let text = match String::from_utf8(bytes) {
        Ok(t) => t,
        Err(e) if meta.len() > MAX_TOOL_OUTPUT as u64 => {
            let valid = e.utf8_error().valid_up_to();
            let mut bytes = e.into_bytes();
            bytes.truncate(valid);
            String::from_utf8(bytes).unwrap_or_default()
        }
        Err(_) => return Err(format!("{shown} is not UTF-8 text")),
    };
    if meta.len() > MAX_TOOL_OUTPUT as u64 {
        // Marked even when what was read fits: the file is longer than what is shown.
        let mut text = cut_at(text, MAX_TOOL_OUTPUT, "");
        text.push_str("\n[output truncated]");
        return Ok(text);
    }
    Ok(text)
}

/// `rel` inside `root`, refusing anything that leaves it (`..`, absolute paths elsewhere,
/// symlinks out).
pub fn confine(root: &Path, rel: &str) -> Result<PathBuf, String> {
    let root = root
        .canonicalize()
        .map_err(|e| format!("the working directory is gone: {e}"))?;
    let asked = Path::new(rel);
    let asked = if asked.is_absolute() {
        asked
            .strip_prefix(&root)
            .map_err(|_| format!("{rel} is outside the working directory"))?
            .to_path_buf()
    } else {
        asked.to_path_buf()
    };
    let mut out = root.clone();
    for c in asked.components() {
        match c {
            Component::Normal(part) => out.push(part),
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => {
                return Err(format!("{rel} is outside the working directory"));
            }
        }
    }
    // A symbolic link as the last part must resolve, inside the root (a dangling one could
    // create a file anywhere).
    if std::fs::symlink_metadata(&out).is_ok_and(|m| m.file_type().is_symlink()) {
        match out.canonicalize() {
            Ok(real) if real.starts_with(&root) => {}
            _ => {
                return Err(format!(
                    "{rel} is a symbolic link leading outside the working directory"
                ));
            }
        }
    }
    // The deepest existing ancestor must resolve inside the root (no symlink leads out).
    let mut probe = out.clone();
    loop {
        if let Ok(real) = probe.canonicalize() {
            if !real.starts_with(&root) {
                return Err(format!("{rel} leads outside the working directory"));
            }
            break;
        }
        if !probe.pop() {
            break;
        }
    }
    Ok(out)
}

fn list_files(workdir: &Path, root: &Path) -> Result<String, String> {
    let base = workdir.canonicalize().map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let entries = std::fs::read_dir(&dir).map_err(|e| format!("cannot list: {e}"))?;
        for e in entries.filter_map(Result::ok) {
            let name = e.file_name();
            if name == ".git" {
                continue;
            }
            let path = e.path();
            let rel = path
                .strip_prefix(&base)
                .unwrap_or(&path)
                .display()
                .to_string();
            match e.file_type() {
                Ok(t) if t.is_dir() => {
                    out.push(format!("{rel}/"));
                    stack.push(path);
                }
                Ok(_) => out.push(rel),
                Err(_) => {}
            }
            if out.len() >= 1000 {
                out.sort();
                out.push("[listing truncated at 1000 entries]".into());
                return Ok(out.join("\n"));
            }
        }
    }
    out.sort();
    Ok(out.join("\n"))
}

async fn run_command(
    workdir: &Path,
    command: &str,
    timeout: Option<f64>,
    run_id: &str,
    sandbox: &crate::sandbox::Sandbox,
) -> Result<String, String> {
    use std::process::Stdio;
    let secs = timeout
        .filter(|t| t.is_finite() && *t > 0.0)
        .unwrap_or(60.0)
        .min(MAX_COMMAND_SECS);
    // In the member sandbox (the person's token and the database out of sight), marked with
    // the run: a daemon started after a kill -9 ends what it left.
    let argv = sandbox.argv(vec!["sh".into(), "-c".into(), command.into()], workdir)?;
    let (program, args) = argv.split_first().ok_or("no command")?;
    let mut child = crate::spawn::command(program, crate::spawn::Group::Session, Some(run_id))
        .args(args)
        .current_dir(workdir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot run the command: {e}"))?;
    let pid = child.id();
    // Output beyond the cap is read and dropped, so the command is never blocked on a pipe.
    let stdout = read_pipe(child.stdout.take());
    let stderr = read_pipe(child.stderr.take());
    let finished = tokio::time::timeout(Duration::from_secs_f64(secs), async {
        tokio::join!(stdout, stderr, child.wait())
    })
    .await;
    let Ok((out, err, status)) = finished else {
        // The whole group: the shell and whatever it started.
        if let Some(pid) = pid {
            crate::runners::process::signal_group(pid, rustix::process::Signal::KILL);
        }
        return Err(format!("the command ran past {secs} s and was killed"));
    };
    let status = status.map_err(|e| format!("cannot run the command: {e}"))?;
    let mut text = match status.code() {
        Some(c) => format!("exit status {c}\n"),
        None => "killed by a signal\n".to_string(),
    };
    text.push_str(&String::from_utf8_lossy(&out));
    if !err.is_empty() {
        text.push_str("\n[stderr]\n");
        text.push_str(&String::from_utf8_lossy(&err));
    }
    Ok(cut(text))
}

/// Everything a pipe yields, keeping the first `MAX_TOOL_OUTPUT` bytes.
async fn read_pipe(pipe: Option<impl tokio::io::AsyncRead + Unpin>) -> Vec<u8> {
    use tokio::io::AsyncReadExt;
    let mut kept = Vec::new();
    let Some(mut pipe) = pipe else {
        return kept;
    };
    let mut buf = [0u8; 8192];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => return kept,
            Ok(n) => {
                let room = (MAX_TOOL_OUTPUT + 1).saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
}

/// Agents run by an executor plugin (`runner: "plugin:<executor>"`): a task in the daemon.
pub struct WasmRunner;

impl super::Runner for WasmRunner {
    fn kind(&self) -> super::Kind {
        super::Kind::Wasm
    }

    fn place(&self, _table: &RunTable, launch: super::Launch) -> Result<super::Placed, String> {
        let host = launch.host.ok_or("the daemon is still starting")?;
        // An in-daemon run carries the daemon's own pid: after a restart it reads as gone.
        let (run, agent, timeout) = (launch.run, launch.agent, launch.timeout);
        let sandbox = launch.sandbox;
        Ok(super::Placed::in_daemon(move |table: &RunTable| {
            table.spawn_task(
                run.run_id.clone(),
                timeout,
                self::run(host, run, agent, sandbox),
            );
        }))
    }
}

#[cfg(test)]
mod tests;
