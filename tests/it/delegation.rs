//! Delegation a person can steer: `start_agent` and a launch's roles take overrides (model,
//! runner, isolation, timeout, budget, tool policy), a member's subagent only narrowing; a
//! subagent's context is resolved as seed 001 says (`session_context` references, `task:
//! "next"`, `timeout: 0` for no limit).

use std::path::Path;

use serde_json::{Value, json};
use troupe::client::Client;

use crate::scenario::Scenario;
use crate::support::{TestDaemon, define, executable, party_end, register, repo, shares, wait_run};

/// A process agent that completes at once (or, with `KEYS` set, first leaves its credential
/// there and waits for `$KEYS/release`).
async fn define_quick(c: &Client, dir: &Path) {
    let script = executable(
        dir,
        "quick.sh",
        "#!/bin/sh\nif [ -n \"$KEYS\" ]; then printf '%s' \"$TROUPE_RUN_TOKEN\" > \"$KEYS/tok.tmp\" && mv \"$KEYS/tok.tmp\" \"$KEYS/tok\"; \
         while [ ! -e \"$KEYS/release\" ]; do sleep 0.05; done; fi\ntroupe call complete '{\"output\":\"ok\"}' >/dev/null\n",
    );
    define(
        c,
        "agent",
        json!({ "name": "quick", "command": [script], "timeout_secs": 300,
                "workflow": { "allowed_tools": ["read_file", "write_file"] } }),
    )
    .await;
}

