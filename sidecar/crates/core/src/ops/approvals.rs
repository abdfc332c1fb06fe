//! Approval operations: a worker's `request_permission` (stored, answered by a matching rule or
//! left for a person, timed out to deny; the call long-polls and can be resumed after a
//! reconnect), `list_approvals`, `decide_approval` (approve, deny, abort, approve_pattern),
//! and the rules' `list_approval_rules` / `revoke_approval_rule`. How a rule matches is in
//! `rules`; what no rule may answer (paths outside the member's checkout, sensitive paths,
//! large diffs) is `escalation`, with `crate::guardrails`.
//!
//! Rules are globs. Each pending request has a timer that denies it at its deadline, re-armed
//! after a restart. A request is decided once, and a worker's requests in order (both in the
//! store's transaction). A request whose path resolves (`..` and symlinks followed) outside the
//! asking run's checkout is flagged `outside_worktree` and dangerous, and no rule answers it. A
//! request of a run that has ended is never pending: ending the run expires it, and one arriving
//! from an ended run is stored expired.

use std::path::{Path, PathBuf};
use std::time::Duration;

use globset::Glob;
use troupe_engine::AgentDefinition;
use troupe_engine::collab::ToolVerdict;
use troupe_store::{
    AgentRun, Approval, ApprovalRule, Decision, NewApproval, NewNotification, RunStatus, Store,
};

use crate::daemon::Daemon;
use crate::guardrails::edits;
use crate::guardrails::shell;
use crate::hub::Hub;
use crate::ops::MAX_WAIT_MS;
use crate::orchestrator::Command;
use troupe_api::ApiError;
use troupe_api::types::*;

pub use crate::hub::announce_expired;
use crate::hub::wake_key;

mod rules;
use rules::{PathSubject, Subject};

/// How long a request waits for a person when its agent does not say.
pub const DEFAULT_APPROVAL_TIMEOUT: Duration = Duration::from_secs(300);
const DEFAULT_WAIT_MS: u64 = 30_000;

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// What rule patterns match: the file path, else the command, else the input as JSON.
fn subject(file_path: Option<&str>, input: &serde_json::Value) -> String {
    if let Some(path) = file_path {
        return path.to_string();
    }
    for key in ["command", "file_path", "path", "url"] {
        if let Some(s) = input.get(key).and_then(|v| v.as_str()) {
            return s.to_string();
        }
    }
    input.to_string()
}

/// Why a request is flagged when its path lies outside the asking member's checkout.
pub const OUTSIDE_WORKTREE: &str = "outside the member's worktree";

/// The first path of a request (its `file_path`, or the input's `file_path`, `path`,
/// `notebook_path` or `abs_path`) that lies outside the asking run's checkout, resolved against it (`..` and
/// symlinks followed as the system would), if any.
fn outside_path(
    run: Option<&AgentRun>,
    file_path: Option<&str>,
    input: &serde_json::Value,
) -> Option<String> {
    let workdir = Path::new(run?.workdir.as_deref()?);
    let root = workdir
        .canonicalize()
        .unwrap_or_else(|_| workdir.to_path_buf());
    request_paths(file_path, input)
        .find(|p| !resolve(&root, p).starts_with(&root))
        .map(str::to_string)
}

/// What the guardrails and the rules see of a request.
struct Examined {
    /// Why no rule may answer it, if none may: a path outside the member's checkout (the
    /// second value: true), a sensitive path, or a diff over the limit (`crate::guardrails`).
    escalation: Option<(String, bool)>,
    /// What rules match.
    subject: Subject,
}

