//! Traces of the collaboration rules: plan validation, the step state machine, tool policies,
//! the collaboration state, tallies and the ADR.

use super::*;

fn step(id: &str, owner: &str, deps: &[&str]) -> StepSpec {
    StepSpec {
        id: id.into(),
        title: format!("do {id}"),
        owner_role: owner.into(),
        description: None,
        acceptance: None,
        tool_policy: ToolPolicy::default(),
        budget: None,
        depends_on: deps.iter().map(|d| d.to_string()).collect(),
    }
}

const ROLES: [&str; 2] = ["leader", "dev"];

#[test]
fn a_plan_is_checked_and_each_fault_named() {
    let ok = [step("a", "dev", &[]), step("b", "leader", &["a"])];
    assert_eq!(validate_plan(&ok, ROLES), Ok(()));
    assert_eq!(validate_plan(&[], ROLES), Err(CollabError::EmptyPlan));
    assert_eq!(
        validate_plan(&[step("a", "dev", &[]), step("a", "dev", &[])], ROLES),
        Err(CollabError::DuplicateStep("a".into()))
    );
    assert_eq!(
        validate_plan(&[step("a", "tester", &[])], ROLES)
            .unwrap_err()
            .to_string(),
        "step a: the party has no role tester"
    );
    assert_eq!(
        validate_plan(&[step("a", "dev", &["zz"])], ROLES)
            .unwrap_err()
            .to_string(),
        "step a depends on zz, which is not in the plan"
    );
    assert_eq!(
        validate_plan(&[step("a b", "dev", &[])], ROLES),
        Err(CollabError::BadStepId("a b".into()))
    );
    let mut forever = step("a", "dev", &[]);
    forever.budget = Some(crate::agent::Budget {
        max_secs: Some(f64::NAN),
        ..Default::default()
    });
    assert_eq!(
        validate_plan(&[forever], ROLES).unwrap_err().to_string(),
        "step a: budget max_secs must be a number above 0"
    );
    let cycle = [
        step("a", "dev", &["c"]),
        step("b", "dev", &["a"]),
        step("c", "dev", &["b"]),
        step("d", "dev", &[]),
    ];
    assert_eq!(
        validate_plan(&cycle, ROLES).unwrap_err().to_string(),
        "the plan's dependencies form a cycle: a -> c -> b -> a"
    );
    assert_eq!(
        validate_plan(&[step("a", "dev", &["a"])], ROLES),
        Err(CollabError::Cycle("a -> a".into()))
    );
}

#[test]
fn a_step_moves_through_review_reopen_and_handoff() {
    use StepMove as M;
    use StepState as S;
    let trace = [
        (M::Start, S::InProgress),
        (M::Handoff, S::InProgress),
        (M::Submit, S::InReview),
        (M::Reopen, S::Reopened),
        (M::Start, S::InProgress),
        (M::Block, S::Blocked),
        (M::Handoff, S::InProgress),
        (M::Submit, S::InReview),
        (M::Accept, S::Done),
    ];
    let mut at = S::Pending;
    for (m, want) in trace {
        at = step_after("s", at, m).unwrap();
        assert_eq!(at, want, "after {m:?}");
    }
    assert_eq!(
        step_after("s", S::Done, M::Submit).unwrap_err().to_string(),
        "step s is done; it cannot be submitted"
    );
    assert!(step_after("s", S::Pending, M::Accept).is_err());
    assert_eq!(
        step_after("s", S::InProgress, M::Start)
            .unwrap_err()
            .to_string(),
        "step s is in_progress; it cannot be started"
    );
    assert!(step_after("s", S::InReview, M::Handoff).is_err());
    assert_eq!(step_after("s", S::Done, M::Reopen), Ok(S::Reopened));
    for s in [
        S::Pending,
        S::InProgress,
        S::InReview,
        S::Done,
        S::Reopened,
        S::Blocked,
    ] {
        assert_eq!(s.as_str().parse::<StepState>(), Ok(s));
    }
}

#[test]
fn a_tool_policy_allows_asks_and_denies() {
    let p = ToolPolicy {
        allowed_tools: vec!["Read".into(), "Edit".into(), "mcp__troupe__send_*".into()],
        blocked_tools: vec!["Bash".into()],
        approve_tools: vec!["Edit".into()],
    };
    assert_eq!(p.verdict("s", "Read"), ToolVerdict::Allow);
    assert_eq!(p.verdict("s", "Edit"), ToolVerdict::Ask);
    assert_eq!(
        p.verdict("s", "Bash"),
        ToolVerdict::Deny("step s blocks the tool Bash".into())
    );
    assert_eq!(
        p.verdict("s", "Write"),
        ToolVerdict::Deny("step s allows only Read, Edit, mcp__troupe__send_*; not Write".into())
    );
    assert_eq!(
        p.verdict("s", "mcp__troupe__send_message"),
        ToolVerdict::Allow
    );
    // The protocol's own tools always pass (Troupe's, not another server's of that name).
    assert_eq!(
        p.verdict("s", "mcp__troupe__submit_step"),
        ToolVerdict::Default
    );
    assert!(matches!(
        p.verdict("s", "mcp__other__complete"),
        ToolVerdict::Deny(_)
    ));
    let bare = ToolPolicy {
        blocked_tools: vec!["send_message".into()],
        ..ToolPolicy::default()
    };
    assert!(matches!(
        bare.verdict("s", "mcp__troupe__send_message"),
        ToolVerdict::Deny(_)
    ));
    assert_eq!(bare.verdict("s", "Write"), ToolVerdict::Default);
    assert_eq!(
        ToolPolicy::combine([ToolVerdict::Allow, ToolVerdict::Ask, ToolVerdict::Default]),
        ToolVerdict::Ask
    );
    assert!(matches!(
        ToolPolicy::combine([ToolVerdict::Ask, ToolVerdict::Deny("x".into())]),
        ToolVerdict::Deny(_)
    ));
    assert_eq!(ToolPolicy::combine([]), ToolVerdict::Default);
}

