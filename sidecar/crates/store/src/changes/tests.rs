//! The change feed: a commit announces the topics its jobs marked, a failed job announces
//! nothing, and a party step wakes the inbox only when it changed what the inbox shows (its status,
//! paused roles or status reason).

use std::collections::BTreeSet;

use crate::{
    NewEvent, NewNotification, PartyHead, PartyState, PartyStatus, Store, StoreError, Topic,
};

fn open() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("t.db")).unwrap();
    (dir, store)
}

/// Which of the topics changed since the receivers were last looked at.
struct Seen(Vec<(Topic, tokio::sync::watch::Receiver<i64>)>);

impl Seen {
    fn new(store: &Store) -> Seen {
        Seen(
            [
                Topic::Approvals,
                Topic::Notifications,
                Topic::Picks,
                Topic::Inbox,
            ]
            .into_iter()
            .map(|t| (t, store.changes(t)))
            .collect(),
        )
    }

    fn changed(&mut self) -> Vec<Topic> {
        let mut out = Vec::new();
        for (topic, rx) in &mut self.0 {
            if rx.has_changed().unwrap() {
                rx.borrow_and_update();
                out.push(*topic);
            }
        }
        out
    }
}

/// Appends a timeline entry of `kind`.
async fn event(store: &Store, kind: &str) {
    store
        .append_event(NewEvent {
            kind: kind.into(),
            ..NewEvent::default()
        })
        .await
        .unwrap();
}

fn note() -> NewNotification {
    NewNotification {
        project_id: None,
        party_id: None,
        kind: "test".into(),
        text: "hello".into(),
        data: serde_json::json!({}),
    }
}

#[tokio::test]
async fn a_commit_announces_what_it_changed_and_the_inbox_with_it() {
    let (_dir, store) = open();
    let mut seen = Seen::new(&store);
    store.add_notification(note()).await.unwrap();
    assert_eq!(seen.changed(), [Topic::Notifications, Topic::Inbox]);
    event(&store, "member_picked").await;
    assert_eq!(seen.changed(), [Topic::Picks, Topic::Inbox]);
    event(&store, "merge_conflict").await;
    assert_eq!(seen.changed(), [Topic::Inbox]);
    // Timeline entries the person does not wait on wake nobody.
    event(&store, "agent_run_finished").await;
    assert_eq!(seen.changed(), []);
    // A change outside the database (a removed checkout) is announced by hand.
    store.announce(Topic::Inbox);
    assert_eq!(seen.changed(), [Topic::Inbox]);
}

#[tokio::test]
async fn a_failed_write_announces_nothing_and_keeps_its_groups_marks() {
    let (_dir, store) = open();
    let mut seen = Seen::new(&store);
    let bad = store.write(|conn| {
        crate::notifications::add_notification(conn, &note())?;
        Err::<(), _>(StoreError::Invalid("no".into()))
    });
    let good = store.write(|conn| {
        crate::events::append_event(
            conn,
            &NewEvent {
                kind: "approval_requested".into(),
                ..NewEvent::default()
            },
        )
    });
    let (bad, good) = tokio::join!(bad, good);
    assert!(matches!(bad, Err(StoreError::Invalid(_))));
    good.unwrap();
    // Whether or not the two shared a group, only the job that committed is announced.
    assert_eq!(seen.changed(), [Topic::Approvals, Topic::Inbox]);
    let count: i64 = store
        .read(|c| Ok(c.query_row("SELECT count(*) FROM notifications", [], |r| r.get(0))?))
        .unwrap();
    assert_eq!(count, 0, "the failed job's notification was rolled back");
}

#[tokio::test]
async fn a_party_step_wakes_the_inbox_only_when_its_status_or_paused_roles_change() {
    let (_dir, store) = open();
    store
        .write(|conn| {
            conn.execute_batch(
                "INSERT INTO projects (id, root_path, name) VALUES ('p', '/p', 'p');
                 INSERT INTO parties (id, name, project_id, status, snapshot, repo_root) \
                 VALUES ('party', 'n', 'p', 'running', '{}', '/p');",
            )?;
            Ok(())
        })
        .await
        .unwrap();
    let mut seen = Seen::new(&store);
    let step = |status: PartyStatus, paused: &[&str]| PartyState {
        head: Some(PartyHead {
            status,
            status_reason: None,
            overrides: Default::default(),
            paused: paused.iter().map(|s| s.to_string()).collect(),
            released: BTreeSet::new(),
        }),
        members: Vec::new(),
    };
    let save = |state: PartyState| store.save_party_state("party".into(), state, vec![], vec![]);
    save(step(PartyStatus::Running, &[])).await.unwrap();
    assert_eq!(
        seen.changed(),
        [],
        "a step that changed nothing the inbox shows"
    );
    save(step(PartyStatus::Running, &["coder"])).await.unwrap();
    assert_eq!(seen.changed(), [Topic::Inbox], "a role paused");
    save(step(PartyStatus::Running, &["coder"])).await.unwrap();
    assert_eq!(seen.changed(), []);
    // A paused role's item shows the party's status reason.
    let mut why = step(PartyStatus::Running, &["coder"]);
    if let Some(head) = &mut why.head {
        head.status_reason = Some("role coder paused: it crashed twice".into());
    }
    save(why.clone()).await.unwrap();
    assert_eq!(seen.changed(), [Topic::Inbox], "the reason changed");
    save(why).await.unwrap();
    assert_eq!(seen.changed(), []);
    // A step that changed only members leaves the party's row alone.
    save(PartyState {
        head: None,
        members: Vec::new(),
    })
    .await
    .unwrap();
    assert_eq!(seen.changed(), [], "only members changed");
    save(step(PartyStatus::Completed, &["coder"]))
        .await
        .unwrap();
    assert_eq!(seen.changed(), [Topic::Inbox], "the party ended");
}
