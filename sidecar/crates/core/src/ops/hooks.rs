//! `claude_hook`: what Troupe does at each Claude Code hook (`troupe hook <event>` forwards the
//! hook's JSON here). SessionStart registers (or resumes) the session; PreToolUse answers from
//! Troupe's policy: the workflow's blocked tools deny, an approval rule allows, a run Troupe
//! started asks a person through approvals, an interactive session is left to Claude's own
//! prompt (`ask`); Stop, SubagentStop and Notification go to the timeline. Unread messages are
//! injected at the next hook that can carry context (never typed into a terminal). The daemon's
//! `POST /hooks/<Event>` on the MCP port (Claude Code's `http` hook form) calls the same handler.

use serde_json::{Value, json};
use troupe_engine::AgentDefinition;
use troupe_store::{NewEvent, NewNotification, PollFilter};

use crate::daemon::Daemon;
use troupe_api::ApiError;
use troupe_api::types::*;

const OP: &str = "claude_hook";
/// Longest a PreToolUse hook of a Troupe run waits for a person (`troupe init` gives the hook a
/// 600 s timeout); then it denies, saying the decision is still pending.
const HOOK_APPROVAL_WAIT_MS: u64 = 540_000;

pub async fn claude_hook(d: &Daemon, p: HookParams) -> Result<HookResult, ApiError> {
    let event = p
        .payload
        .get("hook_event_name")
        .and_then(Value::as_str)
        .ok_or_else(|| ApiError::invalid(OP, "payload.hook_event_name is missing"))?
        .to_string();
    let session_id = session_of(d, &p).await?;
    d.store.heartbeat(session_id.clone()).await?;
    let output = match event.as_str() {
        "SessionStart" => {
            let mut context = format!(
                "You are Troupe session {session_id}: use the troupe MCP tools to message the \
                 other agents of this project."
            );
            if let Some(m) = unread(d, &session_id).await? {
                context.push_str("\n\n");
                context.push_str(&m);
            }
            specific(&event, json!({ "additionalContext": context }))
        }
        "UserPromptSubmit" | "PostToolUse" => match unread(d, &session_id).await? {
            Some(m) => specific(&event, json!({ "additionalContext": m })),
            None => json!({}),
        },
        "PreToolUse" => pre_tool_use(d, &session_id, &p.payload).await?,
        "Stop" | "SubagentStop" => {
            record(d, &session_id, "agent_stopped", &event, &p.payload).await?;
            // Messages that arrived meanwhile: keep going and read them (once per stop).
            let again = p.payload.get("stop_hook_active") == Some(&json!(true));
            match (again, unread(d, &session_id).await?) {
                (false, Some(m)) => json!({ "decision": "block", "reason": m }),
                _ => json!({}),
            }
        }
        "Notification" => {
            record(d, &session_id, "agent_notification", &event, &p.payload).await?;
            let session = d.store.get_session(&session_id)?;
            let text = p
                .payload
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("needs attention");
            d.store
                .add_notification(NewNotification {
                    project_id: Some(session.project_id),
                    party_id: session.party_id,
                    kind: "agent".into(),
                    text: format!("{} ({session_id}): {text}", session.cli),
                    data: json!({ "session_id": session_id }),
                })
                .await?;
            json!({})
        }
        "SessionEnd" => {
            record(d, &session_id, "agent_session_end", &event, &p.payload).await?;
            json!({})
        }
        _ => json!({}),
    };
    Ok(HookResult { session_id, output })
}

/// The Troupe session of the hook's CLI session: the one Troupe started it as, or the one
/// registered for its own session id (created on first sight).
async fn session_of(d: &Daemon, p: &HookParams) -> Result<String, ApiError> {
    if let Some(s) = &p.session_id {
        return Ok(d.store.get_session(s)?.session_id);
    }
    let cwd = p
        .payload
        .get("cwd")
        .and_then(Value::as_str)
        .ok_or_else(|| ApiError::invalid(OP, "payload.cwd is missing"))?;
    let external = p
        .payload
        .get("session_id")
        .and_then(Value::as_str)
        .map(str::to_string);
    let r = crate::ops::register_session(
        d,
        RegisterSessionParams {
            cli: p.cli.clone(),
            cwd: cwd.to_string(),
            external_id: external,
            parent_session_id: p.parent_session_id.clone(),
            spawned_by_agent_id: None,
            party_id: None,
        },
    )
    .await?;
    Ok(r.session_id)
}

fn specific(event: &str, fields: Value) -> Value {
    let mut out = json!({ "hookEventName": event });
    if let (Some(o), Value::Object(f)) = (out.as_object_mut(), fields) {
        o.extend(f);
    }
    json!({ "hookSpecificOutput": out })
}

