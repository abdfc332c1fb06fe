//! `troupe-dev bench soak`: kill -9 soaks of a real daemon (a child process on a scratch data dir).
//! `messaging`: many clients send keyed messages, the daemon is killed at a random moment and
//! restarted, the sends in flight are retried with the same keys, and every acknowledged message
//! must be stored exactly once. `parties`: a party of process and ACP members is killed at a random
//! moment and resumed; no completed member may run again, no attempt may be spawned twice, and no
//! process of the party may be left once it has ended and the daemon has stopped.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use clap::{Args, Subcommand};
use serde::Serialize;
use serde_json::{Value, json};

use crate::harness::{DaemonGuard, register, scratch_layout, start_daemon, ticks_per_second};
use troupe::client::{self, Client};
use troupe_api::layout::Layout;

#[derive(Debug, Subcommand)]
pub enum SoakCommand {
    /// Keyed sends from many clients, kill -9 at a random moment, restart: every acknowledged
    /// message is stored exactly once, retried keys are not duplicated.
    Messaging(MessagingSoakArgs),
    /// A party of process and ACP members, kill -9 mid-party, restart: no completed member runs
    /// again, no attempt is spawned twice, no process of the party is left.
    Parties(PartiesSoakArgs),
}

#[derive(Debug, Args)]
pub struct MessagingSoakArgs {
    /// Trials (a fresh daemon and data dir each).
    #[arg(long, default_value_t = 100)]
    pub trials: usize,
    /// Concurrent clients, each sending on its own connection, one send in flight at a time.
    #[arg(long, default_value_t = 64)]
    pub clients: usize,
    /// Recipient sessions the clients' messages go to.
    #[arg(long, default_value_t = 16)]
    pub recipients: usize,
    /// The kill comes between --kill-min-ms and --kill-max-ms after the sends start (uniform).
    #[arg(long, default_value_t = 10)]
    pub kill_min_ms: u64,
    #[arg(long, default_value_t = 1000)]
    pub kill_max_ms: u64,
    /// Seed of the random kill moments (printed; random by default).
    #[arg(long)]
    pub seed: Option<u64>,
}

#[derive(Debug, Args)]
pub struct PartiesSoakArgs {
    /// Trials (a fresh daemon, data dir and party each).
    #[arg(long, default_value_t = 20)]
    pub trials: usize,
    /// The kill comes at a uniform moment between --kill-min-ms after the launch and 90% of
    /// the party's planned length (its critical path with the member durations drawn for the
    /// trial), or --kill-max-ms if given.
    #[arg(long, default_value_t = 50)]
    pub kill_min_ms: u64,
    #[arg(long)]
    pub kill_max_ms: Option<u64>,
    /// Seconds a party may take to finish after the restart before it counts as stuck.
    #[arg(long, default_value_t = 60)]
    pub finish_secs: u64,
    /// Seed of the random kill moments and member durations (printed; random by default).
    #[arg(long)]
    pub seed: Option<u64>,
}

pub async fn run(cmd: SoakCommand, json_out: bool) -> anyhow::Result<()> {
    match cmd {
        SoakCommand::Messaging(args) => messaging(args, json_out).await,
        SoakCommand::Parties(args) => parties(args, json_out).await,
    }
}

fn rng(seed: Option<u64>) -> (u64, fastrand::Rng) {
    let seed = seed.unwrap_or_else(|| fastrand::u64(..));
    (seed, fastrand::Rng::with_seed(seed))
}

