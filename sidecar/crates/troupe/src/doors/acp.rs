//! `troupe acp`: Troupe as an Agent Client Protocol agent on stdio, for editors that speak ACP
//! (Zed, JetBrains, Neovim through codecompanion or agentic.nvim, Emacs agent-shell). A client
//! of the daemon like `troupe lsp`. An ACP session is a Troupe session (`cli: "acp"`) of the
//! project of its `cwd`; a prompt starts the project's default (`.troupe/config.toml`: a party,
//! or an agent or pattern) with the prompt as its task, or runs a slash command. Its turn lasts
//! until what it started ends, streaming the timeline (`subscribe_events`) as ACP updates
//! (`render.rs`); the members' permission requests and the party's other inbox items with
//! choices are forwarded as `session/request_permission` and answered through the same
//! operations every door uses, so a decision in VS Code, Neovim or Zed is one decision.
//! `session/cancel` cancels what the turn started; a closed connection leaves it running
//! (`session/load` replays it and the rest of the session from the timeline).
//!
//! A question in the person's own words goes as a one-field form (`elicitation/create`) to an
//! editor that fills forms. Each forwarded item is a task of its own, withdrawn
//! (`$/cancel_request`) when the item is answered elsewhere. A loaded session follows its last
//! party, if it still runs, from the last event replayed: no gap, no repeat. A turn is registered
//! before its first await, so a `session/cancel` right behind the prompt finds it.

mod render;
mod wire;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use troupe_api::layout::Layout;
use troupe_core::acp::Choice;
use troupe_core::project_config::ProjectConfig;

use crate::client::{self, CallError, Client};
use render::Render;
use wire::{
    Answer, Ask, AskOption, BoxFuture, Door, DoorError, Out, Peer, SessionEntry, SlashCommand,
    Stop, ToolCallOut,
};

/// Serves ACP on stdin/stdout until the editor closes it.
pub async fn run(layout: Layout) -> anyhow::Result<()> {
    let door = AcpDoor(Arc::new(Inner {
        layout,
        daemon: tokio::sync::Mutex::new(None),
        turns: Mutex::new(HashMap::new()),
        followers: Mutex::new(HashMap::new()),
    }));
    wire::serve(Arc::new(door)).await
}

/// What a prompt with no slash command answers when the project names no default: nothing is
/// started (the scripted demo never runs in a person's repository), and this says how to set
/// one up.
const NO_DEFAULT: &str = "Nothing was started: this project names no Troupe team yet (no \
`.troupe/config.toml` from here up to the repository's root). Set one up with a \
`.troupe/config.toml` holding `[default]` and `party = \"<party>\"` or `agent = \"<agent>\"` \
(your definitions: `troupe call list_party_definitions`, `troupe call list_agent_definitions`), \
or name one for this prompt: `/party <party> <task>` or `/agent <agent> <task>`. \
`troupe demo` shows a scripted party in a scratch repository.\n";

/// Events replayed per read by `session/load`.
const REPLAY_BATCH: u32 = 1000;

const COMMANDS: &[SlashCommand] = &[
    SlashCommand {
        name: "party",
        description: "Launch a party; the rest of the prompt is its task",
        hint: Some("<party> <task>"),
    },
    SlashCommand {
        name: "issue",
        description: "Launch a party on an issue of the project's forge repository; the work arrives as a pull request",
        hint: Some("<party> <OWNER/REPO#N | #N | issue URL>"),
    },
    SlashCommand {
        name: "agent",
        description: "Run one agent (or a pattern); the rest of the prompt is its task",
        hint: Some("<agent> [model=… runner=… isolation=… timeout=…] <task>"),
    },
    SlashCommand {
        name: "status",
        description: "The parties this session launched, and their members",
        hint: None,
    },
    SlashCommand {
        name: "land",
        description: "Land the last party's work through the merge queue",
        hint: Some("[merge|rebase|squash]"),
    },
    SlashCommand {
        name: "approve",
        description: "Approve the oldest pending request of this project (`all`: every one)",
        hint: Some("[all]"),
    },
    SlashCommand {
        name: "deny",
        description: "Deny the oldest pending request of this project",
        hint: None,
    },
    SlashCommand {
        name: "inbox",
        description: "Everything in this project waiting for you",
        hint: None,
    },
    SlashCommand {
        name: "answer",
        description: "Answer the oldest question an agent asks in your own words",
        hint: Some("<your words>"),
    },
    SlashCommand {
        name: "cancel",
        description: "Cancel the last party this session launched",
        hint: None,
    },
    SlashCommand {
        name: "help",
        description: "What a prompt starts, and these commands",
        hint: None,
    },
];

#[derive(Clone)]
struct AcpDoor(Arc<Inner>);

