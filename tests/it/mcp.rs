//! The MCP door: an rmcp client starts the real `troupe mcp` over stdio, as an agent CLI would,
//! lists the tools (the registry's agent operations with their schemas, minus the caller's ids;
//! party tools only for a leader), sends a message as its session, and asks permission the way
//! Claude Code's `--permission-prompt-tool` does, answered through Troupe. And a client Troupe did
//! not write checks the same door: the MCP Inspector's CLI mode (`@modelcontextprotocol/inspector`,
//! pinned in tests/mcp-inspector).

use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{Peer, RunningService};
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};

use crate::support::{
    BIN, TestDaemon, launch, pending_approval, register, wait_for, workspace_root,
};

type McpClient = RunningService<RoleClient, ()>;

async fn mcp(d: &TestDaemon, session: &str) -> McpClient {
    let cmd = tokio::process::Command::new(BIN).configure(|c| {
        c.arg("--data-dir")
            .arg(&d.layout.data_dir)
            .arg("mcp")
            .env("TROUPE_RUNTIME_DIR", &d.layout.runtime_dir)
            .env("TROUPE_SESSION_ID", session)
            .env("TROUPE_LOG", "warn");
    });
    ().serve(TokioChildProcess::new(cmd).unwrap())
        .await
        .unwrap()
}

async fn call(c: &Peer<RoleClient>, tool: &str, args: Value) -> CallToolResult {
    c.call_tool(
        CallToolRequestParams::new(tool.to_string())
            .with_arguments(args.as_object().unwrap().clone()),
    )
    .await
    .unwrap()
}

