//! Unit tests of the process table: a run's group and its marked processes that left the group
//! are all found and ended, SIGTERM-proof ones included; other processes are left alone.

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use super::*;

/// A shell in its own group, with `run_id` in its environment, that ignores SIGTERM and
/// leaves a child in its group and one in a session of its own (setsid).
fn stubborn_group(run_id: &str) -> std::process::Child {
    Command::new("sh")
        .args([
            "-c",
            "trap '' TERM; sleep 300 & setsid sh -c \"trap '' TERM; sleep 300\" & wait",
        ])
        .env(RUN_MARKER, run_id)
        .stdin(Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap()
}

async fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    for _ in 0..500 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}

#[tokio::test]
async fn a_runs_group_and_its_escaped_children_are_ended_and_others_are_not() {
    let run = format!("test-{}", std::process::id());
    let mut child = stubborn_group(&run);
    let pgid = child.id();
    let since = crate::runners::process::process_start_time(pgid);
    let procs = [RunProcesses {
        run_id: run.clone(),
        pgid: Some(pgid),
        since,
    }];
    // The shell, its grouped sleep, the setsid shell and its sleep.
    wait_until("four processes of the run", || find(&procs).len() >= 4).await;
    // A bystander: another group, no marker.
    let mut other = Command::new("sleep")
        .arg("300")
        .process_group(0)
        .spawn()
        .unwrap();
    // By group alone the escaped session is not found; by marker alone it is.
    let by_group = [RunProcesses {
        run_id: "none".into(),
        pgid: Some(pgid),
        since,
    }];
    assert!(find(&by_group).len() < find(&procs).len());

    let killed = end(&procs, Duration::from_millis(200)).await;
    assert!(killed >= 2, "SIGTERM-proof shells needed SIGKILL: {killed}");
    assert!(find(&procs).is_empty(), "{:?}", find(&procs));
    let _ = child.wait();
    assert!(
        crate::runners::process::is_alive(other.id(), None),
        "a bystander was hit"
    );
    other.kill().unwrap();
    other.wait().unwrap();
}

#[tokio::test]
async fn a_group_number_taken_by_a_later_group_is_not_matched_by_start_time() {
    let mut child = Command::new("sleep")
        .arg("300")
        .process_group(0)
        .spawn()
        .unwrap();
    let pgid = child.id();
    let start = crate::runners::process::process_start_time(pgid).unwrap();
    let later = [RunProcesses {
        run_id: "none".into(),
        pgid: Some(pgid),
        since: Some(start + 1_000_000),
    }];
    assert!(find(&later).is_empty());
    let same = [RunProcesses {
        run_id: "none".into(),
        pgid: Some(pgid),
        since: Some(start),
    }];
    assert_eq!(find(&same), vec![pgid]);
    child.kill().unwrap();
    child.wait().unwrap();
}
