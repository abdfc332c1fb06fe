//! The remote protocol's own tests: its messages read back as written, and fuzzed.

use proptest::prelude::*;
use serde_json::{Value, json};
use troupe_fuzz::proptest;

use super::*;

fn spec_schema() -> Value {
    let s = json!({ "type": "string" });
    json!({ "type": "object", "properties": {
        "run_id": s, "session_id": s, "pool": s,
        "command": { "type": "array", "items": s },
        "env": { "type": "array", "items": { "type": "array", "items": s } },
        "branch": s, "base": s, "bundle": s, "secret": s, "workdir": s },
        "required": ["run_id", "session_id", "pool", "command", "env", "branch", "base",
                     "bundle", "secret", "workdir"] })
}

fn call_schema() -> Value {
    let s = json!({ "type": "string" });
    json!({ "type": "object", "properties": {
        "run_id": s, "secret": s, "op": s, "params": {}, "result_bundle": s },
        "required": ["run_id", "secret", "op"] })
}

fn exit_schema() -> Value {
    json!({ "type": "object", "properties": {
        "run_id": { "type": "string" }, "worker": { "type": "string" },
        "code": { "type": ["integer", "null"] }, "signal": { "type": ["integer", "null"] },
        "error": { "type": ["string", "null"] } },
        "required": ["run_id", "worker"] })
}

/// What arrives on a subject: shaped after one of the messages, any JSON, or any bytes.
fn payload() -> BoxedStrategy<Vec<u8>> {
    let pool = vec![
        "0198a3c2-7f4e-7b1a-9c3d-1e2f3a4b5c6d".to_string(),
        "__claim".into(),
        "complete".into(),
        "gpu".into(),
    ];
    let shaped = prop_oneof![
        troupe_fuzz::shaped(&spec_schema(), pool.clone()),
        troupe_fuzz::shaped(&call_schema(), pool.clone()),
        troupe_fuzz::shaped(&exit_schema(), pool.clone()),
    ];
    prop_oneof![
        6 => shaped.prop_map(|v| v.to_string().into_bytes()),
        1 => troupe_fuzz::json_from(pool).prop_map(|v| v.to_string().into_bytes()),
        1 => troupe_fuzz::bytes(),
    ]
    .boxed()
}

/// Any payload is read or refused, never a panic: a refused call gets an error to answer
/// with, a run is taken only with a run id that can be a lease key and a directory, and
/// what is read goes out again as it came.
#[test]
fn fuzz_remote_messages() {
    troupe_fuzz::run("remote_messages", 512, payload(), |bytes| {
        match read_call(&bytes) {
            Ok(call) => {
                let again = serde_json::to_vec(&call).map_err(|e| e.to_string());
                prop_assert!(again.is_ok_and(|a| read_call(&a).is_ok()));
            }
            Err(CallReply::Error { code, message, .. }) => {
                prop_assert_eq!(code, troupe_api::error::codes::INVALID_PARAMS);
                prop_assert!(message.starts_with("an unreadable remote call"));
            }
            Err(other) => return Err(TestCaseError::fail(format!("{other:?}"))),
        }
        if let Ok(spec) = read_run(&bytes) {
            prop_assert!(troupe_engine::spec::is_safe_name(&spec.run_id));
            prop_assert!(!spec.run_id.contains('.') && !spec.run_id.contains('/'));
            prop_assert!(Path::new(&spec.run_id).components().count() == 1);
        }
        if let Ok(exit) = read_exit(&bytes) {
            let again = serde_json::to_vec(&exit).map_err(|e| e.to_string());
            prop_assert!(again.is_ok_and(|a| read_exit(&a).is_ok()));
        }
        Ok(())
    });
}

/// Found fuzzing (`nats_messages`): a run whose id cannot be a lease key was left
/// unacknowledged and came back every minute, for ever; now it is refused (and dropped).
#[test]
fn a_run_id_that_is_no_lease_key_is_refused() {
    for id in [
        "",
        "a b",
        "../x",
        ".hidden",
        "x".repeat(65).as_str(),
        "run.1",
        "é",
    ] {
        let spec = json!({ "run_id": id, "session_id": "s", "pool": "gpu",
            "command": ["true"], "env": [], "branch": "b", "base": "c", "bundle": "x",
            "secret": "s", "workdir": "/w" });
        let why = read_run(spec.to_string().as_bytes()).unwrap_err();
        assert!(why.contains("is not one a hub makes"), "{why}");
    }
    let id = "0198a3c2-7f4e-7b1a-9c3d-1e2f3a4b5c6d";
    let spec = json!({ "run_id": id, "session_id": "s", "pool": "gpu", "command": ["true"],
        "env": [["K", "V"]], "branch": "b", "base": "c", "bundle": format!("{id}/base"),
        "secret": "s", "workdir": "/w" });
    assert_eq!(read_run(spec.to_string().as_bytes()).unwrap().run_id, id);
}
