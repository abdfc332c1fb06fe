//! Run-level patterns (seed 002) through the real daemon, with process members (a small Python
//! program that answers from its prompt through the real CLI): handoff single and multi-hop (the
//! terminal agent's answer, the chain, the fixed reason line), a cycle refused on write; a router
//! that runs its choice, finds none, or chooses outside its list; advisors all answering, one
//! failing and one timing out (placeholders, the agent still runs); router + handoff and
//! handoff + advisors; teams of 2 and 4 ending by consensus, after max rounds and when their
//! coordinator decides, a handoff chain seated in a team; the run tree; cancel cascading to every
//! step; kill -9 mid-chain resuming without running a completed step again.

use std::path::Path;

use serde_json::{Value, json};
use troupe::client::Client;

use crate::support::{TestDaemon, define, register, shares, start, wait_for, wait_run};

/// The members' program: `answer.py <mode>`. Every mode but `route` completes with
/// `<agent> saw: <its prompt, one line>`.
const ANSWER: &str = r####"import json, os, subprocess, sys, time
mode = sys.argv[1] if len(sys.argv) > 1 else "echo"
agent = os.environ["TROUPE_AGENT"]
prompt = os.environ["TROUPE_PROMPT"]
def call(op, params):
    return subprocess.run(["troupe", "call", op, "-"], input=json.dumps(params), text=True, capture_output=True)
if mode == "count":
    with open(sys.argv[2], "a") as f:
        f.write(agent + "\n")
if mode == "wait":
    while not os.path.exists(sys.argv[2]):
        time.sleep(0.02)
if mode == "sleep":
    time.sleep(600)
if mode == "fail":
    sys.exit(3)
if mode.startswith("team"):
    import re
    final = "## TEAM TRANSCRIPT" in prompt
    seen = [l[4:] for l in prompt.split("\n") if l.startswith("### ")]
    if final:
        call("complete", {"output": "final by " + agent + ": " + "; ".join(seen)})
        sys.exit(0)
    rnd = int(re.search(r"round (\d+) of", prompt).group(1))
    call("team_broadcast", {"message": agent + " speaks in round " + str(rnd)})
    if mode == "team" and rnd >= 2:
        call("vote_conclude", {"reason": "enough"})
    if mode == "team-chair" and rnd >= 2:
        call("conclude_team", {"answer": "concluded by " + agent + " in round " + str(rnd)})
    if mode == "team-rogue":
        r = call("conclude_team", {"answer": "mine"})
        with open(sys.argv[2], "w") as f:
            f.write(r.stderr)
    call("complete", {"output": agent + " saw " + ", ".join(seen)})
    sys.exit(0)
if mode == "route":
    text = prompt.split("\n\n", 1)[-1].lower()  # the request, after the instruction
    choice = "billing" if "bill" in text else "tech" if "crash" in text else "legal" if "legal" in text else None
    if choice:
        r = call("route_to", {"agent": choice, "reason": "the request mentions it"})
        sys.stderr.write(r.stderr)
    sys.exit(0)
out = agent + " saw: " + prompt.replace("\n", " | ")
r = call("complete", {"output": out})
sys.exit(r.returncode)
"####;

struct Patterns {
    daemon: TestDaemon,
    c: Client,
    me: String,
    program: String,
}

impl Patterns {
    async fn start() -> Patterns {
        let daemon = TestDaemon::start();
        let c = daemon.client().await;
        let project = daemon.project("repo");
        let me = register(&c, "human", &project, None).await;
        let program = daemon.dir.path().join("answer.py");
        std::fs::write(&program, ANSWER).unwrap();
        Patterns {
            program: program.display().to_string(),
            daemon,
            c,
            me,
        }
    }

