//! Daemon lifecycle: auto-start by the CLI, one daemon per data dir, status, stop, file modes,
//! the loopback-only rule and the schema command.

use std::os::unix::fs::PermissionsExt;

use serde_json::Value;
use troupe_api::layout::Layout;

use crate::support::{BIN, TestDaemon, cli, stderr, stdout};

fn mode(path: &std::path::Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn cli_starts_the_daemon_reuses_it_and_stops_it() {
    let dir = tempfile::tempdir().unwrap();
    let layout = Layout {
        data_dir: dir.path().join("data"),
        runtime_dir: dir.path().join("run"),
    };
    let project = dir.path().join("repo");
    std::fs::create_dir_all(project.join(".git/x")).unwrap();

    let out = cli(&layout, &["status", "--json"], None);
    assert!(out.status.success(), "{}", stderr(&out));
    let status: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(status["running"], false, "status must not start a daemon");

    // Any other command starts it.
    let out = cli(
        &layout,
        &["session", "register", "--cli", "claude"],
        Some(&project.join(".git/x")),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let session = stdout(&out).trim().to_string();
    let status: Value =
        serde_json::from_str(&stdout(&cli(&layout, &["status", "--json"], None))).unwrap();
    assert_eq!(status["running"], true);
    assert_eq!(status["sessions"], 1);
    let pid = status["pid"].clone();

    // …and the next one reuses it.
    let out = cli(&layout, &["session", "list", "--json"], Some(&project));
    assert!(out.status.success(), "{}", stderr(&out));
    let listed: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(listed["sessions"][0]["session_id"], session.as_str());
    assert_eq!(
        listed["sessions"][0]["cwd"],
        project.join(".git/x").display().to_string(),
        "cwd is kept as given; the project is its git root"
    );
    let status: Value =
        serde_json::from_str(&stdout(&cli(&layout, &["status", "--json"], None))).unwrap();
    assert_eq!(status["pid"], pid, "a second command must reuse the daemon");

    // Private files.
    assert_eq!(mode(&layout.runtime_dir), 0o700);
    assert_eq!(mode(&layout.data_dir), 0o700);
    assert_eq!(mode(&layout.socket_path()), 0o600);
    assert_eq!(mode(&layout.token_path()), 0o600);

    let out = cli(&layout, &["stop"], None);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("stopped"), "{}", stdout(&out));
    assert!(!layout.socket_path().exists(), "stop removes the socket");
    assert!(!layout.token_path().exists(), "stop removes the token");
    let status: Value =
        serde_json::from_str(&stdout(&cli(&layout, &["status", "--json"], None))).unwrap();
    assert_eq!(status["running"], false);

    // The data survived the stop.
    let out = cli(&layout, &["session", "list", "--all", "--json"], None);
    let listed: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(listed["sessions"][0]["session_id"], session.as_str());
    cli(&layout, &["stop"], None);
}

#[test]
fn a_second_daemon_on_the_same_data_dir_is_refused() {
    let daemon = TestDaemon::start();
    let out = std::process::Command::new(BIN)
        .args(["serve", "--data-dir"])
        .arg(&daemon.layout.data_dir)
        .env("TROUPE_RUNTIME_DIR", &daemon.layout.runtime_dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(troupe::EXIT_ALREADY_RUNNING));
    let err = stderr(&out);
    assert!(err.contains("already running"), "{err}");
    assert!(
        err.contains(&daemon.pid().to_string()),
        "names the running pid: {err}"
    );
    // The first daemon is unharmed.
    assert!(daemon.cli(&["status"]).status.success());
    assert!(stdout(&daemon.cli(&["status"])).contains("running"));
}

#[test]
fn non_loopback_websocket_needs_an_explicit_flag() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(BIN)
        .args(["serve", "--ws-addr", "0.0.0.0:0", "--data-dir"])
        .arg(dir.path().join("data"))
        .env("TROUPE_RUNTIME_DIR", dir.path().join("run"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("not a loopback address"), "{err}");
    assert!(err.contains("--allow-non-loopback"), "{err}");
}

#[test]
fn api_schema_describes_every_operation() {
    let out = std::process::Command::new(BIN)
        .args(["api", "schema"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let doc: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let names: Vec<&str> = doc["operations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|op| op["name"].as_str().unwrap())
        .collect();
    expect_test::expect!["register_session end_session heartbeat get_session list_sessions send_message send_to_parent send_to_child broadcast_to_children broadcast_to_party list_siblings discover_agents poll_messages mark_read list_events daemon_status shutdown_daemon create_agent_definition update_agent_definition get_agent_definition list_agent_definitions delete_agent_definition start_agent complete list_agents get_agent_result cancel_agent route_to get_run_tree team_broadcast vote_conclude conclude_team create_party_definition update_party_definition get_party_definition list_party_definitions delete_party_definition launch_party get_party_status signal_role override_recovery cancel_party list_parties reassign_task cleanup_party list_worktrees get_member_diff list_member_commits review_member land_party pick_member list_conflicts propose_plan review_plan commit_plan get_plan start_step submit_step review_step handoff_step block_step propose_decision vote commit_decision list_decisions check_tool_policy create_task escalate_task list_tasks list_inbox dismiss_inbox_item list_notifications request_permission ask_person answer_question list_approvals decide_approval list_approval_rules revoke_approval_rule list_plugins install_plugin remove_plugin get_plugin grant_plugin route_request claude_hook"]
    .assert_eq(&names.join(" "));
    for op in doc["operations"].as_array().unwrap() {
        assert_eq!(op["params"]["type"], "object", "{}", op["name"]);
        assert_eq!(op["result"]["type"], "object", "{}", op["name"]);
        assert!(!op["summary"].as_str().unwrap().is_empty());
    }
    let send = &doc["operations"][5];
    let required: Vec<&str> = send["params"]["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(required, ["from_session_id", "to_session_id", "content"]);
    assert_eq!(doc["subscriptions"][0]["name"], "subscribe_messages");
}

#[test]
fn call_fills_cwd_and_session_from_the_environment() {
    let daemon = TestDaemon::start();
    let project = daemon.project("repo");
    let out = crate::support::cli(
        &daemon.layout,
        &["call", "register_session", r#"{"cli":"codex"}"#],
        Some(std::path::Path::new(&project)),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let reg: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(reg["session"]["cwd"], project.as_str());
    let me = reg["session_id"].as_str().unwrap();

    // Inside a member, TROUPE_SESSION_ID names the caller.
    let out = std::process::Command::new(BIN)
        .args(["--data-dir"])
        .arg(&daemon.layout.data_dir)
        .args(["call", "heartbeat"])
        .env("TROUPE_RUNTIME_DIR", &daemon.layout.runtime_dir)
        .env("TROUPE_SESSION_ID", me)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let hb: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(hb["session"]["session_id"], me);

    let out = daemon.cli(&["call", "no_such_op", "{}"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("unknown operation \"no_such_op\""),
        "{}",
        stderr(&out)
    );
    let out = daemon.cli(&["call", "get_session", "{not json"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("not valid JSON"), "{}", stderr(&out));
}