struct Inner {
    layout: Layout,
    daemon: tokio::sync::Mutex<Option<Arc<Client>>>,
    /// The running turn of each session: its cancel switch.
    turns: Mutex<HashMap<String, watch::Sender<bool>>>,
    /// A loaded session following its running party (no prompt waits on it: a prompt may run
    /// beside it); its cancel switch.
    followers: Mutex<HashMap<String, watch::Sender<bool>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// An operation's error, as the editor is told it: the daemon's typed refusals keep their code
/// (found by fuzzing: `/land` on a party with nothing to land was an internal error).
fn failed(op: &str, e: CallError) -> DoorError {
    let text = format!("{op}: {e}");
    match (e.kind(), e.code()) {
        (Some("not_found"), _) => DoorError::NotFound(text),
        (Some("invalid_params"), _) => DoorError::InvalidParams(text),
        (Some(kind), Some(code)) if kind != "internal" => DoorError::Refused {
            code,
            message: text,
        },
        _ => DoorError::Internal(text),
    }
}

fn s(v: &Value, key: &str) -> String {
    v.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

impl Inner {
    /// The connection to the daemon, made again (and the daemon started) when it was lost.
    async fn daemon(&self) -> Result<Arc<Client>, DoorError> {
        let mut slot = self.daemon.lock().await;
        if let Some(c) = slot.as_ref().filter(|c| c.is_connected()) {
            return Ok(c.clone());
        }
        let fresh = Arc::new(
            client::connect(&self.layout, true)
                .await
                .map_err(|e| DoorError::Internal(format!("cannot reach the daemon: {e:#}")))?,
        );
        *slot = Some(fresh.clone());
        Ok(fresh)
    }

    async fn call(&self, op: &str, args: Value) -> Result<Value, DoorError> {
        self.daemon()
            .await?
            .call(op, args)
            .await
            .map_err(|e| failed(op, e))
    }

    /// The parties a session launched, newest first.
    async fn parties_of(&self, session: &str) -> Result<Vec<Value>, DoorError> {
        let listed = self
            .call("list_parties", json!({ "created_by_session_id": session }))
            .await?;
        Ok(listed["parties"].as_array().cloned().unwrap_or_default())
    }

    /// The session, or a clear error for an id no `session/new` gave.
    async fn session(&self, id: &str) -> Result<Value, DoorError> {
        match self.call("get_session", json!({ "session_id": id })).await {
            Ok(v) => Ok(v["session"].clone()),
            Err(DoorError::NotFound(_)) => Err(DoorError::NotFound(format!(
                "no session {id}: open one with session/new (or session/load)"
            ))),
            Err(e) => Err(e),
        }
    }
}

impl Door for AcpDoor {
    fn new_session(&self, cwd: PathBuf) -> BoxFuture<Result<String, DoorError>> {
        let d = self.0.clone();
        Box::pin(async move {
            if !cwd.is_absolute() {
                return Err(DoorError::InvalidParams(format!(
                    "cwd {} is not an absolute path",
                    cwd.display()
                )));
            }
            let r = d
                .call(
                    "register_session",
                    json!({ "cli": "acp", "cwd": cwd.display().to_string() }),
                )
                .await?;
            Ok(s(&r, "session_id"))
        })
    }

    fn load_session(
        &self,
        session: String,
        _cwd: PathBuf,
        peer: Peer,
    ) -> BoxFuture<Result<(), DoorError>> {
        let d = self.0.clone();
        Box::pin(async move {
            let row = d.session(&session).await?;
            let Some((party, since)) = replay(&d, &session, &peer).await? else {
                return Ok(());
            };
            // Its party still runs: follow it on, as the turn that launched it did (a cancel
            // stops it; prompts run beside it).
            let (cancel_tx, cancel) = watch::channel(false);
            {
                let mut followers = lock(&d.followers);
                if followers.contains_key(&session) {
                    return Ok(());
                }
                followers.insert(session.clone(), cancel_tx);
            }
            let turn = Turn {
                d: d.clone(),
                session: session.clone(),
                row,
                peer,
                cancel,
            };
            tokio::spawn(async move {
                let _following = Following(turn.d.clone(), turn.session.clone());
                if let Err(e) = turn.resume(party, since).await {
                    tracing::debug!(error = %e, "a loaded party no longer followed");
                }
            });
            Ok(())
        })
    }

    fn list_sessions(
        &self,
        cwd: Option<PathBuf>,
    ) -> BoxFuture<Result<Vec<SessionEntry>, DoorError>> {
        let d = self.0.clone();
        Box::pin(async move {
            let args = match &cwd {
                Some(cwd) => json!({ "cwd": cwd.display().to_string() }),
                None => json!({}),
            };
            let listed = d.call("list_sessions", args).await?;
            let mut out = Vec::new();
            for session in listed["sessions"].as_array().into_iter().flatten() {
                if session["cli"] != "acp" {
                    continue;
                }
                let id = s(session, "session_id");
                let title =
                    d.parties_of(&id)
                        .await?
                        .first()
                        .map(|p| match p["inputs"]["task"].as_str() {
                            Some(task) => format!("{}: {}", s(p, "name"), first_line(task)),
                            None => s(p, "name"),
                        });
                out.push(SessionEntry {
                    id,
                    cwd: PathBuf::from(s(session, "cwd")),
                    title,
                    updated_at: Some(s(session, "last_seen_at")),
                });
            }
            Ok(out)
        })
    }

    fn prompt(
        &self,
        session: String,
        text: String,
        peer: Peer,
    ) -> BoxFuture<Result<Stop, DoorError>> {
        // The turn is registered before anything awaits: a `session/cancel` right behind the
        // prompt finds it.
        let (cancel_tx, cancel) = watch::channel(false);
        let busy = {
            let mut turns = lock(&self.0.turns);
            let busy = turns.contains_key(&session);
            if !busy {
                turns.insert(session.clone(), cancel_tx);
            }
            busy
        };
        let d = self.0.clone();
        Box::pin(async move {
            if busy {
                return Err(DoorError::InvalidRequest(format!(
                    "session {session} is already running a prompt: wait for its end or send session/cancel"
                )));
            }
            let _registered = Registered(d.clone(), session.clone());
            let row = d.session(&session).await?;
            let turn = Turn {
                d: d.clone(),
                session: session.clone(),
                row,
                peer,
                cancel,
            };
            turn.run(text.trim()).await
        })
    }

    fn cancel(&self, session: String) {
        if let Some(tx) = lock(&self.0.turns).get(&session) {
            tx.send_replace(true);
        }
        if let Some(tx) = lock(&self.0.followers).get(&session) {
            tx.send_replace(true);
        }
    }

    fn commands(&self) -> Vec<SlashCommand> {
        COMMANDS.to_vec()
    }
}

fn first_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or_default();
    match line.char_indices().nth(80) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line.to_string(),
    }
}

