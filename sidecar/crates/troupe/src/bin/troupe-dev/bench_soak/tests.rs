//! The soak's checks, on made-up runs and events, and its /proc walk on a real process.

use serde_json::json;

use super::*;

fn run(role: &str, index: u32, attempt: u32, status: &str, created: &str, done: &str) -> Value {
    json!({ "role_name": role, "instance_index": index, "attempt": attempt, "status": status,
            "created_at": created, "completed_at": done })
}

fn event(kind: &str, role: &str, index: u32, attempt: u32) -> Value {
    json!({ "kind": kind, "data": { "role": role, "index": index, "attempt": attempt } })
}

#[test]
fn a_clean_recovery_is_no_rerun_and_no_double_spawn() {
    let runs = [
        run(
            "a",
            0,
            1,
            "crashed",
            "2026-01-01T00:00:00.100Z",
            "2026-01-01T00:00:00.200Z",
        ),
        run(
            "a",
            0,
            2,
            "success",
            "2026-01-01T00:00:00.300Z",
            "2026-01-01T00:00:00.400Z",
        ),
        run(
            "b",
            0,
            1,
            "partial",
            "2026-01-01T00:00:00.100Z",
            "2026-01-01T00:00:00.150Z",
        ),
    ];
    let events = [
        event("member_spawning", "a", 0, 1),
        event("member_spawning", "b", 0, 1),
        event("member_completed", "b", 0, 1),
        event("member_crashed", "a", 0, 1),
        event("member_spawning", "a", 0, 2),
        event("member_completed", "a", 0, 2),
    ];
    assert_eq!(check_runs(&runs, &events), (0, 0));
}

#[test]
fn a_completed_member_run_again_and_an_attempt_spawned_twice_are_counted() {
    let runs = [
        run(
            "a",
            0,
            1,
            "success",
            "2026-01-01T00:00:00.100Z",
            "2026-01-01T00:00:00.200Z",
        ),
        run("a", 0, 2, "running", "2026-01-01T00:00:00.300Z", ""),
        run(
            "b",
            1,
            1,
            "crashed",
            "2026-01-01T00:00:00.100Z",
            "2026-01-01T00:00:00.150Z",
        ),
        run(
            "b",
            1,
            1,
            "blocked",
            "2026-01-01T00:00:00.100Z",
            "2026-01-01T00:00:00.170Z",
        ),
    ];
    assert_eq!(check_runs(&runs, &[]), (1, 1));
    let events = [
        event("member_spawning", "a", 0, 1),
        event("member_completed", "a", 0, 1),
        event("member_spawning", "a", 0, 2),
        event("member_spawning", "c", 0, 1),
        event("member_spawning", "c", 0, 1),
    ];
    assert_eq!(check_runs(&[], &events), (1, 1));
}

#[test]
fn a_live_process_naming_a_run_in_its_environment_is_found() {
    use std::os::unix::process::CommandExt;
    let since = boot_ticks().unwrap();
    // Its own process group, as a member's.
    let mut child = std::process::Command::new("sleep")
        .arg("30")
        .env("TROUPE_RUN_ID", "soak-test-run")
        .process_group(0)
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    let runs = BTreeSet::from(["soak-test-run".to_string()]);
    // Until the child has exec'd, /proc shows the test's own environment: wait for it.
    let deadline = Instant::now() + Duration::from_secs(30);
    let by_env = loop {
        let found = party_processes(&BTreeSet::new(), &runs, "no-party", since);
        if found.iter().any(|p| p.pid == pid) || Instant::now() > deadline {
            break found.iter().any(|p| p.pid == pid);
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let by_group = party_processes(&BTreeSet::from([pid]), &BTreeSet::new(), "x", 0)
        .iter()
        .any(|p| p.pid == pid);
    let other_run = party_processes(
        &BTreeSet::new(),
        &BTreeSet::from(["another".to_string()]),
        "x",
        0,
    )
    .iter()
    .any(|p| p.pid == pid);
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(by_env && by_group && !other_run);
    assert!(!alive(pid));
}
