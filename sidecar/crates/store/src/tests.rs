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

/// A session of another project (`/q`).
fn elsewhere(cli: &str) -> NewSession {
    NewSession {
        cwd: "/q".into(),
        project_root: "/q".into(),
        project_name: "q".into(),
        ..new_session(cli)
    }
}

/// Registers a session; the session.
async fn registered(store: &Store, new: NewSession) -> crate::Session {
    store.register_session(new).await.unwrap().session
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
    expect!["idx_agent_runs_flow idx_agent_runs_parent idx_agent_runs_party idx_agent_runs_session idx_agent_runs_status idx_approval_rules_project idx_approvals_key idx_approvals_pending idx_approvals_run idx_decisions_open idx_decisions_party idx_events_party idx_forge_links_state idx_ism_inbox idx_ism_party idx_ism_sender idx_parties_project idx_party_members_checkout idx_questions_pending idx_questions_run idx_sessions_external idx_sessions_parent idx_sessions_party idx_sessions_project idx_tasks_party"]
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
               VALUES ('dead', 'a', '{\"runner\":\"acp:claude\"}', 'p', 's1', 'its task', 'crashed', 42),
                      ('live', 'a', '{\"runner\":\"wasm:x\"}', 'p', 's2', '', 'running', 43);
             INSERT INTO approvals (id, project_id, session_id, run_id, tool_name, input, subject, expires_at_ms)
               VALUES ('ghost', 'p', 's1', 'dead', 'write_file', '{}', 'a', 0),
                      ('waiting', 'p', 's2', 'live', 'write_file', '{}', 'b', 0);",
        )
        .unwrap();
    }
    let store = Store::open(&path).unwrap();
    assert_eq!(
        store.get_approval("ghost").unwrap().status,
        crate::ApprovalStatus::Expired
    );
    assert_eq!(
        store.get_approval("waiting").unwrap().status,
        crate::ApprovalStatus::Pending
    );
    // The process group is known for agents that have one of their own, not in-daemon runs.
    assert_eq!(store.get_run("dead").unwrap().pgid, Some(42));
    assert_eq!(store.get_run("live").unwrap().pgid, None);
    // Prompts moved to their own table (migration 13) come back with their runs.
    assert_eq!(store.get_run("dead").unwrap().prompt, "its task");
    assert_eq!(store.get_run("live").unwrap().prompt, "");
    let listed = store.list_approvals(None, None, None, None, false).unwrap();
    assert_eq!(listed.len(), 1);
    let err = store
        .decide_approval(crate::Decision {
            approval_id: "ghost".into(),
            status: crate::ApprovalStatus::Approved,
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

/// Retention: what is old and let go goes, children before the rows they refer to (a session
/// freed by its child's removal goes in the next pass); what an open party, a pending request,
/// an unread message of a live session or a party's member still holds stays; a dry sweep
/// removes nothing.
#[tokio::test]
async fn a_sweep_removes_what_is_old_and_let_go_and_keeps_the_rest() {
    let (_dir, store) = open();
    const OLD: &str = "2000-01-01T00:00:00.000Z";
    store
        .write(|conn| {
            conn.execute_batch(&format!(
                "INSERT INTO projects (id, root_path, name) VALUES ('p', '/p', 'p');
                 INSERT INTO parties (id, name, project_id, status, snapshot, repo_root, completed_at)
                   VALUES ('open', 'o', 'p', 'running', '{{}}', '/p', NULL),
                          ('done', 'd', 'p', 'completed', '{{}}', '/p', '{OLD}');
                 INSERT INTO sessions (id, project_id, cli, cwd, status, ended_at, party_id, parent_session_id)
                   VALUES ('live', 'p', 'x', '/p', 'active', NULL, NULL, NULL),
                          ('gone', 'p', 'x', '/p', 'ended', '{OLD}', NULL, NULL),
                          ('kid', 'p', 'x', '/p', 'ended', '{OLD}', NULL, 'gone'),
                          ('member', 'p', 'x', '/p', 'ended', '{OLD}', 'done', NULL),
                          ('oldmember', 'p', 'x', '/p', 'ended', '{OLD}', 'done', NULL),
                          ('solo', 'p', 'x', '/p', 'ended', '{OLD}', NULL, NULL),
                          ('opener', 'p', 'x', '/p', 'active', NULL, 'open', NULL);
                 INSERT INTO agent_runs (id, agent_name, definition, project_id, session_id, status, party_id, completed_at)
                   VALUES ('r-member', 'a', '{{}}', 'p', 'member', 'success', 'done', '{OLD}'),
                          ('r-old', 'a', '{{}}', 'p', 'oldmember', 'crashed', 'done', '{OLD}'),
                          ('r-solo', 'a', '{{}}', 'p', 'solo', 'success', NULL, '{OLD}'),
                          ('r-open', 'a', '{{}}', 'p', 'opener', 'crashed', 'open', '{OLD}'),
                          ('r-live', 'a', '{{}}', 'p', 'live', 'running', NULL, NULL);
                 INSERT INTO agent_run_prompts (run_id, prompt) VALUES ('r-solo', 'solo work'), ('r-live', 'live work');
                 UPDATE agent_runs SET created_at = '{OLD}';
                 INSERT INTO party_members (party_id, role_name, instance_index, session_id, agent_run_id)
                   VALUES ('done', 'dev', 0, 'member', 'r-member');
                 INSERT INTO usage_totals (scope, id) VALUES ('run', 'r-solo');
                 INSERT INTO pattern_flows (root_run_id, state, finished, updated_at) VALUES ('r-solo', '{{}}', 1, '{OLD}');
                 INSERT INTO questions (id, project_id, session_id, run_id, question, status, created_at)
                   VALUES ('q-answered', 'p', 'solo', 'r-solo', '?', 'answered', '{OLD}'),
                          ('q-waiting', 'p', 'live', 'r-live', '?', 'pending', '{OLD}');
                 INSERT INTO approvals (id, project_id, session_id, run_id, party_id, tool_name, input, subject, expires_at_ms, status, created_at)
                   VALUES ('ap-decided', 'p', 'solo', 'r-solo', NULL, 't', '{{}}', 's', 0, 'approved', '{OLD}'),
                          ('ap-waiting', 'p', 'live', 'r-live', NULL, 't', '{{}}', 's', 0, 'pending', '{OLD}'),
                          ('ap-open', 'p', 'opener', 'r-open', 'open', 't', '{{}}', 's', 0, 'denied', '{OLD}');
                 INSERT INTO inter_session_messages (id, project_id, from_session_id, to_session_id, content, created_at, read_at, party_id)
                   VALUES ('m-read', 'p', 'live', 'live', 'x', '{OLD}', '{OLD}', NULL),
                          ('m-unread', 'p', 'live', 'live', 'x', '{OLD}', NULL, NULL),
                          ('m-to-ended', 'p', 'live', 'kid', 'x', '{OLD}', NULL, NULL),
                          ('m-open', 'p', 'opener', 'live', 'x', '{OLD}', '{OLD}', 'open'),
                          ('m-new', 'p', 'live', 'live', 'x', '2999-01-01T00:00:00.000Z', '{OLD}', NULL);
                 INSERT INTO events (at, kind, party_id) VALUES ('{OLD}', 'x', NULL), ('{OLD}', 'x', 'open'),
                   ('{OLD}', 'merge_conflict', 'done'), ('{OLD}', 'x', 'done');
                 INSERT INTO events (kind) VALUES ('new');
                 INSERT INTO notifications (kind, text, party_id, created_at)
                   VALUES ('k', 't', NULL, '{OLD}'), ('k', 't', 'open', '{OLD}');
                 INSERT INTO decisions (id, party_id, topic, options, voters, deadline_ms, created_at)
                   VALUES ('d', 'done', 't', '[]', '[]', 0, '{OLD}');"
            ))?;
            Ok(())
        })
        .await
        .unwrap();
    let keys = |table: &str, key: &str| -> Vec<String> {
        store
            .read(|c| {
                let mut s = c.prepare(&format!("SELECT {key} FROM {table} ORDER BY {key}"))?;
                let v = s.query_map([], |r| r.get(0))?.collect::<Result<_, _>>()?;
                Ok(v)
            })
            .unwrap()
    };
    let ids = |table: &str| keys(table, "id");
    let count = |table: &str| -> i64 {
        store
            .read(|c| Ok(c.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))?))
            .unwrap()
    };
    let cutoff = "2001-01-01T00:00:00.000Z";
    let dry = store.sweep(cutoff, true).await.unwrap();
    assert_eq!(
        (
            dry.events,
            dry.messages,
            dry.notifications,
            dry.approvals,
            dry.questions,
            dry.runs
        ),
        (2, 2, 1, 1, 1, 2),
        "{dry:?}"
    );
    assert_eq!(
        dry.sessions, 0,
        "each table on its own: every old session is still referred to"
    );
    assert_eq!(count("events"), 5, "a dry sweep removes nothing");
    assert_eq!(count("sessions"), 7);

    let swept = store.sweep(cutoff, false).await.unwrap();
    assert_eq!(
        (
            swept.events,
            swept.messages,
            swept.notifications,
            swept.approvals,
            swept.questions
        ),
        (2, 2, 1, 1, 1),
        "{swept:?}"
    );
    assert_eq!((swept.runs, swept.sessions), (2, 4), "{swept:?}");
    assert_eq!(
        swept.ended_runs,
        ["r-member", "r-old", "r-solo"],
        "a member's run's log goes too"
    );
    assert_eq!(
        ids("inter_session_messages"),
        ["m-new", "m-open", "m-unread"]
    );
    assert_eq!(ids("agent_runs"), ["r-live", "r-member", "r-open"]);
    assert_eq!(
        keys("agent_run_prompts", "run_id"),
        ["r-live"],
        "a removed run's prompt goes with it"
    );
    assert_eq!(ids("sessions"), ["live", "member", "opener"]);
    assert_eq!(ids("approvals"), ["ap-open", "ap-waiting"]);
    assert_eq!(ids("questions"), ["q-waiting"]);
    assert_eq!(ids("decisions"), ["d"]);
    assert_eq!(count("pattern_flows") + count("usage_totals"), 0);
    let kinds: Vec<(String, Option<String>)> = store
        .read(|c| {
            let mut s = c.prepare("SELECT kind, party_id FROM events ORDER BY seq")?;
            let v = s
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<Result<_, _>>()?;
            Ok(v)
        })
        .unwrap();
    assert_eq!(
        kinds,
        [
            ("x".to_string(), Some("open".to_string())),
            ("merge_conflict".to_string(), Some("done".to_string())),
            ("new".to_string(), None)
        ]
    );
    assert_eq!(count("notifications"), 1);

    // Nothing more to do; the member's run is still let go (its log).
    let again = store.sweep(cutoff, false).await.unwrap();
    assert_eq!(again.rows(), 0, "{again:?}");
    assert_eq!(again.ended_runs, ["r-member"]);
    // VACUUM gives the free pages back (if any).
    store.vacuum().await.unwrap();
    let size = store.db_size().unwrap();
    assert_eq!(size.free_bytes, 0);
    assert!(size.bytes > 0);
    // Writes go on after it.
    store.register_session(new_session("after")).await.unwrap();
}

