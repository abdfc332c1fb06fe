//! Test support: a real daemon process on a temporary data dir, clients for it, the CLI, and
//! a raw HTTP helper for requests no well-behaved client would send. A `TestDaemon` is stopped
//! with SIGTERM when dropped and the member processes left on its data dir are ended, so tests
//! leave no agent processes behind.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use troupe::client::{self, Client};
use troupe_api::layout::Layout;

pub const BIN: &str = env!("CARGO_BIN_EXE_troupe");
/// The developers' tool: benchmarks and the scripted ACP agent (`troupe-dev scripted-acp-agent`).
pub const DEV_BIN: &str = env!("CARGO_BIN_EXE_troupe-dev");

/// A daemon running as a child process, killed when dropped.
pub struct TestDaemon {
    pub dir: tempfile::TempDir,
    pub layout: Layout,
    pub child: Option<Child>,
    extra_args: Vec<String>,
    extra_env: Vec<(String, String)>,
}

impl TestDaemon {
    pub fn start() -> TestDaemon {
        Self::start_with(&[])
    }

    pub fn start_with(args: &[&str]) -> TestDaemon {
        Self::start_with_env(args, &[])
    }

    /// With extra arguments to `troupe serve`, extra environment and a `config.toml` in its
    /// data dir, written before it starts.
    pub fn start_with_config(args: &[&str], env: &[(&str, &str)], config: &str) -> TestDaemon {
        Self::start_inner(args, env, Some(config))
    }

    /// With extra arguments to `troupe serve` and extra environment.
    pub fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> TestDaemon {
        Self::start_inner(args, env, None)
    }

    fn start_inner(args: &[&str], env: &[(&str, &str)], config: Option<&str>) -> TestDaemon {
        let dir = tempfile::Builder::new()
            .prefix("troupe-it-")
            .tempdir()
            .unwrap();
        let layout = Layout {
            data_dir: dir.path().join("data"),
            runtime_dir: dir.path().join("run"),
        };
        if let Some(config) = config {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .mode(0o700)
                .recursive(true)
                .create(&layout.data_dir)
                .unwrap();
            std::fs::write(layout.data_dir.join("config.toml"), config).unwrap();
        }
        let mut daemon = TestDaemon {
            dir,
            layout,
            child: None,
            extra_args: args.iter().map(|s| s.to_string()).collect(),
            extra_env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        };
        daemon.spawn();
        daemon
    }

    /// Starts (or restarts) the daemon process and waits until it answers.
    pub fn spawn(&mut self) {
        let child = Command::new(BIN)
            .arg("serve")
            .arg("--data-dir")
            .arg(&self.layout.data_dir)
            .args(&self.extra_args)
            .env("TROUPE_RUNTIME_DIR", &self.layout.runtime_dir)
            .env("TROUPE_LOG", "warn")
            // The desktop of whoever runs the tests gets no notification (tests/it/notifications.rs
            // gives a private bus).
            .env_remove("DBUS_SESSION_BUS_ADDRESS")
            .envs(self.extra_env.iter().map(|(k, v)| (k, v)))
            // A provider key only plugins' requests to granted hosts may carry.
            .env("TROUPE_TEST_PROVIDER_KEY", "sk-test-troupe")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        // Tests call this from inside their own runtime: wait on another thread.
        let layout = self.layout.clone();
        let child = self.child.as_mut().unwrap();
        std::thread::scope(|scope| {
            scope
                .spawn(|| wait_ready(&layout, child, deadline))
                .join()
                .unwrap();
        });
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// SIGKILL: no chance to flush or clean up.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    pub async fn client(&self) -> Client {
        client::connect(&self.layout, false).await.unwrap()
    }

    pub async fn ws_client(&self) -> Client {
        client::connect_ws(&self.layout).await.unwrap()
    }

    pub fn token(&self) -> String {
        std::fs::read_to_string(self.layout.token_path())
            .unwrap()
            .trim()
            .to_string()
    }

