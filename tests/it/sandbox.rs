//! The hostile-member suite: members of a worktree party, with no Troupe call at all, try to
//! leave their box — write the person's checkout and home, commit onto `main`, write
//! `.git/hooks` and `.git/config`, delete an object, read each secret, read the token and
//! another member's checkout, reach a loopback service and a host not on their list, signal
//! other processes, write the shared `/tmp` — under each layer (bubblewrap, and Landlock where
//! bubblewrap is not used). Every attempt must fail, nothing of the person's may change (a
//! digest of the main checkout, its refs and objects, and a fake `$HOME`, before and after), a
//! refused connection is on the timeline, a new host reaches the person's inbox, and the
//! members' own work still lands. Each kind of member tries every item: a process member runs
//! the attempts itself, an ACP agent (the scripted one) runs them in a terminal it asks the
//! daemon for (`terminal/create`), and an executor (a wasm plugin driven by a mock model) runs
//! them with `run_command`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::mock_llm::{MockLlm, Reply, convo};
use crate::support::*;

/// The secrets planted in the fake home, each of which a member tries to read.
const SECRETS: &[&str] = &[
    ".ssh/id_ed25519",
    ".aws/credentials",
    ".azure/accessTokens.json",
    ".config/gcloud/credentials.db",
    ".kube/config",
    ".docker/config.json",
    ".netrc",
    ".git-credentials",
    ".config/gh/hosts.yml",
    ".gnupg/private-keys-v1.d/key",
    ".bash_history",
    ".password-store/bank.gpg",
    ".mozilla/firefox/profile/logins.json",
    ".claude/.credentials.json",
    ".codex/auth.json",
    ".gemini/oauth_creds.json",
];

