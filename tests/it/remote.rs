//! Remote workers over NATS JetStream, with a real `nats-server` (Debian's, started here on
//! loopback with its own store): a hub (`troupe serve --nats`) and `troupe worker`s on their own
//! data dirs. A party with one local and two remote members completes, a remote member's
//! permission request is decided at the hub, and the remote members' commits come back as
//! branches the merge queue lands; a worker killed with -9 mid-run loses its lease and the member
//! is restarted on the other worker, and the killed worker, started again, ends what it left
//! running; a pool without a worker keeps its run queued until the run's timeout; an unreachable
//! NATS is a clear error at start. Over TLS with a user per pool (`SecureNats`), a pool's user
//! may publish only on its own pool's subjects, and the hub takes a call or an exit about a run
//! only from the worker of its pool holding it.

use std::io::{BufRead, BufReader, Read};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use troupe::client::Client;
use troupe::remote::CallReply;

use crate::support::{BIN, TestDaemon, define, executable, party_end, repo, wait_for};

/// Lease lifetime in these tests (seconds): short, so a lost worker is noticed quickly.
const LEASE_SECS: &str = "3";

fn nats_server_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("TROUPE_TEST_NATS_SERVER") {
        return PathBuf::from(p);
    }
    for dir in std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/bin")])
    {
        if dir.join("nats-server").is_file() {
            return dir.join("nats-server");
        }
    }
    panic!("nats-server is missing: scripts/test installs it (Debian package nats-server)");
}

/// A nats-server with JetStream on a free loopback port, its store in `dir`; killed on drop.
pub(crate) struct Nats {
    child: Child,
    pub(crate) url: String,
    port: u16,
    dir: PathBuf,
}

impl Nats {
    pub(crate) fn start(dir: &Path) -> Nats {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        Self::start_on(dir, port)
    }

    /// kill -9, then a new server on the same port and store.
    fn kill9_and_restart(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
        let again = Self::start_on(&self.dir, self.port);
        let old = std::mem::replace(self, again);
        std::mem::forget(old); // its process is reaped already
    }

    fn start_on(dir: &Path, port: u16) -> Nats {
        let child = Command::new(nats_server_bin())
            .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nats-server starts");
        // Ready when it greets a connection with JetStream on.
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
                let mut buf = [0u8; 512];
                s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
                if let Ok(n) = s.read(&mut buf)
                    && String::from_utf8_lossy(&buf[..n]).contains("\"jetstream\":true")
                {
                    break;
                }
            }
            assert!(Instant::now() < deadline, "nats-server did not start");
            std::thread::sleep(Duration::from_millis(10));
        }
        Nats {
            child,
            url: format!("nats://127.0.0.1:{port}"),
            port,
            dir: dir.to_path_buf(),
        }
    }
}

impl Drop for Nats {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A `troupe worker` on its own data dir; killed on drop.
pub(crate) struct Worker {
    child: Option<Child>,
    /// What it logged (also copied to the test's stderr).
    log: Arc<Mutex<String>>,
}

impl Worker {
    fn start(data: &Path, nats: &str, pool: &str, name: &str) -> Worker {
        Self::start_with_slots(data, nats, pool, name, 1)
    }

    /// A worker that runs up to `slots` members at once.
    pub(crate) fn start_with_slots(
        data: &Path,
        nats: &str,
        pool: &str,
        name: &str,
        slots: usize,
    ) -> Worker {
        let slots = slots.to_string();
        let mut child = Command::new(BIN)
            .arg("--data-dir")
            .arg(data)
            .args([
                "worker", "--nats", nats, "--pool", pool, "--name", name, "--slots", &slots,
            ])
            .env("TROUPE_RUNTIME_DIR", data.join("run"))
            .env("TROUPE_LEASE_SECS", LEASE_SECS)
            .env("TROUPE_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .unwrap();
        // Ready once it says so; the rest of its log is drained to the test's stderr.
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        loop {
            let line = lines
                .next()
                .unwrap_or_else(|| panic!("worker {name} exited before it was ready"))
                .unwrap();
            eprintln!("[{name}] {line}");
            if line.contains("ready for pool") {
                break;
            }
        }
        let tag = name.to_string();
        let log = Arc::new(Mutex::new(String::new()));
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                eprintln!("[{tag}] {line}");
                let mut log = sink.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        Worker {
            child: Some(child),
            log,
        }
    }

    /// What it logged so far.
    pub(crate) fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Whether it still runs.
    pub(crate) fn running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }

    /// Kills the worker and its reaper (its process group) with -9, as a machine going down
    /// would: its members, in their own groups, outlive it.
    fn kill9_with_reaper(&mut self) {
        if let Some(mut c) = self.child.take() {
            let group = rustix::process::Pid::from_raw(c.id() as i32).unwrap();
            rustix::process::kill_process_group(group, rustix::process::Signal::KILL).unwrap();
            c.wait().unwrap();
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if let Some(c) = &self.child {
            crate::support::signal(c.id(), rustix::process::Signal::TERM);
        }
        if let Some(mut c) = self.child.take() {
            let deadline = Instant::now() + Duration::from_secs(20);
            while Instant::now() < deadline && matches!(c.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A scratch directory, a nats-server in it, a hub on that server and a client of the hub.
async fn cluster() -> (tempfile::TempDir, Nats, TestDaemon, Client) {
    let scratch = tempfile::tempdir().unwrap();
    let nats = Nats::start(&scratch.path().join("nats"));
    let d = hub(&nats);
    let c = d.client().await;
    (scratch, nats, d, c)
}

/// Waits (`secs` at most) until the process group `pgid` has no process left.
async fn gone(what: &str, pgid: i32, secs: u64) {
    wait_for(what, secs, || async {
        (!crate::support::group_alive(pgid)).then_some(())
    })
    .await
}

pub(crate) fn hub(nats: &Nats) -> TestDaemon {
    TestDaemon::start_with_env(&["--nats", &nats.url], &[("TROUPE_LEASE_SECS", LEASE_SECS)])
}

async fn events(c: &Client, kind: &str) -> Vec<Value> {
    let r = c
        .call("list_events", json!({ "kind": kind, "limit": 1000 }))
        .await
        .unwrap();
    r["events"].as_array().unwrap().clone()
}

/// One remote member in pool `gpu` (its program `body`, restarted on a crash, twice at most)
/// as the only role of a party launched in a new repository under `dir`; the party's id.
async fn one_remote_member(c: &Client, dir: &Path, body: &str, env: Value) -> String {
    let project = repo(&dir.join("proj"));
    let script = executable(dir, "member.sh", body);
    define(
        c,
        "agent",
        json!({ "name": "member", "command": [script], "pool": "gpu", "isolation": "worktree",
                "timeout_secs": 300, "env": env }),
    )
    .await;
    define(
        c,
        "party",
        json!({ "name": "one", "roles": { "member": { "agent": "member",
                "on_crash": "restart", "retry_attempts": 2 } } }),
    )
    .await;
    crate::support::launch(c, "one", &project).await
}

/// The process group of the member running on the worker whose data dir is `worker`.
async fn member_group(worker: &Path) -> i32 {
    let runs = worker.join("worker");
    wait_for("a member to run on the worker", 60, || async {
        std::fs::read_dir(&runs).ok()?.flatten().find_map(|run| {
            std::fs::read_to_string(run.path().join("pgid"))
                .ok()?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
    })
    .await
}

/// A remote member: asks permission (decided at the hub), writes its file, commits, completes.
const REMOTE_DEV: &str = r#"#!/bin/sh
set -e
field() { sed -n "s/.*\"$1\": \"\([^\"]*\)\".*/\1/p" | head -1; }
R=$(troupe call request_permission "{\"tool_name\":\"write_file\",\"input\":{\"content\":\"x\"},\"file_path\":\"$PWD/remote-$TROUPE_INSTANCE.txt\",\"wait_ms\":60000}")
S=$(echo "$R" | field status)
[ "$S" = approved ] || { troupe call complete "{\"output\":\"not allowed: $S\",\"status\":\"blocked\"}"; exit 0; }
echo "made on $TROUPE_WORKER" > "remote-$TROUPE_INSTANCE.txt"
git add -A && git -c user.name=remote -c user.email=remote@example.com commit -qm "remote $TROUPE_INSTANCE"
troupe call complete "{\"output\":\"remote $TROUPE_INSTANCE on $TROUPE_WORKER\"}" >/dev/null
"#;

const LOCAL_DEV: &str = r#"#!/bin/sh
set -e
echo local > local.txt
git add -A && git -c user.name=local -c user.email=local@example.com commit -qm local
troupe call complete '{"output":"local done"}' >/dev/null
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(troupe_test_tools),
    ignore = "drives a real tool scripts/test installs: run with TROUPE_TEST_TOOLS=1"
)]
async fn a_party_with_local_and_remote_members_lands_their_work_and_approvals_come_home() {
    let (scratch, nats, d, c) = cluster().await;
    let _w1 = Worker::start(&scratch.path().join("w1"), &nats.url, "gpu", "w1");
    let _w2 = Worker::start(&scratch.path().join("w2"), &nats.url, "gpu", "w2");
    let dir = d.dir.path();
    let project = repo(&dir.join("proj"));
    let remote = executable(dir, "remote.sh", REMOTE_DEV);
    let local = executable(dir, "local.sh", LOCAL_DEV);

    // A pool's member works in its own checkout, as a process.
    let bad = c
        .call(
            "create_agent_definition",
            json!({ "definition": { "name": "x", "command": [remote], "pool": "gpu" } }),
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(bad.contains("set isolation to worktree or clone"), "{bad}");

    // The role sends its members to the pool (the agent itself runs anywhere).
    define(
        &c,
        "agent",
        json!({ "name": "remote-dev", "command": [remote], "isolation": "worktree",
                "timeout_secs": 120 }),
    )
    .await;
    define(&c, "agent", json!({ "name": "plain", "command": ["true"] })).await;
    let bad = c
        .call(
            "create_party_definition",
            json!({ "definition": { "name": "bad", "roles": {
                "r": { "agent": "plain", "pool": "gpu" } } } }),
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(
        bad.contains("role r runs in pool \"gpu\"") && bad.contains("isolation"),
        "{bad}"
    );
    define(
        &c,
        "agent",
        json!({ "name": "local-dev", "command": [local], "isolation": "worktree",
                "timeout_secs": 120 }),
    )
    .await;
    define(
        &c,
        "agent",
        json!({ "name": "merger", "runner": "land", "land": { "strategy": "merge" },
                "timeout_secs": 120 }),
    )
    .await;
    define(
        &c,
        "party",
        json!({ "name": "far", "roles": {
            "local": { "agent": "local-dev" },
            "remote": { "agent": "remote-dev", "count": 2, "pool": "gpu" },
            "merger": { "agent": "merger" } },
            "flow": { "merger": ["local", "remote"] } }),
    )
    .await;
    let party = crate::support::launch(&c, "far", &project).await;

    // Both remote members ask; each request is decided here, at the hub.
    let mut decided = 0;
    while decided < 2 {
        let pending = wait_for("a remote member's request", 90, || async {
            let r = c
                .call(
                    "list_approvals",
                    json!({ "status": "pending", "party_id": party }),
                )
                .await
                .unwrap();
            r["approvals"].as_array().unwrap().first().cloned()
        })
        .await;
        assert_eq!(pending["role_name"], "remote", "{pending}");
        // The path is the member's checkout here, not the worker's clone: inside its worktree.
        let path = pending["file_path"].as_str().unwrap();
        assert!(
            path.starts_with(&d.layout.data_dir.display().to_string()),
            "{pending}"
        );
        assert_eq!(pending["outside_worktree"], false, "{pending}");
        c.call(
            "decide_approval",
            json!({ "approval_id": pending["approval_id"], "decision": "approve" }),
        )
        .await
        .unwrap();
        decided += 1;
    }
    let end = party_end(&c, &party, 120).await;
    assert_eq!(end["party"]["status"], "completed", "{end:#}");
    let outputs: Vec<String> = end["members"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "remote")
        .map(|m| m["output"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(outputs.len(), 2, "{end:#}");
    for (i, out) in outputs.iter().enumerate() {
        assert!(out.starts_with(&format!("remote {i} on w")), "{out}");
    }

    // The remote commits came back to their branches and landed with the local one.
    let head = |args: &[&str]| {
        let out = Command::new("git")
            .args(args)
            .current_dir(&project)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let files = head(&["ls-tree", "--name-only", "HEAD"]);
    for f in ["local.txt", "remote-0.txt", "remote-1.txt"] {
        assert!(files.lines().any(|l| l == f), "{f} landed: {files}");
    }
    let made = std::fs::read_to_string(Path::new(&project).join("remote-0.txt")).unwrap();
    assert!(made.starts_with("made on w"), "{made}");

    // The timeline says where each remote attempt went.
    let started = events(&c, "remote_started").await;
    assert_eq!(started.len(), 2, "{started:?}");
    assert_eq!(events(&c, "remote_queued").await.len(), 2);
}

/// A remote member that hangs on its first attempt and completes on the next.
const HANGS_ONCE: &str = r#"#!/bin/sh
if [ "$TROUPE_ATTEMPT" = 1 ]; then exec sleep 600; fi
troupe call complete "{\"output\":\"attempt $TROUPE_ATTEMPT on $TROUPE_WORKER\"}" >/dev/null
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(troupe_test_tools),
    ignore = "drives a real tool scripts/test installs: run with TROUPE_TEST_TOOLS=1"
)]
async fn a_worker_killed_mid_run_loses_its_lease_and_the_member_restarts_on_another() {
    let (scratch, nats, d, c) = cluster().await;
    let w1_dir = scratch.path().join("w1");
    let mut w1 = Worker::start(&w1_dir, &nats.url, "gpu", "w1");
    let party = one_remote_member(&c, d.dir.path(), HANGS_ONCE, json!({})).await;
    let pgid = member_group(&w1_dir).await;
    w1.kill9_with_reaper();
    // Its member lives on (no one of its worker was left to end it), but its lease lapses.
    assert!(
        crate::support::group_alive(pgid),
        "the orphaned member still runs"
    );
    let _w2 = Worker::start(&scratch.path().join("w2"), &nats.url, "gpu", "w2");
    let end = party_end(&c, &party, 120).await;
    assert_eq!(end["party"]["status"], "completed", "{end:#}");
    let m = &end["members"][0];
    assert_eq!(m["output"], "attempt 2 on w2", "{end:#}");
    let lapsed = events(&c, "remote_lease_lapsed").await;
    assert_eq!(lapsed.len(), 1, "{lapsed:?}");
    assert_eq!(lapsed[0]["data"]["worker"], "w1");
    // w1 comes back: it ends the attempt it left running, which no longer holds a lease.
    let _w1 = Worker::start(&w1_dir, &nats.url, "gpu", "w1");
    gone("the orphaned member to be ended", pgid, 30).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(troupe_test_tools),
    ignore = "drives a real tool scripts/test installs: run with TROUPE_TEST_TOOLS=1"
)]
async fn a_worker_killed_with_9_takes_its_members_with_it_and_its_run_is_tried_again() {
    let (scratch, nats, d, c) = cluster().await;
    let w1_dir = scratch.path().join("w1");
    let mut w1 = Worker::start(&w1_dir, &nats.url, "gpu", "w1");
    let party = one_remote_member(&c, d.dir.path(), HANGS_ONCE, json!({})).await;
    let pgid = member_group(&w1_dir).await;
    // The worker alone is killed: its reaper ends the member, cut off from its hub, at once.
    w1.kill9();
    gone("the killed worker's member to be ended", pgid, 30).await;
    // Its lease lapses, and the next attempt runs on the worker started again.
    let _w1 = Worker::start(&w1_dir, &nats.url, "gpu", "w1");
    let end = party_end(&c, &party, 120).await;
    assert_eq!(end["party"]["status"], "completed", "{end:#}");
    assert_eq!(end["members"][0]["output"], "attempt 2 on w1", "{end:#}");
    assert_eq!(events(&c, "remote_lease_lapsed").await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(troupe_test_tools),
    ignore = "drives a real tool scripts/test installs: run with TROUPE_TEST_TOOLS=1"
)]
async fn a_pool_without_a_worker_keeps_its_run_queued_until_its_timeout() {
    let (_scratch, _nats, d, c) = cluster().await;
    let project = repo(&d.dir.path().join("proj"));
    define(
        &c,
        "agent",
        json!({ "name": "lonely", "command": ["true"], "pool": "nobody",
                "isolation": "clone", "timeout_secs": 2 }),
    )
    .await;
    define(
        &c,
        "party",
        json!({ "name": "alone", "roles": { "member": { "agent": "lonely" } } }),
    )
    .await;
    let party = crate::support::launch(&c, "alone", &project).await;
    wait_for("the run to be queued", 30, || async {
        (!events(&c, "remote_queued").await.is_empty()).then_some(())
    })
    .await;
    // Its timeout ends it (then the role's recovery decides: by default the party pauses).
    let run = wait_for("the queued run to time out", 60, || async {
        let runs = c
            .call("list_agents", json!({ "party_id": party }))
            .await
            .unwrap();
        let run = runs["runs"][0].clone();
        (run["status"] != "running" && run["status"] != "pending").then_some(run)
    })
    .await;
    assert_eq!(run["status"], "timeout", "{run:#}");
    assert!(events(&c, "remote_started").await.is_empty());
}

/// A remote member that waits for the test's flag file, then completes.
const WAITS_FOR_FLAG: &str = r#"#!/bin/sh
while [ ! -f "$FLAG" ]; do sleep 0.05; done
troupe call complete "{\"output\":\"attempt $TROUPE_ATTEMPT on $TROUPE_WORKER\"}" >/dev/null
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(troupe_test_tools),
    ignore = "drives a real tool scripts/test installs: run with TROUPE_TEST_TOOLS=1"
)]
async fn nats_killed_with_9_and_restarted_loses_nothing_and_runs_no_member_twice() {
    let (scratch, mut nats, d, c) = cluster().await;
    let _w1 = Worker::start(&scratch.path().join("w1"), &nats.url, "gpu", "w1");
    let flag = d.dir.path().join("flag");
    let env = json!({ "FLAG": flag.display().to_string() });
    let party = one_remote_member(&c, d.dir.path(), WAITS_FOR_FLAG, env).await;
    member_group(&scratch.path().join("w1")).await;
    nats.kill9_and_restart();
    std::fs::write(&flag, "go").unwrap();
    let end = party_end(&c, &party, 120).await;
    assert_eq!(end["party"]["status"], "completed", "{end:#}");
    assert_eq!(end["members"][0]["output"], "attempt 1 on w1", "{end:#}");
    assert_eq!(
        end["members"][0]["attempts"], 1,
        "no second attempt: {end:#}"
    );
    assert_eq!(events(&c, "remote_started").await.len(), 1);
    assert!(events(&c, "remote_lease_lapsed").await.is_empty());
    let finished = events(&c, "agent_run_finished").await;
    assert_eq!(
        finished.len(),
        1,
        "the exit was recorded once: {finished:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(troupe_test_tools),
    ignore = "drives a real tool scripts/test installs: run with TROUPE_TEST_TOOLS=1"
)]
async fn a_hub_killed_with_9_takes_back_the_remote_runs_still_alive() {
    let (scratch, nats, mut d, c) = cluster().await;
    let _w1 = Worker::start(&scratch.path().join("w1"), &nats.url, "gpu", "w1");
    let flag = d.dir.path().join("flag");
    let env = json!({ "FLAG": flag.display().to_string() });
    let party = one_remote_member(&c, d.dir.path(), WAITS_FOR_FLAG, env).await;
    wait_for("the member to run on w1", 60, || async {
        (!events(&c, "remote_started").await.is_empty()).then_some(())
    })
    .await;
    drop(c);
    d.kill9();
    d.spawn();
    let c = d.client().await;
    wait_for("the hub to take the run back", 60, || async {
        (!events(&c, "remote_reattached").await.is_empty()).then_some(())
    })
    .await;
    std::fs::write(&flag, "go").unwrap();
    let end = party_end(&c, &party, 120).await;
    assert_eq!(end["party"]["status"], "completed", "{end:#}");
    assert_eq!(end["members"][0]["output"], "attempt 1 on w1", "{end:#}");
    assert_eq!(
        end["members"][0]["attempts"], 1,
        "no second attempt: {end:#}"
    );
    let reattached = events(&c, "remote_reattached").await;
    assert_eq!(reattached[0]["data"]["worker"], "w1", "{reattached:?}");
}

/// A remote member whose request waits at the hub, and which says how the request ended.
const ASKS_THEN_SAYS: &str = r#"#!/bin/sh
E=$(troupe call request_permission "{\"tool_name\":\"write_file\",\"input\":{},\"file_path\":\"$PWD/x.txt\",\"wait_ms\":120000}" 2>&1 >/dev/null | tr -d '"\\' | head -c 300)
troupe call complete "{\"output\":\"asked: $E\"}" >/dev/null
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(troupe_test_tools),
    ignore = "drives a real tool scripts/test installs: run with TROUPE_TEST_TOOLS=1"
)]
async fn a_call_waiting_on_a_hub_that_died_fails_once_the_hub_is_back() {
    let (scratch, nats, mut d, c) = cluster().await;
    let _w1 = Worker::start(&scratch.path().join("w1"), &nats.url, "gpu", "w1");
    let party = one_remote_member(&c, d.dir.path(), ASKS_THEN_SAYS, json!({})).await;
    // Its request waits at the hub (for two minutes); the hub dies under it and comes back.
    crate::support::pending_approval(&c).await;
    drop(c);
    d.kill9();
    d.spawn();
    let c = d.client().await;
    // The worker hears the new hub, and the call that waited on the old one fails at once
    // (not after the two minutes and its grace): the member says so and completes.
    let end = party_end(&c, &party, 60).await;
    assert_eq!(end["party"]["status"], "completed", "{end:#}");
    let output = end["members"][0]["output"].as_str().unwrap();
    assert!(
        output.contains("the hub restarted while request_permission waited for it: call again"),
        "{end:#}"
    );
}

/// A remote member that keeps calling the hub (ignoring refusals) on its first attempt, and
/// completes on the next.
const KEEPS_CALLING: &str = r#"#!/bin/sh
if [ "$TROUPE_ATTEMPT" = 1 ]; then
  while true; do troupe call heartbeat "{\"session_id\":\"$TROUPE_SESSION_ID\"}" >/dev/null 2>&1; sleep 0.1; done
fi
troupe call complete "{\"output\":\"attempt $TROUPE_ATTEMPT on $TROUPE_WORKER\"}" >/dev/null
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(troupe_test_tools),
    ignore = "drives a real tool scripts/test installs: run with TROUPE_TEST_TOOLS=1"
)]
async fn a_member_whose_hub_gave_up_its_run_is_stopped_by_its_worker() {
    let (scratch, nats, mut d, c) = cluster().await;
    let w1_dir = scratch.path().join("w1");
    let _w1 = Worker::start(&w1_dir, &nats.url, "gpu", "w1");
    let party = one_remote_member(&c, d.dir.path(), KEEPS_CALLING, json!({})).await;
    let pgid = member_group(&w1_dir).await;
    // The hub dies and loses what it needed to take the run back: it gives the attempt up.
    drop(c);
    d.kill9();
    for record in std::fs::read_dir(d.layout.data_dir.join("remote"))
        .unwrap()
        .flatten()
    {
        std::fs::remove_file(record.path()).unwrap();
    }
    d.spawn();
    let c = d.client().await;
    // The first attempt's calls are refused as a run gone: its worker stops it, and (its one
    // slot free again) runs the next attempt.
    // (A call the dead hub had taken when it was killed fails once the new hub is up.)
    gone("the given-up attempt to be stopped", pgid, 120).await;
    let end = party_end(&c, &party, 120).await;
    assert_eq!(end["party"]["status"], "completed", "{end:#}");
    assert_eq!(end["members"][0]["output"], "attempt 2 on w1", "{end:#}");
}

#[test]
fn an_unreachable_nats_is_a_clear_error_at_start() {
    let dir = tempfile::tempdir().unwrap();
    for args in [
        vec!["serve", "--nats", "nats://127.0.0.1:1"],
        vec!["worker", "--nats", "nats://127.0.0.1:1", "--pool", "gpu"],
    ] {
        let out = Command::new(BIN)
            .arg("--data-dir")
            .arg(dir.path().join(args[0]))
            .args(&args)
            .env(
                "TROUPE_RUNTIME_DIR",
                dir.path().join(format!("run-{}", args[0])),
            )
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}: {err}");
        assert!(
            err.contains("cannot reach NATS at nats://127.0.0.1:1"),
            "{args:?}: {err}"
        );
    }
    // Without the flag, `nats` in the data dir's config.toml (what an autostarted daemon is
    // told); a worker told nothing says where to tell it; a config.toml with a typo is named.
    let run = |data: &Path, args: &[&str]| {
        let out = Command::new(BIN)
            .arg("--data-dir")
            .arg(data)
            .args(args)
            .env_remove("TROUPE_NATS")
            .env("TROUPE_RUNTIME_DIR", data.join("run"))
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let configured = dir.path().join("configured");
    std::fs::create_dir_all(&configured).unwrap();
    std::fs::write(
        configured.join("config.toml"),
        "nats = \"nats://127.0.0.1:1\"\n",
    )
    .unwrap();
    for args in [&["serve"][..], &["worker", "--pool", "gpu"]] {
        let err = run(&configured, args);
        assert!(
            err.contains("cannot reach NATS at nats://127.0.0.1:1"),
            "{args:?}: {err}"
        );
    }
    let bare = dir.path().join("bare");
    let err = run(&bare, &["worker", "--pool", "gpu"]);
    assert!(
        err.contains("a worker needs its hub's NATS: pass --nats"),
        "{err}"
    );
    let typo = dir.path().join("typo");
    std::fs::create_dir_all(&typo).unwrap();
    std::fs::write(typo.join("config.toml"), "nat = \"nats://127.0.0.1:1\"\n").unwrap();
    let err = run(&typo, &["serve"]);
    assert!(err.contains("config.toml is not valid"), "{err}");
    assert!(err.contains("unknown field `nat`"), "{err}");
}

/// A remote member calls only what a local member may, as its run: `land_party`,
/// `decide_approval` and `shutdown_daemon` are refused at the hub, naming it a remote member;
/// naming another session is refused; as itself it is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(troupe_test_tools),
    ignore = "drives a real tool scripts/test installs: run with TROUPE_TEST_TOOLS=1"
)]
async fn a_remote_member_is_refused_what_only_the_person_may_do() {
    let (scratch, nats, d, c) = cluster().await;
    let _w = Worker::start(&scratch.path().join("w1"), &nats.url, "gpu", "w1");
    let out = d.dir.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let body = r#"#!/bin/sh
troupe call land_party "{\"party_id\":\"$TROUPE_PARTY_ID\"}" > /dev/null 2> "$OUT/land.err"
troupe call decide_approval '{"approval_id":"x","decision":"approve"}' > /dev/null 2> "$OUT/decide.err"
troupe call shutdown_daemon > /dev/null 2> "$OUT/shutdown.err"
troupe call send_message '{"from_session_id":"someone-else","to_session_id":"someone-else","content":"x"}' > /dev/null 2> "$OUT/spoof.err"
env | grep -c '^TROUPE_RUN_TOKEN=trn1' > "$OUT/credential.count"
troupe call complete '{"output":"tried"}' > /dev/null
"#;
    // The member's output files land in a directory of this machine (worker and hub share it).
    let party = one_remote_member(
        &c,
        d.dir.path(),
        body,
        json!({ "OUT": out.display().to_string() }),
    )
    .await;
    let end = party_end(&c, &party, 120).await;
    assert_eq!(end["party"]["status"], "completed", "{end}");
    for (file, op) in [
        ("land.err", "land_party"),
        ("decide.err", "decide_approval"),
        ("shutdown.err", "shutdown_daemon"),
    ] {
        let err = std::fs::read_to_string(out.join(file)).unwrap();
        assert!(
            err.contains(op) && err.contains("remote member") && err.contains("the person only"),
            "{file}: {err}"
        );
    }
    let spoof = std::fs::read_to_string(out.join("spoof.err")).unwrap();
    assert!(
        spoof.contains("someone-else") && spoof.contains("refused"),
        "{spoof}"
    );
    // The hub's credential for the run never travelled to the worker.
    assert_eq!(
        std::fs::read_to_string(out.join("credential.count"))
            .unwrap()
            .trim(),
        "0"
    );
    assert!(c.call("daemon_status", json!({})).await.is_ok());
}