    pub fn ws_addr(&self) -> String {
        let ep = client::read_endpoint(&self.layout).unwrap();
        ep.ws_url.trim_start_matches("ws://").to_string()
    }

    /// Runs the CLI against this daemon's data dir.
    pub fn cli(&self, args: &[&str]) -> Output {
        cli(&self.layout, args, None)
    }

    /// The test's directory its members share with it (barrier files, reports, the files
    /// their scripts read): `<temp dir>/shared`, made when first asked for. It lies beside
    /// the data dir, not around it, so a member's box may be given it (`shares`): a writable
    /// path holding the data dir would uncover the token, and the box drops it.
    pub fn shared(&self) -> PathBuf {
        let path = self.dir.path().join("shared");
        std::fs::create_dir_all(&path).unwrap();
        path
    }

    /// A directory inside the test's temp dir made into a (fake) git repository.
    pub fn project(&self, name: &str) -> String {
        let path = self.dir.path().join(name);
        std::fs::create_dir_all(path.join(".git")).unwrap();
        path.display().to_string()
    }
}

impl Drop for TestDaemon {
    /// Stops the daemon as `troupe stop` would (SIGTERM: its agents that cannot be adopted go
    /// with it, so tests leave no agent processes behind), SIGKILL if it does not go in time.
    /// Then ends what the test left on this data dir: member processes (they outlive a daemon by
    /// design, and a `troupe call` of theirs would start a new one) and any daemon they started.
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            signal(child.id(), rustix::process::Signal::TERM);
            let deadline = Instant::now() + Duration::from_secs(20);
            while Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        for _ in 0..5 {
            for pid in processes_with_env("TROUPE_HOME", &self.layout.data_dir) {
                signal(pid, rustix::process::Signal::KILL);
            }
            let Some(daemon) = std::fs::read_to_string(self.layout.data_dir.join("troupe.lock"))
                .ok()
                .and_then(|s| s.trim().parse::<u32>().ok())
                .filter(|pid| is_running(*pid) && *pid != std::process::id())
            else {
                break;
            };
            signal(daemon, rustix::process::Signal::TERM);
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline && is_running(daemon) {
                std::thread::sleep(Duration::from_millis(10));
            }
            signal(daemon, rustix::process::Signal::KILL);
        }
    }
}

pub fn signal(pid: u32, sig: rustix::process::Signal) {
    if let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        let _gone = rustix::process::kill_process(pid, sig);
    }
}

/// Whether a process is alive (not gone, not a zombie).
fn is_running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !s.rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
    })
}

/// Our processes whose environment has `name=<value>`.
fn processes_with_env(name: &str, value: &Path) -> Vec<u32> {
    let wanted = format!("{name}={}", value.display()).into_bytes();
    let me = std::process::id();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| *pid != me)
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|b| *b == 0).any(|kv| kv == wanted.as_slice()))
        })
        .collect()
}

/// Runs `troupe` with `--data-dir` of `layout`, in `cwd` when given.
pub fn cli(layout: &Layout, args: &[&str], cwd: Option<&Path>) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.arg("--data-dir")
        .arg(&layout.data_dir)
        .args(args)
        .env("TROUPE_RUNTIME_DIR", &layout.runtime_dir)
        .env_remove("TROUPE_SESSION_ID")
        .env("TROUPE_LOG", "warn");
    if let Some(cwd) = cwd {
        cmd.current_dir(cwd);
    }
    cmd.output().unwrap()
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Registers a session and returns its id.
pub async fn register(client: &Client, cli: &str, cwd: &str, parent: Option<&str>) -> String {
    let r = client
        .call(
            "register_session",
            json!({ "cli": cli, "cwd": cwd, "parent_session_id": parent }),
        )
        .await
        .unwrap();
    r["session_id"].as_str().unwrap().to_string()
}

/// One raw HTTP/1.1 POST to `addr`; returns (status, body).
pub fn http_post(addr: &str, token: Option<&str>, body: &[u8]) -> (u16, String) {
    let auth = token.map(|t| format!("Bearer {t}"));
    let headers: Vec<(&str, &str)> = auth
        .as_deref()
        .map(|a| ("Authorization", a))
        .into_iter()
        .collect();
    http_post_to(addr, "/", &headers, body)
}

