//! The person's agents from a terminal (`troupe agent …`): start one and follow its output to its
//! result, list them, read a result and a log, take one over, cancel one; exit codes a script
//! can use (0 success, 1 ended otherwise or refused, 2 still running) and errors that name what
//! was wrong.

use std::path::Path;

use serde_json::{Value, json};

use crate::support::{TestDaemon, cli, define, executable, repo, shares, stderr, stdout, wait_for};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_person_starts_follows_and_reads_agents_from_a_terminal() {
    let d = TestDaemon::start();
    let c = d.client().await;
    let dir = d.dir.path();
    let project = repo(&dir.join("proj"));
    let here = Some(Path::new(&project));
    let speaker = executable(
        dir,
        "speaker.sh",
        "#!/bin/sh\necho \"working on: $TROUPE_PROMPT\"\n\
         troupe call complete \"{\\\"output\\\":\\\"done: $TROUPE_PROMPT\\\"}\" >/dev/null\n",
    );
    let failer = executable(dir, "failer.sh", "#!/bin/sh\necho 'giving up'\nexit 3\n");
    // The waiter waits for a file in the test's shared dir, which its box is given.
    let gate = d.shared().join("gate");
    let waiter = executable(
        dir,
        "waiter.sh",
        &format!(
            "#!/bin/sh\necho waiting\nwhile [ ! -e '{}' ]; do sleep 0.05; done\n\
             troupe call complete '{{\"output\":\"let go\"}}' >/dev/null\n",
            gate.display()
        ),
    );
    for (name, cmd) in [
        ("speaker", &speaker),
        ("failer", &failer),
        ("waiter", &waiter),
    ] {
        let def = json!({ "name": name, "command": [cmd] });
        define(&c, "agent", shares(def, &[&d.shared()])).await;
    }

    // Started and followed: its output as it writes it, then its result; exit 0.
    let out = cli(
        &d.layout,
        &[
            "agent", "start", "speaker", "tidy", "the", "notes", "--follow",
        ],
        here,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("working on: tidy the notes\n"), "{text}");
    assert!(text.contains("  success\ndone: tidy the notes\n"), "{text}");

    // A run that fails: exit 1, the error said.
    let out = cli(
        &d.layout,
        &["agent", "start", "failer", "try", "--follow"],
        here,
    );
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(stdout(&out).contains("giving up"), "{}", stdout(&out));

    // Started without following: its run id; still running, `result` exits 2; `list` shows
    // the terminal's runs; `log` its output; let go, `result` exits 0.
    let out = cli(&d.layout, &["agent", "start", "waiter", "hold", "on"], here);
    assert!(out.status.success(), "{}", stderr(&out));
    let run = stdout(&out).trim().to_string();
    wait_for("the waiter's first words", 30, || async {
        let log = cli(&d.layout, &["agent", "log", &run], here);
        stdout(&log).contains("waiting\n").then_some(())
    })
    .await;
    let out = cli(&d.layout, &["agent", "result", &run], here);
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    let listed = stdout(&cli(&d.layout, &["agent", "list"], here));
    assert_eq!(listed.lines().count(), 3, "{listed}");
    assert!(listed.contains(&run), "{listed}");
    let listed: Value =
        serde_json::from_str(&stdout(&cli(&d.layout, &["--json", "agent", "list"], here))).unwrap();
    assert_eq!(listed["runs"].as_array().unwrap().len(), 3, "{listed}");
    // A process keeps no agent session to take over: said, exit 1.
    let out = cli(&d.layout, &["agent", "tell", &run, "how", "is", "it"], here);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("keeps no agent session"),
        "{}",
        stderr(&out)
    );
    std::fs::write(&gate, "").unwrap();
    wait_for("the waiter to end", 30, || async {
        cli(&d.layout, &["agent", "result", &run], here)
            .status
            .success()
            .then_some(())
    })
    .await;
    let out = cli(&d.layout, &["agent", "log", &run, "--follow"], here);
    assert!(stdout(&out).ends_with("waiting\n"), "{}", stdout(&out));

    // Cancelled: its status said.
    std::fs::remove_file(&gate).unwrap();
    let run = stdout(&cli(
        &d.layout,
        &["agent", "start", "waiter", "again"],
        here,
    ))
    .trim()
    .to_string();
    let out = cli(&d.layout, &["agent", "cancel", &run], here);
    assert!(out.status.success(), "{}", stderr(&out));
    wait_for("the cancelled run to end", 30, || async {
        (cli(&d.layout, &["agent", "result", &run], here)
            .status
            .code()
            == Some(1))
        .then_some(())
    })
    .await;

    // Bad requests are named.
    let out = cli(&d.layout, &["agent", "result", "no-such-run"], here);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("no-such-run"), "{}", stderr(&out));
    let out = cli(&d.layout, &["agent", "start", "nobody", "x"], here);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("nobody"), "{}", stderr(&out));
}

