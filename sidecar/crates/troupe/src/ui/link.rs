//! The dashboard's line to the daemon: it follows the daemon's subscriptions (the inbox, the
//! timeline, the watched run's output), reads a party's status again when its events say it
//! changed, carries out the person's answers, and reconnects when the daemon restarts (picking
//! the timeline up where it left off).

use std::collections::BTreeSet;
use std::time::Duration;

use jsonrpsee_core::client::Subscription;
use serde_json::{Value, json};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};
use troupe_api::layout::Layout;
use troupe_api::types::{
    Event, InboxResult, MemberDiffResult, PartiesResult, PartyStatusResult, PullRequestView,
    RunLogChunk, SchedulesResult,
};

use super::app::{Command, Update};
use crate::client::{self, Client};

/// The least time between two reads of the parties' statuses: the first event after a quiet
/// spell is read at once, a burst's later events together.
const SETTLE: Duration = Duration::from_millis(30);
/// Between attempts to reach a daemon that is not there.
const RECONNECT: Duration = Duration::from_millis(300);
/// The parties whose status the dashboard reads (the newest).
const PARTIES_SHOWN: usize = 30;

/// Where the dashboard looks: `{"cwd": …}` for a project, `{}` for every project.
#[derive(Debug, Clone)]
pub struct Scope(pub Value);

/// What survives a reconnection.
#[derive(Default)]
struct Memory {
    /// The last timeline event seen: a new subscription replays from there.
    last_seq: Option<i64>,
    /// The watched run and how much of its output came.
    watching: Option<(String, u64)>,
}

/// Runs until the dashboard goes (its command channel closes).
pub async fn run(
    layout: Layout,
    scope: Scope,
    updates: UnboundedSender<Update>,
    mut commands: UnboundedReceiver<Command>,
) {
    let mut memory = Memory::default();
    let mut first = true;
    loop {
        // The first connection starts the daemon as every command does; after that the
        // dashboard waits for the person's daemon to come back rather than start its own.
        match client::connect(&layout, first).await {
            Ok(c) => {
                first = false;
                let _ = updates.send(Update::Connected);
                match session(&c, &scope, &updates, &mut commands, &mut memory).await {
                    Ok(()) => return,
                    Err(why) => {
                        let _ = updates.send(Update::Disconnected(why));
                    }
                }
            }
            Err(e) => {
                let why = format!("{e:#}");
                let why = why.lines().next().unwrap_or("no daemon").to_string();
                if updates.send(Update::Disconnected(why)).is_err() {
                    return;
                }
            }
        }
        // Waiting to try again; what the person asks meanwhile is refused with a reason.
        let wait = tokio::time::sleep(RECONNECT);
        tokio::pin!(wait);
        loop {
            tokio::select! {
                () = &mut wait => break,
                cmd = commands.recv() => match cmd {
                    None => return,
                    Some(Command::WatchLog { run_id }) => memory.watching = Some((run_id, 0)),
                    Some(_) => {
                        let _ = updates.send(Update::Notice("not connected to the daemon: try again when it is back".into()));
                    }
                },
            }
        }
    }
}

async fn next_of<T: serde::de::DeserializeOwned + Clone>(
    sub: &mut Option<Subscription<T>>,
) -> Option<Result<T, serde_json::Error>> {
    match sub {
        Some(s) => s.next().await,
        None => std::future::pending().await,
    }
}