    /// Defines agent `name` running `answer.py <mode> [arg]`, with `extra` fields. Its box is
    /// given the test's shared dir, where a mode's file argument lies (`TestDaemon::shared`).
    async fn agent(&self, name: &str, mode: &[&str], extra: Value) {
        let mut command = vec!["python3".to_string(), self.program.clone()];
        command.extend(mode.iter().map(|s| s.to_string()));
        let mut def = json!({ "name": name, "command": command });
        for (k, v) in extra.as_object().unwrap() {
            def[k] = v.clone();
        }
        define(&self.c, "agent", shares(def, &[&self.daemon.shared()])).await;
    }

    async fn run(&self, agent: &str, prompt: &str) -> (String, Value) {
        let run_id = start(&self.c, agent, prompt, &self.me).await;
        let result = wait_run(&self.c, &run_id).await;
        (run_id, result)
    }

    async fn tree(&self, run_id: &str) -> Value {
        self.c
            .call("get_run_tree", json!({ "run_id": run_id }))
            .await
            .unwrap()
    }

    async fn events(&self, kind: &str) -> Vec<Value> {
        let r = self
            .c
            .call("list_events", json!({ "kind": kind, "limit": 1000 }))
            .await
            .unwrap();
        r["events"].as_array().unwrap().clone()
    }
}

