//! The process runner: starts an agent's command in a session (and process group) of its own,
//! through `setsid(1)` so that the daemon spawns without forking, with the environment it needs
//! to call back, enforces its timeout, stops it (SIGTERM to the group, then
//! SIGKILL), watches processes adopted after a daemon restart, and reports every exit as an
//! event. A run's processes never outlive it: what it left in its group, or marked with its
//! run id, is ended with it (`crate::procs`). It knows nothing of parties or the store.
//!
//! A session of its own means a daemon killed with -9 leaves no "orphaned" group the kernel would
//! SIGHUP (a held, stopped member would get it). Spawning through `setsid(1)` lets the daemon use
//! posix_spawn instead of a fork, whose copy of its page tables cost more as it grew (a
//! `pre_exec` calling `setsid` only where `setsid(1)` is missing). Its `RunTable` also holds the
//! runs that live in the daemon (`spawn_task`, `spawn_managed`: executors, ACP agents' drivers, the merge queue,
//! attached and remote runs), reported the same way.

use std::collections::HashMap;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use rustix::process::{Pid, Signal, kill_process_group};
use tokio::sync::{mpsc, oneshot};

use crate::spawn::{self, Group};

/// Grace between SIGTERM and SIGKILL.
pub(crate) const TERM_GRACE: Duration = Duration::from_secs(2);
/// How often an adopted process (not our child) is checked.
const ADOPTED_POLL: Duration = Duration::from_millis(100);

/// How a run's process ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exit {
    /// It exited by itself (code, or signal).
    Exited {
        code: Option<i32>,
        signal: Option<i32>,
    },
    /// Stopped because its timeout passed.
    TimedOut,
    /// Stopped on request.
    Stopped,
    /// An adopted process is gone; its status is unknowable.
    Vanished,
    /// An in-daemon run (a WebAssembly executor) failed; why.
    Failed(String),
    /// An in-daemon run finished by itself.
    Finished,
}

impl Exit {
    pub fn describe(&self) -> String {
        match self {
            Exit::Exited { code: Some(c), .. } => format!("exit status {c}"),
            Exit::Exited {
                signal: Some(s), ..
            } => format!("killed by signal {s}"),
            Exit::Exited { .. } => "exited".into(),
            Exit::TimedOut => "timeout".into(),
            Exit::Stopped => "stopped".into(),
            Exit::Vanished => "the process went away while the daemon was down".into(),
            Exit::Failed(why) => why.clone(),
            Exit::Finished => "finished".into(),
        }
    }
}

/// An exit, reported to the orchestrator.
#[derive(Debug)]
pub struct RunExit {
    pub run_id: String,
    pub exit: Exit,
}

/// What to start.
#[derive(Debug, Clone)]
pub struct SpawnSpec {
    pub run_id: String,
    /// The log file the process writes to: `runs/<log>.log` (each run its own, read by
    /// `get_run_log`; its handle is closed when the run ends).
    pub log: String,
    pub argv: Vec<String>,
    pub cwd: PathBuf,
    pub env: Vec<(String, String)>,
    pub timeout: Option<Duration>,
    /// The program is a sandbox that runs the command in a pid namespace of its own (`bwrap
    /// --unshare-pid`), whose processes all end with it.
    pub pid_namespace: bool,
}

#[derive(Clone)]
pub struct RunTable {
    inner: Arc<Inner>,
}

struct Inner {
    exits: mpsc::UnboundedSender<RunExit>,
    stops: Mutex<HashMap<String, oneshot::Sender<()>>>,
    log_dir: PathBuf,
    logs: Mutex<HashMap<String, std::fs::File>>,
}

impl std::fmt::Debug for RunTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunTable").finish_non_exhaustive()
    }
}

impl RunTable {
    pub fn new(log_dir: PathBuf, exits: mpsc::UnboundedSender<RunExit>) -> RunTable {
        RunTable {
            inner: Arc::new(Inner {
                exits,
                stops: Mutex::new(HashMap::new()),
                log_dir,
                logs: Mutex::new(HashMap::new()),
            }),
        }
    }