fn text(r: &CallToolResult) -> String {
    r.content
        .first()
        .and_then(|c| c.as_text())
        .map(|t| t.text.clone())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_cli_gets_troupe_tools_over_mcp() {
    let d = TestDaemon::start();
    let c = d.client().await;
    let project = d.project("proj");
    let a = register(&c, "claude", &project, None).await;
    let b = register(&c, "codex", &project, None).await;
    let m = mcp(&d, &a).await;
    assert_eq!(
        m.peer_info().unwrap().server_info.as_ref().unwrap().name,
        "troupe"
    );

    let tools = m.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    for want in [
        "send_message",
        "poll_messages",
        "complete",
        "start_agent",
        "escalate_task",
        "request_permission",
    ] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
    assert!(!names.contains(&"launch_party"), "not a leader: {names:?}");
    assert!(!names.contains(&"shutdown_daemon"), "{names:?}");
    let send = tools.iter().find(|t| t.name == "send_message").unwrap();
    let schema = Value::Object((*send.input_schema).clone());
    assert!(
        schema["properties"]["to_session_id"].is_object(),
        "{schema}"
    );
    assert!(
        schema["properties"].get("from_session_id").is_none(),
        "{schema}"
    );
    assert!(
        !schema["required"].to_string().contains("from_session_id"),
        "{schema}"
    );
    // Descriptions as agent CLIs show them, and hints that let a CLI pass the reads through.
    for t in &tools {
        let d = t.description.as_deref().unwrap_or_default();
        assert!(!d.is_empty() && d.trim() == d, "{}: {d:?}", t.name);
    }
    let hint = |name: &str| {
        let a = tools
            .iter()
            .find(|t| t.name == name)
            .and_then(|t| t.annotations.clone())
            .unwrap_or_else(|| panic!("{name} has no annotations"));
        (a.read_only_hint, a.destructive_hint)
    };
    assert_eq!(hint("get_plan"), (Some(true), Some(false)));
    assert_eq!(hint("list_agents"), (Some(true), Some(false)));
    assert_eq!(hint("send_message"), (Some(false), Some(false)));
    assert_eq!(hint("cancel_agent"), (Some(false), Some(true)));

    // A call is the operation, as the calling session (whatever the model claims to be).
    let r = call(
        &m,
        "send_message",
        json!({ "to_session_id": b, "content": "hello over MCP", "from_session_id": b }),
    )
    .await;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    // Its result is structured (MCP 2025-06-18): the same JSON as the text, with the properties
    // the tool's outputSchema requires; every tool but the permission prompt declares one.
    let structured = r.structured_content.clone().expect("structuredContent");
    assert_eq!(
        structured,
        serde_json::from_str::<Value>(&text(&r)).unwrap(),
        "the text is the same JSON"
    );
    for t in &tools {
        let out = t.output_schema.as_ref();
        if t.name == "request_permission" {
            assert!(out.is_none(), "the permission prompt answers text");
            continue;
        }
        let out = out.unwrap_or_else(|| panic!("{} has no outputSchema", t.name));
        assert_eq!(out.get("type"), Some(&json!("object")), "{}", t.name);
    }
    let send = tools.iter().find(|t| t.name == "send_message").unwrap();
    let schema = send.output_schema.as_ref().unwrap();
    for field in schema["required"].as_array().unwrap() {
        let field = field.as_str().unwrap();
        assert!(
            structured.get(field).is_some(),
            "{field} required by the outputSchema: {structured}"
        );
    }
    let inbox = c
        .call("poll_messages", json!({ "session_id": b }))
        .await
        .unwrap();
    assert_eq!(inbox["messages"][0]["content"], "hello over MCP");
    assert_eq!(inbox["messages"][0]["from_session_id"], a.as_str());
    // A failing operation is a tool error the model reads; an unknown or forbidden tool is a
    // protocol error.
    let r = call(
        &m,
        "send_message",
        json!({ "to_session_id": "nobody", "content": "x" }),
    )
    .await;
    assert_eq!(r.is_error, Some(true));
    assert!(text(&r).contains("not found"), "{}", text(&r));
    let err = m
        .call_tool(CallToolRequestParams::new("launch_party"))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("tool launch_party is for a party's leader only"),
        "{err}"
    );

    // Claude Code's permission prompt: {tool_name, input, tool_use_id} in, behavior out.
    for (decision, want) in [("approve", "allow"), ("deny", "deny")] {
        let ask = {
            let m = m.peer().clone();
            let tool_use = format!("toolu_{decision}");
            tokio::spawn(async move {
                call(
                    &m,
                    "request_permission",
                    json!({ "tool_name": "Write", "tool_use_id": tool_use,
                            "input": { "file_path": "/tmp/x/notes.md", "content": "hi" } }),
                )
                .await
            })
        };
        let pending = pending_approval(&c).await;
        assert_eq!(pending["tool_name"], "Write");
        assert_eq!(pending["session_id"], a.as_str());
        assert_eq!(pending["file_path"], "/tmp/x/notes.md");
        c.call(
            "decide_approval",
            json!({ "approval_id": pending["approval_id"], "decision": decision }),
        )
        .await
        .unwrap();
        let answer: Value = serde_json::from_str(&text(&ask.await.unwrap())).unwrap();
        assert_eq!(answer["behavior"], want, "{answer}");
        if want == "allow" {
            assert_eq!(answer["updatedInput"]["content"], "hi");
        } else {
            assert!(
                answer["message"].as_str().unwrap().starts_with("denied"),
                "{answer}"
            );
        }
    }
    m.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_party_leader_also_gets_the_party_tools() {
    let d = TestDaemon::start();
    let c = d.client().await;
    let project = d.project("proj");
    c.call(
        "create_agent_definition",
        json!({ "definition": { "name": "sleeper", "command": ["sleep", "60"] } }),
    )
    .await
    .unwrap();
    c.call(
        "create_party_definition",
        json!({ "definition": { "name": "led", "roles": {
            "boss": { "agent": "sleeper", "is_leader": true },
            "dev": { "agent": "sleeper" } },
            "flow": { "dev": ["boss"] } } }),
    )
    .await
    .unwrap();
    let party = launch(&c, "led", &project).await;
    let leader = wait_for("the leader's session", 20, || async {
        let s = c
            .call("get_party_status", json!({ "party_id": party }))
            .await
            .unwrap();
        s["members"][0]["session_id"].as_str().map(str::to_string)
    })
    .await;
    let m = mcp(&d, &leader).await;
    let names: Vec<String> = m
        .list_all_tools()
        .await
        .unwrap()
        .iter()
        .map(|t| t.name.to_string())
        .collect();
    assert!(names.contains(&"get_party_status".to_string()), "{names:?}");
    // The leader's registry: it may define parties (seed 000).
    let r = call(
        &m,
        "create_party_definition",
        json!({ "definition": { "name": "sub-team", "roles": { "dev": { "agent": "demo-developer" } } } }),
    )
    .await;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    let r = call(&m, "list_party_definitions", json!({})).await;
    assert!(text(&r).contains("sub-team"), "{}", text(&r));
    let r = call(&m, "get_party_status", json!({ "party_id": party })).await;
    let status: Value = serde_json::from_str(&text(&r)).unwrap();
    assert_eq!(status["party"]["status"], "running");
    let r = call(&m, "cancel_party", json!({ "party_id": party })).await;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    m.cancel().await.unwrap();
}

/// The same door over streamable HTTP, served by the daemon itself: the token is required and
/// the session comes from the `X-Troupe-Session` header.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_serves_mcp_over_streamable_http_with_its_token() {
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

    let d = TestDaemon::start();
    let c = d.client().await;
    let project = d.project("proj");
    let a = register(&c, "claude", &project, None).await;
    let b = register(&c, "codex", &project, None).await;
    let url = troupe::client::read_endpoint(&d.layout)
        .unwrap()
        .mcp_url
        .unwrap();
    assert!(
        url.starts_with("http://127.0.0.1:") && url.ends_with("/mcp"),
        "{url}"
    );
    let connect = |token: String, session: String| {
        let url = url.clone();
        async move {
            crate::support::rustls_provider();
            let cfg = StreamableHttpClientTransportConfig::with_uri(url)
                .auth_header(token)
                .custom_headers(std::collections::HashMap::from([(
                    http::HeaderName::from_static("x-troupe-session"),
                    http::HeaderValue::from_str(&session).unwrap(),
                )]));
            ().serve(StreamableHttpClientTransport::from_config(cfg))
                .await
        }
    };

    let err = connect("wrong-token".into(), a.clone()).await.unwrap_err();
    assert!(err.to_string().contains("401"), "{err}");

    let m = connect(d.token(), a.clone()).await.unwrap();
    let names: Vec<String> = m
        .list_all_tools()
        .await
        .unwrap()
        .iter()
        .map(|t| t.name.to_string())
        .collect();
    assert!(names.contains(&"send_message".to_string()), "{names:?}");
    let r = call(
        &m,
        "send_message",
        json!({ "to_session_id": b, "content": "over http" }),
    )
    .await;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    let inbox = c
        .call("poll_messages", json!({ "session_id": b }))
        .await
        .unwrap();
    assert_eq!(inbox["messages"][0]["content"], "over http");
    assert_eq!(inbox["messages"][0]["from_session_id"], a.as_str());
    m.cancel().await.unwrap();
}

