//! `troupe acp` driven by an ACP client Troupe did not write: the official TypeScript SDK's
//! `ClientSideConnection` (tests/acp-client/client.mjs, `@agentclientprotocol/sdk` pinned there;
//! `scripts/test` installs it). A prompt launches the project's default party of process members;
//! the updates stream in order; a member's permission request reaches the client as
//! `session/request_permission`, its answer reaches the worker through Troupe's approvals; cancel
//! stops the party, a closed connection leaves one running, and a new connection lists and loads
//! the session. An agent's question (`ask_person`) with choices is asked the same way; one in the
//! person's own words is a form (`elicitation/create`) where the editor fills them in, withdrawn
//! when answered at another door. Bad input (a line that is not JSON, a request before `initialize`, an unknown method, a prompt before a session,
//! a second prompt while one runs) gets the protocol's errors and the door serves on.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

use crate::support::{
    BIN, TestDaemon, asks_for_in_box_requests, define, executable, git, inbox, repo, workspace_root,
};

/// The member that asks to write NOTES.md, writes what it was told, and says it.
const WRITER: &str = r#"#!/bin/sh
field() { sed -n "s/.*\"$1\": \"\([^\"]*\)\".*/\1/p" | head -1; }
R=$(troupe call request_permission "{\"tool_name\":\"write_file\",\"input\":{\"content\":\"notes\"},\"file_path\":\"$PWD/NOTES.md\",\"start_line\":1,\"end_line\":1,\"diff\":\"+notes\",\"wait_ms\":60000}")
S=$(echo "$R" | field status)
echo "$S" > decision.txt
troupe call complete "{\"output\":\"permission $S\"}" >/dev/null
"#;

/// A member that asks the person to choose, and says what it was told.
const CHOOSER: &str = r#"#!/bin/sh
R=$(troupe call ask_person '{"question":"Which color?","choices":["red","blue"],"wait_ms":60000}')
A=$(echo "$R" | sed -n 's/.*"answer": "\([^"]*\)".*/\1/p' | head -1)
troupe call complete "{\"output\":\"color $A\"}" >/dev/null
"#;

/// A member that asks the person three questions (two in their own words) and says the answers.
const ASKER: &str = r#"#!/bin/sh
answer() { sed -n 's/.*"answer": "\([^"]*\)".*/\1/p' | head -1; }
A=$(troupe call ask_person '{"question":"Name the release?","wait_ms":60000}' | answer)
B=$(troupe call ask_person '{"question":"Ship on Friday?","choices":["yes","no"],"wait_ms":60000}' | answer)
C=$(troupe call ask_person '{"question":"Anything else?","wait_ms":60000}' | answer)
troupe call complete "{\"output\":\"release $A, friday $B, else $C\"}" >/dev/null
"#;

/// A member that waits until it is stopped.
const WAITER: &str = "#!/bin/sh\nexec sleep 600\n";

fn client_dir() -> PathBuf {
    let dir = workspace_root().join("tests/acp-client");
    assert!(
        dir.join("node_modules/@agentclientprotocol/sdk").is_dir(),
        "the ACP test client's packages are missing: run scripts/test (it runs npm ci in {})",
        dir.display()
    );
    dir
}

/// Runs a scenario of the client against `d`'s data dir; its JSON report.
async fn scenario(d: &TestDaemon, project: &str, name: &str, target: &str) -> Value {
    scenario_on(d, project, name, target, None).await
}

