//! The dashboard's state and drawing without a terminal: what the keys ask of the daemon, how
//! the selection stays on its member as statuses change, and the 80×24 screen (ratatui's test
//! backend, compared with expect-test).

use expect_test::expect;
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use serde_json::{Value, json};

use super::app::{App, Command, Key, MemberKey, Mode, Pane, Update};

fn party(status: &str, writer: &str, check: &str) -> Update {
    let member = |role: &str, status: &str, started: Option<i64>| {
        json!({ "role": role, "index": 0, "status": status, "crash_count": 0,
                "attempts": i32::from(started.is_some()), "session_id": null, "session_status": null,
                "run_id": started.map(|_| format!("run-{role}")), "run_status": null, "output": null,
                "workdir": null, "branch": null, "started_at_ms": started, "finished_at_ms": null })
    };
    let role = |name: &str, status: &str, deps: Value| {
        json!({ "role": name, "agent": "codex", "count": 1, "is_leader": false,
                "depends_on": deps, "on_crash": "restart", "paused": false, "status": status,
                "completed": i32::from(status == "completed"), "running": 0, "crashes": 0 })
    };
    let started = |s: &str| (s != "pending").then_some(1_000_000);
    let value = json!({
        "party": { "party_id": "0190aaaa-bbbb-cccc", "name": "notes", "status": status,
                   "status_reason": null, "project_id": "p", "repo_root": "/r", "task_id": null,
                   "created_at": "2026-11-25T12:00:00.000Z", "completed_at": null },
        "usage": { "input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0 },
        // As the daemon lists them (by name): the view puts them in flow order.
        "roles": [role("check", check, json!(["writer"])), role("writer", writer, json!([]))],
        "members": [member("check", check, started(check)), member("writer", writer, started(writer))],
        "tasks": [],
        "collab_state": "executing",
    });
    Update::Party(Box::new(
        serde_json::from_value(value).expect("a party status"),
    ))
}

fn approval() -> Update {
    let item = json!({
        "item_id": "approval:a1", "kind": "approval", "project_id": "p", "party_id": "0190aaaa-bbbb-cccc",
        "title": "writer asks to use write_file", "detail": "notes.txt\n+hi",
        "since": "2026-11-25T12:00:05.000Z",
        "answer": { "op": "decide_approval", "params": { "approval_id": "a1" },
                    "choice_field": "decision",
                    "choices": ["approve", "deny", "approve_pattern", "abort"] },
    });
    Update::Inbox(vec![serde_json::from_value(item).expect("an inbox item")])
}

fn question() -> Update {
    let item = json!({
        "item_id": "question:q1", "kind": "question", "project_id": "p", "party_id": null,
        "title": "Ship it on Friday?", "since": "2026-11-25T12:00:05.000Z",
        "answer": { "op": "answer_question", "params": { "question_id": "q1" } },
    });
    Update::Inbox(vec![serde_json::from_value(item).expect("an inbox item")])
}

fn screen(app: &App) -> String {
    let mut terminal = Terminal::new(TestBackend::new(80, 24)).expect("a test terminal");
    terminal.draw(|f| super::view::draw(f, app)).expect("drawn");
    let buffer = terminal.backend().buffer();
    let mut text = String::new();
    for y in 0..buffer.area.height {
        for x in 0..buffer.area.width {
            text.push_str(buffer[(x, y)].symbol());
        }
        text.push('\n');
    }
    text
}

fn app() -> App {
    let mut app = App::new("proj".into());
    app.apply(Update::Connected);
    app.now_ms = 1_000_000 + 75_000;
    app
}

#[test]
fn the_dashboard_fits_80_by_24_with_a_party_its_roles_in_flow_order_and_the_inbox() {
    let mut app = app();
    app.apply(party("running", "running", "pending"));
    app.apply(approval());
    app.apply(Update::Event(Box::new(
        serde_json::from_value(json!({
            "seq": 7, "at": "2026-11-25T12:00:05.123Z", "kind": "approval_requested",
            "project_id": "p", "session_id": null, "party_id": "0190aaaa-bbbb-cccc",
            "data": { "role": "writer", "index": 0 },
        }))
        .expect("an event"),
    )));
    expect![[r#"
         Troupe · proj · ● connected · inbox 1 · ? help                                 
        ┌ Parties (1) ─────────────────────────────┐┌ Inbox (1) ───────────────────────┐
        │›● notes running · executing bbb-cccc     ││›approval  writer asks to use writ│
        │   ● writer [codex] running 0/1           ││                                  │
        │      ● #0 running   1:15                 ││                                  │
        │   · check [codex] pending 0/1            ││                                  │
        │      · #0 pending                        ││                                  │
        │                                          ││                                  │
        │                                          ││                                  │
        │                                          ││                                  │
        │                                          ││                                  │
        └──────────────────────────────────────────┘└──────────────────────────────────┘
        ┌ Timeline ────────────────────────────────────────────────────────────────────┐
        │12:00:05 approval_requested writer#0 bbb-cccc                                 │
        │                                                                              │
        │                                                                              │
        │                                                                              │
        │                                                                              │
        │                                                                              │
        │                                                                              │
        │                                                                              │
        │                                                                              │
        └──────────────────────────────────────────────────────────────────────────────┘
        Tab inbox · ↑↓ · o output · v diff · t timeline · q quit                        
    "#]]
    .assert_eq(&screen(&app));
}

#[test]
fn keys_answer_the_inbox_with_the_items_own_operation() {
    let mut app = app();
    app.apply(approval());
    assert!(app.key(Key::Char('a')).is_empty(), "the parties have focus");
    app.key(Key::Tab);
    assert_eq!(app.pane, Pane::Item);
    assert_eq!(
        app.key(Key::Char('a')),
        vec![Command::Answer {
            title: "writer asks to use write_file".into(),
            op: "decide_approval".into(),
            params: json!({ "approval_id": "a1", "decision": "approve" }),
        }]
    );
    let denied = app.key(Key::Char('d'));
    assert!(
        matches!(&denied[..], [Command::Answer { params, .. }] if params["decision"] == "deny"),
        "{denied:?}"
    );
    let third = app.key(Key::Char('3'));
    assert!(
        matches!(&third[..], [Command::Answer { params, .. }] if params["decision"] == "approve_pattern"),
        "{third:?}"
    );
    // Enter: a list of its answers; down once, Enter picks `deny`.
    assert!(app.key(Key::Enter).is_empty());
    assert!(matches!(app.mode, Mode::Pick { selected: 0, .. }));
    app.key(Key::Down);
    let picked = app.key(Key::Enter);
    assert!(
        matches!(&picked[..], [Command::Answer { params, .. }] if params["decision"] == "deny"),
        "{picked:?}"
    );
    assert_eq!(app.mode, Mode::Normal);

    // A question without choices: typed words, Backspace, Enter; Esc leaves without answering.
    app.apply(question());
    app.key(Key::Enter);
    for c in "Yess".chars() {
        app.key(Key::Char(c));
    }
    app.key(Key::Backspace);
    let said = app.key(Key::Enter);
    assert_eq!(
        said,
        vec![Command::Answer {
            title: "Ship it on Friday?".into(),
            op: "answer_question".into(),
            params: json!({ "question_id": "q1", "answer": "Yes" }),
        }]
    );
    app.key(Key::Enter);
    app.key(Key::Char('q'));
    assert!(app.key(Key::Esc).is_empty());
    assert!(!app.quit, "q typed into an answer is a letter");
    assert!(
        app.key(Key::Char('a')).is_empty(),
        "a question has no approve"
    );
    assert!(
        app.notice
            .as_deref()
            .is_some_and(|n| n.contains("no approve"))
    );
    app.key(Key::Char('q'));
    assert!(app.quit);
}

#[test]
fn the_selection_stays_on_its_member_and_asks_for_its_output_and_diff() {
    let mut app = app();
    app.apply(party("running", "running", "pending"));
    app.key(Key::Down);
    app.key(Key::Down);
    let writer = MemberKey {
        party_id: "0190aaaa-bbbb-cccc".into(),
        role: "writer".into(),
        index: 0,
    };
    assert_eq!(
        app.selected_member(),
        Some((writer.clone(), Some("run-writer".into())))
    );
    // A status change elsewhere keeps the selection on the writer's row.
    app.apply(party("running", "completed", "running"));
    assert_eq!(app.selected_member().map(|m| m.0), Some(writer.clone()));
    assert_eq!(
        app.key(Key::Char('o')),
        vec![Command::WatchLog {
            run_id: "run-writer".into()
        }]
    );
    assert!(app.key(Key::Char('o')).is_empty(), "already followed");
    app.apply(Update::Log {
        run_id: "run-writer".into(),
        text: "asking to write notes.txt\n".into(),
        ended: false,
    });
    assert!(
        screen(&app).contains("│asking to write notes.txt"),
        "{}",
        screen(&app)
    );
    assert_eq!(app.key(Key::Char('v')), vec![Command::Diff(writer)]);
    assert_eq!(app.pane, Pane::Diff);
    // A pending member has nothing to show yet: said, nothing asked.
    app.key(Key::Down);
    app.key(Key::Down);
    app.apply(party("running", "completed", "pending"));
    assert!(app.key(Key::Char('o')).is_empty());
    assert!(
        app.notice
            .as_deref()
            .is_some_and(|n| n.contains("has not run yet"))
    );
}

#[test]
fn a_lost_daemon_is_said_and_times_parse() {
    let mut app = app();
    app.apply(Update::Disconnected("no troupe daemon is running".into()));
    assert!(screen(&app).contains("○ reconnecting… (no troupe daemon is running)"));
    assert_eq!(
        super::parse_ms("1970-01-02T00:00:01.5Z"),
        Some(86_400_000 + 1_500)
    );
    assert_eq!(
        super::parse_ms("2026-11-25T12:00:05.123Z").map(|ms| ms % 86_400_000),
        Some(12 * 3_600_000 + 5_123)
    );
    assert_eq!(super::parse_ms("soon"), None);
    assert_eq!(super::view::clock(3_723_000), "1:02:03");
}

fn schedule(name: &str, paused: bool, error: Option<&str>) -> Value {
    json!({ "project_id": "p", "project_root": "/r", "name": name, "cron": "0 2 * * *",
            "party": "team", "task": "fix", "missed": "once", "paused": paused,
            "next_due_at": if paused || error.is_some() { Value::Null } else { json!("2026-11-29T02:00:00.000Z") },
            "error": error, "launching": false, "state_at": "2026-11-25T12:00:00.000Z" })
}

#[test]
fn schedules_have_a_pane_under_the_inbox_where_p_pauses_or_resumes_and_r_runs_one() {
    let mut app = app();
    app.apply(party("running", "running", "pending"));
    // The inbox's schedule items are left to the schedules' pane.
    let Update::Inbox(mut items) = approval() else {
        unreachable!()
    };
    items.push(
        serde_json::from_value(json!({
            "item_id": "schedule:p:nightly:active", "kind": "schedule", "project_id": "p",
            "party_id": null, "title": "schedule nightly: next 2026-11-29T02:00Z, party team",
            "since": "2026-11-25T12:00:00.000Z",
            "answer": { "op": "pause_schedule", "params": { "project_id": "p", "name": "nightly" } },
        }))
        .expect("an inbox item"),
    );
    app.apply(Update::Inbox(items));
    assert_eq!(app.inbox.len(), 1);
    let schedules = [
        schedule("nightly", false, None),
        schedule("weekly", true, None),
        schedule("broken", false, Some("cron \"x\": invalid")),
    ];
    app.apply(Update::Schedules(
        schedules
            .iter()
            .map(|s| serde_json::from_value(s.clone()).expect("a schedule"))
            .collect(),
    ));
    app.key(Key::Tab);
    app.key(Key::Tab);
    expect![[r#"
         Troupe · proj · ● connected · inbox 1 · ? help                                 
        ┌ Parties (1) ─────────────────────────────┐┌ Inbox (1) ───────────────────────┐
        │›● notes running · executing bbb-cccc     ││›approval  writer asks to use writ│
        │   ● writer [codex] running 0/1           ││                                  │
        │      ● #0 running   1:15                 ││                                  │
        │   · check [codex] pending 0/1            ││                                  │
        │      · #0 pending                        │└──────────────────────────────────┘
        │                                          │┌ Schedules (3) ───────────────────┐
        │                                          ││›● nightly next 11-29T02:00Z · tea│
        │                                          ││ ‖ weekly paused · team           │
        │                                          ││ ✗ broken not running: cron "x": i│
        └──────────────────────────────────────────┘└──────────────────────────────────┘
        ┌ Timeline ────────────────────────────────────────────────────────────────────┐
        │                                                                              │
        │                                                                              │
        │                                                                              │
        │                                                                              │
        │                                                                              │
        │                                                                              │
        │                                                                              │
        │                                                                              │
        │                                                                              │
        └──────────────────────────────────────────────────────────────────────────────┘
        Tab parties · ↑↓ · p pause/resume · r run now · q quit                          
    "#]]
    .assert_eq(&screen(&app));
    let params = |name: &str| json!({ "project_id": "p", "name": name });
    assert_eq!(
        app.key(Key::Char('p')),
        vec![Command::Answer {
            title: "pause schedule nightly".into(),
            op: "pause_schedule".into(),
            params: params("nightly"),
        }]
    );
    app.key(Key::Down);
    assert_eq!(
        app.key(Key::Char('p')),
        vec![Command::Answer {
            title: "resume schedule weekly".into(),
            op: "resume_schedule".into(),
            params: params("weekly"),
        }]
    );
    assert_eq!(
        app.key(Key::Char('r')),
        vec![Command::Answer {
            title: "run schedule weekly now".into(),
            op: "run_schedule_now".into(),
            params: params("weekly"),
        }]
    );
    // Tab goes round to the parties; without schedules, the inbox's Tab does too.
    app.key(Key::Tab);
    assert_eq!(app.focus, super::app::Focus::Parties);
    app.apply(Update::Schedules(Vec::new()));
    app.key(Key::Tab);
    app.key(Key::Tab);
    assert_eq!(app.focus, super::app::Focus::Parties);
}

fn pull(state: &str, rounds: i64) -> Update {
    let view = json!({ "party_id": "0190aaaa-bbbb-cccc", "repo": "o/r", "number": 12,
                       "url": "https://github.com/o/r/pull/12", "state": state, "ci_rounds": rounds,
                       "max_ci_rounds": 3, "issue": "o/r#5", "pushed_by": "troupe" });
    Update::Pull {
        party_id: "0190aaaa-bbbb-cccc".into(),
        pull: Some(Box::new(
            serde_json::from_value(view).expect("a pull request"),
        )),
    }
}

#[test]
fn a_partys_pull_request_shows_under_it_and_the_rows_still_select_its_members() {
    let mut app = app();
    app.apply(party("running", "running", "pending"));
    app.apply(pull("open", 1));
    expect![[r#"
         Troupe · proj · ● connected · inbox 0 · ? help                                 
        ┌ Parties (1) ─────────────────────────────┐┌ Inbox (0) ───────────────────────┐
        │›● notes running · executing bbb-cccc     ││nothing is waiting for you        │
        │   ↳ PR #12 open · CI round 1/3           ││                                  │
        │   ● writer [codex] running 0/1           ││                                  │
        │      ● #0 running   1:15                 ││                                  │
        │   · check [codex] pending 0/1            ││                                  │
        │      · #0 pending                        ││                                  │
        │                                          ││                                  │
        │                                          ││                                  │
        │                                          ││                                  │
        └──────────────────────────────────────────┘└──────────────────────────────────┘
        ┌ Timeline ────────────────────────────────────────────────────────────────────┐
        │                                                                              │
        │                                                                              │
        │                                                                              │
        │                                                                              │
        │                                                                              │
        │                                                                              │
        │                                                                              │
        │                                                                              │
        │                                                                              │
        └──────────────────────────────────────────────────────────────────────────────┘
        Tab inbox · ↑↓ · o output · v diff · t timeline · q quit                        
    "#]]
    .assert_eq(&screen(&app));
    // The pull request's line belongs to the party's row: one Down is the first role, a
    // second its member.
    app.key(Key::Down);
    assert!(
        app.selected_member()
            .is_some_and(|(m, _)| m.role == "writer")
    );
    app.key(Key::Down);
    assert_eq!(
        app.selected_member().map(|m| m.1),
        Some(Some("run-writer".into()))
    );
    app.apply(pull("ready", 1));
    assert!(
        screen(&app).contains("│   ↳ PR #12 ready to merge    "),
        "{}",
        screen(&app)
    );
    // The list of parties again keeps it; a party without one (not found) shows none.
    let summary = app.parties[0].summary.clone();
    app.apply(Update::Parties(vec![summary]));
    assert!(screen(&app).contains("PR #12 ready to merge"));
    app.apply(Update::Pull {
        party_id: "0190aaaa-bbbb-cccc".into(),
        pull: None,
    });
    assert!(!screen(&app).contains("PR #"), "{}", screen(&app));
}