/// Where a request's paths lie, what the guardrails say of it and what the rules match.
fn examine(
    d: &Daemon,
    project_id: &str,
    run: Option<&AgentRun>,
    cwd: &str,
    file_path: Option<&str>,
    input: &serde_json::Value,
    diff: Option<&str>,
) -> Examined {
    let root = d
        .store
        .get_project(project_id)
        .map(|p| PathBuf::from(p.root_path))
        .ok();
    // Paths resolve against where the caller works (a member's checkout, else the session's
    // directory; a command's own `cwd` from there) and are matched from the root of that
    // checkout (the member's worktree, else the project's main checkout).
    let canonical = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    let workdir = run.and_then(|r| r.workdir.as_deref()).map(Path::new);
    let named = workdir.or(root.as_deref()).unwrap_or(Path::new(cwd));
    let checkout = canonical(named);
    let mut base = canonical(workdir.unwrap_or(Path::new(cwd)));
    if let Some(dir) = input.get("cwd").and_then(|v| v.as_str()) {
        base = resolve(&base, dir);
    }
    let place = Place {
        base,
        roots: [checkout.clone(), named.to_path_buf()],
        checkout,
    };

    let command = input
        .get("command")
        .and_then(|v| v.as_str())
        .map(shell::Command::read);
    let words = match &command {
        Some(Ok(c)) => c.path_words(),
        _ => Vec::new(),
    };
    // A command's first word that reaches outside the checkout: no rule answers it, and a
    // member is flagged for it.
    let reaching = match &command {
        Some(Ok(c)) => reaching(c, &place),
        _ => None,
    };
    // The kinds in the order `subject` takes them.
    let path_in_input = ["file_path", "path"]
        .iter()
        .find_map(|k| input.get(*k).and_then(|v| v.as_str()));
    let subject = match (file_path, &command, path_in_input) {
        (Some(path), _, _) | (None, None, Some(path)) => Subject::Path(place.path_subject(path)),
        (None, Some(Ok(c)), _) => Subject::Command(
            (reaching.is_none() && c.opaque_expansions().next().is_none())
                .then(|| c.tokens.clone()),
        ),
        (None, Some(Err(_)), _) => Subject::Command(None),
        (None, None, None) => Subject::Raw(subject(None, input)),
    };
    let escalation = escalation(
        run,
        root.as_deref(),
        &place,
        file_path,
        input,
        (&words, reaching),
        diff,
    );
    Examined {
        escalation,
        subject,
    }
}

/// The rule that answers a sandboxed member's file edit inside its own checkout, in a project
/// that lets those through (recorded as the request's rule).
pub const SANDBOX_RULE: &str = "sandbox:own-checkout";

/// Whether a request's effects stay in the asking member's box: a file edit inside its own
/// checkout (a clone of its own, not the project), or a command whose words stay there (no
/// path outside it, nothing expanded), while the member runs in the box (it can write nothing
/// else, reach no network but its proxy, read none of the person's secrets). Then the project's
/// `.troupe/config.toml` `[sandbox] approve_own_checkout_edits` and `approve_in_box_commands`
/// (both true unless set false) let it through, and only what leaves the box reaches the
/// person: a path outside, a sensitive path or a large diff (escalated before this is asked), a
/// new host (the egress proxy asks).
fn sandboxed_worktree_edit(
    d: &Daemon,
    run: Option<&AgentRun>,
    project_id: &str,
    seen: &Subject,
) -> bool {
    let edit = matches!(seen, Subject::Path(Some(_)));
    let command = matches!(seen, Subject::Command(Some(_)));
    if !d.sandbox.is_on() || !(edit || command) {
        return false;
    }
    // A remote member runs on its worker, outside this daemon's box.
    if run.is_some_and(|r| r.definition.get("pool").is_some_and(|p| !p.is_null())) {
        return false;
    }
    let Some(workdir) = run.and_then(|r| r.workdir.as_deref()).map(Path::new) else {
        return false;
    };
    let Ok(project) = d.store.get_project(project_id) else {
        return false;
    };
    let root = Path::new(&project.root_path);
    let canonical = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    if canonical(workdir) == canonical(root) {
        return false;
    }
    match crate::project_config::ProjectConfig::load(root) {
        Ok(Some(c)) if edit => c.approve_own_checkout_edits(),
        Ok(Some(c)) => c.approve_in_box_commands(),
        Ok(None) => true,
        Err(_) => false,
    }
}

/// Where a request's relative paths start, and the checkout they are matched from.
struct Place {
    /// The caller's directory (canonical).
    base: PathBuf,
    /// The checkout's root (canonical).
    checkout: PathBuf,
    /// Its names: canonical, then as the run or the project gives it.
    roots: [PathBuf; 2],
}