/// Unread messages as one block of text (marked read), or None.
async fn unread(d: &Daemon, session_id: &str) -> Result<Option<String>, ApiError> {
    let messages = d.store.poll_messages(&PollFilter {
        session_id: session_id.to_string(),
        since: None,
        unread_only: true,
        limit: 50,
    })?;
    if messages.is_empty() {
        return Ok(None);
    }
    let ids = messages.iter().map(|m| m.message_id.clone()).collect();
    d.store
        .mark_read(session_id.to_string(), Some(ids), None)
        .await?;
    let mut text = String::from("Messages for you from Troupe:");
    for m in &messages {
        text.push_str(&format!("\n- from {}: {}", m.from_session_id, m.content));
    }
    Ok(Some(text))
}

async fn record(
    d: &Daemon,
    session_id: &str,
    kind: &str,
    event: &str,
    payload: &Value,
) -> Result<(), ApiError> {
    let session = d.store.get_session(session_id)?;
    let mut data = json!({ "hook": event });
    for key in ["message", "notification_type", "reason", "stop_hook_active"] {
        if let Some(v) = payload.get(key) {
            data[key] = v.clone();
        }
    }
    d.store
        .append_event(NewEvent {
            kind: kind.into(),
            project_id: Some(session.project_id),
            session_id: Some(session_id.to_string()),
            party_id: session.party_id,
            data,
        })
        .await?;
    Ok(())
}

async fn pre_tool_use(d: &Daemon, session_id: &str, payload: &Value) -> Result<Value, ApiError> {
    let tool = payload
        .get("tool_name")
        .and_then(Value::as_str)
        .ok_or_else(|| ApiError::invalid(OP, "payload.tool_name is missing"))?;
    let input = payload.get("tool_input").cloned().unwrap_or(json!({}));
    let file_path = ["file_path", "path", "notebook_path"]
        .iter()
        .find_map(|k| input.get(*k).and_then(Value::as_str))
        .map(str::to_string);
    let decide = |decision: &str, reason: String| {
        specific(
            "PreToolUse",
            json!({ "permissionDecision": decision, "permissionDecisionReason": reason }),
        )
    };
    // A session leading its own party (`mode: self`) still has a person at its terminal.
    let run = d
        .store
        .run_of_session(session_id)?
        .filter(|r| !crate::runners::is_attached(&r.definition));
    let definition = run
        .as_ref()
        .and_then(|r| serde_json::from_value::<AgentDefinition>(r.definition.clone()).ok());
    if let Some(def) = &definition
        && let Err(why) = def.workflow.permits(tool)
    {
        return Ok(decide("deny", why));
    }
    // The tool policy of the step this session works on (seed 004).
    let (verdict, _) = crate::collab::tool_verdict(&d.store, session_id, tool);
    if let troupe_engine::collab::ToolVerdict::Deny(why) = &verdict {
        d.store
            .append_event(troupe_store::NewEvent {
                kind: "tool_denied_by_step".into(),
                session_id: Some(session_id.to_string()),
                party_id: d
                    .store
                    .get_session(session_id)
                    .ok()
                    .and_then(|s| s.party_id),
                data: json!({ "tool": tool, "reason": why }),
                ..troupe_store::NewEvent::default()
            })
            .await?;
        return Ok(decide("deny", why.clone()));
    }
    let by_policy = verdict != troupe_engine::collab::ToolVerdict::Default;
    if verdict == troupe_engine::collab::ToolVerdict::Default
        && let Some(rule) =
            crate::ops::approvals::matching_rule(d, session_id, tool, &input, file_path.as_deref())?
    {
        return Ok(decide(
            "allow",
            format!(
                "Troupe approval rule {} ({} {})",
                rule.rule_id, rule.tool_name, rule.pattern
            ),
        ));
    }
    if run.is_none() && !by_policy {
        // Someone is at this session's terminal: Claude asks them itself.
        return Ok(decide("ask", "no Troupe rule covers this call".into()));
    }
    let params = RequestPermissionParams {
        session_id: session_id.to_string(),
        approval_id: None,
        tool_name: Some(tool.to_string()),
        input: Some(input),
        file_path,
        start_line: None,
        end_line: None,
        diff: None,
        is_dangerous: false,
        danger_reason: None,
        request_key: payload
            .get("tool_use_id")
            .and_then(Value::as_str)
            .map(str::to_string),
        wait_ms: Some(HOOK_APPROVAL_WAIT_MS.min(crate::ops::MAX_WAIT_MS)),
    };
    let r = crate::ops::request_permission(d, params).await?;
    Ok(match r.status {
        ApprovalStatus::Approved => {
            decide("allow", format!("approved in Troupe ({})", r.approval_id))
        }
        ApprovalStatus::Pending => decide(
            "deny",
            format!(
                "no decision in Troupe yet ({}); ask again later",
                r.approval_id
            ),
        ),
        other => decide(
            "deny",
            format!(
                "{other} in Troupe{}",
                r.reason.map(|r| format!(": {r}")).unwrap_or_default()
            ),
        ),
    })
}