/// One raw HTTP/1.1 POST of `body` to `path` on `addr` with extra `headers`; (status, body).
pub fn http_post_to(
    addr: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).unwrap();
    // The server may answer (and close) before reading all of an oversized body.
    let _ = stream.write_all(body);
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP status in {text:?}"));
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

/// The JSON-RPC error object of a raw reply body.
pub fn rpc_error(body: &str) -> Value {
    let v: Value =
        serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body:?}"));
    v["error"].clone()
}

pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../..")
        .canonicalize()
        .unwrap()
}

fn wait_ready(layout: &Layout, child: &mut Child, deadline: Instant) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        loop {
            if let Ok(c) = client::connect(layout, false).await
                && c.call("daemon_status", json!({})).await.is_ok()
            {
                return;
            }
            assert!(Instant::now() < deadline, "daemon did not become ready");
            if let Some(status) = child.try_wait().unwrap() {
                panic!("daemon exited during start-up: {status}");
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
}

/// Polls `f` until it returns Some, failing after `secs`.
pub async fn wait_for<T, F, Fut>(what: &str, secs: u64, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Where the first-party plugins are built: `<target>/plugins/wasm32-wasip2/release`.
/// They are built once per test run (`scripts/test` builds them first, so this is quick).
pub fn built_plugins() -> &'static Path {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let root = workspace_root();
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| root.join("target"))
            .join("plugins");
        let out = Command::new(env!("CARGO"))
            .args([
                "build",
                "--release",
                "--locked",
                "--target",
                "wasm32-wasip2",
            ])
            .arg("--manifest-path")
            .arg(root.join("plugins/Cargo.toml"))
            .arg("--target-dir")
            .arg(&target)
            .env_remove("CARGO_TARGET_DIR")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "building the plugins failed (rustup target add wasm32-wasip2?):\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        target.join("wasm32-wasip2/release")
    })
}

/// A folder under `parent` holding first-party plugin `name`'s manifest and component, as
/// `troupe plugin install` expects.
pub fn plugin_folder(parent: &Path, name: &str) -> PathBuf {
    let src = workspace_root().join("plugins").join(name);
    let manifest = std::fs::read_to_string(src.join("plugin.toml")).unwrap();
    let component = manifest
        .lines()
        .find_map(|l| {
            let l = l.trim();
            l.strip_prefix("component")
                .map(|r| r.trim_start().trim_start_matches('=').trim())
                .map(|r| r.split('"').nth(1).unwrap_or("").to_string())
        })
        .unwrap_or_else(|| format!("{}.wasm", name.replace('-', "_")));
    let dir = parent.join(format!("pkg-{name}"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("plugin.toml"), manifest).unwrap();
    std::fs::copy(
        built_plugins().join(format!("{}.wasm", name.replace('-', "_"))),
        dir.join(component),
    )
    .unwrap();
    dir
}

/// Launches party definition `name` in the project at `cwd`; its id.
pub async fn launch(c: &Client, name: &str, cwd: &str) -> String {
    let r = c
        .call("launch_party", json!({ "name": name, "cwd": cwd }))
        .await
        .unwrap();
    r["party_id"].as_str().unwrap().to_string()
}

/// The item of `value[list]` whose `key` is `equals`; panics naming what it looked for.
pub fn item(value: &Value, list: &str, key: &str, equals: &str) -> Value {
    value[list]
        .as_array()
        .and_then(|items| items.iter().find(|i| i[key] == equals))
        .cloned()
        .unwrap_or_else(|| panic!("no {list} item with {key} = {equals:?} in {value}"))
}

/// Waits for a pending permission request; the oldest.
/// The inbox of the project of directory `project`, as `list_inbox` gives it.
pub async fn inbox(c: &Client, project: &str) -> Vec<Value> {
    let r = c
        .call("list_inbox", json!({ "cwd": project }))
        .await
        .unwrap();
    r["items"].as_array().unwrap().clone()
}

/// The question of `project`'s inbox whose title has `needle`, once there.
pub async fn inbox_question(c: &Client, project: &str, needle: &str) -> Value {
    wait_for(&format!("a question about {needle}"), 120, || async {
        inbox(c, project).await.into_iter().find(|i| {
            i["kind"] == "question" && i["title"].as_str().is_some_and(|t| t.contains(needle))
        })
    })
    .await
}

/// Waits until `project`'s inbox holds no question (`what` names why one should go).
pub async fn no_question_left(c: &Client, project: &str, what: &str) {
    wait_for(what, 60, || async {
        let items = inbox(c, project).await;
        items.iter().all(|i| i["kind"] != "question").then_some(())
    })
    .await
}

pub async fn pending_approval(c: &Client) -> Value {
    wait_for("a pending approval", 30, || async {
        let l = c
            .call("list_approvals", json!({ "status": "pending" }))
            .await
            .unwrap();
        l["approvals"].as_array().unwrap().first().cloned()
    })
    .await
}

/// A git repository with one commit.
pub fn repo(path: &Path) -> String {
    std::fs::create_dir_all(path).unwrap();
    std::fs::write(path.join("README.md"), "# demo\nThe answer is 42.\n").unwrap();
    for args in [
        &["init", "-q", "-b", "main"][..],
        &["add", "."],
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-qm",
            "init",
        ],
    ] {
        let ok = Command::new("git")
            .args(args)
            .current_dir(path)
            .status()
            .unwrap();
        assert!(ok.success());
    }
    path.display().to_string()
}

