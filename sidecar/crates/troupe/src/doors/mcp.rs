//! The MCP door (rmcp, pinned, used only here): an agent CLI (Claude Code, Codex, Gemini) gets
//! the operation registry's agent-facing operations as tools, with their JSON Schemas. Over stdio
//! (`troupe mcp`) it is a client of the daemon like the CLI; over streamable HTTP it is served by
//! the daemon itself (loopback, token). Either way a tool call is the operation of the same name,
//! admitted as its caller: a member by its run's credential, else an agent CLI of the person's
//! (the person's token here never makes the person).
//! The calling session (`TROUPE_SESSION_ID` for stdio, the `X-Troupe-Session` header for HTTP) is
//! filled into the params, so the model never passes ids of its own; party tools are offered only
//! to a party's leader. `request_permission` answers in the shape Claude Code's
//! `--permission-prompt-tool` expects.

use std::sync::{Arc, Weak};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Value, json};

use crate::client::{self, Client};
use troupe_api::CALLER_FIELDS;
use troupe_api::layout::Layout;
use troupe_core::Daemon;

/// Operations every agent session gets as tools.
const AGENT_TOOLS: &[&str] = &[
    "send_message",
    "send_to_parent",
    "send_to_child",
    "broadcast_to_children",
    "broadcast_to_party",
    "poll_messages",
    "mark_read",
    "list_siblings",
    "discover_agents",
    "start_agent",
    "complete",
    "list_agents",
    "get_agent_result",
    "cancel_agent",
    "get_run_tree",
    "route_to",
    "team_broadcast",
    "vote_conclude",
    "conclude_team",
    "create_task",
    "escalate_task",
    "list_tasks",
    "request_permission",
    "ask_person",
    // The collaboration protocol (seed 004).
    "get_plan",
    "propose_plan",
    "review_plan",
    "start_step",
    "submit_step",
    "review_step",
    "handoff_step",
    "block_step",
    "propose_decision",
    "vote",
    "list_decisions",
    // Landing the work: read the members' branches and the radar's predictions.
    "list_worktrees",
    "get_member_diff",
    "list_member_commits",
    "list_conflicts",
    // A best-of-N judge answers with it (the door fills in its session).
    "pick_member",
];

/// Operations only a party's leader gets.
const LEADER_TOOLS: &[&str] = &[
    "launch_party",
    "get_party_status",
    "signal_role",
    "override_recovery",
    "cancel_party",
    "reassign_task",
    "list_parties",
    // The leader's registry of parties (seed 000): it may define the parties it launches.
    "create_party_definition",
    "update_party_definition",
    "get_party_definition",
    "list_party_definitions",
    "delete_party_definition",
    // The leader commits the plan and breaks ties.
    "commit_plan",
    "commit_decision",
    // The leader reviews members' work. (`land_party` is not an agent's tool: its test command
    // would run outside every approval; a `land` role or the person runs the queue.)
    "review_member",
];

/// How the door reaches the operations.
#[derive(Clone)]
enum Backend {
    /// `troupe mcp`: through the daemon's socket, as the CLI does.
    Client(Arc<Client>),
    /// The daemon's own HTTP endpoint: in-process, as the request's caller (its credential,
    /// checked by the endpoint's gate; none only before a request gave one).
    Daemon(Weak<Daemon>, Option<troupe_core::Caller>),
}

impl Backend {
    async fn call(&self, op: &str, params: Value) -> Result<Value, String> {
        match self {
            Backend::Client(c) => c.call(op, params).await.map_err(|e| e.to_string()),
            Backend::Daemon(d, caller) => {
                let d = d.upgrade().ok_or("the daemon is shutting down")?;
                let caller = caller.clone().ok_or("unauthorized: no credential")?;
                let call = troupe_core::registry::handler(op)
                    .ok_or_else(|| format!("unknown operation {op}"))?;
                call(d, caller, Some(params))
                    .await
                    .map_err(|e| e.to_string())
            }
        }
    }
}