/// A NATS server with TLS (certificates made here with the openssl CLI) and a user for the hub
/// and one for each worker pool (`gpu`, `cpu`), whose permissions keep it to its pool's subjects.
struct SecureNats {
    child: Child,
    url: String,
    dir: PathBuf,
}

impl Drop for SecureNats {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl runs");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl SecureNats {
    fn start(dir: &Path) -> SecureNats {
        std::fs::create_dir_all(dir.join("js")).unwrap();
        openssl(
            dir,
            &[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                "ca.key",
                "-out",
                "ca.pem",
                "-days",
                "1",
                "-subj",
                "/CN=troupe test CA",
            ],
        );
        openssl(
            dir,
            &[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                "server.key",
                "-out",
                "server.csr",
                "-subj",
                "/CN=127.0.0.1",
            ],
        );
        std::fs::write(dir.join("san.ext"), "subjectAltName=IP:127.0.0.1\n").unwrap();
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                "server.csr",
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                "server.pem",
                "-days",
                "1",
                "-extfile",
                "san.ext",
            ],
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let d = dir.display();
        std::fs::write(
            dir.join("nats.conf"),
            format!(
                r#"listen: "127.0.0.1:{port}"
jetstream {{ store_dir: "{d}/js" }}
tls {{ cert_file: "{d}/server.pem", key_file: "{d}/server.key", ca_file: "{d}/ca.pem" }}
authorization {{
  users = [
    {{ user: hub, password: hub-secret }}
    {gpu}
    {cpu}
  ]
}}
"#,
                gpu = pool_user("gpu", "pool-secret"),
                cpu = pool_user("cpu", "cpu-secret"),
            ),
        )
        .unwrap();
        let child = Command::new(nats_server_bin())
            .arg("-c")
            .arg(dir.join("nats.conf"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nats-server starts");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
                let mut buf = [0u8; 1024];
                s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
                if let Ok(n) = s.read(&mut buf)
                    && String::from_utf8_lossy(&buf[..n]).contains("\"tls_required\":true")
                {
                    break;
                }
            }
            assert!(Instant::now() < deadline, "nats-server did not start");
            std::thread::sleep(Duration::from_millis(10));
        }
        SecureNats {
            child,
            url: format!("tls://127.0.0.1:{port}"),
            dir: dir.to_path_buf(),
        }
    }

    /// `[nats_auth]` for a user of it.
    fn config(&self, user: &str, password: &str) -> String {
        std::fs::write(self.dir.join(format!("{user}.pw")), password).unwrap();
        format!(
            "[nats_auth]\nuser = \"{user}\"\npassword_file = \"{}\"\ntls_ca = \"{}\"\n",
            self.dir.join(format!("{user}.pw")).display(),
            self.dir.join("ca.pem").display()
        )
    }

    /// A client logged in as `user` (its replies coming to `inbox`, as a worker's do), and what
    /// the server tells it went wrong (permissions violations).
    async fn client(
        &self,
        user: &str,
        password: &str,
        inbox: Option<&str>,
    ) -> (
        async_nats::Client,
        tokio::sync::mpsc::UnboundedReceiver<String>,
    ) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let mut options =
            async_nats::ConnectOptions::with_user_and_password(user.into(), password.into());
        if let Some(inbox) = inbox {
            options = options.custom_inbox_prefix(inbox);
        }
        let client = options
            .add_root_certificates(self.dir.join("ca.pem"))
            .require_tls(true)
            .event_callback(move |event| {
                let tx = tx.clone();
                async move {
                    let _ = tx.send(event.to_string());
                }
            })
            .connect(&self.url)
            .await
            .unwrap();
        (client, rx)
    }

    /// A worker of `pool` logged in as `user`, on its own (private) data dir under `dir`.
    fn worker(&self, dir: &Path, pool: &str, name: &str, user: &str, password: &str) -> Worker {
        use std::os::unix::fs::DirBuilderExt;
        let data = dir.join(name);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .recursive(true)
            .create(&data)
            .unwrap();
        std::fs::write(data.join("config.toml"), self.config(user, password)).unwrap();
        Worker::start(&data, &self.url, pool, name)
    }
}