    fn stops(&self) -> std::sync::MutexGuard<'_, HashMap<String, oneshot::Sender<()>>> {
        self.inner
            .stops
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Starts a run's process; returns its pid and start time (for recognising it later).
    pub fn spawn(&self, spec: SpawnSpec) -> std::io::Result<(u32, Option<i64>)> {
        let (program, args) = spec
            .argv
            .split_first()
            .ok_or_else(|| std::io::Error::other("empty command"))?;
        let log = self.log_file(&spec.log)?;
        {
            use std::io::Write;
            let mut header = log.try_clone()?;
            writeln!(
                header,
                "=== run {} ({}) ===",
                spec.run_id,
                spec.argv.join(" ")
            )?;
        }
        let start_error = |e: std::io::Error| {
            std::io::Error::new(
                e.kind(),
                format!("cannot start {program:?} in {}: {e}", spec.cwd.display()),
            )
        };
        let mut cmd = match setsid_program() {
            // `setsid(1)` makes the session and execs the program: the same pid, and the daemon
            // spawns it without a fork (posix_spawn), whose copy of the daemon's memory cost
            // grew with it. The program is found first, so a missing one is still an error here.
            Some(setsid) => {
                let found = find_program(program, &spec.cwd, &spec.env).map_err(start_error)?;
                let mut cmd = spawn::command(setsid, Group::ByProgram, Some(&spec.run_id));
                cmd.arg("--").arg(found);
                cmd
            }
            None => spawn::command(program, Group::Session, Some(&spec.run_id)),
        };
        cmd.args(args)
            .current_dir(&spec.cwd)
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(false);
        let mut child = cmd.spawn().map_err(start_error)?;
        let pid = child
            .id()
            .ok_or_else(|| std::io::Error::other("the process exited at once"))?;
        let start = process_start_time(pid);
        let (stop_tx, stop_rx) = oneshot::channel();
        self.stops().insert(spec.run_id.clone(), stop_tx);
        let runner = self.clone();
        tokio::spawn(async move {
            let exit = tokio::select! {
                status = child.wait() => exit_of(status),
                () = sleep_opt(spec.timeout) => { stop_group(pid, &mut child).await; Exit::TimedOut }
                _ = stop_rx => { stop_group(pid, &mut child).await; Exit::Stopped }
            };
            // What the process left in its group (or marked with its run) never outlives it;
            // in a pid namespace of its own, the kernel ends all of it with the namespace.
            if spec.pid_namespace {
                namespace_gone(pid).await;
            } else {
                end_remnants(&spec.run_id, pid, start).await;
            }
            runner.report(spec.run_id, exit);
        });
        Ok((pid, start))
    }

    /// Runs an in-daemon run (an executor's loop) as a task: reported like a process exit,
    /// stopped (dropped) on request or when `timeout` passes.
    pub fn spawn_task(
        &self,
        run_id: String,
        timeout: Option<Duration>,
        task: impl std::future::Future<Output = Exit> + Send + 'static,
    ) {
        let (stop_tx, stop_rx) = oneshot::channel();
        self.stops().insert(run_id.clone(), stop_tx);
        let runner = self.clone();
        tokio::spawn(async move {
            let exit = tokio::select! {
                exit = task => exit,
                () = sleep_opt(timeout) => Exit::TimedOut,
                _ = stop_rx => Exit::Stopped,
            };
            runner.report(run_id, exit);
        });
    }