pub async fn define(c: &Client, kind: &str, def: Value) {
    c.call(
        &format!("create_{kind}_definition"),
        json!({ "definition": def }),
    )
    .await
    .unwrap();
}

pub async fn start(c: &Client, agent: &str, prompt: &str, parent: &str) -> String {
    let r = c
        .call(
            "start_agent",
            json!({ "agent": agent, "prompt": prompt, "parent_session_id": parent }),
        )
        .await
        .unwrap();
    r["run_id"].as_str().unwrap().to_string()
}

/// Waits for a run to end; its `get_agent_result`. The bound only stops a test that would hang:
/// generous, as a run's work (a flood of 20,000 updates, say) takes several times as long on a
/// loaded 2-core machine.
pub async fn wait_run(c: &Client, run_id: &str) -> Value {
    wait_for(&format!("run {run_id} to end"), 120, || async {
        let r = c
            .call("get_agent_result", json!({ "run_id": run_id }))
            .await
            .unwrap();
        (r["run"]["status"] != "running" && r["run"]["status"] != "pending").then_some(r)
    })
    .await
}

pub async fn run_to_end(c: &Client, agent: &str, prompt: &str, parent: &str) -> Value {
    let run_id = start(c, agent, prompt, parent).await;
    wait_run(c, &run_id).await
}

/// Waits up to `secs` for party `party` to stop running; its `get_party_status`.
pub async fn party_end(c: &Client, party: &str, secs: u64) -> Value {
    wait_for(&format!("party {party} to end"), secs, || async {
        let s = c
            .call("get_party_status", json!({ "party_id": party }))
            .await
            .unwrap();
        (s["party"]["status"] != "running").then_some(s)
    })
    .await
}

/// The live processes (not zombies) in process group `pgid` or carrying `TROUPE_RUN_ID=run_id`,
/// read straight from /proc (independently of the daemon's own walker): pid and command line.
pub fn processes_of(run_id: &str, pgid: i64) -> Vec<(u32, String)> {
    let mut out = Vec::new();
    let marker = format!("TROUPE_RUN_ID={run_id}");
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.first() == Some(&"Z") {
            continue;
        }
        let in_group = fields.get(2).and_then(|g| g.parse::<i64>().ok()) == Some(pgid);
        let marked = std::fs::read(format!("/proc/{pid}/environ"))
            .unwrap_or_default()
            .split(|b| *b == 0)
            .any(|v| v == marker.as_bytes());
        if in_group || marked {
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline"))
                .unwrap_or_default()
                .split(|b| *b == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect::<Vec<_>>()
                .join(" ");
            out.push((pid, cmd));
        }
    }
    out
}

