//! Schedules in the store: a config's schedules taken in (state kept across reads, a new cron's
//! due time taken, a problem recorded, a removed one gone), a due time fired once, a launch under
//! way refusing another, pausing and resuming — each with its event.

use super::*;
use crate::NewSession;

async fn project(store: &Store) -> String {
    store
        .register_session(NewSession {
            cli: "t".into(),
            cwd: "/p".into(),
            project_root: "/p".into(),
            project_name: "p".into(),
            ..NewSession::default()
        })
        .await
        .unwrap()
        .project
        .project_id
}

fn nightly(next: &str) -> ScheduleConfig {
    ScheduleConfig {
        name: "nightly".into(),
        cron: "0 2 * * *".into(),
        party: "team".into(),
        task: "fix".into(),
        missed: "once".into(),
        paused: false,
        problem: None,
        next_due_at: Some(next.into()),
    }
}

fn kinds(store: &Store) -> Vec<String> {
    store
        .read(|c| {
            Ok(
                c.prepare("SELECT kind FROM events WHERE kind LIKE 'schedule_%' ORDER BY seq")?
                    .query_map([], |r| r.get(0))?
                    .collect::<Result<Vec<String>, _>>()?,
            )
        })
        .unwrap()
}

#[tokio::test]
async fn a_due_time_fires_once_and_state_survives_the_configs_reads() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("t.db")).unwrap();
    let p = project(&store).await;
    const T1: &str = "2026-11-29T02:00:00.000Z";
    const T2: &str = "2026-11-30T02:00:00.000Z";
    let weekly = ScheduleConfig {
        name: "weekly".into(),
        paused: true,
        ..nightly(T1)
    };
    assert_eq!(
        store
            .sync_schedules(p.clone(), vec![nightly(T1), weekly.clone()])
            .await
            .unwrap(),
        2
    );
    let rows = store.schedules(Some(&p)).unwrap();
    assert_eq!(rows[0].next_due_at.as_deref(), Some(T1));
    assert!(rows[1].paused && rows[1].next_due_at.is_none());
    // Read again, the same: nothing changes (a later `next_due_at` is not taken).
    assert_eq!(
        store
            .sync_schedules(p.clone(), vec![nightly(T2), weekly.clone()])
            .await
            .unwrap(),
        0
    );

    let due = |due_at: &str| Fire::Due {
        due_at: due_at.into(),
        covers: due_at.into(),
        next_due_at: Some(T2.into()),
        missed: 0,
    };
    let fired = store
        .fire_schedule(p.clone(), "nightly".into(), due(T1))
        .await
        .unwrap()
        .unwrap();
    assert!(fired.launching);
    assert_eq!(fired.next_due_at.as_deref(), Some(T2));
    assert_eq!(fired.last_due_at.as_deref(), Some(T1));
    // The same due time again, or a person's run while the launch is under way: not again.
    assert_eq!(
        store
            .fire_schedule(p.clone(), "nightly".into(), due(T1))
            .await
            .unwrap(),
        None
    );
    assert!(matches!(
        store
            .fire_schedule(p.clone(), "nightly".into(), Fire::Now)
            .await,
        Err(StoreError::Conflict(_))
    ));
    let done = store
        .finish_schedule_launch(p.clone(), "nightly".into(), Ok("party-1".into()), false)
        .await
        .unwrap();
    assert!(!done.launching);
    assert_eq!(done.last_party_id.as_deref(), Some("party-1"));

    // Paused: no due time, and a cron's fire does not stand; resumed with a new one.
    let paused = store
        .set_schedule_paused(p.clone(), "nightly".into(), true, None)
        .await
        .unwrap();
    assert!(paused.paused && paused.next_due_at.is_none());
    assert_eq!(
        store
            .fire_schedule(p.clone(), "nightly".into(), due(T2))
            .await
            .unwrap(),
        None
    );
    let resumed = store
        .set_schedule_paused(p.clone(), "nightly".into(), false, Some(T2.into()))
        .await
        .unwrap();
    assert_eq!(resumed.next_due_at.as_deref(), Some(T2));

    // A broken config: no due time; the schedule the config dropped is removed.
    let broken = ScheduleConfig {
        problem: Some("cron \"x\": bad".into()),
        cron: "x".into(),
        next_due_at: None,
        ..nightly(T1)
    };
    store.sync_schedules(p.clone(), vec![broken]).await.unwrap();
    let rows = store.schedules(Some(&p)).unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].problem.as_deref(), Some("cron \"x\": bad"));
    assert_eq!(rows[0].next_due_at, None);
    assert_eq!(
        kinds(&store),
        [
            "schedule_added",
            "schedule_added",
            "schedule_fired",
            "schedule_launched",
            "schedule_paused",
            "schedule_resumed",
            "schedule_error",
            "schedule_removed",
        ]
    );
}
