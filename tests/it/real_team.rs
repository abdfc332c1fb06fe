//! One prompt to a landed change with the real agent CLIs: an ACP client Troupe did not write (the
//! official SDK, `tests/acp-client`) sends one request to `troupe acp` in a real repository with
//! a failing test; the project's team (`.troupe/config.toml`) has real Claude Code lead and
//! review, real Codex and real Gemini CLI develop in their worktrees, and the merge queue land
//! with the project's own test command. Every model is a mock that does not know the scenario
//! (`team_brain`): it acts only on what each request offers and says — the tools the CLI
//! lists, the playbook's text, the party's state and the results so far — so the test proves
//! that the playbooks and the tools carry the team. The person is asked only for approvals,
//! through the client's own permission UI.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

use crate::mock_llm::MockLlm;
use crate::real_clis::{bin, codex_home, gemini_home};
use crate::support::{BIN, TestDaemon, git, repo, workspace_root};

const TASK: &str = "Fix the failing test. In `answer.txt`, replace `answer=41` with `answer=42`. \
In `greeting.txt`, replace `helo` with `hello`. Every change adds its note `changes/<step>.md`. \
Decide whether the release notes say `fixed` or `repaired`.";

fn toml_str(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// The project's team: Claude Code leads and reviews, Codex and Gemini CLI develop, the merge
/// queue lands with `make test`; each CLI pointed at its mock model.
fn team_config(dir: &Path, anthropic: &MockLlm, openai: &MockLlm, google: &MockLlm) -> String {
    // Each CLI in a home of its own, offline, pointed at its mock (as `real_clis.rs` sets
    // them up); members commit with the project's own git identity.
    let claude_home = dir.join("claude-home");
    std::fs::create_dir_all(&claude_home).unwrap();
    let claude_home = claude_home.display().to_string();
    let codex_home = codex_home(&dir.join("codex-home"), openai);
    let codex_user = dir.join("codex-user");
    std::fs::create_dir_all(&codex_user).unwrap();
    let codex_user = codex_user.display().to_string();
    let gemini_home = gemini_home(&dir.join("gemini-home")).display().to_string();
    format!(
        "[default]\nparty = \"team\"\n\n\
         [agents.claude]\nrunner = \"acp:claude\"\nisolation = \"worktree\"\ntimeout_secs = 600\n\
         command = [{claude}]\n\
         env = {{ HOME = {claude_home}, IS_SANDBOX = \"1\", CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC = \"1\", \
         DISABLE_AUTOUPDATER = \"1\", CLAUDE_CODE_EXECUTABLE = {claude_exe}, ANTHROPIC_API_KEY = \"sk-test\" }}\n\
         acp = {{ auth_method = \"gateway\", base_url = {anthropic} }}\n\n\
         [agents.codex]\nrunner = \"acp:codex\"\nisolation = \"worktree\"\ntimeout_secs = 600\n\
         command = [{codex}]\n\
         env = {{ CODEX_HOME = {codex_home}, HOME = {codex_user} }}\n\n\
         [agents.gemini]\nrunner = \"acp:gemini\"\nisolation = \"worktree\"\ntimeout_secs = 600\n\
         command = [{gemini}, \"--acp\"]\n\
         env = {{ HOME = {gemini_home}, GEMINI_API_KEY = \"test-gemini-key\", GOOGLE_GEMINI_BASE_URL = {google} }}\n\
         acp = {{ auth_method = \"gemini-api-key\" }}\n\n\
         [agents.merge]\nrunner = \"land\"\n[agents.merge.land]\ntest_command = \"make test\"\n\n\
         [parties.team]\n\
         roles.lead = {{ agent = \"claude\", is_leader = true }}\n\
         roles.dev-codex = {{ agent = \"codex\" }}\n\
         roles.dev-gemini = {{ agent = \"gemini\" }}\n\
         roles.reviewer = {{ agent = \"claude\" }}\n\
         roles.merge = {{ agent = \"merge\" }}\n\
         flow.merge = [\"lead\", \"dev-codex\", \"dev-gemini\", \"reviewer\"]\n{asking}",
        claude = toml_str(&bin("claude-agent-acp")),
        claude_home = toml_str(&claude_home),
        claude_exe = toml_str(&bin("claude")),
        anthropic = toml_str(&anthropic.base_url()),
        codex = toml_str(&bin("codex-acp")),
        codex_home = toml_str(&codex_home.display().to_string()),
        codex_user = toml_str(&codex_user),
        gemini = toml_str(&bin("gemini")),
        gemini_home = toml_str(&gemini_home),
        google = toml_str(&google.base_url()),
        // To measure what the box saves the person: every edit and command asked, as before
        // the box let those that stay in it through.
        asking = if std::env::var_os("TROUPE_TEST_ASK_INSIDE_BOX").is_some() {
            "\n[sandbox]\napprove_own_checkout_edits = false\napprove_in_box_commands = false\n"
        } else {
            ""
        },
    )
}

/// The person's client: one request, every permission approved, every form declined.
fn ask(data: &Path, runtime: &Path, project: &str) -> Value {
    let dir = workspace_root().join("tests/acp-client");
    let out = Command::new("node")
        .arg(dir.join("client.mjs"))
        .arg("team")
        .env("TROUPE_BIN", BIN)
        .env("TROUPE_DATA", data)
        .env("TROUPE_RUNTIME_DIR", runtime)
        .env("TROUPE_PROJECT", project)
        .env("TROUPE_TASK", TASK)
        .env("TROUPE_LOG", "warn")
        .output()
        .expect("node runs");
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(troupe_test_tools),
    ignore = "drives a real tool scripts/test installs: run with TROUPE_TEST_TOOLS=1"
)]
async fn one_prompt_to_a_landed_change_with_real_claude_code_codex_and_gemini() {
    let d = TestDaemon::start();
    let c = d.client().await;
    let dir = d.dir.path();
    let anthropic = MockLlm::start(vec![]);
    let openai = MockLlm::start(vec![]);
    let google = MockLlm::start(vec![]);
    for m in [&anthropic, &openai, &google] {
        m.think(crate::team_brain::brain());
    }
    // A real repository with a failing test.
    let project = repo(&dir.join("proj"));
    let root = Path::new(&project);
    std::fs::write(root.join("answer.txt"), "answer=41\n").unwrap();
    std::fs::write(root.join("greeting.txt"), "helo world\n").unwrap();
    std::fs::write(
        root.join("Makefile"),
        "test:\n\tgrep -qx 'answer=42' answer.txt\n\tgrep -q '^hello' greeting.txt\n",
    )
    .unwrap();
    std::fs::create_dir_all(root.join(".troupe")).unwrap();
    std::fs::write(
        root.join(".troupe/config.toml"),
        team_config(dir, &anthropic, &openai, &google),
    )
    .unwrap();
    // Its git identity (members commit in their worktrees of it).
    git(root, &["config", "user.name", "Person"]);
    git(root, &["config", "user.email", "person@example.com"]);
    git(root, &["add", "."]);
    git(
        root,
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-qm",
            "a failing test",
        ],
    );
    assert!(
        !Command::new("make")
            .arg("test")
            .current_dir(root)
            .output()
            .unwrap()
            .status
            .success(),
        "the test fails before"
    );

    let started = std::time::Instant::now();
    let cpu_before = cpu_secs(d.pid());
    let (data, runtime) = (d.layout.data_dir.clone(), d.layout.runtime_dir.clone());
    let turn = tokio::task::spawn_blocking({
        let project = project.clone();
        move || ask(&data, &runtime, &project)
    });
    // A bound for a team that stopped playing (each member's own timeout is 600 s).
    let report = match tokio::time::timeout(std::time::Duration::from_secs(900), turn).await {
        Ok(report) => report.unwrap(),
        Err(_) => {
            let summaries =
                |m: &MockLlm| m.requests().iter().map(|r| r.summary()).collect::<Vec<_>>();
            panic!(
                "the team did not finish within 900 s\nanthropic: {:#?}\nopenai: {:#?}\ngoogle: {:#?}",
                summaries(&anthropic),
                summaries(&openai),
                summaries(&google)
            );
        }
    };
    let wall = started.elapsed();

    let parties = c.call("list_parties", json!({})).await.unwrap();
    let party = parties["parties"][0]["party_id"]
        .as_str()
        .unwrap()
        .to_string();
    let status = c
        .call("get_party_status", json!({ "party_id": party }))
        .await
        .unwrap();
    let events = c
        .call("list_events", json!({ "party_id": party, "limit": 1000 }))
        .await
        .unwrap();
    let kinds: Vec<String> = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["kind"].as_str().map(str::to_string))
        .collect();
    // With TROUPE_TEST_DUMP=<dir>, every model request's body is kept there (to study a CLI).
    if let Some(out) = std::env::var_os("TROUPE_TEST_DUMP") {
        let out = PathBuf::from(out);
        std::fs::create_dir_all(&out).unwrap();
        for (name, m) in [
            ("anthropic", &anthropic),
            ("openai", &openai),
            ("google", &google),
        ] {
            for (i, r) in m.requests().iter().enumerate() {
                let _ = std::fs::write(out.join(format!("{name}-{i:03}.json")), &r.body_text);
            }
        }
        for e in std::fs::read_dir(d.layout.data_dir.join("runs"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let _ = std::fs::copy(e.path(), out.join(e.file_name()));
        }
    }
    let dump = || {
        let summaries = |m: &MockLlm| m.requests().iter().map(|r| r.summary()).collect::<Vec<_>>();
        format!(
            "report: {report:#}\nstatus: {status:#}\nkinds: {kinds:?}\nanthropic: {:#?}\nopenai: {:#?}\ngoogle: {:#?}",
            summaries(&anthropic),
            summaries(&openai),
            summaries(&google)
        )
    };
    assert_eq!(status["party"]["status"], "completed", "{}", dump());

    // The plan: proposed, reviewed and committed by the leader.
    let plan = c
        .call("get_plan", json!({ "party_id": party }))
        .await
        .unwrap();
    assert_eq!(plan["committed"]["proposed_by"], "lead", "{}", dump());
    assert_eq!(plan["committed"]["committed_by"], "lead", "{}", dump());
    assert!(
        plan["committed"]["reviews"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["reviewer"] == "reviewer" && r["verdict"] == "approve"),
        "{}",
        dump()
    );
    // Steps started and submitted by their owners, one reopened by the review, all done.
    let steps = plan["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 2, "{}", dump());
    let owners: Vec<&str> = steps
        .iter()
        .map(|s| s["owner_role"].as_str().unwrap())
        .collect();
    assert_eq!(owners, ["dev-codex", "dev-gemini"], "{}", dump());
    assert!(steps.iter().all(|s| s["state"] == "done"), "{}", dump());
    for kind in [
        "plan_proposed",
        "plan_reviewed",
        "plan_committed",
        "step_started",
        "step_submitted",
        "step_reopened",
        "step_accepted",
    ] {
        assert!(kinds.iter().any(|k| k == kind), "{kind}: {}", dump());
    }
    // A decision voted by two roles, and its ADR.
    let decisions = c
        .call("list_decisions", json!({ "party_id": party }))
        .await
        .unwrap();
    let decision = &decisions["decisions"][0];
    assert_eq!(decision["status"], "committed", "{}", dump());
    let voters: Vec<&str> = decision["votes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["voter"].as_str().unwrap())
        .collect();
    assert_eq!(voters.len(), 2, "{decision}");
    assert!(
        voters.contains(&"dev-codex") && voters.contains(&"dev-gemini"),
        "{decision}"
    );
    assert!(decision["adr_path"].is_string(), "{decision}");

    // Landed on main, the project's test passing there.
    git(root, &["checkout", "-q", "main"]);
    assert_eq!(
        std::fs::read_to_string(root.join("answer.txt")).unwrap(),
        "answer=42\n"
    );
    assert!(
        std::fs::read_to_string(root.join("greeting.txt"))
            .unwrap()
            .starts_with("hello")
    );
    assert!(root.join("changes/s1.md").exists() && root.join("changes/s2.md").exists());
    assert!(
        Command::new("make")
            .arg("test")
            .current_dir(root)
            .output()
            .unwrap()
            .status
            .success(),
        "the test passes on main"
    );
    // The person was asked only for approvals, through the client's own permission UI.
    assert_eq!(report["forms"], json!([]), "{}", dump());
    // What it approved: only shell commands that leave a member's box (inside it, edits and
    // commands go through on their own); Troupe's own tools, which the members call with their
    // own credentials, are not put to the person.
    let asks = report["asks"].as_array().unwrap();
    assert!(
        std::env::var_os("TROUPE_TEST_ASK_INSIDE_BOX").is_some()
            || asks.iter().all(|a| a["title"]
                .as_str()
                .is_some_and(|t| t.contains("run_command"))),
        "{}",
        dump()
    );
    assert!(
        kinds.iter().any(|k| k == "agent_troupe_tool_allowed"),
        "{}",
        dump()
    );
    let inbox = c.call("list_inbox", json!({})).await.unwrap();
    assert!(
        inbox["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|i| i["kind"] != "question"),
        "{inbox}"
    );

    // The figures: wall time, daemon CPU, protocol calls by kind.
    let mut by_kind = std::collections::BTreeMap::<String, usize>::new();
    for k in &kinds {
        *by_kind.entry(k.clone()).or_default() += 1;
    }
    let cpu = cpu_secs(d.pid()) - cpu_before;
    let mut asked = std::collections::BTreeMap::<String, usize>::new();
    for a in report["asks"].as_array().unwrap() {
        let title = a["title"].as_str().unwrap_or_default();
        let first: String = title
            .split_whitespace()
            .take(2)
            .collect::<Vec<_>>()
            .join(" ");
        *asked.entry(first).or_default() += 1;
    }
    eprintln!(
        "FIGURES wall {:.1} s, daemon cpu {cpu:.2} s, approvals asked {} {asked:?}, model requests: anthropic {} openai {} google {}, events {by_kind:?}",
        wall.as_secs_f64(),
        report["asks"].as_array().unwrap().len(),
        anthropic.requests().len(),
        openai.requests().len(),
        google.requests().len(),
    );
}

/// A process's CPU time so far (user and system), in seconds.
fn cpu_secs(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // After the name: state is field 0, utime 11, stime 12 (clock ticks, 100 per second).
    (ticks(11) + ticks(12)) / 100.0
}
