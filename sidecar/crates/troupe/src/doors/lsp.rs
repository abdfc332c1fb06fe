//! `troupe lsp`: the editor door, LSP over stdio (tower-lsp-server, kept behind this module).
//! A thin front onto the daemon (started if needed): every operation is a
//! `workspace/executeCommand` command `troupe.<name>`; pending permission requests that touch a
//! file are diagnostics at their path and range, with code actions and code lenses Approve, Deny,
//! Approve pattern and Abort agent; the conflict radar's predictions for the workspace are
//! warnings on the lines two members both changed (asked again at each `conflict_*`
//! notification); escalations and finished parties are shown as messages, launched parties
//! report `$/progress`, and the workspace project's inbox is pushed whole as `troupe/inbox` at
//! each change (answering an item is the command its `answer.op` names). `troupe.get_run_log`
//! answers a run's output so far and then pushes the rest as `troupe/runLog` until the run ends. Handlers never wait on
//! the editor: everything that needs the client runs in background tasks. Logs go to stderr,
//! never stdout. A path in a member's worktree or clone maps to the same path in the editor's
//! checkout; one publish per file carries both the requests and the conflicts, since a publish
//! replaces a file's whole list.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tower_lsp_server::jsonrpc::{Error as RpcError, ErrorCode, Result as RpcResult};
use tower_lsp_server::ls_types::*;
use tower_lsp_server::{Client as Editor, LanguageServer, LspService, Server};

use crate::client::{self, Client};
use troupe_api::layout::Layout;
use troupe_api::types::{
    ConflictRangeView, ConflictsResult, ListConflictsParams, PredictedConflictView,
};

mod framing;

/// Decisions offered on a request, in menu order: (title, decision).
const ACTIONS: &[(&str, &str)] = &[
    ("Troupe: Approve", "approve"),
    ("Troupe: Deny", "deny"),
    ("Troupe: Approve pattern…", "approve_pattern"),
    ("Troupe: Abort agent", "abort"),
];

/// Runs the server on stdin/stdout until the editor exits.
pub async fn run(layout: Layout) -> anyhow::Result<()> {
    let (service, socket) = LspService::new(|editor| Backend {
        editor,
        layout,
        state: Arc::new(Mutex::new(State::default())),
    });
    Server::new(
        framing::reframe(tokio::io::stdin()),
        tokio::io::stdout(),
        socket,
    )
    .serve(service)
    .await;
    Ok(())
}

#[derive(Default)]
struct State {
    root: Option<PathBuf>,
    daemon: Option<Arc<Client>>,
    /// Pending requests with a file, by the file's path in the workspace.
    by_file: HashMap<PathBuf, Vec<Value>>,
    /// The radar's predicted conflicts as diagnostics, by the file's path in the person's checkout.
    conflicts: HashMap<PathBuf, Vec<Diagnostic>>,
    /// Files we published diagnostics for (to clear them when nothing is left on them).
    published: HashSet<PathBuf>,
    /// Held while publishing, so that publishes reach the editor in the order of the state.
    publishing: Arc<tokio::sync::Mutex<()>>,
    /// Workdirs of runs, by run id.
    workdirs: HashMap<String, Option<String>>,
    /// Runs whose output is being pushed as `troupe/runLog` (`troupe.get_run_log`).
    following: HashSet<String>,
}

struct Backend {
    editor: Editor,
    layout: Layout,
    state: Arc<Mutex<State>>,
}

fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    state
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn rpc_error(e: impl std::fmt::Display) -> RpcError {
    RpcError {
        code: ErrorCode::InternalError,
        message: e.to_string().into(),
        data: None,
    }
}

impl Backend {
    /// The pending requests on the document at `uri`.
    fn pending_for(&self, uri: &Uri) -> Vec<Value> {
        let Some(path) = uri.to_file_path().map(|p| p.into_owned()) else {
            return Vec::new();
        };
        let path = std::fs::canonicalize(&path).unwrap_or(path);
        lock(&self.state)
            .by_file
            .get(&path)
            .cloned()
            .unwrap_or_default()
    }

    async fn daemon(&self) -> RpcResult<Arc<Client>> {
        daemon(&self.layout, &self.state)
            .await
            .map_err(|e| rpc_error(format!("{e:#}")))
    }
}