/// Writes small transactions on `path`, at least `commits` and until the checkpointer (run as
/// the store's) has looked at the WAL 10 times, while a reader reads all along; the writer
/// folds the WAL back when told (`bounded`). Returns the WAL's largest size seen after a
/// commit, in bytes. Counting looks rather than commits keeps the test the same on a disk
/// whose commits are ten times faster.
fn steady_writes(path: &std::path::Path, commits: usize, bounded: bool) -> u64 {
    use std::sync::atomic::{AtomicBool, Ordering};
    let conn = crate::open_migrated(path).unwrap();
    conn.pragma_update(None, "wal_autocheckpoint", 0).unwrap();
    conn.execute_batch("CREATE TABLE IF NOT EXISTS filler (x BLOB)")
        .unwrap();
    let wal = crate::writer::WalBound::new(64);
    let seen = wal.clone();
    let (wake, wakes) = std::sync::mpsc::sync_channel(1);
    let checkpoint_conn = crate::open_connection(path).unwrap();
    let checkpointer =
        std::thread::spawn(move || crate::writer::checkpointer(checkpoint_conn, wakes, &seen));
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let reading = stop.clone();
    let reader_conn = crate::open_connection(path).unwrap();
    let reader = std::thread::spawn(move || {
        while !reading.load(Ordering::Relaxed) {
            let _n: i64 = reader_conn
                .query_row("SELECT count(*) FROM filler", [], |r| r.get(0))
                .unwrap();
        }
    });
    let wal_path = path.with_extension("db-wal");
    let mut largest = 0;
    let mut done = 0;
    // The checkpointer looks every 100 ms; a ceiling only in case it never does.
    while (done < commits || wal.looks() < 10) && done < 1_000_000 {
        done += 1;
        conn.execute("INSERT INTO filler VALUES (zeroblob(4096))", [])
            .unwrap();
        if bounded {
            wal.truncate_if_due(&conn);
        }
        let _coalesced = wake.try_send(());
        largest = largest.max(std::fs::metadata(&wal_path).map_or(0, |m| m.len()));
    }
    stop.store(true, Ordering::Relaxed);
    drop(wake);
    reader.join().unwrap();
    checkpointer.join().unwrap();
    largest
}