/// Runs the MCP Inspector's CLI mode against `troupe mcp` as `session` of `d` (`method_args`:
/// `--method …` and its options); what it printed (`--format json`: `{"result": …}`).
async fn inspector(d: &TestDaemon, session: &str, method_args: &[&str]) -> Value {
    let dir = workspace_root().join("tests/mcp-inspector");
    let bin = dir.join("node_modules/.bin/mcp-inspector");
    assert!(
        bin.is_file(),
        "the MCP Inspector is missing: run scripts/test (it runs npm ci in {})",
        dir.display()
    );
    let mut cmd = std::process::Command::new("node");
    cmd.arg(bin)
        .arg("--cli")
        // The Inspector gives a stdio server only these and its own basic environment.
        .arg("-e")
        .arg(format!(
            "TROUPE_RUNTIME_DIR={}",
            d.layout.runtime_dir.display()
        ))
        .arg("-e")
        .arg(format!("TROUPE_SESSION_ID={session}"))
        .args(["-e", "TROUPE_LOG=warn"])
        // Generous: under a loaded test run, node and the server start slowly.
        .args(["--connect-timeout", "120000", "--format", "json"])
        .args(method_args)
        .arg("--")
        .arg(BIN)
        .arg("--data-dir")
        .arg(&d.layout.data_dir)
        .arg("mcp")
        // Its catalog and client config live under $HOME: the test's own.
        .env("HOME", d.dir.path())
        .stdin(std::process::Stdio::null());
    let line = format!("{cmd:?}");
    let out = tokio::task::spawn_blocking(move || cmd.output().expect("node runs"))
        .await
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success(),
        "{line}: {}\n{stdout}\n{stderr}",
        out.status
    );
    let v: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("{line}: not JSON ({e}): {stdout}\n{stderr}"));
    v["result"].clone()
}

