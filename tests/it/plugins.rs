//! WebAssembly plugins through the real daemon: the first-party plugins built from source,
//! installed with the CLI, hot-reloaded, granted; a router answering `route_request`; a
//! recovery plugin deciding a real member's crashes; executor members (OpenAI- and
//! Anthropic-style) driving a mock provider on loopback through the tool handler, with a
//! blocked tool, an approval, an ungranted host and the key injected by the host.

use std::path::Path;

use serde_json::{Value, json};
use troupe::client::Client;

use crate::mock_llm::{INPUT_TOKENS, MockLlm, OUTPUT_TOKENS, Reply};
use crate::scenario::Scenario;
use crate::support::{
    TestDaemon, asks_for_in_box_requests, define, launch, party_end, pending_approval,
    plugin_folder, register, repo, run_to_end, start, stdout, wait_for, wait_run,
};

pub(crate) async fn install(d: &TestDaemon, name: &str) -> Value {
    let dir = plugin_folder(d.dir.path(), name);
    let out = d.cli(&["--json", "plugin", "install", dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", crate::support::stderr(&out));
    serde_json::from_str(&stdout(&out)).unwrap()
}

pub(crate) async fn grant_mock(c: &Client, plugin: &str, mock: &MockLlm, base_path: &str) {
    c.call(
        "grant_plugin",
        json!({
            "name": plugin,
            "allow_http": [mock.base_url()],
            "key_env": "TROUPE_TEST_PROVIDER_KEY",
            "config": { "base_url": format!("{}{base_path}", mock.base_url()) },
        }),
    )
    .await
    .unwrap();
}

/// `start_agent`: the new run's id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(troupe_test_tools),
    ignore = "drives a real tool scripts/test installs: run with TROUPE_TEST_TOOLS=1"
)]
async fn plugins_install_list_route_hot_reload_and_refuse_bad_ones() {
    let d = TestDaemon::start();
    let c = d.client().await;
    let installed = install(&d, "router-keyword").await;
    assert_eq!(installed["plugin"]["kind"], "router");
    assert_eq!(installed["plugin"]["wit"], "0.1.0");
    install(&d, "recovery-backoff").await;

    let out = d.cli(&["plugin", "list"]);
    let text = stdout(&out);
    assert!(
        text.contains("router-keyword 0.1.0  router  wit 0.1.0"),
        "{text}"
    );
    assert!(text.contains("recovery-backoff 0.1.0  recovery"), "{text}");

    // The router chooses among explicit candidates, or among the agent definitions.
    let r = c
        .call(
            "route_request",
            json!({
                "router": "router-keyword",
                "request": "please review the security of this change",
                "candidates": [
                    { "name": "writer", "description": "writes docs", "capabilities": ["docs"] },
                    { "name": "auditor", "description": "reviews code", "capabilities": ["security", "review"] },
                ],
            }),
        )
        .await
        .unwrap();
    assert_eq!(r["agent"], "auditor", "{r}");
    assert!(r["reason"].as_str().unwrap().contains("security"), "{r}");
    define(
        &c,
        "agent",
        json!({ "name": "tester", "command": ["true"], "description": "runs the tests",
                "capabilities": ["testing", "qa"] }),
    )
    .await;
    let out = d.cli(&[
        "plugin",
        "route",
        "router-keyword",
        "add testing for the parser",
    ]);
    assert!(stdout(&out).starts_with("tester  ("), "{}", stdout(&out));

    // Errors name what went wrong.
    let err = c
        .call(
            "route_request",
            json!({ "router": "recovery-backoff", "request": "x" }),
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("plugin recovery-backoff@0.1.0 is a recovery plugin, not a router"),
        "{err}"
    );
    let err = c
        .call("route_request", json!({ "router": "nope", "request": "x" }))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("plugin nope not found"), "{err}");
    let bad = d.dir.path().join("bad");
    std::fs::create_dir_all(&bad).unwrap();
    std::fs::write(bad.join("plugin.toml"), "name = \"bad\"\nversion = \"1\"\n").unwrap();
    let out = d.cli(&["plugin", "install", bad.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = crate::support::stderr(&out);
    assert!(err.contains("bad plugin manifest"), "{err}");
    // An unsupported WIT version is refused, and the installed version stays.
    let newer = plugin_folder(&d.dir.path().join("newer"), "router-keyword");
    let m = std::fs::read_to_string(newer.join("plugin.toml")).unwrap();
    std::fs::write(
        newer.join("plugin.toml"),
        m.replace("wit = \"0.1.0\"", "wit = \"0.7.0\""),
    )
    .unwrap();
    let err = c
        .call("install_plugin", json!({ "path": newer }))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(
            "targets WIT troupe:plugin@0.7.0, which this host does not support (it supports 0.1.0)"
        ),
        "{err}"
    );
    let still = c
        .call("get_plugin", json!({ "name": "router-keyword" }))
        .await
        .unwrap();
    assert_eq!(still["plugin"]["wit"], "0.1.0");

    // Hot reload: a plugin folder copied in by hand is picked up; deleting it unloads it.
    let src = plugin_folder(&d.dir.path().join("by-hand"), "template");
    let dest = d.layout.data_dir.join("plugins/template");
    std::fs::create_dir_all(&dest).unwrap();
    for f in ["template.wasm", "plugin.toml"] {
        std::fs::copy(src.join(f), dest.join(f)).unwrap();
    }
    wait_for("the hand-copied plugin to load", 20, || async {
        let l = c.call("list_plugins", json!({})).await.unwrap();
        l["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "template")
            .then_some(())
    })
    .await;
    std::fs::remove_dir_all(&dest).unwrap();
    wait_for("the deleted plugin to unload", 20, || async {
        let l = c.call("list_plugins", json!({})).await.unwrap();
        (!l["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "template"))
        .then_some(())
    })
    .await;

    // A copy under another folder name is refused, and the real plugin stays loaded.
    let copy = d.layout.data_dir.join("plugins/router-keyword-copy");
    std::fs::create_dir_all(&copy).unwrap();
    let src = d.layout.data_dir.join("plugins/router-keyword");
    for f in ["router_keyword.wasm", "plugin.toml"] {
        std::fs::copy(src.join(f), copy.join(f)).unwrap();
    }
    let broken = wait_for("the copy to be refused", 20, || async {
        let l = c.call("list_plugins", json!({})).await.unwrap();
        l["broken"].as_array().unwrap().first().cloned()
    })
    .await;
    assert_eq!(broken["dir"], "router-keyword-copy");
    assert!(
        broken["error"]
            .as_str()
            .unwrap()
            .contains("a plugin's folder must carry its name"),
        "{broken}"
    );
    let r = c
        .call(
            "route_request",
            json!({ "router": "router-keyword", "request": "add testing" }),
        )
        .await
        .unwrap();
    assert_eq!(r["agent"], "tester");
    std::fs::remove_dir_all(&copy).unwrap();

    // A plugin gets no files, no environment and no sockets: the probe tries each (the port
    // is the daemon's own WebSocket, which is listening) and reports what happened.
    install(&d, "sandbox-probe").await;
    let port = d.ws_addr().rsplit(':').next().unwrap().to_string();
    let err = c
        .call(
            "route_request",
            json!({ "router": "sandbox-probe", "request": "escape", "metadata": { "port": port },
                    "candidates": [{ "name": "x" }] }),
        )
        .await
        .unwrap_err()
        .to_string();
    for attempt in [
        "read /etc/passwd",
        "list /",
        "write /tmp/escape",
        "connect 127.0.0.1",
    ] {
        assert!(
            err.contains(&format!("{attempt}: refused")),
            "{attempt}: {err}"
        );
    }
    assert!(err.contains("environment: empty"), "{err}");
    assert!(!err.contains("ALLOWED"), "{err}");

    // A restarted daemon loads its plugins from the compile cache.
    let mut d = d;
    drop(c);
    d.kill9();
    d.spawn();
    let c = d.client().await;
    let p = c
        .call("get_plugin", json!({ "name": "router-keyword" }))
        .await
        .unwrap();
    assert_eq!(p["plugin"]["loaded_from"], "cache", "{p}");
    let out = d.cli(&["plugin", "remove", "router-keyword"]);
    assert!(out.status.success());
    let err = c
        .call("get_plugin", json!({ "name": "router-keyword" }))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("plugin router-keyword not found"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(troupe_test_tools),
    ignore = "drives a real tool scripts/test installs: run with TROUPE_TEST_TOOLS=1"
)]
async fn an_openai_executor_member_reads_writes_with_approval_and_completes() {
    let s = Scenario::new().await;
    let (d, c) = (&s.daemon, &s.person);
    // Its write in its checkout waits for the person (the box would let it through).
    asks_for_in_box_requests(&s.project);
    install(d, "executor-openai").await;
    let mock = MockLlm::start(vec![
        Reply::tool("read_file", json!({ "path": "README.md" })),
        Reply::tool("run_command", json!({ "command": "rm -rf /" })),
        Reply::tool("read_file", json!({ "path": "../../etc/passwd" })),
        Reply::tool(
            "write_file",
            json!({ "path": "notes/answer.txt", "content": "42\n" }),
        ),
        Reply::tool(
            "complete",
            json!({ "summary": "wrote the answer", "artifacts": { "answer": 42 } }),
        ),
    ]);
    grant_mock(c, "executor-openai", &mock, "/v1").await;
    define(
        c,
        "agent",
        json!({
            "name": "gpt-dev",
            "runner": "wasm:executor-openai",
            "model": "mock-gpt",
            "isolation": "worktree",
            "workflow": {
                "blocked_tools": ["run_command"],
                "approve_tools": ["write_file"],
                "completion_schema": { "answer": "integer" },
            },
        }),
    )
    .await;
    define(
        c,
        "party",
        json!({ "name": "solo", "roles": { "dev": { "agent": "gpt-dev", "prompt": "Find the answer in README.md and write it to notes/answer.txt." } } }),
    )
    .await;
    let party = s.launch("solo").await;

    // The write waits for a person, as any worker's would.
    let approval = pending_approval(c).await;
    assert_eq!(approval["tool_name"], "write_file");
    assert!(
        approval["file_path"]
            .as_str()
            .unwrap()
            .ends_with("notes/answer.txt"),
        "{approval}"
    );
    c.call(
        "decide_approval",
        json!({ "approval_id": approval["approval_id"], "decision": "approve" }),
    )
    .await
    .unwrap();

    let s = party_end(c, &party, 30).await;
    assert_eq!(s["party"]["status"], "completed", "{s}");
    let member = &s["members"][0];
    let workdir = member["workdir"].as_str().unwrap();
    assert_eq!(
        std::fs::read_to_string(Path::new(workdir).join("notes/answer.txt")).unwrap(),
        "42\n"
    );
    // Five provider responses, each reporting usage: stored for the party (and the run).
    assert_eq!(s["usage"]["input_tokens"], 5 * INPUT_TOKENS, "{s}");
    assert_eq!(s["usage"]["output_tokens"], 5 * OUTPUT_TOKENS, "{s}");
    let run = c
        .call("get_agent_result", json!({ "run_id": member["run_id"] }))
        .await
        .unwrap();
    assert_eq!(run["run"]["result"]["artifacts"]["answer"], 42, "{run}");
    assert_eq!(run["usage"]["input_tokens"], 5 * INPUT_TOKENS);

    let reqs = mock.requests();
    assert_eq!(
        reqs.len(),
        5,
        "{:?}",
        reqs.iter().map(|r| r.summary()).collect::<Vec<_>>()
    );
    // The host added the key; the guest never had it.
    for r in &reqs {
        assert_eq!(r.path, "/v1/chat/completions");
        assert_eq!(r.header("authorization"), Some("Bearer sk-test-troupe"));
        assert_eq!(r.body["model"], "mock-gpt");
    }
    // What the model was told after each tool call.
    let tool_results: Vec<String> = reqs[4].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(tool_results.len(), 4, "{tool_results:?}");
    assert!(
        tool_results[0].contains("The answer is 42."),
        "{tool_results:?}"
    );
    assert!(
        tool_results[1].contains("tool run_command is blocked by this agent's workflow"),
        "{tool_results:?}"
    );
    assert!(
        tool_results[2].contains("../../etc/passwd is outside the working directory"),
        "{tool_results:?}"
    );
    assert!(
        tool_results[3].contains("wrote 3 bytes"),
        "{tool_results:?}"
    );
    // The offered tools follow the workflow: no run_command.
    let offered: Vec<&str> = reqs[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert!(
        offered.contains(&"write_file") && !offered.contains(&"run_command"),
        "{offered:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(troupe_test_tools),
    ignore = "drives a real tool scripts/test installs: run with TROUPE_TEST_TOOLS=1"
)]
async fn executors_are_denied_ungranted_hosts_and_denied_tools_reach_the_model() {
    let s = Scenario::new().await;
    let (d, c, project) = (&s.daemon, &s.person, &s.project);
    install(d, "executor-openai").await;
    install(d, "executor-anthropic").await;
    let parent = register(c, "test", project, None).await;

    // Not granted: the request never leaves, and the run says why.
    let mock = MockLlm::start(vec![Reply::text("unreachable")]);
    c.call(
        "grant_plugin",
        json!({ "name": "executor-openai",
                "config": { "base_url": format!("{}/v1", mock.base_url()) } }),
    )
    .await
    .unwrap();
    define(
        c,
        "agent",
        json!({ "name": "gpt", "runner": "wasm:executor-openai" }),
    )
    .await;
    let run = run_to_end(c, "gpt", "hi", &parent).await;
    assert_eq!(run["run"]["status"], "crashed", "{run}");
    let error = run["run"]["error"].as_str().unwrap();
    assert!(error.contains("plugin executor-openai@0.1.0"), "{error}");
    assert!(error.contains("is not granted"), "{error}");
    assert!(mock.requests().is_empty());

    // Anthropic wire format; a denied approval goes back to the model as a tool error.
    let mock = MockLlm::start(vec![
        Reply::tool("write_file", json!({ "path": "x.txt", "content": "no" })),
        Reply::text("I could not write it."),
    ]);
    grant_mock(c, "executor-anthropic", &mock, "").await;
    define(
        c,
        "agent",
        json!({ "name": "claude", "runner": "wasm:executor-anthropic", "model": "mock-claude",
                "approval_timeout_secs": 30 }),
    )
    .await;
    let started = start(c, "claude", "write x.txt", &parent).await;
    let approval = pending_approval(c).await;
    c.call(
        "decide_approval",
        json!({ "approval_id": approval["approval_id"], "decision": "deny", "reason": "not now" }),
    )
    .await
    .unwrap();
    let run = wait_run(c, &started).await;
    assert_eq!(run["run"]["status"], "success", "{run}");
    assert_eq!(run["run"]["result"]["output"], "I could not write it.");
    assert!(
        !Path::new(run["run"]["workdir"].as_str().unwrap())
            .join("x.txt")
            .exists()
    );
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0].path, "/v1/messages");
    assert_eq!(reqs[0].header("x-api-key"), Some("sk-test-troupe"));
    assert_eq!(reqs[0].header("anthropic-version"), Some("2023-06-01"));
    let last = reqs[1].body["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    let block = &last["content"][0];
    assert_eq!(block["type"], "tool_result", "{last}");
    assert_eq!(block["is_error"], true, "{last}");
    assert!(block["content"].to_string().contains("denied"), "{last}");
    assert_eq!(run["usage"]["output_tokens"], 2 * OUTPUT_TOKENS);

    // A run's request budget: the second request is refused, the run fails saying so.
    let mock = MockLlm::start(vec![
        Reply::tool("list_files", json!({})),
        Reply::text("never sent"),
    ]);
    grant_mock(c, "executor-openai", &mock, "/v1").await;
    c.call(
        "grant_plugin",
        json!({ "name": "executor-openai", "max_requests": 1 }),
    )
    .await
    .unwrap();
    let run = run_to_end(c, "gpt", "look around", &parent).await;
    assert_eq!(run["run"]["status"], "crashed", "{run}");
    let error = run["run"]["error"].as_str().unwrap();
    assert!(
        error.contains("the run's HTTP request budget is spent"),
        "{error}"
    );
    assert_eq!(mock.requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(troupe_test_tools),
    ignore = "drives a real tool scripts/test installs: run with TROUPE_TEST_TOOLS=1"
)]
async fn a_recovery_plugin_restarts_with_backoff_then_escalates() {
    let s = Scenario::new().await;
    let (d, c) = (&s.daemon, &s.person);
    install(d, "recovery-backoff").await;
    c.call(
        "grant_plugin",
        json!({ "name": "recovery-backoff",
                "config": { "base_delay_ms": 50, "give_up_after": 2, "escalate_to": "user" } }),
    )
    .await
    .unwrap();
    define(
        c,
        "agent",
        json!({ "name": "crasher", "command": ["sh", "-c", "exit 7"] }),
    )
    .await;
    define(
        c,
        "party",
        json!({ "name": "flaky", "roles": { "dev": { "agent": "crasher", "on_crash": "plugin:recovery-backoff" } } }),
    )
    .await;
    let party = s.launch("flaky").await;
    let s = wait_for("the role to pause", 30, || async {
        let s = c
            .call("get_party_status", json!({ "party_id": party }))
            .await
            .unwrap();
        (s["roles"][0]["paused"] == true).then_some(s)
    })
    .await;
    assert_eq!(s["roles"][0]["on_crash"], "plugin:recovery-backoff");
    assert_eq!(s["members"][0]["crash_count"], 3, "{s}");
    let events = c
        .call("list_events", json!({ "party_id": party, "limit": 200 }))
        .await
        .unwrap();
    let decided: Vec<String> = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "recovery_decided")
        .map(|e| e["data"]["decision"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(decided, ["restart", "restart", "pause"]);
    let notes = c.call("list_notifications", json!({})).await.unwrap();
    assert!(
        notes
            .to_string()
            .contains("its recovery plugin recovery-backoff paused it"),
        "{notes}"
    );
    c.call("cancel_party", json!({ "party_id": party }))
        .await
        .unwrap();
}

/// kill -9 of the daemon while an executor member waits for an approval: the restarted daemon
/// counts the lost in-daemon run as crashed, the party's recovery restarts the member, and the
/// new run finishes the job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(troupe_test_tools),
    ignore = "drives a real tool scripts/test installs: run with TROUPE_TEST_TOOLS=1"
)]
async fn an_executor_member_survives_a_kill_9_of_the_daemon() {
    let mut d = TestDaemon::start();
    let c = d.client().await;
    install(&d, "executor-openai").await;
    let mock = MockLlm::start(vec![
        // Attempt 1 stops at this call, waiting for a person, when the daemon dies.
        Reply::tool("write_file", json!({ "path": "a.txt", "content": "one" })),
        // Attempt 2.
        Reply::tool("complete", json!({ "summary": "done after a restart" })),
    ]);
    grant_mock(&c, "executor-openai", &mock, "/v1").await;
    define(
        &c,
        "agent",
        json!({ "name": "gpt-dev", "runner": "wasm:executor-openai", "isolation": "worktree",
                "workflow": { "approve_tools": ["write_file"] } }),
    )
    .await;
    define(
        &c,
        "party",
        json!({ "name": "sturdy", "roles": { "dev": { "agent": "gpt-dev", "on_crash": "restart" } } }),
    )
    .await;
    let project = repo(&d.dir.path().join("proj"));
    // Its write in its checkout waits for the person (the box would let it through).
    asks_for_in_box_requests(&project);
    let party = launch(&c, "sturdy", &project).await;
    pending_approval(&c).await;
    drop(c);
    d.kill9();
    d.spawn();
    let c = d.client().await;
    let s = party_end(&c, &party, 60).await;
    assert_eq!(s["party"]["status"], "completed", "{s}");
    let member = &s["members"][0];
    assert_eq!(member["attempts"], 2, "{s}");
    assert_eq!(member["crash_count"], 1, "{s}");
    assert_eq!(member["output"], "done after a restart", "{s}");
    assert_eq!(mock.requests().len(), 2);
}

/// A router (seed 002) on the OpenAI-compatible executor: its step gets `route_to` alone, its
/// `agent` an enum of the candidates, and the chosen agent then runs on the original request; a
/// router plugin (`via: "plugin:router-keyword"`) routes too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(troupe_test_tools),
    ignore = "drives a real tool scripts/test installs: run with TROUPE_TEST_TOOLS=1"
)]
async fn an_llm_router_step_has_route_to_alone_and_its_choice_runs() {
    let d = TestDaemon::start();
    let c = d.client().await;
    install(&d, "executor-openai").await;
    install(&d, "router-keyword").await;
    // One turn: the step ends with its route_to.
    let mock = MockLlm::start(vec![Reply::tool(
        "route_to",
        json!({ "agent": "billing", "reason": "it is about an invoice" }),
    )]);
    grant_mock(&c, "executor-openai", &mock, "/v1").await;
    let answer = |who: &str| {
        json!([
            "sh",
            "-c",
            format!(
                "troupe call complete \"{{\\\"output\\\":\\\"{who}: $TROUPE_PROMPT\\\"}}\" >/dev/null"
            )
        ])
    };
    define(
        &c,
        "agent",
        json!({ "name": "billing", "command": answer("billing"),
                                "capabilities": ["invoice", "refund"] }),
    )
    .await;
    define(
        &c,
        "agent",
        json!({ "name": "tech", "command": answer("tech"),
                                "capabilities": ["crash", "bug"] }),
    )
    .await;
    define(
        &c,
        "agent",
        json!({ "name": "desk", "runner": "wasm:executor-openai", "model": "mock-gpt",
                "router": { "agents": ["billing", "tech"] } }),
    )
    .await;
    define(
        &c,
        "agent",
        json!({ "name": "desk-keyword", "command": ["true"],
                "router": { "agents": ["billing", "tech"], "via": "plugin:router-keyword" } }),
    )
    .await;
    let project = d.project("repo");
    let me = crate::support::register(&c, "human", &project, None).await;

    let r = crate::support::run_to_end(&c, "desk", "my invoice is wrong", &me).await;
    assert_eq!(r["run"]["status"], "success", "{r}");
    assert_eq!(r["run"]["result"]["chain"], json!(["desk", "billing"]));
    assert_eq!(r["run"]["result"]["output"], "billing: my invoice is wrong");
    // The model was offered route_to and nothing else.
    let first = &mock.requests()[0];
    let tools: Vec<&str> = first.body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(tools, ["route_to"], "{}", first.summary());
    assert_eq!(mock.requests().len(), 1, "a router's step is a single turn");
    assert_eq!(
        first.body["tools"][0]["function"]["parameters"]["properties"]["agent"]["enum"],
        json!(["billing", "tech"])
    );

    let r = crate::support::run_to_end(&c, "desk-keyword", "it shows a crash at start", &me).await;
    assert_eq!(r["run"]["status"], "success", "{r}");
    assert_eq!(r["run"]["result"]["chain"], json!(["desk-keyword", "tech"]));
    assert_eq!(
        r["run"]["result"]["output"],
        "tech: it shows a crash at start"
    );
}