/// `troupe plan`, `troupe decision`, `troupe inbox`, `troupe worktrees` and `troupe conflicts`
/// on a party whose plan and decisions are the person's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_person_reviews_plans_votes_and_answers_the_inbox_from_a_terminal() {
    let d = TestDaemon::start();
    let c = d.client().await;
    let dir = d.dir.path();
    let project = repo(&dir.join("proj"));
    let here = Some(Path::new(&project));
    let waiter = executable(dir, "waiter.sh", "#!/bin/sh\nexec sleep 600\n");
    define(
        &c,
        "agent",
        json!({ "name": "waiter", "command": [waiter], "isolation": "worktree" }),
    )
    .await;
    define(
        &c,
        "party",
        json!({ "name": "planned", "roles": {
            "lead": { "agent": "waiter", "is_leader": true },
            "dev": { "agent": "waiter" } } }),
    )
    .await;
    let party = crate::support::launch(&c, "planned", &project).await;
    let run = |args: &[&str]| {
        let out = cli(&d.layout, args, here);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        stdout(&out)
    };

    // The plan: a draft (proposed here by the person for the test), reviewed, committed.
    c.call(
        "propose_plan",
        json!({ "party_id": party, "steps": [{ "id": "s1", "title": "Write the notes",
                "owner_role": "dev", "acceptance": "notes.md exists" }] }),
    )
    .await
    .unwrap();
    let shown = run(&[
        "plan",
        "review",
        &party,
        "approve",
        "--comments",
        "fine by me",
    ]);
    assert!(shown.contains("draft plan v1"), "{shown}");
    assert!(
        shown.contains("review by person: approve — fine by me"),
        "{shown}"
    );
    run(&["plan", "commit", &party]);
    let shown = run(&["plan", "show", &party]);
    assert!(shown.contains("committed plan v1"), "{shown}");
    assert!(
        shown.contains("s1") && shown.contains("Write the notes"),
        "{shown}"
    );

    // A decision put to the person: in the inbox with its choices, answered there.
    let proposed = c
        .call(
            "propose_decision",
            json!({ "party_id": party, "topic": "which database", "options": ["sqlite", "postgres"],
                    "voters": ["person"] }),
        )
        .await
        .unwrap();
    let decision = proposed["decision"]["decision_id"]
        .as_str()
        .unwrap()
        .to_string();
    let listed = run(&["decision", "list", &party]);
    assert!(
        listed.contains(&decision) && listed.contains("[sqlite | postgres]"),
        "{listed}"
    );
    let inbox: Value = serde_json::from_str(&run(&["--json", "inbox", "list"])).unwrap();
    let item = inbox["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["kind"] == "decision")
        .unwrap_or_else(|| panic!("{inbox}"))
        .clone();
    let item_id = item["item_id"].as_str().unwrap();
    let text = run(&["inbox", "list"]);
    assert!(
        text.contains(item_id) && text.contains("answer: sqlite | postgres"),
        "{text}"
    );
    // A wrong answer is named with the right ones; nothing is decided.
    let out = cli(&d.layout, &["inbox", "answer", item_id, "mongo"], here);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("\"mongo\" is not one of its answers: sqlite | postgres"),
        "{}",
        stderr(&out)
    );
    run(&["inbox", "answer", item_id, "sqlite"]);
    let listed = run(&["decision", "list", &party]);
    assert!(
        listed.contains("committed") && listed.contains("→ sqlite"),
        "{listed}"
    );
    // One voted directly.
    let second = c
        .call(
            "propose_decision",
            json!({ "party_id": party, "topic": "which port", "options": ["8080", "9090"],
                    "voters": ["person"] }),
        )
        .await
        .unwrap();
    let second = second["decision"]["decision_id"].as_str().unwrap();
    let voted = run(&[
        "decision",
        "vote",
        second,
        "9090",
        "--rationale",
        "free here",
    ]);
    assert!(voted.contains("committed"), "{voted}");
    let out = cli(&d.layout, &["inbox", "answer", "no-such-item", "x"], here);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("no inbox item no-such-item"),
        "{}",
        stderr(&out)
    );

    // The members' checkouts, and no conflict between them.
    let trees = run(&["worktrees", &party]);
    assert!(
        trees.contains("lead#0") && trees.contains("dev#0"),
        "{trees}"
    );
    assert!(trees.contains("0 ahead, 0 behind"), "{trees}");
    assert_eq!(run(&["conflicts", &party]), "no conflict predicted\n");
    c.call("cancel_party", json!({ "party_id": party }))
        .await
        .unwrap();
}

