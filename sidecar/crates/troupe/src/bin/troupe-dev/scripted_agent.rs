//! `troupe-dev scripted-acp-agent`: a small Agent Client Protocol agent that follows a script, for
//! what real agents cannot be made to do on cue (tests, benchmarks). It speaks
//! newline-delimited JSON-RPC on stdio, hand-written so that it can also misbehave on purpose.
//! The script is `TROUPE_ACP_SCRIPT` (or `--script`):
//! - `write` (default): a plan, a message, asks permission to write `TROUPE_ACP_FILE`
//!   (NOTES.md) with `TROUPE_ACP_CONTENT`, writes it with `fs/write_text_file` when allowed,
//!   runs `wc -c` on it in a terminal, then ends its turn;
//! - `crash`: says something, then exits with status 3 mid-turn; `crash-once` does that on its
//!   first attempt (`TROUPE_ATTEMPT` 1) and `write` afterwards;
//! - `hang`: says something, then never answers again (`hang-hard` also ignores SIGTERM);
//! - `wait`: says something and waits for `session/cancel`, then ends the turn `cancelled`;
//! - `malformed`: garbage lines, an unknown notification, an unknown update kind and an
//!   unknown request among its messages, then `write`;
//! - `flood`: `TROUPE_ACP_FLOOD` (20000) message chunks and a tool call per 5000, then ends;
//! - `elicit`: asks its user to fill in a form (`elicitation/create`: a branch name, a remote
//!   picked from two, an optional number of retries; or `TROUPE_ACP_FORM`, `{message,
//!   requestedSchema}`) and says what came back; with `TROUPE_ACP_WITHDRAW_ON` (a path) it
//!   withdraws the form (`$/cancel_request`) once that file exists.
//!
//! - `terminal`: runs `TROUPE_ACP_TERMINAL_COMMAND` (a program, no arguments) in a terminal
//!   (`terminal/create`, with the agent's whole environment, as a shell it ran itself would
//!   get), waits for it, and ends its turn saying what the terminal printed (`The terminal
//!   said:` and the output on the lines after), so that its run's result is that output.
//!
//! - `rounds`: a session of many turns: each says `turn N: <the prompt's first line>` and ends
//!   (never calling `complete`); with `TROUPE_ACP_FIRST_WAITS` the first waits for
//!   `session/cancel`.
//!
//! `TROUPE_ACP_FIRST_SCRIPT` replaces the script on the first attempt only. With
//! `TROUPE_ACP_CHILD=SECS` it first starts a child (`sleep SECS`) in the agent's process group,
//! as Claude Code starts `troupe mcp`: a process the daemon must not leave behind when the agent goes.
//!
//! With `TROUPE_ACP_RECORD` set, every message it receives is appended to that file (JSON
//! lines). Ids of its own requests are strings, and a reply must echo them exactly (else it
//! exits with status 7).

use std::io::Write as _;

use anyhow::{Context, bail};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

struct Wire {
    lines: tokio::io::Lines<BufReader<tokio::io::Stdin>>,
    out: tokio::io::Stdout,
    record: Option<std::fs::File>,
    next: u64,
}

impl Wire {
    async fn send(&mut self, msg: &Value) -> anyhow::Result<()> {
        self.raw(&msg.to_string()).await
    }

    async fn raw(&mut self, line: &str) -> anyhow::Result<()> {
        self.out.write_all(line.as_bytes()).await?;
        self.out.write_all(b"\n").await?;
        self.out.flush().await?;
        Ok(())
    }

    /// The next message from the client; None at end of input.
    async fn recv(&mut self) -> anyhow::Result<Option<Value>> {
        loop {
            let Some(line) = self.lines.next_line().await? else {
                return Ok(None);
            };
            if line.trim().is_empty() {
                continue;
            }
            if let Some(f) = &mut self.record {
                // One write per line: agents of a party may share the file (O_APPEND).
                f.write_all(format!("{line}\n").as_bytes())?;
            }
            let msg: Value = serde_json::from_str(&line).context("a line from the client")?;
            return Ok(Some(msg));
        }
    }