/// What each member tries (every line prints `HELD <what>` or `ESCAPED <what>`), then its
/// own work, committed on its branch.
const HOSTILE: &str = r#"#!/bin/sh
try() { name="$1"; shift; if ( "$@" ) >/dev/null 2>&1; then echo "ESCAPED $name"; else echo "HELD $name"; fi; }
P="$PERSON_PROJECT"; H="$HOME"
SIBLING="${TROUPE_WORKDIR%-*}-$((1 - TROUPE_INSTANCE))"
# Its own work first (inside the box, as it should), so that a push has a commit to carry.
echo "work of $TROUPE_INSTANCE" > "work-$TROUPE_INSTANCE.txt"
echo tmp > "$TMPDIR/own" && cat "$TMPDIR/own" > /dev/null && echo "OWN tmp"
git add . && git -c user.name=m -c user.email=m@m commit -qm "work $TROUPE_INSTANCE" && echo "OWN commit"
try write-main-checkout sh -c "echo pwned > '$P/pwned.txt'"
try edit-main-checkout sh -c "echo pwned >> '$P/README.md'"
try commit-on-main git -C "$P" -c user.name=x -c user.email=x@x commit --allow-empty -qm pwned
try move-main sh -c "git -C '$P' update-ref refs/heads/main \$(git -C '$P' rev-parse HEAD)"
try new-branch git -C "$P" branch pwned
try write-hook sh -c "echo 'echo pwned' > '$P/.git/hooks/pre-commit' && chmod +x '$P/.git/hooks/pre-commit'"
try write-git-config git -C "$P" config core.hooksPath /tmp/pwned
try write-info sh -c "echo '*' >> '$P/.git/info/exclude'"
try delete-object sh -c "f=\$(find '$P/.git/objects' -type f | head -1); [ -n \"\$f\" ] && rm -f \"\$f\" && [ ! -e \"\$f\" ]"
try prune-objects sh -c "git -C '$P' gc --prune=now -q && false || [ \$? = 0 ]"
try push-main git push -q origin HEAD:main
try push-new-branch git push -q origin HEAD:refs/heads/pwned
try append-bashrc sh -c "echo 'echo pwned' >> '$H/.bashrc'"
try append-profile sh -c "echo 'echo pwned' >> '$H/.profile'"
try new-home-file sh -c "echo pwned > '$H/pwned'"
try write-config-dir sh -c "mkdir -p '$H/.config/autostart' && echo x > '$H/.config/autostart/pwned.desktop'"
for s in $SECRETS; do try "read-$s" sh -c "cat '$H/$s' | grep -q SECRET"; done
try read-token sh -c "cat '$TROUPE_HOME/token' | grep -q ."
try read-database sh -c "head -c 16 '$TROUPE_HOME/troupe.db' | grep -q SQLite"
try read-run-key sh -c "head -c 1 '$TROUPE_HOME/run.key' | wc -c | grep -q 1"
try list-data-dir sh -c "ls '$TROUPE_HOME' | grep -q troupe.db"
try read-sibling sh -c "ls '$SIBLING' | grep -q ."
try write-sibling sh -c "echo x > '$SIBLING/pwned'"
try loopback-port python3 -c "import socket; socket.create_connection(('127.0.0.1', $LOOPBACK_PORT), 3)"
try loopback-by-name python3 -c "import socket; socket.create_connection(('localhost', $LOOPBACK_PORT), 3)"
try direct-internet python3 -c "import socket; socket.create_connection(('1.1.1.1', 443), 3)"
try proxy-to-loopback env NO_PROXY= no_proxy= python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$LOOPBACK_PORT/', timeout=10)"
try proxy-unlisted python3 -c "import urllib.request; urllib.request.urlopen('http://unlisted.invalid/', timeout=60)"
try signal-daemon kill -0 "$DAEMON_PID"
try signal-outsider kill -0 "$OUTSIDER_PID"
# The shared /tmp: a write lands in the box's own /tmp at most (the test looks on the host).
echo pwned > "/tmp/troupe-hostile-$MARK" 2>/dev/null; echo "TRIED shared-tmp"
try ssh-agent sh -c "test -n \"\$SSH_AUTH_SOCK\""
try unmount-a-secret sh -c "umount '$H/.ssh' 2>/dev/null; cat '$H/.ssh/id_ed25519' | grep -q SECRET"
try remount-root-writable sh -c "mount -o remount,rw,bind / 2>/dev/null; touch /usr/troupe-pwned-$MARK && rm -f /usr/troupe-pwned-$MARK"
try swap-box-tmp-for-root sh -c "B=\$(dirname \"\$XDG_CACHE_HOME\"); [ -n \"\$XDG_CACHE_HOME\" ] && mv \"\$B/tmp\" \"\$B/t0\" && ln -s / \"\$B/tmp\""
try type-into-a-terminal python3 -c "import fcntl,termios; f=open('/dev/tty','w'); fcntl.ioctl(f, termios.TIOCSTI, b'x')"
try raw-socket python3 -c "import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, 1)"
# Landlock does not confine Unix sockets (docs/security.md): only bubblewrap's box is tried.
if [ "$TROUPE_SANDBOX" = landlock ]; then echo "HELD host-sockets-in-run (not a Landlock boundary)"; else
try host-sockets-in-run sh -c "find /run -type s 2>/dev/null | grep -v troupe | grep -q ."
fi
try other-vendors-key sh -c "test -n \"\$OPENAI_API_KEY\$GITHUB_TOKEN\""
# A process member completes its run itself; an ACP agent or an executor (COMPLETE=no) does
# after reading what this printed.
[ "$COMPLETE" = no ] || troupe call complete '{"output":"tried"}' > /dev/null
"#;

/// The `try` lines of `HOSTILE` each member runs (one per secret among them).
const ATTEMPTS: usize = 37 + SECRETS.len();

/// Who runs `HOSTILE` in a member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A process member: the script is its command.
    Process,
    /// The scripted ACP agent: runs the script in a terminal (`terminal/create`) and ends its
    /// turn saying what the terminal printed.
    AcpTerminal,
    /// An executor (`wasm:executor-openai`) whose mock model asks for `run_command` of the
    /// script, then completes with the command's output.
    ExecutorCommand,
}

/// A digest of what the person owns: the main checkout's files, its refs, its objects, its git
/// config and hooks, and the fake home.
fn digest(project: &Path, home: &Path) -> BTreeMap<String, String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>, label: &str) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            let rel = format!("{label}/{}", p.strip_prefix(root).unwrap().display());
            if p.is_dir() && !p.is_symlink() {
                out.insert(rel, "dir".into());
                walk(root, &p, out, label);
            } else {
                let bytes = std::fs::read(&p).unwrap_or_default();
                out.insert(rel, format!("{:x}", md5ish(&bytes)));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(project, project, &mut out, "project");
    walk(home, home, &mut out, "home");
    out
}

/// A cheap content fingerprint (FNV-1a 64).
fn md5ish(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x100000001b3)
    })
}