/// The connection to the daemon, re-established (and the daemon restarted) when it was lost.
async fn daemon(layout: &Layout, state: &Mutex<State>) -> anyhow::Result<Arc<Client>> {
    if let Some(c) = lock(state).daemon.clone().filter(|c| c.is_connected()) {
        return Ok(c);
    }
    let fresh = Arc::new(client::connect(layout, true).await?);
    lock(state).daemon = Some(fresh.clone());
    Ok(fresh)
}

/// The range a request covers (1-based inclusive lines → an LSP range; lines past `u32` are
/// the last line, where they overflowed before: found by fuzzing).
fn range_of(a: &Value) -> Range {
    lines(a["start_line"].as_u64(), a["end_line"].as_u64())
}

/// Whole lines `start..=end` (1-based) as an LSP range.
fn lines(start: Option<u64>, end: Option<u64>) -> Range {
    let line = |n: u64| u32::try_from(n.max(1) - 1).unwrap_or(u32::MAX);
    let start = start.map_or(0, line);
    let end = end.map_or(start, |e| line(e).max(start));
    Range::new(Position::new(start, 0), Position::new(end, u32::MAX / 2))
}

fn describe(a: &Value) -> String {
    let who = a["role_name"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| {
            format!(
                "session {}",
                crate::client::short(a["session_id"].as_str().unwrap_or(""))
            )
        });
    let mut text = format!(
        "Troupe: {who} asks to {} {}",
        a["tool_name"].as_str().unwrap_or("?"),
        a["subject"].as_str().unwrap_or("")
    );
    if a["is_dangerous"] == true {
        text.push_str(&format!(
            " — dangerous: {}",
            a["danger_reason"].as_str().unwrap_or("")
        ));
    }
    if let Some(diff) = a["diff"].as_str() {
        let preview: Vec<&str> = diff.lines().take(12).collect();
        text.push('\n');
        text.push_str(&preview.join("\n"));
    }
    text
}

fn diagnostic(a: &Value) -> Diagnostic {
    Diagnostic {
        range: range_of(a),
        severity: Some(if a["is_dangerous"] == true {
            DiagnosticSeverity::ERROR
        } else {
            DiagnosticSeverity::WARNING
        }),
        code: a["approval_id"]
            .as_str()
            .map(|id| NumberOrString::String(id.to_string())),
        source: Some("troupe".into()),
        message: describe(a),
        ..Diagnostic::default()
    }
}

/// The decisions offered for a request: no "Approve pattern" for a path outside the member's
/// worktree (no rule may answer such a request).
fn actions_for(a: &Value) -> impl Iterator<Item = &'static (&'static str, &'static str)> + '_ {
    ACTIONS
        .iter()
        .filter(move |(_, d)| !(*d == "approve_pattern" && a["outside_worktree"] == true))
}

fn decide_command(title: &str, a: &Value, decision: &str) -> Command {
    Command {
        title: title.to_string(),
        command: "troupe.decide_approval".into(),
        arguments: Some(vec![
            json!({ "approval_id": a["approval_id"], "decision": decision }),
        ]),
    }
}

fn overlaps(a: &Range, b: &Range) -> bool {
    a.start.line <= b.end.line && b.start.line <= a.end.line
}