/// The user of a worker pool: it may publish its own workers' calls and exits, its own runs'
/// leases and code, and take runs off its own pool's queue, nothing else; it hears the hub's
/// (re)starts, its own runs' stops and the replies to its own pool's workers (their inboxes).
/// docs/security.md shows this (for pool gpu).
fn pool_user(pool: &str, password: &str) -> String {
    format!(
        r#"{{ user: {pool}-pool, password: {password},
       permissions: {{
         publish: {{ allow: [
           "troupe.worker.{pool}.>", "$KV.troupe_leases.{pool}.>", "$O.troupe_code_{pool}.>",
           "$JS.API.CONSUMER.INFO.TROUPE_RUNS.pool-{pool}",
           "$JS.API.CONSUMER.CREATE.TROUPE_RUNS.pool-{pool}.troupe.pool.{pool}.runs",
           "$JS.API.CONSUMER.MSG.NEXT.TROUPE_RUNS.pool-{pool}", "$JS.ACK.TROUPE_RUNS.pool-{pool}.>",
           "$JS.API.DIRECT.GET.KV_troupe_leases.$KV.troupe_leases.{pool}.>",
           "$JS.API.STREAM.MSG.GET.OBJ_troupe_code_{pool}", "$JS.API.CONSUMER.CREATE.OBJ_troupe_code_{pool}",
           "$JS.API.STREAM.INFO.TROUPE_RUNS", "$JS.API.STREAM.CREATE.TROUPE_RUNS",
           "$JS.API.STREAM.INFO.TROUPE_EXITS", "$JS.API.STREAM.CREATE.TROUPE_EXITS",
           "$JS.API.STREAM.INFO.KV_troupe_leases", "$JS.API.STREAM.CREATE.KV_troupe_leases",
           "$JS.API.STREAM.CREATE.OBJ_troupe_code_{pool}" ] }}
         subscribe: {{ allow: ["_INBOX.troupe.{pool}.>", "troupe.hub.up", "troupe.hub.stop.{pool}.>"] }}
       }} }}"#
    )
}

