//! The person's agents from a terminal (`troupe agent …`): start one and follow its output to its
//! result, list them, read a result and a log, take one over, cancel one; exit codes a script
//! can use (0 success, 1 ended otherwise or refused, 2 still running) and errors that name what
//! was wrong.

use std::path::Path;

use serde_json::{Value, json};

use crate::support::{TestDaemon, cli, define, executable, repo, stderr, stdout, wait_for};

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
    let gate = dir.join("gate");
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
        define(&c, "agent", json!({ "name": name, "command": [cmd] })).await;
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
