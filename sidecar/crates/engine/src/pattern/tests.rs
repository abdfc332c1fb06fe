//! Pattern traces as text fixtures (seed 002's matrix): each script line is one input at time
//! t<n> (seconds); the trace shows what the flow decided. Agents are compact JSON.

use expect_test::{Expect, expect};
use serde_json::json;

use crate::AgentDefinition;
use crate::pattern::{Action, Flow, Input, Outcome, check_patterns, enriched_prompt};

fn agents(defs: serde_json::Value) -> Vec<AgentDefinition> {
    defs.as_array()
        .unwrap()
        .iter()
        .map(|d| {
            let mut d = d.clone();
            d["command"] = json!(["true"]);
            serde_json::from_value(d).unwrap()
        })
        .collect()
}

fn describe(a: &Action) -> String {
    match a {
        Action::Run {
            step,
            agent,
            trigger,
            route,
            prompt,
            team,
            ..
        } => {
            let first = prompt.lines().next().unwrap_or("");
            match (route, team) {
                (Some(c), _) => format!("route #{step} {agent} [{}]", c.join(" ")),
                (None, Some(chair)) => {
                    let news = prompt
                        .split("## TEAM CHANNEL (since your last turn)\n\n")
                        .nth(1)
                        .or_else(|| prompt.split("## TEAM TRANSCRIPT\n\n").nth(1))
                        .unwrap_or("")
                        .lines()
                        .filter(|l| l.starts_with("### "))
                        .map(|l| l.trim_start_matches("### ").to_string())
                        .collect::<Vec<_>>()
                        .join(", ");
                    let seat = if *chair { "chair" } else { "seat" };
                    let last = if prompt.contains("## TEAM TRANSCRIPT") {
                        " final"
                    } else {
                        ""
                    };
                    format!("{seat}{last} #{step} {agent} [{news}]")
                }
                (None, None) => format!("run #{step} {agent} ({}) <{first}>", trigger.as_str()),
            }
        }
        Action::AskRouter {
            node,
            plugin,
            candidates,
            ..
        } => format!("ask {plugin} n{node} [{}]", candidates.join(" ")),
        Action::Stop { step } => format!("stop #{step}"),
        Action::WakeAt { at_ms } => format!("wake t{}", at_ms / 1000),
        Action::Event { kind, .. } => format!("event {kind}"),
        Action::Finished(end) => match &end.error {
            None => format!(
                "finished {} <{}> chain {}",
                end.status,
                end.output,
                end.chain.join(">")
            ),
            Some(e) => format!("finished {}: {e}", end.status),
        },
    }
}

fn parse(line: &str) -> Input {
    let words: Vec<&str> = line.split_whitespace().collect();
    let step = |w: &str| w.trim_start_matches('#').parse().unwrap();
    match words.as_slice() {
        ["start"] => Input::Start,
        ["tick"] => Input::Tick,
        ["cancel"] => Input::Cancel,
        ["done", s, out @ ..] => Input::StepEnded {
            step: step(s),
            outcome: Outcome::Done {
                output: out.join(" "),
            },
        },
        ["fail", s, why @ ..] => Input::StepEnded {
            step: step(s),
            outcome: Outcome::Failed {
                reason: why.join(" "),
            },
        },
        ["lost", s] => Input::StepEnded {
            step: step(s),
            outcome: Outcome::Lost,
        },
        ["routed", n, agent, why @ ..] => Input::Routed {
            node: n.trim_start_matches('n').parse().unwrap(),
            choice: Ok((agent.to_string(), why.join(" "))),
        },
        ["say", s, text @ ..] => Input::TeamBroadcast {
            step: step(s),
            message: text.join(" "),
        },
        ["vote", s] => Input::TeamVote {
            step: step(s),
            reason: "done".into(),
        },
        ["conclude", s, text @ ..] => Input::TeamConclude {
            step: step(s),
            answer: text.join(" "),
        },
        ["noroute", n, why @ ..] => Input::Routed {
            node: n.trim_start_matches('n').parse().unwrap(),
            choice: Err(why.join(" ")),
        },
        other => panic!("unknown script line {other:?}"),
    }
}

