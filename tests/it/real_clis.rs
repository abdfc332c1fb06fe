//! The real agent CLIs from npm, offline against our mock model servers on loopback: Claude Code
//! (through claude-agent-acp), Codex (codex-acp) and Gemini CLI (`gemini --acp`) as members of
//! one party through the ACP runner, their permission requests decided through Troupe as an
//! editor would (approve, deny), and Claude Code's AskUserQuestion answered from Troupe's inbox
//! (claude-agent-acp sends it as an ACP form); and `claude -p` with `--permission-prompt-tool` pointed at
//! `troupe mcp`. `scripts/test` installs the CLIs (scripts/install-agent-clis) and sets
//! `TROUPE_TEST_AGENT_CLIS`.
//!
//! Gemini CLI over ACP, as pinned (0.61.0), reads and writes files through the client's `fs/*`
//! when the client offers them, and cannot create a new file that way: its `write_file` first
//! reads the file, and its ACP SDK turns the client's "no such file" error into a plain object
//! its own ENOENT check does not recognise, so the tool fails before asking permission. So
//! Troupe does not offer `fs/*` to `acp:gemini` (`acp.fs`, default off for Gemini only): it
//! writes with its own tools, each write and shell command (run by Gemini itself, not through
//! `terminal/*`) after a Troupe approval; the test shows a new file, an edit and a command.
//! With `"acp": {"fs": true}` the new file fails as above.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use troupe::client::Client;

use crate::mock_llm::{MockLlm, Reply};
use crate::support::{
    TestDaemon, define, inbox_question, launch, party_end, pending_approval, register, repo,
    wait_for, workspace_root,
};

/// Where `scripts/install-agent-clis` put the CLIs.
fn clis() -> PathBuf {
    let dir = std::env::var_os("TROUPE_TEST_AGENT_CLIS")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join(".tools/agent-clis"));
    assert!(
        ["claude-agent-acp", "codex-acp", "claude", "gemini"]
            .iter()
            .all(|b| dir.join("bin").join(b).exists()),
        "the agent CLIs are needed: run the tests with scripts/test (it installs them) or \
         scripts/install-agent-clis DIR and set TROUPE_TEST_AGENT_CLIS=DIR"
    );
    dir
}

pub(crate) fn bin(name: &str) -> String {
    clis().join("bin").join(name).display().to_string()
}

/// Environment that keeps Claude Code offline, quiet and in its own home.
fn claude_env(home: &Path) -> Value {
    std::fs::create_dir_all(home).unwrap();
    json!({
        "HOME": home.display().to_string(),
        "IS_SANDBOX": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_EXECUTABLE": bin("claude"),
    })
}

/// A CODEX_HOME whose config points Codex at the mock (OpenAI Responses) and asks before
/// commands.
pub(crate) fn codex_home(dir: &Path, mock: &MockLlm) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        dir.join("config.toml"),
        format!(
            "model = \"gpt-5\"\nmodel_provider = \"mock\"\napproval_policy = \"untrusted\"\n\
             sandbox_mode = \"danger-full-access\"\n\n[model_providers.mock]\nname = \"mock\"\n\
             base_url = \"{}/v1\"\nwire_api = \"responses\"\nrequires_openai_auth = false\n",
            mock.base_url()
        ),
    )
    .unwrap();
    dir.to_path_buf()
}

/// The model Gemini CLI is pinned to: its default, `auto`, first asks a router model for a
/// JSON verdict (a tool-less call the mock answers with plain text, which it retries for a
/// minute and a half).
const GEMINI_MODEL: &str = "gemini-2.5-flash";

/// A HOME for Gemini CLI whose `~/.gemini/settings.json` keeps it offline: no usage
/// statistics (Clearcut, its only call besides the model's), no telemetry, no update check,
/// and a fixed model.
pub(crate) fn gemini_home(dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir.join(".gemini")).unwrap();
    let settings = json!({
        "privacy": { "usageStatisticsEnabled": false },
        "telemetry": { "enabled": false },
        "general": { "enableAutoUpdate": false, "enableAutoUpdateNotification": false },
        "model": { "name": GEMINI_MODEL },
    });
    std::fs::write(
        dir.join(".gemini/settings.json"),
        serde_json::to_string_pretty(&settings).unwrap(),
    )
    .unwrap();
    dir.to_path_buf()
}