/// The MCP Inspector's CLI mode (a client Troupe did not write, on the official TypeScript SDK)
/// lists a party leader's tools and calls a read-only one: trimmed descriptions, the hints that
/// let an agent CLI pass the reads through, an `outputSchema` for every tool but the permission
/// prompt, and a call's `structuredContent` (which the Inspector itself validates against the
/// tool's `outputSchema`, failing the call if it does not match).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(troupe_test_tools),
    ignore = "drives a real tool scripts/test installs: run with TROUPE_TEST_TOOLS=1"
)]
async fn the_mcp_inspector_lists_and_calls_the_tools() {
    let d = TestDaemon::start();
    let c = d.client().await;
    let project = d.project("proj");
    c.call(
        "create_agent_definition",
        json!({ "definition": { "name": "sleeper", "command": ["sleep", "600"] } }),
    )
    .await
    .unwrap();
    c.call(
        "create_party_definition",
        json!({ "definition": { "name": "led", "roles": {
            "boss": { "agent": "sleeper", "is_leader": true } } } }),
    )
    .await
    .unwrap();
    let party = launch(&c, "led", &project).await;
    let leader = wait_for("the leader's session", 20, || async {
        let s = c
            .call("get_party_status", json!({ "party_id": party }))
            .await
            .unwrap();
        s["members"][0]["session_id"].as_str().map(str::to_string)
    })
    .await;

    // `--strict`: the Inspector fails on any schema portability error (a bare `true` where a
    // schema object is expected, say); its warnings (nullable `type` arrays) are legal.
    let listed = inspector(&d, &leader, &["--method", "tools/list", "--strict"]).await;
    let tools = listed["tools"].as_array().expect("tools");
    let tool = |name: &str| {
        tools
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("{name} missing from {listed}"))
    };
    for t in tools {
        let name = &t["name"];
        let d = t["description"].as_str().unwrap_or_default();
        assert!(!d.is_empty() && d.trim() == d, "{name}: {d:?}");
        assert_eq!(t["inputSchema"]["type"], "object", "{name}: {t}");
        let hints = &t["annotations"];
        for hint in ["readOnlyHint", "destructiveHint", "idempotentHint"] {
            assert!(hints[hint].is_boolean(), "{name}: {hint} in {hints}");
        }
        assert!(
            !(hints["readOnlyHint"] == true && hints["destructiveHint"] == true),
            "{name}: {hints}"
        );
        if name == "request_permission" {
            assert!(
                t.get("outputSchema").is_none(),
                "the permission prompt answers text"
            );
            continue;
        }
        let out = &t["outputSchema"];
        assert_eq!(out["type"], "object", "{name}: {t}");
        for field in out["required"].as_array().into_iter().flatten() {
            assert!(
                out["properties"].get(field.as_str().unwrap()).is_some(),
                "{name}: {field} required, not a property: {out}"
            );
        }
    }
    let hints = |name: &str| {
        let a = &tool(name)["annotations"];
        (
            a["readOnlyHint"].clone(),
            a["destructiveHint"].clone(),
            a["idempotentHint"].clone(),
        )
    };
    let (yes, no) = (json!(true), json!(false));
    for read in ["get_party_status", "list_agents", "get_plan"] {
        assert_eq!(
            hints(read),
            (yes.clone(), no.clone(), yes.clone()),
            "{read}"
        );
    }
    assert_eq!(hints("send_message"), (no.clone(), no.clone(), no.clone()));
    for destructive in ["cancel_party", "cancel_agent"] {
        assert_eq!(hints(destructive).0, no, "{destructive}");
        assert_eq!(hints(destructive).1, yes, "{destructive}");
    }

    // A read-only tool called with an argument, as `--tool-arg` passes it.
    let party_arg = format!("party_id={party}");
    let r = inspector(
        &d,
        &leader,
        &[
            "--method",
            "tools/call",
            "--tool-name",
            "get_party_status",
            "--tool-arg",
            &party_arg,
        ],
    )
    .await;
    assert_eq!(r["isError"], false, "{r}");
    let structured = r["structuredContent"]
        .as_object()
        .expect("structuredContent");
    // The same JSON as the text (the Inspector prints JSON numbers its own way: 0.0 as 0).
    let text: Value = serde_json::from_str(r["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(
        as_f64(Value::Object(structured.clone())),
        as_f64(text),
        "the text is the same JSON"
    );
    let out = &tool("get_party_status")["outputSchema"];
    for field in out["required"].as_array().expect("required") {
        let field = field.as_str().unwrap();
        assert!(structured.contains_key(field), "{field} missing: {r}");
    }
    for key in structured.keys() {
        assert!(
            out["properties"].get(key).is_some(),
            "{key} is not in the outputSchema: {out}"
        );
    }
    assert_eq!(structured["party"]["party_id"], party.as_str());
    assert_eq!(structured["party"]["status"], "running");
    assert_eq!(structured["members"][0]["session_id"], leader.as_str());
}

/// `v` with every number as an f64, for comparing JSON that went through JavaScript.
fn as_f64(v: Value) -> Value {
    match v {
        Value::Number(n) => json!(n.as_f64()),
        Value::Array(a) => Value::Array(a.into_iter().map(as_f64).collect()),
        Value::Object(o) => Value::Object(o.into_iter().map(|(k, v)| (k, as_f64(v))).collect()),
        v => v,
    }
}