    /// Runs a task that drives its own process (an ACP agent over its stdio) and ends it
    /// itself: it gets the stop signal and answers with the exit to report.
    pub fn spawn_managed<F>(&self, run_id: String, task: impl FnOnce(oneshot::Receiver<()>) -> F)
    where
        F: std::future::Future<Output = Exit> + Send + 'static,
    {
        let (stop_tx, stop_rx) = oneshot::channel();
        self.stops().insert(run_id.clone(), stop_tx);
        let runner = self.clone();
        // In a task of its own, so that a panic in it is still reported as the run's end.
        let task = tokio::spawn(task(stop_rx));
        tokio::spawn(async move {
            let exit = match task.await {
                Ok(exit) => exit,
                Err(e) => Exit::Failed(format!("the run's driver failed: {e}")),
            };
            runner.report(run_id, exit);
        });
    }

    /// Watches a process started by an earlier daemon (not our child): reports it when it is
    /// gone, stops it on request or when `timeout` passes.
    pub fn adopt(&self, run_id: String, pid: u32, start: Option<i64>, timeout: Option<Duration>) {
        let (stop_tx, mut stop_rx) = oneshot::channel();
        self.stops().insert(run_id.clone(), stop_tx);
        let runner = self.clone();
        tokio::spawn(async move {
            let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
            let exit = loop {
                if !is_alive(pid, start) {
                    end_remnants(&run_id, pid, start).await;
                    break Exit::Vanished;
                }
                if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
                    signal_group(pid, Signal::KILL);
                    break Exit::TimedOut;
                }
                tokio::select! {
                    () = tokio::time::sleep(ADOPTED_POLL) => {}
                    _ = &mut stop_rx => { signal_group(pid, Signal::KILL); break Exit::Stopped; }
                }
            };
            runner.report(run_id, exit);
        });
    }

    /// A shared handle on `runs/<name>.log` (appending), opened once.
    pub fn log_file(&self, name: &str) -> std::io::Result<std::fs::File> {
        let mut logs = self
            .inner
            .logs
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(file) = logs.get(name) {
            return file.try_clone();
        }
        let path = self.inner.log_dir.join(format!("{name}.log"));
        let open = || {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
        };
        // The directory is made by the first log (or again, if it was removed since).
        let file = match open() {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::create_dir_all(&self.inner.log_dir)?;
                open()?
            }
            opened => opened?,
        };
        let handle = file.try_clone()?;
        logs.insert(name.to_string(), file);
        Ok(handle)
    }

    /// Closes a shared log (its processes keep their own handles).
    pub fn close_log(&self, name: &str) {
        self.inner
            .logs
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .remove(name);
    }

    /// Stops a run's process (its exit is still reported). False if it is not running.
    pub fn stop(&self, run_id: &str) -> bool {
        match self.stops().remove(run_id) {
            Some(tx) => tx.send(()).is_ok(),
            None => false,
        }
    }

    /// Whether a process of this run is being watched.
    pub fn is_running(&self, run_id: &str) -> bool {
        self.stops().contains_key(run_id)
    }

    fn report(&self, run_id: String, exit: Exit) {
        self.stops().remove(&run_id);
        // Its log is its own (`runs/<run_id>.log`): no handle kept once it ended.
        self.close_log(&run_id);
        if self.inner.exits.send(RunExit { run_id, exit }).is_err() {
            tracing::debug!("run exit after the orchestrator stopped");
        }
    }
}

async fn sleep_opt(timeout: Option<Duration>) {
    match timeout {
        Some(t) => tokio::time::sleep(t).await,
        None => std::future::pending().await,
    }
}

fn exit_of(status: std::io::Result<std::process::ExitStatus>) -> Exit {
    match status {
        Ok(s) => Exit::Exited {
            code: s.code(),
            signal: s.signal(),
        },
        Err(e) => {
            tracing::warn!(error = %e, "cannot wait for a run's process");
            Exit::Vanished
        }
    }
}