#[test]
fn the_wal_stays_bounded_under_steady_writes_and_reads() {
    // At least 3,000 commits of 4 KiB (about 6,000 frames of 2 KiB, 12 MiB) and 10 checkpoints,
    // against a bound of 64 frames (128 KiB): bounded, the WAL holds what a checkpoint
    // interval writes; unbounded, all of it.
    let dir = tempfile::tempdir().unwrap();
    let unbounded = steady_writes(&dir.path().join("unbounded.db"), 3000, false);
    let bounded = steady_writes(&dir.path().join("bounded.db"), 3000, true);
    assert!(
        unbounded > 8 << 20,
        "without the bound the WAL keeps growing ({unbounded} bytes)"
    );
    assert!(
        bounded < unbounded / 3,
        "folded back past its bound, the WAL stays small ({bounded} against {unbounded} bytes)"
    );
}

/// The database keeps statuses as the words it always had: every word a row may hold (written
/// as an earlier version did, in plain SQL) reads back as its typed status, and says the same.
#[test]
fn every_status_word_in_the_database_reads_back_typed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("words.db");
    drop(Store::open(&path).unwrap());
    let parties = ["pending", "running", "completed", "failed", "cancelled"];
    let members = [
        "pending",
        "running",
        "completed",
        "crashed",
        "recovering",
        "failed",
        "cancelled",
        "skipped",
        "paused",
    ];
    let tasks = ["open", "in_progress", "escalated", "done", "cancelled"];
    let questions = ["pending", "answered", "expired"];
    let approvals = ["pending", "approved", "denied", "aborted", "expired"];
    let plans = ["draft", "committed", "superseded"];
    let decisions = ["open", "tied", "committed"];
    let steps = [
        "pending",
        "in_progress",
        "in_review",
        "done",
        "reopened",
        "blocked",
    ];
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(
            "INSERT INTO projects (id, root_path, name) VALUES ('p', '/p', 'p');
             INSERT INTO sessions (id, project_id, cli, cwd) VALUES ('s', 'p', 'x', '/p');",
        )
        .unwrap();
        for w in parties {
            conn.execute(
                "INSERT INTO parties (id, name, project_id, status, snapshot, repo_root) \
                 VALUES (?1, 'n', 'p', ?1, '{}', '/p')",
                [w],
            )
            .unwrap();
        }
        for (i, w) in members.iter().enumerate() {
            conn.execute(
                "INSERT INTO party_members (party_id, role_name, instance_index, status) \
                 VALUES ('running', 'r', ?1, ?2)",
                rusqlite::params![i as i64, w],
            )
            .unwrap();
        }
        for w in tasks {
            conn.execute(
                "INSERT INTO tasks (id, project_id, title, status) VALUES (?1, 'p', 't', ?1)",
                [w],
            )
            .unwrap();
        }
        for w in questions {
            conn.execute(
                "INSERT INTO questions (id, project_id, session_id, question, status) \
                 VALUES (?1, 'p', 's', 'q', ?1)",
                [w],
            )
            .unwrap();
        }
        for w in approvals {
            conn.execute(
                "INSERT INTO approvals (id, project_id, session_id, tool_name, input, subject, \
                 expires_at_ms, status) VALUES (?1, 'p', 's', 't', '{}', 'x', 0, ?1)",
                [w],
            )
            .unwrap();
        }
        for (v, w) in plans.iter().enumerate() {
            conn.execute(
                "INSERT INTO plans (party_id, version, status, steps, created_at) \
                 VALUES ('running', ?1, ?2, '[]', 'now')",
                rusqlite::params![v as i64 + 1, w],
            )
            .unwrap();
        }
        for w in decisions {
            conn.execute(
                "INSERT INTO decisions (id, party_id, topic, options, voters, deadline_ms, \
                 status, created_at) VALUES (?1, 'running', 't', '[]', '[]', 0, ?1, 'now')",
                [w],
            )
            .unwrap();
        }
        for (i, w) in steps.iter().enumerate() {
            conn.execute(
                "INSERT INTO plan_steps (party_id, step_id, position, plan_version, owner_role, \
                 spec, state, updated_at) VALUES ('running', ?1, ?2, 2, 'r', '{}', ?1, 'now')",
                rusqlite::params![w, i as i64],
            )
            .unwrap();
        }
    }
    let store = Store::open(&path).unwrap();
    for w in parties {
        assert_eq!(store.get_party(w).unwrap().0.status.as_str(), w);
    }
    let (_, rows) = store.get_party("running").unwrap();
    let read: Vec<&str> = rows.iter().map(|m| m.status.as_str()).collect();
    assert_eq!(read, members);
    for w in tasks {
        assert_eq!(store.get_task(w).unwrap().status.as_str(), w);
    }
    for w in questions {
        assert_eq!(store.get_question(w).unwrap().status.as_str(), w);
    }
    for w in approvals {
        assert_eq!(store.get_approval(w).unwrap().status.as_str(), w);
    }
    let read: Vec<&str> = store
        .plans("running")
        .unwrap()
        .iter()
        .map(|p| p.status.as_str())
        .collect();
    assert_eq!(read, plans);
    let mut read: Vec<&str> = store
        .list_decisions(Some("running"))
        .unwrap()
        .iter()
        .map(|d| d.status.as_str())
        .collect();
    read.sort_unstable();
    let mut want = decisions.to_vec();
    want.sort_unstable();
    assert_eq!(read, want);
    let read: Vec<&str> = store
        .plan_steps("running")
        .unwrap()
        .iter()
        .map(|s| s.state.as_str())
        .collect();
    assert_eq!(read, steps);
    // The typed statuses go on the wire as the same words.
    let row = store.get_party("completed").unwrap().0;
    assert_eq!(
        serde_json::to_value(&row).unwrap()["status"],
        serde_json::json!("completed")
    );
    // Recovery overrides set at run time read back as strategies, and go out as the same JSON.
    let written = r#"{"a":"pause","b":"plugin:recovery-backoff","c":"restart","d":"abort"}"#;
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute(
            "UPDATE parties SET overrides = ?1 WHERE id = 'failed'",
            [written],
        )
        .unwrap();
    let row = store.get_party("failed").unwrap().0;
    assert_eq!(
        row.overrides.get("b"),
        Some(&crate::Strategy::Plugin("recovery-backoff".into()))
    );
    assert_eq!(serde_json::to_string(&row.overrides).unwrap(), written);
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute(
            "UPDATE parties SET overrides = '{\"a\":\"retry\"}' WHERE id = 'failed'",
            [],
        )
        .unwrap();
    let err = store.get_party("failed").unwrap_err().to_string();
    assert!(err.contains("unknown recovery strategy \"retry\""), "{err}");
    // Only that party's own load fails: listings (and start-up recovery) go on.
    assert_eq!(
        store.list_parties_brief(None, None).unwrap().len(),
        parties.len()
    );
    // A word no version ever wrote is a clear error, not a guess.
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute(
            "UPDATE party_members SET status = 'lost' WHERE instance_index = 0",
            [],
        )
        .unwrap();
    let err = store.get_party("running").unwrap_err().to_string();
    assert!(err.contains("unknown MemberStatus \"lost\""), "{err}");
}

