//! Parties and agents with real processes (small shell programs that call back through the
//! real CLI) and real git worktrees: the seed's verification steps, recovery, escalation,
//! subagents, and a kill -9 of the daemon in the middle of a party.

use std::path::Path;

use serde_json::{Value, json};
use troupe::client::Client;

use crate::support::{TestDaemon, git, launch, register, shares, wait_for};

/// Writes an executable shell script and returns its path.
fn script(dir: &Path, name: &str, body: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\nset -e\n{body}\n")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.display().to_string()
}

const COMPLETE: &str = r#"troupe call complete "{\"output\":\"done by $TROUPE_ROLE#$TROUPE_INSTANCE attempt $TROUPE_ATTEMPT\"}" >/dev/null"#;

async fn agent(c: &Client, name: &str, command: &str, extra: Value) {
    let mut def = json!({ "name": name, "command": [command] });
    for (k, v) in extra.as_object().unwrap() {
        def[k] = v.clone();
    }
    c.call("create_agent_definition", json!({ "definition": def }))
        .await
        .unwrap();
}

async fn party_def(c: &Client, def: Value) {
    c.call("create_party_definition", json!({ "definition": def }))
        .await
        .unwrap();
}

async fn status(c: &Client, party: &str) -> Value {
    c.call("get_party_status", json!({ "party_id": party }))
        .await
        .unwrap()
}

async fn wait_party(c: &Client, party: &str, want: &str) -> Value {
    wait_for(&format!("party {want}"), 30, || async {
        let s = status(c, party).await;
        (s["party"]["status"] == want).then_some(s)
    })
    .await
}

fn role<'a>(s: &'a Value, name: &str) -> &'a Value {
    s["roles"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["role"] == name)
        .unwrap()
}

fn members<'a>(s: &'a Value, name: &str) -> Vec<&'a Value> {
    s["members"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == name)
        .collect()
}

