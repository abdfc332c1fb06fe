//! `troupe ui` as a person uses it, in a real terminal: tmux runs the dashboard at 80×24,
//! `send-keys` types and `capture-pane` reads the screen. A party launched appears with its
//! roles and members; its member's approval is answered from the dashboard's inbox and the
//! member goes on, the next role runs and the party completes; a member's live output and diff
//! are shown; the dashboard rides out a daemon restart.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::json;

use crate::support::{BIN, TestDaemon, asks_for_in_box_requests, define, executable, launch, repo};

/// A tmux server of the test's own (its socket in the test's directory), killed when dropped.
struct Tmux {
    socket: PathBuf,
}

impl Tmux {
    /// Runs `command` in a new 80×24 session in `cwd`; what it prints when it exits stays on
    /// the screen.
    fn start(dir: &Path, cwd: &str, command: &str) -> Tmux {
        let tmux = Tmux {
            socket: dir.join("tmux.sock"),
        };
        let script = format!("{command}; echo \"[exited $?]\"; sleep 600");
        let out = tmux
            .cmd()
            .args([
                "new-session",
                "-d",
                "-x",
                "80",
                "-y",
                "24",
                "-s",
                "ui",
                "-c",
                cwd,
            ])
            .args(["-e", "TERM=xterm-256color", "sh", "-c", &script])
            .output()
            .expect("tmux runs (Debian's tmux)");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        tmux
    }

    fn cmd(&self) -> Command {
        let mut c = Command::new("tmux");
        c.arg("-S").arg(&self.socket).arg("-f").arg("/dev/null");
        c
    }

    /// Types keys as tmux names them (`Tab`, `Down`, `Enter`, or plain text).
    fn send(&self, keys: &[&str]) {
        let ok = self
            .cmd()
            .args(["send-keys", "-t", "ui"])
            .args(keys)
            .status()
            .unwrap();
        assert!(ok.success());
    }