impl Place {
    /// `path` as the rules see it, if it stays in the checkout (lexically and through
    /// symlinks).
    fn path_subject(&self, path: &str) -> Option<PathSubject> {
        if !resolve(&self.base, path).starts_with(&self.checkout) {
            return None;
        }
        PathSubject::new(&self.base, &self.roots, path)
    }

    /// `path` from the checkout's root, or whole if it lies outside.
    fn relative(&self, path: &str) -> String {
        let full = resolve(&self.base, path);
        full.strip_prefix(&self.checkout)
            .map(|r| r.to_string_lossy().into_owned())
            .unwrap_or_else(|_| full.to_string_lossy().into_owned())
    }
}

/// Why no rule may answer a request, if none may (see `Examined`). `command` is a shell
/// command's path words and the first of them that reaches outside the checkout.
fn escalation(
    run: Option<&AgentRun>,
    root: Option<&Path>,
    place: &Place,
    file_path: Option<&str>,
    input: &serde_json::Value,
    (words, reaching): (&[&str], Option<String>),
    diff: Option<&str>,
) -> Option<(String, bool)> {
    if let Some(path) = outside_path(run, file_path, input) {
        return Some((format!("{OUTSIDE_WORKTREE} ({path})"), true));
    }
    let member = run.is_some_and(|r| r.workdir.is_some());
    if let (true, Some(word)) = (member, reaching) {
        return Some((format!("{OUTSIDE_WORKTREE} ({word})"), true));
    }
    let guard = crate::guardrails::Guardrails::for_project(root?);
    let rels: Vec<String> = request_paths(file_path, input)
        .chain(words.iter().copied())
        .map(|p| place.relative(p))
        .collect();
    if let Some((path, pattern)) = guard.sensitive(rels.iter().map(String::as_str)) {
        return Some((format!("sensitive path {path} (matches {pattern})"), false));
    }
    // The diff the caller sent, or the one its input makes, whichever is larger.
    let on_disk = |p: &str| read_for_diff(&resolve(&place.base, p));
    let changed = diff
        .map(edits::diff_text_lines)
        .unwrap_or(0)
        .max(edits::changed_lines(input, file_path, &on_disk));
    let lines = guard.too_many_changes(changed)?;
    Some((
        format!(
            "a diff of {lines} changed lines (over the {}-line limit)",
            guard.max_diff_lines()
        ),
        false,
    ))
}

/// Most of a file read to count a diff against.
const MAX_DIFF_READ: u64 = 8 << 20;

/// The lines a file too large to read stands for: more than any sensible limit.
const LINES_OF_A_LARGE_FILE: usize = 100_000;

/// The text of a regular file (not a FIFO or a device) to count a diff against; one too large
/// to read stands for `LINES_OF_A_LARGE_FILE` empty lines (replacing it is a large diff).
fn read_for_diff(path: &Path) -> Option<String> {
    let meta = std::fs::metadata(path).ok()?;
    if !meta.is_file() {
        return None;
    }
    if meta.len() > MAX_DIFF_READ {
        return Some("\n".repeat(LINES_OF_A_LARGE_FILE));
    }
    std::fs::read_to_string(path).ok()
}

/// Harmless device paths a command may name outside the checkout (`2>/dev/null`).
const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/random",
    "/dev/urandom",
    "/dev/stdin",
    "/dev/stdout",
    "/dev/stderr",
    "/dev/tty",
];

/// The first thing in `command` that reaches outside the checkout: `$HOME`, or a word as
/// `word_escapes` reads it.
fn reaching(command: &shell::Command, place: &Place) -> Option<String> {
    if command.expands_home() {
        return Some("$HOME".into());
    }
    command
        .path_words()
        .into_iter()
        .find(|w| word_escapes(place, w))
        .map(str::to_string)
}

