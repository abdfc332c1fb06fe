//! Daemon lifecycle: auto-start by the CLI, one daemon per data dir, status, stop (members'
//! processes end, or are left for the next daemon to adopt), a daemon whose data dir is deleted,
//! file modes, the loopback-only rule and the schema command.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use serde_json::{Value, json};
use troupe::client::Client;
use troupe_api::layout::Layout;

use crate::support::{
    BIN, TestDaemon, cli, define, launch, no_process_left, party_end, processes_of, shares, stderr,
    stdout, wait_for,
};

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
    expect_test::expect!["register_session end_session heartbeat get_session list_sessions send_message send_to_parent send_to_child broadcast_to_children broadcast_to_party list_siblings discover_agents poll_messages mark_read list_events daemon_status shutdown_daemon gc create_agent_definition update_agent_definition get_agent_definition list_agent_definitions delete_agent_definition start_agent complete list_agents get_agent_result get_run_log cancel_agent route_to get_run_tree team_broadcast vote_conclude conclude_team create_party_definition update_party_definition get_party_definition list_party_definitions delete_party_definition launch_party get_party_status signal_role override_recovery cancel_party list_parties reassign_task cleanup_party pause_party resume_party prompt_agent list_worktrees get_member_diff list_member_commits review_member land_party pick_member list_conflicts get_delivery_summary get_pull_request merge_pull_request receive_forge_event propose_plan review_plan commit_plan get_plan start_step submit_step review_step handoff_step block_step propose_decision vote commit_decision list_decisions check_tool_policy create_task escalate_task list_tasks list_inbox dismiss_inbox_item list_notifications list_schedules pause_schedule resume_schedule run_schedule_now request_permission ask_person answer_question list_approvals decide_approval list_approval_rules revoke_approval_rule list_plugins install_plugin remove_plugin get_plugin grant_plugin route_request claude_hook"]
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

/// Defines agent `name`, a process member that waits (with a child in its group) until `go`
/// exists, then completes, and a party `name` of one such member. Its box is given `go`'s dir
/// (the test's shared one), where the test makes `go`.
async fn waiting_party(c: &Client, dir: &Path, name: &str, go: &Path) {
    let program = crate::support::executable(
        dir,
        &format!("{name}.sh"),
        &format!(
            "#!/bin/sh\nsleep 1000 &\nwhile [ ! -e '{}' ]; do sleep 0.05; done\n\
             troupe call complete '{{\"output\":\"told\"}}' >/dev/null\n",
            go.display()
        ),
    );
    let def = json!({ "name": name, "command": [program] });
    define(c, "agent", shares(def, &[go.parent().unwrap()])).await;
    define(
        c,
        "party",
        json!({ "name": name, "roles": { "w": { "agent": name } } }),
    )
    .await;
}

/// The party's running member once its child is up too: run id and process group.
async fn waiting_member(c: &Client, party: &str) -> (String, i64) {
    wait_for("the member and its child running", 30, || async {
        let runs = c
            .call("list_agents", json!({ "party_id": party }))
            .await
            .unwrap();
        let run = runs["runs"]
            .as_array()?
            .iter()
            .find(|r| r["status"] == "running")?;
        let (id, pgid) = (run["run_id"].as_str()?.to_string(), run["pgid"].as_i64()?);
        (processes_of(&id, pgid).len() >= 2).then_some((id, pgid))
    })
    .await
}

/// `troupe stop` ends every member's processes; `--leave-running` leaves a process member
/// running, and the next daemon adopts it (it is not started again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn troupe_stop_ends_members_unless_asked_to_leave_them_running() {
    let mut d = TestDaemon::start();
    let c = d.client().await;
    let dir = d.dir.path().to_path_buf();
    let project = d.project("proj");
    let (go1, go2) = (d.shared().join("go1"), d.shared().join("go2"));
    waiting_party(&c, &dir, "kept", &go1).await;
    waiting_party(&c, &dir, "stopped", &go2).await;

    // --leave-running: the member goes on, and the next daemon takes it back.
    let kept = launch(&c, "kept", &project).await;
    let (run, pgid) = waiting_member(&c, &kept).await;
    drop(c);
    let out = d.cli(&["stop", "--leave-running"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("1 run left running"),
        "{}",
        stdout(&out)
    );
    d.child.take().unwrap().wait().unwrap();
    assert!(
        processes_of(&run, pgid).len() >= 2,
        "the member and its child outlive the daemon"
    );
    d.spawn();
    let c = d.client().await;
    std::fs::write(&go1, "").unwrap();
    let s = party_end(&c, &kept, 30).await;
    assert_eq!(s["party"]["status"], "completed", "{s}");
    let runs = c
        .call("list_agents", json!({ "party_id": kept }))
        .await
        .unwrap();
    let runs = runs["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1, "adopted, not started again: {runs:?}");
    assert_eq!(runs[0]["run_id"], run.as_str());

    // A plain stop: the member's whole group ends with the daemon.
    let stopped = launch(&c, "stopped", &project).await;
    let (run, pgid) = waiting_member(&c, &stopped).await;
    drop(c);
    let out = d.cli(&["stop"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("1 run ended with their processes"),
        "{}",
        stdout(&out)
    );
    d.child.take().unwrap().wait().unwrap();
    no_process_left(&run, pgid, 10).await;
    // It is recorded as ended by the stop; nothing took it back.
    d.spawn();
    let c = d.client().await;
    let r = c
        .call("get_agent_result", json!({ "run_id": run }))
        .await
        .unwrap();
    assert_eq!(r["run"]["status"], "crashed", "{r}");
    assert!(
        r["run"]["error"]
            .as_str()
            .unwrap()
            .contains("the daemon stopped"),
        "{r}"
    );
    c.call("cancel_party", json!({ "party_id": stopped }))
        .await
        .unwrap();
    party_end(&c, &stopped, 30).await;
}

/// A daemon whose data dir is deleted under it ends its members' processes and exits (nothing
/// could take them back: their records are gone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_whose_data_dir_is_deleted_ends_its_runs_and_exits() {
    let mut d = TestDaemon::start();
    let c = d.client().await;
    let dir = d.dir.path().to_path_buf();
    let project = d.project("proj");
    waiting_party(&c, &dir, "orphan", &d.shared().join("never")).await;
    let party = launch(&c, "orphan", &project).await;
    let (run, pgid) = waiting_member(&c, &party).await;
    drop(c);
    let data_dir = d.layout.data_dir.clone();
    // The daemon may still write there while it goes: delete until nothing is left.
    wait_for("the data dir deleted", 10, || async {
        let _partly = std::fs::remove_dir_all(&data_dir);
        (!data_dir.exists()).then_some(())
    })
    .await;
    let mut daemon = d.child.take().unwrap();
    let pid = daemon.id();
    wait_for("the daemon to exit", 30, || {
        let exited = daemon.try_wait().unwrap().is_some();
        async move { exited.then_some(()) }
    })
    .await;
    assert!(!Path::new(&format!("/proc/{pid}")).exists());
    no_process_left(&run, pgid, 10).await;
}