async fn start(c: &Client, params: Value) -> Value {
    let r = c.call("start_agent", params).await.unwrap();
    wait_run(c, r["run_id"].as_str().unwrap()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_person_overrides_a_subagent_and_a_member_may_only_narrow_its_own() {
    let s = Scenario::new().await;
    let (d, c, project) = (&s.daemon, &s.person, &s.project);
    define_quick(c, s.dir()).await;
    let person = register(c, "human", project, None).await;

    // The person: another model, a checkout of its own, no time limit, a budget, fewer tools.
    let r = start(
        c,
        json!({ "agent": "quick", "prompt": "go", "parent_session_id": person, "timeout": 0,
                "overrides": { "model": "model-b", "isolation": "worktree",
                               "budget": { "max_files_changed": 3 },
                               "blocked_tools": ["write_file"] } }),
    )
    .await;
    let run = &r["run"];
    assert_eq!(run["status"], "success", "{r}");
    let def = &run["definition"];
    assert_eq!(def["model"], "model-b", "{def}");
    assert_eq!(def["isolation"], "worktree");
    assert!(def.get("timeout_secs").is_none_or(Value::is_null), "{def}");
    assert_eq!(def["budget"]["max_files_changed"], 3);
    assert_eq!(def["workflow"]["blocked_tools"], json!(["write_file"]));
    let session = c
        .call("get_session", json!({ "session_id": run["session_id"] }))
        .await
        .unwrap();
    // A checkout of its own (sandboxed, a worktree is carried out as a borrowing clone).
    let base = crate::support::worktree_base(c).await;
    assert!(
        session["session"]["cwd"]
            .as_str()
            .unwrap()
            .contains(&format!("/{base}/")),
        "{session}"
    );
    // An override that makes no agent is named.
    let bad = c
        .call(
            "start_agent",
            json!({ "agent": "quick", "prompt": "go", "parent_session_id": person,
                    "overrides": { "runner": "wasm:" } }),
        )
        .await
        .unwrap_err();
    assert_eq!(bad.kind(), Some("invalid_params"), "{bad}");

    // A member (a run of `quick` that waits) starting its own subagent: narrowing is fine,
    // widening is refused.
    // It leaves its credential in a dir of the test's, which its box is given.
    let keys = s.shared().join("keys");
    std::fs::create_dir_all(&keys).unwrap();
    define(
        c,
        "agent",
        shares(
            json!({ "name": "parent", "command": [s.dir().join("quick.sh").display().to_string()],
                    "timeout_secs": 300, "allow_nested_agents": true, "max_agent_depth": 2,
                    "env": { "KEYS": keys.display().to_string() } }),
            &[&keys],
        ),
    )
    .await;
    let parent = c
        .call(
            "start_agent",
            json!({ "agent": "parent", "prompt": "lead", "parent_session_id": person }),
        )
        .await
        .unwrap();
    let token = crate::support::wait_for("the member's credential", 30, || async {
        std::fs::read_to_string(keys.join("tok")).ok()
    })
    .await;
    let member = troupe::client::connect_with_token(&d.layout, &token)
        .await
        .unwrap();
    let me = parent["session_id"].as_str().unwrap();
    for (overrides, what) in [
        (
            json!({ "runner": "process", "isolation": "clone" }),
            "isolation",
        ),
        (json!({ "timeout_secs": 0 }), "timeout"),
        (json!({ "allowed_tools": ["run_command"] }), "tools"),
        (json!({ "approve_tools": [] }), "approved tools"),
    ] {
        let e = member
            .call(
                "start_agent",
                json!({ "agent": "quick", "prompt": "sub", "parent_session_id": me,
                        "overrides": overrides }),
            )
            .await
            .unwrap_err();
        assert!(
            e.to_string().contains(what) && e.kind() == Some("forbidden"),
            "{what}: {e}"
        );
    }
    let narrowed = member
        .call(
            "start_agent",
            json!({ "agent": "quick", "prompt": "sub", "parent_session_id": me,
                    "overrides": { "model": "small", "timeout_secs": 60,
                                   "allowed_tools": ["read_file"] } }),
        )
        .await
        .unwrap();
    let sub = wait_run(c, narrowed["run_id"].as_str().unwrap()).await;
    assert_eq!(sub["run"]["definition"]["model"], "small");
    assert_eq!(sub["run"]["definition"]["timeout_secs"], 60.0);
    std::fs::write(keys.join("release"), "").unwrap();
    wait_run(c, parent["run_id"].as_str().unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subagent_gets_its_parents_context_and_the_next_open_task() {
    let s = Scenario::new().await;
    let (c, project) = (&s.person, &s.project);
    define_quick(c, s.dir()).await;
    std::fs::write(Path::new(&project).join("brief.md"), "Ship on Friday.\n").unwrap();
    let person = register(c, "human", project, None).await;
    let other = register(c, "codex", project, None).await;
    for text in ["first note", "second note", "third note"] {
        c.call(
            "send_message",
            json!({ "from_session_id": other, "to_session_id": person, "content": text }),
        )
        .await
        .unwrap();
    }
    let prompt_of = |r: &Value| r["run"]["prompt"].as_str().unwrap().to_string();

    let r = start(
        c,
        json!({ "agent": "quick", "prompt": "go", "parent_session_id": person,
                "session_context": "transcript:2" }),
    )
    .await;
    let p = prompt_of(&r);
    assert!(
        p.contains("second note") && p.contains("third note") && !p.contains("first note"),
        "{p}"
    );
    let r = start(
        c,
        json!({ "agent": "quick", "prompt": "go", "parent_session_id": person,
                "session_context": "file:brief.md" }),
    )
    .await;
    assert!(prompt_of(&r).contains("Ship on Friday."), "{r}");
    let r = start(
        c,
        json!({ "agent": "quick", "prompt": "go", "parent_session_id": person,
                "session_context": format!("session_id:{other}") }),
    )
    .await;
    assert!(
        prompt_of(&r).contains(&format!("## Session {other}")),
        "{r}"
    );
    let r = start(
        c,
        json!({ "agent": "quick", "prompt": "go", "parent_session_id": person,
                "session_context": "summary_markdown" }),
    )
    .await;
    assert!(prompt_of(&r).contains("first note"), "{r}");
    for bad in ["file:../../etc/passwd", "transcript:0", "file:"] {
        let e = c
            .call(
                "start_agent",
                json!({ "agent": "quick", "prompt": "go", "parent_session_id": person,
                        "session_context": bad }),
            )
            .await
            .unwrap_err();
        assert_eq!(e.kind(), Some("invalid_params"), "{bad}: {e}");
    }

    // `task: "next"` takes the oldest open task, once.
    for title in ["Fix the parser", "Write the docs"] {
        c.call("create_task", json!({ "cwd": project, "title": title }))
            .await
            .unwrap();
    }
    let first = start(
        c,
        json!({ "agent": "quick", "prompt": "work", "parent_session_id": person, "task": "next" }),
    )
    .await;
    assert!(prompt_of(&first).contains("Fix the parser"), "{first}");
    let second = start(
        c,
        json!({ "agent": "quick", "prompt": "work", "parent_session_id": person, "task": "next" }),
    )
    .await;
    assert!(prompt_of(&second).contains("Write the docs"), "{second}");
    assert_ne!(first["run"]["task_id"], second["run"]["task_id"]);
    let none = c
        .call(
            "start_agent",
            json!({ "agent": "quick", "prompt": "work", "parent_session_id": person, "task": "next" }),
        )
        .await
        .unwrap_err();
    assert_eq!(none.kind(), Some("conflict"), "{none}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_launch_overrides_its_roles_agents() {
    let s = Scenario::new().await;
    let (c, project) = (&s.person, &s.project);
    define_quick(c, s.dir()).await;
    define(
        c,
        "party",
        json!({ "name": "duo", "roles": {
            "a": { "agent": "quick", "overrides": { "model": "own-model" } },
            "b": { "agent": "quick" } } }),
    )
    .await;
    let party = c
        .call(
            "launch_party",
            json!({ "name": "duo", "cwd": project,
                    "roles": { "b": { "model": "launch-model", "isolation": "worktree" },
                               "a": { "timeout_secs": 30 } } }),
        )
        .await
        .unwrap();
    let party = party["party_id"].as_str().unwrap().to_string();
    let end = s.ended(&party).await;
    assert_eq!(end["party"]["status"], "completed", "{end}");
    let runs = c
        .call("list_agents", json!({ "party_id": party }))
        .await
        .unwrap();
    let def_of = |role: &str| {
        runs["runs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["role_name"] == role)
            .map(|r| r["definition"].clone())
            .unwrap()
    };
    let (a, b) = (def_of("a"), def_of("b"));
    assert_eq!(a["model"], "own-model", "{a}");
    assert_eq!(a["timeout_secs"], 30.0, "{a}");
    assert_eq!(b["model"], "launch-model", "{b}");
    assert_eq!(b["isolation"], "worktree", "{b}");
    let e = c
        .call(
            "launch_party",
            json!({ "name": "duo", "cwd": project, "roles": { "nobody": { "model": "x" } } }),
        )
        .await
        .unwrap_err();
    assert!(e.to_string().contains("no role nobody"), "{e}");
}

/// Budgets on wall time and files changed hold for members that report no usage (a plain
/// process, an agent CLI that says nothing of its tokens): each is paused when over, not
/// crashed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budgets_on_time_and_files_hold_for_members_that_report_no_usage() {
    let s = Scenario::new().await;
    let (c, project) = (&s.person, &s.project);
    let busy = executable(
        s.dir(),
        "busy.sh",
        "#!/bin/sh\nfor f in a b c; do echo $f > $f.txt; done\nexec sleep 600\n",
    );
    define(
        c,
        "agent",
        json!({ "name": "files", "command": [busy], "isolation": "worktree",
                "budget": { "max_files_changed": 2 } }),
    )
    .await;
    let idle = executable(s.dir(), "idle.sh", "#!/bin/sh\nexec sleep 600\n");
    define(
        c,
        "agent",
        json!({ "name": "slow", "command": [idle], "budget": { "max_secs": 1 } }),
    )
    .await;
    define(
        c,
        "party",
        json!({ "name": "spend", "roles": { "writer": { "agent": "files" },
                                            "sitter": { "agent": "slow" } } }),
    )
    .await;
    let party = c
        .call("launch_party", json!({ "name": "spend", "cwd": project }))
        .await
        .unwrap()["party_id"]
        .as_str()
        .unwrap()
        .to_string();
    let status = crate::support::wait_for("both members paused by their budgets", 60, || async {
        let s = c
            .call("get_party_status", json!({ "party_id": party }))
            .await
            .unwrap();
        s["members"]
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m["status"] == "paused")
            .then_some(s)
    })
    .await;
    for m in status["members"].as_array().unwrap() {
        assert_eq!(m["crash_count"], 0, "paused, not crashed: {status}");
    }
    let events = c
        .call("list_events", json!({ "party_id": party, "limit": 1000 }))
        .await
        .unwrap();
    let text = events.to_string();
    assert!(text.contains("files changed"), "{text}");
    c.call("cancel_party", json!({ "party_id": party }))
        .await
        .unwrap();
}

/// The state letter of a process (`/proc/<pid>/stat`: `T` is stopped).
fn state_of(pid: u64) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// The person holds a party's member and lets it go on: a process member is stopped where it is
/// and continued; a member of another role is left alone; only the person may; one held when
/// the daemon is killed goes on under the next daemon.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_person_pauses_and_resumes_a_member_where_it_is() {
    let mut d = TestDaemon::start();
    let c = d.client().await;
    // The counters write their credentials and counts in a dir of the test's, given to their
    // boxes.
    let keys = d.shared().join("keys");
    std::fs::create_dir_all(&keys).unwrap();
    let counter = executable(
        d.dir.path(),
        "counter.sh",
        "#!/bin/sh\nprintf '%s' \"$TROUPE_RUN_TOKEN\" > \"$KEYS/$TROUPE_ROLE.tmp\" && mv \"$KEYS/$TROUPE_ROLE.tmp\" \"$KEYS/$TROUPE_ROLE.tok\"\n\
         n=0\nwhile [ ! -e \"$KEYS/release\" ]; do n=$((n+1)); echo $n > \"$KEYS/$TROUPE_ROLE.count\"; sleep 0.05; done\n\
         troupe call complete '{\"output\":\"counted\"}' >/dev/null\n",
    );
    define(
        &c,
        "agent",
        shares(
            json!({ "name": "counter", "command": [counter],
                    "env": { "KEYS": keys.display().to_string() } }),
            &[&keys],
        ),
    )
    .await;
    define(
        &c,
        "party",
        json!({ "name": "count", "roles": { "a": { "agent": "counter" }, "b": { "agent": "counter" } } }),
    )
    .await;
    let project = repo(&d.dir.path().join("proj"));
    let party = crate::support::launch(&c, "count", &project).await;
    let pid_of = |role: &'static str| {
        let c = &c;
        let party = party.clone();
        async move {
            crate::support::wait_for(&format!("{role}'s process"), 30, || async {
                let s = c
                    .call("get_party_status", json!({ "party_id": party }))
                    .await
                    .unwrap();
                let run = s["members"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|m| m["role"] == role)?["run_id"]
                    .as_str()?
                    .to_string();
                let r = c
                    .call("get_agent_result", json!({ "run_id": run }))
                    .await
                    .unwrap();
                r["run"]["pid"].as_u64()
            })
            .await
        }
    };
    let (a, b) = (pid_of("a").await, pid_of("b").await);
    let count = |role: &str| {
        std::fs::read_to_string(keys.join(format!("{role}.count")))
            .ok()
            .and_then(|t| t.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };

    let held = c
        .call("pause_party", json!({ "party_id": party, "role": "a" }))
        .await
        .unwrap();
    assert_eq!(held["members"], json!(["a#0"]), "{held}");
    crate::support::wait_for("a stopped", 30, || async {
        (state_of(a) == Some('T')).then_some(())
    })
    .await;
    assert_ne!(state_of(b), Some('T'), "b goes on");
    let at_pause = count("a");
    let b_then = count("b");
    crate::support::wait_for("b to count on", 30, || async {
        (count("b") > b_then + 3).then_some(())
    })
    .await;
    assert_eq!(count("a"), at_pause, "a counted nothing while held");

    // Holding is the person's: a member's credential is refused, and a role must exist.
    let token = crate::authority::token_of(&keys, "b").await;
    let member = troupe::client::connect_with_token(&d.layout, &token)
        .await
        .unwrap();
    let e = member
        .call("resume_party", json!({ "party_id": party }))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), Some("forbidden"), "{e}");
    assert_eq!(state_of(a), Some('T'), "still held");
    let refused = c
        .call(
            "pause_party",
            json!({ "party_id": party, "role": "nobody" }),
        )
        .await
        .unwrap_err();
    assert_eq!(refused.kind(), Some("invalid_params"), "{refused}");

    let released = c
        .call("resume_party", json!({ "party_id": party }))
        .await
        .unwrap();
    assert!(
        released["members"].as_array().unwrap().len() == 2,
        "{released}"
    );
    crate::support::wait_for("a to count on", 30, || async {
        (count("a") > at_pause + 3).then_some(())
    })
    .await;
    let events = c
        .call("list_events", json!({ "party_id": party, "limit": 1000 }))
        .await
        .unwrap()
        .to_string();
    assert!(events.contains("member_held") && events.contains("member_released"));

    // Held when the daemon is killed (-9): the next daemon adopts it and lets it go on (a hold
    // lives in the daemon that made it).
    c.call("pause_party", json!({ "party_id": party, "role": "a" }))
        .await
        .unwrap();
    crate::support::wait_for("a stopped again", 30, || async {
        (state_of(a) == Some('T')).then_some(())
    })
    .await;
    drop(c);
    d.kill9();
    d.spawn();
    let c = d.client().await;
    let mut last = count("a");
    let mut moved = 0;
    crate::support::wait_for("a to go on after the restart", 30, || {
        let now = count("a");
        if now != last {
            moved += 1;
            last = now;
        }
        let moved = moved;
        async move { (moved >= 3).then_some(()) }
    })
    .await;
    // The same process, adopted: not restarted.
    assert_ne!(state_of(a), Some('T'));
    let s = c
        .call("get_party_status", json!({ "party_id": party }))
        .await
        .unwrap();
    let member = s["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "a")
        .unwrap();
    assert_eq!(member["crash_count"], 0, "{s}");
    assert_eq!(member["run_status"], "running", "{s}");

    std::fs::write(keys.join("release"), "").unwrap();
    let end = party_end(&c, &party, 60).await;
    assert_eq!(end["party"]["status"], "completed", "{end}");
}