/// util-linux's `setsid(1)`, at its fixed place (never looked up in a PATH a project sets).
fn setsid_program() -> Option<&'static Path> {
    static SETSID: OnceLock<Option<PathBuf>> = OnceLock::new();
    SETSID
        .get_or_init(|| {
            ["/usr/bin/setsid", "/bin/setsid"]
                .into_iter()
                .map(PathBuf::from)
                .find(|p| is_executable(p))
        })
        .as_deref()
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Where `execvp` would find `program`: itself when it names a path (refused when it is not an
/// executable file, seen from `cwd`), else the first executable of that name in the `PATH` the
/// process gets (the spec's, else the daemon's).
fn find_program(program: &str, cwd: &Path, env: &[(String, String)]) -> std::io::Result<PathBuf> {
    if program.contains('/') {
        let path = cwd.join(program);
        std::fs::metadata(&path)?; // missing: NotFound, as execvp says
        return if is_executable(&path) {
            Ok(PathBuf::from(program))
        } else {
            Err(std::io::Error::from(std::io::ErrorKind::PermissionDenied))
        };
    }
    let path = env
        .iter()
        .rev()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| std::ffi::OsString::from(v))
        .or_else(|| std::env::var_os("PATH"))
        .unwrap_or_default();
    std::env::split_paths(&path)
        // A relative entry (or an empty one: the current directory) is the process's own.
        .map(|dir| cwd.join(dir).join(program))
        .find(|candidate| is_executable(candidate))
        .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound))
}

pub(crate) fn signal_group(pid: u32, signal: Signal) {
    let Some(pid) = i32::try_from(pid).ok().and_then(Pid::from_raw) else {
        return;
    };
    if let Err(e) = kill_process_group(pid, signal) {
        // ESRCH: the group is already gone.
        tracing::debug!(error = %e, "signalling a run's process group");
    }
}

/// Signals an unreaped child's group; when it has none yet (`setsid(1)` not run yet, a moment
/// after the spawn), the child itself: its pid is ours until it is reaped.
fn signal_child_group(pid: u32, signal: Signal) {
    let Some(pid) = i32::try_from(pid).ok().and_then(Pid::from_raw) else {
        return;
    };
    if kill_process_group(pid, signal).is_err()
        && let Err(e) = rustix::process::kill_process(pid, signal)
    {
        tracing::debug!(error = %e, "signalling a run's process");
    }
}

/// SIGTERM to the group, up to `TERM_GRACE` to exit, then SIGKILL; reaps the child. The group
/// is signalled only while its leader is unreaped (its number is ours until then); what is left
/// in it afterwards is ended by marker (`end_remnants`, `crate::procs`).
pub(crate) async fn stop_group(pid: u32, child: &mut tokio::process::Child) {
    signal_child_group(pid, Signal::TERM);
    if tokio::time::timeout(TERM_GRACE, child.wait())
        .await
        .is_err()
    {
        signal_child_group(pid, Signal::KILL);
        if let Err(e) = child.wait().await {
            tracing::warn!(error = %e, "cannot reap a stopped run");
        }
    }
}

/// How many times, and how far apart, a run's group is looked at before its remnants are
/// searched for in `/proc` (100 ms in all).
const REMNANT_LOOKS: u32 = 10;
const REMNANT_PAUSE: Duration = Duration::from_millis(10);

/// Waits, briefly, for a sandboxed run's group to empty once its sandbox exited: the kernel
/// ends every process of a pid namespace when its init exits, as bwrap's does when the command
/// ends. What may stay is bwrap's init as a zombie, which the sandbox left for the system's
/// init to reap (seconds, on some machines): nothing to end, and no cause for a walk of the
/// process table.
async fn namespace_gone(pgid: u32) {
    let group = i32::try_from(pgid).ok().and_then(Pid::from_raw);
    for _ in 0..NAMESPACE_LOOKS {
        if group.is_none_or(|g| rustix::process::test_kill_process_group(g).is_err()) {
            return;
        }
        tokio::time::sleep(REMNANT_PAUSE).await;
    }
}

/// Looks at a sandboxed run's group (`REMNANT_PAUSE` apart) before leaving it to the kernel.
const NAMESPACE_LOOKS: u32 = 2;