fn plant_home(home: &Path) {
    for s in SECRETS {
        let p = home.join(s);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, format!("SECRET {s}\n")).unwrap();
    }
    std::fs::write(home.join(".bashrc"), "# the person's rc\n").unwrap();
    std::fs::write(home.join(".profile"), "# the person's profile\n").unwrap();
}

/// One hostile party of two members of `kind` under the given layer; returns each member's
/// lines.
async fn hostile_party(layer: &str, kind: Kind) -> Vec<String> {
    let home_dir = tempfile::Builder::new()
        .prefix("troupe-home-")
        .tempdir()
        .unwrap();
    let home = home_dir.path().canonicalize().unwrap();
    plant_home(&home);
    let d = TestDaemon::start_with_env(
        &[],
        &[
            ("HOME", home.to_str().unwrap()),
            ("TROUPE_SANDBOX_LAYER", layer),
            // What the person's shell may hold: no member gets another vendor's key or a forge
            // token it was not given.
            ("OPENAI_API_KEY", "sk-person-openai"),
            ("GITHUB_TOKEN", "ghp-person"),
        ],
    );
    let c = d.client().await;
    let status = c.call("daemon_status", json!({})).await.unwrap();
    assert_eq!(status["sandbox_layer"], layer, "{status}");

    let project = repo(&d.dir.path().join("project"));
    let project_path = PathBuf::from(&project).canonicalize().unwrap();
    // A service on the person's loopback, and a process of theirs outside the box.
    let service = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = service.local_addr().unwrap().port();
    let mut outsider = std::process::Command::new("sleep")
        .arg("300")
        .spawn()
        .unwrap();
    let mark = format!("{}-{layer}-{kind:?}", std::process::id());
    let before = digest(&project_path, &home);
    let refs_before = git(&project_path, &["for-each-ref"]);

    let script = executable(d.dir.path(), "hostile.sh", HOSTILE);
    let data = d.layout.data_dir.canonicalize().unwrap();
    // The other instance's checkout (the party's label is the party's name).
    let mut env = json!({
        "PERSON_PROJECT": project_path.display().to_string(),
        "SECRETS": SECRETS.join(" "),
        "LOOPBACK_PORT": port.to_string(),
        "DAEMON_PID": d.pid().to_string(),
        "OUTSIDER_PID": outsider.id().to_string(),
        "MARK": mark,
        "PATH": member_path(),
    });
    // The executor's model; kept until the party ends.
    let mut mock = None;
    let agent = match kind {
        Kind::Process => json!({
            "name": "hostile", "command": [script], "isolation": "worktree", "env": env,
            "approval_timeout_secs": 60,
        }),
        Kind::AcpTerminal => {
            // The terminal gets the agent's environment (its run's, with the variables above),
            // and the agent, not the script, ends the run.
            // The terminal's command is the agent's to name, so the box shows it nothing of the
            // host's /tmp: the script lies in a folder the person gave the agent.
            let tools = d.dir.path().join("tools");
            std::fs::create_dir_all(&tools).unwrap();
            let script = executable(&tools, "hostile.sh", HOSTILE);
            env["TROUPE_ACP_SCRIPT"] = json!("terminal");
            env["TROUPE_ACP_TERMINAL_COMMAND"] = json!(script);
            env["COMPLETE"] = json!("no");
            json!({
                "name": "hostile", "runner": "acp:scripted",
                "command": [DEV_BIN, "scripted-acp-agent"], "isolation": "worktree", "env": env,
                "sandbox": { "writable": [tools.display().to_string()] },
                "acp": { "auth_method": "gateway", "base_url": "http://127.0.0.1:9/anthropic" },
                "approval_timeout_secs": 60,
            })
        }
        Kind::ExecutorCommand => {
            // An executor's command gets the daemon's environment (the fake home) and no run
            // variables: the command sets the script's, its checkout's instance read from the
            // checkout's name (`…-<instance>`, as `SIBLING` assumes), and the data dir named for
            // the attempts on it. The script itself is the command (the box shows the command
            // nothing of the host's /tmp, where the test's file lies).
            crate::plugins::install(&d, "executor-openai").await;
            let mut vars: Vec<String> = env
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| format!("{k}='{}'", v.as_str().unwrap()))
                .collect();
            vars.push(format!("TROUPE_HOME='{}'", d.layout.data_dir.display()));
            vars.push("COMPLETE=no".into());
            vars.push(r#"TROUPE_WORKDIR="$PWD" TROUPE_INSTANCE="${PWD##*-}""#.into());
            let command = format!("export {}\n{HOSTILE}", vars.join(" "));
            let model = MockLlm::start(Vec::new());
            // Its first turn runs the script (longer than a command's default minute: the
            // unlisted host waits for the person); the next completes with what it printed.
            model.think(std::sync::Arc::new(move |seen: &convo::Convo| {
                let printed = seen.items.iter().rev().find_map(|i| match i {
                    convo::Item::Result { text } => Some(text.clone()),
                    _ => None,
                });
                match printed {
                    None => Reply::tool(
                        "run_command",
                        json!({ "command": command, "timeout_secs": 300 }),
                    ),
                    Some(text) => Reply::tool("complete", json!({ "summary": text })),
                }
            }));
            crate::plugins::grant_mock(&c, "executor-openai", &model, "/v1").await;
            mock = Some(model);
            json!({
                "name": "hostile", "runner": "wasm:executor-openai", "model": "mock-gpt",
                "isolation": "worktree", "approval_timeout_secs": 60,
            })
        }
    };
    define(&c, "agent", agent).await;
    define(
        &c,
        "party",
        json!({ "name": "hostile-party", "roles": { "dev": { "agent": "hostile", "count": 2 } } }),
    )
    .await;
    let party = launch(&c, "hostile-party", &project).await;
    // The unlisted host reaches the person's inbox as a network request: they deny it. An
    // executor's command may wait for the person too (a shell command needs approval): they
    // let it run.
    let denied = std::sync::atomic::AtomicUsize::new(0);
    let status = wait_for("the hostile party's end", 240, || async {
        for a in pending(&c, &party).await {
            if a["tool_name"] == "network" {
                assert!(
                    a["subject"]
                        .as_str()
                        .unwrap_or("")
                        .contains("unlisted.invalid"),
                    "{a}"
                );
                decide(&c, &a, json!({ "decision": "deny" })).await;
                denied.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            } else {
                assert!(
                    kind == Kind::ExecutorCommand && a["tool_name"] == "run_command",
                    "{kind:?} asked for {a}"
                );
                decide(&c, &a, json!({ "decision": "approve" })).await;
            }
        }
        ended(&c, &party).await
    })
    .await;
    let denied = denied.into_inner();
    assert_eq!(status["party"]["status"], "completed", "{status}");
    assert_eq!(denied, 2, "each member's new host asked the person once");

    // Each member's lines: a process member's from its run log; an ACP agent's and an
    // executor's from its result (what the terminal printed, what the command returned).
    let mut lines = Vec::new();
    for m in status["members"].as_array().unwrap() {
        let run = m["run_id"].as_str().unwrap();
        let text = if kind == Kind::Process {
            let log = c
                .call("get_run_log", json!({ "run_id": run }))
                .await
                .unwrap();
            log["text"].as_str().unwrap_or("").to_string()
        } else {
            let r = c
                .call("get_agent_result", json!({ "run_id": run }))
                .await
                .unwrap();
            r["run"]["result"]["output"]
                .as_str()
                .unwrap_or("")
                .to_string()
        };
        assert!(
            text.contains("OWN commit") && text.contains("OWN tmp"),
            "its own work is done in the box:\n{text}"
        );
        let tried = text
            .lines()
            .filter(|l| l.starts_with("HELD ") || l.starts_with("ESCAPED "))
            .count();
        assert_eq!(tried, ATTEMPTS, "every attempt ran:\n{text}");
        lines.extend(text.lines().map(String::from));
    }
    let escaped: Vec<&String> = lines.iter().filter(|l| l.starts_with("ESCAPED")).collect();
    let held = lines.iter().filter(|l| l.starts_with("HELD")).count();
    assert!(
        escaped.is_empty(),
        "escapes under {layer} ({kind:?}): {escaped:#?}"
    );
    assert!(
        held >= 2 * ATTEMPTS,
        "every attempt ran: {held} held\n{lines:#?}"
    );
    if let Some(mock) = &mock {
        // What the command printed is what the model was told.
        let told = mock
            .requests()
            .iter()
            .filter(|r| r.body_text.contains("OWN commit"))
            .count();
        assert!(
            told >= 2,
            "the command's output reached the model {told} times"
        );
    }

    // Nothing of the person's changed; the shared /tmp holds nothing of theirs.
    // The daemon (not a member) brings each member's branch over as `troupe/<party>/…`, with
    // its objects, and writes its mirror of the party (`.troupe/agents.jsonl`, git-ignored);
    // git's own bookkeeping (the index's stat cache, FETCH_HEAD) may change; nothing else may.
    let daemons = |k: &str| {
        [
            "project/.git/objects/",
            "project/.git/refs/heads/troupe",
            "project/.git/logs/refs/heads/troupe",
            "project/.git/logs",
            "project/.troupe",
        ]
        .iter()
        .any(|p| k.starts_with(p))
            || [
                "project/.git/FETCH_HEAD",
                "project/.git/index",
                "project/.git/refs/heads",
            ]
            .contains(&k)
    };
    let theirs = |refs: &str| {
        refs.lines()
            .filter(|l| !l.contains("refs/heads/troupe/"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let refs_after = git(&project_path, &["for-each-ref"]);
    assert_eq!(
        theirs(&refs_after),
        theirs(&refs_before),
        "the person's refs moved"
    );
    let after = digest(&project_path, &home);
    let changed: Vec<_> = before
        .iter()
        .filter(|(k, v)| after.get(*k) != Some(*v) && !(daemons(k) && after.contains_key(*k)))
        .map(|(k, _)| k.clone())
        .chain(
            after
                .keys()
                .filter(|k| !before.contains_key(*k) && !daemons(k))
                .cloned(),
        )
        .collect();
    assert!(
        changed.is_empty(),
        "the person's files changed: {changed:?}"
    );
    assert!(!Path::new(&format!("/tmp/troupe-hostile-{mark}")).exists());
    outsider.kill().unwrap();
    outsider.wait().unwrap();
    assert!(data.join("token").exists());

    // Each refused connection is on the timeline.
    let events = c
        .call(
            "list_events",
            json!({ "party_id": party, "kind": "egress_refused", "limit": 100 }),
        )
        .await
        .unwrap();
    let refused = events["events"].as_array().unwrap();
    assert!(
        refused.iter().any(|e| e["data"]["target"]
            .as_str()
            .is_some_and(|t| t.contains("unlisted.invalid"))),
        "{refused:#?}"
    );
    assert!(
        refused
            .iter()
            .any(|e| e["data"]["target"] == format!("127.0.0.1:{port}")),
        "{refused:#?}"
    );

    // The members' own commits are found by landing's measure.
    let trees = c
        .call("list_worktrees", json!({ "party_id": party }))
        .await
        .unwrap();
    for w in trees["worktrees"].as_array().unwrap() {
        assert!(
            w["ahead"].as_i64().unwrap_or(0) >= 1,
            "a member's commit was lost: {w}"
        );
    }
    drop(service);
    drop(mock);
    lines
}

/// A member's PATH: the system's and this build's `troupe`, nothing of the test machine's.
fn member_path() -> String {
    format!(
        "/usr/bin:/bin:{}",
        Path::new(BIN).parent().unwrap().display()
    )
}

/// `party`'s pending requests.
async fn pending(c: &troupe::client::Client, party: &str) -> Vec<Value> {
    let r = c
        .call(
            "list_approvals",
            json!({ "status": "pending", "party_id": party }),
        )
        .await
        .unwrap();
    r["approvals"].as_array().unwrap().clone()
}

/// Decides request `a` with `decision` (its `decision` field and any other).
async fn decide(c: &troupe::client::Client, a: &Value, mut decision: Value) {
    decision["approval_id"] = a["approval_id"].clone();
    c.call("decide_approval", decision).await.unwrap();
}

/// The status of `party` once it is no longer running.
async fn ended(c: &troupe::client::Client, party: &str) -> Option<Value> {
    let s = c
        .call("get_party_status", json!({ "party_id": party }))
        .await
        .unwrap();
    (s["party"]["status"] != "running").then_some(s)
}

/// One hostile test per member kind and layer.
macro_rules! hostile_test {
    ($(#[$doc:meta])* $name:ident, $layer:literal, $kind:expr) => {
        $(#[$doc])*
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        #[cfg_attr(
            not(troupe_test_tools),
            ignore = "drives a real tool scripts/test installs: run with TROUPE_TEST_TOOLS=1"
        )]
        async fn $name() {
            hostile_party($layer, $kind).await;
        }
    };
}

hostile_test!(
    hostile_members_cannot_leave_the_bubblewrap_box,
    "bubblewrap",
    Kind::Process
);
hostile_test!(
    hostile_members_cannot_leave_the_landlock_box,
    "landlock",
    Kind::Process
);
hostile_test!(
    /// An ACP agent runs the attempts in a terminal it asks the daemon for.
    an_acp_agents_terminal_cannot_leave_the_bubblewrap_box,
    "bubblewrap",
    Kind::AcpTerminal
);
hostile_test!(
    an_acp_agents_terminal_cannot_leave_the_landlock_box,
    "landlock",
    Kind::AcpTerminal
);
hostile_test!(
    /// An executor's model has it run the attempts with `run_command`.
    an_executors_commands_cannot_leave_the_bubblewrap_box,
    "bubblewrap",
    Kind::ExecutorCommand
);
hostile_test!(
    an_executors_commands_cannot_leave_the_landlock_box,
    "landlock",
    Kind::ExecutorCommand
);

/// A listed loopback service (a local model server) is reached through the box's relay and the
/// daemon's proxy, by its own address (a client that ignores proxy variables) and through the
/// proxy variables.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(troupe_test_tools),
    ignore = "drives a real tool scripts/test installs: run with TROUPE_TEST_TOOLS=1"
)]
async fn a_listed_loopback_service_is_reached_through_the_proxy() {
    let d = TestDaemon::start();
    let c = d.client().await;
    let project = repo(&d.dir.path().join("project"));
    let port = hello_service("127.0.0.1:0");
    let script = executable(
        d.dir.path(),
        "reach.sh",
        r#"#!/bin/sh
direct=$(python3 -c "import http.client; c=http.client.HTTPConnection('127.0.0.1', $PORT, timeout=10); c.request('GET','/'); print(c.getresponse().read().decode())")
proxied=$(NO_PROXY= no_proxy= python3 -c "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:$PORT/', timeout=10).read().decode())")
troupe call complete "{\"output\":\"direct=$direct proxied=$proxied\"}" > /dev/null
"#,
    );
    define(
        &c,
        "agent",
        json!({ "name": "reach", "command": [script], "isolation": "worktree",
                "env": { "PORT": port.to_string(), "PATH": member_path() },
                "sandbox": { "allow_hosts": [format!("127.0.0.1:{port}")] } }),
    )
    .await;
    define(
        &c,
        "party",
        json!({ "name": "reach-party", "roles": { "dev": { "agent": "reach" } } }),
    )
    .await;
    let party = launch(&c, "reach-party", &project).await;
    let s = wait_for("the party's end", 120, || ended(&c, &party)).await;
    let out: Value = s["members"][0]["output"].clone();
    assert_eq!(s["party"]["status"], "completed", "{s}");
    let text = out
        .as_str()
        .map(String::from)
        .unwrap_or_else(|| out.to_string());
    assert!(
        text.contains("direct=hello") && text.contains("proxied=hello"),
        "{s}"
    );
}

/// A member adopted by a daemon restarted after a kill -9 keeps its box, and its network: the
/// new daemon opens the run's egress proxy again where the box's relay connects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(troupe_test_tools),
    ignore = "drives a real tool scripts/test installs: run with TROUPE_TEST_TOOLS=1"
)]
async fn an_adopted_member_reaches_its_hosts_after_a_kill_9() {
    let mut d = TestDaemon::start();
    let c = d.client().await;
    let project = repo(&d.dir.path().join("project"));
    let flags = tempfile::Builder::new()
        .prefix("troupe-flags-")
        .tempdir()
        .unwrap();
    let port = hello_service("127.0.0.1:0");
    let script = executable(
        d.dir.path(),
        "later.sh",
        r#"#!/bin/sh
touch "$FLAGS/started"
until [ -e "$FLAGS/go" ]; do sleep 0.05; done
got=$(NO_PROXY= no_proxy= python3 -c "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:$PORT/', timeout=20).read().decode())")
troupe call complete "{\"output\":\"got=$got\"}" > /dev/null
"#,
    );
    let flags_dir = flags.path().canonicalize().unwrap();
    define(
        &c,
        "agent",
        json!({ "name": "later", "command": [script], "isolation": "worktree",
                "env": { "PORT": port.to_string(), "FLAGS": flags_dir.display().to_string(),
                         "PATH": member_path() },
                "sandbox": { "allow_hosts": [format!("127.0.0.1:{port}")],
                             "writable": [flags_dir.display().to_string()] } }),
    )
    .await;
    define(
        &c,
        "party",
        json!({ "name": "later-party", "roles": { "dev": { "agent": "later" } } }),
    )
    .await;
    let party = launch(&c, "later-party", &project).await;
    wait_for("the member to start", 60, || async {
        flags_dir.join("started").exists().then_some(())
    })
    .await;
    drop(c);
    d.kill9();
    d.spawn();
    let c = d.client().await;
    std::fs::write(flags_dir.join("go"), "").unwrap();
    let s = wait_for("the party's end", 120, || async { ended(&c, &party).await }).await;
    assert_eq!(s["party"]["status"], "completed", "{s}");
    assert_eq!(s["members"][0]["output"], "got=hello", "{s}");
}