/// Shell completions and the man page come from the command line's own definitions.
#[test]
fn completions_and_the_man_page_describe_every_command() {
    let d = tempfile::tempdir().unwrap();
    let layout = troupe_api::layout::Layout::resolve(Some(d.path())).unwrap();
    for shell in ["bash", "zsh", "fish"] {
        let out = cli(&layout, &["completions", shell], None);
        assert!(out.status.success(), "{shell}: {}", stderr(&out));
        let script = stdout(&out);
        for word in ["agent", "inbox", "decision", "worktrees"] {
            assert!(script.contains(word), "{shell} completes {word}");
        }
    }
    let out = cli(&layout, &["man"], None);
    assert!(out.status.success(), "{}", stderr(&out));
    let page = stdout(&out);
    assert!(page.contains(".TH troupe 1"), "{page}");
    assert!(
        page.contains("Run a troupe of AI coding agents as a team"),
        "{page}"
    );
    let out = cli(&layout, &["completions", "tcsh"], None);
    assert_eq!(out.status.code(), Some(2), "clap names the bad shell");
    assert!(stderr(&out).contains("tcsh"), "{}", stderr(&out));
}

/// `troupe review` shows each member's diff; `troupe land`: a failing test leaves the target where it was (exit 1, the test's output
/// said), a passing one lands both members' branches (exit 0, each member's outcome said).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_person_lands_a_party_from_a_terminal() {
    let d = TestDaemon::start();
    let c = d.client().await;
    let dir = d.dir.path();
    let project = repo(&dir.join("proj"));
    let here = Some(Path::new(&project));
    let script = crate::scenario::puppet_script(dir);
    for (name, file) in [("one", "one.txt"), ("two", "two.txt")] {
        define(
            &c,
            "agent",
            json!({ "name": name, "command": [script, file, name, "-"], "isolation": "worktree" }),
        )
        .await;
    }
    define(
        &c,
        "party",
        json!({ "name": "pair", "roles": { "one": { "agent": "one" }, "two": { "agent": "two" } } }),
    )
    .await;
    let party = crate::support::launch(&c, "pair", &project).await;
    let s = crate::support::party_end(&c, &party, 60).await;
    assert_eq!(s["party"]["status"], "completed", "{s}");

    // Each member's work, as a diff (printed as it is: the output is no terminal here).
    let out = cli(&d.layout, &["review", &party, "one"], here);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.starts_with("one#0 on "), "{text}");
    assert!(
        text.contains("one.txt") && text.contains("+one\n"),
        "{text}"
    );
    let text = stdout(&cli(
        &d.layout,
        &["review", &party, "two#0", "--stat"],
        here,
    ));
    assert!(
        text.contains("two.txt") && !text.contains("+two\n"),
        "{text}"
    );
    let out = cli(&d.layout, &["review", &party, "two#x"], here);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("the member is ROLE or ROLE#N"),
        "{}",
        stderr(&out)
    );

    let out = cli(
        &d.layout,
        &[
            "land",
            &party,
            "--test-command",
            "echo no such luck; exit 3",
        ],
        here,
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("test failed: echo no such luck; exit 3"),
        "{}",
        stdout(&out)
    );
    assert!(stdout(&out).contains("no such luck"), "{}", stdout(&out));
    assert!(!Path::new(&project).join("one.txt").exists());

    let out = cli(
        &d.layout,
        &[
            "land",
            &party,
            "--test-command",
            "test -f one.txt && test -f two.txt",
        ],
        here,
    );
    assert!(out.status.success(), "{}\n{}", stdout(&out), stderr(&out));
    let text = stdout(&out);
    assert!(text.starts_with("landed "), "{text}");
    assert!(
        text.contains("  one#0  integrated") && text.contains("  two#0  integrated"),
        "{text}"
    );
    let on_main = std::process::Command::new("git")
        .args(["show", "main:one.txt"])
        .current_dir(&project)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&on_main.stdout), "one\n");
    // Its stages are on the timeline, for whoever follows the landing.
    let events = c
        .call("list_events", json!({ "party_id": party, "limit": 1000 }))
        .await
        .unwrap()
        .to_string();
    for kind in ["land_integrated", "land_tests_passed", "party_landed"] {
        assert!(events.contains(kind), "{kind}");
    }
}