/// A run's end is returned as the database holds it (without being read back), and the
/// narrow read a member's calls make says who it is and that it ended.
#[tokio::test]
async fn a_finished_run_is_returned_as_stored_and_its_caller_read_narrowly() {
    let (_dir, store) = open();
    let (run, session) = store
        .create_run(crate::NewRun {
            agent_name: "a".into(),
            definition: serde_json::json!({ "name": "a", "command": ["true"] }),
            session: new_session("member"),
            party: None,
            attempt: 1,
            prompt: "x".repeat(5000),
            task_id: None,
            timeout_ms: None,
            workdir: None,
            trigger: None,
            flow: None,
            attach_session: None,
        })
        .await
        .unwrap();
    assert_eq!(run, store.get_run(&run.run_id).unwrap());
    let caller = store.run_caller(&run.run_id).unwrap();
    assert_eq!(caller.session_id, session.session_id);
    assert_eq!(caller.status, crate::RunStatus::Pending);
    store
        .run_started(&run, 42, Some(7), Some(42))
        .await
        .unwrap();
    // What `complete` and the budget watch read of it, without its prompt (kept apart).
    let to_complete = crate::RunToComplete {
        run_id: run.run_id.clone(),
        session_id: session.session_id.clone(),
        definition: run.definition.clone(),
    };
    assert_eq!(
        store
            .run_to_complete(None, &session.session_id)
            .unwrap()
            .as_ref(),
        Some(&to_complete)
    );
    assert_eq!(
        store
            .run_to_complete(Some(&run.run_id), "whoever")
            .unwrap()
            .as_ref(),
        Some(&to_complete),
        "a named run is read as it is; its caller compares the session"
    );
    assert_eq!(
        store.run_to_complete(None, "no-such-session").unwrap(),
        None
    );
    assert!(matches!(
        store.run_to_complete(Some("no-such-run"), &session.session_id),
        Err(StoreError::NotFound { .. })
    ));
    let active = store.active_runs_brief().unwrap();
    assert_eq!(
        active,
        [crate::ActiveRun {
            run_id: run.run_id.clone(),
            party_id: None,
            definition: run.definition.clone(),
        }]
    );
    let ids = |runs: Vec<crate::AgentRun>| runs.into_iter().map(|r| r.run_id).collect::<Vec<_>>();
    assert_eq!(
        ids(store.list_runs(None, None, true).unwrap()),
        std::slice::from_ref(&run.run_id)
    );
    let result = serde_json::json!({ "output": "done", "n": 1.5, "list": [1, "two"] });
    let end = store
        .finish_run(
            run.run_id.clone(),
            crate::RunStatus::Success,
            Some(result),
            Some("none".into()),
        )
        .await
        .unwrap();
    assert!(end.changed);
    assert_eq!(end.run, store.get_run(&run.run_id).unwrap());
    assert!(end.run.completed_at.is_some());
    assert_eq!(
        store.run_caller(&run.run_id).unwrap().status,
        crate::RunStatus::Success
    );
    let again = store
        .finish_run(run.run_id.clone(), crate::RunStatus::Crashed, None, None)
        .await
        .unwrap();
    assert!(!again.changed);
    assert_eq!(again.run, end.run);
    assert_eq!(
        store.active_runs_brief().unwrap(),
        [],
        "an ended run has no budget left to watch"
    );
    // Each filter of a listing, alone and together (each one through its index).
    assert!(store.list_runs(None, None, true).unwrap().is_empty());
    assert_eq!(
        ids(store.list_runs(None, None, false).unwrap()),
        std::slice::from_ref(&run.run_id)
    );
    assert!(
        store
            .list_runs(None, Some("no-party"), false)
            .unwrap()
            .is_empty()
    );
    assert!(
        store
            .list_runs(Some("no-parent"), None, false)
            .unwrap()
            .is_empty()
    );
    assert!(
        store
            .list_runs(Some("no-parent"), Some("no-party"), true)
            .unwrap()
            .is_empty()
    );
    assert!(matches!(
        store.run_caller("no-such-run"),
        Err(StoreError::NotFound { .. })
    ));
}