/// A budget (issue 12): an executor member that spends more tokens than its agent's budget is
/// stopped and its role paused — a circuit breaker, not a crash — and the leader and the person
/// hear of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(troupe_test_tools),
    ignore = "drives a real tool scripts/test installs: run with TROUPE_TEST_TOOLS=1"
)]
async fn a_member_over_its_token_budget_is_stopped_and_paused() {
    let s = Scenario::new().await;
    let (d, c) = (&s.daemon, &s.person);
    install(d, "executor-openai").await;
    let mock = MockLlm::start(vec![
        Reply::tool("read_file", json!({ "path": "README.md" })),
        Reply::tool("read_file", json!({ "path": "README.md" })),
        Reply::tool("read_file", json!({ "path": "README.md" })),
        Reply::tool("read_file", json!({ "path": "README.md" })),
        Reply::tool("complete", json!({ "summary": "read it four times" })),
    ]);
    grant_mock(c, "executor-openai", &mock, "/v1").await;
    // Each provider answer reports INPUT_TOKENS + OUTPUT_TOKENS (15): the second goes over 20.
    define(
        c,
        "agent",
        json!({ "name": "thrifty", "runner": "wasm:executor-openai", "model": "mock-gpt",
                "budget": { "max_tokens": 20 } }),
    )
    .await;
    define(
        c,
        "party",
        json!({ "name": "budgeted", "roles": { "dev": { "agent": "thrifty", "prompt": "Read README.md." } } }),
    )
    .await;
    let party = s.launch("budgeted").await;
    let s = crate::support::wait_for("the member to pause", 30, || async {
        let s = c
            .call("get_party_status", json!({ "party_id": party }))
            .await
            .unwrap();
        (s["members"][0]["status"] == "paused").then_some(s)
    })
    .await;
    assert_eq!(
        s["party"]["status"], "running",
        "the party waits for a signal: {s}"
    );
    assert_eq!(s["members"][0]["crash_count"], 0, "not a crash: {s}");
    let run = c
        .call(
            "get_agent_result",
            json!({ "run_id": s["members"][0]["run_id"] }),
        )
        .await
        .unwrap();
    let error = run["run"]["error"].as_str().unwrap();
    assert!(
        error.starts_with("stopped by its budget: ")
            && error.ends_with("tokens spent, the budget is 20"),
        "{run}"
    );
    let events = c
        .call("list_events", json!({ "kind": "budget_tripped" }))
        .await
        .unwrap();
    assert_eq!(events["events"].as_array().unwrap().len(), 1, "{events}");
    let notes = c.call("list_notifications", json!({})).await.unwrap();
    assert!(
        notes["notifications"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n["text"]
                .as_str()
                .unwrap()
                .contains("was stopped by its budget")),
        "{notes}"
    );
    assert!(mock.requests().len() < 5, "it stopped before its last turn");
    c.call("cancel_party", json!({ "party_id": party }))
        .await
        .unwrap();
}