/// The MCP server: how to reach the operations and who is calling.
#[derive(Clone)]
struct Door {
    backend: Backend,
    /// The stdio door's session (from its environment); HTTP requests name their own.
    session: Option<String>,
    /// Whether each calling session is in a party (only then can a step's tool policy apply to
    /// it): a session in none spares each tool call the policy round trip. A session joins a
    /// party only when it is started as a member (it is in one from the start) or when it
    /// launches one it leads itself, which the door sees go by.
    party_members: Arc<std::sync::Mutex<std::collections::HashMap<String, bool>>>,
    /// The caller is a member Troupe started (its run's credential): it is not offered the
    /// tools only the person or the person's own agent CLIs may call.
    member: bool,
}

/// Serves MCP on stdin/stdout until the client closes stdin.
pub async fn serve_stdio(layout: &Layout) -> anyhow::Result<()> {
    let client = client::connect(layout, true).await?;
    let session = std::env::var("TROUPE_SESSION_ID")
        .ok()
        .filter(|s| !s.is_empty());
    let door = Door {
        backend: Backend::Client(Arc::new(client)),
        session,
        party_members: Arc::default(),
        member: client::is_member(),
    };
    let running = door.serve(rmcp::transport::stdio()).await?;
    running.waiting().await?;
    Ok(())
}

/// Serves MCP over streamable HTTP at `/mcp` on `listener` (loopback) for the daemon, each
/// request carrying the daemon's token; until `shutdown`.
pub async fn serve_http(
    daemon: Weak<Daemon>,
    listener: tokio::net::TcpListener,
    gate: crate::auth::Gate,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<()> {
    use axum::response::IntoResponse;
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService,
    };
    let daemon_for_hooks = daemon.clone();
    let service = StreamableHttpService::new(
        move || {
            Ok(Door {
                backend: Backend::Daemon(daemon.clone(), None),
                session: None,
                party_members: Arc::default(),
                member: false,
            })
        },
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    let hooks = daemon_for_hooks;
    let app = axum::Router::new()
        .nest_service("/mcp", service)
        .route(
            "/hooks/{event}",
            axum::routing::post(
                move |axum::extract::Path(event): axum::extract::Path<String>,
                      axum::Extension(caller): axum::Extension<troupe_core::Caller>,
                      headers: http::HeaderMap,
                      body: axum::body::Bytes| {
                    let daemon = hooks.clone();
                    async move { http_hook(daemon, caller, event, headers, body).await }
                },
            ),
        )
        .layer(axum::middleware::from_fn(
            move |mut req: axum::extract::Request, next: axum::middleware::Next| {
                let gate = gate.clone();
                async move {
                    // The MCP endpoint and the hooks are agents' doors: the person's token
                    // here is an agent CLI of the person's, never the person.
                    match gate.admit(req.headers()) {
                        Ok(Some(troupe_core::Caller::Person { .. })) => {
                            let session = req
                                .headers()
                                .get(crate::auth::SESSION_HEADER)
                                .and_then(|v| v.to_str().ok())
                                .map(str::trim)
                                .filter(|v| !v.is_empty())
                                .map(str::to_string);
                            req.extensions_mut().insert(troupe_core::Caller::Agent {
                                session_id: session,
                                door: "mcp".into(),
                            });
                            next.run(req).await
                        }
                        Ok(Some(caller)) => {
                            req.extensions_mut().insert(caller);
                            next.run(req).await
                        }
                        Ok(None) | Err(_) => (
                            http::StatusCode::UNAUTHORIZED,
                            "unauthorized: bad or missing token",
                        )
                            .into_response(),
                    }
                }
            },
        ));
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            while !*shutdown.borrow() {
                if shutdown.changed().await.is_err() {
                    break;
                }
            }
        })
        .await?;
    Ok(())
}