fn output(result: &Value) -> String {
    result["run"]["result"]["output"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// `agent(trigger) status` per run of a tree, in tree order, indented by depth.
fn shape(tree: &Value) -> Vec<String> {
    tree["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            format!(
                "{}{}({}) {}",
                "  ".repeat(r["depth"].as_u64().unwrap() as usize),
                r["agent"].as_str().unwrap(),
                r["trigger"].as_str().unwrap_or("-"),
                r["status"].as_str().unwrap()
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handoff_chains_return_the_terminal_agents_answer_with_the_chain() {
    let p = Patterns::start().await;
    p.agent("c", &["echo"], json!({})).await;
    p.agent("b", &["echo"], json!({ "handoff": "c" })).await;
    p.agent("a", &["echo"], json!({ "handoff": "b" })).await;
    p.agent("solo", &["echo"], json!({ "handoff": "c" })).await;

    // One hop.
    let (_, r) = p.run("solo", "draft the notes").await;
    assert_eq!(r["run"]["status"], "success", "{r}");
    assert_eq!(
        output(&r),
        "c saw: Reason: handoff from solo. Its output follows; continue from it. |  | solo saw: draft the notes"
    );

    // Three: a -> b -> c returns c's answer, with the chain listed.
    let (root, r) = p.run("a", "ship it").await;
    assert_eq!(r["run"]["status"], "success", "{r}");
    assert_eq!(r["run"]["result"]["chain"], json!(["a", "b", "c"]));
    let out = output(&r);
    assert!(out.starts_with("c saw: Reason: handoff from b."), "{out}");
    assert!(out.contains("b saw: Reason: handoff from a."), "{out}");
    assert!(out.ends_with("a saw: ship it"), "{out}");
    let tree = p.tree(&root).await;
    assert_eq!(
        shape(&tree),
        [
            "a(subagent) success",
            "  a(root) success",
            "  b(handoff) success",
            "  c(handoff) success"
        ],
        "{tree}"
    );
    assert_eq!(tree["chain"], json!(["a", "b", "c"]));
    assert_eq!(p.events("pattern_handoff").await.len(), 3);
    // Recorded as the root run's end is processed (the result may be read a moment before).
    wait_for("the chain's pattern_finished", 30, || async {
        let finished = p.events("pattern_finished").await;
        finished
            .iter()
            .any(|e| e["data"]["run_id"] == root.as_str() && e["data"]["status"] == "success")
            .then_some(())
    })
    .await;

    // A cycle is refused when it is written, named.
    let err =
        p.c.call(
            "update_agent_definition",
            json!({ "definition": { "name": "c", "command": ["true"], "handoff": "a" } }),
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("handoff cycle: c -> a -> b -> c"), "{err}");
    let err =
        p.c.call(
            "create_agent_definition",
            json!({ "definition": { "name": "x", "command": ["true"], "handoff": "ghost" } }),
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("the handoff of agent x names agent ghost, which does not exist"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_router_runs_its_choice_on_the_original_input_or_fails_naming_itself() {
    let p = Patterns::start().await;
    p.agent("billing", &["echo"], json!({})).await;
    p.agent("qa", &["echo"], json!({})).await;
    p.agent("tech", &["echo"], json!({ "handoff": "qa" })).await;
    p.agent(
        "desk",
        &["route"],
        json!({ "router": { "agents": ["billing", "tech"] } }),
    )
    .await;

    // Success: billing runs on the original request.
    let (root, r) = p.run("desk", "my bill is wrong").await;
    assert_eq!(r["run"]["status"], "success", "{r}");
    assert_eq!(output(&r), "billing saw: my bill is wrong");
    assert_eq!(r["run"]["result"]["chain"], json!(["desk", "billing"]));
    let tree = p.tree(&root).await;
    assert_eq!(
        shape(&tree),
        [
            "desk(subagent) success",
            "  desk(root) success",
            "  billing(router) success"
        ],
        "{tree}"
    );
    let routed = p.events("pattern_routed").await;
    assert_eq!(routed[0]["data"]["agent"], "billing", "{routed:?}");

    // Router + handoff: tech hands off to qa.
    let (_, r) = p.run("desk", "it crashes on start").await;
    assert_eq!(
        r["run"]["result"]["chain"],
        json!(["desk", "tech", "qa"]),
        "{r}"
    );
    assert!(output(&r).starts_with("qa saw: Reason: handoff from tech."));

    // No suitable agent: the router ends without choosing.
    let (_, r) = p.run("desk", "nothing fits here").await;
    assert_eq!(r["run"]["status"], "crashed", "{r}");
    assert_eq!(
        r["run"]["error"],
        "router desk found no suitable agent among billing, tech (its run ended without calling route_to: exit status 0)"
    );

    // A choice outside the list.
    let (_, r) = p.run("desk", "a legal question").await;
    assert_eq!(r["run"]["status"], "crashed", "{r}");
    assert_eq!(
        r["run"]["error"],
        "router desk chose legal, which is not one of its agents (billing, tech)"
    );

    // route_to is a router step's tool only.
    let err =
        p.c.call(
            "route_to",
            json!({ "session_id": p.me, "agent": "billing" }),
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("is not an agent run"), "{err}");

    // Bad routers are refused on write.
    let err =
        p.c.call(
            "create_agent_definition",
            json!({ "definition": { "name": "r2", "command": ["true"], "allow_nested_agents": true,
                                    "router": { "agents": ["billing"] } } }),
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("router r2 cannot have subagents"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn advisors_enrich_the_request_and_a_failed_or_late_one_leaves_a_placeholder() {
    let p = Patterns::start().await;
    p.agent("legal", &["echo"], json!({})).await;
    p.agent("risk", &["fail"], json!({})).await;
    p.agent("ops", &["sleep"], json!({})).await;
    p.agent("writer", &["echo"], json!({})).await;
    p.agent(
        "lead",
        &["echo"],
        json!({ "advisors": ["legal", "risk", "ops"], "advisor_timeout_secs": 8, "handoff": "writer" }),
    )
    .await;
    // An advisor must be terminal.
    let err =
        p.c.call(
            "create_agent_definition",
            json!({ "definition": { "name": "boss", "command": ["true"], "advisors": ["lead"] } }),
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("advisor lead of agent boss is not terminal: it hands off to writer"),
        "{err}"
    );

    let (root, r) = p.run("lead", "should we ship?").await;
    assert_eq!(r["run"]["status"], "success", "{r}");
    assert_eq!(r["run"]["result"]["chain"], json!(["lead", "writer"]));
    let out = output(&r);
    // The writer saw the lead's answer; the lead saw the seed's enriched message.
    for part in [
        "writer saw: Reason: handoff from lead.",
        "lead saw: ## ORIGINAL USER REQUEST |  | should we ship? |  | ## ANALYSIS GATHERED",
        "### From legal |  | legal saw: should we ship?",
        "### From risk |  | [advisor risk gave no analysis: risk: ",
        "### From ops |  | [advisor ops gave no analysis: it timed out]",
    ] {
        assert!(out.contains(part), "{part:?} missing from {out}");
    }
    let tree = p.tree(&root).await;
    assert_eq!(
        shape(&tree),
        [
            "lead(subagent) success",
            "  legal(advisor) success",
            "  risk(advisor) crashed",
            "  ops(advisor) cancelled",
            "  lead(root) success",
            "  writer(handoff) success"
        ],
        "{tree}"
    );
    assert_eq!(p.events("pattern_advisor_timeout").await.len(), 1);
    assert_eq!(p.events("pattern_advisor_failed").await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_pattern_run_cancels_every_step() {
    let p = Patterns::start().await;
    p.agent("after", &["echo"], json!({})).await;
    p.agent("slow", &["sleep"], json!({ "handoff": "after" }))
        .await;
    let root = start(&p.c, "slow", "take your time", &p.me).await;
    let step = wait_for("the first step to run", 30, || async {
        let tree = p.tree(&root).await;
        tree["runs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["trigger"] == "root" && r["status"] == "running")
            .map(|r| r["run_id"].as_str().unwrap().to_string())
    })
    .await;
    let step_run =
        p.c.call("get_agent_result", json!({ "run_id": step }))
            .await
            .unwrap();
    let pid = step_run["run"]["pid"].as_i64().unwrap();
    p.c.call("cancel_agent", json!({ "run_id": root }))
        .await
        .unwrap();
    let tree = wait_for("every step to end", 30, || async {
        let tree = p.tree(&root).await;
        tree["runs"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["status"] != "running" && r["status"] != "pending")
            .then_some(tree)
    })
    .await;
    assert_eq!(
        shape(&tree),
        ["slow(subagent) cancelled", "  slow(root) cancelled"],
        "{tree}"
    );
    wait_for("the step's process to go", 30, || async {
        (!Path::new(&format!("/proc/{pid}")).exists()
            || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .is_ok_and(|s| s.contains(") Z")))
        .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chain_resumes_after_a_kill_9_without_running_a_completed_step_again() {
    let mut p = Patterns::start().await;
    let dir = p.daemon.shared();
    let count = dir.join("count.txt");
    let go = dir.join("go");
    p.agent("last", &["echo"], json!({})).await;
    p.agent(
        "second",
        &["wait", go.to_str().unwrap()],
        json!({ "handoff": "last" }),
    )
    .await;
    p.agent(
        "first",
        &["count", count.to_str().unwrap()],
        json!({ "handoff": "second" }),
    )
    .await;
    let root = start(&p.c, "first", "begin", &p.me).await;
    wait_for("the second step to run", 30, || async {
        let tree = p.tree(&root).await;
        tree["runs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["agent"] == "second" && r["status"] == "running")
            .then_some(())
    })
    .await;

    p.daemon.kill9();
    p.daemon.spawn();
    p.c = p.daemon.client().await;
    std::fs::write(&go, "").unwrap();
    let r = wait_run(&p.c, &root).await;
    assert_eq!(r["run"]["status"], "success", "{r}");
    assert_eq!(
        r["run"]["result"]["chain"],
        json!(["first", "second", "last"])
    );
    assert_eq!(
        std::fs::read_to_string(&count).unwrap(),
        "first\n",
        "the completed first step did not run again"
    );
    let tree = p.tree(&root).await;
    assert_eq!(
        shape(&tree),
        [
            "first(subagent) success",
            "  first(root) success",
            "  second(handoff) success",
            "  last(handoff) success"
        ],
        "{tree}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn teams_deliberate_in_rounds_and_their_coordinator_answers() {
    let p = Patterns::start().await;
    let rogue_log = p.daemon.shared().join("rogue.txt");
    p.agent("dev", &["team"], json!({})).await;
    p.agent("sec", &["team"], json!({})).await;
    p.agent(
        "panel",
        &["echo"],
        json!({ "team": { "members": ["dev", "sec"], "coordinator": "dev" } }),
    )
    .await;

    // Two members, consensus: both vote in round 2, then the coordinator answers from the
    // transcript.
    let (root, r) = p.run("panel", "review the design").await;
    assert_eq!(r["run"]["status"], "success", "{r}");
    assert_eq!(r["run"]["result"]["chain"], json!(["panel", "dev"]));
    // Within a round the members speak in parallel: any order.
    let out = output(&r);
    let posts: Vec<&str> = out
        .trim_start_matches("final by dev: ")
        .split("; ")
        .collect();
    let mut round1 = posts[..2].to_vec();
    let mut round2 = posts[2..].to_vec();
    round1.sort();
    round2.sort();
    assert_eq!(
        (round1, round2),
        (
            vec!["dev (round 1)", "sec (round 1)"],
            vec!["dev (round 2)", "sec (round 2)"]
        ),
        "{out}"
    );
    let tree = p.tree(&root).await;
    assert_eq!(
        shape(&tree),
        [
            "panel(subagent) success",
            "  dev(team_member) success",
            "  sec(team_member) success",
            "  dev(team_member) success",
            "  sec(team_member) success",
            "  dev(team_member) success"
        ],
        "{tree}"
    );
    // Each member saw, before its second turn, what was broadcast in the first.
    let outputs: Vec<&str> = tree["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["output"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(outputs[1], "dev saw ", "{outputs:?}");
    assert!(
        outputs[4].starts_with("sec saw ")
            && outputs[4].contains("dev (round 1)")
            && outputs[4].contains("sec (round 1)"),
        "{outputs:?}"
    );
    assert_eq!(p.events("team_vote").await.len(), 2);

    // Four members who never vote: max rounds, then the transcript goes to the coordinator.
    for m in ["a", "b", "c"] {
        p.agent(m, &["team-quiet"], json!({})).await;
    }
    p.agent(
        "board",
        &["echo"],
        json!({ "team": { "members": ["a", "b", "c", "sec"], "coordinator": "a",
                          "termination": "max_rounds", "max_rounds": 2 } }),
    )
    .await;
    let (root, r) = p.run("board", "pick a name").await;
    assert_eq!(r["run"]["status"], "success", "{r}");
    assert_eq!(r["run"]["result"]["chain"], json!(["board", "a"]));
    assert_eq!(
        p.tree(&root).await["runs"].as_array().unwrap().len(),
        1 + 4 * 2 + 1
    );
    let out = output(&r);
    for post in ["a (round 1)", "sec (round 1)", "c (round 2)", "b (round 2)"] {
        assert!(out.contains(post), "{post} missing from {out}");
    }

    // The coordinator decides; a member that is a handoff chain speaks through its last agent;
    // a member that is not the coordinator cannot conclude.
    p.agent(
        "editor",
        &["team-rogue", rogue_log.to_str().unwrap()],
        json!({}),
    )
    .await;
    p.agent("writer", &["echo"], json!({ "handoff": "editor" }))
        .await;
    p.agent("lead", &["team-chair"], json!({})).await;
    p.agent(
        "room",
        &["echo"],
        json!({ "team": { "members": ["writer", "lead"], "coordinator": "lead",
                          "termination": "coordinator_decides" } }),
    )
    .await;
    let (root, r) = p.run("room", "publish?").await;
    assert_eq!(r["run"]["status"], "success", "{r}");
    assert_eq!(output(&r), "concluded by lead in round 2");
    assert_eq!(r["run"]["result"]["chain"], json!(["room", "lead"]));
    let agents: Vec<String> = p.tree(&root).await["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["agent"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(agents, ["room", "editor", "lead", "editor", "lead"]);
    let rogue = std::fs::read_to_string(&rogue_log).unwrap();
    assert!(
        rogue.contains("editor is not the coordinator of its team"),
        "{rogue}"
    );

    // Team tools are a member's turn's only; bad teams are refused on write.
    let err =
        p.c.call(
            "team_broadcast",
            json!({ "session_id": p.me, "message": "hi" }),
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("is not an agent run"), "{err}");
    let err =
        p.c.call(
            "create_agent_definition",
            json!({ "definition": { "name": "t9", "command": ["true"],
                                    "team": { "members": ["dev"], "coordinator": "writer" } } }),
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("team coordinator writer of team t9 cannot have a handoff"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_party_role_can_be_a_pattern() {
    let p = Patterns::start().await;
    p.agent("checker", &["echo"], json!({})).await;
    p.agent("maker", &["echo"], json!({ "handoff": "checker" }))
        .await;
    define(
        &p.c,
        "party",
        json!({ "name": "chained", "roles": { "build": { "agent": "maker", "prompt": "make it" } } }),
    )
    .await;
    let project = p.daemon.project("repo");
    let party = crate::support::launch(&p.c, "chained", &project).await;
    let s = crate::support::party_end(&p.c, &party, 30).await;
    assert_eq!(s["party"]["status"], "completed", "{s}");
    let member = &s["members"][0];
    let r =
        p.c.call("get_agent_result", json!({ "run_id": member["run_id"] }))
            .await
            .unwrap();
    assert_eq!(
        r["run"]["result"]["chain"],
        json!(["maker", "checker"]),
        "{r}"
    );
    assert!(
        output(&r).starts_with("checker saw: Reason: handoff from maker."),
        "{r}"
    );
}

/// An ACP step cannot outlive its daemon: `troupe stop` ends it without failing the pattern run,
/// and the next daemon runs that step again (its earlier, completed steps stay done).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acp_step_ended_by_troupe_stop_runs_again_after_the_restart() {
    let mut p = Patterns::start().await;
    let count = p.daemon.shared().join("count.txt");
    p.agent("final", &["echo"], json!({})).await;
    define(
        &p.c,
        "agent",
        json!({
            "name": "acp-writer",
            "runner": "acp:scripted",
            "command": [crate::support::DEV_BIN, "scripted-acp-agent"],
            "env": { "TROUPE_ACP_SCRIPT": "write", "TROUPE_ACP_FILE": "NOTES.md" },
            "acp": { "mcp": false },
            "handoff": "final",
        }),
    )
    .await;
    p.agent(
        "opener",
        &["count", count.to_str().unwrap()],
        json!({ "handoff": "acp-writer" }),
    )
    .await;
    let root = start(&p.c, "opener", "write the notes", &p.me).await;
    // The ACP step waits for a person's approval when the daemon is stopped.
    crate::support::pending_approval(&p.c).await;
    let out = p.daemon.cli(&["stop"]);
    assert!(out.status.success(), "{}", crate::support::stderr(&out));
    p.daemon.spawn();
    p.c = p.daemon.client().await;
    let r =
        p.c.call("get_agent_result", json!({ "run_id": root }))
            .await
            .unwrap();
    assert_eq!(
        r["run"]["status"], "running",
        "the pattern run resumes: {r}"
    );
    // Its ACP step runs again and asks again.
    let approval = wait_for("the ACP step to ask again", 30, || async {
        let a =
            p.c.call("list_approvals", json!({ "status": "pending" }))
                .await
                .unwrap();
        a["approvals"].as_array().unwrap().first().cloned()
    })
    .await;
    p.c.call(
        "decide_approval",
        json!({ "approval_id": approval["approval_id"], "decision": "approve" }),
    )
    .await
    .unwrap();
    let r = wait_run(&p.c, &root).await;
    assert_eq!(r["run"]["status"], "success", "{r}");
    assert_eq!(
        r["run"]["result"]["chain"],
        json!(["opener", "acp-writer", "final"])
    );
    assert_eq!(std::fs::read_to_string(&count).unwrap(), "opener\n");
    let tree = p.tree(&root).await;
    assert_eq!(
        shape(&tree),
        [
            "opener(subagent) success",
            "  opener(root) success",
            "  acp-writer(handoff) crashed",
            "  acp-writer(handoff) success",
            "  final(handoff) success"
        ],
        "{tree}"
    );
}