/// Ends whatever a run's process left in its group once it is gone (and, when there is
/// something, processes carrying its run id that left the group). An empty group costs one
/// syscall: a member that leaves nothing pays no walk of the process table.
pub(crate) async fn end_remnants(run_id: &str, pgid: u32, since: Option<i64>) {
    let group = i32::try_from(pgid).ok().and_then(Pid::from_raw);
    let empty = || group.is_none_or(|g| rustix::process::test_kill_process_group(g).is_err());
    // What is left is usually on its way out (a sandbox's inner process ending just after
    // it): a few cheap looks at the group before the walk of the whole process table, whose
    // cost grows with every process on the machine.
    for _ in 0..REMNANT_LOOKS {
        if empty() {
            return;
        }
        tokio::time::sleep(REMNANT_PAUSE).await;
    }
    if empty() {
        return;
    }
    let procs = [crate::procs::RunProcesses {
        run_id: run_id.to_string(),
        pgid: Some(pgid),
        since,
    }];
    let killed = crate::procs::end(&procs, TERM_GRACE).await;
    if killed > 0 {
        tracing::info!(run = %run_id, killed, "processes the run left were killed");
    }
}

/// The process's start time (clock ticks since boot, /proc/<pid>/stat field 22).
pub fn process_start_time(pid: u32) -> Option<i64> {
    let stat = proc_stat(pid)?;
    let rest = stat.rsplit_once(')')?.1;
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// `/proc/<pid>/stat`, in one `read` (the kernel writes the whole line at the first read;
/// `read_to_string` would also ask for the file's size and read three times, once per run
/// start). `None` when the process is gone.
fn proc_stat(pid: u32) -> Option<String> {
    use std::io::Read;
    let mut file = std::fs::File::open(format!("/proc/{pid}/stat")).ok()?;
    // 52 fields of at most 20 digits and a name of at most 64 bytes: well under 2 KiB.
    let mut buf = [0u8; 2048];
    let n = file.read(&mut buf).ok()?;
    if n == buf.len() {
        // Longer than any stat line: read it whole after all.
        let mut rest = buf.to_vec();
        file.read_to_end(&mut rest).ok()?;
        return String::from_utf8(rest).ok();
    }
    String::from_utf8(buf[..n].to_vec()).ok()
}

/// Whether `pid` is alive and (when known) is the same process that started at `start`.
pub fn is_alive(pid: u32, start: Option<i64>) -> bool {
    let Some(stat) = proc_stat(pid) else {
        return false;
    };
    let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
        return false;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // A zombie is as good as gone.
    if fields.first() == Some(&"Z") {
        return false;
    }
    match start {
        Some(start) => fields.get(19).and_then(|f| f.parse::<i64>().ok()) == Some(start),
        None => true,
    }
}

/// Agents that are a command: started in their own process group, already running when placed.
pub struct ProcessRunner;

impl super::Runner for ProcessRunner {
    fn kind(&self) -> super::Kind {
        super::Kind::Process
    }

    fn place(&self, table: &RunTable, launch: super::Launch) -> Result<super::Placed, String> {
        let argv = launch
            .agent
            .command
            .clone()
            .ok_or_else(|| format!("agent {} has no command", launch.agent.name))?;
        let argv = launch.sandbox.argv(argv, &launch.workdir)?;
        let (pid, start_time) = table
            .spawn(SpawnSpec {
                run_id: launch.run.run_id.clone(),
                log: launch.log,
                argv,
                cwd: launch.workdir,
                env: launch.env,
                timeout: launch.timeout,
                pid_namespace: launch.sandbox.isolates_pids(),
            })
            .map_err(|e| e.to_string())?;
        Ok(super::Placed {
            pid,
            start_time,
            // Its own process group: the group is the leader's pid.
            pgid: Some(pid),
            go: Box::new(|_| {}),
        })
    }
}

#[cfg(test)]
mod tests;