/// Claude Code's `http` hook form: the hook's JSON posted to `/hooks/<Event>` (the token in
/// `Authorization`, the Troupe session, when Troupe started the CLI, in `X-Troupe-Session`);
/// answered with what `troupe hook <Event>` would print (an empty body: nothing to say).
async fn http_hook(
    daemon: Weak<Daemon>,
    caller: troupe_core::Caller,
    event: String,
    headers: http::HeaderMap,
    body: axum::body::Bytes,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let json_response = |status: http::StatusCode, body: Value| {
        (
            status,
            [(http::header::CONTENT_TYPE, "application/json")],
            body.to_string(),
        )
            .into_response()
    };
    let mut payload: Value = match serde_json::from_slice(&body) {
        Ok(v @ Value::Object(_)) => v,
        Ok(_) => {
            return json_response(
                http::StatusCode::BAD_REQUEST,
                json!({"error": "the hook's input must be a JSON object"}),
            );
        }
        Err(e) => {
            return json_response(
                http::StatusCode::BAD_REQUEST,
                json!({"error": format!("the hook's input is not JSON: {e}")}),
            );
        }
    };
    if payload.get("hook_event_name").is_none() {
        payload["hook_event_name"] = json!(event);
    }
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_string)
    };
    let Some(d) = daemon.upgrade() else {
        return json_response(
            http::StatusCode::SERVICE_UNAVAILABLE,
            json!({"error": "the daemon is shutting down"}),
        );
    };
    let params = json!({
        "cli": "claude",
        "payload": payload,
        "session_id": header("x-troupe-session"),
        "parent_session_id": header("x-troupe-parent-session"),
    });
    let Some(hook) = troupe_core::registry::handler("claude_hook") else {
        return http::StatusCode::NOT_FOUND.into_response();
    };
    match hook(d, caller, Some(params)).await {
        Ok(r) if r["output"].as_object().is_some_and(|o| !o.is_empty()) => {
            json_response(http::StatusCode::OK, r["output"].clone())
        }
        Ok(_) => http::StatusCode::OK.into_response(),
        Err(e) => json_response(
            http::StatusCode::UNPROCESSABLE_ENTITY,
            json!({"error": e.to_string()}),
        ),
    }
}

/// Whether `session` is the leader of its party.
async fn is_leader(backend: &Backend, session: &str) -> bool {
    let Ok(s) = backend
        .call("get_session", json!({ "session_id": session }))
        .await
    else {
        return false;
    };
    let Some(party) = s["session"]["party_id"].as_str() else {
        return false;
    };
    let Ok(status) = backend
        .call("get_party_status", json!({ "party_id": party }))
        .await
    else {
        return false;
    };
    let role = status["members"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|m| m["session_id"] == session)
        .and_then(|m| m["role"].as_str());
    status["roles"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|r| Some(r["role"].as_str().unwrap_or_default()) == role && r["is_leader"] == true)
}

/// The tool list: the operations' param schemas, minus the fields the door fills in.
/// The tool list for a kind of caller, built once per process (schemas do not change).
fn tools(has_session: bool, leader: bool, member: bool) -> &'static [Tool] {
    static LISTS: [std::sync::OnceLock<Vec<Tool>>; 8] = [const { std::sync::OnceLock::new() }; 8];
    LISTS[usize::from(has_session) * 4 + usize::from(leader) * 2 + usize::from(member)]
        .get_or_init(|| build_tools(has_session, leader, member))
}

fn build_tools(has_session: bool, leader: bool, member: bool) -> Vec<Tool> {
    use troupe_api::Access;
    troupe_api::OPERATIONS
        .iter()
        .filter(|op| AGENT_TOOLS.contains(&op.name) || (leader && LEADER_TOOLS.contains(&op.name)))
        // What would be refused to a member is not offered to one.
        .filter(|op| !(member && matches!(op.access, Access::Person | Access::OwnAgent(_))))
        .map(|op| {
            let schema = if op.name == "request_permission" {
                match permission_prompt_schema() {
                    Value::Object(m) => m,
                    _ => JsonObject::new(),
                }
            } else if has_session {
                troupe_api::agent_tool_schema(op)
            } else {
                full_schema(op)
            };
            let tool =
                Tool::new(op.name, op.summary.trim(), Arc::new(schema)).annotate(hints(op.name));
            // What it answers, as `structuredContent` (MCP 2025-06-18); `request_permission`
            // answers Claude Code's permission-prompt text instead.
            match output_schema(op) {
                Some(out) if op.name != "request_permission" => {
                    tool.with_raw_output_schema(Arc::new(out))
                }
                _ => tool,
            }
        })
        .collect()
}