    /// The screen as text, line by line.
    fn screen(&self) -> String {
        let out = self
            .cmd()
            .args(["capture-pane", "-p", "-t", "ui"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Moves the selection (`Up`/`Down`) to the line that shows `text`, as a person would.
    async fn select(&self, text: &str) {
        for _ in 0..40 {
            let screen = self.screen();
            let selected = screen.lines().find(|l| l.starts_with("│›"));
            if selected.is_some_and(|l| l.contains(text)) {
                return;
            }
            let lines: Vec<&str> = screen.lines().collect();
            let at = |pred: &dyn Fn(&str) -> bool| lines.iter().position(|l| pred(l));
            let (Some(now), Some(want)) = (at(&|l| l.starts_with("│›")), at(&|l| l.contains(text)))
            else {
                panic!("no line shows {text:?}:\n{screen}");
            };
            self.send(&[if want > now { "Down" } else { "Up" }]);
            self.wait(&format!("the selection to move toward {text:?}"), |s| {
                s != screen
            })
            .await;
        }
        panic!("could not select {text:?}:\n{}", self.screen());
    }

    /// Waits until the screen shows what `pred` looks for; fails with the screen.
    async fn wait(&self, what: &str, pred: impl Fn(&str) -> bool) -> String {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
        loop {
            let screen = self.screen();
            if pred(&screen) {
                return screen;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the dashboard never showed {what}; the screen:\n{screen}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd().arg("kill-server").status();
    }
}

/// A member that says what it does, asks to write `notes.txt`, waits for the answer and, when
/// allowed, writes and commits it.
const ASKER: &str = r#"#!/bin/sh
field() { sed -n "s/.*\"$1\": \"\([^\"]*\)\".*/\1/p" | head -1; }
echo "asking to write notes.txt"
R=$(troupe call request_permission "{\"tool_name\":\"write_file\",\"input\":{\"content\":\"hi\"},\"file_path\":\"$PWD/notes.txt\",\"start_line\":1,\"end_line\":1,\"diff\":\"+hi\",\"wait_ms\":60000}")
A=$(echo "$R" | field approval_id)
S=$(echo "$R" | field status)
while [ "$S" = pending ]; do
  S=$(troupe call request_permission "{\"approval_id\":\"$A\",\"wait_ms\":60000}" | field status)
done
echo "the answer: $S"
if [ "$S" = approved ]; then
  echo "hello from the dashboard test" > notes.txt
  git add notes.txt && git -c user.name=t -c user.email=t@t commit -qm "notes"
fi
troupe call complete "{\"output\":\"$S\"}" >/dev/null
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(troupe_test_tools),
    ignore = "drives a real tool scripts/test installs: run with TROUPE_TEST_TOOLS=1"
)]
async fn the_person_follows_a_party_and_answers_its_approval_from_the_dashboard() {
    let mut d = TestDaemon::start();
    let c = d.client().await;
    let dir = d.dir.path().to_path_buf();
    let project = repo(&dir.join("proj"));
    // The person answers the member's write in its checkout (the box would let it through).
    asks_for_in_box_requests(&project);
    let asker = executable(&dir, "asker.sh", ASKER);
    let after = executable(
        &dir,
        "after.sh",
        "#!/bin/sh\necho 'checking the notes'\ntroupe call complete '{\"output\":\"checked\"}' >/dev/null\n",
    );
    for (name, cmd) in [("asker", &asker), ("checker", &after)] {
        define(
            &c,
            "agent",
            json!({ "name": name, "command": [cmd], "isolation": "worktree" }),
        )
        .await;
    }
    define(
        &c,
        "party",
        json!({ "name": "notes", "roles": {
            "writer": { "agent": "asker" },
            "check": { "agent": "checker" },
        }, "flow": { "check": ["writer"] } }),
    )
    .await;

    let ui = format!(
        "TROUPE_RUNTIME_DIR='{}' '{BIN}' --data-dir '{}' ui",
        d.layout.runtime_dir.display(),
        d.layout.data_dir.display()
    );
    let tmux = Tmux::start(&dir, &project, &ui);
    let first = tmux
        .wait("the empty dashboard, connected", |s| {
            s.contains("● connected") && s.contains("Parties (0)")
        })
        .await;
    assert!(first.contains("nothing is waiting for you"), "{first}");

    // A party launched shows up, its member's request waits in the inbox.
    let party = launch(&c, "notes", &project).await;
    let screen = tmux
        .wait("the party and the approval", |s| {
            s.contains("notes running") && s.contains("Inbox (1)") && s.contains("approval")
        })
        .await;
    assert!(screen.contains("writer [asker] running 0/1"), "{screen}");
    assert!(screen.contains("check [checker]"), "{screen}");

    // The member's live output: the writer's row, `o`.
    tmux.select("writer [asker]").await;
    tmux.send(&["o"]);
    tmux.wait("the writer's output", |s| {
        s.contains("Output: writer#0") && s.contains("asking to write notes.txt")
    })
    .await;

    // To the inbox: the item whole, then approved with `a`.
    tmux.send(&["Tab"]);
    let item = tmux
        .wait("the item's answers", |s| {
            s.contains("answers: 1 approve  2 deny")
        })
        .await;
    assert!(item.contains("write_file"), "{item}");
    tmux.send(&["a"]);
    let done = tmux
        .wait("the party completed", |s| {
            s.contains("notes completed") && s.contains("Inbox (0)")
        })
        .await;
    assert!(done.contains("check [checker] completed 1/1"), "{done}");
    let status = c
        .call("get_party_status", json!({ "party_id": party }))
        .await
        .unwrap();
    let writer = crate::support::item(&status, "members", "role", "writer");
    assert_eq!(writer["output"], "approved", "{status:#}");
    let approvals = c
        .call("list_approvals", json!({ "status": "approved" }))
        .await
        .unwrap();
    assert_eq!(
        approvals["approvals"][0]["decided_by"], "cli",
        "the dashboard decides as the person: {approvals:#}"
    );

    // The writer's diff: back to the parties, its row, `v`.
    tmux.send(&["Tab"]);
    tmux.select("writer [asker]").await;
    tmux.send(&["v"]);
    tmux.wait("the writer's diff", |s| {
        s.contains("Diff: writer#0") && s.contains("+hello from the dashboard test")
    })
    .await;

    // The daemon goes away and comes back: the dashboard says so, reconnects, and shows what
    // happened meanwhile.
    d.kill9();
    tmux.wait("the lost connection", |s| s.contains("○ reconnecting"))
        .await;
    d.spawn();
    tmux.wait("the connection back", |s| s.contains("● connected"))
        .await;
    let c = d.client().await;
    launch(&c, "notes", &project).await;
    tmux.wait("the second party", |s| {
        s.contains("Parties (2)") && s.contains("Inbox (1)")
    })
    .await;

    // `q` quits; the terminal is given back.
    tmux.send(&["q"]);
    tmux.wait("the dashboard gone", |s| s.contains("[exited 0]"))
        .await;
}
