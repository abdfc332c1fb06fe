//! `troupe mcp`: the MCP door over stdio (rmcp, pinned, used only here). An agent CLI (Claude
//! Code, Codex, Gemini) starts it as an MCP server and gets the operation registry's agent-facing
//! operations as tools, with their JSON Schemas. It is a client of the daemon like the CLI: each
//! tool call is the operation of the same name. The calling session comes from
//! `TROUPE_SESSION_ID` and is filled into the params, so the model never passes ids of its own;
//! party tools are offered only to a party's leader. `request_permission` answers in the shape
//! Claude Code's `--permission-prompt-tool` expects.

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Value, json};

use crate::client::{self, Client};
use crate::paths::Layout;

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
    "create_task",
    "escalate_task",
    "list_tasks",
    "request_permission",
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
];

/// Params the door fills from the calling session (the model does not see them).
const CALLER_FIELDS: &[&str] = &["session_id", "from_session_id", "parent_session_id"];

/// The MCP server: the daemon client and who is calling.
#[derive(Clone)]
struct Door {
    client: Arc<Client>,
    session: Option<String>,
    leader: bool,
    tools: Arc<Vec<Tool>>,
}

/// Serves MCP on stdin/stdout until the client closes stdin.
pub async fn serve_stdio(layout: &Layout) -> anyhow::Result<()> {
    let client = client::connect(layout, true).await?;
    let session = std::env::var("TROUPE_SESSION_ID")
        .ok()
        .filter(|s| !s.is_empty());
    let leader = match &session {
        Some(s) => is_leader(&client, s).await,
        None => false,
    };
    let tools = Arc::new(tools(session.is_some(), leader));
    let door = Door {
        client: Arc::new(client),
        session,
        leader,
        tools,
    };
    let running = door.serve(rmcp::transport::stdio()).await?;
    running.waiting().await?;
    Ok(())
}

/// Whether `session` is the leader of its party.
async fn is_leader(client: &Client, session: &str) -> bool {
    let Ok(s) = client
        .call("get_session", json!({ "session_id": session }))
        .await
    else {
        return false;
    };
    let Some(party) = s["session"]["party_id"].as_str() else {
        return false;
    };
    let Ok(status) = client
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
fn tools(has_session: bool, leader: bool) -> Vec<Tool> {
    crate::api::OPERATIONS
        .iter()
        .filter(|op| AGENT_TOOLS.contains(&op.name) || (leader && LEADER_TOOLS.contains(&op.name)))
        .map(|op| {
            let mut schema = serde_json::to_value((op.params_schema)()).unwrap_or_default();
            if op.name == "request_permission" {
                schema = permission_prompt_schema();
            } else if has_session {
                strip_caller_fields(&mut schema);
            }
            let schema = match schema {
                Value::Object(mut m) => {
                    m.remove("$schema");
                    m.remove("title");
                    m
                }
                _ => JsonObject::new(),
            };
            Tool::new(op.name, op.summary, Arc::new(schema))
        })
        .collect()
}

fn strip_caller_fields(schema: &mut Value) {
    if let Some(props) = schema.get_mut("properties").and_then(Value::as_object_mut) {
        for f in CALLER_FIELDS {
            props.remove(*f);
        }
    }
    if let Some(req) = schema.get_mut("required").and_then(Value::as_array_mut) {
        req.retain(|f| !f.as_str().is_some_and(|f| CALLER_FIELDS.contains(&f)));
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
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(self.tools.to_vec()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.tools.iter().find(|t| t.name == name).cloned()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let name = request.name.to_string();
        if !self.tools.iter().any(|t| t.name == name) {
            let why = if LEADER_TOOLS.contains(&name.as_str()) && !self.leader {
                format!("tool {name} is for a party's leader only")
            } else {
                format!("unknown tool {name}")
            };
            return Err(McpError::invalid_params(why, None));
        }
        let mut args = Value::Object(request.arguments.unwrap_or_default());
        let result = if name == "request_permission" {
            self.permission(args).await
        } else {
            self.fill_caller(&name, &mut args);
            match self.client.call(&name, args).await {
                Ok(v) => CallToolResult::success(text(v.to_string())),
                Err(e) => CallToolResult::error(text(e.to_string())),
            }
        };
        Ok(result.into())
    }
}

impl Door {
    /// Fills the calling session into the params that name it, unless given.
    fn fill_caller(&self, op: &str, args: &mut Value) {
        let Some(session) = &self.session else {
            return;
        };
        let Some(schema_props) = crate::api::OPERATIONS
            .iter()
            .find(|o| o.name == op)
            .and_then(|o| serde_json::to_value((o.params_schema)()).ok())
            .and_then(|s| s.get("properties").cloned())
        else {
            return;
        };
        for f in CALLER_FIELDS {
            if schema_props.get(*f).is_some() && args.get(*f).is_none() {
                args[*f] = json!(session);
            }
        }
    }

    /// Asks Troupe (rules, then a person) and answers as `--permission-prompt-tool` expects:
    /// `{"behavior":"allow","updatedInput":…}` or `{"behavior":"deny","message":…}`.
    async fn permission(&self, args: Value) -> CallToolResult {
        let Some(session) = &self.session else {
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
            let r = match self.client.call("request_permission", params.clone()).await {
                Ok(r) => r,
                Err(e) => return CallToolResult::error(text(e.to_string())),
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
