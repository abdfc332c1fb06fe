//! Schedules without a daemon: the cron's times in UTC, missed due times counted, a config's
//! schedules checked (each problem named), and the inbox item's id changing with its state.

use super::*;

fn at(s: &str) -> DateTime<Utc> {
    parse_time(s).expect("a time")
}

#[test]
fn five_fields_and_aliases_are_read_in_utc_and_seconds_are_refused() {
    let nightly = parse_cron("0 2 * * *").unwrap();
    let next = next_after(&nightly, at("2026-11-28T15:30:00.000Z")).unwrap();
    assert_eq!(stamp(next), "2026-11-29T02:00:00.000Z");
    let hourly = parse_cron("@hourly").unwrap();
    assert_eq!(
        stamp(next_after(&hourly, at("2026-11-28T15:30:00.000Z")).unwrap()),
        "2026-11-28T16:00:00.000Z"
    );
    let daily = parse_cron("@daily").unwrap();
    assert_eq!(
        stamp(next_after(&daily, at("2026-11-28T15:30:00.000Z")).unwrap()),
        "2026-11-29T00:00:00.000Z"
    );
    for bad in ["not a cron", "0 0 2 * * *", "61 * * * *", "", "* * *"] {
        let e = parse_cron(bad).unwrap_err();
        assert!(e.contains("cron"), "{bad:?}: {e}");
    }
    assert_eq!(minute("2026-11-29T02:00:00.000Z"), "2026-11-29T02:00Z");
}

#[test]
fn missed_due_times_are_counted_up_to_now() {
    let nightly = parse_cron("0 2 * * *").unwrap();
    let (count, last) = due_times(
        &nightly,
        at("2026-11-20T02:00:00.000Z"),
        at("2026-11-23T01:00:00.000Z"),
    );
    assert_eq!(
        (count, stamp(last).as_str()),
        (3, "2026-11-22T02:00:00.000Z")
    );
    // A due time that is not the cron's (written by hand) still counts as one.
    let (count, last) = due_times(
        &nightly,
        at("2026-11-20T03:00:00.000Z"),
        at("2026-11-20T03:00:30.000Z"),
    );
    assert_eq!(
        (count, stamp(last).as_str()),
        (1, "2026-11-20T03:00:00.000Z")
    );
    // A minutely cron left for years is counted to a bound.
    let minutely = parse_cron("* * * * *").unwrap();
    let (count, _) = due_times(
        &minutely,
        at("2020-01-01T00:00:00.000Z"),
        at("2026-01-01T00:00:00.000Z"),
    );
    assert_eq!(count, MISSED_COUNTED as u64);
}

fn config(dir: &Path, text: &str) -> ProjectConfig {
    std::fs::create_dir_all(dir.join(".troupe")).unwrap();
    std::fs::write(dir.join(crate::project_config::PATH), text).unwrap();
    ProjectConfig::load(dir).unwrap().unwrap()
}

#[tokio::test]
async fn a_configs_schedules_are_checked_and_each_problem_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("troupe.db")).unwrap();
    let c = config(
        dir.path(),
        r#"
[parties.team]
roles = { dev = { agent = "claude" } }

[schedules.nightly]
cron = "0 2 * * *"
party = "team"
task = "fix the flaky tests"

[schedules.weekly]
cron = "@weekly"
party = "team"
task = "tidy"
missed = "skip"
paused = true

[schedules.broken]
cron = "every night"
party = "ghosts"
task = "x"
missed = "twice"
colour = "blue"

[schedules.bare]
party = "team"
"#,
    );
    let now = at("2026-11-28T15:30:00.000Z");
    let mut read = read_config(&store, &c, now);
    read.sort_by(|a, b| a.name.cmp(&b.name));
    let by = |name: &str| read.iter().find(|s| s.name == name).unwrap().clone();
    let nightly = by("nightly");
    assert_eq!(nightly.problem, None);
    assert_eq!(nightly.missed, "once");
    assert!(!nightly.paused);
    assert_eq!(
        nightly.next_due_at.as_deref(),
        Some("2026-11-29T02:00:00.000Z")
    );
    let weekly = by("weekly");
    assert_eq!((weekly.missed.as_str(), weekly.paused), ("skip", true));
    assert_eq!(weekly.problem, None);
    let broken = by("broken").problem.unwrap();
    for part in ["every night", "ghosts", "twice", "colour"] {
        assert!(broken.contains(part), "{part} not named in {broken}");
    }
    let bare = by("bare").problem.unwrap();
    assert!(
        bare.contains("cron is missing") && bare.contains("task is missing"),
        "{bare}"
    );
}

#[test]
fn the_inbox_item_changes_id_with_its_state_and_says_a_failed_launch() {
    let mut s = Schedule {
        project_id: "p1".into(),
        name: "nightly".into(),
        cron: "0 2 * * *".into(),
        party: "team".into(),
        task: "fix".into(),
        missed: "once".into(),
        paused: false,
        problem: None,
        next_due_at: Some("2026-11-29T02:00:00.000Z".into()),
        last_due_at: None,
        last_run_at: Some("2026-11-28T02:00:01.000Z".into()),
        launching: false,
        last_party_id: None,
        last_error: Some("party team is not defined".into()),
        state_at: "2026-11-01T00:00:00.000Z".into(),
        created_at: "2026-11-01T00:00:00.000Z".into(),
    };
    let active = inbox_item(&s);
    assert_eq!(
        active.title,
        "schedule nightly: next 2026-11-29T02:00Z, party team"
    );
    assert_eq!(active.answer.op, "pause_schedule");
    assert_eq!(
        active.answer.params,
        json!({ "project_id": "p1", "name": "nightly" })
    );
    let detail = active.detail.clone().unwrap();
    assert!(
        detail.contains("its last launch failed: party team is not defined"),
        "{detail}"
    );
    s.paused = true;
    s.next_due_at = None;
    let paused = inbox_item(&s);
    assert_eq!(paused.title, "schedule nightly: paused, party team");
    assert_eq!(paused.answer.op, "resume_schedule");
    assert_ne!(paused.item_id, active.item_id);
}
