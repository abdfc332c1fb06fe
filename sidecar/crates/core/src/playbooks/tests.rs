//! The playbooks: which one a role gets, a project's override, the filled-in head of a prompt.

use super::*;

fn role(json: serde_json::Value) -> RoleDefinition {
    serde_json::from_value(json).unwrap()
}

#[test]
fn a_role_gets_the_playbook_of_its_part_unless_it_names_one() {
    let leader = role(serde_json::json!({ "agent": "a", "is_leader": true }));
    let plain = role(serde_json::json!({ "agent": "a" }));
    let chosen = role(serde_json::json!({ "agent": "a", "playbook": "tester" }));
    let none = role(serde_json::json!({ "agent": "a", "playbook": "none" }));
    assert_eq!(of_role("lead", &leader).as_deref(), Some("leader"));
    assert_eq!(
        of_role("Code-Reviewer", &plain).as_deref(),
        Some("reviewer")
    );
    assert_eq!(of_role("dev-a", &plain).as_deref(), Some("developer"));
    assert_eq!(of_role("dev-a", &chosen).as_deref(), Some("tester"));
    assert_eq!(of_role("dev-a", &none), None);
}

#[test]
fn a_project_overrides_a_playbook_and_adds_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    assert_eq!(
        text(root, "leader").unwrap(),
        BUILT_IN.iter().find(|(n, _)| *n == "leader").unwrap().1
    );
    std::fs::create_dir_all(root.join(".troupe/playbooks")).unwrap();
    std::fs::write(root.join(".troupe/playbooks/leader.md"), "Lead {{role}}.").unwrap();
    std::fs::write(root.join(".troupe/playbooks/tester.md"), "Test.").unwrap();
    assert_eq!(text(root, "leader").unwrap(), "Lead {{role}}.");
    assert_eq!(text(root, "tester").unwrap(), "Test.");
    let missing = text(root, "nobody").unwrap_err();
    assert!(
        missing.contains("nobody") && missing.contains("developer"),
        "{missing}"
    );
    let escape = text(root, "../../etc/passwd").unwrap_err();
    assert!(escape.contains("not a playbook name"), "{escape}");
    // A huge one is refused, not read whole into every prompt.
    std::fs::write(
        root.join(".troupe/playbooks/huge.md"),
        "x".repeat(MAX_PLAYBOOK as usize * 4),
    )
    .unwrap();
    assert!(text(root, "huge").unwrap_err().contains("limit"));
    // A symlink is not followed (it could point at the data dir's token), nor a pipe read.
    let secret = dir.path().join("token");
    std::fs::write(&secret, "the person's token").unwrap();
    std::os::unix::fs::symlink(&secret, root.join(".troupe/playbooks/developer.md")).unwrap();
    let linked = text(root, "developer").unwrap_err();
    assert!(linked.contains("not a regular file"), "{linked}");
    std::fs::create_dir(root.join(".troupe/playbooks/reviewer.md")).unwrap();
    assert!(text(root, "reviewer").is_err());
}

#[test]
fn a_big_partys_prompt_names_the_roles_a_member_deals_with_and_counts_the_rest() {
    let dev = |i: usize| (format!("dev{i:04}"), Some("developer".to_string()));
    let mut all: Vec<(String, Option<String>)> = (0..5000).map(dev).collect();
    all.insert(2500, ("lead".into(), Some("leader".into())));
    all.push(("merge".into(), Some("merge queue".into())));
    let (named, more) = named_roles(all);
    assert_eq!(named.len(), MAX_ROLES_NAMED);
    assert_eq!(more, 5002 - MAX_ROLES_NAMED);
    assert!(named.iter().any(|(r, _)| r == "lead") && named.iter().any(|(r, _)| r == "merge"));
    assert_eq!(named[0].0, "dev0000", "in the party's order");
    let seat = Seat {
        party_id: "p",
        role: "dev0001",
        index: 0,
        roles: named,
        more_roles: more,
    };
    let dir = tempfile::tempdir().unwrap();
    let head = compose(dir.path(), &seat, Some("developer"), Tools::Mcp).unwrap();
    assert!(
        head.contains(&format!(
            "and {more} more (get_party_status lists every role)"
        )),
        "{head}"
    );
    assert!(head.len() < 8_000, "{} bytes", head.len());
    // A small party: every role, nothing more said.
    let (named, more) = named_roles((0..3).map(dev));
    assert_eq!((named.len(), more), (3, 0));
}

#[test]
fn the_head_of_a_prompt_says_how_to_call_the_tools_and_fills_in_the_seat() {
    let dir = tempfile::tempdir().unwrap();
    let seat = Seat {
        party_id: "p-1",
        role: "dev",
        index: 1,
        roles: vec![
            ("dev".into(), Some("developer".into())),
            ("lead".into(), Some("leader".into())),
            ("merge".into(), Some("merge queue".into())),
        ],
        more_roles: 0,
    };
    for tools in [Tools::Mcp, Tools::Shell, Tools::Executor] {
        let head = compose(dir.path(), &seat, Some("developer"), tools).unwrap();
        assert!(tells_tools(&head), "{head}");
        assert!(head.contains("You are dev#1, the dev of a Troupe party (`party_id` p-1)"));
        assert!(
            head.contains("The team: dev (developer), lead (leader), merge (merge queue)."),
            "{head}"
        );
        assert!(head.contains("`start_step`") && head.contains("`complete`"));
        assert!(!head.contains("{{"), "every placeholder is filled: {head}");
    }
    assert_eq!(compose(dir.path(), &seat, None, Tools::Mcp).unwrap(), "");
    assert!(compose(dir.path(), &seat, Some("nobody"), Tools::Mcp).is_err());
}

#[test]
fn the_built_in_playbooks_stay_short() {
    // Every member reads its playbook at every turn: each stays under ~300 tokens.
    for (name, text) in BUILT_IN {
        assert!(text.len() < 1_400, "{name} is {} characters", text.len());
    }
}