/// Waits for the server to refuse something of a client's (`events`, from `SecureNats::client`)
/// and says what it refused.
async fn violation(events: &mut tokio::sync::mpsc::UnboundedReceiver<String>) -> String {
    wait_for("the server to refuse it", 30, || {
        let event = events.try_recv().ok();
        async move { event.filter(|e| e.to_lowercase().contains("permissions violation")) }
    })
    .await
}

/// Remote workers authenticated end to end: over TLS with the hub's and the pool's own users (the
/// pool's kept to its own subjects), a remote member runs and its commit comes back; a worker
/// without credentials, or with credentials in its URL, cannot start; the pool's user cannot
/// publish on the hub's subjects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(troupe_test_tools),
    ignore = "drives a real tool scripts/test installs: run with TROUPE_TEST_TOOLS=1"
)]
async fn workers_need_credentials_and_tls_and_their_user_stays_off_the_hubs_subjects() {
    let scratch = tempfile::tempdir().unwrap();
    let nats = SecureNats::start(&scratch.path().join("nats"));
    let d = TestDaemon::start_with_config(
        &["--nats", &nats.url],
        &[("TROUPE_LEASE_SECS", LEASE_SECS)],
        &nats.config("hub", "hub-secret"),
    );
    let c = d.client().await;

    // No credentials: refused by the server, a clear error.
    let bare = scratch.path().join("bare");
    let out = Command::new(BIN)
        .arg("--data-dir")
        .arg(&bare)
        .args(["worker", "--nats", &nats.url, "--pool", "gpu"])
        .env("TROUPE_RUNTIME_DIR", bare.join("run"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot reach NATS"), "{err}");
    // Credentials in the URL: refused before anything is logged.
    let in_url = nats.url.replace("tls://", "tls://gpu-pool:pool-secret@");
    let out = Command::new(BIN)
        .arg("--data-dir")
        .arg(&bare)
        .args(["worker", "--nats", &in_url, "--pool", "gpu"])
        .env("TROUPE_RUNTIME_DIR", bare.join("run"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("[nats_auth]") && !err.contains("pool-secret"),
        "{err}"
    );

    // The pool's own user over TLS, with no more than its pool's subjects: a remote member
    // runs, its commit comes back, and it completes on its first attempt.
    let _w1 = nats.worker(scratch.path(), "gpu", "w1", "gpu-pool", "pool-secret");
    let party = one_remote_member(&c, d.dir.path(), COMMITS, json!({})).await;
    let end = party_end(&c, &party, 120).await;
    assert_eq!(end["party"]["status"], "completed", "{end:#}");
    assert_eq!(end["members"][0]["output"], "over tls", "{end:#}");
    assert_eq!(end["members"][0]["attempts"], 1, "{end:#}");
    let branch = end["members"][0]["branch"].as_str().unwrap_or_default();
    let log = Command::new("git")
        .args(["log", "--format=%s", branch])
        .current_dir(d.dir.path().join("proj"))
        .output()
        .unwrap();
    let subjects = String::from_utf8_lossy(&log.stdout);
    assert!(
        subjects.lines().any(|s| s == "made remotely"),
        "{branch}: {subjects}{}\n{end:#}",
        String::from_utf8_lossy(&log.stderr)
    );

    // The pool's user cannot announce itself as the hub.
    let (pool, mut refused) = nats
        .client("gpu-pool", "pool-secret", Some("_INBOX.troupe.gpu.w2"))
        .await;
    pool.publish("troupe.hub.up", "".into()).await.unwrap();
    pool.flush().await.unwrap();
    let violation = violation(&mut refused).await;
    assert!(violation.contains("troupe.hub.up"), "{violation}");
}

/// A remote member that commits a file and completes.
const COMMITS: &str = r#"#!/bin/sh
set -e
echo remote > remote.txt
git add -A && git -c user.name=remote -c user.email=remote@example.com commit -qm "made remotely"
troupe call complete '{"output":"over tls"}' >/dev/null
"#;

/// What the hub answers a call sent on `subject`.
async fn hub_answer(client: &async_nats::Client, subject: String, call: &Value) -> CallReply {
    let reply = client
        .request(subject, call.to_string().into())
        .await
        .unwrap();
    serde_json::from_slice(&reply.payload).unwrap()
}

/// A pool's user publishes only on its own pool's subjects: the server refuses the rest (another
/// pool's calls, exits, stops, leases, code and queue, the hub's), and listening to another
/// pool's calls or replies. On
/// its own subjects, the hub takes a call or an exit about a run only from the run's pool and
/// the worker holding it: pool cpu's user, even with a gpu run's secret, and a second worker of
/// pool gpu are refused, and the timeline says so; the run goes on, and completes once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(troupe_test_tools),
    ignore = "drives a real tool scripts/test installs: run with TROUPE_TEST_TOOLS=1"
)]
async fn a_worker_speaks_only_for_the_runs_it_holds_in_its_own_pool() {
    let scratch = tempfile::tempdir().unwrap();
    let nats = SecureNats::start(&scratch.path().join("nats"));
    let d = TestDaemon::start_with_config(
        &["--nats", &nats.url],
        &[("TROUPE_LEASE_SECS", LEASE_SECS)],
        &nats.config("hub", "hub-secret"),
    );
    let c = d.client().await;
    let _w1 = nats.worker(scratch.path(), "gpu", "w1", "gpu-pool", "pool-secret");
    let flag = d.dir.path().join("flag");
    let env = json!({ "FLAG": flag.display().to_string() });
    let party = one_remote_member(&c, d.dir.path(), WAITS_FOR_FLAG, env).await;
    let started = wait_for("the member to run on w1", 60, || async {
        events(&c, "remote_started").await.first().cloned()
    })
    .await;
    assert_eq!(started["data"]["worker"], "w1", "{started}");
    let run = started["data"]["run_id"].as_str().unwrap().to_string();
    // The worst case: the run's secret leaked (here, read from the hub's private record).
    let record: Value = serde_json::from_slice(
        &std::fs::read(d.layout.data_dir.join(format!("remote/{run}.json"))).unwrap(),
    )
    .unwrap();
    let call = json!({ "run_id": run, "secret": record["secret"], "op": "complete",
                       "params": { "session_id": started["session_id"], "output": "forged" } });
    let exit = json!({ "run_id": run, "worker": "w1", "code": 0, "signal": null, "error": null });

    // Pool cpu's user: the server refuses its publishes on pool gpu's and the hub's subjects,
    // and listening to pool gpu's calls and replies (or anyone's).
    let (cpu, mut refused) = nats
        .client("cpu-pool", "cpu-secret", Some("_INBOX.troupe.cpu.mallory"))
        .await;
    for subject in [
        format!("troupe.worker.gpu.w1.exit.{run}"),
        format!("troupe.worker.gpu.w1.call.{run}"),
        format!("troupe.hub.stop.gpu.{run}"),
        format!("$KV.troupe_leases.gpu.{run}"),
        "$O.troupe_code_gpu.M.x".to_string(),
        "troupe.pool.gpu.runs".to_string(),
        troupe::remote::OLD_CALLS.to_string(),
        "$JS.API.CONSUMER.MSG.NEXT.TROUPE_RUNS.pool-gpu".to_string(),
        "$JS.API.CONSUMER.MSG.NEXT.TROUPE_EXITS.hub".to_string(),
        "$JS.API.STREAM.PURGE.OBJ_troupe_code_gpu".to_string(),
    ] {
        cpu.publish(subject.clone(), exit.to_string().into())
            .await
            .unwrap();
        cpu.flush().await.unwrap();
        let violation = violation(&mut refused).await;
        assert!(violation.contains(&subject), "{subject}: {violation}");
    }
    let mut listening = Vec::new();
    for subject in ["troupe.worker.gpu.>", "_INBOX.>", "_INBOX.troupe.gpu.>"] {
        listening.push(cpu.subscribe(subject).await.unwrap());
        cpu.flush().await.unwrap();
        let violation = violation(&mut refused).await;
        assert!(violation.contains(subject), "{subject}: {violation}");
    }

    // On its own subjects: the hub refuses its call as the gpu run (with the run's secret) and
    // drops its exit, which the exits stream took (with a real exit's id: to no avail).
    let answer = hub_answer(&cpu, format!("troupe.worker.cpu.mallory.call.{run}"), &call).await;
    assert!(
        matches!(&answer, CallReply::Error { code, message, .. }
            if *code == troupe_api::error::codes::FORBIDDEN
                && message.contains("went to pool gpu, not to pool cpu")),
        "{answer:?}"
    );
    let js = async_nats::jetstream::new(cpu.clone());
    js.send_publish(
        format!("troupe.worker.cpu.mallory.exit.{run}"),
        async_nats::jetstream::message::PublishMessage::build()
            .payload(exit.to_string().into())
            .message_id(format!("{run}:exit")),
    )
    .await
    .unwrap()
    .await
    .unwrap();
    // Another worker of pool gpu (its user may be shared): the run is not its to speak for.
    let (gpu, _) = nats
        .client("gpu-pool", "pool-secret", Some("_INBOX.troupe.gpu.w2"))
        .await;
    let answer = hub_answer(&gpu, format!("troupe.worker.gpu.w2.call.{run}"), &call).await;
    assert!(
        matches!(&answer, CallReply::Error { code, message, .. }
            if *code == troupe_api::error::codes::FORBIDDEN
                && message.contains("held by worker w1, not by w2")),
        "{answer:?}"
    );
    async_nats::jetstream::new(gpu.clone())
        .publish(
            format!("troupe.worker.gpu.w2.exit.{run}"),
            exit.to_string().into(),
        )
        .await
        .unwrap()
        .await
        .unwrap();

    // Each refusal is on the run's timeline (the exits once the hub has dropped them).
    let told = wait_for("the refusals on the timeline", 30, || async {
        let mut told: Vec<String> = events(&c, "remote_refused")
            .await
            .iter()
            .map(|e| {
                let d = &e["data"];
                assert_eq!(d["run_id"], run.as_str(), "{e}");
                format!(
                    "{} {}/{}",
                    d["what"].as_str().unwrap(),
                    d["pool"].as_str().unwrap(),
                    d["worker"].as_str().unwrap()
                )
            })
            .collect();
        told.sort();
        (told.len() >= 4).then_some(told)
    })
    .await;
    assert_eq!(
        told,
        [
            "call cpu/mallory",
            "call gpu/w2",
            "exit cpu/mallory",
            "exit gpu/w2"
        ],
        "{told:?}"
    );
    // The run was not ended by them: it still runs on w1, and completes there, once.
    let runs = c
        .call("list_agents", json!({ "party_id": party }))
        .await
        .unwrap();
    assert_eq!(runs["runs"][0]["status"], "running", "{runs:#}");
    assert!(crate::support::group_alive(
        member_group(&scratch.path().join("w1")).await
    ));
    std::fs::write(&flag, "go").unwrap();
    let end = party_end(&c, &party, 120).await;
    assert_eq!(end["party"]["status"], "completed", "{end:#}");
    assert_eq!(end["members"][0]["output"], "attempt 1 on w1", "{end:#}");
    assert_eq!(end["members"][0]["attempts"], 1, "{end:#}");
    assert!(events(&c, "remote_lease_lapsed").await.is_empty());
    assert_eq!(events(&c, "agent_run_finished").await.len(), 1);

    // A worker of an older Troupe (calling where protocol 1 did) is told to upgrade.
    let (hub_user, _) = nats.client("hub", "hub-secret", None).await;
    let answer = hub_answer(&hub_user, troupe::remote::OLD_CALLS.into(), &call).await;
    assert!(
        matches!(&answer, CallReply::Error { message, .. }
            if message.contains("remote protocol 2") && message.contains("same Troupe version")),
        "{answer:?}"
    );
}
