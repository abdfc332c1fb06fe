//! Schedules that start parties (`[schedules.<name>]` of `.troupe/config.toml`), on a real daemon
//! through the real CLI: listed with their next due time (UTC), a bad cron or an unknown party
//! reported and never fired, paused and resumed (from the inbox too, whose item changes with the
//! state), run now. A due time missed while the daemon was killed (-9) runs once by its policy
//! after the restart (`once`: one run; `skip`: none), a paused one not at all; a fire committed
//! but not seen launched is launched at the next start, once. Due times are put in the past by
//! writing the database while the daemon is stopped, so no test waits for a clock.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::scenario::{Puppet, Scenario};
use crate::support::{cli, stderr, stdout, wait_for};

const CONFIG: &str = r#"
[schedules.nightly]
cron = "0 2 * * *"
party = "team"
task = "fix the flaky tests"

[schedules.skipper]
cron = "@daily"
party = "team"
task = "tidy the docs"
missed = "skip"

[schedules.held]
cron = "0 4 * * *"
party = "team"
task = "held back"
paused = true
"#;

const PAST: &str = "2020-01-01T02:00:00.000Z";

fn write_config(project: &str, text: &str) {
    let dir = Path::new(project).join(".troupe");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.toml"), text).unwrap();
}

/// `troupe schedule ARGS… --json` in the project; its result.
fn schedule_cli(s: &Scenario, args: &[&str]) -> Value {
    let mut all = vec!["schedule"];
    all.extend_from_slice(args);
    all.push("--json");
    let out = cli(&s.daemon.layout, &all, Some(Path::new(&s.project)));
    assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    serde_json::from_str(&stdout(&out)).unwrap()
}

async fn schedules(s: &Scenario) -> Vec<Value> {
    let r = s
        .person
        .call("list_schedules", json!({ "cwd": s.project }))
        .await
        .unwrap();
    r["schedules"].as_array().unwrap().clone()
}

async fn schedule(s: &Scenario, name: &str) -> Value {
    schedules(s)
        .await
        .into_iter()
        .find(|x| x["name"] == name)
        .unwrap_or_else(|| panic!("no schedule {name}"))
}