/// Whether a command's `word`, taken as a path from where the command runs, leaves the
/// checkout: `~…`, an absolute path elsewhere (a few devices aside), a `..` (or a glob that
/// matches `..`, as `.*` does in `sh`) or a symlink that leads out.
fn word_escapes(place: &Place, word: &str) -> bool {
    if word.starts_with('~') {
        return true;
    }
    if DEVICES.contains(&word) {
        return false;
    }
    // A glob reaches a dot file only when it starts with a dot (`.*`, `.?`); a brace expands
    // as text (`{..,x}`).
    let as_dots = |part: &str| {
        part.starts_with(['.', '{'])
            && part.contains(['*', '?', '[', '{'])
            && Glob::new(part).is_ok_and(|g| g.compile_matcher().is_match(".."))
    };
    let path = word
        .split('/')
        .map(|part| if as_dots(part) { ".." } else { part })
        .collect::<Vec<_>>()
        .join("/");
    !resolve(&place.base, &path).starts_with(&place.checkout)
}

/// The paths a request names: its `file_path`, then the input's (a command's `cwd` and the
/// paths of ACP diffs among them).
fn request_paths<'a>(
    file_path: Option<&'a str>,
    input: &'a serde_json::Value,
) -> impl Iterator<Item = &'a str> {
    let in_input = ["file_path", "path", "notebook_path", "abs_path", "cwd"]
        .into_iter()
        .filter_map(|k| input.get(k).and_then(|v| v.as_str()));
    let in_diffs = input
        .get("diffs")
        .and_then(|v| v.as_array())
        .into_iter()
        .flatten()
        .filter_map(|d| d.get("path").and_then(|v| v.as_str()));
    file_path.into_iter().chain(in_input).chain(in_diffs)
}

/// `path` (relative to `base`) as the system would find it: `..` after the symlinks before it.
fn resolve(base: &Path, path: &str) -> PathBuf {
    use std::path::Component;
    let joined = base.join(path);
    let mut at = PathBuf::from("/");
    for part in joined.components() {
        match part {
            Component::Prefix(_) | Component::RootDir => at = PathBuf::from("/"),
            Component::CurDir => {}
            Component::ParentDir => {
                at.pop();
            }
            Component::Normal(name) => {
                at.push(name);
                if let Ok(real) = at.canonicalize() {
                    at = real;
                }
            }
        }
    }
    at
}

fn result(a: &Approval) -> PermissionResult {
    PermissionResult {
        approval_id: a.approval_id.clone(),
        status: a.status,
        decision: a.decision.clone(),
        reason: a.reason.clone(),
    }
}

/// Denies `approval_id` when its deadline passes, unless someone decided first.
pub fn arm_timeout(
    store: Store,
    hub: std::sync::Arc<Hub>,
    approval_id: String,
    expires_at_ms: i64,
) {
    tokio::spawn(async move {
        let wait = u64::try_from(expires_at_ms - now_ms()).unwrap_or(0);
        tokio::time::sleep(Duration::from_millis(wait)).await;
        let decided = store
            .decide_approval(Decision {
                approval_id: approval_id.clone(),
                status: ApprovalStatus::Denied,
                decision: "timeout".into(),
                decided_by: Some("troupe".into()),
                reason: Some("nobody answered in time".into()),
                new_rule: None,
                in_order: false,
            })
            .await;
        match decided {
            Ok(_) => {
                hub.publish(&wake_key(&approval_id), 1);
            }
            // Someone decided first.
            Err(troupe_store::StoreError::Conflict(_)) => {}
            Err(e) => {
                tracing::warn!(approval = %approval_id, error = %e, "cannot time out an approval")
            }
        }
    });
}

/// Re-arms the deadline of every pending request (after a restart).
pub fn arm_pending(
    store: &Store,
    hub: &std::sync::Arc<Hub>,
) -> Result<(), troupe_store::StoreError> {
    for a in store.list_approvals(Some(ApprovalStatus::Pending), None, None, None, false)? {
        arm_timeout(store.clone(), hub.clone(), a.approval_id, a.expires_at_ms);
    }
    Ok(())
}

