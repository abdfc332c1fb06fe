//! Scheduler traces as text fixtures: each line of a script is one input at time t<n>; the
//! trace shows what the engine decided. Definitions are written as compact JSON.

use expect_test::{Expect, expect};
use serde_json::json;

use crate::{Action, Decision, Input, Party, PartyDefinition, Signal, SpecError, Strategy};

fn def(v: serde_json::Value) -> PartyDefinition {
    let d: PartyDefinition = serde_json::from_value(v).unwrap();
    d.validate(|_| true).unwrap();
    d
}

fn member(s: &str) -> (String, u32) {
    let (role, index) = s.split_once('#').unwrap();
    (role.to_string(), index.parse().unwrap())
}

fn parse(line: &str) -> Input {
    let words: Vec<&str> = line.split_whitespace().collect();
    match words.as_slice() {
        ["launch"] => Input::Launch,
        ["cancel"] => Input::Cancel,
        ["done", m] => {
            let (role, index) = member(m);
            Input::Completed { role, index }
        }
        ["crash", m, reason @ ..] => {
            let (role, index) = member(m);
            Input::Crashed {
                role,
                index,
                reason: reason.join(" "),
            }
        }
        ["budget", m, reason @ ..] => {
            let (role, index) = member(m);
            Input::BudgetTripped {
                role,
                index,
                reason: reason.join(" "),
            }
        }
        ["signal", role, signal] => Input::Signal {
            role: role.to_string(),
            signal: serde_json::from_value(json!(signal)).unwrap(),
        },
        ["override", role, strategy] => Input::OverrideRecovery {
            role: role.to_string(),
            strategy: serde_json::from_value(json!(strategy)).unwrap(),
        },
        ["decide", m, n, "restart"] => {
            let (role, index) = member(m);
            Input::RecoveryDecided {
                crash_count: n.parse().unwrap(),
                role,
                index,
                decision: Decision::Restart,
            }
        }
        ["decide", m, n, "pause", why @ ..] => {
            let (role, index) = member(m);
            Input::RecoveryDecided {
                crash_count: n.parse().unwrap(),
                role,
                index,
                decision: Decision::Pause {
                    notify: crate::NotifyTarget::User,
                    why: why.join(" "),
                },
            }
        }
        ["decide", m, n, "abort", why @ ..] => {
            let (role, index) = member(m);
            Input::RecoveryDecided {
                crash_count: n.parse().unwrap(),
                role,
                index,
                decision: Decision::Abort { why: why.join(" ") },
            }
        }
        _ => panic!("bad script line {line:?}"),
    }
}

fn render(a: &Action) -> String {
    match a {
        Action::Spawn {
            role,
            index,
            attempt: 1,
        } => format!("spawn {role}#{index}"),
        Action::Spawn {
            role,
            index,
            attempt,
        } => format!("spawn {role}#{index} (attempt {attempt})"),
        Action::Stop { role, index } => format!("stop {role}#{index}"),
        Action::Notify { target, text } => format!("notify {target:?}: {text}").to_lowercase(),
        Action::ConsultRecovery {
            role,
            index,
            plugin,
            crash_count,
            retry_limit,
            reason,
        } => format!(
            "ask {plugin} about {role}#{index} (crash {crash_count} of {retry_limit}: {reason})"
        ),
        Action::RoleCompleted { role } => format!("{role} complete"),
        Action::Finished { status, reason } => format!("party {} ({reason})", status.as_str()),
    }
}

fn check(definition: PartyDefinition, script: &str, expected: Expect) {
    let mut party = Party::new(definition);
    let mut out = String::new();
    for (t, line) in script
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .enumerate()
    {
        let result = party.step(parse(line), t as u64);
        let rendered = match result {
            Ok(actions) if actions.is_empty() => "-".to_string(),
            Ok(actions) => actions.iter().map(render).collect::<Vec<_>>().join("; "),
            Err(e) => format!("error: {e}"),
        };
        out.push_str(&format!("t{t} {line} => {rendered}\n"));
    }
    expected.assert_eq(&out);
}