/// An operation's result schema as a tool's `outputSchema`: an object schema, its definitions
/// kept beside it.
fn output_schema(op: &troupe_api::Operation) -> Option<JsonObject> {
    match serde_json::to_value((op.result_schema)()).ok()? {
        Value::Object(mut m) if m.get("type") == Some(&json!("object")) => {
            m.remove("$schema");
            m.remove("title");
            let mut schema = Value::Object(m);
            no_bare_true(&mut schema);
            match schema {
                Value::Object(m) => Some(m),
                _ => None,
            }
        }
        _ => None,
    }
}

/// A bare `true` schema (what schemars writes for any JSON value) as `{}`: the same meaning,
/// in the object form some clients insist on (the MCP Inspector's portability check).
fn no_bare_true(schema: &mut Value) {
    match schema {
        Value::Object(m) => {
            for (k, v) in m.iter_mut() {
                // Keywords whose value is a schema, or a map or list of schemas.
                let holds_schemas = matches!(
                    k.as_str(),
                    "properties"
                        | "$defs"
                        | "definitions"
                        | "items"
                        | "additionalProperties"
                        | "anyOf"
                        | "oneOf"
                        | "allOf"
                        | "not"
                        | "patternProperties"
                );
                if holds_schemas {
                    match v {
                        Value::Bool(true) if k != "additionalProperties" => *v = json!({}),
                        Value::Object(inner)
                            if matches!(
                                k.as_str(),
                                "properties" | "$defs" | "definitions" | "patternProperties"
                            ) =>
                        {
                            for sub in inner.values_mut() {
                                if *sub == Value::Bool(true) {
                                    *sub = json!({});
                                } else {
                                    no_bare_true(sub);
                                }
                            }
                        }
                        _ => no_bare_true(v),
                    }
                }
            }
        }
        Value::Array(list) => {
            for v in list {
                if *v == Value::Bool(true) {
                    *v = json!({});
                } else {
                    no_bare_true(v);
                }
            }
        }
        _ => {}
    }
}

/// What a tool does to the world, as MCP's hints say it (so an agent CLI can let the read-only
/// ones through without asking): reads (`get_*`, `list_*`, …) change nothing and may be
/// repeated; cancelling, deleting, removing and landing cannot be undone.
fn hints(op: &str) -> ToolAnnotations {
    let read_only = op.starts_with("get_")
        || op.starts_with("list_")
        || matches!(
            op,
            "discover_agents" | "check_tool_policy" | "daemon_status"
        );
    let destructive = op.starts_with("cancel_")
        || op.starts_with("delete_")
        || op.starts_with("remove_")
        || matches!(op, "cleanup_party" | "land_party" | "shutdown_daemon");
    ToolAnnotations::new()
        .read_only(read_only)
        .destructive(!read_only && destructive)
        .idempotent(read_only || matches!(op, "mark_read" | "heartbeat"))
        .open_world(false)
}

/// `op`'s params schema with its caller fields (an agent CLI without a session names them).
fn full_schema(op: &troupe_api::Operation) -> JsonObject {
    match serde_json::to_value((op.params_schema)()).unwrap_or_default() {
        Value::Object(mut m) => {
            m.remove("$schema");
            m.remove("title");
            m
        }
        _ => JsonObject::new(),
    }
}

/// What Claude Code's `--permission-prompt-tool` sends: the tool, its input, the call's id.
fn permission_prompt_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "tool_name": { "type": "string", "description": "The tool the agent wants to run" },
            "input": { "type": "object", "description": "The tool's input" },
            "tool_use_id": { "type": "string", "description": "The tool call's id (asking again with it resumes the same request)" }
        },
        "required": ["tool_name", "input"]
    })
}

fn text(v: impl Into<String>) -> Vec<ContentBlock> {
    vec![ContentBlock::text(v.into())]
}