impl LanguageServer for Backend {
    async fn initialize(&self, params: InitializeParams) -> RpcResult<InitializeResult> {
        #[allow(deprecated)] // root_uri: older clients send only this
        let root = params
            .workspace_folders
            .as_ref()
            .and_then(|f| f.first())
            .and_then(|f| f.uri.to_file_path().map(|p| p.into_owned()))
            .or_else(|| {
                params
                    .root_uri
                    .as_ref()
                    .and_then(|u| u.to_file_path().map(|p| p.into_owned()))
            })
            .or_else(|| std::env::current_dir().ok());
        let daemon = client::connect(&self.layout, true)
            .await
            .map_err(|e| rpc_error(format!("{e:#}")))?;
        {
            let mut state = lock(&self.state);
            state.root = root.and_then(|r| std::fs::canonicalize(&r).ok().or(Some(r)));
            state.daemon = Some(Arc::new(daemon));
        }
        let commands = troupe_api::OPERATIONS
            .iter()
            .map(|op| format!("troupe.{}", op.name))
            .collect();
        Ok(InitializeResult {
            capabilities: ServerCapabilities {
                text_document_sync: Some(TextDocumentSyncCapability::Kind(
                    TextDocumentSyncKind::NONE,
                )),
                code_action_provider: Some(CodeActionProviderCapability::Options(
                    CodeActionOptions {
                        code_action_kinds: Some(vec![CodeActionKind::QUICKFIX]),
                        ..CodeActionOptions::default()
                    },
                )),
                code_lens_provider: Some(CodeLensOptions {
                    resolve_provider: Some(false),
                }),
                execute_command_provider: Some(ExecuteCommandOptions {
                    commands,
                    ..ExecuteCommandOptions::default()
                }),
                ..ServerCapabilities::default()
            },
            server_info: Some(ServerInfo {
                name: "troupe".into(),
                version: Some(env!("CARGO_PKG_VERSION").into()),
            }),
            offset_encoding: None,
        })
    }

    async fn initialized(&self, _: InitializedParams) {
        let (editor, state, layout) =
            (self.editor.clone(), self.state.clone(), self.layout.clone());
        tokio::spawn(async move {
            // Follow the daemon across restarts: resubscribe whenever the connection drops.
            loop {
                match daemon(&layout, &state).await {
                    Ok(d) => {
                        tokio::join!(
                            watch_approvals(editor.clone(), state.clone(), d.clone()),
                            watch_inbox(editor.clone(), state.clone(), d.clone()),
                            watch_notifications(editor.clone(), state.clone(), d),
                        );
                    }
                    Err(e) => {
                        tracing::warn!(error = %format!("{e:#}"), "cannot reach the troupe daemon")
                    }
                }
                tokio::time::sleep(RECONNECT_DELAY).await;
            }
        });
    }

    async fn shutdown(&self) -> RpcResult<()> {
        Ok(())
    }

    // Some editors send these whatever the sync capability says; nothing to do with them.
    async fn did_open(&self, _: DidOpenTextDocumentParams) {}
    async fn did_close(&self, _: DidCloseTextDocumentParams) {}

    async fn code_action(&self, params: CodeActionParams) -> RpcResult<Option<CodeActionResponse>> {
        let pending = self.pending_for(&params.text_document.uri);
        let mut actions = Vec::new();
        for a in pending
            .iter()
            .filter(|a| overlaps(&range_of(a), &params.range))
        {
            let diag = diagnostic(a);
            for (title, decision) in actions_for(a) {
                actions.push(CodeActionOrCommand::CodeAction(CodeAction {
                    title: title.to_string(),
                    kind: Some(CodeActionKind::QUICKFIX),
                    diagnostics: Some(vec![diag.clone()]),
                    is_preferred: Some(*decision == "approve"),
                    command: Some(decide_command(title, a, decision)),
                    ..CodeAction::default()
                }));
            }
        }
        Ok(Some(actions))
    }

    async fn code_lens(&self, params: CodeLensParams) -> RpcResult<Option<Vec<CodeLens>>> {
        let pending = self.pending_for(&params.text_document.uri);
        let lenses = pending
            .iter()
            .flat_map(|a| {
                actions_for(a).map(move |(title, decision)| CodeLens {
                    range: Range::new(range_of(a).start, range_of(a).start),
                    command: Some(decide_command(title, a, decision)),
                    data: None,
                })
            })
            .collect();
        Ok(Some(lenses))
    }