fn feature_development() -> PartyDefinition {
    def(json!({
        "name": "feature-development",
        "roles": {
            "leader": { "agent": "coordinator", "is_leader": true },
            "developer": { "agent": "dev", "count": 2, "on_crash": "restart", "retry_attempts": 2 },
            "qa": { "agent": "qa", "on_crash": "pause", "notify": "leader" },
            "merger": { "agent": "merge", "on_crash": "pause", "notify": "user" }
        },
        "flow": { "leader": [], "developer": ["leader"], "qa": ["developer"], "merger": ["qa"] },
        "recovery": { "on_crash": "pause", "notify": "leader", "max_retries": 2 }
    }))
}

#[test]
fn linear() {
    let d = def(json!({
        "name": "linear",
        "roles": { "a": { "agent": "x" }, "b": { "agent": "x" }, "c": { "agent": "x" } },
        "flow": { "b": ["a"], "c": ["b"] }
    }));
    check(
        d,
        "launch\ndone a#0\ndone b#0\ndone c#0\ndone c#0",
        expect![[r#"
        t0 launch => spawn a#0
        t1 done a#0 => a complete; notify leader: role a completed; spawn b#0
        t2 done b#0 => b complete; notify leader: role b completed; spawn c#0
        t3 done c#0 => c complete; notify leader: role c completed; party completed (every role completed)
        t4 done c#0 => -
    "#]],
    );
}

#[test]
fn fan_out_fan_in_with_count_2() {
    check(
        feature_development(),
        "
        launch
        done leader#0
        done developer#1
        done developer#0
        done qa#0
        done merger#0
    ",
        expect![[r#"
        t0 launch => spawn leader#0
        t1 done leader#0 => leader complete; spawn developer#0; spawn developer#1
        t2 done developer#1 => -
        t3 done developer#0 => developer complete; notify leader: role developer completed; spawn qa#0
        t4 done qa#0 => qa complete; notify leader: role qa completed; spawn merger#0
        t5 done merger#0 => merger complete; notify leader: role merger completed; party completed (every role completed)
    "#]],
    );
}

#[test]
fn restart_until_retries_run_out() {
    check(
        feature_development(),
        "
        launch
        done leader#0
        crash developer#0 exit status 1
        crash developer#0 exit status 1
        done developer#1
        crash developer#0 killed by signal 9
        signal developer retry
        done developer#0
    ",
        expect![[r#"
        t0 launch => spawn leader#0
        t1 done leader#0 => leader complete; spawn developer#0; spawn developer#1
        t2 crash developer#0 exit status 1 => notify leader: developer#0 crashed (exit status 1); restarting it (retry 1 of 2); spawn developer#0 (attempt 2)
        t3 crash developer#0 exit status 1 => notify leader: developer#0 crashed (exit status 1); restarting it (retry 2 of 2); spawn developer#0 (attempt 3)
        t4 done developer#1 => -
        t5 crash developer#0 killed by signal 9 => notify leader: developer#0 crashed (killed by signal 9); role developer is paused because it crashed 3 times, the retry limit is 2: signal_role proceed, retry or abort
        t6 signal developer retry => spawn developer#0 (attempt 4)
        t7 done developer#0 => developer complete; notify leader: role developer completed; spawn qa#0
    "#]],
    );
}

#[test]
fn pause_and_signal_proceed() {
    check(
        feature_development(),
        "
        launch
        done leader#0
        done developer#0
        done developer#1
        crash qa#0 exit status 2
        signal merger proceed
        signal qa proceed
        crash merger#0 timeout
        signal merger abort
        cancel
    ",
        expect![[r#"
            t0 launch => spawn leader#0
            t1 done leader#0 => leader complete; spawn developer#0; spawn developer#1
            t2 done developer#0 => -
            t3 done developer#1 => developer complete; notify leader: role developer completed; spawn qa#0
            t4 crash qa#0 exit status 2 => notify leader: qa#0 crashed (exit status 2); role qa is paused because its recovery strategy is pause: signal_role proceed, retry or abort
            t5 signal merger proceed => error: role merger is neither paused nor waiting for a signal
            t6 signal qa proceed => qa complete; notify leader: role qa completed; spawn merger#0
            t7 crash merger#0 timeout => notify user: merger#0 crashed (timeout); role merger is paused because its recovery strategy is pause: signal_role proceed, retry or abort
            t8 signal merger abort => notify user: party feature-development failed: aborted by a signal to role merger; party failed (aborted by a signal to role merger)
            t9 cancel => error: the party is already failed
        "#]],
    );
}

#[test]
fn abort_stops_everyone() {
    let d = def(json!({
        "name": "p",
        "roles": { "a": { "agent": "x", "count": 3, "on_crash": "abort" }, "b": { "agent": "x" } },
        "flow": { "b": ["a"] }
    }));
    check(
        d,
        "launch\ndone a#2\ncrash a#0 exit status 101\ndone a#1",
        expect![[r#"
        t0 launch => spawn a#0; spawn a#1; spawn a#2
        t1 done a#2 => -
        t2 crash a#0 exit status 101 => stop a#1; notify leader: party p failed: a#0 crashed (exit status 101) and its recovery strategy is abort; party failed (a#0 crashed (exit status 101) and its recovery strategy is abort)
        t3 done a#1 => -
    "#]],
    );
}

#[test]
fn runtime_override_and_cancel() {
    check(
        feature_development(),
        "
        launch
        override leader restart
        crash leader#0 exit status 1
        override ghost abort
        override leader abort
        crash leader#0 exit status 1
    ",
        expect![[r#"
        t0 launch => spawn leader#0
        t1 override leader restart => -
        t2 crash leader#0 exit status 1 => notify leader: leader#0 crashed (exit status 1); restarting it (retry 1 of 2); spawn leader#0 (attempt 2)
        t3 override ghost abort => error: the party has no role "ghost"
        t4 override leader abort => -
        t5 crash leader#0 exit status 1 => notify leader: party feature-development failed: leader#0 crashed (exit status 1) and its recovery strategy is abort; party failed (leader#0 crashed (exit status 1) and its recovery strategy is abort)
    "#]],
    );
    check(
        feature_development(),
        "launch\ndone leader#0\ncancel\nlaunch",
        expect![[r#"
        t0 launch => spawn leader#0
        t1 done leader#0 => leader complete; spawn developer#0; spawn developer#1
        t2 cancel => stop developer#0; stop developer#1; notify leader: party feature-development cancelled: cancelled; party cancelled (cancelled)
        t3 launch => error: the party was already launched
    "#]],
    );
}

#[test]
fn validation_names_what_is_wrong() {
    let base = json!({
        "name": "p",
        "roles": { "a": { "agent": "x" }, "b": { "agent": "x" }, "c": { "agent": "x" } },
        "flow": { "a": ["c"], "b": ["a"], "c": ["b"] }
    });
    let d: PartyDefinition = serde_json::from_value(base).unwrap();
    assert_eq!(
        d.validate(|_| true).unwrap_err().to_string(),
        "the flow has a cycle: a -> b -> c -> a"
    );
    let mut d2 = d.clone();
    d2.flow.clear();
    assert_eq!(
        d2.validate(|a| a != "x").unwrap_err(),
        SpecError::UnknownAgent {
            role: "a".into(),
            agent: "x".into()
        }
    );
    let mut d3 = d2.clone();
    d3.roles.get_mut("a").unwrap().is_leader = true;
    d3.roles.get_mut("c").unwrap().is_leader = true;
    assert_eq!(
        d3.validate(|_| true).unwrap_err(),
        SpecError::TwoLeaders("a".into(), "c".into())
    );
    let mut d4 = d2.clone();
    d4.flow.insert("b".into(), vec!["nope".into()]);
    assert_eq!(
        d4.validate(|_| true).unwrap_err(),
        SpecError::UnknownFlowRole("nope".into())
    );
    let mut d5 = d2.clone();
    d5.roles.get_mut("b").unwrap().count = 0;
    assert_eq!(
        d5.validate(|_| true).unwrap_err(),
        SpecError::ZeroCount("b".into())
    );
    let mut d6 = d2.clone();
    d6.name = "../etc".into();
    assert!(matches!(d6.validate(|_| true), Err(SpecError::BadName(_))));
    let mut d7 = d2;
    d7.flow.insert("a".into(), vec!["a".into()]);
    assert_eq!(
        d7.validate(|_| true).unwrap_err().to_string(),
        "the flow has a cycle: a -> a"
    );
    let bad: Result<PartyDefinition, _> = serde_json::from_value(json!({
        "name": "p", "roles": { "a": { "agent": "x", "on_crash": "explode" } }
    }));
    assert!(bad.unwrap_err().to_string().contains("explode"));
    let _ = (Signal::Proceed, Strategy::Restart);
}

#[test]
fn a_recovery_plugin_decides_each_crash() {
    let d = def(json!({
        "name": "plugged",
        "roles": {
            "dev": { "agent": "x", "count": 2, "on_crash": "plugin:recovery-backoff" },
            "qa": { "agent": "x" }
        },
        "flow": { "qa": ["dev"] },
        "recovery": { "max_retries": 3 }
    }));
    check(
        d,
        "launch
         crash dev#0 exit status 1
         crash dev#0 late report
         decide dev#0 1 restart
         crash dev#1 exit status 2
         decide dev#1 1 pause backoff gave up
         done dev#0
         decide dev#0 1 restart
         signal dev proceed
         crash qa#0 exit status 3
         override qa plugin:strict
         ",
        expect![[r#"
            t0 launch => spawn dev#0; spawn dev#1
            t1 crash dev#0 exit status 1 => ask recovery-backoff about dev#0 (crash 1 of 3: exit status 1)
            t2 crash dev#0 late report => -
            t3 decide dev#0 1 restart => notify leader: dev#0 crashed; its recovery plugin restarts it (crash 1); spawn dev#0 (attempt 2)
            t4 crash dev#1 exit status 2 => ask recovery-backoff about dev#1 (crash 1 of 3: exit status 2)
            t5 decide dev#1 1 pause backoff gave up => notify user: dev#1 crashed 1 times; role dev is paused because backoff gave up: signal_role proceed, retry or abort
            t6 done dev#0 => -
            t7 decide dev#0 1 restart => -
            t8 signal dev proceed => dev complete; notify leader: role dev completed; spawn qa#0
            t9 crash qa#0 exit status 3 => notify leader: qa#0 crashed (exit status 3); role qa is paused because its recovery strategy is pause: signal_role proceed, retry or abort
            t10 override qa plugin:strict => -
        "#]],
    );
    // An abort decision fails the party; a decision for a cancelled member is moot.
    let d = def(json!({
        "name": "plugged",
        "roles": { "dev": { "agent": "x", "count": 2, "on_crash": "plugin:strict" } }
    }));
    check(
        d,
        "launch
         crash dev#0 boom
         decide dev#0 2 restart
         decide dev#0 1 abort it gave up
         decide dev#1 1 restart
         ",
        expect![[r#"
            t0 launch => spawn dev#0; spawn dev#1
            t1 crash dev#0 boom => ask strict about dev#0 (crash 1 of 2: boom)
            t2 decide dev#0 2 restart => -
            t3 decide dev#0 1 abort it gave up => stop dev#1; notify leader: party plugged failed: dev#0 crashed and it gave up; party failed (dev#0 crashed and it gave up)
            t4 decide dev#1 1 restart => -
        "#]],
    );
    assert_eq!(
        Strategy::parse("plugin:Bad").unwrap_err(),
        "unknown recovery strategy \"plugin:Bad\": use restart, pause, abort or plugin:<name>"
    );
}

/// A small deterministic generator (xorshift64*), so the random walk below needs no crate.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % n.max(1)
    }
}

fn random_definition(rng: &mut Rng) -> PartyDefinition {
    let n = 1 + rng.below(9);
    let strategies = ["restart", "pause", "restart", "pause", "plugin:p", "abort"];
    let leader = rng.below(2 * n);
    let mut roles = serde_json::Map::new();
    let mut flow = serde_json::Map::new();
    for r in 0..n {
        let mut role = json!({ "agent": "x", "count": 1 + rng.below(3) });
        if rng.below(2) == 0 {
            role["on_crash"] = json!(strategies[rng.below(strategies.len())]);
        }
        if rng.below(2) == 0 {
            role["retry_attempts"] = json!(rng.below(3));
        }
        if r == leader {
            role["is_leader"] = json!(true);
        }
        roles.insert(format!("r{r}"), role);
        let deps: Vec<String> = (0..r)
            .filter(|_| rng.below(3) == 0)
            .map(|d| format!("r{d}"))
            .collect();
        flow.insert(format!("r{r}"), json!(deps));
    }
    let on_crash = strategies[rng.below(strategies.len())];
    def(json!({
        "name": "walk", "roles": roles, "flow": flow,
        "recovery": { "on_crash": on_crash, "max_retries": rng.below(3) }
    }))
}

fn random_input(rng: &mut Rng, party: &Party) -> Input {
    let m = &party.members[rng.below(party.members.len())];
    let (role, index) = match rng.below(30) {
        0 => ("ghost".to_string(), 0),
        1 => (m.role.clone(), 7),
        _ => (m.role.clone(), m.index),
    };
    match rng.below(100) {
        0 => Input::Launch,
        1 => Input::Cancel,
        2..=9 => Input::Signal {
            role,
            signal: [
                Signal::Proceed,
                Signal::Retry,
                Signal::Proceed,
                Signal::Retry,
                Signal::Abort,
            ][rng.below(5)],
        },
        10..=12 => Input::OverrideRecovery {
            role,
            strategy: [Strategy::Restart, Strategy::Pause, Strategy::Abort][rng.below(3)].clone(),
        },
        13..=24 => Input::RecoveryDecided {
            crash_count: m.crash_count.saturating_sub(u32::from(rng.below(4) == 0)),
            role,
            index,
            decision: match rng.below(5) {
                0..=1 => Decision::Restart,
                2..=3 => Decision::Pause {
                    notify: crate::NotifyTarget::User,
                    why: "why".into(),
                },
                _ => Decision::Abort { why: "why".into() },
            },
        },
        25..=44 => Input::Crashed {
            role,
            index,
            reason: "boom".into(),
        },
        _ => Input::Completed { role, index },
    }
}

/// The scheduler keeps an index so a step costs the same however many roles there are. A
/// party whose index is built afresh for every step (a clone's members are a new Vec) looks
/// at every role, as the scheduler did before it had one: both must always decide the same,
/// end in the same state and report the same changed members.
#[test]
fn the_index_decides_as_a_full_scan_would() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut ends = std::collections::BTreeMap::new();
    for _ in 0..200 {
        let mut party = Party::new(random_definition(&mut rng));
        party.step(Input::Launch, 0).unwrap();
        for t in 1..150 {
            let input = random_input(&mut rng, &party);
            let before = party.clone();
            let mut full_scan = party.clone();
            let expected = full_scan.step(input.clone(), t);
            let got = party.step(input.clone(), t);
            assert_eq!(got, expected, "{input:?} on {before:?}");
            assert_eq!(party, full_scan, "{input:?} on {before:?}");
            let changed: Vec<&crate::Member> = party.changed_members().collect();
            let diff: Vec<&crate::Member> = party
                .members
                .iter()
                .zip(&before.members)
                .filter(|(now, was)| now != was)
                .map(|(now, _)| now)
                .collect();
            assert_eq!(changed, diff, "{input:?} on {before:?}");
            for m in &before.members {
                assert_eq!(
                    party.member(&m.role, m.index).map(|x| x.index),
                    Some(m.index)
                );
            }
        }
        *ends.entry(party.status.as_str()).or_insert(0) += 1;
    }
    // The walk reaches every way a party ends.
    for end in ["completed", "failed", "cancelled"] {
        assert!(ends.get(end).copied().unwrap_or(0) > 10, "{ends:?}");
    }
}

#[test]
fn a_live_leader_releases_a_role_by_signal_and_hears_every_completion() {
    let d = def(json!({
        "name": "live",
        "roles": {
            "leader": { "agent": "x", "is_leader": true },
            "developer": { "agent": "x", "count": 2 },
            "qa": { "agent": "x" }
        },
        "flow": { "developer": ["leader:signal"], "qa": ["developer"] }
    }));
    check(
        d.clone(),
        "
        launch
        signal qa proceed
        signal developer proceed
        signal developer proceed
        done developer#0
        done developer#1
        done qa#0
        done leader#0
    ",
        expect![[r#"
        t0 launch => spawn leader#0
        t1 signal qa proceed => error: role qa is neither paused nor waiting for a signal
        t2 signal developer proceed => spawn developer#0; spawn developer#1
        t3 signal developer proceed => error: role developer is neither paused nor waiting for a signal
        t4 done developer#0 => -
        t5 done developer#1 => developer complete; notify leader: role developer completed; spawn qa#0
        t6 done qa#0 => qa complete; notify leader: role qa completed
        t7 done leader#0 => leader complete; party completed (every role completed)
    "#]],
    );
    // Without a signal, the leader's completion releases the role too.
    check(
        d,
        "launch\ndone leader#0",
        expect![[r#"
        t0 launch => spawn leader#0
        t1 done leader#0 => leader complete; spawn developer#0; spawn developer#1
    "#]],
    );
}

#[test]
fn a_flow_edge_is_a_role_or_role_signal() {
    let d: PartyDefinition = serde_json::from_value(json!({
        "name": "bad",
        "roles": { "a": { "agent": "x" }, "b": { "agent": "x" } },
        "flow": { "b": ["a:later"] }
    }))
    .unwrap();
    assert_eq!(
        d.validate(|_| true).unwrap_err().to_string(),
        "flow edge \"a:later\": write a role's name (wait for its completion) or role:signal (wait for a signal)"
    );
    let d: PartyDefinition = serde_json::from_value(json!({
        "name": "cyclic",
        "roles": { "a": { "agent": "x" }, "b": { "agent": "x" } },
        "flow": { "b": ["a:signal"], "a": ["b"] }
    }))
    .unwrap();
    assert_eq!(
        d.validate(|_| true).unwrap_err().to_string(),
        "the flow has a cycle: a -> b -> a"
    );
}

#[test]
fn a_budget_trip_pauses_the_member_without_a_crash() {
    let d = def(json!({
        "name": "budget",
        "roles": { "dev": { "agent": "x", "on_crash": "restart", "retry_attempts": 3 }, "qa": { "agent": "x" } },
        "flow": { "qa": ["dev"] }
    }));
    check(
        d,
        "
        launch
        budget dev#0 1200 tokens spent, the budget is 1000
        signal dev retry
        done dev#0
        done qa#0
    ",
        expect![[r#"
            t0 launch => spawn dev#0
            t1 budget dev#0 1200 tokens spent, the budget is 1000 => notify leader: dev#0 was stopped by its budget (1200 tokens spent, the budget is 1000); role dev is paused: signal_role retry, proceed or abort; notify user: dev#0 was stopped by its budget (1200 tokens spent, the budget is 1000); role dev is paused: signal_role retry, proceed or abort
            t2 signal dev retry => spawn dev#0 (attempt 2)
            t3 done dev#0 => dev complete; notify leader: role dev completed; spawn qa#0
            t4 done qa#0 => qa complete; notify leader: role qa completed; party completed (every role completed)
        "#]],
    );
}

#[test]
fn acp_fs_is_offered_to_every_agent_but_gemini_unless_said() {
    let parse =
        |v: serde_json::Value| serde_json::from_value::<crate::agent::AcpOptions>(v).unwrap();
    let default = parse(json!({}));
    assert!(default.offers_fs("claude") && default.offers_fs("codex") && default.offers_fs("mine"));
    assert!(!default.offers_fs("gemini"));
    assert!(parse(json!({ "fs": true })).offers_fs("gemini"));
    assert!(!parse(json!({ "fs": false })).offers_fs("claude"));
}