    async fn notify_update(&mut self, session: &str, update: Value) -> anyhow::Result<()> {
        self.send(&json!({
            "jsonrpc": "2.0",
            "method": "session/update",
            "params": {"sessionId": session, "update": update},
        }))
        .await
    }

    async fn say(&mut self, session: &str, text: &str) -> anyhow::Result<()> {
        self.notify_update(
            session,
            json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}),
        )
        .await
    }

    /// Sends a request with a string id and waits for its answer (other messages are kept
    /// aside: a `session/cancel` is remembered).
    async fn call(&mut self, method: &str, params: Value) -> anyhow::Result<Value> {
        self.next += 1;
        let id = format!("{method}#{}-ü", self.next);
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await?;
        loop {
            let Some(msg) = self.recv().await? else {
                bail!("the client went away while {method} was pending");
            };
            // Requests and notifications wait; an error about a line it could not read
            // (id null) is no answer.
            if msg.get("method").is_some() || msg.get("id") == Some(&Value::Null) {
                continue;
            }
            match msg.get("id") {
                Some(Value::String(got)) if *got == id => {}
                other => {
                    eprintln!("reply id {other:?} is not the id {id:?} we sent");
                    std::process::exit(7);
                }
            }
            if let Some(err) = msg.get("error") {
                bail!("{method} failed: {err}");
            }
            return Ok(msg.get("result").cloned().unwrap_or(Value::Null));
        }
    }
}

impl Wire {
    /// Sends a request, withdraws it (`$/cancel_request`) once the file `marker` exists, and
    /// returns its answer (or its error, as JSON).
    async fn withdrawn(
        &mut self,
        method: &str,
        params: Value,
        marker: &str,
    ) -> anyhow::Result<Value> {
        self.next += 1;
        let id = format!("{method}#{}", self.next);
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await?;
        while !std::path::Path::new(marker).exists() {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        self.send(
            &json!({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": id}}),
        )
        .await?;
        loop {
            let Some(msg) = self.recv().await? else {
                bail!("the client went away while {method} was pending");
            };
            if msg.get("method").is_none() && msg.get("id") == Some(&Value::String(id.clone())) {
                return Ok(msg
                    .get("result")
                    .or(msg.get("error"))
                    .cloned()
                    .unwrap_or(Value::Null));
            }
        }
    }
}

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_string())
}

pub async fn run(script: Option<String>) -> anyhow::Result<()> {
    let mut script = script.unwrap_or_else(|| env_or("TROUPE_ACP_SCRIPT", "write"));
    if let Ok(first) = std::env::var("TROUPE_ACP_FIRST_SCRIPT")
        && env_or("TROUPE_ATTEMPT", "1") == "1"
    {
        script = first;
    }
    if script == "crash-once" {
        script = if env_or("TROUPE_ATTEMPT", "1") == "1" {
            "crash".into()
        } else {
            "write".into()
        };
    }
    let record = match std::env::var_os("TROUPE_ACP_RECORD") {
        Some(path) => Some(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)?,
        ),
        None => None,
    };
    if let Ok(secs) = std::env::var("TROUPE_ACP_CHILD") {
        // Not waited for: it outlives this agent unless its process group is ended.
        tokio::process::Command::new("sleep")
            .arg(secs)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .context("cannot start the agent's child")?;
    }
    if script == "hang-hard" {
        // Keep a handler installed so SIGTERM does nothing: only SIGKILL ends it.
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::spawn(async move { while term.recv().await.is_some() {} });
    }
    let mut wire = Wire {
        lines: BufReader::new(tokio::io::stdin()).lines(),
        out: tokio::io::stdout(),
        record,
        next: 0,
    };
    let mut cwd = String::from(".");
    while let Some(msg) = wire.recv().await? {
        let Some(method) = msg
            .get("method")
            .and_then(Value::as_str)
            .map(str::to_string)
        else {
            continue;
        };
        let id = msg.get("id").cloned();
        let params = msg.get("params").cloned().unwrap_or(Value::Null);
        let result = match method.as_str() {
            "initialize" => json!({
                "protocolVersion": 1,
                "agentCapabilities": {"loadSession": false, "mcpCapabilities": {"http": false, "sse": false}},
                "authMethods": [{"id": "gateway", "name": "Gateway", "description": "a model server URL"}],
                "agentInfo": {"name": "troupe-scripted-agent", "version": env!("CARGO_PKG_VERSION")},
            }),
            "authenticate" => json!({}),
            "session/new" => {
                cwd = params
                    .get("cwd")
                    .and_then(Value::as_str)
                    .unwrap_or(".")
                    .to_string();
                json!({"sessionId": "scripted-1"})
            }
            "session/prompt" => {
                let session = params
                    .get("sessionId")
                    .and_then(Value::as_str)
                    .unwrap_or("scripted-1")
                    .to_string();
                let stop = if script == "rounds" {
                    let text = params
                        .pointer("/prompt/0/text")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string();
                    rounds_turn(&mut wire, &session, &text).await?
                } else {
                    turn(&mut wire, &script, &session, &cwd).await?
                };
                json!({"stopReason": stop})
            }
            "session/cancel" => continue,
            _ => {
                if let Some(id) = id {
                    wire.send(&json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "Method not found"}}))
                        .await?;
                }
                continue;
            }
        };
        if let Some(id) = id {
            wire.send(&json!({"jsonrpc": "2.0", "id": id, "result": result}))
                .await?;
        }
    }
    Ok(())
}