    async fn execute_command(&self, params: ExecuteCommandParams) -> RpcResult<Option<LSPAny>> {
        let name = params
            .command
            .strip_prefix("troupe.")
            .unwrap_or(&params.command);
        let op = troupe_api::operation(name).ok_or_else(|| RpcError {
            code: ErrorCode::MethodNotFound,
            message: format!(
                "unknown command {:?} (commands are troupe.<operation>)",
                params.command
            )
            .into(),
            data: None,
        })?;
        let mut args = match params.arguments.into_iter().next() {
            None | Some(Value::Null) => json!({}),
            Some(v @ Value::Object(_)) => v,
            Some(other) => {
                return Err(RpcError::invalid_params(format!(
                    "{} takes one JSON object, not {other}",
                    params.command
                )));
            }
        };
        let root = lock(&self.state).root.clone();
        if let (Some(root), Value::Object(map)) = (&root, &mut args) {
            let schema = serde_json::to_value((op.params_schema)()).unwrap_or_default();
            if schema["properties"].get("cwd").is_some()
                && !map.contains_key("cwd")
                && !map.contains_key("project_id")
            {
                map.insert("cwd".into(), root.display().to_string().into());
            }
        }
        let daemon = self.daemon().await?;
        let result = daemon.call(op.name, args).await.map_err(|e| RpcError {
            code: ErrorCode::ServerError(i64::from(e.code().unwrap_or(-32603))),
            message: e.to_string().into(),
            data: None,
        })?;
        if op.name == "launch_party"
            && let Some(party) = result["party_id"].as_str()
        {
            tokio::spawn(report_party(self.editor.clone(), daemon, party.to_string()));
        } else if op.name == "get_run_log"
            && result["ended"] == false
            && let (Some(run), Some(from)) =
                (result["run_id"].as_str(), result["next_offset"].as_u64())
            && lock(&self.state).following.insert(run.to_string())
        {
            // The editor asked for a member's output: what comes next is pushed to it live.
            tokio::spawn(follow_run_log(
                self.editor.clone(),
                self.state.clone(),
                daemon,
                run.to_string(),
                from,
            ));
        }
        Ok(Some(result))
    }
}

/// How long to wait before reconnecting to a daemon that went away.
const RECONNECT_DELAY: Duration = Duration::from_millis(500);

/// The params that scope a subscription to the workspace's project (every project's without a
/// workspace root).
fn workspace_scope(state: &Mutex<State>) -> Value {
    match &lock(state).root {
        Some(root) => json!({ "cwd": root.display().to_string() }),
        None => json!({}),
    }
}

