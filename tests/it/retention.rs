//! A store that does not grow forever: `troupe gc` (the real CLI) removes what is old and let go
//! — read messages and those to an ended session, the timeline outside open parties, ended runs
//! and their logs, ended sessions nothing refers to, the checkouts of an ended party and of an
//! ended standalone run that hold no work — and keeps what the person still needs: an open
//! party's rows and checkout, a pending approval, an unread message, decisions, a checkout with
//! an unmerged commit or uncommitted changes (listed, with why). A dry run removes nothing; a
//! member may not call it; the daemon applies the rules by itself when it starts. A member's
//! output past `[retention] max_log_mib` is rotated (`.log` and `.log.1`) and still reads.
//! Rows are aged by writing to the database directly.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use troupe::client;

use crate::authority::token_of;
use crate::support::{
    TestDaemon, asks_for_in_box_requests, define, executable, launch, party_end, register, repo,
    shares, start, stderr, stdout, wait_for, wait_run,
};

const OLD: &str = "2000-01-01T00:00:00.000Z";

fn db(d: &TestDaemon) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(d.layout.data_dir.join("troupe.db")).unwrap();
    conn.busy_timeout(Duration::from_secs(30)).unwrap();
    conn
}

fn count(conn: &rusqlite::Connection, sql: &str) -> i64 {
    conn.query_row(sql, [], |r| r.get(0)).unwrap()
}

/// Every row's time set far in the past (the daemon may be running: SQLite serialises writers).
fn age_everything(d: &TestDaemon) {
    db(d)
        .execute_batch(&format!(
            "UPDATE events SET at = '{OLD}';
             UPDATE inter_session_messages SET created_at = '{OLD}';
             UPDATE notifications SET created_at = '{OLD}';
             UPDATE approvals SET created_at = '{OLD}';
             UPDATE questions SET created_at = '{OLD}';
             UPDATE agent_runs SET created_at = '{OLD}',
               completed_at = CASE WHEN completed_at IS NULL THEN NULL ELSE '{OLD}' END;
             UPDATE sessions SET created_at = '{OLD}', last_seen_at = '{OLD}',
               ended_at = CASE WHEN ended_at IS NULL THEN NULL ELSE '{OLD}' END;
             UPDATE parties SET created_at = '{OLD}',
               completed_at = CASE WHEN completed_at IS NULL THEN NULL ELSE '{OLD}' END;"
        ))
        .unwrap();
}

/// `troupe gc --json` with `args`, through the real CLI.
fn gc(d: &TestDaemon, args: &[&str]) -> Value {
    let mut all = vec!["gc", "--json"];
    all.extend_from_slice(args);
    let out = d.cli(&all);
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_str(&stdout(&out)).unwrap()
}