/// Turns of the `rounds` script so far.
static ROUNDS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// A turn of `rounds`: says `turn N: <the prompt's first line>` and ends it; with
/// `TROUPE_ACP_FIRST_WAITS` set, the first turn waits for `session/cancel` instead.
async fn rounds_turn(wire: &mut Wire, session: &str, prompt: &str) -> anyhow::Result<String> {
    let n = ROUNDS.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
    if n == 1 && std::env::var_os("TROUPE_ACP_FIRST_WAITS").is_some() {
        wire.say(session, "Working on it, until cancelled.").await?;
        while let Some(msg) = wire.recv().await? {
            if msg.get("method").and_then(Value::as_str) == Some("session/cancel") {
                return Ok("cancelled".into());
            }
        }
        bail!("the client went away");
    }
    let first = prompt.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    wire.say(session, &format!("turn {n}: {first}")).await?;
    Ok("end_turn".into())
}

/// One turn of the script; its stop reason.
async fn turn(wire: &mut Wire, script: &str, session: &str, cwd: &str) -> anyhow::Result<String> {
    match script {
        "crash" => {
            wire.say(session, "Starting, then crashing.").await?;
            std::process::exit(3);
        }
        "hang" | "hang-hard" => {
            wire.say(session, "Starting, then hanging.").await?;
            loop {
                tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
            }
        }
        "wait" => {
            wire.say(session, "Waiting to be cancelled.").await?;
            while let Some(msg) = wire.recv().await? {
                if msg.get("method").and_then(Value::as_str) == Some("session/cancel") {
                    return Ok("cancelled".into());
                }
            }
            bail!("the client went away");
        }
        "flood" => {
            let n: usize = env_or("TROUPE_ACP_FLOOD", "20000").parse().unwrap_or(20000);
            for i in 0..n {
                wire.say(session, &format!("chunk {i} ")).await?;
                if i % 5000 == 0 {
                    wire.notify_update(
                        session,
                        json!({"sessionUpdate": "tool_call", "toolCallId": format!("flood-{i}"),
                               "title": "Think", "kind": "think", "status": "completed"}),
                    )
                    .await?;
                }
            }
            return Ok("end_turn".into());
        }
        "elicit" => {
            // A form of three fields (text, one-of, an optional number) for its user, unless
            // TROUPE_ACP_FORM gives one ({message, requestedSchema}).
            let mut form = json!({
                "mode": "form",
                "sessionId": session,
                "message": "Before I push, I need a few details.",
                "requestedSchema": {
                    "type": "object",
                    "properties": {
                        "branch": {"type": "string", "title": "Branch name"},
                        "remote": {"type": "string", "title": "Remote",
                                   "oneOf": [{"const": "origin", "title": "Origin"},
                                             {"const": "upstream", "title": "Upstream"}]},
                        "retries": {"type": "integer", "title": "Retries",
                                    "description": "how often to try again"},
                    },
                    "required": ["branch", "remote"],
                },
            });
            if let Ok(given) = std::env::var("TROUPE_ACP_FORM") {
                let given: Value = serde_json::from_str(&given).context("TROUPE_ACP_FORM")?;
                form["message"] = given["message"].clone();
                form["requestedSchema"] = given["requestedSchema"].clone();
            }
            let answer = match std::env::var("TROUPE_ACP_WITHDRAW_ON") {
                Ok(marker) => wire.withdrawn("elicitation/create", form, &marker).await?,
                Err(_) => wire.call("elicitation/create", form).await?,
            };
            wire.say(session, &format!("The form came back: {answer}"))
                .await?;
            return Ok("end_turn".into());
        }
        "terminal" => return terminal_turn(wire, session).await,
        "malformed" => {
            wire.raw("{this is not json").await?;
            wire.raw("[]").await?;
            wire.raw(r#"{"jsonrpc":"2.0","method":"_x/unknown_notice","params":{"a":1}}"#)
                .await?;
            wire.notify_update(session, json!({"sessionUpdate": "hologram", "depth": 3}))
                .await?;
            wire.notify_update(session, json!({"sessionUpdate": "usage_update", "used": 1000, "size": 200000, "cost": {"amount": 0.25, "currency": "USD"}}))
                .await?;
            // An unknown request: the client must answer it (method not found) and go on.
            let asked = wire.call("_x/unknown_request", json!({})).await;
            if asked.is_ok() {
                bail!("an unknown request was answered with a result");
            }
        }
        _ => {}
    }
    write_turn(wire, session, cwd).await
}

async fn write_turn(wire: &mut Wire, session: &str, cwd: &str) -> anyhow::Result<String> {
    let file = env_or("TROUPE_ACP_FILE", "NOTES.md");
    let content = env_or("TROUPE_ACP_CONTENT", "Written by the scripted ACP agent.\n");
    let path = format!("{}/{file}", cwd.trim_end_matches('/'));
    wire.notify_update(
        session,
        json!({"sessionUpdate": "plan", "entries": [
            {"content": format!("Write {file}"), "priority": "high", "status": "in_progress"},
            {"content": "Check it", "priority": "medium", "status": "pending"},
        ]}),
    )
    .await?;
    wire.say(session, "I will write ").await?;
    wire.say(session, &format!("{file}.")).await?;
    wire.notify_update(
        session,
        json!({"sessionUpdate": "tool_call", "toolCallId": "call-write", "title": format!("Write {file}"),
               "kind": "edit", "status": "pending", "locations": [{"path": path}],
               "rawInput": {"file_path": path, "content": content}}),
    )
    .await?;
    let answer = wire
        .call(
            "session/request_permission",
            json!({"sessionId": session,
                   "toolCall": {"toolCallId": "call-write", "title": format!("Write {file}"), "kind": "edit",
                                "locations": [{"path": path}], "rawInput": {"file_path": path, "content": content},
                                "content": [{"type": "diff", "path": path, "oldText": null, "newText": content}]},
                   "options": [
                       {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
                       {"optionId": "allow_always", "name": "Always allow", "kind": "allow_always"},
                       {"optionId": "reject", "name": "Reject", "kind": "reject_once"},
                   ]}),
        )
        .await?;
    let outcome = answer.get("outcome").cloned().unwrap_or(Value::Null);
    let chosen = outcome
        .get("optionId")
        .and_then(Value::as_str)
        .unwrap_or("");
    if outcome.get("outcome").and_then(Value::as_str) == Some("cancelled") {
        return Ok("cancelled".into());
    }
    if !chosen.starts_with("allow") {
        wire.notify_update(
            session,
            json!({"sessionUpdate": "tool_call_update", "toolCallId": "call-write", "status": "failed"}),
        )
        .await?;
        wire.say(
            session,
            &format!("Permission refused ({chosen}): nothing written."),
        )
        .await?;
        return Ok("end_turn".into());
    }
    wire.call(
        "fs/write_text_file",
        json!({"sessionId": session, "path": path, "content": content}),
    )
    .await?;
    wire.notify_update(
        session,
        json!({"sessionUpdate": "tool_call_update", "toolCallId": "call-write", "status": "completed"}),
    )
    .await?;
    let back = wire
        .call(
            "fs/read_text_file",
            json!({"sessionId": session, "path": path}),
        )
        .await?;
    if back.get("content").and_then(Value::as_str) != Some(content.as_str()) {
        bail!("read back something else than written: {back}");
    }
    let term = wire
        .call(
            "terminal/create",
            json!({"sessionId": session, "command": "wc", "args": ["-c", file], "outputByteLimit": 4096}),
        )
        .await?;
    let term_id = term
        .get("terminalId")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let (_, out) = finish_terminal(wire, session, &term_id).await?;
    let counted = out
        .get("output")
        .and_then(Value::as_str)
        .unwrap_or("")
        .trim()
        .to_string();
    wire.say(session, &format!("Wrote {file} ({counted})."))
        .await?;
    Ok("end_turn".into())
}

/// Waits for terminal `term_id` to exit, reads its output and releases it: (exit, output).
async fn finish_terminal(
    wire: &mut Wire,
    session: &str,
    term_id: &str,
) -> anyhow::Result<(Value, Value)> {
    let which = json!({"sessionId": session, "terminalId": term_id});
    let exit = wire.call("terminal/wait_for_exit", which.clone()).await?;
    let out = wire.call("terminal/output", which.clone()).await?;
    wire.call("terminal/release", which).await?;
    Ok((exit, out))
}

/// A turn of `terminal`: runs `TROUPE_ACP_TERMINAL_COMMAND` in a terminal with the agent's
/// environment and says what it printed.
async fn terminal_turn(wire: &mut Wire, session: &str) -> anyhow::Result<String> {
    let command =
        std::env::var("TROUPE_ACP_TERMINAL_COMMAND").context("TROUPE_ACP_TERMINAL_COMMAND")?;
    let env: Vec<Value> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .map(|(name, value)| json!({"name": name, "value": value}))
        .collect();
    let term = wire
        .call(
            "terminal/create",
            json!({"sessionId": session, "command": command, "args": [], "env": env,
                   "outputByteLimit": 1024 * 1024}),
        )
        .await?;
    let term_id = term
        .get("terminalId")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    // The call the terminal belongs to: it also ends the message said before (none here) from
    // the one said after.
    wire.notify_update(
        session,
        json!({"sessionUpdate": "tool_call", "toolCallId": "call-terminal", "title": format!("Run {command}"),
               "kind": "execute", "status": "in_progress",
               "content": [{"type": "terminal", "terminalId": term_id}]}),
    )
    .await?;
    let (exit, out) = finish_terminal(wire, session, &term_id).await?;
    let status = if exit.get("exitCode") == Some(&json!(0)) {
        "completed"
    } else {
        "failed"
    };
    wire.notify_update(
        session,
        json!({"sessionUpdate": "tool_call_update", "toolCallId": "call-terminal", "status": status}),
    )
    .await?;
    let text = out.get("output").and_then(Value::as_str).unwrap_or("");
    wire.say(session, &format!("The terminal said:\n{text}"))
        .await?;
    Ok("end_turn".into())
}