fn check_window(trials: usize, min: u64, max: u64) -> anyhow::Result<()> {
    if trials == 0 {
        bail!("--trials must be at least 1");
    }
    if min > max {
        bail!("--kill-min-ms ({min}) is above --kill-max-ms ({max})");
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Messaging

/// One messaging trial.
#[derive(Debug, Clone, Default, Serialize)]
pub struct MessagingTrial {
    pub kill_after_ms: u64,
    /// Sends acknowledged before the kill.
    pub acked_before_kill: u64,
    /// Sends in flight when the daemon died (one per client that had one).
    pub in_flight: u64,
    /// Of those, stored although never acknowledged (the ack was lost with the daemon).
    pub committed_unacked: u64,
    /// Acknowledged sends missing after the restart, before any retry.
    pub lost_at_restart: u64,
    /// Retries of the sends in flight, with their keys.
    pub retried: u64,
    /// Retries whose `duplicate` answer disagreed with what was stored.
    pub retry_answer_wrong: u64,
    /// Acknowledged in all (before the kill and retries).
    pub acked: u64,
    /// Acknowledged keys not stored exactly once at the end.
    pub lost: u64,
    /// Extra copies of a key at the end.
    pub duplicated: u64,
    /// Stored messages of keys never sent, or out of a sender's send order.
    pub misordered_or_unknown: u64,
    /// SIGKILL → the restarted daemon's first answered call.
    pub restart_ms: f64,
}

impl MessagingTrial {
    fn violations(&self) -> u64 {
        self.lost
            + self.duplicated
            + self.lost_at_restart
            + self.retry_answer_wrong
            + self.misordered_or_unknown
    }
}

async fn messaging(args: MessagingSoakArgs, json_out: bool) -> anyhow::Result<()> {
    check_window(args.trials, args.kill_min_ms, args.kill_max_ms)?;
    if args.clients == 0 || args.recipients == 0 {
        bail!("--clients and --recipients must be at least 1");
    }
    let (seed, mut rng) = rng(args.seed);
    if !json_out {
        eprintln!(
            "soak messaging: {} trials, {} clients → {} recipients, kill after {}–{} ms, seed {seed}",
            args.trials, args.clients, args.recipients, args.kill_min_ms, args.kill_max_ms
        );
    }
    let mut trials = Vec::with_capacity(args.trials);
    for i in 0..args.trials {
        let kill_after = rng.u64(args.kill_min_ms..=args.kill_max_ms);
        let t = messaging_trial(&args, kill_after)
            .await
            .with_context(|| format!("trial {}", i + 1))?;
        if !json_out {
            eprintln!(
                "trial {:>3}: kill at {:>4} ms  acked {:>6} (+{} retried)  in flight {} (committed unacked {})  lost {}  duplicated {}  restart {:.1} ms",
                i + 1,
                t.kill_after_ms,
                t.acked_before_kill,
                t.retried,
                t.in_flight,
                t.committed_unacked,
                t.lost + t.lost_at_restart,
                t.duplicated,
                t.restart_ms
            );
        }
        trials.push(t);
    }
    let sum = |f: fn(&MessagingTrial) -> u64| trials.iter().map(f).sum::<u64>();
    let totals = json!({
        "acked": sum(|t| t.acked),
        "acked_before_kill": sum(|t| t.acked_before_kill),
        "in_flight": sum(|t| t.in_flight),
        "committed_unacked": sum(|t| t.committed_unacked),
        "retried": sum(|t| t.retried),
        "lost_at_restart": sum(|t| t.lost_at_restart),
        "lost": sum(|t| t.lost),
        "duplicated": sum(|t| t.duplicated),
        "retry_answer_wrong": sum(|t| t.retry_answer_wrong),
        "misordered_or_unknown": sum(|t| t.misordered_or_unknown),
        "restart_ms_median": crate::harness::median(trials.iter().map(|t| t.restart_ms).collect()),
    });
    let violations = sum(MessagingTrial::violations);
    if json_out {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "trials": args.trials, "clients": args.clients, "recipients": args.recipients,
                "seed": seed, "totals": totals, "per_trial": trials,
            }))?
        );
    } else {
        let n = |k: &str| totals[k].as_u64().unwrap_or(0);
        println!(
            "{} trials of kill -9 under {} clients' keyed sends (seed {seed}):\n  acked            {:>9}  ({} before the kills, {} retries after)\n  lost             {:>9}  (missing at restart: {})\n  duplicated       {:>9}\n  in flight at kill{:>9}  (stored though unacknowledged: {}; each retry's `duplicate` answer wrong: {})\n  out of order / unknown {:>3}\n  restart          {:>9.1} ms (median, SIGKILL → first answer)",
            args.trials,
            args.clients,
            n("acked"),
            n("acked_before_kill"),
            n("retried"),
            n("lost"),
            n("lost_at_restart"),
            n("duplicated"),
            n("in_flight"),
            n("committed_unacked"),
            n("retry_answer_wrong"),
            n("misordered_or_unknown"),
            totals["restart_ms_median"].as_f64().unwrap_or(0.0),
        );
    }
    if violations > 0 {
        bail!("the soak found {violations} violations");
    }
    Ok(())
}

fn key(sender: usize, index: u64) -> String {
    format!("{sender}:{index}")
}

async fn send(
    c: &Client,
    from: &str,
    to: &str,
    sender: usize,
    index: u64,
) -> anyhow::Result<Value> {
    let k = key(sender, index);
    Ok(c.call(
        "send_message",
        json!({ "from_session_id": from, "to_session_id": to, "content": k, "idempotency_key": k }),
    )
    .await?)
}

