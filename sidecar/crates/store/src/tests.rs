//! Store unit tests: the schema snapshot, group commit under concurrency, isolation of a
//! failing write from the rest of its group, and an older database's ghost requests expiring
//! when it migrates.

use expect_test::expect;

use crate::{NewMessage, NewSession, Priority, Recipients, Store, StoreError};

fn open() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("t.db")).unwrap();
    (dir, store)
}

fn new_session(cli: &str) -> NewSession {
    NewSession {
        cli: cli.into(),
        cwd: "/p".into(),
        project_root: "/p".into(),
        project_name: "p".into(),
        ..NewSession::default()
    }
}

#[test]
fn schema_snapshot() {
    let (_dir, store) = open();
    let (version, pragmas, sql) = store
        .read(|c| {
            let version: i64 = c.query_row("PRAGMA user_version", [], |r| r.get(0))?;
            let journal: String = c.query_row("PRAGMA journal_mode", [], |r| r.get(0))?;
            let sync: i64 = c.query_row("PRAGMA synchronous", [], |r| r.get(0))?;
            let fk: i64 = c.query_row("PRAGMA foreign_keys", [], |r| r.get(0))?;
            let page: i64 = c.query_row("PRAGMA page_size", [], |r| r.get(0))?;
            Ok((
                version,
                format!("{journal} synchronous={sync} foreign_keys={fk} page_size={page}"),
                crate::schema_sql(c)?,
            ))
        })
        .unwrap();
    assert_eq!(version as usize, crate::SCHEMA_VERSION);
    assert_eq!(pragmas, "wal synchronous=2 foreign_keys=1 page_size=2048");
    expect!["idx_agent_runs_flow idx_agent_runs_parent idx_agent_runs_party idx_agent_runs_session idx_agent_runs_status idx_approval_rules_project idx_approvals_key idx_approvals_pending idx_approvals_run idx_decisions_open idx_decisions_party idx_events_party idx_ism_idempotency idx_ism_inbox idx_ism_party idx_parties_project idx_questions_pending idx_questions_run idx_sessions_external idx_sessions_parent idx_sessions_party idx_sessions_project idx_tasks_party"]
    .assert_eq(&index_names(&store));
    // The whole schema, so any change to it is a visible diff in review.
    expect_test::expect_file!["schema.snapshot.sql"].assert_eq(&sql);
}

fn index_names(store: &Store) -> String {
    store
        .read(|c| {
            let mut stmt = c.prepare(
                "SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL ORDER BY tbl_name, name",
            )?;
            let names: Vec<String> = stmt.query_map([], |r| r.get(0))?.collect::<Result<_, _>>()?;
            Ok(names.join(" "))
        })
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writes_are_grouped_and_all_committed() {
    let (_dir, store) = open();
    let a = store
        .register_session(new_session("a"))
        .await
        .unwrap()
        .session
        .session_id;
    let b = store
        .register_session(new_session("b"))
        .await
        .unwrap()
        .session
        .session_id;
    let mut tasks = Vec::new();
    for t in 0..32 {
        let (store, a, b) = (store.clone(), a.clone(), b.clone());
        tasks.push(tokio::spawn(async move {
            for i in 0..50 {
                store
                    .send_message(NewMessage {
                        from_session_id: a.clone(),
                        recipients: Recipients::Session(b.clone()),
                        content: format!("{t}:{i}"),
                        priority: Priority::Normal,
                        message_type: None,
                        idempotency_key: Some(format!("{t}:{i}")),
                    })
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let [_, _, _, messages, _] = store.counts().unwrap();
    assert_eq!(messages, 32 * 50);
    store.close().await.unwrap();
    // Reopening finds everything (the writer checkpointed on close).
    let reopened = Store::open(store.path()).unwrap();
    assert_eq!(reopened.counts().unwrap()[3], 32 * 50);
}

#[tokio::test]
async fn a_failing_write_does_not_undo_its_group() {
    let (_dir, store) = open();
    let ok = store.register_session(new_session("ok"));
    let bad = store.write(|conn| {
        conn.execute(
            "INSERT INTO projects (id, root_path, name) VALUES ('x', '/x', 'x')",
            [],
        )?;
        Err::<(), _>(StoreError::Invalid("no".into()))
    });
    let (ok, bad) = tokio::join!(ok, bad);
    assert!(ok.is_ok());
    assert!(matches!(bad, Err(StoreError::Invalid(_))));
    let projects: Vec<String> = store
        .read(|c| {
            let mut s = c.prepare("SELECT root_path FROM projects")?;
            let v = s.query_map([], |r| r.get(0))?.collect::<Result<_, _>>()?;
            Ok(v)
        })
        .unwrap();
    assert_eq!(
        projects,
        ["/p"],
        "the failed job's insert was rolled back, the other kept"
    );
}

#[tokio::test]
async fn a_closed_store_refuses_writes() {
    let (_dir, store) = open();
    store.close().await.unwrap();
    let err = store
        .register_session(new_session("late"))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Closed), "{err}");
}

#[tokio::test]
async fn ghosts_left_by_an_earlier_version_expire_when_it_migrates() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    {
        let mut conn = rusqlite::Connection::open(&path).unwrap();
        rusqlite_migration::Migrations::from_slice(crate::schema::MIGRATIONS)
            .to_version(&mut conn, 4)
            .unwrap();
        conn.execute_batch(
            "INSERT INTO projects (id, root_path, name) VALUES ('p', '/p', 'p');
             INSERT INTO sessions (id, project_id, cli, cwd) VALUES ('s1', 'p', 'x', '/p'), ('s2', 'p', 'x', '/p');
             INSERT INTO agent_runs (id, agent_name, definition, project_id, session_id, prompt, status, pid)
               VALUES ('dead', 'a', '{\"runner\":\"acp:claude\"}', 'p', 's1', '', 'crashed', 42),
                      ('live', 'a', '{\"runner\":\"wasm:x\"}', 'p', 's2', '', 'running', 43);
             INSERT INTO approvals (id, project_id, session_id, run_id, tool_name, input, subject, expires_at_ms)
               VALUES ('ghost', 'p', 's1', 'dead', 'write_file', '{}', 'a', 0),
                      ('waiting', 'p', 's2', 'live', 'write_file', '{}', 'b', 0);",
        )
        .unwrap();
    }
    let store = Store::open(&path).unwrap();
    assert_eq!(store.get_approval("ghost").unwrap().status, "expired");
    assert_eq!(store.get_approval("waiting").unwrap().status, "pending");
    // The process group is known for agents that have one of their own, not in-daemon runs.
    assert_eq!(store.get_run("dead").unwrap().pgid, Some(42));
    assert_eq!(store.get_run("live").unwrap().pgid, None);
    let listed = store.list_approvals(None, None, None, None, false).unwrap();
    assert_eq!(listed.len(), 1);
    let err = store
        .decide_approval(crate::Decision {
            approval_id: "ghost".into(),
            status: "approved",
            decision: "approve".into(),
            decided_by: None,
            reason: None,
            new_rule: None,
            in_order: true,
        })
        .await
        .unwrap_err();
    assert!(err.to_string().contains("expired"), "{err}");
}