impl ServerHandler for Door {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("troupe", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Troupe: message the other agents of your project, start subagents, report \
                 completion with `complete`, and ask a person with `request_permission`.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let door = self.for_request(&context);
        let (_, tools) = door.offer(&context, None).await;
        Ok(ListToolsResult::with_all_items(tools.to_vec()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let name = request.name.to_string();
        let door = self.for_request(&context);
        let door = &door;
        let (leader, tools) = door.offer(&context, Some(&name)).await;
        if !tools.iter().any(|t| t.name == name) {
            let why = if LEADER_TOOLS.contains(&name.as_str()) && !leader {
                format!("tool {name} is for a party's leader only")
            } else {
                format!("unknown tool {name}")
            };
            return Err(McpError::invalid_params(why, None));
        }
        let session = door.session_of(&context);
        let mut args = Value::Object(request.arguments.unwrap_or_default());
        if let Some(s) = session.as_deref()
            && let Err(why) = door.step_policy(s, &name).await
        {
            return Ok(CallToolResult::error(text(why)).into());
        }
        let result = if name == "request_permission" {
            door.permission(session.as_deref(), args).await
        } else {
            fill_caller(session.as_deref(), &name, &mut args);
            match door.backend.call(&name, args).await {
                // The result as JSON text (for clients that read `content`) and as
                // `structuredContent`, which its tool's `outputSchema` describes.
                Ok(v @ Value::Object(_)) => CallToolResult::structured(v),
                Ok(v) => CallToolResult::success(text(v.to_string())),
                Err(e) => CallToolResult::error(text(e)),
            }
        };
        Ok(result.into())
    }
}

/// Sets the params that name the caller to the calling session, whatever the model passed: an
/// agent speaks only as itself (and reads only its own inbox).
fn fill_caller(session: Option<&str>, op: &str, args: &mut Value) {
    let Some(session) = session else {
        return;
    };
    for f in caller_fields(op) {
        args[f] = json!(session);
    }
}

/// The caller fields `op`'s params have.
fn caller_fields(op: &str) -> Vec<&'static str> {
    use troupe_api::{Field, param_field};
    let mut fields: Vec<&'static str> = CALLER_FIELDS
        .iter()
        .copied()
        .filter(|f| param_field(op, f) != Field::Absent)
        .collect();
    // An operation that names its caller (`session_id`) and also takes a parent
    // (`list_agents`) is asked as the caller: it works out the family itself.
    if fields.contains(&"session_id") {
        fields.retain(|f| *f != "parent_session_id");
    }
    fields
}

impl Door {
    /// This door as one HTTP request's caller sees it (its credential's caller, and a member's
    /// own session whatever its headers say); the stdio door is the same for every request.
    fn for_request(&self, context: &RequestContext<RoleServer>) -> Door {
        let mut door = self.clone();
        if let Backend::Daemon(d, _) = &self.backend {
            let caller = context
                .extensions
                .get::<http::request::Parts>()
                .and_then(|p| p.extensions.get::<troupe_core::Caller>())
                .cloned();
            if let Some(troupe_core::Caller::Member(m)) = &caller {
                door.session = Some(m.session_id.clone());
            }
            door.member = matches!(caller, Some(troupe_core::Caller::Member(_)));
            door.backend = Backend::Daemon(d.clone(), caller);
        }
        door
    }

    /// The calling session: the stdio door's, or the HTTP request's `X-Troupe-Session`.
    fn session_of(&self, context: &RequestContext<RoleServer>) -> Option<String> {
        self.session.clone().or_else(|| {
            context
                .extensions
                .get::<http::request::Parts>()
                .and_then(|p| p.headers.get("x-troupe-session"))
                .and_then(|v| v.to_str().ok())
                .filter(|s| !s.is_empty())
                .map(str::to_string)
        })
    }