async fn messaging_trial(
    args: &MessagingSoakArgs,
    kill_after_ms: u64,
) -> anyhow::Result<MessagingTrial> {
    let (scratch, layout) = scratch_layout("troupe-soak-msg-")?;
    let cwd = scratch.path().display().to_string();
    let (mut daemon, setup, _) = start_daemon(&layout).await?;
    let mut recipients = Vec::with_capacity(args.recipients);
    for _ in 0..args.recipients {
        recipients.push(register(&setup, &cwd).await?);
    }
    let mut senders = Vec::with_capacity(args.clients);
    for s in 0..args.clients {
        let from = register(&setup, &cwd).await?;
        let c = client::connect(&layout, false).await?;
        senders.push((c, from, recipients[s % recipients.len()].clone()));
    }
    let routes: Vec<(String, String)> = senders
        .iter()
        .map(|(_, f, t)| (f.clone(), t.clone()))
        .collect();

    // Each client sends 0, 1, 2, … in order until its connection dies with the daemon; it
    // returns how many were acknowledged (so index `acked` was the one in flight).
    let killed = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::with_capacity(args.clients);
    for (s, (c, from, to)) in senders.into_iter().enumerate() {
        let killed = killed.clone();
        tasks.push(tokio::spawn(async move {
            let mut acked = 0u64;
            loop {
                match send(&c, &from, &to, s, acked).await {
                    Ok(_) => acked += 1,
                    Err(e) if killed.load(Ordering::SeqCst) => {
                        tracing::debug!(error = %e, "send cut by the kill");
                        return anyhow::Ok(acked);
                    }
                    Err(e) => {
                        return Err(anyhow!(
                            "client {s}: send {acked} failed before the kill: {e}"
                        ));
                    }
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(kill_after_ms)).await;
    killed.store(true, Ordering::SeqCst);
    let killed_at = Instant::now();
    daemon.0.kill().context("cannot kill the daemon")?;
    let _reaped = daemon.0.wait();
    drop(setup);
    let mut acked = Vec::with_capacity(tasks.len());
    for t in tasks {
        acked.push(t.await??);
    }
    let (mut daemon, c, _) = start_daemon(&layout).await?;
    let restart_ms = killed_at.elapsed().as_secs_f64() * 1000.0;

    let mut t = MessagingTrial {
        kill_after_ms,
        acked_before_kill: acked.iter().sum(),
        in_flight: acked.len() as u64,
        restart_ms,
        ..MessagingTrial::default()
    };
    // What survived, before any retry.
    let stored = stored_by_sender(&c, &recipients).await?;
    let mut was_stored = Vec::with_capacity(acked.len());
    for (s, &n) in acked.iter().enumerate() {
        let counts = counts(stored.get(&s));
        t.lost_at_restart += (0..n).filter(|i| !counts.contains_key(i)).count() as u64;
        let in_flight_stored = counts.contains_key(&n);
        t.committed_unacked += u64::from(in_flight_stored);
        was_stored.push(in_flight_stored);
    }
    // Each client retries its send in flight, with the same key.
    for (s, (from, to)) in routes.iter().enumerate() {
        let r = send(&c, from, to, s, acked[s]).await?;
        t.retried += 1;
        if r["duplicate"].as_bool() != Some(was_stored[s]) {
            t.retry_answer_wrong += 1;
        }
    }
    t.acked = t.acked_before_kill + t.retried;
    // Now every sender's keys 0..=n must be stored exactly once, in send order.
    let stored = stored_by_sender(&c, &recipients).await?;
    for (s, &n) in acked.iter().enumerate() {
        let got = stored.get(&s).cloned().unwrap_or_default();
        let counts = counts(Some(&got));
        t.lost += (0..=n).filter(|i| !counts.contains_key(i)).count() as u64;
        t.duplicated += counts.values().map(|c| c - 1).sum::<u64>();
        t.misordered_or_unknown += counts.keys().filter(|&&i| i > n).count() as u64
            + got.windows(2).filter(|w| w[0] >= w[1]).count() as u64;
    }
    let _answer_or_hangup = c.call("shutdown_daemon", json!({})).await;
    let _reaped = daemon.0.wait();
    Ok(t)
}

fn counts(got: Option<&Vec<u64>>) -> BTreeMap<u64, u64> {
    let mut counts = BTreeMap::new();
    for &i in got.into_iter().flatten() {
        *counts.entry(i).or_default() += 1;
    }
    counts
}

/// Per sender, the message indices stored, in delivery order per recipient.
async fn stored_by_sender(
    c: &Client,
    recipients: &[String],
) -> anyhow::Result<BTreeMap<usize, Vec<u64>>> {
    let mut by_sender: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
    for r in recipients {
        let mut since = 0;
        loop {
            let page = c
                .call(
                    "poll_messages",
                    json!({ "session_id": r, "since": since, "mark_read": false, "limit": 1000 }),
                )
                .await?;
            let messages = page["messages"].as_array().context("no messages")?;
            if messages.is_empty() {
                break;
            }
            for m in messages {
                let content = m["content"].as_str().unwrap_or_default();
                let (s, i) = content
                    .split_once(':')
                    .and_then(|(s, i)| Some((s.parse().ok()?, i.parse().ok()?)))
                    .with_context(|| format!("a stored message the soak never sent: {m}"))?;
                by_sender.entry(s).or_default().push(i);
            }
            since = page["next_since"].as_i64().context("no next_since")?;
        }
    }
    Ok(by_sender)
}

// ---------------------------------------------------------------------------------------------
// Parties

/// One party trial.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PartyTrial {
    pub kill_after_ms: u64,
    /// Members completed / running when the daemon was killed.
    pub completed_at_kill: u64,
    pub running_at_kill: u64,
    /// Of those, ACP members (their agent cannot be adopted: it is stopped and rerun).
    pub acp_running_at_kill: u64,
    /// Whether the party was still running when it was killed.
    pub mid_party: bool,
    /// A member's `troupe call` started the daemon again before the soak did (the CLI
    /// auto-starts it); the soak then used that one.
    pub restarted_by_member: bool,
    /// The party's status at the end (`completed` unless something went wrong).
    pub status: String,
    /// The party did not finish within --finish-secs after the restart.
    pub stuck: bool,
    pub members: u64,
    pub runs: u64,
    pub crashed_runs: u64,
    /// Runs by status.
    pub run_statuses: BTreeMap<String, u64>,
    /// Crashes the party counted for its members (each costs a retry).
    pub member_crashes: u64,
    /// Of those, crashes with no crashed or timed-out run: attempts whose run never started
    /// (the kill fell between its row and its spawn) counted as crashes.
    pub crashes_without_a_crashed_run: u64,
    /// Why each run that did not complete ended (`role#index attempt n: status: error`).
    pub unfinished_runs: Vec<String>,
    /// Runs (or timeline spawns) of a member after it had completed.
    pub reruns: u64,
    /// (role, index, attempt) with more than one run or more than one `member_spawning`.
    pub double_spawns: u64,
    /// Processes of the party alive after it ended and the daemon stopped (killed afterwards).
    pub orphans: u64,
    pub orphan_processes: Vec<String>,
    /// Launch → party finished, the downtime included.
    pub wall_ms: f64,
}

impl PartyTrial {
    fn violations(&self) -> u64 {
        self.reruns
            + self.double_spawns
            + self.orphans
            + u64::from(self.stuck)
            + u64::from(self.status != "completed")
    }
}

async fn parties(args: PartiesSoakArgs, json_out: bool) -> anyhow::Result<()> {
    check_window(
        args.trials,
        args.kill_min_ms,
        args.kill_max_ms.unwrap_or(u64::MAX),
    )?;
    let (seed, mut rng) = rng(args.seed);
    if !json_out {
        eprintln!(
            "soak parties: {} trials, kill after {} ms to {}, seed {seed}",
            args.trials,
            args.kill_min_ms,
            args.kill_max_ms
                .map_or("90% of the party's planned length".into(), |m| format!(
                    "{m} ms"
                ))
        );
    }
    let mut trials = Vec::with_capacity(args.trials);
    for i in 0..args.trials {
        let plan = TrialPlan::draw(&mut rng, &args);
        let t = party_trial(&args, &plan)
            .await
            .with_context(|| format!("trial {}", i + 1))?;
        if !json_out {
            eprintln!(
                "trial {:>2}: kill at {:>4} ms ({} done, {} running, {} of them ACP{}) → {}{}; {} runs for {} members ({})  reruns {}  double spawns {}  orphans {}{}",
                i + 1,
                t.kill_after_ms,
                t.completed_at_kill,
                t.running_at_kill,
                t.acp_running_at_kill,
                if t.mid_party { "" } else { ", after the end" },
                t.status,
                if t.restarted_by_member {
                    " (restarted by a member's CLI)"
                } else {
                    ""
                },
                t.runs,
                t.members,
                t.run_statuses
                    .iter()
                    .map(|(k, v)| format!("{v} {k}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                t.reruns,
                t.double_spawns,
                t.orphans,
                if t.orphan_processes.is_empty() {
                    String::new()
                } else {
                    format!(": {}", t.orphan_processes.join(", "))
                }
            );
        }
        trials.push(t);
    }
    let sum = |f: fn(&PartyTrial) -> u64| trials.iter().map(f).sum::<u64>();
    let totals = json!({
        "killed_mid_party": sum(|t| u64::from(t.mid_party)),
        "killed_with_acp_running": sum(|t| u64::from(t.acp_running_at_kill > 0)),
        "completed": sum(|t| u64::from(t.status == "completed")),
        "stuck": sum(|t| u64::from(t.stuck)),
        "restarted_by_member": sum(|t| u64::from(t.restarted_by_member)),
        "members": sum(|t| t.members),
        "runs": sum(|t| t.runs),
        "crashed_runs": sum(|t| t.crashed_runs),
        "crashes_without_a_crashed_run": sum(|t| t.crashes_without_a_crashed_run),
        "reruns": sum(|t| t.reruns),
        "double_spawns": sum(|t| t.double_spawns),
        "orphans": sum(|t| t.orphans),
        "trials_with_orphans": sum(|t| u64::from(t.orphans > 0)),
        "wall_ms_median": crate::harness::median(trials.iter().map(|t| t.wall_ms).collect()),
    });
    let violations = sum(PartyTrial::violations);
    if json_out {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "trials": args.trials, "seed": seed, "totals": totals, "per_trial": trials,
            }))?
        );
    } else {
        let n = |k: &str| totals[k].as_u64().unwrap_or(0);
        println!(
            "{} trials of kill -9 mid-party (process and ACP members; seed {seed}):\n  killed mid-party       {:>6}  (with an ACP member running: {})\n  parties completed      {:>6}  (stuck {})\n  member runs            {:>6}  for {} members ({} crashed by the kills)\n  crashes counted for attempts whose run never started {} (each spends a retry)\n  completed member rerun {:>6}\n  attempt spawned twice  {:>6}\n  orphan processes       {:>6}  (in {} trials)\n  launch → finished      {:>6.0} ms (median, downtime included)",
            args.trials,
            n("killed_mid_party"),
            n("killed_with_acp_running"),
            n("completed"),
            n("stuck"),
            n("runs"),
            n("members"),
            n("crashed_runs"),
            n("crashes_without_a_crashed_run"),
            n("reruns"),
            n("double_spawns"),
            n("orphans"),
            n("trials_with_orphans"),
            totals["wall_ms_median"].as_f64().unwrap_or(0.0),
        );
    }
    if violations > 0 {
        bail!("the soak found {violations} violations");
    }
    Ok(())
}

/// What is drawn at random for a party trial.
struct TrialPlan {
    kill_after_ms: u64,
    /// Seconds each process role's members sleep before they complete.
    sleeps: BTreeMap<&'static str, f64>,
    /// How long the soak's approver lets a permission request wait.
    approve_after: Duration,
}

impl TrialPlan {
    fn draw(rng: &mut fastrand::Rng, args: &PartiesSoakArgs) -> TrialPlan {
        let sleeps: BTreeMap<&'static str, f64> = PROCESS_ROLES
            .iter()
            .map(|r| (*r, 0.1 + rng.f64() * 0.5))
            .collect();
        let approve_after = Duration::from_millis(rng.u64(200..=800));
        // The critical path: plan → (build | check) → review → ship; an ACP member takes about
        // its approval wait and a poll of the approver.
        let acp = approve_after.as_secs_f64() + 0.03;
        let planned_ms =
            1000.0 * (sleeps["plan"] + sleeps["check"].max(acp) + acp + sleeps["ship"]);
        let max = args
            .kill_max_ms
            .unwrap_or((planned_ms * 0.9) as u64)
            .max(args.kill_min_ms);
        TrialPlan {
            kill_after_ms: rng.u64(args.kill_min_ms..=max),
            sleeps,
            approve_after,
        }
    }
}

const PROCESS_ROLES: [&str; 3] = ["plan", "check", "ship"];
const ACP_ROLES: [&str; 2] = ["build", "review"];

/// The soak's party: plan (2 processes) → build (2 ACP agents) and check (3 processes) →
/// review (1 ACP agent) → ship (2 processes); every role restarts its crashed members.
fn party_definition() -> Value {
    let role = |agent: &str, count: u32| {
        json!({ "agent": agent, "count": count, "on_crash": "restart", "retry_attempts": 5,
                "prompt": "Soak." })
    };
    json!({
        "name": "soak",
        "roles": {
            "plan": role("soak-plan", 2),
            "build": role("soak-build", 2),
            "check": role("soak-check", 3),
            "review": role("soak-review", 1),
            "ship": role("soak-ship", 2),
        },
        "flow": { "build": ["plan"], "check": ["plan"], "review": ["build", "check"], "ship": ["review"] },
    })
}

/// A process member: sleeps, then completes through the real CLI (`troupe` is first on its PATH).
const MEMBER_SCRIPT: &str = "#!/bin/sh\nset -e\nsleep \"$SOAK_SLEEP\"\ntroupe call complete \"{\\\"output\\\":\\\"$TROUPE_ROLE#$TROUPE_INSTANCE attempt $TROUPE_ATTEMPT\\\"}\" >/dev/null\n";

async fn define(c: &Client, plan: &TrialPlan, dir: &Path) -> anyhow::Result<()> {
    let script = dir.join("member.sh");
    std::fs::write(&script, MEMBER_SCRIPT)?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))?;
    let exe = std::env::current_exe()?.display().to_string();
    for (role, secs) in &plan.sleeps {
        c.call(
            "create_agent_definition",
            json!({ "definition": { "name": format!("soak-{role}"), "command": [script.display().to_string()],
                                    "env": { "SOAK_SLEEP": format!("{secs:.3}") } } }),
        )
        .await?;
    }
    for role in ACP_ROLES {
        c.call(
            "create_agent_definition",
            json!({ "definition": {
                "name": format!("soak-{role}"), "runner": "acp:scripted",
                "command": [exe, "scripted-acp-agent"],
                // A child in the agent's group, as Claude Code's `troupe mcp`, that must not
                // outlive the run.
                "env": { "TROUPE_ACP_SCRIPT": "write", "TROUPE_ACP_FILE": format!("{role}.md"),
                         "TROUPE_ACP_CHILD": "300" },
                "acp": { "mcp": false },
            } }),
        )
        .await?;
    }
    c.call(
        "create_party_definition",
        json!({ "definition": party_definition() }),
    )
    .await?;
    Ok(())
}