/// Every message the session has received so far (read or not).
async fn inbox(c: &Client, session: &str) -> Vec<String> {
    let r = c
        .call(
            "poll_messages",
            json!({ "session_id": session, "since": 0, "mark_read": false, "limit": 1000 }),
        )
        .await
        .unwrap();
    r["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_verification_crud_launch_parallelism_leader_status() {
    let daemon = TestDaemon::start();
    let c = daemon.client().await;
    let dir = daemon.dir.path();
    let project = daemon.project("repo");
    let barrier = daemon.shared().join("barrier");
    std::fs::create_dir_all(&barrier).unwrap();
    // Each developer marks that it started, then waits for the other: only parallel
    // developers get past this (sequential ones would time out and crash).
    let dev = script(
        dir,
        "dev.sh",
        &format!(
            "touch {b}/$TROUPE_INSTANCE\ni=0\nwhile [ ! -e {b}/0 ] || [ ! -e {b}/1 ]; do i=$((i+1)); [ $i -lt 500 ] || exit 9; sleep 0.02; done\n{COMPLETE}",
            b = barrier.display()
        ),
    );
    let qa = script(
        dir,
        "qa.sh",
        &format!(
            "[ -e {b}/0 ] && [ -e {b}/1 ]\n{COMPLETE}",
            b = barrier.display()
        ),
    );
    let done = script(dir, "done.sh", COMPLETE);
    // Both see the barrier (the host's /tmp is not in their box); the developers write it.
    let barrier_box = shares(json!({}), &[&barrier]);
    agent(&c, "dev", &dev, barrier_box.clone()).await;
    agent(&c, "qa", &qa, barrier_box).await;
    agent(&c, "lead", &done, json!({})).await;

    // 2. Definition CRUD: create → get → matches.
    let def = json!({
        "name": "two-step",
        "roles": {
            "leader": { "agent": "lead", "is_leader": true },
            "developer": { "agent": "dev", "count": 2 },
            "qa": { "agent": "qa" }
        },
        "flow": { "developer": ["leader"], "qa": ["developer"] }
    });
    party_def(&c, def.clone()).await;
    let got = c
        .call("get_party_definition", json!({ "name": "two-step" }))
        .await
        .unwrap();
    let stored = &got["definition"]["definition"];
    assert_eq!(stored["roles"]["developer"]["count"], 2);
    assert_eq!(stored["roles"]["leader"]["is_leader"], true);
    assert_eq!(stored["roles"]["qa"]["agent"], "qa");
    assert_eq!(got["definition"]["definition"]["flow"], def["flow"]);
    let all = c.call("list_party_definitions", json!({})).await.unwrap();
    let names: Vec<&str> = all["definitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"feature-development"),
        "the seed's template ships built in: {names:?}"
    );
    assert!(names.contains(&"two-step"));

    // 3 + 4. Launch: leader, then both developers at once, then QA after both.
    let task = c
        .call("create_task", json!({ "cwd": project, "title": "ship it" }))
        .await
        .unwrap();
    let launched = c
        .call(
            "launch_party",
            json!({ "name": "two-step", "cwd": project, "task_id": task["task_id"] }),
        )
        .await
        .unwrap();
    let party = launched["party_id"].as_str().unwrap().to_string();
    let s = wait_party(&c, &party, "completed").await;
    for m in s["members"].as_array().unwrap() {
        assert_eq!(m["status"], "completed", "{m}");
        assert_eq!(m["attempts"], 1, "{m}");
        assert_eq!(m["run_status"], "success");
        assert_eq!(m["session_status"], "ended");
    }
    assert_eq!(members(&s, "developer").len(), 2);
    assert_eq!(
        s["tasks"][0]["status"], "done",
        "the party's task is done when it completes"
    );
    // The timeline shows the order: QA spawned only after both developers completed.
    let events = c
        .call("list_events", json!({ "party_id": party, "limit": 1000 }))
        .await
        .unwrap();
    let trail: Vec<String> = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "member_spawning" || e["kind"] == "member_completed")
        .map(|e| {
            format!(
                "{} {}#{}",
                e["kind"].as_str().unwrap(),
                e["data"]["role"].as_str().unwrap(),
                e["data"]["index"]
            )
        })
        .collect();
    let qa_spawn = trail
        .iter()
        .position(|t| t == "member_spawning qa#0")
        .unwrap();
    for i in 0..2 {
        assert!(
            trail
                .iter()
                .position(|t| t == &format!("member_completed developer#{i}"))
                .unwrap()
                < qa_spawn,
            "{trail:?}"
        );
    }
    // 6. The leader (here: the status op) sees every member's progress and output.
    assert_eq!(role(&s, "developer")["completed"], 2);
    assert!(
        members(&s, "qa")[0]["output"]
            .as_str()
            .unwrap()
            .starts_with("done by qa#0")
    );
    let listed = c
        .call("list_parties", json!({ "cwd": project }))
        .await
        .unwrap();
    assert_eq!(listed["parties"][0]["party_id"], party.as_str());

    // The leader's reassign_task moves a party task between roles.
    let task = c
        .call(
            "create_task",
            json!({ "party_id": party, "title": "docs", "role_name": "developer" }),
        )
        .await
        .unwrap();
    let moved = c
        .call("reassign_task", json!({ "party_id": party, "task_id": task["task_id"], "from_role": "developer", "to_role": "qa" }))
        .await
        .unwrap();
    assert_eq!(moved["task"]["role_name"], "qa");
    let err = c
        .call("reassign_task", json!({ "party_id": party, "task_id": task["task_id"], "from_role": "developer", "to_role": "leader" }))
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("assigned to role qa, not developer"),
        "{err}"
    );
    let err = c
        .call("reassign_task", json!({ "party_id": party, "task_id": task["task_id"], "from_role": "qa", "to_role": "tester" }))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("has no role \"tester\""), "{err}");

    // Validation on write names what is wrong.
    let cyclic = json!({ "name": "loop", "roles": { "a": { "agent": "dev" }, "b": { "agent": "dev" } },
                         "flow": { "a": ["b"], "b": ["a"] } });
    let err = c
        .call("create_party_definition", json!({ "definition": cyclic }))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(-32602));
    assert!(
        err.to_string()
            .contains("the flow has a cycle: a -> b -> a"),
        "{err}"
    );
    let ghost = json!({ "name": "ghost", "roles": { "a": { "agent": "nobody" } } });
    let err = c
        .call("create_party_definition", json!({ "definition": ghost }))
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("role a uses agent definition \"nobody\", which does not exist"),
        "{err}"
    );
    let err = c
        .call("create_party_definition", json!({ "definition": def }))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), Some("conflict"));
    let err = c
        .call("launch_party", json!({ "name": "nope", "cwd": project }))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), Some("not_found"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_restart_pause_signal_override_and_cancel() {
    let daemon = TestDaemon::start();
    let c = daemon.client().await;
    let dir = daemon.dir.path();
    let project = daemon.project("repo");
    let hang = script(dir, "hang.sh", "exec sleep 600");
    let crash_once = script(
        dir,
        "crash_once.sh",
        &format!("[ \"$TROUPE_ATTEMPT\" != 1 ] || exit 1\n{COMPLETE}"),
    );
    let crash = script(dir, "crash.sh", "exit 7");
    agent(&c, "hang", &hang, json!({})).await;
    agent(&c, "flaky", &crash_once, json!({})).await;
    agent(&c, "broken", &crash, json!({})).await;
    party_def(
        &c,
        json!({
            "name": "recovering",
            "roles": {
                "leader": { "agent": "hang", "is_leader": true },
                "worker": { "agent": "flaky", "on_crash": "restart", "retry_attempts": 2 },
                "reviewer": { "agent": "broken", "on_crash": "pause" }
            },
            "flow": { "reviewer": ["worker"] },
            "recovery": { "notify": "leader" }
        }),
    )
    .await;
    let party = launch(&c, "recovering", &project).await;

    // 5. Restart re-spawns the worker; pause stops the reviewer and notifies the leader.
    let s = wait_for("reviewer paused", 30, || async {
        let s = status(&c, &party).await;
        (role(&s, "reviewer")["status"] == "paused").then_some(s)
    })
    .await;
    let worker = members(&s, "worker")[0];
    assert_eq!(
        (
            worker["status"].clone(),
            worker["attempts"].clone(),
            worker["crash_count"].clone()
        ),
        (json!("completed"), json!(2), json!(1))
    );
    let leader_session = members(&s, "leader")[0]["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    let heard = wait_for("leader notified of the pause", 10, || async {
        let m = inbox(&c, &leader_session).await;
        m.iter()
            .any(|t| t.contains("role reviewer is paused"))
            .then_some(m)
    })
    .await;
    assert!(
        heard
            .iter()
            .any(|t| t.contains("worker#0 crashed (exit status 1); restarting it (retry 1 of 2)")),
        "{heard:?}"
    );
    assert!(
        heard.iter().any(|t| t.contains("role worker completed")),
        "{heard:?}"
    );

    // Run-time override, then retry: now the reviewer restarts until its retries run out.
    let r = c
        .call(
            "override_recovery",
            json!({ "party_id": party, "role_name": "reviewer", "strategy": "restart" }),
        )
        .await
        .unwrap();
    assert_eq!(r["party"]["status"], "running");
    let s = status(&c, &party).await;
    assert_eq!(role(&s, "reviewer")["on_crash"], "restart");
    c.call(
        "signal_role",
        json!({ "party_id": party, "role_name": "reviewer", "signal": "retry" }),
    )
    .await
    .unwrap();
    let s = wait_for("reviewer paused again", 30, || async {
        let s = status(&c, &party).await;
        let r = members(&s, "reviewer")[0].clone();
        (r["status"] == "crashed" && r["attempts"] == 3).then_some(s)
    })
    .await;
    // Retry spawned attempt 2; it crashed (2 of 2 retries: restart), attempt 3 crashed (over).
    assert_eq!(members(&s, "reviewer")[0]["crash_count"], 3);
    let err = c
        .call(
            "signal_role",
            json!({ "party_id": party, "role_name": "worker", "signal": "proceed" }),
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("role worker is neither paused nor waiting for a signal"),
        "{err}"
    );
    c.call(
        "signal_role",
        json!({ "party_id": party, "role_name": "reviewer", "signal": "proceed" }),
    )
    .await
    .unwrap();
    let s = status(&c, &party).await;
    assert_eq!(members(&s, "reviewer")[0]["status"], "skipped");
    assert_eq!(s["party"]["status"], "running", "the leader still runs");

    // Cancel stops the leader's process and ends the party.
    c.call("cancel_party", json!({ "party_id": party }))
        .await
        .unwrap();
    let s = wait_for("leader run stopped", 15, || async {
        let s = status(&c, &party).await;
        (members(&s, "leader")[0]["run_status"] == "cancelled").then_some(s)
    })
    .await;
    assert_eq!(s["party"]["status"], "cancelled");
    assert_eq!(members(&s, "leader")[0]["status"], "cancelled");
    let err = c
        .call("cancel_party", json!({ "party_id": party }))
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("is cancelled; it no longer runs"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_and_abort_fail_the_party_and_escalation_notifies() {
    let daemon = TestDaemon::start();
    let c = daemon.client().await;
    let dir = daemon.dir.path();
    let project = daemon.project("repo");
    let hang = script(dir, "hang.sh", "exec sleep 600");
    let escalate = script(
        dir,
        "escalate.sh",
        &format!(
            "T=$(troupe call create_task \"{{\\\"party_id\\\":\\\"$TROUPE_PARTY_ID\\\",\\\"title\\\":\\\"API design\\\"}}\" | sed -n 's/.*\"task_id\": \"\\([^\"]*\\)\".*/\\1/p' | head -1)\n\
         troupe call escalate_task \"{{\\\"task_id\\\":\\\"$T\\\",\\\"reason\\\":\\\"needs a human decision\\\",\\\"session_id\\\":\\\"$TROUPE_SESSION_ID\\\"}}\" >/dev/null\n{COMPLETE}"
        ),
    );
    agent(&c, "sleeper", &hang, json!({})).await;
    agent(&c, "slowpoke", &hang, json!({ "timeout_secs": 0.5 })).await;
    agent(&c, "asker", &escalate, json!({})).await;
    party_def(
        &c,
        json!({
            "name": "doomed",
            "roles": {
                "lead": { "agent": "sleeper", "is_leader": true },
                "asker": { "agent": "asker" },
                "slow": { "agent": "slowpoke", "on_crash": "abort" }
            },
            "flow": { "slow": ["asker"] }
        }),
    )
    .await;
    let party = launch(&c, "doomed", &project).await;
    let s = wait_party(&c, &party, "failed").await;
    assert!(
        s["party"]["status_reason"]
            .as_str()
            .unwrap()
            .contains("slow#0 crashed (timeout)"),
        "{}",
        s["party"]
    );
    let slow = members(&s, "slow")[0];
    assert_eq!(slow["run_status"], "timeout");
    let lead = members(&s, "lead")[0];
    assert_eq!(lead["status"], "cancelled");
    wait_for("leader process stopped", 15, || async {
        let s = status(&c, &party).await;
        (members(&s, "lead")[0]["run_status"] == "cancelled").then_some(())
    })
    .await;

    // 7. HITL: the escalation reached the person (a durable notification) and the leader.
    assert_eq!(s["tasks"][0]["status"], "escalated");
    assert_eq!(s["tasks"][0]["escalation_reason"], "needs a human decision");
    let notes = c
        .call("list_notifications", json!({ "party_id": party }))
        .await
        .unwrap();
    let texts: Vec<&str> = notes["notifications"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["text"].as_str().unwrap())
        .collect();
    assert!(
        texts
            .iter()
            .any(|t| t.contains("needs you: needs a human decision")),
        "{texts:?}"
    );
    assert!(
        texts.iter().any(|t| t.contains("party doomed failed")),
        "{texts:?}"
    );
    let lead_session = lead["session_id"].as_str().unwrap();
    let heard = inbox(&c, lead_session).await;
    assert!(
        heard
            .iter()
            .any(|t| t.contains("was escalated: needs a human decision")),
        "{heard:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worktrees_per_member_mirrors_and_safe_cleanup() {
    let daemon = TestDaemon::start();
    let c = daemon.client().await;
    let dir = daemon.dir.path();
    let repo = dir.join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    std::fs::write(repo.join("README"), "hello\n").unwrap();
    troupe_worktree::init_repo(&repo, "init").unwrap();
    let work = script(
        dir,
        "work.sh",
        &format!(
            "echo \"from $TROUPE_ROLE#$TROUPE_INSTANCE\" > \"work-$TROUPE_INSTANCE.txt\"\n\
         git add \"work-$TROUPE_INSTANCE.txt\"\n\
         git -c user.name=t -c user.email=t@example.com commit -qm work\n{COMPLETE}"
        ),
    );
    agent(&c, "coder", &work, json!({ "isolation": "worktree" })).await;
    agent(
        &c,
        "cloner",
        &script(dir, "look.sh", &format!("test -e README\n{COMPLETE}")),
        json!({ "isolation": "clone" }),
    )
    .await;
    party_def(
        &c,
        json!({
            "name": "iso",
            "roles": { "dev": { "agent": "coder", "count": 2 }, "qa": { "agent": "cloner" } },
            "flow": { "qa": ["dev"] }
        }),
    )
    .await;
    let party = launch(&c, "iso", &repo.display().to_string()).await;
    let s = wait_party(&c, &party, "completed").await;

    let label = format!("iso-{}", &party[..8]);
    // Sandboxed, a worktree is carried out as a borrowing clone.
    let base = crate::support::worktree_base(&c).await;
    for (i, m) in members(&s, "dev").iter().enumerate() {
        let workdir = Path::new(m["workdir"].as_str().unwrap());
        assert_eq!(
            workdir,
            daemon
                .layout
                .data_dir
                .join(format!("{base}/{label}/dev-{i}"))
        );
        assert_eq!(m["branch"], format!("troupe/{label}/dev-{i}"));
        assert!(workdir.join(format!("work-{i}.txt")).exists());
        assert!(
            !repo.join(format!("work-{i}.txt")).exists(),
            "work stays in the worktree"
        );
        let state: Value = serde_json::from_str(
            &std::fs::read_to_string(workdir.join(".troupe/agent-state.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(state["status"], "success");
        assert_eq!(state["role"], "dev");
    }
    let qa = members(&s, "qa")[0];
    assert!(qa["workdir"].as_str().unwrap().contains("/clones/"), "{qa}");
    if base == "clones" {
        // Repositories of their own: none is a worktree of the project's repository.
        let listed = git(&repo, &["worktree", "list", "--porcelain"]);
        assert_eq!(listed.matches("worktree ").count(), 1, "{listed}");
    }
    // The mirror is rewritten at most once a second after runs end: wait for it.
    let mirror_path = repo.join(".troupe/agents.jsonl");
    let mirror = wait_for("the agents mirror to list the 3 isolated runs", 30, || {
        let text = std::fs::read_to_string(&mirror_path).unwrap_or_default();
        let ended = text
            .lines()
            .filter(|l| serde_json::from_str::<Value>(l).unwrap()["status"] == "success")
            .count();
        std::future::ready((ended == 3).then_some(text))
    })
    .await;
    assert_eq!(
        mirror.lines().count(),
        3,
        "one line per isolated run:\n{mirror}"
    );

    // The developers' branches hold unmerged commits: cleanup keeps them unless forced.
    let kept = c
        .call("cleanup_party", json!({ "party_id": party }))
        .await
        .unwrap();
    assert_eq!(kept["kept"].as_array().unwrap().len(), 2, "{kept}");
    assert!(
        kept["kept"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("not merged"),
        "{kept}"
    );
    assert_eq!(
        kept["removed"].as_array().unwrap().len(),
        1,
        "the clone had nothing new: {kept}"
    );
    let forced = c
        .call("cleanup_party", json!({ "party_id": party, "force": true }))
        .await
        .unwrap();
    assert_eq!(forced["removed"].as_array().unwrap().len(), 2, "{forced}");
    assert!(
        !daemon
            .layout
            .data_dir
            .join(format!("{base}/{label}/dev-0"))
            .exists()
    );

    // Isolation needs a git repository.
    let plain = daemon.dir.path().join("plain");
    std::fs::create_dir_all(&plain).unwrap();
    let err = c
        .call(
            "launch_party",
            json!({ "name": "iso", "cwd": plain.display().to_string() }),
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("is not in a git repository"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subagents_depth_limit_complete_schema_timeout_and_cancel() {
    let daemon = TestDaemon::start();
    let c = daemon.client().await;
    let dir = daemon.dir.path();
    let project = daemon.project("repo");
    let me = register(&c, "human", &project, None).await;
    let reviewer = script(
        dir,
        "review.sh",
        r#"troupe call complete '{"output":"looks good","artifacts":{"issues_found":"none"}}' 2>/dev/null && exit 0
troupe call complete '{"output":"looks good","artifacts":{"issues_found":0},"files_modified":["a.rs"]}' >/dev/null"#,
    );
    agent(
        &c,
        "reviewer",
        &reviewer,
        json!({ "workflow": { "completion_schema": { "issues_found": "integer" } } }),
    )
    .await;
    // A subagent that tries to start its own subagent and reports what happened.
    let nester = script(
        dir,
        "nest.sh",
        r#"if troupe call start_agent "{\"agent\":\"reviewer\",\"prompt\":\"go\",\"parent_session_id\":\"$TROUPE_SESSION_ID\"}" >/dev/null 2>err.txt; then R=started; else R="refused: $(cat err.txt | tr -d '"\n')"; fi
rm -f err.txt
troupe call complete "{\"output\":\"$R\"}" >/dev/null"#,
    );
    agent(&c, "nester", &nester, json!({})).await;
    agent(
        &c,
        "deep-nester",
        &nester,
        json!({ "allow_nested_agents": true, "max_agent_depth": 2 }),
    )
    .await;
    agent(
        &c,
        "sleepy",
        &script(dir, "sleep.sh", "exec sleep 600"),
        json!({}),
    )
    .await;
    agent(&c, "crasher", &script(dir, "crash.sh", "exit 4"), json!({})).await;

    let start = |agent: &'static str, extra: Value| {
        let (c, me) = (&c, me.clone());
        async move {
            let mut p = json!({ "agent": agent, "prompt": "please", "parent_session_id": me });
            for (k, v) in extra.as_object().unwrap() {
                p[k] = v.clone();
            }
            c.call("start_agent", p).await.unwrap()
        }
    };
    let finished = |run: String| {
        let c = &c;
        async move {
            wait_for("run end", 30, || {
                let run = run.clone();
                async move {
                    let r = c
                        .call("get_agent_result", json!({ "run_id": run }))
                        .await
                        .unwrap();
                    (!matches!(r["run"]["status"].as_str(), Some("pending" | "running")))
                        .then_some(r["run"].clone())
                }
            })
            .await
        }
    };

    // A schema-violating complete is refused (the agent then completes properly).
    let r = start("reviewer", json!({})).await;
    let child = c
        .call("get_session", json!({ "session_id": r["session_id"] }))
        .await
        .unwrap();
    assert_eq!(child["session"]["agent_depth"], 1);
    assert_eq!(child["session"]["parent_session_id"], me.as_str());
    let run = finished(r["run_id"].as_str().unwrap().into()).await;
    assert_eq!(run["status"], "success");
    assert_eq!(run["result"]["artifacts"]["issues_found"], 0);
    assert_eq!(run["result"]["files_modified"], json!(["a.rs"]));

    // Depth: by default a subagent cannot start subagents; with nesting allowed it can.
    let run = finished(
        start("nester", json!({})).await["run_id"]
            .as_str()
            .unwrap()
            .into(),
    )
    .await;
    assert!(
        run["result"]["output"]
            .as_str()
            .unwrap()
            .contains("refused"),
        "{run}"
    );
    assert!(
        run["result"]["output"].as_str().unwrap().contains("depth"),
        "{run}"
    );
    let run = finished(
        start("deep-nester", json!({})).await["run_id"]
            .as_str()
            .unwrap()
            .into(),
    )
    .await;
    assert_eq!(run["result"]["output"], "started", "{run}");

    // Timeout, crash and cancel end runs with their own statuses; the parent hears of each.
    let run = finished(
        start("sleepy", json!({ "timeout": 0.3 })).await["run_id"]
            .as_str()
            .unwrap()
            .into(),
    )
    .await;
    assert_eq!(run["status"], "timeout");
    let run = finished(
        start("crasher", json!({})).await["run_id"]
            .as_str()
            .unwrap()
            .into(),
    )
    .await;
    assert_eq!(run["status"], "crashed");
    assert_eq!(run["error"], "exit status 4");
    let sleeping = start("sleepy", json!({})).await;
    let id = sleeping["run_id"].as_str().unwrap().to_string();
    let r = c
        .call("cancel_agent", json!({ "run_id": id }))
        .await
        .unwrap();
    assert_eq!(r["run"]["status"], "cancelled");
    let err = c
        .call("cancel_agent", json!({ "run_id": id }))
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("already ended as cancelled"),
        "{err}"
    );
    let heard = wait_for("parent told", 10, || async {
        let m = inbox(&c, &me).await;
        (m.iter().any(|t| t.contains("ended timeout"))
            && m.iter().any(|t| t.contains("ended crashed")))
        .then_some(m)
    })
    .await;
    assert!(
        heard
            .iter()
            .any(|t| t.contains("agent reviewer") && t.contains("finished success: looks good")),
        "{heard:?}"
    );

    let mine = c
        .call("list_agents", json!({ "parent_session_id": me }))
        .await
        .unwrap();
    // reviewer, nester, deep-nester, sleepy ×2, crasher (the grandchild's parent is deep-nester).
    assert_eq!(mine["runs"].as_array().unwrap().len(), 6);
    let err = c
        .call("complete", json!({ "session_id": me, "output": "x" }))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("is not running an agent"), "{err}");
    let err = c
        .call(
            "create_agent_definition",
            json!({ "definition": { "name": "bad", "runner": "acp:" } }),
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("must name an ACP agent"), "{err}");
    let err = c
        .call(
            "create_agent_definition",
            json!({ "definition": { "name": "bad", "runner": "acp:claude", "acp": { "idle_secs": -1 } } }),
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("acp.idle_secs"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_mid_party_resumes_without_rerunning_or_double_spawning() {
    let mut daemon = TestDaemon::start();
    let dir = daemon.dir.path().to_path_buf();
    let project = daemon.project("repo");
    let go = daemon.shared().join("go");
    let die = daemon.shared().join("die");
    // The files the test touches while the daemon is down, seen in the members' boxes.
    let sees_shared = shares(json!({}), &[&daemon.shared()]);
    let waiter = script(
        &dir,
        "wait.sh",
        &format!(
            "while [ ! -e {go} ]; do sleep 0.02; done\n{COMPLETE}",
            go = go.display()
        ),
    );
    let dier = script(
        &dir,
        "die.sh",
        &format!(
            "[ \"$TROUPE_ATTEMPT\" = 1 ] || {{ {COMPLETE}; exit 0; }}\nwhile [ ! -e {die} ]; do sleep 0.02; done\nexit 1",
            die = die.display()
        ),
    );
    let done = script(&dir, "done.sh", COMPLETE);
    {
        let c = daemon.client().await;
        agent(&c, "quick", &done, json!({})).await;
        agent(&c, "waiter", &waiter, sees_shared.clone()).await;
        agent(&c, "dier", &dier, sees_shared).await;
        party_def(
            &c,
            json!({
                "name": "durable",
                "roles": {
                    "a": { "agent": "quick" },
                    "b": { "agent": "waiter" },
                    "d": { "agent": "dier", "on_crash": "restart" },
                    "c": { "agent": "quick", "count": 2 }
                },
                "flow": { "b": ["a"], "c": ["b", "d"] }
            }),
        )
        .await;
    }
    let c = daemon.client().await;
    let party = launch(&c, "durable", &project).await;
    let s = wait_for("b and d running", 30, || async {
        let s = status(&c, &party).await;
        (members(&s, "b")[0]["run_status"] == "running"
            && members(&s, "d")[0]["run_status"] == "running")
            .then_some(s)
    })
    .await;
    let d_run = c
        .call(
            "get_agent_result",
            json!({ "run_id": members(&s, "d")[0]["run_id"] }),
        )
        .await
        .unwrap();
    let d_pid = d_run["run"]["pid"].as_i64().unwrap();
    drop(c);

    daemon.kill9();
    // While the daemon is down, d's process dies; b's keeps running.
    std::fs::write(&die, "").unwrap();
    wait_for("d's process to exit", 10, || async {
        (!Path::new(&format!("/proc/{d_pid}")).exists()
            || std::fs::read_to_string(format!("/proc/{d_pid}/stat"))
                .is_ok_and(|s| s.contains(") Z")))
        .then_some(())
    })
    .await;
    daemon.spawn();
    let c = daemon.client().await;
    // b was adopted (still running); d was found dead and restarted.
    let s = wait_for("d restarted", 30, || async {
        let s = status(&c, &party).await;
        (members(&s, "d")[0]["status"] == "completed").then_some(s)
    })
    .await;
    let d = members(&s, "d")[0];
    assert_eq!(
        (d["attempts"].clone(), d["crash_count"].clone()),
        (json!(2), json!(1)),
        "{d}"
    );
    assert_eq!(
        members(&s, "b")[0]["run_status"],
        "running",
        "b's process was adopted, not respawned"
    );
    std::fs::write(&go, "").unwrap();
    let s = wait_party(&c, &party, "completed").await;

    // Nothing that completed ran again; no member was spawned twice.
    let runs = c
        .call("list_agents", json!({ "party_id": party }))
        .await
        .unwrap();
    let mut per_member: std::collections::BTreeMap<String, usize> = Default::default();
    for r in runs["runs"].as_array().unwrap() {
        *per_member
            .entry(format!(
                "{}#{}",
                r["role_name"].as_str().unwrap(),
                r["instance_index"]
            ))
            .or_default() += 1;
    }
    let expected: std::collections::BTreeMap<String, usize> =
        [("a#0", 1), ("b#0", 1), ("c#0", 1), ("c#1", 1), ("d#0", 2)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
    assert_eq!(per_member, expected);
    for m in s["members"].as_array().unwrap() {
        assert_eq!(m["status"], "completed", "{m}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_party_and_approvals_commands() {
    let daemon = TestDaemon::start();
    let c = daemon.client().await;
    let project = daemon.project("repo");
    agent(
        &c,
        "quick",
        &script(daemon.dir.path(), "done.sh", COMPLETE),
        json!({}),
    )
    .await;
    party_def(
        &c,
        json!({ "name": "solo", "roles": { "only": { "agent": "quick" } } }),
    )
    .await;
    let cwd = Some(Path::new(&project));
    let out = crate::support::cli(
        &daemon.layout,
        &["party", "launch", "solo", "Fix", "the", "off-by-one"],
        cwd,
    );
    assert!(out.status.success(), "{}", crate::support::stderr(&out));
    let text = crate::support::stdout(&out);
    assert!(
        text.starts_with("party ") && text.contains(" solo — "),
        "{text}"
    );
    let party = text.split_whitespace().nth(1).unwrap().to_string();
    wait_party(&c, &party, "completed").await;
    // The words after the name are the party's task, in every member's prompt.
    let runs = c
        .call("list_agents", json!({ "party_id": party }))
        .await
        .unwrap();
    let prompt = runs["runs"][0]["prompt"].as_str().unwrap();
    assert!(
        prompt.contains(r#"Inputs: {"task":"Fix the off-by-one"}"#),
        "{prompt}"
    );
    let listed = crate::support::stdout(&crate::support::cli(
        &daemon.layout,
        &["party", "list"],
        cwd,
    ));
    assert!(
        listed.contains(&party) && listed.contains("completed"),
        "{listed}"
    );
    let status = crate::support::stdout(&crate::support::cli(
        &daemon.layout,
        &["party", "status", &party],
        cwd,
    ));
    assert!(
        status.contains("only") && status.contains("1/1 done"),
        "{status}"
    );

    let worker = register(&c, "codex", &project, None).await;
    let asked = c
        .call("request_permission", json!({ "session_id": worker, "tool_name": "shell", "input": { "command": "rm -rf build" }, "wait_ms": 0 }))
        .await
        .unwrap();
    let id = asked["approval_id"].as_str().unwrap();
    let listed = crate::support::stdout(&crate::support::cli(
        &daemon.layout,
        &["approvals", "list"],
        cwd,
    ));
    assert!(
        listed.contains(id) && listed.contains("rm -rf build"),
        "{listed}"
    );
    let out = crate::support::cli(&daemon.layout, &["approvals", "decide", id, "deny"], cwd);
    assert_eq!(
        crate::support::stdout(&out).trim(),
        "denied",
        "{}",
        crate::support::stderr(&out)
    );
    let out = crate::support::cli(&daemon.layout, &["approvals", "decide", id, "approve"], cwd);
    assert!(!out.status.success());
    assert!(
        crate::support::stderr(&out).contains("is already denied"),
        "{}",
        crate::support::stderr(&out)
    );
}

/// A live leader (seed 000): `developer` waits on `leader:signal`, so it starts when the running
/// leader signals it, and the leader, still running, hears every role's completion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_leader_signals_a_phase_and_hears_every_completion() {
    let daemon = TestDaemon::start();
    let c = daemon.client().await;
    let dir = daemon.dir.path();
    let leader = script(
        dir,
        "leader.sh",
        r#"troupe call signal_role "{\"party_id\":\"$TROUPE_PARTY_ID\",\"role_name\":\"developer\",\"signal\":\"proceed\"}" >/dev/null
heard=""
until echo "$heard" | grep -q "role qa completed"; do
  heard="$heard $(troupe call poll_messages '{"wait_ms":5000}')"
done
troupe call complete '{"output":"heard developer and qa"}' >/dev/null"#,
    );
    agent(&c, "live-leader", &leader, json!({})).await;
    agent(&c, "worker", &script(dir, "worker.sh", COMPLETE), json!({})).await;
    party_def(
        &c,
        json!({
            "name": "live",
            "roles": {
                "leader": { "agent": "live-leader", "is_leader": true },
                "developer": { "agent": "worker", "count": 2 },
                "qa": { "agent": "worker" }
            },
            "flow": { "developer": ["leader:signal"], "qa": ["developer"] }
        }),
    )
    .await;
    let project = daemon.project("repo");
    let party = crate::support::launch(&c, "live", &project).await;
    let s = crate::support::party_end(&c, &party, 60).await;
    assert_eq!(s["party"]["status"], "completed", "{s}");
    let runs = c
        .call("list_agents", json!({ "party_id": party }))
        .await
        .unwrap();
    let runs = runs["runs"].as_array().unwrap();
    let of =
        |role: &str| -> Vec<&Value> { runs.iter().filter(|r| r["role_name"] == role).collect() };
    let leader_run = of("leader")[0];
    assert_eq!(leader_run["result"]["output"], "heard developer and qa");
    // The developers started while the leader was still running.
    for dev in of("developer") {
        assert!(
            dev["started_at"].as_str().unwrap() < leader_run["completed_at"].as_str().unwrap(),
            "{dev} vs {leader_run}"
        );
    }
    assert_eq!(of("leader").len(), 1, "the leader ran once");
}

/// A signal's release survives a kill -9: `developer` waits on `leader:signal` and on `prep`;
/// the leader signals, the daemon is killed while `prep` runs, and after the restart the
/// developers start when `prep` completes, the leader still running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_release_survives_a_kill_9() {
    let mut daemon = TestDaemon::start();
    let c = daemon.client().await;
    let dir = daemon.dir.path().to_path_buf();
    let go = daemon.shared().join("go");
    let leader = script(
        &dir,
        "leader.sh",
        r#"troupe call signal_role "{\"party_id\":\"$TROUPE_PARTY_ID\",\"role_name\":\"developer\",\"signal\":\"proceed\"}" >/dev/null
heard=""
until echo "$heard" | grep -q "role developer completed"; do
  heard="$heard $(troupe call poll_messages '{"wait_ms":5000}' 2>/dev/null || true)"
done
troupe call complete '{"output":"developers done"}' >/dev/null"#,
    );
    let prep = script(
        &dir,
        "prep.sh",
        &format!(
            "while [ ! -e {} ]; do sleep 0.02; done\n{COMPLETE}",
            go.display()
        ),
    );
    agent(&c, "signal-leader", &leader, json!({})).await;
    // `prep` waits for a file the test writes: its box is given the shared dir to see it.
    agent(&c, "prep", &prep, shares(json!({}), &[&daemon.shared()])).await;
    agent(
        &c,
        "worker",
        &script(&dir, "worker.sh", COMPLETE),
        json!({}),
    )
    .await;
    party_def(
        &c,
        json!({
            "name": "live-restart",
            "roles": {
                "leader": { "agent": "signal-leader", "is_leader": true },
                "prep": { "agent": "prep" },
                "developer": { "agent": "worker", "count": 2 }
            },
            "flow": { "developer": ["leader:signal", "prep"] }
        }),
    )
    .await;
    let project = daemon.project("repo");
    let party = crate::support::launch(&c, "live-restart", &project).await;
    crate::support::wait_for("the leader's signal", 30, || async {
        let s = c
            .call("get_party_status", json!({ "party_id": party }))
            .await
            .unwrap();
        (s["party"]["released"] == json!(["developer"])).then_some(())
    })
    .await;
    drop(c);
    daemon.kill9();
    daemon.spawn();
    let c = daemon.client().await;
    std::fs::write(&go, "").unwrap();
    let s = crate::support::party_end(&c, &party, 60).await;
    assert_eq!(s["party"]["status"], "completed", "{s}");
    let runs = c
        .call("list_agents", json!({ "party_id": party }))
        .await
        .unwrap();
    let leader_runs: Vec<&Value> = runs["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["role_name"] == "leader")
        .collect();
    assert_eq!(
        leader_runs.len(),
        1,
        "the leader was adopted, not rerun: {runs}"
    );
    assert_eq!(leader_runs[0]["result"]["output"], "developers done");
}

/// A clone member's commit, merged nowhere, brought over to the project's repository by a
/// review and then left behind by the clone (its branch reset): only the project's copy of the
/// branch holds it. Cleanup keeps the clone and that copy and names the commit; forced, it says
/// which branch it deleted and the tip it lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cleanup_keeps_a_clones_commit_that_only_the_projects_copy_holds() {
    let daemon = TestDaemon::start();
    let c = daemon.client().await;
    let dir = daemon.dir.path();
    let repo = crate::support::repo(&dir.join("repo"));
    let work = script(
        dir,
        "work.sh",
        &format!(
            "echo work > work.txt\ngit add work.txt\n\
             git -c user.name=t -c user.email=t@example.com commit -qm work\n{COMPLETE}"
        ),
    );
    agent(&c, "cloner", &work, json!({ "isolation": "clone" })).await;
    party_def(
        &c,
        json!({ "name": "clones", "roles": { "dev": { "agent": "cloner" } } }),
    )
    .await;
    let party = launch(&c, "clones", &repo).await;
    let s = wait_party(&c, &party, "completed").await;
    let dev = members(&s, "dev")[0];
    let (clone, branch) = (
        dev["workdir"].as_str().unwrap().to_string(),
        dev["branch"].as_str().unwrap().to_string(),
    );
    let work_tip = git(&clone, &["rev-parse", "HEAD"]);
    // A review brings the branch over to the project's repository.
    c.call(
        "get_member_diff",
        json!({ "party_id": party, "role": "dev" }),
    )
    .await
    .unwrap();
    assert_eq!(git(&repo, &["rev-parse", &branch]), work_tip);
    // The clone moves its branch back: the copy alone holds the commit now.
    git(&clone, &["reset", "-q", "--hard", "HEAD~1"]);

    let r = c
        .call("cleanup_party", json!({ "party_id": party }))
        .await
        .unwrap();
    assert_eq!(r["removed"], json!([]), "{r}");
    assert_eq!(r["deleted"], json!([]), "{r}");
    let kept = &r["kept"][0];
    assert_eq!(kept["workdir"], clone.as_str(), "{r}");
    assert!(
        kept["reason"].as_str().unwrap().contains("not merged"),
        "{r}"
    );
    let unmerged: Vec<(&str, &str, bool)> = kept["unmerged"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| {
            (
                u["branch"].as_str().unwrap(),
                u["tip"].as_str().unwrap(),
                u["unmerged"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        unmerged,
        [(branch.as_str(), work_tip.as_str(), true)],
        "{r}"
    );
    assert!(Path::new(&clone).exists());
    assert_eq!(git(&repo, &["rev-parse", &branch]), work_tip);

    let forced = c
        .call("cleanup_party", json!({ "party_id": party, "force": true }))
        .await
        .unwrap();
    assert_eq!(forced["removed"], json!([clone]), "{forced}");
    let deleted = &forced["deleted"];
    assert_eq!(deleted.as_array().unwrap().len(), 1, "{forced}");
    assert_eq!(
        (
            &deleted[0]["branch"],
            &deleted[0]["tip"],
            &deleted[0]["unmerged"]
        ),
        (&json!(branch), &json!(work_tip), &json!(true)),
        "{forced}"
    );
    assert!(!Path::new(&clone).exists());
    let gone = std::process::Command::new("git")
        .args(["rev-parse", "--verify", "-q", &branch])
        .current_dir(&repo)
        .output()
        .unwrap();
    assert!(!gone.status.success(), "the copy was deleted");
}