/// One connection's life: `Ok` when the dashboard closed, `Err` (why) when the daemon went.
async fn session(
    c: &Client,
    scope: &Scope,
    updates: &UnboundedSender<Update>,
    commands: &mut UnboundedReceiver<Command>,
    memory: &mut Memory,
) -> Result<(), String> {
    let gone = |e: &dyn std::fmt::Display| format!("{e}");
    let mut inbox = c
        .subscribe("subscribe_inbox", scope.0.clone(), "unsubscribe_inbox")
        .await
        .map_err(|e| gone(&e))?;
    let since = memory.last_seq.map_or(Value::Null, Value::from);
    let mut events = c
        .subscribe(
            "subscribe_events",
            json!({ "since": since }),
            "unsubscribe_events",
        )
        .await
        .map_err(|e| gone(&e))?;
    let mut known = load_parties(c, scope, updates).await?;
    let mut log: Option<Subscription<Value>> = None;
    if let Some((run_id, offset)) = &memory.watching {
        log = watch(c, run_id, *offset, updates).await;
    }
    let mut dirty: BTreeSet<String> = known.iter().cloned().collect();
    // The parties whose pull request to read again: all at first, then those whose events say
    // it changed.
    let mut dirty_pulls = dirty.clone();
    let mut last_read: Option<tokio::time::Instant> = None;
    loop {
        let settle = tokio::time::sleep(
            last_read.map_or(Duration::ZERO, |at| SETTLE.saturating_sub(at.elapsed())),
        );
        tokio::select! {
            item = inbox.next() => {
                let Some(item) = item else { return Err("the daemon closed the connection".into()) };
                if let Ok(result) = serde_json::from_value::<InboxResult>(item.map_err(|e| gone(&e))?) {
                    let _ = updates.send(Update::Inbox(result.items));
                }
                // A schedule's change is the inbox's too.
                load_schedules(c, scope, updates).await;
            }
            event = events.next() => {
                let Some(event) = event else { return Err("the daemon closed the connection".into()) };
                let Ok(event) = serde_json::from_value::<Event>(event.map_err(|e| gone(&e))?) else { continue };
                memory.last_seq = Some(event.seq);
                let Some(party) = event.party_id.clone() else { continue };
                if !known.contains(&party) {
                    // A party launched since: in scope if the list says so.
                    if event.kind == "party_launched" {
                        known = load_parties(c, scope, updates).await?;
                    }
                    if !known.contains(&party) {
                        continue;
                    }
                }
                if moves_pull(&event.kind) {
                    dirty_pulls.insert(party.clone());
                }
                dirty.insert(party);
                let _ = updates.send(Update::Event(Box::new(event)));
            }
            chunk = next_of(&mut log) => {
                match chunk {
                    Some(Ok(chunk)) => {
                        if let Ok(chunk) = serde_json::from_value::<RunLogChunk>(chunk) {
                            if let Some((_, offset)) = &mut memory.watching {
                                *offset = chunk.offset + chunk.text.len() as u64;
                            }
                            if chunk.ended {
                                log = None;
                            }
                            let _ = updates.send(Update::Log { run_id: chunk.run_id, text: chunk.text, ended: chunk.ended });
                        }
                    }
                    Some(Err(_)) | None => log = None,
                }
            }
            cmd = commands.recv() => {
                let Some(cmd) = cmd else { return Ok(()) };
                match cmd {
                    Command::Answer { title, op, params } => {
                        let notice = match c.call(&op, params).await {
                            Ok(_) => format!("answered: {title}"),
                            Err(e) => format!("not answered ({op}): {e}"),
                        };
                        let _ = updates.send(Update::Notice(notice));
                    }
                    Command::WatchLog { run_id } => {
                        log = watch(c, &run_id, 0, updates).await;
                        memory.watching = Some((run_id, 0));
                    }
                    Command::Diff(member) => {
                        let params = json!({ "party_id": member.party_id, "role": member.role, "index": member.index });
                        let diff = match c.call("get_member_diff", params).await {
                            Ok(v) => serde_json::from_value::<MemberDiffResult>(v).map(Box::new).map_err(|e| e.to_string()),
                            Err(e) => Err(e.to_string()),
                        };
                        let _ = updates.send(Update::Diff { member, diff });
                    }
                }
            }
            () = settle, if !dirty.is_empty() || !dirty_pulls.is_empty() => {
                last_read = Some(tokio::time::Instant::now());
                for party in std::mem::take(&mut dirty) {
                    match c.call("get_party_status", json!({ "party_id": party })).await {
                        Ok(v) => {
                            if let Ok(status) = serde_json::from_value::<PartyStatusResult>(v) {
                                let _ = updates.send(Update::Party(Box::new(status)));
                            }
                        }
                        Err(e) if !c.is_connected() => return Err(gone(&e)),
                        Err(_) => {}
                    }
                }
                for party in std::mem::take(&mut dirty_pulls) {
                    read_pull(c, party, updates).await.map_err(|e| gone(&e))?;
                }
            }
        }
    }
}

/// Whether an event of this kind can change its party's pull request.
fn moves_pull(kind: &str) -> bool {
    kind.starts_with("pull_request_")
        || matches!(
            kind,
            "ci_round_started" | "party_delivered" | "party_started_from_issue"
        )
}

/// Reads a party's pull request and sends it; a party without one (not found) is sent as none,
/// quietly, and any other failure leaves what is shown. `Err` only when the daemon is gone.
async fn read_pull(
    c: &Client,
    party: String,
    updates: &UnboundedSender<Update>,
) -> Result<(), client::CallError> {
    let pull = match c
        .call("get_pull_request", json!({ "party_id": party }))
        .await
    {
        Ok(v) => serde_json::from_value::<PullRequestView>(v)
            .ok()
            .map(Box::new),
        Err(e) if !c.is_connected() => return Err(e),
        Err(e) if e.kind() == Some("not_found") => None,
        Err(_) => return Ok(()),
    };
    let _ = updates.send(Update::Pull {
        party_id: party,
        pull,
    });
    Ok(())
}

/// Lists the schedules in scope and sends them (a daemon without them: none).
async fn load_schedules(c: &Client, scope: &Scope, updates: &UnboundedSender<Update>) {
    if let Ok(listed) = c.call("list_schedules", scope.0.clone()).await
        && let Ok(result) = serde_json::from_value::<SchedulesResult>(listed)
    {
        let _ = updates.send(Update::Schedules(result.schedules));
    }
}

/// Lists the parties in scope (the newest first) and sends them; returns their ids.
async fn load_parties(
    c: &Client,
    scope: &Scope,
    updates: &UnboundedSender<Update>,
) -> Result<BTreeSet<String>, String> {
    let listed = c
        .call("list_parties", scope.0.clone())
        .await
        .map_err(|e| e.to_string())?;
    let mut parties = serde_json::from_value::<PartiesResult>(listed)
        .map_err(|e| format!("unexpected list_parties reply: {e}"))?
        .parties;
    parties.sort_by(|a, b| b.created_at.cmp(&a.created_at));
    parties.truncate(PARTIES_SHOWN);
    let ids = parties.iter().map(|p| p.party_id.clone()).collect();
    let _ = updates.send(Update::Parties(parties));
    Ok(ids)
}

async fn watch(
    c: &Client,
    run_id: &str,
    offset: u64,
    updates: &UnboundedSender<Update>,
) -> Option<Subscription<Value>> {
    let params = json!({ "run_id": run_id, "offset": offset });
    match c
        .subscribe("subscribe_run_log", params, "unsubscribe_run_log")
        .await
    {
        Ok(sub) => Some(sub),
        Err(e) => {
            let _ = updates.send(Update::Notice(format!("no output for run {run_id}: {e}")));
            None
        }
    }
}