/// Approves every pending request once it has waited `after`, across daemon restarts, until
/// `stop` is set.
async fn approver(layout: Layout, after: Duration, stop: Arc<AtomicBool>) {
    let mut seen: BTreeMap<String, Instant> = BTreeMap::new();
    while !stop.load(Ordering::SeqCst) {
        let Ok(c) = client::connect(&layout, false).await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        while !stop.load(Ordering::SeqCst) {
            let Ok(list) = c
                .call("list_approvals", json!({ "status": "pending" }))
                .await
            else {
                break;
            };
            for a in list["approvals"].as_array().into_iter().flatten() {
                let Some(id) = a["approval_id"].as_str() else {
                    continue;
                };
                let first = *seen.entry(id.to_string()).or_insert_with(Instant::now);
                if first.elapsed() >= after {
                    // Refusals (a request of a run that has ended, not this worker's first
                    // in line) are expected: the next round sees what is left.
                    let _decided = c
                        .call(
                            "decide_approval",
                            json!({ "approval_id": id, "decision": "approve", "decided_by": "soak" }),
                        )
                        .await;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Polls the party until it has finished; None after `limit`.
async fn party_end(c: &Client, party: &str, limit: Duration) -> anyhow::Result<Option<Value>> {
    let deadline = Instant::now() + limit;
    loop {
        let s = c
            .call("get_party_status", json!({ "party_id": party }))
            .await?;
        if matches!(
            s["party"]["status"].as_str(),
            Some("completed" | "failed" | "cancelled")
        ) {
            return Ok(Some(s));
        }
        if Instant::now() > deadline {
            return Ok(None);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn party_trial(args: &PartiesSoakArgs, plan: &TrialPlan) -> anyhow::Result<PartyTrial> {
    let started_ticks = boot_ticks()?;
    let (scratch, layout) = scratch_layout("troupe-soak-party-")?;
    let project = scratch.path().join("project");
    std::fs::create_dir_all(project.join(".git"))?;
    let (mut daemon, c, _) = start_daemon(&layout).await?;
    define(&c, plan, scratch.path()).await?;
    let stop = Arc::new(AtomicBool::new(false));
    let approving = tokio::spawn(approver(layout.clone(), plan.approve_after, stop.clone()));
    let launched_at = Instant::now();
    let launched = c
        .call(
            "launch_party",
            json!({ "name": "soak", "cwd": project.display().to_string() }),
        )
        .await?;
    let party = launched["party_id"]
        .as_str()
        .context("no party_id")?
        .to_string();

    let mut t = PartyTrial {
        kill_after_ms: plan.kill_after_ms,
        ..PartyTrial::default()
    };
    tokio::time::sleep(
        Duration::from_millis(plan.kill_after_ms).saturating_sub(launched_at.elapsed()),
    )
    .await;
    let before = c
        .call("get_party_status", json!({ "party_id": party }))
        .await?;
    let members = before["members"].as_array().cloned().unwrap_or_default();
    t.completed_at_kill = members
        .iter()
        .filter(|m| m["status"] == "completed")
        .count() as u64;
    let running = members.iter().filter(|m| m["status"] == "running");
    t.running_at_kill = running.clone().count() as u64;
    t.acp_running_at_kill = running
        .filter(|m| ACP_ROLES.iter().any(|r| m["role"] == *r))
        .count() as u64;
    t.mid_party = matches!(
        before["party"]["status"].as_str(),
        Some("running" | "pending")
    );
    daemon.0.kill().context("cannot kill the daemon")?;
    let _reaped = daemon.0.wait();
    drop(c);

    let (mut daemon, c, _) = start_daemon(&layout).await?;
    let pid = c.call("daemon_status", json!({})).await?["pid"]
        .as_u64()
        .context("no daemon pid")? as u32;
    t.restarted_by_member = pid != daemon.0.id();
    let end = party_end(&c, &party, Duration::from_secs(args.finish_secs)).await?;
    t.wall_ms = launched_at.elapsed().as_secs_f64() * 1000.0;
    let status = match end {
        Some(s) => s,
        None => {
            t.stuck = true;
            let _cancel = c.call("cancel_party", json!({ "party_id": party })).await;
            party_end(&c, &party, Duration::from_secs(10))
                .await?
                .unwrap_or_default()
        }
    };
    t.status = status["party"]["status"]
        .as_str()
        .unwrap_or("unknown")
        .to_string();
    let members = status["members"].as_array().cloned().unwrap_or_default();
    t.members = members.len() as u64;
    t.member_crashes = members
        .iter()
        .filter_map(|m| m["crash_count"].as_u64())
        .sum();
    let runs = c.call("list_agents", json!({ "party_id": party })).await?["runs"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let events = party_events(&c, &party).await?;
    stop.store(true, Ordering::SeqCst);
    let _approver_done = approving.await;
    let _answer_or_hangup = c.call("shutdown_daemon", json!({})).await;
    drop(c);
    stopped(&mut daemon, pid).await?;

    t.runs = runs.len() as u64;
    t.crashed_runs = runs.iter().filter(|r| r["status"] == "crashed").count() as u64;
    let failed_runs = runs
        .iter()
        .filter(|r| matches!(r["status"].as_str(), Some("crashed" | "timeout")))
        .count() as u64;
    t.crashes_without_a_crashed_run = t.member_crashes.saturating_sub(failed_runs);
    for r in &runs {
        let status = r["status"].as_str().unwrap_or("?");
        *t.run_statuses.entry(status.to_string()).or_default() += 1;
        if !matches!(status, "success" | "partial" | "blocked") {
            t.unfinished_runs.push(format!(
                "{}#{} attempt {}: {status}: {}",
                r["role_name"].as_str().unwrap_or("?"),
                r["instance_index"],
                r["attempt"],
                r["error"].as_str().unwrap_or("")
            ));
        }
    }
    let (reruns, double_spawns) = check_runs(&runs, &events);
    t.reruns = reruns;
    t.double_spawns = double_spawns;

    // Anything of the party still alive now is an orphan. A member that has just completed may
    // still be exiting: give it a moment (a condition, bounded) before counting it.
    let pids: BTreeSet<i32> = runs
        .iter()
        .filter_map(|r| r["pid"].as_i64().and_then(|p| i32::try_from(p).ok()))
        .collect();
    let run_ids: BTreeSet<String> = runs
        .iter()
        .filter_map(|r| r["run_id"].as_str().map(str::to_string))
        .collect();
    let mut left = party_processes(&pids, &run_ids, &party, started_ticks);
    let grace = Instant::now() + Duration::from_secs(3);
    while !left.is_empty() && Instant::now() < grace {
        tokio::time::sleep(Duration::from_millis(50)).await;
        left = party_processes(&pids, &run_ids, &party, started_ticks);
    }
    t.orphans = left.len() as u64;
    for p in &left {
        t.orphan_processes
            .push(format!("{} (pgid {}) {}", p.pid, p.pgid, p.cmdline));
        // The soak started them (through its daemon); they must not outlive it.
        if let Some(pid) = rustix::process::Pid::from_raw(p.pid) {
            let _gone = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
    }
    Ok(t)
}

/// The party's whole timeline.
async fn party_events(c: &Client, party: &str) -> anyhow::Result<Vec<Value>> {
    let mut events = Vec::new();
    let mut since = 0;
    loop {
        let page = c
            .call(
                "list_events",
                json!({ "party_id": party, "since": since, "limit": 1000 }),
            )
            .await?;
        let batch = page["events"].as_array().cloned().unwrap_or_default();
        if batch.is_empty() {
            return Ok(events);
        }
        since = page["next_since"].as_i64().context("no next_since")?;
        events.extend(batch);
    }
}

/// (completed members run again, attempts spawned twice), from the runs and the timeline.
fn check_runs(runs: &[Value], events: &[Value]) -> (u64, u64) {
    let member =
        |role: &Value, index: &Value| format!("{}#{}", role.as_str().unwrap_or("?"), index);
    // Runs: one per (role, index, attempt); nothing of a member created after it completed.
    let mut per_attempt: BTreeMap<String, u64> = BTreeMap::new();
    let mut completed_at: BTreeMap<String, String> = BTreeMap::new();
    for r in runs {
        let m = member(&r["role_name"], &r["instance_index"]);
        *per_attempt
            .entry(format!("{m}/{}", r["attempt"]))
            .or_default() += 1;
        // A run that called `complete` (success, partial or blocked) completed its member.
        if matches!(
            r["status"].as_str(),
            Some("success" | "partial" | "blocked")
        ) && let Some(done) = r["completed_at"].as_str()
        {
            let first = completed_at.entry(m).or_insert_with(|| done.to_string());
            if done < first.as_str() {
                *first = done.to_string();
            }
        }
    }
    let mut reruns = runs
        .iter()
        .filter(|r| {
            let m = member(&r["role_name"], &r["instance_index"]);
            // Timestamps are fixed-width UTC: they compare as strings.
            completed_at
                .get(&m)
                .is_some_and(|done| r["created_at"].as_str().is_some_and(|c| c > done.as_str()))
        })
        .count() as u64;
    let mut double = per_attempt.values().map(|n| n - 1).sum::<u64>();
    // Timeline: one `member_spawning` per (role, index, attempt), none after `member_completed`.
    let mut spawned: BTreeMap<String, u64> = BTreeMap::new();
    let mut done: BTreeSet<String> = BTreeSet::new();
    for e in events {
        let m = member(&e["data"]["role"], &e["data"]["index"]);
        match e["kind"].as_str() {
            Some("member_spawning") => {
                if done.contains(&m) {
                    reruns += 1;
                }
                *spawned
                    .entry(format!("{m}/{}", e["data"]["attempt"]))
                    .or_default() += 1;
            }
            Some("member_completed") => {
                done.insert(m);
            }
            _ => {}
        }
    }
    double += spawned.values().map(|n| n - 1).sum::<u64>();
    (reruns, double)
}

/// Waits for the stopped daemon to be gone (ours, or one a member's CLI started).
async fn stopped(daemon: &mut DaemonGuard, pid: u32) -> anyhow::Result<()> {
    if pid == daemon.0.id() {
        let _reaped = daemon.0.wait();
        return Ok(());
    }
    let _ours_lost_the_race = daemon.0.wait();
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive(pid as i32) {
        if Instant::now() > deadline {
            bail!("the daemon {pid} did not stop within 10 s");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}

/// A process as /proc shows it.
#[derive(Debug)]
struct Proc {
    pid: i32,
    pgid: i32,
    cmdline: String,
}

/// Clock ticks since boot now (process start times are given in these).
fn boot_ticks() -> anyhow::Result<u64> {
    let uptime = std::fs::read_to_string("/proc/uptime")?;
    let secs: f64 = uptime
        .split_whitespace()
        .next()
        .and_then(|s| s.parse().ok())
        .context("bad /proc/uptime")?;
    // /proc/uptime is rounded to 10 ms: a tick early, so a process started in this very tick
    // still counts as started since.
    Ok(((secs * ticks_per_second()) as u64).saturating_sub(1))
}

/// state, pgid and start time (ticks since boot) of a process.
fn stat(pid: i32) -> Option<(char, i32, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    // stat(5): state is field 3, pgrp 5, starttime 22; `fields` starts at field 3.
    Some((
        fields.first()?.chars().next()?,
        fields.get(2)?.parse().ok()?,
        fields.get(19)?.parse().ok()?,
    ))
}

fn alive(pid: i32) -> bool {
    stat(pid).is_some_and(|(state, _, _)| state != 'Z')
}

/// Live processes started since `since` (boot ticks; older ones cannot be the party's) whose
/// process group is one a run recorded, or whose environment names a run or the party.
fn party_processes(
    pgids: &BTreeSet<i32>,
    run_ids: &BTreeSet<String>,
    party: &str,
    since: u64,
) -> Vec<Proc> {
    let me = std::process::id() as i32;
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Some((state, pgid, start)) = stat(pid) else {
            continue;
        };
        if state == 'Z' || start < since {
            continue;
        }
        let ours = pgids.contains(&pgid)
            || std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| {
                env.split(|b| *b == 0).any(|var| {
                    let var = String::from_utf8_lossy(var);
                    var.strip_prefix("TROUPE_RUN_ID=")
                        .is_some_and(|id| run_ids.contains(id))
                        || var.strip_prefix("TROUPE_PARTY_ID=") == Some(party)
                })
            });
        if ours {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| {
                    String::from_utf8_lossy(&c)
                        .replace('\0', " ")
                        .trim()
                        .to_string()
                })
                .unwrap_or_default();
            found.push(Proc { pid, pgid, cmdline });
        }
    }
    found
}

#[cfg(test)]
mod tests;