fn log_of(d: &TestDaemon, run: &str, suffix: &str) -> PathBuf {
    d.layout
        .data_dir
        .join("runs")
        .join(format!("{run}.log{suffix}"))
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

/// Says who it is; `unmerged` commits a file on its branch; completes.
const WORKER: &str = r#"#!/bin/sh
echo "${TROUPE_ROLE:-solo} was here"
if [ "$TROUPE_ROLE" = unmerged ]; then
  echo work > work.txt && git add work.txt && git -c user.name=m -c user.email=m@m commit -qm work
fi
troupe call complete '{"output":"done"}' >/dev/null
"#;

/// Leaves its credential, asks a permission nobody answers, and stays until released.
const WAITER: &str = r#"#!/bin/sh
printf '%s' "$TROUPE_RUN_TOKEN" > "$KEYS/waiter.tmp" && mv "$KEYS/waiter.tmp" "$KEYS/waiter.tok"
troupe call request_permission '{"tool_name":"Bash","input":{"command":"make"},"wait_ms":300000}' >/dev/null 2>&1 &
while [ ! -e "$KEYS/release" ]; do sleep 0.05; done
troupe call complete '{"output":"released"}' >/dev/null
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gc_removes_what_is_old_and_let_go_and_keeps_what_is_still_needed() {
    let d = TestDaemon::start();
    let c = d.client().await;
    let dir = d.dir.path();
    let project = repo(&dir.join("proj"));
    // The waiter's request stays pending for gc to keep (the box would let it through).
    asks_for_in_box_requests(&project);
    // Where the waiter leaves its credential: the test's shared dir, given to its box.
    let keys = d.shared().join("keys");
    std::fs::create_dir_all(&keys).unwrap();

    // Messages: one read, one unread, one to a session that then ended.
    let (s1, s2, s3) = (
        register(&c, "t", &project, None).await,
        register(&c, "t", &project, None).await,
        register(&c, "t", &project, None).await,
    );
    let send = |to: &str, content: &str| {
        c.call(
            "send_message",
            json!({ "from_session_id": s1, "to_session_id": to, "content": content }),
        )
    };
    let read = send(&s2, "read me").await.unwrap();
    send(&s2, "not read yet").await.unwrap();
    send(&s3, "to the ended").await.unwrap();
    c.call(
        "mark_read",
        json!({ "session_id": s2, "message_ids": [read["message_id"]] }),
    )
    .await
    .unwrap();
    c.call("end_session", json!({ "session_id": s3 }))
        .await
        .unwrap();

    let worker = executable(dir, "worker.sh", WORKER);
    define(
        &c,
        "agent",
        json!({ "name": "worker", "command": [worker], "isolation": "worktree" }),
    )
    .await;
    define(
        &c,
        "party",
        json!({ "name": "finished", "roles": {
            "clean": { "agent": "worker" }, "unmerged": { "agent": "worker" },
            "dirty": { "agent": "worker" } } }),
    )
    .await;
    let waiter = executable(dir, "waiter.sh", WAITER);
    define(
        &c,
        "agent",
        shares(
            json!({ "name": "waiter", "command": [waiter], "isolation": "worktree",
                    "approval_timeout_secs": 3600, "env": { "KEYS": keys.display().to_string() } }),
            &[&keys],
        ),
    )
    .await;
    define(
        &c,
        "party",
        json!({ "name": "open", "roles": { "waiter": { "agent": "waiter" } } }),
    )
    .await;

    // A party that ended, its members' checkouts: one with nothing of its own, one with an
    // unmerged commit, one with changes left uncommitted (made after it completed).
    let finished = launch(&c, "finished", &project).await;
    let status = party_end(&c, &finished, 120).await;
    assert_eq!(status["party"]["status"], "completed", "{status}");
    let member = |role: &str| {
        let m = status["members"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["role"] == role)
            .unwrap();
        (
            m["run_id"].as_str().unwrap().to_string(),
            m["workdir"].as_str().unwrap().to_string(),
        )
    };
    let (clean_run, clean_dir) = member("clean");
    let (unmerged_run, unmerged_dir) = member("unmerged");
    let (_, dirty_dir) = member("dirty");
    std::fs::write(Path::new(&dirty_dir).join("scratch.txt"), "half done").unwrap();
    // A standalone run in a worktree of its own, ended.
    define(
        &c,
        "agent",
        json!({ "name": "solo", "command": [executable(dir, "solo.sh", WORKER)], "isolation": "worktree" }),
    )
    .await;
    let solo_run = start(&c, "solo", "go", &s1).await;
    let solo = wait_run(&c, &solo_run).await;
    assert_eq!(solo["run"]["status"], "success", "{solo}");
    let solo_dir = solo["run"]["workdir"].as_str().unwrap().to_string();
    let solo_session = solo["run"]["session_id"].as_str().unwrap().to_string();
    // An open party whose member waits on a permission.
    let open = launch(&c, "open", &project).await;
    let member_token = token_of(&keys, "waiter").await;
    let approval = crate::support::pending_approval(&c).await;
    let approval_id = approval["approval_id"].as_str().unwrap().to_string();
    let open_status = c
        .call("get_party_status", json!({ "party_id": open }))
        .await
        .unwrap();
    let open_run = open_status["members"][0]["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    let open_dir = open_status["members"][0]["workdir"]
        .as_str()
        .unwrap()
        .to_string();
    for (run, what) in [
        (&solo_run, "solo"),
        (&clean_run, "clean"),
        (&open_run, "open"),
    ] {
        assert!(log_of(&d, run, "").exists(), "{what}'s log");
    }

    // A decision of the ended party, and everything aged.
    let conn = db(&d);
    conn.execute(
        "INSERT INTO decisions (id, party_id, topic, options, voters, deadline_ms, status, created_at) \
         VALUES ('kept-decision', ?1, 'which way', '[\"a\",\"b\"]', '[\"person\"]', 0, 'committed', ?2)",
        [&finished, OLD],
    )
    .unwrap();
    age_everything(&d);
    let open_events = |conn: &rusqlite::Connection| {
        conn.query_row(
            "SELECT count(*) FROM events WHERE party_id = ?1",
            [&open],
            |r| r.get::<_, i64>(0),
        )
        .unwrap()
    };
    let before_open_events = open_events(&conn);
    assert!(before_open_events > 0);
    let tables = [
        "events",
        "inter_session_messages",
        "notifications",
        "agent_runs",
        "sessions",
        "approvals",
    ];
    let counts = |conn: &rusqlite::Connection| -> Vec<i64> {
        tables
            .iter()
            .map(|t| count(conn, &format!("SELECT count(*) FROM {t}")))
            .collect()
    };
    let before = counts(&conn);

    // A member may not.
    let as_member = client::connect_with_token(&d.layout, &member_token)
        .await
        .unwrap();
    let refused = as_member
        .call("gc", json!({ "dry_run": true }))
        .await
        .unwrap_err();
    assert_eq!(refused.kind(), Some("forbidden"), "{refused}");

    // A dry run says what would go, and removes nothing.
    let dry = gc(&d, &["--dry-run"]);
    assert_eq!(dry["dry_run"], true, "{dry}");
    assert!(dry["events"].as_u64().unwrap() > 0, "{dry}");
    assert!(dry["messages"].as_u64().unwrap() >= 2, "{dry}");
    assert!(dry["runs"].as_u64().unwrap() >= 1, "{dry}");
    assert!(dry["log_files"].as_u64().unwrap() >= 4, "{dry}");
    assert_eq!(dry["vacuumed"], false);
    let to_remove = strings(&dry["checkouts_removed"]);
    for would in [&clean_dir, &solo_dir] {
        assert!(to_remove.contains(would), "{would} in {dry}");
    }
    assert_eq!(counts(&conn), before, "a dry run removes nothing");
    for path in [&clean_dir, &solo_dir, &unmerged_dir, &dirty_dir] {
        assert!(Path::new(path).exists(), "{path}");
    }
    assert!(log_of(&d, &solo_run, "").exists());

    // The real thing.
    let done = gc(&d, &[]);
    assert_eq!(done["dry_run"], false, "{done}");
    assert_eq!(done["max_age_days"], 30.0, "the default age");
    assert!(done["events"].as_u64().unwrap() > 0, "{done}");
    assert!(done["runs"].as_u64().unwrap() >= 1, "{done}");
    assert!(done["sessions"].as_u64().unwrap() >= 2, "{done}");
    assert!(done["log_bytes"].as_u64().unwrap() > 0, "{done}");
    assert_eq!(done["vacuumed"], true, "{done}");
    assert!(
        done["db_bytes_after"].as_u64().unwrap() <= done["db_bytes_before"].as_u64().unwrap(),
        "{done}"
    );
    // Messages: the read one and the ended session's went, the unread one stays.
    let contents: Vec<String> = {
        let mut s = conn
            .prepare("SELECT content FROM inter_session_messages WHERE from_session_id = ?1 ORDER BY seq")
            .unwrap();
        s.query_map([&s1], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    };
    assert_eq!(contents, ["not read yet"]);
    // The timeline: the open party's all there, nothing else this old (`merge_conflict` and
    // `party_landed` aside: none here).
    assert_eq!(open_events(&conn), before_open_events);
    assert_eq!(
        conn.query_row(
            "SELECT count(*) FROM events WHERE at = ?1 AND (party_id IS NULL OR party_id != ?2)",
            [OLD, &open],
            |r| r.get::<_, i64>(0)
        )
        .unwrap(),
        0
    );
    // Runs: the standalone one went with its log and session; the ended party's members' rows
    // stay (the party names them) but not their logs; the open party's run and log stay.
    let gone = c
        .call("get_agent_result", json!({ "run_id": solo_run }))
        .await
        .unwrap_err();
    assert_eq!(gone.kind(), Some("not_found"), "{gone}");
    assert!(!log_of(&d, &solo_run, "").exists());
    for run in [&clean_run, &unmerged_run] {
        c.call("get_agent_result", json!({ "run_id": run }))
            .await
            .unwrap();
        assert!(!log_of(&d, run, "").exists(), "{run}'s log");
    }
    let open_now = c
        .call("get_agent_result", json!({ "run_id": open_run }))
        .await
        .unwrap();
    assert_eq!(open_now["run"]["status"], "running", "{open_now}");
    assert!(log_of(&d, &open_run, "").exists());
    // Sessions: the ended ones nothing refers to went; the live ones stay.
    for ended in [&s3, &solo_session] {
        let e = c
            .call("get_session", json!({ "session_id": ended }))
            .await
            .unwrap_err();
        assert_eq!(e.kind(), Some("not_found"), "{ended}: {e}");
    }
    for live in [&s1, &s2] {
        c.call("get_session", json!({ "session_id": live }))
            .await
            .unwrap();
    }
    // The pending approval and the decision stay.
    let pending = c
        .call("list_approvals", json!({ "status": "pending" }))
        .await
        .unwrap();
    assert!(
        pending["approvals"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["approval_id"] == approval_id.as_str()),
        "{pending}"
    );
    assert_eq!(
        count(
            &conn,
            "SELECT count(*) FROM decisions WHERE id = 'kept-decision'"
        ),
        1
    );
    // Checkouts: the ended party's clean one and the standalone run's went; the unmerged and
    // the dirty ones stay, said why; the open party's is not touched.
    let removed = strings(&done["checkouts_removed"]);
    assert!(
        removed.contains(&clean_dir) && removed.contains(&solo_dir),
        "{done}"
    );
    assert!(!Path::new(&clean_dir).exists() && !Path::new(&solo_dir).exists());
    let kept = done["checkouts_kept"].as_array().unwrap();
    let why = |dir: &str| {
        kept.iter()
            .find(|k| k["workdir"] == dir)
            .unwrap_or_else(|| panic!("{dir} kept: {done}"))["reason"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert!(why(&unmerged_dir).contains("not merged"), "{done}");
    assert!(why(&dirty_dir).contains("uncommitted"), "{done}");
    assert_eq!(kept.len(), 2, "{done}");
    for stays in [&unmerged_dir, &dirty_dir, &open_dir] {
        assert!(Path::new(stays).exists(), "{stays}");
    }
    // Its record on the timeline.
    let events = c
        .call("list_events", json!({ "kind": "gc" }))
        .await
        .unwrap();
    assert_eq!(events["events"].as_array().unwrap().len(), 1, "{events}");

    // Again, for a person: nothing more to remove, the kept checkouts said again.
    let out = d.cli(&["gc"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("checkouts kept: 2"), "{text}");
    assert!(
        text.contains(&unmerged_dir) && text.contains("database:"),
        "{text}"
    );
    std::fs::write(keys.join("release"), "").unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_applies_the_rules_by_itself_when_it_starts() {
    let mut d = TestDaemon::start();
    let c = d.client().await;
    let project = d.project("proj");
    let (a, b) = (
        register(&c, "t", &project, None).await,
        register(&c, "t", &project, None).await,
    );
    let sent = c
        .call(
            "send_message",
            json!({ "from_session_id": a, "to_session_id": b, "content": "old news" }),
        )
        .await
        .unwrap();
    c.call(
        "mark_read",
        json!({ "session_id": b, "message_ids": [sent["message_id"]] }),
    )
    .await
    .unwrap();
    drop(c);
    d.kill9();
    age_everything(&d);
    d.spawn();
    let conn = db(&d);
    wait_for("the start-up pass", 60, || async {
        (count(&conn, "SELECT count(*) FROM inter_session_messages") == 0).then_some(())
    })
    .await;
    // Without VACUUM; the live sessions stay.
    assert_eq!(
        count(
            &conn,
            "SELECT count(*) FROM sessions WHERE status = 'active' AND cli = 't'"
        ),
        2
    );
}

/// Prints 3 MiB, says so, and waits to say its last line.
const TALKER: &str = r#"#!/bin/sh
line=$(printf '%01023d' 0)
i=0
while [ $i -lt 3072 ]; do echo "$line"; i=$((i+1)); done
touch "$GATE/written"
while [ ! -e "$GATE/go" ]; do sleep 0.05; done
echo "the last line"
troupe call complete '{"output":"said a lot"}' >/dev/null
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_members_output_past_the_limit_is_rotated_and_still_reads() {
    const MIB: u64 = 1024 * 1024;
    let d = TestDaemon::start_with_config(&[], &[], "[retention]\nmax_log_mib = 1\n");
    let c = d.client().await;
    // The files it and the test signal each other with, in the shared dir its box is given.
    let gate = d.shared().join("gate");
    std::fs::create_dir_all(&gate).unwrap();
    define(
        &c,
        "agent",
        shares(
            json!({ "name": "talker", "command": [executable(d.dir.path(), "talker.sh", TALKER)],
                    "env": { "GATE": gate.display().to_string() } }),
            &[&gate],
        ),
    )
    .await;
    let project = d.project("proj");
    let parent = register(&c, "t", &project, None).await;
    let run = start(&c, "talker", "go", &parent).await;
    let (log, previous) = (log_of(&d, &run, ""), log_of(&d, &run, ".1"));
    wait_for("3 MiB written", 60, || async {
        gate.join("written").exists().then_some(())
    })
    .await;
    // Rotated (each second the daemon looks): the last MiB is the previous part.
    wait_for("the log rotated", 30, || async {
        let current = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(u64::MAX);
        (previous.exists() && current <= MIB).then_some(())
    })
    .await;
    std::fs::write(gate.join("go"), "").unwrap();
    let end = wait_run(&c, &run).await;
    assert_eq!(end["run"]["status"], "success", "{end}");
    let previous_len = std::fs::metadata(&previous).unwrap().len();
    assert!(
        (MIB..MIB + MIB / 2).contains(&previous_len),
        "{previous_len}"
    );
    assert!(std::fs::metadata(&log).unwrap().len() <= MIB);

    // The tail reads as ever.
    let tail = c
        .call("get_run_log", json!({ "run_id": run }))
        .await
        .unwrap();
    assert!(
        tail["text"]
            .as_str()
            .unwrap()
            .ends_with("0\nthe last line\n"),
        "{}",
        tail["size"]
    );
    assert_eq!(tail["next_offset"], tail["size"]);
    assert!(
        tail["size"].as_u64().unwrap() > 2 * MIB,
        "offsets count what rotated away"
    );
    assert!(tail.get("rotated").is_none(), "{}", tail["offset"]);
    // From the start: what rotated away is gone; the read starts at the oldest byte kept and
    // says so, and reads on to the end.
    let from_start = c
        .call(
            "get_run_log",
            json!({ "run_id": run, "offset": 0, "limit": 1_048_576 }),
        )
        .await
        .unwrap();
    assert_eq!(from_start["rotated"], true);
    let oldest = from_start["offset"].as_u64().unwrap();
    assert!(oldest > MIB, "{oldest}");
    let mut text = from_start["text"].as_str().unwrap().to_string();
    let mut next = from_start["next_offset"].as_u64().unwrap();
    while next < tail["size"].as_u64().unwrap() {
        let part = c
            .call(
                "get_run_log",
                json!({ "run_id": run, "offset": next, "limit": 1_048_576 }),
            )
            .await
            .unwrap();
        assert!(part.get("rotated").is_none(), "{}", part["offset"]);
        text.push_str(part["text"].as_str().unwrap());
        next = part["next_offset"].as_u64().unwrap();
    }
    assert_eq!(text.len() as u64, tail["size"].as_u64().unwrap() - oldest);
    assert!(text.ends_with("0\nthe last line\n"));
    // The CLI reads it whole too.
    let out = d.cli(&["agent", "log", &run]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).ends_with("the last line\n"));
}