/// Keeps the diagnostics in step with the daemon's pending requests, until the connection ends.
async fn watch_approvals(editor: Editor, state: Arc<Mutex<State>>, daemon: Arc<Client>) {
    let root = lock(&state).root.clone();
    let params = workspace_scope(&state);
    let mut sub = match daemon
        .subscribe("subscribe_approvals", params, "unsubscribe_approvals")
        .await
    {
        Ok(sub) => sub,
        Err(e) => {
            editor
                .log_message(
                    MessageType::ERROR,
                    format!("troupe: cannot watch approvals: {e}"),
                )
                .await;
            return;
        }
    };
    while let Some(Ok(snapshot)) = sub.next().await {
        let approvals = snapshot["approvals"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let mut by_file: HashMap<PathBuf, Vec<Value>> = HashMap::new();
        for a in approvals {
            if let Some(path) = workspace_path(&daemon, &state, root.as_deref(), &a).await {
                by_file.entry(path).or_default().push(a);
            }
        }
        let count: usize = by_file.values().map(Vec::len).sum();
        lock(&state).by_file = by_file;
        publish(&editor, &state).await;
        editor
            .send_notification::<ApprovalCount>(json!({ "pending": count }))
            .await;
    }
}

/// Publishes every file's diagnostics, its pending requests and predicted conflicts together (a
/// publish replaces a file's whole list), and clears the files that have none left.
async fn publish(editor: &Editor, state: &Mutex<State>) {
    let gate = lock(state).publishing.clone();
    let _in_order = gate.lock().await;
    let (files, clear) = {
        let mut s = lock(state);
        let mut files: HashMap<PathBuf, Vec<Diagnostic>> = HashMap::new();
        for (path, list) in &s.by_file {
            files
                .entry(path.clone())
                .or_default()
                .extend(list.iter().map(diagnostic));
        }
        for (path, list) in &s.conflicts {
            files
                .entry(path.clone())
                .or_default()
                .extend(list.iter().cloned());
        }
        let clear: Vec<PathBuf> = s
            .published
            .iter()
            .filter(|p| !files.contains_key(*p))
            .cloned()
            .collect();
        s.published = files.keys().cloned().collect();
        (files, clear)
    };
    for path in clear {
        if let Some(uri) = Uri::from_file_path(&path) {
            editor.publish_diagnostics(uri, Vec::new(), None).await;
        }
    }
    for (path, list) in files {
        if let Some(uri) = Uri::from_file_path(&path) {
            editor.publish_diagnostics(uri, list, None).await;
        }
    }
}

/// Asks the daemon for the radar's predictions in the workspace's project and publishes them.
async fn refresh_conflicts(editor: &Editor, state: &Mutex<State>, daemon: &Client) {
    let params = ListConflictsParams {
        party_id: None,
        cwd: lock(state).root.as_ref().map(|r| r.display().to_string()),
    };
    let found: ConflictsResult = match daemon.call_typed("list_conflicts", &params).await {
        Ok(found) => found,
        Err(e) => {
            // A workspace that is no git repository has no conflicts to show.
            tracing::debug!(error = %e, "no conflicts for the workspace");
            return;
        }
    };
    let mut by_file: HashMap<PathBuf, Vec<Diagnostic>> = HashMap::new();
    for c in &found.conflicts {
        for r in &c.ranges {
            let path = Path::new(&c.repo_root).join(&r.path);
            let path = std::fs::canonicalize(&path).unwrap_or(path);
            by_file
                .entry(path)
                .or_default()
                .push(conflict_diagnostic(c, r));
        }
    }
    lock(state).conflicts = by_file;
    publish(editor, state).await;
}

/// A predicted conflict on one range of a file.
fn conflict_diagnostic(c: &PredictedConflictView, r: &ConflictRangeView) -> Diagnostic {
    Diagnostic {
        range: lines(Some(r.start_line.into()), Some(r.end_line.into())),
        severity: Some(DiagnosticSeverity::WARNING),
        code: Some(NumberOrString::String("conflict".into())),
        source: Some("troupe".into()),
        message: format!(
            "troupe: {} and {} will conflict here ({})",
            c.a, c.b, r.path
        ),
        ..Diagnostic::default()
    }
}

/// Forwards each inbox the daemon pushes for the workspace's project (the whole list, at once
/// and after every change) as `troupe/inbox`, until the connection ends.
async fn watch_inbox(editor: Editor, state: Arc<Mutex<State>>, daemon: Arc<Client>) {
    let mut sub = match daemon
        .subscribe(
            "subscribe_inbox",
            workspace_scope(&state),
            "unsubscribe_inbox",
        )
        .await
    {
        Ok(sub) => sub,
        Err(e) => {
            editor
                .log_message(
                    MessageType::ERROR,
                    format!("troupe: cannot watch the inbox: {e}"),
                )
                .await;
            return;
        }
    };
    while let Some(Ok(pushed)) = sub.next().await {
        let items = pushed
            .get("items")
            .cloned()
            .unwrap_or_else(|| Value::Array(Vec::new()));
        editor
            .send_notification::<InboxPush>(json!({ "items": items }))
            .await;
    }
}

/// Pushes a run's output after `offset` as `troupe/runLog` (`{run_id, offset, text, ended}`) as
/// it is written, until the run ended (the last push has `ended: true`) or the daemon went away.
async fn follow_run_log(
    editor: Editor,
    state: Arc<Mutex<State>>,
    daemon: Arc<Client>,
    run_id: String,
    offset: u64,
) {
    let params = json!({ "run_id": run_id, "offset": offset });
    if let Ok(mut sub) = daemon
        .subscribe("subscribe_run_log", params, "unsubscribe_run_log")
        .await
    {
        while let Some(Ok(chunk)) = sub.next().await {
            let ended = chunk["ended"] == true;
            editor.send_notification::<RunLogPush>(chunk).await;
            if ended {
                break;
            }
        }
    }
    lock(&state).following.remove(&run_id);
}

/// `troupe/runLog`: a piece of a run's output the editor asked for (`troupe.get_run_log`).
enum RunLogPush {}

impl notification::Notification for RunLogPush {
    type Params = Value;
    const METHOD: &'static str = "troupe/runLog";
}

/// `troupe/inbox`: everything waiting for the person in the workspace's project, `{items}`.
enum InboxPush {}

impl notification::Notification for InboxPush {
    type Params = Value;
    const METHOD: &'static str = "troupe/inbox";
}

/// `troupe/approvals`: the number of pending requests, for status bars.
enum ApprovalCount {}

impl notification::Notification for ApprovalCount {
    type Params = Value;
    const METHOD: &'static str = "troupe/approvals";
}

/// Where the request's file is in the editor's workspace: a path relative to a worker's
/// worktree or clone maps to the same path in the main checkout.
async fn workspace_path(
    daemon: &Client,
    state: &Mutex<State>,
    root: Option<&Path>,
    a: &Value,
) -> Option<PathBuf> {
    let file = PathBuf::from(a["file_path"].as_str()?);
    let run = a["run_id"].as_str();
    let cached = run.and_then(|r| lock(state).workdirs.get(r).cloned());
    let workdir = match (run, cached) {
        (_, Some(w)) => w,
        (Some(run), None) => {
            let w = daemon
                .call("get_agent_result", json!({ "run_id": run }))
                .await
                .ok()
                .and_then(|r| r["run"]["workdir"].as_str().map(str::to_string));
            lock(state).workdirs.insert(run.to_string(), w.clone());
            w
        }
        (None, None) => None,
    };
    let absolute = match (&workdir, file.is_absolute()) {
        (_, true) => file,
        (Some(w), false) => Path::new(w).join(&file),
        (None, false) => root?.join(&file),
    };
    let mapped = match (&workdir, root) {
        (Some(w), Some(root)) => match absolute.strip_prefix(w) {
            Ok(rel) if Path::new(w) != root => root.join(rel),
            _ => absolute,
        },
        _ => absolute,
    };
    Some(std::fs::canonicalize(&mapped).unwrap_or(mapped))
}

/// Shows escalations, predicted conflicts and finished parties as editor messages, and keeps
/// the conflict diagnostics in step (asked once subscribed, then at each `conflict_*`
/// notification), until the connection ends.
async fn watch_notifications(editor: Editor, state: Arc<Mutex<State>>, daemon: Arc<Client>) {
    let Ok(mut sub) = daemon
        .subscribe(
            "subscribe_notifications",
            json!({}),
            "unsubscribe_notifications",
        )
        .await
    else {
        return;
    };
    // Subscribed first, so that a prediction made in between is not missed.
    refresh_conflicts(&editor, &state, &daemon).await;
    while let Some(Ok(n)) = sub.next().await {
        let typ = match n["kind"].as_str() {
            Some("escalation" | "conflict_predicted") => MessageType::WARNING,
            _ => MessageType::INFO,
        };
        if matches!(
            n["kind"].as_str(),
            Some("conflict_predicted" | "conflict_resolved" | "radar_stopped")
        ) {
            refresh_conflicts(&editor, &state, &daemon).await;
        }
        editor
            .show_message(typ, format!("Troupe: {}", n["text"].as_str().unwrap_or("")))
            .await;
    }
}

/// `$/progress` for a launched party until it ends.
async fn report_party(editor: Editor, daemon: Arc<Client>, party: String) {
    let token = NumberOrString::String(format!("troupe-party-{party}"));
    if editor
        .create_work_done_progress(token.clone())
        .await
        .is_err()
    {
        return; // the editor does not do progress
    }
    let progress = editor
        .progress(token, "Troupe party")
        .with_percentage(0)
        .begin()
        .await;
    loop {
        let Ok(s) = daemon
            .call("get_party_status", json!({ "party_id": party }))
            .await
        else {
            break;
        };
        let members = s["members"].as_array().map_or(0, Vec::len).max(1);
        let done = s["members"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|m| matches!(m["status"].as_str(), Some("completed" | "skipped")))
            .count();
        let status = s["party"]["status"].as_str().unwrap_or("?").to_string();
        if !matches!(status.as_str(), "pending" | "running") {
            progress
                .finish_with_message(format!(
                    "{} {status}",
                    s["party"]["name"].as_str().unwrap_or("")
                ))
                .await;
            return;
        }
        progress
            .report_with_message(
                format!("{done}/{members} members done"),
                (done * 100 / members) as u32,
            )
            .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}