/// `request_permission` until it is decided: for the daemon's own runs (executors, ACP
/// agents), which wait as long as the request does (rules apply; its timeout denies).
pub async fn request_permission_decided(
    d: &Daemon,
    p: RequestPermissionParams,
) -> Result<PermissionResult, ApiError> {
    let (session_id, wait_ms) = (p.session_id.clone(), p.wait_ms);
    let mut r = request_permission(d, p).await?;
    while r.status == ApprovalStatus::Pending {
        let again = RequestPermissionParams {
            session_id: session_id.clone(),
            approval_id: Some(r.approval_id),
            wait_ms,
            ..RequestPermissionParams::default()
        };
        r = request_permission(d, again).await?;
    }
    Ok(r)
}

pub async fn request_permission(
    d: &Daemon,
    p: RequestPermissionParams,
) -> Result<PermissionResult, ApiError> {
    const OP: &str = "request_permission";
    let wait_ms = p.wait_ms.unwrap_or(DEFAULT_WAIT_MS);
    if wait_ms > MAX_WAIT_MS {
        return Err(ApiError::invalid(
            OP,
            format!("wait_ms {wait_ms} is over the maximum of {MAX_WAIT_MS}"),
        ));
    }
    let approval = match &p.approval_id {
        Some(id) => {
            let a = d.store.get_approval(id)?;
            if a.session_id != p.session_id {
                return Err(ApiError::Forbidden(format!(
                    "approval {id} belongs to session {}, not {}",
                    a.session_id, p.session_id
                )));
            }
            a
        }
        None => {
            let tool = p
                .tool_name
                .clone()
                .filter(|t| !t.trim().is_empty())
                .ok_or_else(|| {
                    ApiError::invalid(
                        OP,
                        "tool_name is required (or approval_id to resume waiting)",
                    )
                })?;
            let input = p.input.clone().unwrap_or(serde_json::json!({}));
            let session = d.store.get_session(&p.session_id)?;
            let run = d.store.run_of_session(&session.session_id)?;
            let timeout = run
                .as_ref()
                .and_then(|r| serde_json::from_value::<AgentDefinition>(r.definition.clone()).ok())
                .and_then(|def| def.approval_timeout_secs)
                .and_then(|s| Duration::try_from_secs_f64(s).ok())
                .unwrap_or(DEFAULT_APPROVAL_TIMEOUT);
            let party_id = run
                .as_ref()
                .and_then(|r| r.party_id.clone())
                .or(session.party_id.clone());
            let subject = subject(p.file_path.as_deref(), &input);
            // A path outside the member's checkout, a sensitive path or a diff over the limit is
            // always a person's call.
            let Examined {
                escalation: escalated,
                subject: seen,
            } = examine(
                d,
                &session.project_id,
                run.as_ref(),
                &session.cwd,
                p.file_path.as_deref(),
                &input,
                p.diff.as_deref(),
            );
            let outside = escalated.as_ref().is_some_and(|(_, outside)| *outside);
            // The tool policy of the step the caller works on (seed 004): allowed tools pass,
            // `approve_tools` need a person, blocked ones are denied (and logged as denied).
            let (verdict, steps) =
                crate::collab::tool_verdict(&d.store, &session.session_id, &tool);
            let approved_by = match (&escalated, &verdict) {
                (Some(_), _) | (None, ToolVerdict::Ask | ToolVerdict::Deny(_)) => None,
                (None, ToolVerdict::Allow) => Some(format!("step:{}", steps.join(","))),
                (None, ToolVerdict::Default) => d
                    .store
                    .active_rules(&session.project_id, party_id.as_deref())?
                    .into_iter()
                    .find(|r| rules::matches(r, &tool, &seen))
                    .map(|r| r.rule_id)
                    .or_else(|| {
                        sandboxed_worktree_edit(d, run.as_ref(), &session.project_id, &seen)
                            .then(|| SANDBOX_RULE.to_string())
                    }),
            };
            let (is_dangerous, danger_reason) = match &escalated {
                Some((why, _)) => (
                    true,
                    Some(match &p.danger_reason {
                        Some(theirs) => format!("{why}; {theirs}"),
                        None => why.clone(),
                    }),
                ),
                None => (p.is_dangerous, p.danger_reason.clone()),
            };
            let (a, created) = d
                .store
                .create_approval(NewApproval {
                    request_key: p.request_key.clone(),
                    project_id: session.project_id.clone(),
                    session_id: session.session_id.clone(),
                    run_id: run.as_ref().map(|r| r.run_id.clone()),
                    party_id,
                    role_name: run.as_ref().and_then(|r| r.role_name.clone()),
                    tool_name: tool,
                    input,
                    subject,
                    file_path: p.file_path.clone(),
                    start_line: p.start_line,
                    end_line: p.end_line,
                    diff: p.diff.clone(),
                    is_dangerous,
                    danger_reason,
                    outside_worktree: outside,
                    expires_at_ms: now_ms()
                        + i64::try_from(timeout.as_millis()).unwrap_or(i64::MAX / 2),
                    approved_by_rule: approved_by,
                })
                .await?;
            let a = match verdict {
                ToolVerdict::Deny(why) if created && a.status == ApprovalStatus::Pending => {
                    let denied = d
                        .store
                        .decide_approval(Decision {
                            approval_id: a.approval_id.clone(),
                            status: ApprovalStatus::Denied,
                            decision: "deny".into(),
                            decided_by: Some("step policy".into()),
                            reason: Some(why),
                            new_rule: None,
                            in_order: false,
                        })
                        .await?;
                    return Ok(result(&denied));
                }
                _ => a,
            };
            if created {
                // A guardrail tripped: the person hears of it as an escalation.
                if let (Some((why, _)), ApprovalStatus::Pending) = (&escalated, a.status) {
                    escalate(d, &a, why).await;
                }
            }
            if created && a.status == ApprovalStatus::Pending {
                arm_timeout(
                    d.store.clone(),
                    d.hub.clone(),
                    a.approval_id.clone(),
                    a.expires_at_ms,
                );
            }
            a
        }
    };
    // Wait for the decision (watch first, then read, so a decision in between still wakes us).
    let key = wake_key(&approval.approval_id);
    let mut wake = d.hub.watch(&key);
    let deadline = tokio::time::Instant::now() + Duration::from_millis(wait_ms);
    // Read again now that we watch: a decision taken since the request was stored (a quick
    // editor, a rule) published before this watch existed.
    let mut current = match approval.status {
        ApprovalStatus::Pending => d.store.get_approval(&approval.approval_id)?,
        _ => approval,
    };
    while current.status == ApprovalStatus::Pending {
        match tokio::time::timeout_at(deadline, wake.changed()).await {
            Ok(Ok(())) => current = d.store.get_approval(&current.approval_id)?,
            Ok(Err(_)) | Err(_) => break,
        }
    }
    // A decided request's wake-up key is not needed again.
    drop(wake);
    if current.status != ApprovalStatus::Pending {
        d.hub.forget(&key);
    }
    Ok(result(&current))
}