/// `/agent`'s overrides: leading `model=…`, `runner=…`, `isolation=…`, `timeout=…` (seconds,
/// 0 for no limit) words of the task; the overrides and the rest of the task.
fn agent_overrides(task: &str) -> Result<(serde_json::Map<String, Value>, &str), DoorError> {
    let mut overrides = serde_json::Map::new();
    let mut rest = task.trim_start();
    while let Some((word, after)) = rest
        .split_once(char::is_whitespace)
        .or(Some((rest, "")))
        .filter(|(w, _)| !w.is_empty())
    {
        let Some((key, value)) = word.split_once('=') else {
            break;
        };
        let value = match key {
            "model" | "runner" | "isolation" => Value::from(value),
            "timeout" => value
                .parse::<f64>()
                .ok()
                .filter(|t| t.is_finite())
                .map(Value::from)
                .ok_or_else(|| {
                    DoorError::InvalidParams(format!("/agent timeout={value}: a number of seconds"))
                })?,
            _ => break,
        };
        let key = if key == "timeout" {
            "timeout_secs"
        } else {
            key
        };
        overrides.insert(key.into(), value);
        rest = after.trim_start();
    }
    Ok((overrides, rest))
}

/// What a prompt without a slash command starts.
#[derive(Debug, Clone, PartialEq)]
enum Start {
    Party(String),
    Agent(String),
}

/// The project's `.troupe/config.toml` `[default]` (`party = "…"` or `agent = "…"`), looked up
/// from `cwd` up to the repository's root; none without one.
fn project_default(cwd: &Path) -> Result<Option<Start>, DoorError> {
    let mut dir = Some(cwd);
    while let Some(d) = dir {
        if let Some(config) = ProjectConfig::load(d).map_err(DoorError::InvalidParams)? {
            let path = config.path();
            let pick = |key: &str| config.string("default", key).map(str::to_string);
            return match (pick("party"), pick("agent")) {
                (Some(party), None) => Ok(Some(Start::Party(party))),
                (None, Some(agent)) => Ok(Some(Start::Agent(agent))),
                _ => Err(DoorError::InvalidParams(format!(
                    "{}: [default] must set exactly one of party = \"…\" or agent = \"…\"",
                    path.display()
                ))),
            };
        }
        if d.join(".git").exists() {
            break;
        }
        dir = d.parent();
    }
    Ok(None)
}

/// A running turn's entry in `Inner::turns`, removed when the turn ends (or fails).
struct Registered(Arc<Inner>, String);

impl Drop for Registered {
    fn drop(&mut self) {
        lock(&self.0.turns).remove(&self.1);
    }
}

/// A loaded session's follower, forgotten when it ends.
struct Following(Arc<Inner>, String);

impl Drop for Following {
    fn drop(&mut self) {
        lock(&self.0.followers).remove(&self.1);
    }
}

/// One prompt's turn.
struct Turn {
    d: Arc<Inner>,
    session: String,
    /// The session as the daemon has it.
    row: Value,
    peer: Peer,
    cancel: watch::Receiver<bool>,
}

/// What a turn follows until it ends.
enum Scope {
    Party(String),
    /// An agent run: its id, and the sessions of it and of the runs it started.
    Run(String, HashSet<String>),
}

impl Turn {
    fn say(&self, text: impl Into<String>) -> Result<(), DoorError> {
        self.peer.send(&self.session, Out::Text(text.into()))
    }

    async fn run(mut self, text: &str) -> Result<Stop, DoorError> {
        let Some(command) = text.strip_prefix('/') else {
            let cwd = PathBuf::from(s(&self.row, "cwd"));
            return match project_default(&cwd)? {
                Some(Start::Party(name)) => self.party(&name, text).await,
                Some(Start::Agent(name)) => self.agent(&name, text).await,
                None => self.first_team(&cwd, text).await,
            };
        };
        let (name, rest) = command
            .split_once(char::is_whitespace)
            .map_or((command, ""), |(n, r)| (n, r.trim()));
        let (first, after) = rest
            .split_once(char::is_whitespace)
            .map_or((rest, ""), |(a, b)| (a, b.trim()));
        match name {
            "party" if !first.is_empty() => self.party(first, after).await,
            "issue" if !first.is_empty() && !after.is_empty() => {
                self.launch(first, json!({ "issue": after })).await
            }
            "issue" => {
                self.say("Usage: /issue <party> <OWNER/REPO#N | #N | issue URL>\n")?;
                Ok(Stop::EndTurn)
            }
            "agent" if !first.is_empty() && !after.is_empty() => self.agent(first, after).await,
            "status" => self.status().await,
            "land" => self.land(first).await,
            "approve" => self.decide("approve", first == "all").await,
            "deny" => self.decide("deny", false).await,
            "inbox" => self.inbox().await,
            "answer" if !rest.is_empty() => self.answer(rest).await,
            "cancel" => self.cancel_last().await,
            "help" => {
                self.say(help())?;
                Ok(Stop::EndTurn)
            }
            "party" | "agent" => {
                self.say(format!("Usage: /{name} <{name}> <task>\n"))?;
                Ok(Stop::EndTurn)
            }
            "answer" => {
                self.say("Usage: /answer <your words>\n")?;
                Ok(Stop::EndTurn)
            }
            other => {
                self.say(format!("Unknown command /{other}.\n\n{}", help()))?;
                Ok(Stop::EndTurn)
            }
        }
    }

    /// Subscribes to the project's timeline (before starting anything, so nothing is missed).
    async fn events(&self) -> Result<(Arc<Client>, Subscription), DoorError> {
        let c = self.d.daemon().await?;
        let sub = c
            .subscribe(
                "subscribe_events",
                json!({ "project_id": s(&self.row, "project_id") }),
                "unsubscribe_events",
            )
            .await
            .map_err(|e| failed("subscribe_events", e))?;
        Ok((c, sub))
    }

    /// Follows a party the session launched earlier, from the event after `since`.
    async fn resume(mut self, party: String, since: i64) -> Result<Stop, DoorError> {
        let c = self.d.daemon().await?;
        let events = c
            .subscribe(
                "subscribe_events",
                json!({ "party_id": party, "since": since }),
                "unsubscribe_events",
            )
            .await
            .map_err(|e| failed("subscribe_events", e))?;
        self.follow(c, events, Scope::Party(party)).await
    }