/// One message with default fields, from `from` to `to`.
async fn send_one(
    store: &Store,
    from: &str,
    to: Recipients,
) -> Result<crate::SendOutcome, StoreError> {
    store
        .send_message(NewMessage {
            from_session_id: from.to_string(),
            recipients: to,
            content: "hi".into(),
            priority: Priority::Normal,
            message_type: None,
            idempotency_key: None,
        })
        .await
}

/// A send reads its sessions narrowly (project, parent, party, status); what it refuses is
/// still named: an unknown session, an ended one, another project's, a child that is not.
#[tokio::test]
async fn a_send_checks_its_sessions_and_names_what_is_wrong() {
    let (_dir, store) = open();
    let register = |new: NewSession| registered(&store, new);
    let parent = register(new_session("parent")).await;
    let child = register(NewSession {
        parent_session_id: Some(parent.session_id.clone()),
        ..new_session("child")
    })
    .await;
    let stranger = register(elsewhere("stranger")).await;
    let ended = register(new_session("ended")).await;
    store.end_session(ended.session_id.clone()).await.unwrap();
    let session = |s: &crate::Session| Recipients::Session(s.session_id.clone());
    let refused = |from: String, to: Recipients| {
        let store = store.clone();
        async move {
            send_one(&store, &from, to)
                .await
                .expect_err("the send is refused")
        }
    };

    let up = send_one(&store, &child.session_id, Recipients::Parent)
        .await
        .unwrap();
    assert_eq!(up.messages[0].to_session_id, parent.session_id);
    assert_eq!(up.messages[0].project_id, parent.project_id);
    let down = send_one(
        &store,
        &parent.session_id,
        Recipients::Child(child.session_id.clone()),
    )
    .await
    .unwrap();
    assert_eq!(down.messages[0].from_session_id, parent.session_id);

    let e = refused("nobody".into(), session(&parent)).await;
    assert!(matches!(e, StoreError::NotFound { .. }), "{e:?}");
    let e = refused(parent.session_id.clone(), session(&ended)).await;
    assert!(
        matches!(&e, StoreError::Conflict(m) if m.contains("has ended")),
        "{e:?}"
    );
    let e = refused(ended.session_id.clone(), session(&parent)).await;
    assert!(matches!(e, StoreError::Conflict(_)), "{e:?}");
    let e = refused(parent.session_id.clone(), session(&stranger)).await;
    assert!(
        matches!(&e, StoreError::Forbidden(m) if m.contains("belongs to project")),
        "{e:?}"
    );
    let e = refused(
        stranger.session_id.clone(),
        Recipients::Child(child.session_id.clone()),
    )
    .await;
    assert!(
        matches!(&e, StoreError::Forbidden(m) if m.contains("is not a child")),
        "{e:?}"
    );
    let e = refused(parent.session_id.clone(), Recipients::Parent).await;
    assert!(matches!(e, StoreError::Invalid(_)), "{e:?}");
}