/// Tells the person (a durable notification) that a request needs them whatever the rules say.
async fn escalate(d: &Daemon, a: &Approval, why: &str) {
    let note = NewNotification {
        project_id: Some(a.project_id.clone()),
        party_id: a.party_id.clone(),
        kind: "approval_escalated".into(),
        text: format!(
            "{} asks for {} {}: {why}; no rule answers it, a person must decide",
            a.role_name.as_deref().unwrap_or(&a.session_id),
            a.tool_name,
            a.subject
        ),
        data: serde_json::json!({ "approval_id": a.approval_id, "reason": why }),
    };
    if let Err(e) = d.store.add_notification(note).await {
        tracing::warn!(approval = %a.approval_id, error = %e, "cannot record an escalation");
    }
}

/// The approval rule that would answer this call at once, if any (no request is made).
pub fn matching_rule(
    d: &Daemon,
    session_id: &str,
    tool: &str,
    input: &serde_json::Value,
    file_path: Option<&str>,
) -> Result<Option<ApprovalRule>, ApiError> {
    let session = d.store.get_session(session_id)?;
    let run = d.store.run_of_session(session_id)?;
    let party_id = run
        .as_ref()
        .and_then(|r| r.party_id.clone())
        .or(session.party_id.clone());
    let seen = examine(
        d,
        &session.project_id,
        run.as_ref(),
        &session.cwd,
        file_path,
        input,
        None,
    );
    if seen.escalation.is_some() {
        return Ok(None);
    }
    Ok(d.store
        .active_rules(&session.project_id, party_id.as_deref())?
        .into_iter()
        .find(|r| rules::matches(r, tool, &seen.subject)))
}