/// `scenario`, with the door's `PATH` (where it looks for agent CLIs) set to `path`.
async fn scenario_on(
    d: &TestDaemon,
    project: &str,
    name: &str,
    target: &str,
    path: Option<String>,
) -> Value {
    let dir = client_dir();
    let (data, runtime) = (d.layout.data_dir.clone(), d.layout.runtime_dir.clone());
    let (project, name, target) = (project.to_string(), name.to_string(), target.to_string());
    let node = which("node");
    let out = tokio::task::spawn_blocking(move || {
        let mut cmd = Command::new(node);
        if let Some(path) = path {
            cmd.env("PATH", path);
        }
        cmd.arg(dir.join("client.mjs"))
            .arg(&name)
            .env("TROUPE_BIN", BIN)
            .env("TROUPE_DATA", &data)
            .env("TROUPE_RUNTIME_DIR", &runtime)
            .env("TROUPE_PROJECT", &project)
            .env("TROUPE_TARGET", &target)
            .env("TROUPE_LOG", "warn")
            .output()
            .expect("node runs")
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "the ACP client failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "no report ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// Where `name` is on this process's `PATH`.
fn which(name: &str) -> PathBuf {
    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{name} is not on PATH"))
}

/// A `PATH` of only `node` and `git` (linked into `dir`) and `extra`: no agent CLI on it but
/// those in `extra`.
fn bare_path(dir: &Path, extra: &[&Path]) -> String {
    let tools = dir.join("path-tools");
    std::fs::create_dir_all(&tools).unwrap();
    for t in ["node", "git", "sh"] {
        let _ = std::os::unix::fs::symlink(which(t), tools.join(t));
    }
    let mut dirs: Vec<PathBuf> = extra.iter().map(|p| p.to_path_buf()).collect();
    dirs.push(tools);
    std::env::join_paths(dirs)
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

/// A project whose default party is `notes` (one writer), and a `waiter` party.
async fn setup(d: &TestDaemon) -> String {
    let c = d.client().await;
    let dir = d.dir.path();
    let project = repo(&dir.join("proj"));
    std::fs::create_dir_all(Path::new(&project).join(".troupe")).unwrap();
    std::fs::write(
        Path::new(&project).join(".troupe/config.toml"),
        "[default]\nparty = \"notes\"\n",
    )
    .unwrap();
    // The editor answers the writer's request to write in its own checkout (the box would let
    // it through without asking).
    asks_for_in_box_requests(&project);
    let writer = executable(dir, "writer.sh", WRITER);
    let waiter = executable(dir, "waiter.sh", WAITER);
    let chooser = executable(dir, "chooser.sh", CHOOSER);
    let asker = executable(dir, "asker.sh", ASKER);
    for (name, command) in [
        ("notes-writer", writer),
        ("waiter", waiter),
        ("chooser", chooser),
        ("asker", asker),
    ] {
        define(
            &c,
            "agent",
            json!({ "name": name, "runner": "process", "command": [command],
                    "isolation": "worktree", "timeout_secs": 600 }),
        )
        .await;
    }
    define(
        &c,
        "party",
        json!({ "name": "notes", "roles": { "writer": { "agent": "notes-writer" } } }),
    )
    .await;
    define(
        &c,
        "party",
        json!({ "name": "waiter", "roles": { "sleeper": { "agent": "waiter" } } }),
    )
    .await;
    project
}

fn position(list: &[Value], pred: impl Fn(&str) -> bool) -> usize {
    list.iter()
        .position(|v| v.as_str().is_some_and(&pred))
        .unwrap_or_else(|| panic!("nothing matches in {list:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(troupe_test_tools),
    ignore = "drives a real tool scripts/test installs: run with TROUPE_TEST_TOOLS=1"
)]
async fn an_acp_editor_launches_a_party_answers_its_permission_and_loads_the_session_again() {
    let d = TestDaemon::start();
    let project = setup(&d).await;
    let r = scenario(&d, &project, "party", "").await;

    let caps = &r["init"]["agentCapabilities"];
    assert_eq!(caps["loadSession"], true, "{r:#}");
    assert!(caps["sessionCapabilities"]["list"].is_object(), "{r:#}");
    assert_eq!(
        r["init"]["authMethods"],
        json!([]),
        "no auth method is needed"
    );
    for command in ["party", "agent", "status", "land", "approve", "inbox"] {
        assert!(
            r["commands"].as_array().unwrap().contains(&json!(command)),
            "/{command} is advertised: {r:#}"
        );
    }
    assert_eq!(r["stopReason"], "end_turn", "{r:#}");

    // In order: launched, the plan, the request, the worker's answer, the party's end.
    let kinds = r["kinds"].as_array().unwrap();
    let texts = r["texts"].as_array().unwrap();
    assert_eq!(kinds[0], "agent_thought_chunk", "{r:#}");
    assert!(
        texts[0].as_str().unwrap().contains("Launched notes"),
        "{r:#}"
    );
    let plan = position(kinds, |k| k == "plan");
    let call = position(kinds, |k| k == "tool_call");
    let update = position(kinds, |k| k == "tool_call_update");
    assert!(plan < call && call < update, "{kinds:?}");
    let said = position(texts, |t| {
        t.contains("**[writer]** success: permission approved")
    });
    let ended = position(texts, |t| t.contains("Party completed"));
    assert!(said < ended, "{texts:?}");
    assert_eq!(
        kinds.last().unwrap(),
        "agent_message_chunk",
        "the party's end is last: {kinds:?}"
    );
    let plans = r["plans"].as_array().unwrap();
    assert_eq!(plans[0][0]["content"], "writer: notes-writer", "{r:#}");
    assert_eq!(plans.last().unwrap()[0]["status"], "completed", "{r:#}");
    assert!(
        plans.windows(2).all(|w| w[0] != w[1]),
        "no plan is sent twice in a row: {plans:?}"
    );

    // The member's request reached the client once, with Troupe's approve-pattern as "always".
    let asks = r["asks"].as_array().unwrap();
    assert_eq!(asks.len(), 1, "{r:#}");
    let ask = &asks[0];
    assert_eq!(ask["sessionId"], r["sessionId"]);
    assert!(
        ask["toolCall"]["title"]
            .as_str()
            .unwrap()
            .starts_with("[writer] write_file"),
        "{ask:#}"
    );
    let path = ask["toolCall"]["locations"][0]["path"].as_str().unwrap();
    assert!(path.ends_with("/NOTES.md"), "{ask:#}");
    let kinds_offered: Vec<&str> = ask["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds_offered,
        ["allow_once", "allow_always", "reject_once", "reject_always"]
    );
    let always = &ask["options"][1];
    assert_eq!(always["optionId"], "approve_pattern");
    assert!(
        always["name"].as_str().unwrap().contains("NOTES.md"),
        "{always}"
    );

    // The worker saw the client's answer, and Troupe recorded it as one decision.
    let decision = Path::new(path).with_file_name("decision.txt");
    assert_eq!(
        std::fs::read_to_string(&decision).unwrap().trim(),
        "approved"
    );
    let c = d.client().await;
    let approvals = c
        .call("list_approvals", json!({ "status": "approved" }))
        .await
        .unwrap();
    let approvals = approvals["approvals"].as_array().unwrap();
    assert_eq!(approvals.len(), 1);
    assert_eq!(approvals[0]["decided_by"], "acp");
    assert_eq!(approvals[0]["decision"], "approve");
    assert_eq!(
        inbox(&c, &project).await,
        Vec::<Value>::new(),
        "answered, it left the inbox"
    );

    // Closing stdin ends the door cleanly; a new connection lists and loads the session.
    assert_eq!(r["exit"]["code"], 0, "{r:#}");
    let listed = r["listed"].as_array().unwrap();
    let mine = listed
        .iter()
        .find(|s| s["sessionId"] == r["sessionId"])
        .unwrap_or_else(|| panic!("the session is listed: {listed:?}"));
    assert_eq!(mine["title"], "notes: Write the notes");
    assert_eq!(mine["cwd"], project.as_str());
    let replay_kinds = r["replayKinds"].as_array().unwrap();
    let replay_texts = r["replayTexts"].as_array().unwrap();
    assert_eq!(replay_kinds[0], "user_message_chunk", "{r:#}");
    assert_eq!(
        replay_texts[0],
        "user_message_chunk: /party notes Write the notes"
    );
    position(replay_texts, |t| t.contains("permission approved"));
    position(replay_kinds, |k| k == "plan");
    assert_eq!(
        replay_kinds
            .iter()
            .filter(|k| *k == "user_message_chunk")
            .count(),
        1,
        "one prompt, replayed once (its member's run is not a prompt): {replay_texts:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(troupe_test_tools),
    ignore = "drives a real tool scripts/test installs: run with TROUPE_TEST_TOOLS=1"
)]
async fn a_request_decided_from_another_door_is_withdrawn_from_the_acp_editor() {
    let d = TestDaemon::start();
    let project = setup(&d).await;
    let r = scenario(&d, &project, "elsewhere", "").await;
    assert_eq!(r["stopReason"], "end_turn", "{r:#}");
    assert_eq!(r["asks"], 1, "{r:#}");
    assert_eq!(r["withdrawn"], json!(["Decided elsewhere."]), "{r:#}");
    let texts = r["texts"].as_array().unwrap();
    position(texts, |t| {
        t.contains("**[writer]** success: permission approved")
    });
    let c = d.client().await;
    let approvals = c
        .call("list_approvals", json!({ "status": "approved" }))
        .await
        .unwrap();
    assert_eq!(
        approvals["approvals"][0]["decided_by"], "cli",
        "one decision, the CLI's"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(troupe_test_tools),
    ignore = "drives a real tool scripts/test installs: run with TROUPE_TEST_TOOLS=1"
)]
async fn a_first_prompt_in_a_project_without_a_team_and_no_agent_cli_starts_nothing_and_says_how() {
    let d = TestDaemon::start();
    let project = repo(&d.dir.path().join("fresh"));
    std::fs::write(Path::new(&project).join("code.txt"), "for i in 0..=n\n").unwrap();
    let path = bare_path(d.dir.path(), &[]);
    let r = scenario_on(&d, &project, "bare", "", Some(path)).await;
    assert_eq!(r["stopReason"], "end_turn", "{r:#}");
    assert_eq!(r["asks"], 0, "{r:#}");
    let text = r["texts"].as_array().unwrap()[0]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        text.contains("Nothing was started") && text.contains(".troupe/config.toml"),
        "{text}"
    );
    assert!(
        text.contains("npm install -g @agentclientprotocol/claude-agent-acp")
            && text.contains("@google/gemini-cli"),
        "it says what to install: {text}"
    );
    let c = d.client().await;
    let parties = c.call("list_parties", json!({})).await.unwrap();
    assert_eq!(parties["parties"], json!([]), "no party: {parties}");
    let runs = c.call("list_agents", json!({})).await.unwrap();
    assert_eq!(runs["runs"], json!([]), "no run: {runs}");
    let files: Vec<String> = std::fs::read_dir(&project)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|f| f != ".git")
        .collect();
    let mut files = files;
    files.sort();
    assert_eq!(
        files,
        ["README.md", "code.txt"],
        "the repository is as it was"
    );
}

/// A first prompt in a project without a team, where agent CLIs are installed (here our
/// scripted ACP agent under their names): the door makes the team of them, written to
/// `.troupe/config.toml` with what it chose, and launches it with the prompt as its task; the
/// members' writes in their own checkouts go through by the box's rule without asking the
/// editor, and the merge queue lands the members' work on the branch out once the project's
/// own test command passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(troupe_test_tools),
    ignore = "drives a real tool scripts/test installs: run with TROUPE_TEST_TOOLS=1"
)]
async fn a_first_prompt_where_agent_clis_are_installed_makes_the_team_and_lands_its_work() {
    let agents = tempfile::tempdir().unwrap();
    for (command, vendor) in [
        ("claude-agent-acp", "claude"),
        ("codex-acp", "codex"),
        ("gemini", "gemini"),
    ] {
        executable(
            agents.path(),
            command,
            &format!(
                "#!/bin/sh\nTROUPE_ACP_FILE=NOTES-{vendor}.md exec {} scripted-acp-agent --script write\n",
                crate::support::DEV_BIN
            ),
        );
    }
    let daemon_path = std::env::join_paths(std::iter::once(agents.path().to_path_buf()).chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))
    .unwrap();
    let d = TestDaemon::start_with_env(&[], &[("PATH", daemon_path.to_str().unwrap())]);
    let project = repo(&d.dir.path().join("fresh"));
    std::fs::write(
        Path::new(&project).join("Makefile"),
        "test:\n\ttest -f NOTES-codex.md\n",
    )
    .unwrap();
    git(&project, &["add", "Makefile"]);
    git(&project, &["commit", "-qm", "a test target"]);
    let path = bare_path(d.dir.path(), &[agents.path()]);
    let r = scenario_on(&d, &project, "bare", "", Some(path)).await;
    assert_eq!(r["stopReason"], "end_turn", "{r:#}");
    let said = r["texts"].as_array().unwrap()[0].as_str().unwrap();
    assert!(
        said.contains("made one of what is installed here"),
        "{said}"
    );
    assert!(said.contains("lead — Claude Code"), "{said}");
    assert!(
        said.contains("test command: make test (from the Makefile's test target)"),
        "{said}"
    );
    // Each CLI started in its box and did its work (a crash would be said here, and its paused
    // role asked of the editor).
    let texts = r["texts"].as_array().unwrap();
    assert!(
        !texts
            .iter()
            .any(|t| t.as_str().is_some_and(|t| t.contains("crashed"))),
        "no member crashed: {r:#}"
    );
    // In their boxes, the members' writes in their own checkouts need no person: the box's
    // rule answered them and the editor was asked nothing.
    assert_eq!(r["asks"], 0, "nothing asked through the editor: {r:#}");

    let config = std::fs::read_to_string(Path::new(&project).join(".troupe/config.toml")).unwrap();
    assert!(config.contains("[parties.team]") && config.contains("test_command = \"make test\""));
    let c = d.client().await;
    let approvals = c.call("list_approvals", json!({})).await.unwrap();
    let approvals = approvals["approvals"].as_array().unwrap();
    assert!(
        !approvals.is_empty()
            && approvals
                .iter()
                .all(|a| a["status"] == "approved" && a["rule_id"] == "sandbox:own-checkout"),
        "{approvals:?}"
    );
    let parties = c.call("list_parties", json!({})).await.unwrap();
    let parties = parties["parties"].as_array().unwrap();
    assert_eq!(parties.len(), 1, "{parties:?}");
    assert_eq!(parties[0]["name"], "team");
    assert_eq!(parties[0]["status"], "completed", "{parties:?}");
    // Landed on the branch out, tests passed: every developer's file is there.
    // The agents wrote and did not commit: Troupe committed it on their branches.
    let ev = c
        .call(
            "list_events",
            json!({ "party_id": parties[0]["party_id"], "limit": 1000 }),
        )
        .await
        .unwrap();
    let committed = ev["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "member_work_committed")
        .count();
    assert_eq!(committed, 4, "{ev}");
    for vendor in ["claude", "codex", "gemini"] {
        git(
            &project,
            &["cat-file", "-e", &format!("HEAD:NOTES-{vendor}.md")],
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(troupe_test_tools),
    ignore = "drives a real tool scripts/test installs: run with TROUPE_TEST_TOOLS=1"
)]
async fn an_acp_prompt_runs_one_agent_with_slash_agent() {
    let d = TestDaemon::start();
    let project = setup(&d).await;
    let r = scenario(&d, &project, "agent", "notes-writer").await;
    assert_eq!(r["stopReason"], "end_turn", "{r:#}");
    assert_eq!(r["asks"], 1, "{r:#}");
    let texts = r["texts"].as_array().unwrap();
    assert!(
        texts[0].as_str().unwrap().contains("Started notes-writer"),
        "{r:#}"
    );
    position(texts, |t| {
        t.contains("**[notes-writer]** success: permission approved")
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(troupe_test_tools),
    ignore = "drives a real tool scripts/test installs: run with TROUPE_TEST_TOOLS=1"
)]
async fn an_agents_question_reaches_the_acp_editor_and_its_choice_the_agent() {
    let d = TestDaemon::start();
    let project = setup(&d).await;
    let r = scenario(&d, &project, "agent", "chooser").await;
    assert_eq!(r["stopReason"], "end_turn", "{r:#}");
    assert_eq!(r["asks"], 1, "the question, asked once: {r:#}");
    let texts = r["texts"].as_array().unwrap();
    // The client picks the first option offered: the first choice.
    position(texts, |t| t.contains("**[chooser]** success: color red"));
    let c = d.client().await;
    assert_eq!(
        inbox(&c, &project).await,
        Vec::<Value>::new(),
        "answered, it left the inbox"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(troupe_test_tools),
    ignore = "drives a real tool scripts/test installs: run with TROUPE_TEST_TOOLS=1"
)]
async fn an_agents_question_in_free_words_is_a_form_in_an_editor_that_fills_them() {
    let d = TestDaemon::start();
    let project = setup(&d).await;
    let r = scenario(&d, &project, "words", "asker").await;
    assert_eq!(r["stopReason"], "end_turn", "{r:#}");
    // Two forms (the free-text questions), one permission-style ask (the choice).
    let forms = r["forms"].as_array().unwrap();
    assert_eq!(forms.len(), 2, "{r:#}");
    assert_eq!(forms[0]["mode"], "form", "{r:#}");
    assert!(
        forms[0]["message"]
            .as_str()
            .unwrap()
            .contains("Name the release?"),
        "{r:#}"
    );
    assert_eq!(
        forms[0]["requestedSchema"]["required"],
        json!(["answer"]),
        "{r:#}"
    );
    assert_eq!(forms[0]["sessionId"], r["sessionId"], "{r:#}");
    assert_eq!(r["asks"], 1, "{r:#}");
    let results = r["results"].as_array().unwrap();
    position(results, |t| t == "answered: Aurora");
    position(results, |t| t == "Answered elsewhere.");
    let texts = r["texts"].as_array().unwrap();
    position(texts, |t| {
        t.contains("**[asker]** success: release Aurora, friday yes, else all good")
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(troupe_test_tools),
    ignore = "drives a real tool scripts/test installs: run with TROUPE_TEST_TOOLS=1"
)]
async fn acp_cancel_stops_the_party_and_a_closed_connection_leaves_one_running() {
    let d = TestDaemon::start();
    let project = setup(&d).await;
    let c = d.client().await;
    let r = scenario(&d, &project, "cancel", "waiter").await;
    assert_eq!(r["stopReason"], "cancelled", "{r:#}");
    let parties = c
        .call(
            "list_parties",
            json!({ "created_by_session_id": r["sessionId"] }),
        )
        .await
        .unwrap();
    assert_eq!(parties["parties"][0]["status"], "cancelled", "{parties:#}");

    // A prompt left running when the editor goes keeps its party; loaded again, the session
    // replays and follows it live, and a cancel from the new connection stops it.
    let left = scenario(&d, &project, "leave", "waiter").await;
    assert_eq!(left["exit"]["code"], 0, "{left:#}");
    let replay = left["replayKinds"].as_array().unwrap();
    assert_eq!(replay[0], "user_message_chunk", "{left:#}");
    assert!(replay.contains(&json!("plan")), "{left:#}");
    let live = left["liveTexts"].as_array().unwrap();
    position(live, |t| t.contains("Party cancelled"));
    let parties = c
        .call(
            "list_parties",
            json!({ "created_by_session_id": left["sessionId"] }),
        )
        .await
        .unwrap();
    assert_eq!(parties["parties"][0]["status"], "cancelled", "{parties:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(troupe_test_tools),
    ignore = "drives a real tool scripts/test installs: run with TROUPE_TEST_TOOLS=1"
)]
async fn malformed_and_out_of_order_acp_messages_get_protocol_errors_and_the_door_serves_on() {
    let d = TestDaemon::start();
    let project = setup(&d).await;
    let r = scenario(&d, &project, "raw", "waiter").await;
    let code = |k: &str| r[k]["error"]["code"].as_i64();
    assert!(
        r["parseErrors"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["error"]["code"] == -32700),
        "a line that is not JSON is a parse error: {r:#}"
    );
    assert_eq!(
        code("beforeInit"),
        Some(-32600),
        "initialize comes first: {r:#}"
    );
    assert_eq!(code("unknown"), Some(-32601), "{r:#}");
    assert_eq!(r["init"]["result"]["protocolVersion"], 1, "{r:#}");
    assert_eq!(code("promptBeforeSession"), Some(-32002), "{r:#}");
    let message = r["promptBeforeSession"]["error"].to_string();
    assert!(message.contains("session/new"), "{message}");
    assert_eq!(code("badParams"), Some(-32602), "{r:#}");
    assert_eq!(code("secondPrompt"), Some(-32600), "{r:#}");
    assert!(
        r["secondPrompt"]["error"]
            .to_string()
            .contains("already running"),
        "{r:#}"
    );
    assert_eq!(
        r["firstPrompt"]["result"]["stopReason"], "cancelled",
        "{r:#}"
    );
    assert!(r["after"]["result"]["sessionId"].is_string(), "{r:#}");
    assert_eq!(r["exit"]["code"], 0, "{r:#}");
    let c = d.client().await;
    c.call("daemon_status", json!({})).await.unwrap();
}