/// Waits until no process of the run is left (its group, its marked processes).
pub async fn no_process_left(run_id: &str, pgid: i64, secs: u64) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let left = processes_of(run_id, pgid);
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "processes of run {run_id} (group {pgid}) outlived it: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Writes an executable shell program `name` into `dir`; its path.
pub fn executable(dir: &Path, name: &str, body: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, body).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.display().to_string()
}

/// Whether any live process (not a zombie) is in process group `pgid`, read from /proc.
pub fn group_alive(pgid: i32) -> bool {
    std::fs::read_dir("/proc").unwrap().flatten().any(|entry| {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            return false;
        };
        // After "pid (comm) ": state, ppid, pgrp.
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
            return false;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        fields.len() > 2 && fields[0] != "Z" && fields[2] == pgid.to_string()
    })
}

/// `git` in `dir`; its output, trimmed. Fails the test, with what git said, when git fails.
pub fn git(dir: impl AsRef<Path>, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir.as_ref())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?} in {}: {}",
        dir.as_ref().display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A call that must be refused: its error's `data.kind` and message.
pub async fn refused(c: &Client, op: &str, params: Value) -> (String, String) {
    let e = c.call(op, params).await.expect_err(op);
    (e.kind().unwrap_or_default().to_string(), e.to_string())
}

/// The data dir's folder of the checkouts of members that ask for a worktree: `clones` while
/// members are sandboxed (each gets a borrowing clone, which cannot write the project's
/// repository), else `worktrees`.
pub async fn worktree_base(c: &Client) -> &'static str {
    let status = c.call("daemon_status", json!({})).await.unwrap();
    if status["sandbox"]
        .as_str()
        .unwrap_or_default()
        .starts_with("on")
    {
        "clones"
    } else {
        "worktrees"
    }
}

/// Agent definition `def` with `paths` added to what its box may write (and so read): a
/// member sees nothing of the host's `/tmp` but its program, its project and its checkout,
/// so what it shares with the test (`TestDaemon::shared`) must be declared, as a person would.
pub fn shares(mut def: Value, paths: &[&Path]) -> Value {
    let listed = paths.iter().map(|p| json!(p.display().to_string()));
    box_list(&mut def, "writable").extend(listed);
    def
}

/// `def.sandbox.<list>`, made when missing.
fn box_list<'a>(def: &'a mut Value, list: &str) -> &'a mut Vec<Value> {
    let sandbox = def
        .as_object_mut()
        .expect("an agent definition is an object")
        .entry("sandbox")
        .or_insert_with(|| json!({}));
    sandbox
        .as_object_mut()
        .expect("sandbox is an object")
        .entry(list)
        .or_insert_with(|| json!([]))
        .as_array_mut()
        .expect("a list")
}

/// Makes the project at `root` ask the person for its boxed members' edits inside their own
/// checkouts and their commands that stay there, which the box lets through by default
/// (`.troupe/config.toml` `[sandbox] approve_own_checkout_edits = false`,
/// `approve_in_box_commands = false`): for tests of the asking itself. Keeps what the file
/// already holds.
pub fn asks_for_in_box_requests(root: impl AsRef<Path>) {
    let dir = root.as_ref().join(".troupe");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("config.toml");
    let old = std::fs::read_to_string(&path).unwrap_or_default();
    let keys = "approve_own_checkout_edits = false\napprove_in_box_commands = false\n";
    let new = if old.contains("[sandbox]\n") {
        old.replacen("[sandbox]\n", &format!("[sandbox]\n{keys}"), 1)
    } else {
        format!("{old}\n[sandbox]\n{keys}")
    };
    std::fs::write(&path, new).unwrap();
}

/// Installs rustls's ring provider for this test process (once): the product's reqwest is built
/// without a default provider (it passes its own), and the MCP client of the tests shares it.
pub fn rustls_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default(); // already installed is fine
}