/// An HTTP service that answers every request `hello`, on `addr`; its port.
fn hello_service(addr: &str) -> u16 {
    let service = std::net::TcpListener::bind(addr).unwrap();
    let port = service.local_addr().unwrap().port();
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        for mut conn in service.incoming().flatten() {
            let mut buf = [0u8; 1024];
            if conn.read(&mut buf).is_ok() {
                // A client gone before its answer is its own business.
                conn.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
                )
                .ok();
            }
        }
    });
    port
}

/// This machine's address on its network (not loopback), as the proxy would reach a host.
fn lan_address() -> std::net::IpAddr {
    // No packet is sent: connecting a UDP socket only picks the route's source address.
    let probe = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
    probe.connect("10.255.255.255:9").unwrap();
    let ip = probe.local_addr().unwrap().ip();
    assert!(
        !ip.is_loopback() && !ip.is_unspecified(),
        "no network address here: {ip}"
    );
    ip
}

/// A host not on a member's list reaches the person's inbox; approved for the project with a
/// pattern, the next member's connection there goes through without asking.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(troupe_test_tools),
    ignore = "drives a real tool scripts/test installs: run with TROUPE_TEST_TOOLS=1"
)]
async fn a_new_host_approved_for_the_project_is_not_asked_again() {
    let d = TestDaemon::start();
    let c = d.client().await;
    let project = repo(&d.dir.path().join("project"));
    let target = format!("{}:{}", lan_address(), hello_service("0.0.0.0:0"));
    let script = executable(
        d.dir.path(),
        "fetch.sh",
        r#"#!/bin/sh
got=$(python3 -c "import urllib.request; print(urllib.request.urlopen('http://$TARGET/', timeout=60).read().decode())")
troupe call complete "{\"output\":\"got=$got\"}" > /dev/null
"#,
    );
    define(
        &c,
        "agent",
        json!({ "name": "fetch", "command": [script], "isolation": "worktree",
                "env": { "TARGET": &target,
                         "PATH": member_path() } }),
    )
    .await;
    define(
        &c,
        "party",
        json!({ "name": "fetch-party", "roles": { "dev": { "agent": "fetch" } } }),
    )
    .await;
    for round in ["asked", "known"] {
        let party = launch(&c, "fetch-party", &project).await;
        let s = wait_for("the party's end", 120, || async {
            for a in pending(&c, &party).await {
                assert_eq!(round, "asked", "asked again: {a}");
                assert_eq!(a["tool_name"], "network", "{a}");
                assert_eq!(a["subject"], target.as_str(), "{a}");
                decide(
                    &c,
                    &a,
                    json!({ "decision": "approve_pattern", "scope": "project" }),
                )
                .await;
            }
            ended(&c, &party).await
        })
        .await;
        assert_eq!(s["party"]["status"], "completed", "{round}: {s}");
        assert_eq!(s["members"][0]["output"], "got=hello", "{round}: {s}");
        let all = c
            .call("list_approvals", json!({ "party_id": &party }))
            .await
            .unwrap();
        let asked = all["approvals"].as_array().unwrap();
        assert_eq!(asked.len(), 1, "{round}: {all}");
        match round {
            "asked" => assert_eq!(asked[0]["decision"], "approve_pattern", "{all}"),
            _ => assert!(
                asked[0]["rule_id"].is_string(),
                "answered by the rule: {all}"
            ),
        }
    }
}