/// `troupe doctor` on a machine with git and one agent CLI, then with none: what it found, how
/// to fix each miss, exit 1 when a team cannot work.
#[test]
fn doctor_says_what_is_there_and_how_to_fix_what_is_not() {
    let d = tempfile::tempdir().unwrap();
    let bin = d.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let which = |name: &str| {
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .map(|p| p.join(name))
            .find(|p| p.is_file())
            .unwrap()
    };
    for tool in ["git", "sh"] {
        std::os::unix::fs::symlink(which(tool), bin.join(tool)).unwrap();
    }
    let doctor = |path: &Path, json: bool| {
        let mut cmd = std::process::Command::new(crate::support::BIN);
        cmd.arg("--data-dir").arg(d.path().join("data"));
        if json {
            cmd.arg("--json");
        }
        cmd.arg("doctor")
            .env("PATH", path)
            .env("TROUPE_RUNTIME_DIR", d.path().join("run"))
            .env("TROUPE_LOG", "error")
            .output()
            .unwrap()
    };
    // git alone: no agent CLI, each said with its install command; exit 1.
    let out = doctor(&bin, false);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let text = stdout(&out);
    assert!(
        text.contains("ok    git                git version"),
        "{text}"
    );
    assert!(
        text.contains("warn  Claude Code        not found: npm install -g @agentclientprotocol/claude-agent-acp"),
        "{text}"
    );
    assert!(text.contains("MISS  an agent CLI"), "{text}");
    assert!(text.contains("daemon             not running"), "{text}");
    // With Codex (a stand-in that says its version): found, with its version; exit 0.
    executable(&bin, "codex-acp", "#!/bin/sh\necho 'codex-acp 9.9.9'\n");
    let out = doctor(&bin, false);
    assert!(out.status.success(), "{}", stdout(&out));
    let text = stdout(&out);
    assert!(
        text.contains("ok    Codex              codex-acp 9.9.9 ("),
        "{text}"
    );
    assert!(!text.contains("MISS"), "{text}");
    let out = doctor(&bin, true);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["ok"], true, "{report}");
    assert!(
        report["checks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["what"] == "Codex" && c["ok"] == true),
        "{report}"
    );
}
