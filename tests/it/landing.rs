//! Landing the work end to end, with real process members that commit in their own worktrees of
//! a real git repository: members' diffs and commits, a review on the timeline, the merge queue
//! (a failing test leaves the target untouched, a passing one lands both members, a conflict is
//! named and left out, a dirty checked-out target is refused) and the conflict radar predicting
//! a conflict between two members that are still running. Bad input gets named errors.

use std::path::Path;

use serde_json::{Value, json};
use troupe::client::Client;

use crate::scenario::Puppet::{Commits, CommitsThenWaits, Idle};
use crate::scenario::{Scenario, puppet_script};
use crate::support::{define, executable, git, party_end, refused, register, wait_for};

/// Waits for a run to end; its `get_agent_result`.
async fn ended(c: &Client, run_id: &str) -> Value {
    wait_for("the run to end", 60, || async {
        let r = c
            .call("get_agent_result", json!({ "run_id": run_id }))
            .await
            .unwrap();
        let status = r["run"]["status"].as_str().unwrap_or_default().to_string();
        (status != "running" && status != "pending").then_some(r)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_members_are_reviewed_and_landed_and_a_failing_test_leaves_the_target_untouched() {
    let s = Scenario::new().await;
    let (c, project) = (&s.person, &s.project);
    s.party(
        "pair",
        &[
            ("a", Commits("a.txt", "from a")),
            ("b", Commits("b.txt", "from b")),
        ],
    )
    .await;
    let start = s.git(&["rev-parse", "main"]);
    let party = s.launch("pair").await;
    let end = s.ended(&party).await;
    assert_eq!(end["party"]["status"], "completed", "{end}");

    // Every managed checkout, measured against the branch the project has out.
    let wts = c
        .call("list_worktrees", json!({ "party_id": party }))
        .await
        .unwrap();
    let wts = wts["worktrees"].as_array().unwrap();
    assert_eq!(wts.len(), 2, "{wts:?}");
    for (wt, file) in wts.iter().zip(["a.txt", "b.txt"]) {
        assert_eq!(wt["target"], "main");
        assert_eq!(
            (wt["ahead"].as_u64(), wt["behind"].as_u64()),
            (Some(1), Some(0))
        );
        assert_eq!(wt["base"], start.as_str());
        assert_eq!(wt["changed_files"], json!([file]));
        assert_eq!(wt["dirty"], false);
    }

    // A member's diff, one file with both versions, and its commits.
    let diff = c
        .call("get_member_diff", json!({ "party_id": party, "role": "a" }))
        .await
        .unwrap();
    assert_eq!(
        (diff["additions"].as_u64(), diff["deletions"].as_u64()),
        (Some(1), Some(0))
    );
    assert_eq!(diff["files"][0]["status"], "added");
    assert!(
        diff["files"][0]["patch"]
            .as_str()
            .unwrap()
            .contains("+from a"),
        "{diff}"
    );
    let one = c
        .call(
            "get_member_diff",
            json!({ "party_id": party, "role": "a", "path": "a.txt" }),
        )
        .await
        .unwrap();
    assert_eq!(one["files"][0]["head_text"], "from a\n");
    assert!(one["files"][0].get("base_text").is_none(), "{one}");
    let commits = c
        .call(
            "list_member_commits",
            json!({ "party_id": party, "role": "b" }),
        )
        .await
        .unwrap();
    assert_eq!(commits["commits"][0]["summary"], "b#0 writes b.txt");

    // The person's review goes on the timeline and into the member's inbox.
    let review = c
        .call(
            "review_member",
            json!({ "party_id": party, "role": "a", "verdict": "request_changes", "restart": true,
                    "comments": [{ "path": "a.txt", "line": 1, "text": "say more" }] }),
        )
        .await
        .unwrap();
    assert_eq!(
        (review["verdict"].as_str(), review["delivered"].as_bool()),
        (Some("request_changes"), Some(false))
    );
    // a had finished: it is started again in its checkout with the review as its task.
    let rework = review["restarted_run_id"].as_str().unwrap().to_string();
    let run = ended(c, &rework).await;
    assert_eq!(run["run"]["status"], "success", "{run}");
    assert!(
        run["run"]["prompt"]
            .as_str()
            .unwrap()
            .contains("a.txt:1: say more"),
        "{run}"
    );
    assert_eq!(run["run"]["workdir"], wts[0]["workdir"]);
    let commits = c
        .call(
            "list_member_commits",
            json!({ "party_id": party, "role": "a" }),
        )
        .await
        .unwrap();
    assert_eq!(commits["commits"].as_array().unwrap().len(), 2, "{commits}");
    assert_eq!(s.events(&party, "member_restarted").await.len(), 1);
    let reviewed = s.events(&party, "member_reviewed").await;
    assert_eq!(
        reviewed[0]["data"]["comments"][0]["text"], "say more",
        "{reviewed:?}"
    );
    assert_eq!(reviewed[0]["data"]["reviewer"], "person");

    // A failing test: the integration branch has both, the target has not moved.
    let failed = c
        .call(
            "land_party",
            json!({ "party_id": party, "test_command": "test -f a.txt && test -f b.txt && echo both there && exit 3" }),
        )
        .await
        .unwrap();
    assert_eq!(failed["landed"], false, "{failed}");
    assert_eq!(failed["test"]["exit_code"], 3);
    assert!(
        failed["test"]["output"]
            .as_str()
            .unwrap()
            .contains("both there")
    );
    assert_eq!(s.git(&["rev-parse", "main"]), start);
    assert!(!Path::new(&project).join("a.txt").exists());
    assert_eq!(s.events(&party, "land_tests_failed").await.len(), 1);
    assert_eq!(s.notifications(&party, "land_tests_failed").await.len(), 1);
    // Someone fixes things by hand on the integration branch: the next landing will not reset
    // their commit away.
    let idir = failed["integration_dir"].as_str().unwrap().to_string();
    std::fs::write(Path::new(&idir).join("fix.txt"), "by hand\n").unwrap();
    git(&idir, &["add", "fix.txt"]);
    git(
        &idir,
        &[
            "-c",
            "user.name=p",
            "-c",
            "user.email=p@p",
            "commit",
            "-qm",
            "by hand",
        ],
    );
    let (kind, msg) = refused(c, "land_party", json!({ "party_id": party })).await;
    assert!(
        kind == "conflict" && msg.contains("worked on outside Troupe"),
        "{msg}"
    );
    git(&idir, &["reset", "-q", "--hard", "HEAD~1"]);

    // A passing one lands both, squashed, in DAG order; the person's checkout follows.
    let landed = c
        .call(
            "land_party",
            json!({ "party_id": party, "strategy": "squash", "test_command": "test -f a.txt && test -f b.txt" }),
        )
        .await
        .unwrap();
    assert_eq!(landed["landed"], true, "{landed}");
    assert_eq!(landed["members"][0]["outcome"], "integrated");
    assert_eq!(landed["members"][1]["outcome"], "integrated");
    assert_eq!(
        s.git(&["rev-parse", "main"]),
        landed["tip"].as_str().unwrap()
    );
    assert_eq!(
        s.git(&["rev-list", "--count", &format!("{start}..main")]),
        "2"
    );
    assert_eq!(s.git(&["rev-list", "--merges", "main"]), "");
    assert_eq!(
        std::fs::read_to_string(Path::new(&project).join("b.txt")).unwrap(),
        "from b\n"
    );
    assert_eq!(
        std::fs::read_to_string(Path::new(&project).join("a.txt")).unwrap(),
        "from a\nreworked\n"
    );
    assert_eq!(s.git(&["status", "--porcelain"]), "");
    assert_eq!(s.events(&party, "party_landed").await.len(), 1);
    // Nothing is left to land, and the landed checkouts are removed without force.
    let (kind, msg) = refused(c, "land_party", json!({ "party_id": party })).await;
    assert_eq!(kind, "conflict");
    assert!(msg.contains("a#0 (nothing to land)"), "{msg}");
    let cleaned = c
        .call("cleanup_party", json!({ "party_id": party }))
        .await
        .unwrap();
    // The two checkouts, and the integration branch's worktree.
    let removed = cleaned["removed"].as_array().unwrap();
    assert_eq!(removed.len(), 3, "{cleaned}");
    assert_eq!(removed[2].as_str().unwrap(), idir, "{cleaned}");
    assert!(!Path::new(&idir).exists());
    assert_eq!(s.git(&["branch", "--list", "troupe/*"]), "");

    // Bad input, each named.
    let (kind, msg) = refused(c, "land_party", json!({ "party_id": "nope" })).await;
    assert_eq!(kind, "not_found", "{msg}");
    let (kind, msg) = refused(
        c,
        "get_member_diff",
        json!({ "party_id": party, "role": "ghost" }),
    )
    .await;
    assert_eq!(kind, "not_found");
    assert!(msg.contains("ghost"), "{msg}");
    let (kind, msg) = refused(
        c,
        "get_member_diff",
        json!({ "party_id": party, "role": "a", "index": 3 }),
    )
    .await;
    assert!(kind == "not_found" && msg.contains("a#3"), "{msg}");
    let (kind, msg) = refused(
        c,
        "land_party",
        json!({ "party_id": party, "strategy": "octopus" }),
    )
    .await;
    assert!(kind == "invalid_params" && msg.contains("octopus"), "{msg}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conflict_is_named_and_left_out_and_a_dirty_target_is_refused() {
    let s = Scenario::new().await;
    let (c, project) = (&s.person, &s.project);
    s.party(
        "clash",
        &[
            ("a", Commits("README.md", "# a's readme")),
            ("b", Commits("README.md", "# b's readme")),
            ("c", Commits("c.txt", "from c")),
            ("idle", Idle),
        ],
    )
    .await;
    let start = s.git(&["rev-parse", "main"]);
    let party = s.launch("clash").await;
    s.ended(&party).await;

    // A member with no commits, and a target that does not exist, are named.
    let commits = c
        .call(
            "list_member_commits",
            json!({ "party_id": party, "role": "idle" }),
        )
        .await
        .unwrap();
    assert_eq!(commits["commits"], json!([]));
    assert_eq!(commits["worktree"]["ahead"], 0);
    let (kind, msg) = refused(
        c,
        "land_party",
        json!({ "party_id": party, "target": "release" }),
    )
    .await;
    assert!(kind == "not_found" && msg.contains("release"), "{msg}");

    // The person's checkout of the target has changes: refused, saying how to go on.
    std::fs::write(Path::new(&project).join("README.md"), "my own edit\n").unwrap();
    let (kind, msg) = refused(c, "land_party", json!({ "party_id": party })).await;
    assert_eq!(kind, "conflict");
    assert!(
        msg.contains("README.md") && msg.contains("commit or stash"),
        "{msg}"
    );
    assert_eq!(s.git(&["rev-parse", "main"]), start);
    assert_eq!(
        std::fs::read_to_string(Path::new(&project).join("README.md")).unwrap(),
        "my own edit\n"
    );
    s.git(&["checkout", "--", "README.md"]);

    // a lands, b conflicts with it (named, with its hunk) and is left out, c lands after it.
    let r = c
        .call(
            "land_party",
            json!({ "party_id": party, "strategy": "merge" }),
        )
        .await
        .unwrap();
    assert_eq!(r["landed"], true, "{r}");
    let outcome = |role: &str| {
        r["members"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["role"] == role)
            .unwrap()
            .clone()
    };
    assert_eq!(outcome("a")["outcome"], "integrated");
    assert_eq!(outcome("c")["outcome"], "integrated");
    assert_eq!(outcome("idle")["outcome"], "nothing_to_land");
    let b = outcome("b");
    assert_eq!(b["outcome"], "conflict");
    // b had finished and its role recovers by restart: it is started again to resolve it.
    let resolver = b["resolver_run_id"].as_str().unwrap().to_string();
    let run = ended(c, &resolver).await;
    let prompt = run["run"]["prompt"].as_str().unwrap();
    assert!(
        prompt.contains("resolve a merge conflict") && prompt.contains("README.md"),
        "{run}"
    );
    assert!(
        prompt.contains("/landing (what was integrated before you)"),
        "{prompt}"
    );
    assert_eq!(b["conflicts"][0]["path"], "README.md");
    let hunk = b["conflicts"][0]["hunks"][0].as_str().unwrap();
    assert!(
        hunk.contains("# a's readme") && hunk.contains("# b's readme"),
        "{hunk}"
    );
    assert!(
        r["summary"]
            .as_str()
            .unwrap()
            .contains("left out with conflicts: b#0")
    );
    assert_eq!(
        std::fs::read_to_string(Path::new(&project).join("README.md")).unwrap(),
        "# a's readme\n"
    );
    assert!(Path::new(&project).join("c.txt").exists());
    // The landing left b's branch as it was (its resolver added one commit); b and the person
    // are told. b works in a clone of its own: the daemon brings its branch over to the
    // project once its run has ended, a moment after the run reads as ended.
    let b_branch = b["branch"].as_str().unwrap();
    let count = || s.git(&["rev-list", "--count", &format!("{start}..{b_branch}")]);
    wait_for(
        "the resolver's commit brought over to the project",
        30,
        || {
            let n = count();
            async move { (n == "2").then_some(()) }
        },
    )
    .await;
    assert_eq!(count(), "2");
    let conflict = s.events(&party, "merge_conflict").await;
    assert_eq!(
        conflict[0]["data"]["files"],
        json!(["README.md"]),
        "{conflict:?}"
    );
    let note = s.notifications(&party, "merge_conflict").await;
    assert!(
        note[0]["text"].as_str().unwrap().contains("b#0"),
        "{note:?}"
    );
    // The hunk is on the timeline for whoever resolves it (b's session has ended: a message
    // to it would not be stored).
    let hunk = conflict[0]["data"]["conflicts"][0]["hunks"][0]
        .as_str()
        .unwrap();
    assert!(hunk.contains(">>>>>>>"), "{hunk}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_radar_predicts_a_conflict_between_running_members_before_either_completes() {
    let s = Scenario::new().await;
    let (c, project) = (&s.person, &s.project);
    s.party(
        "race",
        &[
            (
                "a",
                CommitsThenWaits("README.md", "# demo\nThe answer is 41."),
            ),
            (
                "b",
                CommitsThenWaits("README.md", "# demo\nThe answer is 43."),
            ),
            ("c", CommitsThenWaits("c.txt", "unrelated")),
        ],
    )
    .await;
    let party = s.launch("race").await;
    let found = wait_for("a predicted conflict", 60, || async {
        let r = c
            .call("list_conflicts", json!({ "party_id": party }))
            .await
            .unwrap();
        let list = r["conflicts"].as_array().unwrap().clone();
        (!list.is_empty()).then_some(list)
    })
    .await;
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(
        (found[0]["a"].as_str(), found[0]["b"].as_str()),
        (Some("a#0"), Some("b#0"))
    );
    assert_eq!(found[0]["files"], json!(["README.md"]));
    assert_eq!(found[0]["ranges"][0]["start_line"], 2, "{found:?}");
    // Found while both still run.
    let status = c
        .call("get_party_status", json!({ "party_id": party }))
        .await
        .unwrap();
    assert!(
        status["members"]
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m["status"] == "running"),
        "{status}"
    );
    // On the timeline and in the person's notifications (written just after the prediction).
    let note = wait_for("the person's notification", 30, || async {
        let n = s.notifications(&party, "conflict_predicted").await;
        (!n.is_empty()).then_some(n)
    })
    .await;
    assert!(
        note[0]["text"]
            .as_str()
            .unwrap()
            .contains("a#0 and b#0 will conflict in README.md"),
        "{note:?}"
    );
    let predicted = s.events(&party, "conflict_predicted").await;
    assert_eq!(predicted.len(), 1, "{predicted:?}");
    assert_eq!(predicted[0]["data"]["files"], json!(["README.md"]));
    // The cwd filter finds it from the person's checkout.
    let by_cwd = c
        .call("list_conflicts", json!({ "cwd": project }))
        .await
        .unwrap();
    assert_eq!(by_cwd["conflicts"].as_array().unwrap().len(), 1);
    // A member sees its own party's checkouts, and does not review the others' work (the
    // leader or the person does).
    let a_session = status["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "a")
        .unwrap()["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    let mine = c
        .call("list_worktrees", json!({ "session_id": a_session }))
        .await
        .unwrap();
    assert_eq!(mine["worktrees"].as_array().unwrap().len(), 3, "{mine}");
    assert!(
        mine["worktrees"]
            .as_array()
            .unwrap()
            .iter()
            .all(|w| w["party_id"] == party.as_str())
    );
    let (kind, msg) = refused(
        c,
        "review_member",
        json!({ "party_id": party, "role": "b", "verdict": "approve", "session_id": a_session }),
    )
    .await;
    assert!(
        kind == "forbidden" && msg.contains("leader or the person"),
        "{msg}"
    );
    let outsider = register(c, "test", project, None).await;
    let (kind, _) = refused(
        c,
        "get_member_diff",
        json!({ "party_id": party, "role": "b", "session_id": outsider }),
    )
    .await;
    assert_eq!(kind, "forbidden");
    let person = register(c, "test", project, None).await;
    c.call(
        "broadcast_to_party",
        json!({ "party_id": party, "from_session_id": person, "content": "finish now" }),
    )
    .await
    .unwrap();
    s.ended(&party).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setup_commands_run_in_a_new_worktree_before_the_member_and_a_failure_is_a_crash() {
    let s = Scenario::new().await;
    let c = &s.person;
    let script = puppet_script(s.dir());
    define(
        c,
        "agent",
        json!({ "name": "prepared", "command": [script, "a.txt", "after setup", "-"],
                "isolation": "worktree", "setup": ["printf 'deps for %s' \"$TROUPE_ROLE\" > deps.txt", "test -s deps.txt"] }),
    )
    .await;
    define(
        c,
        "agent",
        json!({ "name": "unprepared", "command": [script, "b.txt", "never", "-"],
                "isolation": "worktree", "setup": ["echo fetching; echo no network >&2; exit 7"] }),
    )
    .await;
    // A setup still running when its party is cancelled (the marker names its shell).
    let marker = format!("setup-marker-{}", std::process::id());
    define(
        c,
        "agent",
        json!({ "name": "slow", "command": [script, "c.txt", "never", "-"],
                "isolation": "worktree", "setup": [format!("sleep 600; echo {marker}")] }),
    )
    .await;
    define(
        c,
        "party",
        json!({ "name": "setups", "roles": { "ok": { "agent": "prepared" },
                "broken": { "agent": "unprepared", "on_crash": "pause" },
                "slow": { "agent": "slow" } } }),
    )
    .await;
    let party = s.launch("setups").await;
    // The prepared member ran after its setup: the setup's file is in its commit.
    let commits = wait_for("the prepared member's commit", 60, || async {
        let r = c
            .call(
                "list_member_commits",
                json!({ "party_id": party, "role": "ok" }),
            )
            .await
            .ok()?;
        (!r["commits"].as_array()?.is_empty()).then_some(r)
    })
    .await;
    let changed = &commits["worktree"]["changed_files"];
    assert_eq!(changed, &json!(["a.txt", "deps.txt"]), "{commits}");
    // The broken one crashed with its setup's failure named, and was paused.
    let status = wait_for("the broken member paused", 60, || async {
        let s = c
            .call("get_party_status", json!({ "party_id": party }))
            .await
            .unwrap();
        let paused = s["roles"]
            .as_array()?
            .iter()
            .any(|r| r["role"] == "broken" && r["status"] == "paused");
        paused.then_some(s)
    })
    .await;
    let runs = c
        .call("list_agents", json!({ "party_id": party }))
        .await
        .unwrap();
    let broken = runs["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["role_name"] == "broken")
        .unwrap_or_else(|| panic!("{runs} {status}"));
    assert_eq!(broken["status"], "crashed");
    assert!(
        broken["error"].as_str().unwrap().contains(
            "setup command `echo fetching; echo no network >&2; exit 7` failed (exit 7): no network"
        ),
        "{broken}"
    );
    let setups = s.events(&party, "member_setup").await;
    assert_eq!(setups.len(), 3, "{setups:?}");
    let failed = setups
        .iter()
        .find(|e| e["data"]["passed"] == false)
        .unwrap();
    assert_eq!(failed["data"]["output"], "fetching\nno network\n");
    // Setup goes with a checkout of the member's own.
    let e = c
        .call(
            "create_agent_definition",
            json!({ "definition": { "name": "nowhere", "command": ["true"], "setup": ["true"] } }),
        )
        .await
        .expect_err("setup without isolation");
    assert!(e.to_string().contains("isolation"), "{e}");
    // Cancelling the party ends the setup under way, and its member never starts.
    let shell_of_setup = || {
        std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| std::fs::read(e.ok()?.path().join("cmdline")).ok())
            .any(|cmd| String::from_utf8_lossy(&cmd).contains(&marker))
    };
    wait_for("the slow setup running", 30, || async {
        shell_of_setup().then_some(())
    })
    .await;
    c.call("cancel_party", json!({ "party_id": party }))
        .await
        .unwrap();
    let slow = wait_for("the slow member stopped", 30, || async {
        let runs = c
            .call("list_agents", json!({ "party_id": party }))
            .await
            .unwrap();
        runs["runs"]
            .as_array()?
            .iter()
            .find(|r| r["role_name"] == "slow" && r["status"] == "cancelled")
            .cloned()
    })
    .await;
    assert_eq!(slow["error"], "stopped during its setup", "{slow}");
    wait_for("the setup's processes gone", 30, || async {
        (!shell_of_setup()).then_some(())
    })
    .await;
}

/// A judge that checks it was shown every attempt's diff, then picks attempt 2.
fn judge(dir: &Path) -> String {
    executable(
        dir,
        "judge.sh",
        r#"#!/bin/sh
set -e
for i in 0 1 2; do
  echo "$TROUPE_PROMPT" | grep -q "^+attempt $i" || { echo "attempt $i not shown" >&2; exit 1; }
done
party=$(echo "$TROUPE_PROMPT" | sed -n 's/.*"party_id":"\([^"]*\)".*/\1/p' | head -n 1)
troupe call pick_member "{\"party_id\":\"$party\",\"role\":\"dev\",\"index\":2,\"reason\":\"the most thorough\",\"session_id\":\"$TROUPE_SESSION_ID\"}" >/dev/null
troupe call complete '{"output":"picked attempt 2"}' >/dev/null
"#,
    )
}

/// An attempt writes its own answer to the same file.
pub(crate) fn attempt(dir: &Path) -> String {
    executable(
        dir,
        "attempt.sh",
        r#"#!/bin/sh
set -e
echo "attempt $TROUPE_INSTANCE" > answer.txt
git add -A
git -c user.name=member -c user.email=member@troupe commit -qm "attempt $TROUPE_INSTANCE"
troupe call complete "{\"output\":\"attempt $TROUPE_INSTANCE done\"}" >/dev/null
"#,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn best_of_three_with_a_judge_lands_exactly_the_picked_branch_through_the_merger_role() {
    let s = Scenario::new().await;
    let (c, project) = (&s.person, &s.project);
    define(
        c,
        "agent",
        json!({ "name": "attempt", "command": [attempt(s.dir())], "isolation": "worktree" }),
    )
    .await;
    define(
        c,
        "agent",
        json!({ "name": "judge", "command": [judge(s.dir())] }),
    )
    .await;
    define(
        c,
        "agent",
        json!({ "name": "queue", "runner": "land", "land": { "strategy": "squash", "test_command": "grep -q 'attempt 2' answer.txt" } }),
    )
    .await;
    // Bad definitions are named: a pick needs attempts, a judge that exists, checkouts.
    for (roles, needle) in [
        (
            json!({ "dev": { "agent": "attempt", "pick": {} } }),
            "at least 2",
        ),
        (
            json!({ "dev": { "agent": "attempt", "count": 3, "pick": { "judge": "nobody" } } }),
            "nobody",
        ),
    ] {
        let e = c
            .call(
                "create_party_definition",
                json!({ "definition": { "name": "bad", "roles": roles } }),
            )
            .await
            .expect_err("a bad pick");
        assert!(e.to_string().contains(needle), "{e}");
    }
    define(
        c,
        "party",
        json!({ "name": "best", "roles": {
            "dev": { "agent": "attempt", "count": 3, "pick": { "judge": "judge" } },
            "merger": { "agent": "queue" } },
            "flow": { "merger": ["dev"] } }),
    )
    .await;
    let start = s.git(&["rev-parse", "main"]);
    let party = s.launch("best").await;
    let end = party_end(c, &party, 90).await;
    assert_eq!(end["party"]["status"], "completed", "{end}");
    // The judge picked attempt 2; only its branch landed, squashed into one commit.
    let picked = s.events(&party, "member_picked").await;
    assert_eq!(picked.len(), 1, "{picked:?}");
    assert_eq!(picked[0]["data"]["index"], 2);
    assert_eq!(picked[0]["data"]["picked_by"], "judge");
    assert_eq!(
        std::fs::read_to_string(Path::new(&project).join("answer.txt")).unwrap(),
        "attempt 2\n"
    );
    assert_eq!(
        s.git(&["rev-list", "--count", &format!("{start}..main")]),
        "1"
    );
    let landed = s.events(&party, "party_landed").await;
    let members = landed[0]["data"]["members"].as_array().unwrap();
    let outcomes: Vec<(i64, &str)> = members
        .iter()
        .map(|m| (m["index"].as_i64().unwrap(), m["outcome"].as_str().unwrap()))
        .collect();
    assert_eq!(
        outcomes,
        [(0, "not_picked"), (1, "not_picked"), (2, "integrated")],
        "{landed:?}"
    );
    // A pick is final.
    let e = c
        .call(
            "pick_member",
            json!({ "party_id": party, "role": "dev", "index": 0 }),
        )
        .await
        .expect_err("a second pick");
    assert!(e.to_string().contains("already has its pick: dev#2"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn best_of_two_without_a_judge_asks_the_person_and_land_party_refuses_until_the_pick() {
    let s = Scenario::new().await;
    let (c, project) = (&s.person, &s.project);
    define(
        c,
        "agent",
        json!({ "name": "attempt", "command": [attempt(s.dir())], "isolation": "worktree" }),
    )
    .await;
    define(
        c,
        "party",
        json!({ "name": "duo", "roles": { "dev": { "agent": "attempt", "count": 2, "pick": {} } } }),
    )
    .await;
    let party = s.launch("duo").await;
    s.ended(&party).await;
    let asked = wait_for("the person asked to pick", 30, || async {
        let n = s.notifications(&party, "pick_needed").await;
        (!n.is_empty()).then_some(n)
    })
    .await;
    assert!(
        asked[0]["text"].as_str().unwrap().contains("role dev"),
        "{asked:?}"
    );
    let (kind, msg) = refused(c, "land_party", json!({ "party_id": party })).await;
    assert_eq!(kind, "conflict");
    assert!(
        msg.contains("none is picked yet (the person picks"),
        "{msg}"
    );
    let (kind, msg) = refused(
        c,
        "pick_member",
        json!({ "party_id": party, "role": "dev", "index": 5 }),
    )
    .await;
    assert!(kind == "not_found" && msg.contains("dev#5"), "{msg}");
    let pick = c
        .call(
            "pick_member",
            json!({ "party_id": party, "role": "dev", "index": 0, "reason": "shorter" }),
        )
        .await
        .unwrap();
    assert_eq!(pick["pick"]["picked_by"], "person");
    let landed = c
        .call("land_party", json!({ "party_id": party }))
        .await
        .unwrap();
    assert_eq!(landed["landed"], true, "{landed}");
    assert_eq!(
        std::fs::read_to_string(Path::new(&project).join("answer.txt")).unwrap(),
        "attempt 0\n"
    );
}

/// The live processes whose command line holds `marker`.
fn pids_with(marker: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| {
            let e = e.ok()?;
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            // Zombies have left already.
            let state = stat.rsplit_once(") ")?.1.chars().next()?;
            (state != 'Z' && String::from_utf8_lossy(&cmd).contains(marker)).then_some(pid)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_9_during_the_merge_queues_tests_ends_them_and_the_retry_lands_once() {
    let mut s = Scenario::new().await;
    let project = s.project.clone();
    let c = &s.person;
    let marker = format!("land-tests-{}", std::process::id());
    define(
        c,
        "agent",
        json!({ "name": "dev", "command": [puppet_script(s.dir()), "a.txt", "from dev", "-"],
                "isolation": "worktree" }),
    )
    .await;
    // The tests wait for a file in the integration checkout they run in: their box (the merge
    // queue's is no run's: the defaults, a private /tmp) shows them nothing of the test's dir.
    let wait = format!("while [ ! -f go ]; do sleep 0.05; done; echo {marker}");
    define(
        c,
        "agent",
        json!({ "name": "queue", "runner": "land", "land": { "test_command": wait } }),
    )
    .await;
    define(
        c,
        "party",
        json!({ "name": "shipit", "roles": { "dev": { "agent": "dev" },
                "merger": { "agent": "queue", "on_crash": "restart" } },
                "flow": { "merger": ["dev"] } }),
    )
    .await;
    let start = s.git(&["rev-parse", "main"]);
    let party = s.launch("shipit").await;
    // The merge queue's tests are running: kill -9 the daemon under them.
    let first = wait_for("the tests running", 60, || async {
        let pids = pids_with(&marker);
        (!pids.is_empty()).then_some(pids)
    })
    .await;
    s.kill9_and_restart().await;
    // The dead run's tests are ended by the restarted daemon; the merger is run again.
    wait_for("the first tests ended", 60, || async {
        (!pids_with(&marker).iter().any(|p| first.contains(p))).then_some(())
    })
    .await;
    // Where they run: the cwd of the test shell (not of bubblewrap, outside the box).
    let data_dir = s.daemon.layout.data_dir.clone();
    let checkout = wait_for("the retry's tests running", 60, || async {
        pids_with(&marker).into_iter().find_map(|pid| {
            std::fs::read_link(format!("/proc/{pid}/cwd"))
                .ok()
                .filter(|cwd| cwd.starts_with(&data_dir))
        })
    })
    .await;
    std::fs::write(checkout.join("go"), "").unwrap();
    let end = s.ended(&party).await;
    assert_eq!(end["party"]["status"], "completed", "{end}");
    // Landed once: the member's one commit, fast-forwarded; one landing on the timeline.
    assert_eq!(
        s.git(&["rev-list", "--count", &format!("{start}..main")]),
        "1"
    );
    assert_eq!(
        std::fs::read_to_string(Path::new(&project).join("a.txt")).unwrap(),
        "from dev\n"
    );
    assert_eq!(s.events(&party, "party_landed").await.len(), 1);
    wait_for("no test process left", 30, || async {
        pids_with(&marker).is_empty().then_some(())
    })
    .await;
}

/// Landing where people actually work: the person's checkout of the target has edits. An edit to
/// a file the landing changes refuses it, naming that file (the merge queue's role pauses and
/// says so); edits elsewhere are carried over, as git's own merge does. The person's later
/// `land_party` that lands resumes the paused role, and the party completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_checked_out_with_edits_elsewhere_lands_and_a_paused_merger_is_resumed() {
    let s = Scenario::new().await;
    let (c, project) = (&s.person, &s.project);
    let script = puppet_script(s.dir());
    define(
        c,
        "agent",
        json!({ "name": "writer", "command": [script, "README.md", "# landed", "wait"],
                "isolation": "worktree", "timeout_secs": 120 }),
    )
    .await;
    define(c, "agent", json!({ "name": "queue", "runner": "land" })).await;
    define(
        c,
        "party",
        json!({ "name": "busy", "roles": { "dev": { "agent": "writer" }, "merge": { "agent": "queue" } },
                "flow": { "merge": ["dev"] } }),
    )
    .await;
    std::fs::write(Path::new(&project).join("notes.txt"), "mine\n").unwrap();
    s.git(&["add", "notes.txt"]);
    s.git(&["commit", "-qm", "notes"]);
    let start = s.git(&["rev-parse", "main"]);
    let party = s.launch("busy").await;

    // The person is editing README.md (which the landing changes) and notes.txt (which it does
    // not) when the member finishes.
    let readme = Path::new(&project).join("README.md");
    let notes = Path::new(&project).join("notes.txt");
    std::fs::write(&readme, "my draft\n").unwrap();
    std::fs::write(&notes, "mine, edited\n").unwrap();
    let dev = wait_for("the member's session", 30, || async {
        let s = c
            .call("get_party_status", json!({ "party_id": party }))
            .await
            .unwrap();
        s["members"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["role"] == "dev" && m["session_id"].is_string())
            .map(|m| m["session_id"].as_str().unwrap().to_string())
    })
    .await;
    let person = register(c, "human", project, None).await;
    c.call(
        "send_message",
        json!({ "from_session_id": person, "to_session_id": dev, "content": "finish now" }),
    )
    .await
    .unwrap();
    let paused = merger_paused(c, &party).await;
    assert_eq!(paused["crashes"], 1, "{paused}");
    let crashed = s.events(&party, "member_crashed").await;
    let reason = crashed[0]["data"]["reason"].as_str().unwrap();
    assert!(
        reason.contains("README.md") && !reason.contains("notes.txt"),
        "only the overlapping file is named: {reason}"
    );
    assert_eq!(s.git(&["rev-parse", "main"]), start);
    assert_eq!(std::fs::read_to_string(&readme).unwrap(), "my draft\n");

    // The person puts README.md back and keeps editing notes.txt; their landing goes through,
    // carrying the edit over, and the paused merger has nothing left to do.
    s.git(&["checkout", "--", "README.md"]);
    let r = c
        .call("land_party", json!({ "party_id": party }))
        .await
        .unwrap();
    assert_eq!(r["landed"], true, "{r}");
    assert_eq!(std::fs::read_to_string(&readme).unwrap(), "# landed\n");
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "mine, edited\n");
    assert_eq!(
        s.git(&["status", "--porcelain"]),
        "M notes.txt",
        "the person's edit is still theirs"
    );
    let end = s.ended(&party).await;
    assert_eq!(end["party"]["status"], "completed", "{end}");
}

/// A member's change to the project's Troupe config (`.troupe/`: its team, playbooks, sandbox
/// setting) is the person's to land: the merge queue leaves it out and says why; the person's
/// own `land_party` lands it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_merge_queue_leaves_a_members_change_to_the_troupe_config_for_the_person() {
    let s = Scenario::new().await;
    let (c, project) = (&s.person, &s.project);
    let script = executable(
        s.dir(),
        "sly.sh",
        "#!/bin/sh\nset -e\nmkdir -p .troupe\nprintf '[sandbox]\\napprove_own_checkout_edits = true\\n' > .troupe/config.toml\n\
         git add -A\ngit -c user.name=m -c user.email=m@t commit -qm 'loosen the sandbox'\n\
         troupe call complete '{\"output\":\"done\"}' >/dev/null\n",
    );
    define(
        c,
        "agent",
        json!({ "name": "sly", "command": [script], "isolation": "worktree" }),
    )
    .await;
    define(c, "agent", json!({ "name": "queue", "runner": "land" })).await;
    define(
        c,
        "party",
        json!({ "name": "config", "roles": { "dev": { "agent": "sly" }, "merge": { "agent": "queue" } },
                "flow": { "merge": ["dev"] } }),
    )
    .await;
    let start = s.git(&["rev-parse", "main"]);
    let party = s.launch("config").await;
    merger_paused(c, &party).await;
    assert_eq!(s.git(&["rev-parse", "main"]), start, "nothing landed");
    let held = s.notifications(&party, "landing_held").await;
    let text = held[0]["text"].as_str().unwrap();
    assert!(
        text.contains("dev#0") && text.contains(".troupe/config.toml"),
        "{text}"
    );

    // The person looks and lands it.
    let r = c
        .call("land_party", json!({ "party_id": party }))
        .await
        .unwrap();
    assert_eq!(r["landed"], true, "{r}");
    assert!(Path::new(&project).join(".troupe/config.toml").exists());
    let end = s.ended(&party).await;
    assert_eq!(end["party"]["status"], "completed", "{end}");
}

/// Waits for the `merge` role of `party` to pause (on a refusal); its role status.
async fn merger_paused(c: &Client, party: &str) -> Value {
    wait_for("the merger to pause", 60, || async {
        let s = c
            .call("get_party_status", json!({ "party_id": party }))
            .await
            .unwrap();
        s["roles"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["role"] == "merge" && r["paused"] == true)
            .cloned()
    })
    .await
}