    /// A prompt in a project without a team: the team made of the agent CLIs installed here
    /// (`crate::team`), written to the project's config and launched with the prompt as its
    /// task; without an agent CLI, what to install, and nothing changes.
    async fn first_team(&mut self, cwd: &Path, task: &str) -> Result<Stop, DoorError> {
        let root = troupe_core::project::resolve_project_root(cwd)
            .map(|(root, _)| root)
            .map_err(|e| DoorError::InvalidParams(format!("{}: {e}", cwd.display())))?;
        if troupe_worktree::repo_root(&root).is_err() {
            self.say(format!(
                "{NO_DEFAULT}\n{} is not in a git repository, and a team works in one (each \
                 member in its own worktree, the merge queue landing on your branch): `git init` \
                 it first.\n",
                root.display()
            ))?;
            return Ok(Stop::EndTurn);
        }
        let found = crate::team::detect(&root, std::env::var_os("PATH"), |k| std::env::var(k).ok());
        if found.installed.is_empty() {
            let mut text = String::from(NO_DEFAULT);
            text.push_str("\nNo agent CLI is installed to make one of. Install one (then log in or set its API key):\n");
            for v in crate::team::VENDORS {
                text.push_str(&format!("- {}: `{}`\n", v.label, v.install));
            }
            text.push_str("then send your prompt again, or run `troupe init` in the project.\n");
            self.say(text)?;
            return Ok(Stop::EndTurn);
        }
        let outcome = crate::team::init(&root, &found)
            .map_err(|e| DoorError::Internal(format!("setting up the project's team: {e:#}")))?;
        if !outcome.written {
            self.say(NO_DEFAULT)?;
            return Ok(Stop::EndTurn);
        }
        self.say(format!(
            "This project had no Troupe team; made one of what is installed here:\n{}\n\n",
            outcome.lines.join("\n")
        ))?;
        self.party(crate::team::PARTY, task).await
    }

    async fn party(&mut self, name: &str, task: &str) -> Result<Stop, DoorError> {
        self.launch(name, json!({ "inputs": { "task": task } }))
            .await
    }

    /// Launches party `name` with `with` (its task or issue) and follows it.
    async fn launch(&mut self, name: &str, with: serde_json::Value) -> Result<Stop, DoorError> {
        let (c, events) = self.events().await?;
        let mut params = json!({
            "name": name, "cwd": s(&self.row, "cwd"),
            "created_by_session_id": self.session,
        });
        if let (Some(p), Some(w)) = (params.as_object_mut(), with.as_object()) {
            p.extend(w.clone());
        }
        let launched = c
            .call("launch_party", params)
            .await
            .map_err(|e| failed("launch_party", e))?;
        let party = s(&launched, "party_id");
        self.peer.send(
            &self.session,
            Out::Thought(format!("Launched {name} ({party}).\n")),
        )?;
        self.follow(c, events, Scope::Party(party)).await
    }

    async fn agent(&mut self, name: &str, task: &str) -> Result<Stop, DoorError> {
        let (overrides, task) = agent_overrides(task)?;
        if task.is_empty() {
            self.say("Usage: /agent <agent> [model=… runner=… isolation=… timeout=…] <task>\n")?;
            return Ok(Stop::EndTurn);
        }
        let (c, events) = self.events().await?;
        let mut params =
            json!({ "agent": name, "prompt": task, "parent_session_id": self.session });
        if !overrides.is_empty() {
            params["overrides"] = Value::Object(overrides);
        }
        let started = c
            .call("start_agent", params)
            .await
            .map_err(|e| failed("start_agent", e))?;
        let sessions = HashSet::from([s(&started, "session_id")]);
        let run = s(&started, "run_id");
        self.peer.send(
            &self.session,
            Out::Thought(format!("Started {name} ({run}).\n")),
        )?;
        self.follow(c, events, Scope::Run(run, sessions)).await
    }