/// Listing sessions: each filter (and each pair) gives exactly its sessions, and a filter on
/// a project, a party or a parent goes through that column's index, not a walk over every
/// session the store holds.
#[tokio::test]
async fn a_session_listing_gives_each_filters_sessions_through_its_index() {
    use crate::{SessionFilter, SessionStatus};
    let (dir, store) = open();
    let register = |new: NewSession| registered(&store, new);
    let lead = register(new_session("lead")).await;
    let member = |cli: &'static str| NewSession {
        parent_session_id: Some(lead.session_id.clone()),
        party_id: Some("party-1".into()),
        ..new_session(cli)
    };
    let a = register(member("a")).await;
    let b = register(member("b")).await;
    let other = register(elsewhere("other")).await;
    store.end_session(b.session_id.clone()).await.unwrap();
    let listed = |filter: SessionFilter| {
        let mut ids: Vec<String> = store
            .list_sessions(&filter)
            .unwrap()
            .into_iter()
            .map(|s| s.session_id)
            .collect();
        ids.sort();
        ids
    };
    let sorted = |ids: &[&crate::Session]| {
        let mut ids: Vec<String> = ids.iter().map(|s| s.session_id.clone()).collect();
        ids.sort();
        ids
    };
    assert_eq!(
        listed(SessionFilter::default()),
        sorted(&[&lead, &a, &b, &other])
    );
    assert_eq!(
        listed(SessionFilter {
            project_id: Some(lead.project_id.clone()),
            ..SessionFilter::default()
        }),
        sorted(&[&lead, &a, &b])
    );
    assert_eq!(
        listed(SessionFilter {
            party_id: Some("party-1".into()),
            status: Some(SessionStatus::Active),
            ..SessionFilter::default()
        }),
        sorted(&[&a])
    );
    assert_eq!(
        listed(SessionFilter {
            parent_session_id: Some(lead.session_id.clone()),
            ..SessionFilter::default()
        }),
        sorted(&[&a, &b])
    );
    assert_eq!(
        listed(SessionFilter {
            status: Some(SessionStatus::Ended),
            ..SessionFilter::default()
        }),
        sorted(&[&b])
    );
    assert!(
        listed(SessionFilter {
            project_id: Some(other.project_id.clone()),
            party_id: Some("party-1".into()),
            ..SessionFilter::default()
        })
        .is_empty()
    );
    // The plans SQLite makes of the listings a broadcast and a member's siblings send.
    let conn = rusqlite::Connection::open(dir.path().join("t.db")).unwrap();
    let plan = |filter: SessionFilter| {
        let mut stmt = conn
            .prepare(&format!(
                "EXPLAIN QUERY PLAN {}",
                crate::sessions::listing_sql(&crate::sessions::listing_filters(&filter))
            ))
            .unwrap();
        let count = stmt.parameter_count();
        let params: Vec<&str> = vec!["x"; count];
        stmt.query_map(rusqlite::params_from_iter(params), |r| {
            r.get::<_, String>(3)
        })
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap()
        .join("; ")
    };
    for (filter, index) in [
        (
            SessionFilter {
                project_id: Some("p".into()),
                party_id: Some("x".into()),
                status: Some(SessionStatus::Active),
                ..SessionFilter::default()
            },
            "idx_sessions_",
        ),
        (
            SessionFilter {
                parent_session_id: Some("x".into()),
                status: Some(SessionStatus::Active),
                ..SessionFilter::default()
            },
            "idx_sessions_parent",
        ),
        (
            SessionFilter {
                project_id: Some("p".into()),
                ..SessionFilter::default()
            },
            "idx_sessions_project",
        ),
    ] {
        let plan = plan(filter);
        assert!(plan.contains(index), "{plan}");
        assert!(!plan.contains("SCAN sessions"), "{plan}");
    }
}