fn check(defs: serde_json::Value, root: &str, script: &str, expect: Expect) {
    let defs = agents(defs);
    for d in &defs {
        let lookup = |n: &str| defs.iter().find(|d| d.name == n).cloned();
        check_patterns(d, &lookup).unwrap();
    }
    let lookup = |n: &str| defs.iter().find(|d| d.name == n).cloned();
    let mut flow = Flow::new(root, "the request");
    let mut trace = String::new();
    for (t, line) in script
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .enumerate()
    {
        let at_prefix = line.split_once(": ").and_then(|(at, rest)| {
            let secs = at.strip_prefix('t')?.parse::<u64>().ok()?;
            Some((secs, rest))
        });
        let (at, line) = at_prefix.unwrap_or((t as u64, line));
        let mut out = Vec::new();
        flow.step(parse(line), at * 1000, &lookup, &mut out);
        // A flow survives a restart: its state goes to the store as JSON and back.
        flow = serde_json::from_str(&serde_json::to_string(&flow).unwrap()).unwrap();
        let actions: Vec<String> = out.iter().map(describe).collect();
        trace.push_str(&format!("t{at} {line} => {}\n", actions.join("; ")));
    }
    expect.assert_eq(&trace);
}

#[test]
fn handoff_single_and_multi_hop() {
    check(
        json!([{ "name": "a", "handoff": "b" }, { "name": "b", "handoff": "c" }, { "name": "c" }]),
        "a",
        "start\n done #1 draft\n done #2 reviewed\n done #3 approved",
        expect![[r#"
            t0 start => run #1 a (root) <the request>
            t1 done #1 draft => event pattern_handoff; run #2 b (handoff) <Reason: handoff from a. Its output follows; continue from it.>
            t2 done #2 reviewed => event pattern_handoff; run #3 c (handoff) <Reason: handoff from b. Its output follows; continue from it.>
            t3 done #3 approved => finished success <approved> chain a>b>c
        "#]],
    );
}

#[test]
fn a_failed_hop_fails_the_chain_naming_it_and_a_lost_one_runs_again() {
    check(
        json!([{ "name": "a", "handoff": "b" }, { "name": "b" }]),
        "a",
        "start\n lost #1\n done #2 draft\n fail #3 crashed: exit 3",
        expect![[r#"
            t0 start => run #1 a (root) <the request>
            t1 lost #1 => run #2 a (root) <the request>
            t2 done #2 draft => event pattern_handoff; run #3 b (handoff) <Reason: handoff from a. Its output follows; continue from it.>
            t3 fail #3 crashed: exit 3 => finished failed: a -> b: crashed: exit 3
        "#]],
    );
}

#[test]
fn router_runs_its_choice_on_the_original_input() {
    check(
        json!([
            { "name": "desk", "router": { "agents": ["billing", "tech"] } },
            { "name": "billing" }, { "name": "tech", "handoff": "qa" }, { "name": "qa" }
        ]),
        "desk",
        "start\n routed n0 tech it is a crash\n done #2 fixed\n done #3 checked",
        expect![[r#"
            t0 start => route #1 desk [billing tech]
            t1 routed n0 tech it is a crash => event pattern_routed; run #2 tech (router) <the request>
            t2 done #2 fixed => event pattern_handoff; run #3 qa (handoff) <Reason: handoff from tech. Its output follows; continue from it.>
            t3 done #3 checked => finished success <checked> chain desk>tech>qa
        "#]],
    );
}

#[test]
fn router_without_a_suitable_agent_or_with_a_choice_outside_its_list_fails_naming_it() {
    let defs = json!([
        { "name": "desk", "router": { "agents": ["billing", "tech"] } },
        { "name": "billing" }, { "name": "tech" }
    ]);
    check(
        defs.clone(),
        "desk",
        "start\n noroute n0 nothing fits",
        expect![[r#"
            t0 start => route #1 desk [billing tech]
            t1 noroute n0 nothing fits => finished failed: router desk found no suitable agent among billing, tech (nothing fits)
        "#]],
    );
    check(
        defs,
        "desk",
        "start\n routed n0 legal sounds legal",
        expect![[r#"
            t0 start => route #1 desk [billing tech]
            t1 routed n0 legal sounds legal => finished failed: router desk chose legal, which is not one of its agents (billing, tech)
        "#]],
    );
}

#[test]
fn a_router_plugin_is_asked_instead_of_a_run() {
    check(
        json!([
            { "name": "desk", "router": { "agents": ["billing", "tech"], "via": "plugin:router-keyword" } },
            { "name": "billing" }, { "name": "tech" }
        ]),
        "desk",
        "start\n routed n0 billing keyword\n done #1 refunded",
        expect![[r#"
            t0 start => ask router-keyword n0 [billing tech]
            t1 routed n0 billing keyword => event pattern_routed; run #1 billing (router) <the request>
            t2 done #1 refunded => finished success <refunded> chain desk>billing
        "#]],
    );
}

#[test]
fn advisors_run_in_parallel_and_a_failed_or_late_one_leaves_a_placeholder() {
    check(
        json!([
            { "name": "lead", "advisors": ["legal", "risk", "ops"], "advisor_timeout_secs": 10 },
            { "name": "legal" }, { "name": "risk" }, { "name": "ops" }
        ]),
        "lead",
        "t0: start\n t1: done #1 fine by law\n t2: fail #2 crashed\n t10: tick\n t11: done #3 too late\n t12: done #4 go",
        expect![[r#"
            t0 start => event pattern_advisors; wake t10; run #1 legal (advisor) <the request>; run #2 risk (advisor) <the request>; run #3 ops (advisor) <the request>
            t1 done #1 fine by law => event pattern_advisor_done
            t2 fail #2 crashed => event pattern_advisor_failed
            t10 tick => stop #3; event pattern_advisor_timeout; run #4 lead (root) <## ORIGINAL USER REQUEST>
            t11 done #3 too late => 
            t12 done #4 go => finished success <go> chain lead
        "#]],
    );
}

#[test]
fn the_enriched_message_is_the_seeds_format() {
    expect![[r#"
        ## ORIGINAL USER REQUEST

        ship it?

        ## ANALYSIS GATHERED

        ### From legal

        fine

        ### From risk

        [advisor risk gave no analysis: it timed out]
    "#]]
    .assert_eq(&enriched_prompt(
        "ship it?",
        &[
            ("legal".into(), "fine".into()),
            (
                "risk".into(),
                "[advisor risk gave no analysis: it timed out]".into(),
            ),
        ],
    ));
}

#[test]
fn handoff_with_advisors_composes_and_cancel_stops_every_step() {
    check(
        json!([
            { "name": "a", "advisors": ["x", "y"], "handoff": "b" },
            { "name": "x" }, { "name": "y" }, { "name": "b" }
        ]),
        "a",
        "start\n done #1 ok\n done #2 ok too\n done #3 plan\n cancel\n done #4 late",
        expect![[r#"
            t0 start => event pattern_advisors; run #1 x (advisor) <the request>; run #2 y (advisor) <the request>
            t1 done #1 ok => event pattern_advisor_done
            t2 done #2 ok too => event pattern_advisor_done; run #3 a (root) <## ORIGINAL USER REQUEST>
            t3 done #3 plan => event pattern_handoff; run #4 b (handoff) <Reason: handoff from a. Its output follows; continue from it.>
            t4 cancel => stop #4; finished cancelled: cancelled
            t5 done #4 late => 
        "#]],
    );
}

#[test]
fn bad_patterns_are_refused_naming_what_is_wrong() {
    let all = agents(json!([
        { "name": "a", "handoff": "b" }, { "name": "b", "handoff": "a" },
        { "name": "r", "router": { "agents": ["a"] }, "allow_nested_agents": true },
        { "name": "n", "handoff": "ghost" },
        { "name": "m", "advisors": ["a"] },
        { "name": "e", "router": { "agents": [] } },
        { "name": "v", "router": { "agents": ["a"], "via": "magic" } },
        { "name": "loop", "router": { "agents": ["loop2"] } },
        { "name": "loop2", "advisors": ["w"] },
        { "name": "w", "handoff": "loop" },
    ]));
    let lookup = |n: &str| all.iter().find(|d| d.name == n).cloned();
    let errors: Vec<String> = all
        .iter()
        .map(|d| match check_patterns(d, &lookup) {
            Ok(()) => format!("{}: ok", d.name),
            Err(e) => format!("{}: {e}", d.name),
        })
        .collect();
    expect![[r#"
        a: handoff cycle: a -> b -> a
        b: handoff cycle: b -> a -> b
        r: router r cannot have subagents (allow_nested_agents): a router only routes
        n: the handoff of agent n names agent ghost, which does not exist
        m: advisor a of agent m is not terminal: it hands off to b
        e: router e lists no agents to choose from
        v: router v: via must be "llm" or "plugin:<router plugin>", not "magic"
        loop: pattern cycle: loop -> loop2 -> w -> loop
        loop2: advisor w of agent loop2 is not terminal: it hands off to loop
        w: pattern cycle: w -> loop -> loop2 -> w
    "#]]
    .assert_eq(&(errors.join("\n") + "\n"));
}

#[test]
fn a_team_of_two_reaches_consensus_and_its_coordinator_answers() {
    check(
        json!([
            { "name": "panel", "team": { "members": ["dev", "sec"], "coordinator": "dev" } },
            { "name": "dev" }, { "name": "sec" }
        ]),
        "panel",
        "start\n say #1 use rust\n say #2 check inputs\n done #1 ok\n done #2 ok\n vote #3\n vote #4\n done #3 ok\n done #4 ok\n done #5 ship it in rust, inputs checked",
        expect![[r#"
            t0 start => event team_started; event team_round; chair #1 dev []; seat #2 sec []
            t1 say #1 use rust => event team_broadcast
            t2 say #2 check inputs => event team_broadcast
            t3 done #1 ok => 
            t4 done #2 ok => event team_round; chair #3 dev [dev (round 1), sec (round 1)]; seat #4 sec [dev (round 1), sec (round 1)]
            t5 vote #3 => event team_vote
            t6 vote #4 => event team_vote
            t7 done #3 ok => 
            t8 done #4 ok => event team_finished; chair final #5 dev [dev (round 1), sec (round 1)]
            t9 done #5 ship it in rust, inputs checked => finished success <ship it in rust, inputs checked> chain panel>dev
        "#]],
    );
}

#[test]
fn a_team_of_four_stops_after_max_rounds_and_a_failed_turn_is_noted() {
    check(
        json!([
            { "name": "board", "team": { "members": ["a", "b", "c", "d"], "coordinator": "a",
                                         "termination": "max_rounds", "max_rounds": 1 } },
            { "name": "a" }, { "name": "b" }, { "name": "c" }, { "name": "d" }
        ]),
        "board",
        "start\n say #3 c thinks so\n done #1 a\n fail #2 crashed\n lost #3\n done #4 d\n done #5 c again\n done #6 the board agrees",
        expect![[r#"
            t0 start => event team_started; event team_round; chair #1 a []; seat #2 b []; seat #3 c []; seat #4 d []
            t1 say #3 c thinks so => event team_broadcast
            t2 done #1 a => 
            t3 fail #2 crashed => 
            t4 lost #3 => seat #5 c []
            t5 done #4 d => 
            t6 done #5 c again => event team_finished; chair final #6 a [c (round 1), troupe (round 1)]
            t7 done #6 the board agrees => finished success <the board agrees> chain board>a
        "#]],
    );
}

#[test]
fn a_coordinator_concludes_when_it_decides_and_a_member_chain_speaks_through_its_last_agent() {
    check(
        json!([
            { "name": "room", "team": { "members": ["writer", "lead"], "coordinator": "lead",
                                        "termination": "coordinator_decides" } },
            { "name": "writer", "handoff": "editor" }, { "name": "editor" }, { "name": "lead" }
        ]),
        "room",
        "start\n conclude #1 not mine to say\n say #2 draft ready\n conclude #2 publish the draft\n done #1 ok\n done #2 ok",
        expect![[r#"
            t0 start => event team_started; event team_round; seat #1 editor []; chair #2 lead []
            t1 conclude #1 not mine to say => event team_conclude_refused
            t2 say #2 draft ready => event team_broadcast
            t3 conclude #2 publish the draft => event team_concluded
            t4 done #1 ok => 
            t5 done #2 ok => event team_finished; finished success <publish the draft> chain room>lead
        "#]],
    );
}

#[test]
fn bad_teams_are_refused() {
    let all = agents(json!([
        { "name": "t1", "team": { "members": [], "coordinator": "x" } },
        { "name": "t2", "team": { "members": ["x"], "coordinator": "y" } },
        { "name": "t3", "team": { "members": ["x"], "coordinator": "x", "termination": "max_rounds" } },
        { "name": "t4", "team": { "members": ["x", "t4"], "coordinator": "x" } },
        { "name": "x" }, { "name": "y", "handoff": "x" },
    ]));
    let lookup = |n: &str| all.iter().find(|d| d.name == n).cloned();
    let errors: Vec<String> = all
        .iter()
        .filter(|d| d.team.is_some())
        .map(|d| match check_patterns(d, &lookup) {
            Ok(()) => format!("{}: ok", d.name),
            Err(e) => format!("{}: {e}", d.name),
        })
        .collect();
    expect![[r#"
        t1: team t1 has no members
        t2: team coordinator y of team t2 cannot have a handoff (to x): the team owns the final answer
        t3: team t3 ends after max_rounds: say how many (max_rounds)
        t4: team cycle: t4 -> t4
    "#]]
    .assert_eq(&(errors.join("\n") + "\n"));
}

#[test]
fn a_members_turn_shows_its_earlier_answers_and_the_news() {
    use crate::pattern::{Post, SeatView, team_prompt};
    let said = ["looks risky".to_string()];
    let view = SeatView {
        team: "panel",
        speaker: "sec",
        coordinator: false,
        round: 2,
        max_rounds: 5,
        said: &said,
    };
    let news = [Post {
        from: "dev".into(),
        round: 1,
        text: "inputs are checked now".into(),
    }];
    expect![[r#"
        review the design

        ## TEAM

        You are sec, a member of team panel (round 2 of at most 5). Share what the others should know with `team_broadcast`; call `vote_conclude` when you think the team is done.

        ## YOUR EARLIER TURNS

        - round 1: looks risky

        ## TEAM CHANNEL (since your last turn)

        ### dev (round 1)

        inputs are checked now
    "#]]
    .assert_eq(&team_prompt("review the design", &view, &news));
}

#[test]
fn an_advisor_that_no_longer_exists_does_not_start_the_agent_before_the_others() {
    // `ghost` was deleted after `lead` was written: it fails at once; `c` still runs first.
    let defs = agents(json!([{ "name": "lead", "advisors": ["ghost", "c"] }, { "name": "c" }]));
    let lookup = |n: &str| defs.iter().find(|d| d.name == n).cloned();
    let mut flow = Flow::new("lead", "go");
    let mut out = Vec::new();
    flow.step(Input::Start, 0, &lookup, &mut out);
    let runs: Vec<String> = out
        .iter()
        .filter_map(|a| match a {
            Action::Run { agent, .. } => Some(agent.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(runs, ["c"], "only the advisor that exists runs: {out:?}");
    let mut out = Vec::new();
    flow.step(
        Input::StepEnded {
            step: 1,
            outcome: Outcome::Done {
                output: "ok".into(),
            },
        },
        1,
        &lookup,
        &mut out,
    );
    let prompt = out
        .iter()
        .find_map(|a| match a {
            Action::Run { agent, prompt, .. } if agent == "lead" => Some(prompt.clone()),
            _ => None,
        })
        .expect("lead runs once c has answered");
    assert!(
        prompt.contains("[advisor ghost gave no analysis: agent ghost does not exist]"),
        "{prompt}"
    );
    assert!(prompt.contains("### From c\n\nok"), "{prompt}");
}

#[test]
fn a_restarted_daemon_asks_router_plugins_again_and_wakes_for_deadlines() {
    let defs = agents(json!([
        { "name": "desk", "router": { "agents": ["a"], "via": "plugin:kw" } },
        { "name": "lead", "advisors": ["a"], "advisor_timeout_secs": 30 },
        { "name": "a" }
    ]));
    let lookup = |n: &str| defs.iter().find(|d| d.name == n).cloned();
    let mut desk = Flow::new("desk", "go");
    desk.step(Input::Start, 0, &lookup, &mut Vec::new());
    let desk: Flow = serde_json::from_str(&serde_json::to_string(&desk).unwrap()).unwrap();
    assert!(matches!(
        desk.pending_actions(&lookup)[..],
        [Action::AskRouter { .. }]
    ));
    let mut lead = Flow::new("lead", "go");
    lead.step(Input::Start, 1000, &lookup, &mut Vec::new());
    assert_eq!(
        lead.pending_actions(&lookup),
        [Action::WakeAt { at_ms: 31_000 }]
    );
    assert!(Flow::new("lead", "go").is_fresh() && !lead.is_fresh());
}