    /// Streams what `scope` does until it ends; forwards what waits for the person.
    async fn follow(
        &mut self,
        c: Arc<Client>,
        mut events: Subscription,
        mut scope: Scope,
    ) -> Result<Stop, DoorError> {
        let project = json!({ "project_id": s(&self.row, "project_id") });
        let mut approvals = c
            .subscribe(
                "subscribe_approvals",
                project.clone(),
                "unsubscribe_approvals",
            )
            .await
            .map_err(|e| failed("subscribe_approvals", e))?;
        let mut inbox = c
            .subscribe("subscribe_inbox", project, "unsubscribe_inbox")
            .await
            .map_err(|e| failed("subscribe_inbox", e))?;
        let mut render = Render::default();
        let mut asks = Asks::default();
        let mut cancelled = false;
        // A feed that ended (the daemon dropped it) is not polled again.
        let (mut approvals_open, mut inbox_open) = (true, true);
        let mut plan = Vec::new();
        if let Scope::Party(party) = &scope {
            self.send_plan(&c, party, &mut plan).await?;
        }
        let stop = loop {
            tokio::select! {
                changed = self.cancel.changed(), if !cancelled => {
                    if changed.is_err() || !*self.cancel.borrow() {
                        continue;
                    }
                    cancelled = true;
                    let (op, args) = match &scope {
                        Scope::Party(p) => ("cancel_party", json!({ "party_id": p })),
                        Scope::Run(r, _) => ("cancel_agent", json!({ "run_id": r })),
                    };
                    if let Err(e) = c.call(op, args).await {
                        // It may have ended meanwhile: its end is on the timeline.
                        tracing::debug!(error = %e, "{op} on cancel");
                    }
                    asks.clear();
                }
                event = events.next() => {
                    let Some(Ok(event)) = event else {
                        return Err(DoorError::Internal("the daemon went away mid-turn".into()));
                    };
                    if !belongs(&mut scope, &event) {
                        continue;
                    }
                    let step = render.event(&event);
                    for out in step.out {
                        self.peer.send(&self.session, out)?;
                    }
                    if let (true, Scope::Party(party)) = (step.plan_changed, &scope)
                        && let Err(e) = self.send_plan(&c, party, &mut plan).await
                    {
                        // The plan comes again at the next change; the turn goes on.
                        tracing::debug!(error = %e, "plan not sent");
                    }
                    let ended = match (&scope, &step.run_ended) {
                        (Scope::Party(_), _) => step.party_ended.is_some(),
                        (Scope::Run(root, _), Some((run, _))) => run == root,
                        _ => false,
                    };
                    if ended {
                        break if cancelled { Stop::Cancelled } else { Stop::EndTurn };
                    }
                }
                pushed = approvals.next(), if approvals_open && !cancelled => {
                    let Some(pushed) = push_of(pushed, &mut approvals_open) else { continue };
                    let pending: Vec<Value> = pushed["approvals"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter(|a| ours(&scope, a))
                        .cloned()
                        .collect();
                    asks.keep(pending.iter().map(|a| s(a, "approval_id")).collect(), &self.peer, &self.session);
                    for a in pending {
                        let label = render
                            .known(a["session_id"].as_str(), a["run_id"].as_str())
                            .or_else(|| a["role_name"].as_str().map(str::to_string))
                            .unwrap_or_else(|| "troupe".into());
                        asks.forward_approval(&c, &self.peer, &self.session, a, label);
                    }
                }
                pushed = inbox.next(), if inbox_open && !cancelled => {
                    let Some(pushed) = push_of(pushed, &mut inbox_open) else { continue };
                    let items: Vec<&Value> = pushed["items"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter(|i| i["kind"] != "approval" && ours(&scope, i))
                        .collect();
                    let present = items.iter().map(|i| format!("inbox/{}", s(i, "item_id"))).collect();
                    asks.keep_items(&present, &self.peer, &self.session);
                    for item in items {
                        asks.forward_item(&c, &self.peer, &self.session, item.clone())?;
                    }
                }
            }
        };
        self.settle(&c, &mut asks).await;
        asks.clear();
        Ok(stop)
    }

    /// At the turn's end, says of each ask still shown whether it was answered elsewhere: the
    /// run may end (its answer having reached the agent) before the inbox's push says so.
    async fn settle(&self, c: &Client, asks: &mut Asks) {
        if asks.waiting.is_empty() {
            return;
        }
        let project = s(&self.row, "project_id");
        match c.call("list_inbox", json!({ "project_id": project })).await {
            Ok(listed) => {
                let present = listed["items"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|i| format!("inbox/{}", s(i, "item_id")))
                    .collect();
                asks.keep_items(&present, &self.peer, &self.session);
            }
            Err(e) => tracing::debug!(error = %e, "the inbox not read at the turn's end"),
        }
        let pending = json!({ "status": "pending", "project_id": project });
        match c.call("list_approvals", pending).await {
            Ok(listed) => {
                let pending = listed["approvals"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|a| s(a, "approval_id"))
                    .collect();
                asks.keep(pending, &self.peer, &self.session);
            }
            Err(e) => tracing::debug!(error = %e, "approvals not read at the turn's end"),
        }
    }

    /// Sends the party's plan if it changed since `last`.
    async fn send_plan(
        &self,
        c: &Client,
        party: &str,
        last: &mut Vec<wire::PlanOut>,
    ) -> Result<(), DoorError> {
        let status = c
            .call("get_party_status", json!({ "party_id": party }))
            .await
            .map_err(|e| failed("get_party_status", e))?;
        // A party without a collaboration plan answers with no steps (or not at all).
        let plan = c.call("get_plan", json!({ "party_id": party })).await.ok();
        let entries = render::plan_of(&status, plan.as_ref());
        if entries.is_empty() || entries == *last {
            return Ok(());
        }
        *last = entries.clone();
        self.peer.send(&self.session, Out::Plan(entries))
    }

    async fn last_party(&self) -> Result<Option<Value>, DoorError> {
        Ok(self.d.parties_of(&self.session).await?.into_iter().next())
    }

    async fn status(&self) -> Result<Stop, DoorError> {
        let parties = self.d.parties_of(&self.session).await?;
        if parties.is_empty() {
            self.say("This session has launched no party yet.\n")?;
        }
        for p in parties {
            let status = self
                .d
                .call("get_party_status", json!({ "party_id": p["party_id"] }))
                .await?;
            let mut text = format!(
                "**{}** ({}) — {}\n",
                s(&p, "name"),
                s(&p, "party_id"),
                s(&p, "status")
            );
            for m in status["members"].as_array().into_iter().flatten() {
                text.push_str(&format!(
                    "- {}#{}: {}{}\n",
                    s(m, "role"),
                    m["index"],
                    s(m, "status"),
                    m["output"]
                        .as_str()
                        .map(|o| format!(" — {}", first_line(o)))
                        .unwrap_or_default()
                ));
            }
            self.say(text + "\n")?;
        }
        Ok(Stop::EndTurn)
    }

    async fn land(&self, strategy: &str) -> Result<Stop, DoorError> {
        let Some(party) = self.last_party().await? else {
            self.say("This session has launched no party to land.\n")?;
            return Ok(Stop::EndTurn);
        };
        let mut args = json!({ "party_id": party["party_id"] });
        if !strategy.is_empty() {
            args["strategy"] = json!(strategy);
        }
        let landed = self.d.call("land_party", args).await?;
        let text = match landed["summary"].as_str() {
            Some(summary) => format!("{summary}\n"),
            None => format!("```json\n{landed:#}\n```\n"),
        };
        self.say(text)?;
        Ok(Stop::EndTurn)
    }

    async fn decide(&self, decision: &str, all: bool) -> Result<Stop, DoorError> {
        let pending = self
            .d
            .call(
                "list_approvals",
                json!({ "status": "pending", "project_id": s(&self.row, "project_id") }),
            )
            .await?;
        let mut list = pending["approvals"].as_array().cloned().unwrap_or_default();
        list.sort_by_key(|a| s(a, "created_at"));
        if !all {
            list.truncate(1);
        }
        if list.is_empty() {
            self.say("Nothing is waiting for approval in this project.\n")?;
        }
        for a in list {
            self.d
                .call(
                    "decide_approval",
                    json!({ "approval_id": a["approval_id"], "decision": decision, "decided_by": "acp" }),
                )
                .await?;
            self.say(format!("{decision}d: {}\n", describe(&a)))?;
        }
        Ok(Stop::EndTurn)
    }

    async fn inbox(&self) -> Result<Stop, DoorError> {
        let listed = self
            .d
            .call(
                "list_inbox",
                json!({ "project_id": s(&self.row, "project_id") }),
            )
            .await?;
        let items = listed["items"].as_array().cloned().unwrap_or_default();
        let mut text = if items.is_empty() {
            "Nothing is waiting for you.\n".to_string()
        } else {
            String::new()
        };
        for item in items {
            text.push_str(&format!("- [{}] {}\n", s(&item, "kind"), s(&item, "title")));
        }
        self.say(text)?;
        Ok(Stop::EndTurn)
    }

    /// Answers the oldest question an agent of this project asks in its own words.
    async fn answer(&self, words: &str) -> Result<Stop, DoorError> {
        let listed = self
            .d
            .call(
                "list_inbox",
                json!({ "project_id": s(&self.row, "project_id") }),
            )
            .await?;
        let open = listed["items"].as_array().into_iter().flatten().find(|i| {
            i["answer"]["op"] == "answer_question"
                && i["answer"]["choices"].as_array().is_none_or(Vec::is_empty)
        });
        let Some(item) = open else {
            self.say("No question waits for an answer in your own words.\n")?;
            return Ok(Stop::EndTurn);
        };
        let mut params = item["answer"]["params"].clone();
        params["answer"] = json!(words);
        params["answered_by"] = json!("acp");
        self.d.call("answer_question", params).await?;
        self.say(format!("Answered: {}\n", s(item, "title")))?;
        Ok(Stop::EndTurn)
    }

    async fn cancel_last(&self) -> Result<Stop, DoorError> {
        let Some(party) = self.last_party().await? else {
            self.say("This session has launched no party.\n")?;
            return Ok(Stop::EndTurn);
        };
        self.d
            .call("cancel_party", json!({ "party_id": party["party_id"] }))
            .await?;
        self.say(format!("Cancelled {}.\n", s(&party, "name")))?;
        Ok(Stop::EndTurn)
    }
}

fn help() -> String {
    let mut text = String::from(
        "A prompt launches this project's default (`.troupe/config.toml`: `[default] party = \"…\"` \
         or `agent = \"…\"`; without one, nothing: name one with `/party` or `/agent`) with the \
         prompt as its task. Commands:\n",
    );
    for c in COMMANDS {
        text.push_str(&format!(
            "- `/{}{}` — {}\n",
            c.name,
            c.hint.map(|h| format!(" {h}")).unwrap_or_default(),
            c.description
        ));
    }
    text
}

type Subscription = jsonrpsee_core::client::Subscription<Value>;

/// A subscription's next push; none when it is unreadable, or when the feed ended (then `open`
/// turns false: it is not polled again).
fn push_of<E: std::fmt::Display>(
    pushed: Option<Result<Value, E>>,
    open: &mut bool,
) -> Option<Value> {
    match pushed {
        Some(Ok(pushed)) => Some(pushed),
        Some(Err(e)) => {
            tracing::debug!(error = %e, "a push unread");
            None
        }
        None => {
            *open = false;
            None
        }
    }
}

/// Whether an event is the turn's; follows the runs an agent run starts.
fn belongs(scope: &mut Scope, e: &Value) -> bool {
    match scope {
        Scope::Party(p) => e["party_id"].as_str() == Some(p.as_str()),
        Scope::Run(_, sessions) => {
            let session = e["session_id"].as_str().unwrap_or_default();
            if e["kind"] == "agent_run_created"
                && e["data"]["parent_session_id"]
                    .as_str()
                    .is_some_and(|parent| sessions.contains(parent))
            {
                sessions.insert(session.to_string());
            }
            sessions.contains(session)
        }
    }
}

/// Whether a pending request or an inbox item is the turn's.
fn ours(scope: &Scope, a: &Value) -> bool {
    match scope {
        Scope::Party(p) => a["party_id"].as_str() == Some(p.as_str()),
        Scope::Run(_, sessions) => a["session_id"]
            .as_str()
            .is_some_and(|s| sessions.contains(s)),
    }
}

fn describe(a: &Value) -> String {
    let role = a["role_name"]
        .as_str()
        .map(|r| format!("[{r}] "))
        .unwrap_or_default();
    format!("{role}{} {}", s(a, "tool_name"), s(a, "subject"))
}

/// A request forwarded to the editor: its task, and whether the editor answered it (then it
/// is the task's to finish, not withdrawn when the answer it gave takes the item away).
struct Waiting {
    task: JoinHandle<()>,
    settled: Arc<AtomicBool>,
}

/// The requests forwarded to the editor, each waiting in its own task (aborting one withdraws
/// its `session/request_permission`); all are withdrawn when the turn ends, however it ends.
#[derive(Default)]
struct Asks {
    waiting: HashMap<String, Waiting>,
    /// Inbox items already shown (an item without choices is said once).
    seen: HashSet<String>,
}

impl Asks {
    /// Withdraws the forwarded requests no longer pending (decided elsewhere, or expired).
    fn keep(&mut self, pending: HashSet<String>, peer: &Peer, session: &str) {
        let gone: Vec<String> = self
            .waiting
            .keys()
            .filter(|id| id.starts_with("approval/") && !pending.contains(&id["approval/".len()..]))
            .cloned()
            .collect();
        self.withdraw(gone, "Decided elsewhere.", peer, session);
    }

    /// Withdraws the inbox items asked in the editor that left the inbox (answered elsewhere).
    fn keep_items(&mut self, present: &HashSet<String>, peer: &Peer, session: &str) {
        let gone: Vec<String> = self
            .waiting
            .keys()
            .filter(|id| id.starts_with("inbox/") && !present.contains(*id))
            .cloned()
            .collect();
        self.withdraw(gone, "Answered elsewhere.", peer, session);
    }

    /// Ends these asks still waiting, each shown completed with `why`.
    fn withdraw(&mut self, ids: Vec<String>, why: &str, peer: &Peer, session: &str) {
        for id in ids {
            if self
                .waiting
                .get(&id)
                .is_some_and(|w| w.settled.load(Ordering::SeqCst))
            {
                continue;
            }
            if let Some(Waiting { task, .. }) = self.waiting.remove(&id)
                && !task.is_finished()
            {
                task.abort();
                show_end(peer, session, id.clone(), "completed", why.to_string());
            }
        }
    }

    fn forward_approval(
        &mut self,
        c: &Arc<Client>,
        peer: &Peer,
        session: &str,
        a: Value,
        who: String,
    ) {
        let id = format!("approval/{}", s(&a, "approval_id"));
        if self.waiting.contains_key(&id) {
            return;
        }
        let (c, peer, session) = (c.clone(), peer.clone(), session.to_string());
        let call_id = id.clone();
        self.track(id, move |answered| async move {
            let file = a["file_path"].as_str().map(PathBuf::from);
            let line = a["start_line"].as_u64().and_then(|l| u32::try_from(l).ok());
            let tool = ToolCallOut {
                id: call_id,
                started: true,
                title: Some(format!(
                    "[{who}] {} {}",
                    s(&a, "tool_name"),
                    s(&a, "subject")
                )),
                kind: Some(if file.is_some() { "edit" } else { "execute" }.into()),
                status: Some("pending".into()),
                locations: file.into_iter().map(|f| (f, line)).collect(),
                diffs: Vec::new(),
                text: a["diff"]
                    .as_str()
                    .map(|d| format!("```diff\n{d}\n```"))
                    .or_else(|| a["danger_reason"].as_str().map(str::to_string)),
                raw_input: Some(a["input"].clone()),
            };
            if let Err(e) = peer.send(&session, Out::ToolCall(Box::new(tool.clone()))) {
                tracing::debug!(error = %e, "request not shown");
                return;
            }
            let option = |id: &str, name: String, kind| AskOption {
                id: id.into(),
                name,
                kind,
            };
            let mut options = vec![option("approve", "Allow".into(), Choice::AllowOnce)];
            // A request outside the member's checkout is never answered by a rule.
            if a["outside_worktree"] != true {
                options.push(option(
                    "approve_pattern",
                    format!("Always allow {}", s(&a, "subject")),
                    Choice::AllowAlways,
                ));
            }
            options.push(option("deny", "Deny".into(), Choice::RejectOnce));
            options.push(option(
                "abort",
                "Deny and stop the agent".into(),
                Choice::RejectAlways,
            ));
            let ask = Ask {
                tool: ToolCallOut {
                    started: false,
                    ..tool.clone()
                },
                options,
            };
            let Answer::Chosen(decision) = peer.ask(&session, ask).await else {
                return;
            };
            answered.store(true, Ordering::SeqCst);
            let decided = c
                .call(
                    "decide_approval",
                    json!({ "approval_id": a["approval_id"], "decision": decision, "decided_by": "acp" }),
                )
                .await;
            let (status, text) = match decided {
                Ok(_) if decision.starts_with("approve") => ("completed", format!("{decision}d")),
                Ok(_) => ("failed", format!("{decision}ed")),
                // Decided elsewhere first: that decision stands.
                Err(e) => ("completed", format!("not recorded: {e}")),
            };
            show_end(&peer, &session, tool.id, status, text);
        });
    }

    /// An inbox item other than a request: with choices, asked like a permission; without,
    /// said once.
    fn forward_item(
        &mut self,
        c: &Arc<Client>,
        peer: &Peer,
        session: &str,
        item: Value,
    ) -> Result<(), DoorError> {
        let id = format!("inbox/{}", s(&item, "item_id"));
        if !self.seen.insert(id.clone()) {
            return Ok(());
        }
        let title = s(&item, "title");
        let detail = item["detail"].as_str().map(str::to_string);
        let answer = item["answer"].clone();
        let choices = answer["choices"].as_array().cloned().unwrap_or_default();
        if choices.is_empty() && answer["op"] == "answer_question" && peer.fills_forms() {
            self.ask_words(c, peer, session, id, title, answer);
            return Ok(());
        }
        if choices.is_empty() {
            let detail = detail.map(|d| format!("\n{d}")).unwrap_or_default();
            let how = if answer["op"] == "answer_question" {
                "\n(answer with `/answer <your words>`)"
            } else {
                ""
            };
            return peer.send(session, Out::Text(format!("⚑ {title}{detail}{how}\n\n")));
        }
        let (c, peer, session) = (c.clone(), peer.clone(), session.to_string());
        let call_id = id.clone();
        self.track(id, move |answered| async move {
            let tool = ToolCallOut {
                id: call_id,
                started: true,
                title: Some(title),
                kind: Some("think".into()),
                status: Some("pending".into()),
                text: detail,
                ..ToolCallOut::default()
            };
            if peer
                .send(&session, Out::ToolCall(Box::new(tool.clone())))
                .is_err()
            {
                return;
            }
            let mut options: Vec<AskOption> = choices
                .iter()
                .enumerate()
                .map(|(i, choice)| AskOption {
                    id: i.to_string(),
                    name: match choice {
                        Value::String(text) => text.clone(),
                        other => other.to_string(),
                    },
                    kind: Choice::AllowOnce,
                })
                .collect();
            options.push(AskOption {
                id: "later".into(),
                name: "Later".into(),
                kind: Choice::RejectOnce,
            });
            let ask = Ask {
                tool: ToolCallOut {
                    started: false,
                    ..tool.clone()
                },
                options,
            };
            let Answer::Chosen(chosen) = peer.ask(&session, ask).await else {
                return;
            };
            let Some(choice) = chosen.parse::<usize>().ok().and_then(|i| choices.get(i)) else {
                return;
            };
            answered.store(true, Ordering::SeqCst);
            let mut params = answer["params"].clone();
            if let (Some(field), Value::Object(p)) = (answer["choice_field"].as_str(), &mut params)
            {
                p.insert(field.to_string(), choice.clone());
            }
            let op = s(&answer, "op");
            let done = c.call(&op, params).await;
            show_end(
                &peer,
                &session,
                tool.id,
                if done.is_ok() { "completed" } else { "failed" },
                match done {
                    Ok(_) => format!("{op}: {choice}"),
                    Err(e) => format!("{op}: {e}"),
                },
            );
        });
        Ok(())
    }

    /// A question for the person's own words, asked in the editor's form (`elicitation/create`)
    /// where it fills them in.
    fn ask_words(
        &mut self,
        c: &Arc<Client>,
        peer: &Peer,
        session: &str,
        id: String,
        title: String,
        answer: Value,
    ) {
        let (c, peer, session) = (c.clone(), peer.clone(), session.to_string());
        let call_id = id.clone();
        self.track(id, move |answered| async move {
            let tool = ToolCallOut {
                id: call_id,
                started: true,
                title: Some(title.clone()),
                kind: Some("think".into()),
                status: Some("pending".into()),
                ..ToolCallOut::default()
            };
            if peer
                .send(&session, Out::ToolCall(Box::new(tool.clone())))
                .is_err()
            {
                return;
            }
            let (status, text) = match peer.ask_words(&session, &title).await {
                Some(words) => {
                    answered.store(true, Ordering::SeqCst);
                    let mut params = answer["params"].clone();
                    if let Value::Object(p) = &mut params {
                        p.insert("answer".into(), Value::String(words.clone()));
                    }
                    match c.call("answer_question", params).await {
                        Ok(_) => ("completed", format!("answered: {words}")),
                        Err(e) => ("failed", format!("answer_question: {e}")),
                    }
                }
                None => (
                    "failed",
                    "Not answered here: it waits in the inbox (`/answer <your words>`).".into(),
                ),
            };
            show_end(&peer, &session, tool.id, status, text);
        });
    }

    /// Runs `work` in its own task, kept under `id` until withdrawn; `work` marks, on the flag
    /// it is given, that the editor answered (then it is left to finish).
    fn track<F>(&mut self, id: String, work: impl FnOnce(Arc<AtomicBool>) -> F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let settled = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn(work(settled.clone()));
        self.waiting.insert(id, Waiting { task, settled });
    }

    /// Withdraws every request still waiting.
    fn clear(&mut self) {
        for (_, Waiting { task, settled }) in self.waiting.drain() {
            // One the editor answered finishes recording its answer (dropping it detaches it).
            if settled.load(Ordering::SeqCst) {
                continue;
            }
            task.abort();
        }
    }
}

/// Shows how a forwarded ask ended (its tool call's last update).
fn show_end(peer: &Peer, session: &str, id: String, status: &str, text: String) {
    let update = ToolCallOut {
        id,
        status: Some(status.into()),
        text: Some(text),
        ..ToolCallOut::default()
    };
    if let Err(e) = peer.send(session, Out::ToolCall(Box::new(update))) {
        tracing::debug!(error = %e, "the end of an ask not shown");
    }
}

impl Drop for Asks {
    fn drop(&mut self) {
        self.clear();
    }
}

/// `session/load`: each prompt of the session (the parties it launched, the agents it ran),
/// oldest first, with what followed from the timeline, as the editor first saw it. Its newest
/// party, if it still runs, and the last event replayed of it.
async fn replay(d: &Inner, session: &str, peer: &Peer) -> Result<Option<(String, i64)>, DoorError> {
    let parties = d.parties_of(session).await?;
    let runs = d
        .call("list_agents", json!({ "parent_session_id": session }))
        .await?;
    let running = parties
        .first()
        .filter(|p| matches!(p["status"].as_str(), Some("pending" | "running")))
        .map(|p| s(p, "party_id"));
    let mut live = None;
    // (when, prompt, filter of its events)
    let mut turns: Vec<(String, String, Value, Option<String>)> = Vec::new();
    for p in &parties {
        let task = p["inputs"]["task"].as_str().unwrap_or_default();
        let prompt = format!("/party {} {task}", s(p, "name"));
        let party = s(p, "party_id");
        turns.push((
            s(p, "created_at"),
            prompt,
            json!({ "party_id": party }),
            Some(party),
        ));
    }
    // A party's members are the session's children too: they were replayed with their party.
    for r in runs["runs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["party_id"].is_null())
    {
        let prompt = format!("/agent {} {}", s(r, "agent"), s(r, "prompt"));
        turns.push((
            s(r, "created_at"),
            prompt,
            json!({ "session_id": r["session_id"] }),
            None,
        ));
    }
    turns.sort_by(|a, b| a.0.cmp(&b.0));
    for (_, prompt, filter, party) in turns {
        peer.send(session, Out::User(prompt))?;
        let mut render = Render::default();
        let mut since = 0;
        loop {
            let mut args = filter.clone();
            args["since"] = json!(since);
            args["limit"] = json!(REPLAY_BATCH);
            let page = d.call("list_events", args).await?;
            let events = page["events"].as_array().cloned().unwrap_or_default();
            for e in &events {
                for out in render.event(e).out {
                    peer.send(session, out)?;
                }
            }
            since = page["next_since"].as_i64().unwrap_or(since);
            if events.len() < REPLAY_BATCH as usize {
                break;
            }
        }
        if party.is_some() && party == running {
            live = party.clone().map(|p| (p, since));
        }
        if let Some(party) = party {
            let status = d
                .call("get_party_status", json!({ "party_id": party }))
                .await?;
            let plan = d.call("get_plan", json!({ "party_id": party })).await.ok();
            let entries = render::plan_of(&status, plan.as_ref());
            if !entries.is_empty() {
                peer.send(session, Out::Plan(entries))?;
            }
        }
    }
    Ok(live)
}

#[cfg(test)]
mod tests;