#[test]
fn the_collaboration_state_follows_the_party_and_the_plan() {
    use StepState as S;
    assert_eq!(
        collab_state(PartyStatus::Pending, false, None),
        CollabState::Initialized
    );
    assert_eq!(
        collab_state(PartyStatus::Running, false, None),
        CollabState::TeamFormed
    );
    assert_eq!(
        collab_state(PartyStatus::Running, true, None),
        CollabState::Planning
    );
    let steps = [S::Done, S::InProgress];
    assert_eq!(
        collab_state(PartyStatus::Running, false, Some(&steps)),
        CollabState::Executing
    );
    let steps = [S::Done, S::InReview];
    assert_eq!(
        collab_state(PartyStatus::Running, false, Some(&steps)),
        CollabState::Reviewing
    );
    let steps = [S::Done, S::Done];
    assert_eq!(
        collab_state(PartyStatus::Running, false, Some(&steps)),
        CollabState::Completed
    );
    assert_eq!(
        collab_state(PartyStatus::Cancelled, true, None),
        CollabState::Cancelled
    );
    assert_eq!(
        collab_state(PartyStatus::Failed, true, None),
        CollabState::Error
    );
}

#[test]
fn ready_steps_wait_for_their_dependencies() {
    let plan = [
        step("a", "dev", &[]),
        step("b", "dev", &["a"]),
        step("c", "dev", &["a", "b"]),
    ];
    let states = |done: &'static [&'static str]| {
        move |id: &str| {
            Some(if done.contains(&id) {
                StepState::Done
            } else {
                StepState::Pending
            })
        }
    };
    let ids = |done| {
        ready(&plan, states(done))
            .map(|s| s.id.as_str())
            .collect::<Vec<_>>()
    };
    assert_eq!(ids(&[]), ["a"]);
    assert_eq!(ids(&["a"]), ["a", "b"]);
    assert_eq!(ids(&["a", "b"]), ["a", "b", "c"]);
}

#[test]
fn votes_are_tallied_and_ties_broken_by_the_leader() {
    let options: Vec<String> = ["sqlite", "postgres", "files"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let v = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    };
    assert_eq!(
        tally(
            &options,
            &v(&[("dev", "sqlite"), ("qa", "sqlite"), ("leader", "files")]),
            Some("leader")
        ),
        Tally::Chosen {
            option: "sqlite".into(),
            tie_broken: false
        }
    );
    assert_eq!(
        tally(
            &options,
            &v(&[("dev", "sqlite"), ("leader", "postgres")]),
            Some("leader")
        ),
        Tally::Chosen {
            option: "postgres".into(),
            tie_broken: true
        }
    );
    assert_eq!(
        tally(&options, &v(&[("dev", "sqlite"), ("qa", "postgres")]), None),
        Tally::Tied(vec!["sqlite".into(), "postgres".into()])
    );
    assert_eq!(
        tally(&options, &[], Some("leader")),
        Tally::Tied(options.clone())
    );
    assert_eq!(validate_options(&options), Ok(()));
    assert_eq!(
        validate_options(&["a".into(), "a".into()]),
        Err(CollabError::TooFewOptions)
    );
    assert_eq!(
        validate_options(&["a".into()]),
        Err(CollabError::TooFewOptions)
    );
}

#[test]
fn a_committed_decision_reads_as_an_adr() {
    assert_eq!(
        adr_file_name(7, "Which store: SQLite or Postgres?"),
        "0007-which-store-sqlite-or-postgres.md"
    );
    assert_eq!(adr_file_name(1, "???"), "0001-decision.md");
    let options = vec!["sqlite".to_string(), "postgres".to_string()];
    let votes = vec![
        (
            "dev".to_string(),
            "sqlite".to_string(),
            "one file".to_string(),
        ),
        ("qa".to_string(), "sqlite".to_string(), String::new()),
    ];
    let md = adr_markdown(&AdrInput {
        number: 3,
        topic: "Which store",
        date: "2026-11-24",
        party: "build",
        evidence: Some("bench: sqlite 2x faster"),
        options: &options,
        chosen: "sqlite",
        how: "majority of 2 votes",
        votes: &votes,
    });
    expect_test::expect![[r#"
        # 3. Which store

        Date: 2026-11-24

        ## Status

        Accepted

        ## Context

        Decided by the party build (majority of 2 votes).

        bench: sqlite 2x faster

        ## Options

        - sqlite (chosen): 2 votes
        - postgres: 0 votes

        ## Decision

        sqlite

        ## Consequences

        The party proceeds with "sqlite"; the other options are set aside.

        ## Votes

        - dev: sqlite (one file)
        - qa: sqlite
    "#]]
    .assert_eq(&md);
}