async fn member_workdir(c: &Client, party: &str, role: &str) -> String {
    wait_for(&format!("{role}'s worktree"), 60, || async {
        let s = c
            .call("get_party_status", json!({ "party_id": party }))
            .await
            .unwrap();
        s["members"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["role"] == role && m["run_id"].is_string())
            .and_then(|m| m["workdir"].as_str().map(str::to_string))
    })
    .await
}

/// Waits for a pending approval of `tool`; on timeout, panics with what the party, the
/// agents' logs and the mock servers show.
async fn approval_of(
    d: &TestDaemon,
    c: &Client,
    party: &str,
    tool: &str,
    mocks: &[&MockLlm],
) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let l = c
            .call("list_approvals", json!({ "status": "pending" }))
            .await
            .unwrap();
        if let Some(a) = l["approvals"].as_array().unwrap().first() {
            assert_eq!(a["tool_name"], tool, "{a}");
            return a.clone();
        }
        if std::time::Instant::now() > deadline {
            panic!(
                "no {tool} approval came:\n{}",
                diagnose(d, c, party, mocks).await
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A person approves `approval` through Troupe.
async fn approve(c: &Client, approval: &Value) {
    c.call(
        "decide_approval",
        json!({ "approval_id": approval["approval_id"], "decision": "approve" }),
    )
    .await
    .unwrap();
}

async fn diagnose(d: &TestDaemon, c: &Client, party: &str, mocks: &[&MockLlm]) -> String {
    let s = c
        .call("get_party_status", json!({ "party_id": party }))
        .await
        .unwrap();
    let mut out = format!("party: {s}\n");
    if let Ok(dir) = std::fs::read_dir(d.layout.data_dir.join("runs")) {
        for e in dir.flatten() {
            let text = std::fs::read_to_string(e.path()).unwrap_or_default();
            let skip = text.chars().count().saturating_sub(6000);
            let tail: String = text.chars().skip(skip).collect();
            out.push_str(&format!("log {}:\n{tail}\n", e.path().display()));
        }
    }
    for m in mocks {
        for r in m.requests() {
            let sum = r.summary();
            let last = ["messages", "input", "contents"]
                .iter()
                .find_map(|k| r.body[*k].as_array().and_then(|m| m.last()))
                .map(|m| m.to_string())
                .unwrap_or_default();
            // Gemini lists its tools as `tools[].functionDeclarations[]`.
            let tools: Vec<String> = r.body["tools"]
                .as_array()
                .map(|t| {
                    t.iter()
                        .flat_map(|t| match t["functionDeclarations"].as_array() {
                            Some(f) => f.iter().collect::<Vec<_>>(),
                            None => vec![t],
                        })
                        .map(|t| {
                            format!(
                                "{}{}",
                                t["name"].as_str().unwrap_or(""),
                                t["parameters"]["properties"]
                                    .as_object()
                                    .or_else(|| {
                                        t["parametersJsonSchema"]["properties"].as_object()
                                    })
                                    .map(|p| format!("{:?}", p.keys().collect::<Vec<_>>()))
                                    .unwrap_or_default()
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            out.push_str(&format!(
                "mock {}: tools {tools:?}: {} … last input: {}\n",
                m.port(),
                sum.chars().take(300).collect::<String>(),
                last.chars().take(1500).collect::<String>()
            ));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(troupe_test_tools),
    ignore = "drives a real tool scripts/test installs: run with TROUPE_TEST_TOOLS=1"
)]
async fn real_claude_code_codex_and_gemini_work_as_acp_party_members_through_troupe_approvals() {
    let d = TestDaemon::start();
    let c = d.client().await;
    let dir = d.dir.path();
    let project = repo(&dir.join("proj"));
    // Every edit and command asked of the person, even inside the box: the approval path
    // through each CLI is what this test checks.
    std::fs::create_dir_all(dir.join("proj/.troupe")).unwrap();
    std::fs::write(
        dir.join("proj/.troupe/config.toml"),
        "[sandbox]\napprove_own_checkout_edits = false\napprove_in_box_commands = false\n",
    )
    .unwrap();
    let anthropic = MockLlm::start(vec![]);
    anthropic.hold_when_empty();
    anthropic.skip_side_calls();
    let openai = MockLlm::start(vec![]);
    openai.hold_when_empty();
    openai.skip_side_calls();
    let google = MockLlm::start(vec![]);
    google.hold_when_empty();
    google.skip_side_calls();
    let mut claude_env = claude_env(&dir.join("claude-home"));
    claude_env["ANTHROPIC_API_KEY"] = json!("sk-test-troupe");
    define(
        &c,
        "agent",
        json!({
            "name": "claude", "runner": "acp:claude", "command": [bin("claude-agent-acp")],
            "isolation": "worktree", "timeout_secs": 240, "env": claude_env,
            "acp": { "auth_method": "gateway", "base_url": anthropic.base_url() },
        }),
    )
    .await;
    let codex_home = codex_home(&dir.join("codex-home"), &openai);
    define(
        &c,
        "agent",
        json!({
            "name": "codex", "runner": "acp:codex", "command": [bin("codex-acp")],
            "isolation": "worktree", "timeout_secs": 240,
            "env": { "CODEX_HOME": codex_home.display().to_string(), "HOME": dir.join("codex-user").display().to_string() },
        }),
    )
    .await;
    // Gemini CLI: the API key method, pointed at the mock by GOOGLE_GEMINI_BASE_URL (the
    // `gateway` method with the runner's `base_url` works as well).
    let gemini_home = gemini_home(&dir.join("gemini-home"));
    define(
        &c,
        "agent",
        json!({
            "name": "gemini", "runner": "acp:gemini", "command": [bin("gemini"), "--acp"],
            "isolation": "worktree", "timeout_secs": 240,
            "env": {
                "HOME": gemini_home.display().to_string(),
                "GEMINI_API_KEY": "test-gemini-key",
                "GOOGLE_GEMINI_BASE_URL": google.base_url(),
            },
            "acp": { "auth_method": "gemini-api-key" },
        }),
    )
    .await;
    define(
        &c,
        "party",
        json!({
            "name": "real-team",
            "roles": {
                "writer": { "agent": "claude", "prompt": "Write hello.txt." },
                "runner": { "agent": "codex", "prompt": "Record that the build ran." },
                "checker": { "agent": "gemini", "prompt": "Check the build and note it." }
            },
            "flow": { "runner": ["writer"], "checker": ["runner"] }
        }),
    )
    .await;
    let party = launch(&c, "real-team", &project).await;

    // Claude Code: its Write asks permission; a person approves it through Troupe.
    let workdir = member_workdir(&c, &party, "writer").await;
    let hello = Path::new(&workdir).join("hello.txt");
    anthropic.push(Reply::tool(
        "Write",
        json!({ "file_path": hello.display().to_string(), "content": "hello from claude\n" }),
    ));
    anthropic.push(Reply::text("I wrote hello.txt."));
    let approval = approval_of(&d, &c, &party, "write_file", &[&anthropic]).await;
    assert_eq!(
        approval["file_path"],
        hello.display().to_string(),
        "{approval}"
    );
    approve(&c, &approval).await;

    // Codex: its command asks permission; approved, it runs in its own worktree.
    let workdir = member_workdir(&c, &party, "runner").await;
    let ran = Path::new(&workdir).join("ran.txt");
    openai.push(Reply::tool(
        "exec_command",
        json!({ "cmd": "echo built > ran.txt", "workdir": workdir }),
    ));
    openai.push(Reply::text("The build ran."));
    let approval = approval_of(&d, &c, &party, "run_command", &[&openai]).await;
    approve(&c, &approval).await;

    // Gemini CLI (no fs/* offered, see the header): a new file, an edit of an existing one and
    // a shell command in its worktree, each once a person approved it through Troupe.
    let workdir = member_workdir(&c, &party, "checker").await;
    let new_file = Path::new(&workdir).join("gemini.txt");
    let readme = Path::new(&workdir).join("README.md");
    let checked = Path::new(&workdir).join("checked.txt");
    google.push(Reply::tool(
        "write_file",
        json!({ "file_path": new_file.display().to_string(), "content": "from gemini\n" }),
    ));
    google.push(Reply::tool(
        "replace",
        json!({
            "file_path": readme.display().to_string(),
            "old_string": "The answer is 42.",
            "new_string": "The answer is 42, checked by Gemini.",
            "instruction": "Note in the README that Gemini checked the answer.",
        }),
    ));
    google.push(Reply::tool(
        "run_shell_command",
        json!({ "command": "echo checked > checked.txt", "description": "Record the check." }),
    ));
    google.push(Reply::text("Gemini checked the build."));
    for file in [&new_file, &readme] {
        let approval = approval_of(&d, &c, &party, "write_file", &[&google]).await;
        assert_eq!(
            approval["file_path"],
            file.display().to_string(),
            "{approval}"
        );
        approve(&c, &approval).await;
    }
    let approval = approval_of(&d, &c, &party, "run_command", &[&google]).await;
    approve(&c, &approval).await;

    let s = party_end(&c, &party, 180).await;
    let dump = || {
        let summaries = |m: &MockLlm| m.requests().iter().map(|r| r.summary()).collect::<Vec<_>>();
        format!(
            "{s}\nanthropic: {:#?}\nopenai: {:#?}\ngoogle: {:#?}",
            summaries(&anthropic),
            summaries(&openai),
            summaries(&google)
        )
    };
    assert_eq!(s["party"]["status"], "completed", "{}", dump());
    assert_eq!(
        std::fs::read_to_string(&hello).unwrap(),
        "hello from claude\n"
    );
    assert_eq!(std::fs::read_to_string(&ran).unwrap(), "built\n");
    assert_eq!(
        std::fs::read_to_string(&readme).unwrap(),
        "# demo\nThe answer is 42, checked by Gemini.\n"
    );
    assert_eq!(std::fs::read_to_string(&checked).unwrap(), "checked\n");
    assert_eq!(
        std::fs::read_to_string(&new_file).unwrap(),
        "from gemini\n",
        "{}",
        dump()
    );
    let outputs: Vec<&str> = s["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["output"].as_str().unwrap_or(""))
        .collect();
    assert!(outputs.contains(&"I wrote hello.txt."), "{}", dump());
    assert!(outputs.contains(&"The build ran."), "{}", dump());
    assert!(outputs.contains(&"Gemini checked the build."), "{}", dump());
    // Gemini called only its model, with the key.
    let calls = google.requests();
    assert_eq!(calls.len(), 4, "{}", dump());
    for r in &calls {
        assert_eq!(
            r.path,
            format!("/v1beta/models/{GEMINI_MODEL}:streamGenerateContent"),
            "{}",
            dump()
        );
        assert_eq!(r.header("x-goog-api-key"), Some("test-gemini-key"));
    }

    // Denied: Claude Code is told no, nothing is written, the member still ends its turn.
    define(
        &c,
        "party",
        json!({ "name": "real-deny", "roles": { "writer": { "agent": "claude", "prompt": "Write nope.txt." } } }),
    )
    .await;
    let party = launch(&c, "real-deny", &project).await;
    let workdir = member_workdir(&c, &party, "writer").await;
    let nope = Path::new(&workdir).join("nope.txt");
    anthropic.push(Reply::tool(
        "Write",
        json!({ "file_path": nope.display().to_string(), "content": "no\n" }),
    ));
    anthropic.push(Reply::text("I was not allowed to write nope.txt."));
    let approval = approval_of(&d, &c, &party, "write_file", &[&anthropic]).await;
    c.call(
        "decide_approval",
        json!({ "approval_id": approval["approval_id"], "decision": "deny", "reason": "not today" }),
    )
    .await
    .unwrap();
    let s = party_end(&c, &party, 180).await;
    assert_eq!(s["party"]["status"], "completed", "{}", dump());
    assert!(!nope.exists());
    assert_eq!(
        s["members"][0]["output"],
        "I was not allowed to write nope.txt."
    );

    // Claude Code asks its user a question (AskUserQuestion): claude-agent-acp sends it as an
    // ACP form, which waits in Troupe's inbox as a question a field at a time.
    define(
        &c,
        "party",
        json!({ "name": "real-ask", "roles": { "asker": { "agent": "claude", "prompt": "Ask which database." } } }),
    )
    .await;
    let party = launch(&c, "real-ask", &project).await;
    anthropic.push(Reply::tool(
        "AskUserQuestion",
        json!({ "questions": [{
            "question": "Which database should the service use?", "header": "Database",
            "multiSelect": false,
            "options": [
                { "label": "SQLite", "description": "one file, no server" },
                { "label": "PostgreSQL", "description": "a server" },
            ],
        }] }),
    ));
    anthropic.push(Reply::text("We will use SQLite."));
    let asked = inbox_question(&c, &project, "Which database should the service use?").await;
    assert_eq!(
        asked["answer"]["choices"],
        json!(["SQLite", "PostgreSQL", "-", "/decline"]),
        "{asked}"
    );
    let mut params = asked["answer"]["params"].clone();
    params["answer"] = json!("SQLite");
    c.call("answer_question", params).await.unwrap();
    // Its free-text companion ("Other"), left out.
    let other = inbox_question(&c, &project, "Other").await;
    let mut params = other["answer"]["params"].clone();
    params["answer"] = json!("-");
    c.call("answer_question", params).await.unwrap();
    let s = party_end(&c, &party, 180).await;
    assert_eq!(s["party"]["status"], "completed", "{}", dump());
    assert_eq!(
        s["members"][0]["output"],
        "We will use SQLite.",
        "{}",
        dump()
    );
    // The answer reached the model as the tool's result.
    let last = anthropic.requests().last().cloned().unwrap();
    assert!(
        last.body_text
            .contains(r#"answered: \"Which database should the service use?\"=\"SQLite\""#),
        "{}",
        dump()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(troupe_test_tools),
    ignore = "drives a real tool scripts/test installs: run with TROUPE_TEST_TOOLS=1"
)]
async fn real_claude_p_asks_troupe_through_its_permission_prompt_tool() {
    let d = TestDaemon::start();
    let c = d.client().await;
    let dir = d.dir.path();
    let project = repo(&dir.join("proj"));
    let session = register(&c, "claude", &project, None).await;
    let target = Path::new(&project).join("approved.txt");
    let mock = MockLlm::start(vec![
        Reply::tool(
            "Write",
            json!({ "file_path": target.display().to_string(), "content": "approved\n" }),
        ),
        Reply::text("Wrote approved.txt."),
    ]);
    mock.skip_side_calls();
    let mcp = json!({ "mcpServers": { "troupe": {
        "command": env!("CARGO_BIN_EXE_troupe"), "args": ["--data-dir", d.layout.data_dir.display().to_string(), "mcp"],
        "env": { "TROUPE_SESSION_ID": session, "TROUPE_RUNTIME_DIR": d.layout.runtime_dir.display().to_string() },
    } } });
    let home = dir.join("claude-home");
    let env = claude_env(&home);
    let mut cmd = tokio::process::Command::new(bin("claude"));
    cmd.args([
        "-p",
        "Write approved.txt",
        "--output-format",
        "json",
        "--mcp-config",
        &mcp.to_string(),
        "--permission-prompt-tool",
        "mcp__troupe__request_permission",
    ])
    .current_dir(&project)
    .env("ANTHROPIC_BASE_URL", mock.base_url())
    .env("ANTHROPIC_API_KEY", "sk-test-troupe")
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .kill_on_drop(true);
    for (k, v) in env.as_object().unwrap() {
        cmd.env(k, v.as_str().unwrap());
    }
    let child = cmd.spawn().unwrap();
    let approval = pending_approval(&c).await;
    assert_eq!(approval["session_id"], session, "{approval}");
    assert_eq!(approval["tool_name"], "Write", "{approval}");
    approve(&c, &approval).await;
    let out = tokio::time::timeout(Duration::from_secs(120), child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(result["result"], "Wrote approved.txt.", "{result}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "approved\n");
}

/// The running run of `role`, attempt `attempt`, once real Claude Code and the `troupe mcp` it
/// started are both up in its tree: run id, process group, and the tree.
async fn claude_tree(
    d: &TestDaemon,
    c: &Client,
    party: &str,
    attempt: i64,
    mock: &MockLlm,
) -> (String, i64, Vec<(u32, String)>) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut seen = Vec::new();
    loop {
        let runs = c
            .call("list_agents", json!({ "party_id": party }))
            .await
            .unwrap();
        let found = runs["runs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["attempt"] == attempt && r["status"] == "running")
            .and_then(|r| Some((r["run_id"].as_str()?.to_string(), r["pgid"].as_i64()?)));
        if let Some((run, pgid)) = found {
            let tree = crate::support::processes_of(&run, pgid);
            seen.clone_from(&tree);
            let claude = tree
                .iter()
                .any(|(_, cmd)| cmd.contains("claude") && !cmd.contains("claude-agent-acp"));
            let mcp = tree.iter().any(|(_, cmd)| cmd.ends_with(" mcp"));
            if claude && mcp {
                return (run, pgid, tree);
            }
        }
        if std::time::Instant::now() > deadline {
            panic!(
                "no Claude Code with its troupe mcp in attempt {attempt}; its tree: {seen:?}\n{}",
                diagnose(d, c, party, &[mock]).await
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(troupe_test_tools),
    ignore = "drives a real tool scripts/test installs: run with TROUPE_TEST_TOOLS=1"
)]
async fn real_claude_code_leaves_no_process_after_a_kill_9_and_restart_or_a_stop() {
    let mut d = TestDaemon::start();
    let c = d.client().await;
    let dir = d.dir.path().to_path_buf();
    let project = repo(&dir.join("proj"));
    // The model never answers: Claude Code stays mid-turn, its whole tree alive.
    let anthropic = MockLlm::start(vec![]);
    anthropic.hold_when_empty();
    anthropic.skip_side_calls();
    let mut env = claude_env(&dir.join("claude-home"));
    env["ANTHROPIC_API_KEY"] = json!("sk-test-troupe");
    define(
        &c,
        "agent",
        json!({
            "name": "claude", "runner": "acp:claude", "command": [bin("claude-agent-acp")],
            "isolation": "worktree", "env": env,
            "acp": { "auth_method": "gateway", "base_url": anthropic.base_url() },
        }),
    )
    .await;
    define(
        &c,
        "party",
        json!({ "name": "zombies", "roles": { "writer": { "agent": "claude", "prompt": "Wait." } },
                "recovery": { "on_crash": "restart", "max_retries": 3 } }),
    )
    .await;
    let party = launch(&c, "zombies", &project).await;
    let (first, pgid, tree) = claude_tree(&d, &c, &party, 1, &anthropic).await;

    // kill -9 of the daemon, then a restart: no process of the old attempt remains.
    drop(c);
    d.kill9();
    d.spawn();
    let c = d.client().await;
    crate::support::no_process_left(&first, pgid, 60).await;
    // Each process seen in the tree is gone (its pid is free, a zombie, or another program).
    for (pid, cmd) in &tree {
        let now = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let now: Vec<String> = now
            .split(|b| *b == 0)
            .filter(|s| !s.is_empty())
            .map(|s| String::from_utf8_lossy(s).into_owned())
            .collect();
        assert_ne!(&now.join(" "), cmd, "{pid} ({cmd}) survived the restart");
    }

    // Recovery restarts it; `troupe stop` then ends the new attempt's whole tree.
    let (second, pgid2, _) = claude_tree(&d, &c, &party, 2, &anthropic).await;
    drop(c);
    let out = d.cli(&["stop"]);
    assert!(out.status.success(), "{}", crate::support::stderr(&out));
    d.child.take().unwrap().wait().unwrap();
    crate::support::no_process_left(&second, pgid2, 60).await;
}