/// Listing the timeline: each filter gives exactly its events, after `since`, oldest first,
/// at most `limit` of them.
#[tokio::test]
async fn a_timeline_listing_gives_each_filters_events_in_order() {
    use crate::{EventFilter, NewEvent};
    let (_dir, store) = open();
    let mut seqs = Vec::new();
    for i in 0..12 {
        let party = ["p1", "p2", "none"][i % 3];
        let seq = store
            .append_event(NewEvent {
                kind: if i % 2 == 0 { "even" } else { "odd" }.into(),
                project_id: Some(format!("proj{}", i % 2)),
                session_id: Some(format!("s{}", i % 4)),
                party_id: (party != "none").then(|| party.to_string()),
                data: serde_json::json!({ "i": i }),
            })
            .await
            .unwrap();
        seqs.push(seq);
    }
    let listed = |filter: EventFilter| -> Vec<i64> {
        store
            .list_events(&filter)
            .unwrap()
            .into_iter()
            .map(|e| e.data["i"].as_i64().unwrap())
            .collect()
    };
    let all = EventFilter {
        limit: 100,
        ..EventFilter::default()
    };
    assert_eq!(listed(all.clone()), (0..12).collect::<Vec<_>>());
    let party = |p: &str| EventFilter {
        party_id: Some(p.into()),
        ..all.clone()
    };
    assert_eq!(listed(party("p1")), [0, 3, 6, 9]);
    assert_eq!(
        listed(EventFilter {
            since: Some(seqs[3]),
            ..party("p1")
        }),
        [6, 9]
    );
    assert_eq!(
        listed(EventFilter {
            limit: 2,
            ..party("p2")
        }),
        [1, 4]
    );
    assert_eq!(
        listed(EventFilter {
            kind: Some("odd".into()),
            ..party("p2")
        }),
        [1, 7]
    );
    assert_eq!(
        listed(EventFilter {
            session_id: Some("s2".into()),
            ..all.clone()
        }),
        [2, 6, 10]
    );
    assert_eq!(
        listed(EventFilter {
            project_id: Some("proj1".into()),
            kind: Some("even".into()),
            ..all.clone()
        }),
        Vec::<i64>::new()
    );
}
