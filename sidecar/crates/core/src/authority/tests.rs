//! The authority's own tests: run credentials name their run only, and binding fills, keeps
//! or refuses the field that names the caller.

use super::*;

#[test]
fn a_run_credential_names_its_run_and_nothing_else() {
    let key = RunKey::random().unwrap();
    let other = RunKey::random().unwrap();
    let cred = key.mint("run-1");
    assert_eq!(key.verify(&cred), Some("run-1"));
    assert_eq!(other.verify(&cred), None, "another daemon's key");
    assert_eq!(key.verify(&cred.replace("run-1", "run-2")), None);
    assert_eq!(key.verify("trn1.run-1.00"), None);
    assert_eq!(key.verify(""), None);
    let mut flipped = cred.clone();
    flipped.pop();
    flipped.push(if cred.ends_with('0') { '1' } else { '0' });
    assert_eq!(key.verify(&flipped), None);
}

#[test]
fn binding_fills_refuses_and_keeps() {
    let member = Caller::Member(Member {
        run_id: "r".into(),
        session_id: "s1".into(),
        party_id: None,
        role: None,
        instance: None,
        remote: false,
    });
    let access = Access::Caller("session_id");
    let filled = bind("vote", &member, access, Some("s1"), "session_id", None).unwrap();
    assert_eq!(filled, Some(serde_json::json!({"session_id": "s1"})));
    let same = bind(
        "vote",
        &member,
        access,
        Some("s1"),
        "session_id",
        Some(serde_json::json!({"session_id": "s1", "x": 1})),
    )
    .unwrap();
    assert_eq!(same, Some(serde_json::json!({"session_id": "s1", "x": 1})));
    let other = bind(
        "vote",
        &member,
        access,
        Some("s1"),
        "session_id",
        Some(serde_json::json!({"session_id": "s2"})),
    )
    .unwrap_err();
    let text = other.to_string();
    assert!(
        text.contains("vote") && text.contains("s2") && text.contains("s1"),
        "{text}"
    );
    let agent = Caller::Agent {
        session_id: None,
        door: "mcp".into(),
    };
    assert!(bind("vote", &agent, access, None, "session_id", None).is_err());
}
