//! The key operations' results as snapshots (`expect-test`), ids, times, paths and process
//! numbers normalised: a change to what an operation answers is a visible diff in review, not a
//! silent one. A party of a leader and two developers (real processes that call `complete`),
//! its status, the listing, a member's run, a permission request and its decision.

use std::path::Path;

use expect_test::expect;
use serde_json::{Map, Value, json};

use crate::support::{TestDaemon, executable, launch, party_end, register};

/// `v` with what differs between runs replaced by a placeholder, keys sorted, pretty-printed.
fn normalised(v: &Value, dir: &Path) -> String {
    fn walk(key: &str, v: &Value, dir: &str) -> Value {
        match v {
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, v)| (k.clone(), walk(k, v, dir)))
                    .collect::<Map<_, _>>(),
            ),
            Value::Array(items) => Value::Array(items.iter().map(|v| walk(key, v, dir)).collect()),
            Value::Null => Value::Null,
            Value::Number(_)
                if key.ends_with("_ms") || matches!(key, "pid" | "pgid" | "pid_start") =>
            {
                json!(format!("<{key}>"))
            }
            Value::String(_) if key.ends_with("_at") || key == "since" => json!("<time>"),
            Value::String(s) => json!(ids_out(&s.replace(dir, "<dir>"))),
            other => other.clone(),
        }
    }
    /// `s` with every id (8-4-4-4-12 hex digits, as the store makes them) written `<id>`.
    fn ids_out(s: &str) -> String {
        let is_id = |w: &[u8]| {
            w.len() == 36
                && w.iter().enumerate().all(|(i, b)| {
                    if matches!(i, 8 | 13 | 18 | 23) {
                        *b == b'-'
                    } else {
                        b.is_ascii_hexdigit()
                    }
                })
        };
        let bytes = s.as_bytes();
        let mut out = String::with_capacity(s.len());
        let mut i = 0;
        while i < bytes.len() {
            if i + 36 <= bytes.len() && is_id(&bytes[i..i + 36]) {
                out.push_str("<id>");
                i += 36;
            } else {
                let ch = s[i..].chars().next().unwrap();
                out.push(ch);
                i += ch.len_utf8();
            }
        }
        out
    }
    let dir = dir.display().to_string();
    serde_json::to_string_pretty(&walk("", v, &dir)).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partys_operations_answer_as_they_always_have() {
    let d = TestDaemon::start();
    let c = d.client().await;
    let dir = d.dir.path().to_path_buf();
    let project = d.project("repo");
    let worker = executable(
        &dir,
        "worker.sh",
        r#"#!/bin/sh
troupe call complete "{\"output\":\"done by $TROUPE_ROLE\",\"files_modified\":[\"a.txt\"]}" >/dev/null
"#,
    );
    c.call(
        "create_agent_definition",
        json!({ "definition": { "name": "worker", "command": [worker] } }),
    )
    .await
    .unwrap();
    c.call(
        "create_party_definition",
        json!({ "definition": {
            "name": "snap",
            "roles": {
                "lead": { "agent": "worker", "is_leader": true },
                "dev": { "agent": "worker", "count": 2 }
            },
            "flow": { "dev": ["lead"] }
        } }),
    )
    .await
    .unwrap();
    let party = launch(&c, "snap", &project).await;
    let status = party_end(&c, &party, 60).await;
    expect![[r#"
        {
          "party": {
            "party_id": "<id>",
            "name": "snap",
            "status": "completed",
            "status_reason": "every role completed",
            "project_id": "<id>",
            "repo_root": "<dir>/repo",
            "task_id": null,
            "created_at": "<time>",
            "completed_at": "<time>",
            "released": [],
            "inputs": null
          },
          "usage": {
            "input_tokens": 0,
            "output_tokens": 0,
            "cost_usd": 0.0
          },
          "roles": [
            {
              "role": "dev",
              "agent": "worker",
              "count": 2,
              "is_leader": false,
              "depends_on": [
                "lead"
              ],
              "on_crash": "pause",
              "paused": false,
              "status": "completed",
              "completed": 2,
              "running": 0,
              "crashes": 0
            },
            {
              "role": "lead",
              "agent": "worker",
              "count": 1,
              "is_leader": true,
              "depends_on": [],
              "on_crash": "pause",
              "paused": false,
              "status": "completed",
              "completed": 1,
              "running": 0,
              "crashes": 0
            }
          ],
          "members": [
            {
              "role": "dev",
              "index": 0,
              "status": "completed",
              "crash_count": 0,
              "attempts": 1,
              "session_id": "<id>",
              "session_status": "ended",
              "run_id": "<id>",
              "run_status": "success",
              "output": "done by dev",
              "workdir": "<dir>/repo",
              "branch": null,
              "started_at_ms": "<started_at_ms>",
              "finished_at_ms": "<finished_at_ms>"
            },
            {
              "role": "dev",
              "index": 1,
              "status": "completed",
              "crash_count": 0,
              "attempts": 1,
              "session_id": "<id>",
              "session_status": "ended",
              "run_id": "<id>",
              "run_status": "success",
              "output": "done by dev",
              "workdir": "<dir>/repo",
              "branch": null,
              "started_at_ms": "<started_at_ms>",
              "finished_at_ms": "<finished_at_ms>"
            },
            {
              "role": "lead",
              "index": 0,
              "status": "completed",
              "crash_count": 0,
              "attempts": 1,
              "session_id": "<id>",
              "session_status": "ended",
              "run_id": "<id>",
              "run_status": "success",
              "output": "done by lead",
              "workdir": "<dir>/repo",
              "branch": null,
              "started_at_ms": "<started_at_ms>",
              "finished_at_ms": "<finished_at_ms>"
            }
          ],
          "tasks": [],
          "collab_state": "completed"
        }"#]]
    .assert_eq(&normalised(&status, &dir));

    let listed = c
        .call("list_parties", json!({ "cwd": project }))
        .await
        .unwrap();
    expect![[r#"
        {
          "parties": [
            {
              "party_id": "<id>",
              "name": "snap",
              "status": "completed",
              "status_reason": "every role completed",
              "project_id": "<id>",
              "repo_root": "<dir>/repo",
              "task_id": null,
              "created_at": "<time>",
              "completed_at": "<time>",
              "released": [],
              "inputs": null
            }
          ]
        }"#]]
    .assert_eq(&normalised(&listed, &dir));

    let run = status["members"][1]["run_id"].as_str().unwrap();
    let result = c
        .call("get_agent_result", json!({ "run_id": run }))
        .await
        .unwrap();
    expect![[r#"
        {
          "run": {
            "run_id": "<id>",
            "agent_name": "worker",
            "definition": {
              "name": "worker",
              "runner": "process",
              "command": [
                "<dir>/worker.sh"
              ],
              "workflow": {},
              "isolation": "none",
              "allow_nested_agents": false
            },
            "project_id": "<id>",
            "parent_session_id": null,
            "session_id": "<id>",
            "party_id": "<id>",
            "role_name": "dev",
            "instance_index": 1,
            "attempt": 1,
            "prompt": "Call Troupe's tools from your shell: `troupe call <tool> '<JSON params>'` (for example `troupe call get_plan '{\"party_id\": \"…\"}'`); it prints the result as JSON.\n\n# Every member\n\nYou are dev#1, the dev of a Troupe party (`party_id` <id>). The team: dev (developer), lead (leader).\nTroupe keeps the team's plan, steps, reviews and decisions. Act on them only through its tools; your\nown session is filled in for you.\n\n- Read your messages with `poll_messages` (`wait_ms` to wait for one) after each thing you finish:\n  teammates, the leader and Troupe write there.\n- `get_plan` shows the committed plan: its steps, their owners and where each is.\n- When the options diverge (two designs, two libraries), do not pick alone: `propose_decision`\n  (`topic`, `options`, `evidence`). When a decision names your role, `vote` (`decision_id`,\n  `option`, `rationale`). A committed decision is written down as an ADR.\n- When only the person can say (an unclear requirement, something risky or irreversible), ask with\n  `ask_person` (`question`, `choices`) instead of guessing. Approvals are the person's: never try to\n  decide one.\n- Work only in your own checkout. Commit your work there with git before you finish.\n- End with `complete`: `output` says what you did and what is left; `status` is success, partial or\n  blocked.\n\n# A step owner\n\nYou build the steps the plan gives your role.\n\n1. Wait for a committed plan (`get_plan`; `poll_messages` with `wait_ms`). Review the draft first if\n   asked: `review_plan` with `verdict` approve or request_changes and your `comments`.\n2. For each step you own whose `depends_on` are done: `start_step`, do the work in your checkout,\n   run the project's tests, commit, then `submit_step` with a `summary` of what changed.\n3. A reviewer accepts or reopens it. Reopened: read the reason, fix, `start_step`, `submit_step`.\n4. A step another role should do: `handoff_step` (`to_role`, `note`). Stuck on a choice:\n   `block_step` (`blocker`, `options`) raises a decision.\n5. When your steps are done (or handed off), `complete`.\n\n\n## The party now\nNo plan is committed yet.\n",
            "task_id": null,
            "status": "success",
            "result": {
              "output": "done by dev",
              "status": "success",
              "artifacts": {},
              "files_modified": [
                "a.txt"
              ],
              "next_steps": []
            },
            "error": null,
            "pid": "<pid>",
            "pid_start": "<pid_start>",
            "pgid": "<pgid>",
            "trigger": null,
            "flow_root": null,
            "flow_step": null,
            "workdir": "<dir>/repo",
            "timeout_ms": null,
            "created_at": "<time>",
            "started_at": "<time>",
            "completed_at": "<time>"
          },
          "usage": {
            "input_tokens": 0,
            "output_tokens": 0,
            "cost_usd": 0.0
          }
        }"#]].assert_eq(&normalised(&result, &dir));

    // A permission request of a session, and the person's decision.
    let session = register(&c, "claude", &project, None).await;
    let asked = c
        .call(
            "request_permission",
            json!({ "session_id": session, "tool_name": "write_file",
                    "input": { "path": "a.txt" }, "file_path": "a.txt", "wait_ms": 0 }),
        )
        .await
        .unwrap();
    expect![[r#"
        {
          "approval_id": "<id>",
          "status": "pending",
          "decision": null,
          "reason": null
        }"#]]
    .assert_eq(&normalised(&asked, &dir));
    let decided = c
        .call(
            "decide_approval",
            json!({ "approval_id": asked["approval_id"], "decision": "deny", "reason": "not now" }),
        )
        .await
        .unwrap();
    expect![[r#"
        {
          "approval": {
            "approval_id": "<id>",
            "request_key": null,
            "project_id": "<id>",
            "session_id": "<id>",
            "run_id": null,
            "party_id": null,
            "role_name": null,
            "tool_name": "write_file",
            "input": {
              "path": "a.txt"
            },
            "subject": "a.txt",
            "file_path": "a.txt",
            "start_line": null,
            "end_line": null,
            "diff": null,
            "is_dangerous": false,
            "danger_reason": null,
            "outside_worktree": false,
            "status": "denied",
            "decision": "deny",
            "decided_by": "cli",
            "reason": "not now",
            "rule_id": null,
            "expires_at_ms": "<expires_at_ms>",
            "created_at": "<time>",
            "decided_at": "<time>"
          }
        }"#]]
    .assert_eq(&normalised(&decided, &dir));
}