pub async fn list_approvals(
    d: &Daemon,
    p: ListApprovalsParams,
) -> Result<ApprovalsResult, ApiError> {
    let approvals = d.store.list_approvals(
        p.status,
        p.project_id.as_deref(),
        p.party_id.as_deref(),
        p.session_id.as_deref(),
        p.include_expired,
    )?;
    Ok(ApprovalsResult { approvals })
}

pub async fn decide_approval(
    d: &Daemon,
    p: DecideApprovalParams,
) -> Result<ApprovalResult, ApiError> {
    const OP: &str = "decide_approval";
    let a = d.store.get_approval(&p.approval_id)?;
    let (status, decision) = match p.decision {
        DecisionKind::Approve => (ApprovalStatus::Approved, "approve"),
        DecisionKind::Deny => (ApprovalStatus::Denied, "deny"),
        DecisionKind::Abort => (ApprovalStatus::Aborted, "abort"),
        DecisionKind::ApprovePattern => (ApprovalStatus::Approved, "approve_pattern"),
    };
    let new_rule = if p.decision == DecisionKind::ApprovePattern {
        if a.outside_worktree {
            return Err(ApiError::invalid(
                OP,
                format!(
                    "approval {} asks for a path {OUTSIDE_WORKTREE}: no rule may answer such a \
                     request; approve it once or deny it",
                    a.approval_id
                ),
            ));
        }
        let pattern = p
            .pattern
            .clone()
            .unwrap_or_else(|| globset::escape(&a.subject));
        Glob::new(&pattern).map_err(|e| {
            ApiError::invalid(OP, format!("pattern {pattern:?} is not a valid glob: {e}"))
        })?;
        let party = match p.scope {
            Some(RuleScope::Project) => None,
            Some(RuleScope::Party) if a.party_id.is_none() => {
                return Err(ApiError::invalid(
                    OP,
                    "scope party: the request did not come from a party",
                ));
            }
            _ => a.party_id.clone(),
        };
        Some((a.tool_name.clone(), pattern, party))
    } else {
        if p.pattern.is_some() || p.scope.is_some() {
            return Err(ApiError::invalid(
                OP,
                "pattern and scope go with decision approve_pattern",
            ));
        }
        None
    };
    let decided = d
        .store
        .decide_approval(Decision {
            approval_id: p.approval_id.clone(),
            status,
            decision: decision.into(),
            decided_by: p.decided_by.or(Some("user".into())),
            reason: p.reason,
            new_rule,
            in_order: true,
        })
        .await?;
    d.hub.publish(&wake_key(&decided.approval_id), 1);
    if p.decision == DecisionKind::Abort
        && let Some(run_id) = &decided.run_id
    {
        let run = d.store.get_run(run_id)?;
        if run.party_id.is_none() {
            let end = d
                .store
                .finish_run(
                    run_id.clone(),
                    RunStatus::Cancelled,
                    None,
                    Some("aborted by the person at an approval".into()),
                )
                .await?;
            announce_expired(&d.hub, &end.expired_approvals);
        }
        d.orchestrator.tell(Command::StopRun {
            run_id: run_id.clone(),
        });
    }
    Ok(ApprovalResult { approval: decided })
}

pub async fn list_approval_rules(
    d: &Daemon,
    p: ListApprovalRulesParams,
) -> Result<ApprovalRulesResult, ApiError> {
    Ok(ApprovalRulesResult {
        rules: d.store.list_rules(p.project_id.as_deref())?,
    })
}

pub async fn revoke_approval_rule(
    d: &Daemon,
    p: RuleIdParams,
) -> Result<ApprovalRuleResult, ApiError> {
    Ok(ApprovalRuleResult {
        rule: d.store.revoke_rule(p.rule_id).await?,
    })
}

#[cfg(test)]
mod tests;