    /// Whether the caller leads a party, and the tools it is offered. The leader check costs
    /// two operations, so a call of an everyday tool skips it.
    async fn offer(
        &self,
        context: &RequestContext<RoleServer>,
        tool: Option<&str>,
    ) -> (bool, &'static [Tool]) {
        let session = self.session_of(context);
        let needs_check = tool.is_none_or(|t| LEADER_TOOLS.contains(&t));
        let leader = match &session {
            Some(s) if needs_check => is_leader(&self.backend, s).await,
            _ => false,
        };
        (leader, tools(session.is_some(), leader, self.member))
    }
}

impl Door {
    /// The tool policy of the step the caller works on (seed 004): a blocked tool is refused,
    /// one that needs a person waits for their decision. The protocol's own tools always pass.
    async fn step_policy(&self, session: &str, tool: &str) -> Result<(), String> {
        if troupe_engine::collab::PROTOCOL_TOOLS.contains(&tool) {
            return Ok(());
        }
        let known = self
            .party_members
            .lock()
            .ok()
            .and_then(|m| m.get(session).copied());
        if tool == "launch_party" {
            // It may lead the party it launches (`mode: self`): ask again afterwards.
            if let Ok(mut m) = self.party_members.lock() {
                m.remove(session);
            }
        }
        let in_party = match known {
            Some(known) => known,
            None => {
                let s = self
                    .backend
                    .call("get_session", json!({ "session_id": session }))
                    .await?;
                let in_party = !s["session"]["party_id"].is_null();
                if tool != "launch_party"
                    && let Ok(mut m) = self.party_members.lock()
                {
                    m.insert(session.to_string(), in_party);
                }
                in_party
            }
        };
        if !in_party {
            return Ok(());
        }
        let qualified = format!("mcp__troupe__{tool}");
        let policy = self
            .backend
            .call(
                "check_tool_policy",
                json!({ "session_id": session, "tool_name": qualified }),
            )
            .await?;
        match policy["verdict"].as_str() {
            Some("deny") => Err(policy["reason"].as_str().unwrap_or("denied").to_string()),
            Some("ask") => {
                let r = self
                    .backend
                    .call(
                        "request_permission",
                        json!({ "session_id": session, "tool_name": qualified,
                                "wait_ms": 300_000 }),
                    )
                    .await?;
                if r["status"] == "approved" {
                    Ok(())
                } else {
                    Err(format!(
                        "the call to {tool} was not approved ({})",
                        r["status"].as_str().unwrap_or("no answer")
                    ))
                }
            }
            _ => Ok(()),
        }
    }

    /// Asks Troupe (rules, then a person) and answers as `--permission-prompt-tool` expects:
    /// `{"behavior":"allow","updatedInput":…}` or `{"behavior":"deny","message":…}`.
    async fn permission(&self, session: Option<&str>, args: Value) -> CallToolResult {
        let Some(session) = session else {
            return CallToolResult::error(text(
                "request_permission needs TROUPE_SESSION_ID (the asking session)",
            ));
        };
        let input = args.get("input").cloned().unwrap_or_else(|| json!({}));
        let file_path = ["file_path", "path", "notebook_path"]
            .iter()
            .find_map(|k| input.get(*k).and_then(Value::as_str))
            .map(str::to_string);
        let mut params = json!({
            "session_id": session,
            "tool_name": args.get("tool_name").cloned().unwrap_or(Value::Null),
            "input": input,
            "file_path": file_path,
            "request_key": args.get("tool_use_id").cloned().unwrap_or(Value::Null),
            "wait_ms": 300_000,
        });
        loop {
            let r = match self
                .backend
                .call("request_permission", params.clone())
                .await
            {
                Ok(r) => r,
                Err(e) => return CallToolResult::error(text(e)),
            };
            let answer = match r["status"].as_str() {
                Some("pending") => {
                    params = json!({
                        "session_id": session,
                        "approval_id": r["approval_id"],
                        "wait_ms": 300_000,
                    });
                    continue;
                }
                Some("approved") => json!({ "behavior": "allow", "updatedInput": input }),
                Some(other) => {
                    let why = r["reason"]
                        .as_str()
                        .map(|r| format!(": {r}"))
                        .unwrap_or_default();
                    json!({ "behavior": "deny", "message": format!("{other} by Troupe{why}") })
                }
                None => json!({ "behavior": "deny", "message": "no answer from Troupe" }),
            };
            return CallToolResult::success(text(answer.to_string()));
        }
    }
}