/// The timeline's `kind` events of schedule `name`.
async fn events(s: &Scenario, kind: &str, name: &str) -> Vec<Value> {
    let r = s
        .person
        .call("list_events", json!({ "kind": kind, "limit": 1000 }))
        .await
        .unwrap();
    r["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["data"]["schedule"] == name)
        .cloned()
        .collect()
}

async fn parties(s: &Scenario) -> Vec<Value> {
    let r = s
        .person
        .call("list_parties", json!({ "cwd": s.project }))
        .await
        .unwrap();
    r["parties"].as_array().unwrap().clone()
}

/// The database, written while the daemon is stopped.
fn db(s: &Scenario) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(s.daemon.layout.data_dir.join("troupe.db")).unwrap();
    conn.busy_timeout(Duration::from_secs(30)).unwrap();
    conn
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedules_are_listed_paused_resumed_run_now_and_a_bad_one_is_reported() {
    let s = Scenario::new().await;
    s.party("team", &[("dev", Puppet::Idle)]).await;
    write_config(
        &s.project,
        &format!(
            "{CONFIG}
[schedules.broken]
cron = \"every night\"
party = \"team\"
task = \"x\"

[schedules.stranger]
cron = \"@hourly\"
party = \"ghosts\"
task = \"x\"
"
        ),
    );

    // The CLI in a project the daemon has not seen yet: its schedules are read there and then.
    let listed = schedule_cli(&s, &["list"]);
    let all = listed["schedules"].as_array().unwrap();
    let by = |name: &str| all.iter().find(|x| x["name"] == name).unwrap().clone();
    assert_eq!(all.len(), 5, "{listed}");
    let nightly = by("nightly");
    let next = nightly["next_due_at"].as_str().unwrap();
    assert!(
        next.ends_with("T02:00:00.000Z"),
        "due at 02:00 UTC: {nightly}"
    );
    assert!(
        next > nightly["state_at"].as_str().unwrap(),
        "in the future: {nightly}"
    );
    assert_eq!(
        (nightly["paused"].clone(), nightly["missed"].clone()),
        (json!(false), json!("once"))
    );
    assert!(nightly["error"].is_null() && nightly["last_run_at"].is_null());
    let held = by("held");
    assert_eq!(held["paused"], true, "{held}");
    assert!(held["next_due_at"].is_null(), "{held}");
    assert_eq!(by("skipper")["missed"], "skip");
    // A bad cron and an unknown party: said in the list and on the timeline, never due.
    let broken = by("broken");
    assert!(
        broken["error"].as_str().unwrap().contains("every night")
            && broken["next_due_at"].is_null(),
        "{broken}"
    );
    assert!(by("stranger")["error"].as_str().unwrap().contains("ghosts"));
    assert_eq!(events(&s, "schedule_error", "broken").await.len(), 1);
    assert_eq!(events(&s, "schedule_error", "stranger").await.len(), 1);
    let out = cli(
        &s.daemon.layout,
        &["schedule", "list"],
        Some(Path::new(&s.project)),
    );
    let text = stdout(&out);
    assert!(
        text.contains("nightly  next ")
            && text.contains("held  paused")
            && text.contains("error: cron"),
        "{text}"
    );

    // The inbox: an item per schedule, answered by pausing it, or resuming it when paused.
    let inbox = s.inbox().await;
    let item = |items: &[Value], name: &str| {
        items
            .iter()
            .find(|i| i["kind"] == "schedule" && i["answer"]["params"]["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no inbox item for {name}: {items:?}"))
    };
    let active = item(&inbox, "nightly");
    assert_eq!(active["answer"]["op"], "pause_schedule");
    let title = active["title"].as_str().unwrap();
    assert!(
        title.starts_with("schedule nightly: next ") && title.ends_with("T02:00Z, party team"),
        "{title}"
    );
    assert_eq!(item(&inbox, "held")["answer"]["op"], "resume_schedule");
    // Answered as an editor would: its op with its params.
    s.person
        .call(
            active["answer"]["op"].as_str().unwrap(),
            active["answer"]["params"].clone(),
        )
        .await
        .unwrap();
    let paused = schedule(&s, "nightly").await;
    assert!(
        paused["paused"] == true && paused["next_due_at"].is_null(),
        "{paused}"
    );
    let now_paused = item(&s.inbox().await, "nightly");
    assert_eq!(now_paused["answer"]["op"], "resume_schedule");
    assert_ne!(
        now_paused["item_id"], active["item_id"],
        "the id changes with the state"
    );
    assert_eq!(events(&s, "schedule_paused", "nightly").await.len(), 1);

    // Run now: the party launched with the task, the schedule still paused and not due.
    let ran = schedule_cli(&s, &["run-now", "nightly"]);
    let party = ran["party_id"].as_str().unwrap().to_string();
    assert_eq!(ran["schedule"]["last_party_id"], party.as_str(), "{ran}");
    let status = s.ended(&party).await;
    assert_eq!(status["party"]["status"], "completed", "{status}");
    assert_eq!(
        status["party"]["inputs"],
        json!({ "task": "fix the flaky tests" })
    );
    let after = schedule(&s, "nightly").await;
    assert!(
        after["paused"] == true && after["next_due_at"].is_null(),
        "{after}"
    );
    assert!(
        after["last_run_at"].is_string() && after["last_due_at"].is_null(),
        "{after}"
    );
    let fired = events(&s, "schedule_fired", "nightly").await;
    assert_eq!(fired.len(), 1);
    assert_eq!(fired[0]["data"]["by"], "person");

    // Resumed: due again at its next 02:00.
    let resumed = schedule_cli(&s, &["resume", "nightly"]);
    let again = resumed["schedule"]["next_due_at"].as_str().unwrap();
    assert!(
        again.ends_with("T02:00:00.000Z") && again >= next,
        "{resumed}"
    );
    // A broken schedule does not run; an unknown one is not found; only the person may.
    let out = cli(
        &s.daemon.layout,
        &["schedule", "run-now", "broken"],
        Some(Path::new(&s.project)),
    );
    assert!(!out.status.success());
    assert!(stderr(&out).contains("every night"), "{}", stderr(&out));
    let err = s
        .person
        .call(
            "pause_schedule",
            json!({ "cwd": s.project, "name": "nope" }),
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("nope"), "{err}");

    // The config changed: a fixed cron is due, a removed schedule is gone.
    write_config(
        &s.project,
        "[schedules.broken]\ncron = \"30 1 * * *\"\nparty = \"team\"\ntask = \"x\"\n",
    );
    let now = schedules(&s).await;
    assert_eq!(now.len(), 1, "{now:?}");
    assert!(now[0]["error"].is_null(), "{now:?}");
    assert!(
        now[0]["next_due_at"]
            .as_str()
            .unwrap()
            .ends_with("T01:30:00.000Z"),
        "{now:?}"
    );
    assert_eq!(events(&s, "schedule_removed", "nightly").await.len(), 1);
    assert_eq!(
        parties(&s).await.len(),
        1,
        "only the run now launched a party"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_missed_during_a_kill_9_runs_once_by_its_policy_and_a_paused_one_not_at_all() {
    let mut s = Scenario::new().await;
    s.party("team", &[("dev", Puppet::Idle)]).await;
    write_config(&s.project, CONFIG);
    assert_eq!(schedules(&s).await.len(), 3);

    // Down for years: every schedule's due time in the past (the paused one's too).
    s.daemon.kill9();
    let changed = db(&s)
        .execute(
            "UPDATE schedules SET next_due_at = ?1 WHERE name IN ('nightly', 'skipper', 'held')",
            [PAST],
        )
        .unwrap();
    assert_eq!(changed, 3);
    s.daemon.spawn();
    s.person = s.daemon.client().await;

    // `once`: the missed due times coalesce into one run, at start.
    let nightly = wait_for("nightly's missed run", 60, || async {
        let n = schedule(&s, "nightly").await;
        n["last_party_id"].is_string().then_some(n)
    })
    .await;
    let party = nightly["last_party_id"].as_str().unwrap().to_string();
    assert!(nightly["last_due_at"].as_str().unwrap() > PAST, "{nightly}");
    assert!(nightly["next_due_at"].as_str().unwrap() > nightly["last_run_at"].as_str().unwrap());
    let status = s.ended(&party).await;
    assert_eq!(status["party"]["status"], "completed", "{status}");
    let missed = events(&s, "schedule_missed", "nightly").await;
    assert_eq!(missed.len(), 1, "{missed:?}");
    assert_eq!(missed[0]["data"]["policy"], "once");
    assert_eq!(missed[0]["data"]["runs"], 1);
    assert!(
        missed[0]["data"]["missed"].as_u64().unwrap() > 1000,
        "{missed:?}"
    );
    let fired = events(&s, "schedule_fired", "nightly").await;
    assert_eq!(fired.len(), 1, "{fired:?}");
    assert_eq!(fired[0]["data"]["by"], "cron");

    // `skip`: none of them runs; it waits for its next time.
    let skipped = wait_for("skipper's skip", 60, || async {
        let e = events(&s, "schedule_missed", "skipper").await;
        (!e.is_empty()).then_some(e)
    })
    .await;
    assert_eq!(skipped.len(), 1);
    assert_eq!(
        (
            skipped[0]["data"]["policy"].clone(),
            skipped[0]["data"]["runs"].clone()
        ),
        (json!("skip"), json!(0))
    );
    let skipper = schedule(&s, "skipper").await;
    assert!(
        skipper["last_run_at"].is_null()
            && skipper["next_due_at"]
                .as_str()
                .unwrap()
                .ends_with("T00:00:00.000Z")
            && skipper["next_due_at"].as_str().unwrap() > PAST,
        "{skipper}"
    );
    assert!(events(&s, "schedule_fired", "skipper").await.is_empty());

    // Paused: nothing, though its due time was long past (the pass above went by it).
    let held = schedule(&s, "held").await;
    assert!(
        held["paused"] == true && held["last_run_at"].is_null(),
        "{held}"
    );
    assert!(events(&s, "schedule_fired", "held").await.is_empty());
    let all = parties(&s).await;
    assert_eq!(all.len(), 1, "one run in all: {all:?}");
    assert_eq!(all[0]["inputs"], json!({ "task": "fix the flaky tests" }));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fire_committed_before_a_kill_9_is_launched_at_the_restart_exactly_once() {
    let mut s = Scenario::new().await;
    s.party("team", &[("dev", Puppet::Idle)]).await;
    write_config(&s.project, CONFIG);
    assert_eq!(schedules(&s).await.len(), 3);

    // Killed right after committing a fire, before launching its party.
    s.daemon.kill9();
    db(&s)
        .execute(
            "UPDATE schedules SET launching = 1, last_run_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), \
             last_due_at = ?1 WHERE name = 'nightly'",
            [PAST],
        )
        .unwrap();
    s.daemon.spawn();
    s.person = s.daemon.client().await;
    let launched = wait_for("the committed fire's party", 60, || async {
        let n = schedule(&s, "nightly").await;
        n["last_party_id"].is_string().then_some(n)
    })
    .await;
    assert_eq!(launched["launching"], false);
    let party = launched["last_party_id"].as_str().unwrap().to_string();
    s.ended(&party).await;
    let recorded = events(&s, "schedule_launched", "nightly").await;
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0]["data"]["adopted"], false);

    // Killed after launching its party, before recording it: the party is taken, not launched
    // again.
    s.daemon.kill9();
    db(&s)
        .execute(
            "UPDATE schedules SET launching = 1, last_party_id = NULL, \
             last_run_at = '2000-01-01T00:00:00.000Z' WHERE name = 'nightly'",
            [],
        )
        .unwrap();
    s.daemon.spawn();
    s.person = s.daemon.client().await;
    let adopted = wait_for("the launched party taken", 60, || async {
        let n = schedule(&s, "nightly").await;
        n["last_party_id"].is_string().then_some(n)
    })
    .await;
    assert_eq!(adopted["last_party_id"], party.as_str());
    let recorded = events(&s, "schedule_launched", "nightly").await;
    assert_eq!(recorded.len(), 2);
    assert_eq!(recorded[1]["data"]["adopted"], true);
    assert_eq!(parties(&s).await.len(), 1, "one party for one fire");
}
