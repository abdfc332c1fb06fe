//! The remote protocol's own tests: its messages read back as written, and fuzzed.

use proptest::prelude::*;
use serde_json::{Value, json};
use troupe_fuzz::proptest;

use super::*;

fn spec_schema() -> Value {
    let s = json!({ "type": "string" });
    json!({ "type": "object", "properties": {
        "protocol": { "const": PROTOCOL },
        "run_id": s, "session_id": s, "pool": s,
        "command": { "type": "array", "items": s },
        "env": { "type": "array", "items": { "type": "array", "items": s } },
        "branch": s, "base": s, "bundle": s, "secret": s, "workdir": s },
        "required": ["protocol", "run_id", "session_id", "pool", "command", "env", "branch",
                     "base", "bundle", "secret", "workdir"] })
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
        let spec = json!({ "protocol": PROTOCOL, "run_id": id, "session_id": "s",
            "pool": "gpu", "command": ["true"], "env": [], "branch": "b", "base": "c",
            "bundle": "x", "secret": "s", "workdir": "/w" });
        let why = read_run(spec.to_string().as_bytes()).unwrap_err();
        assert!(why.contains("is not one a hub makes"), "{why}");
    }
    let id = "0198a3c2-7f4e-7b1a-9c3d-1e2f3a4b5c6d";
    let spec = json!({ "protocol": PROTOCOL, "run_id": id, "session_id": "s", "pool": "gpu",
        "command": ["true"], "env": [["K", "V"]], "branch": "b", "base": "c",
        "bundle": format!("{id}/base"), "secret": "s", "workdir": "/w" });
    assert_eq!(read_run(spec.to_string().as_bytes()).unwrap().run_id, id);
}

/// A run from a hub of another protocol (one of protocol 1 sends none) is refused, naming both
/// and what to do, not run with calls no hub would answer.
#[test]
fn a_run_of_a_hub_of_another_protocol_is_refused() {
    let id = "0198a3c2-7f4e-7b1a-9c3d-1e2f3a4b5c6d";
    let mut spec = json!({ "run_id": id, "session_id": "s", "pool": "gpu", "command": ["true"],
        "env": [], "branch": "b", "base": "c", "bundle": "x", "secret": "s", "workdir": "/w" });
    let why = read_run(spec.to_string().as_bytes()).unwrap_err();
    assert!(
        why.contains("remote protocol 1")
            && why.contains(&format!("this worker speaks {PROTOCOL}")),
        "{why}"
    );
    assert!(why.contains("same Troupe version"), "{why}");
    spec["protocol"] = json!(PROTOCOL + 1);
    let why = read_run(spec.to_string().as_bytes()).unwrap_err();
    assert!(
        why.contains(&format!("remote protocol {}", PROTOCOL + 1)),
        "{why}"
    );
}

/// What a worker publishes names its pool and itself, and the hub reads them back from the
/// subject alone; a subject of another shape, kind or with a name no worker has names no one.
#[test]
fn a_workers_subjects_name_its_pool_itself_and_the_run() {
    let run = "0198a3c2-7f4e-7b1a-9c3d-1e2f3a4b5c6d";
    let from = Sender {
        pool: "gpu".into(),
        worker: "w1".into(),
        run_id: run.into(),
    };
    assert_eq!(
        call_subject("gpu", "w1", run),
        format!("troupe.worker.gpu.w1.call.{run}")
    );
    assert_eq!(
        sender(&call_subject("gpu", "w1", run), "call"),
        Some(from.clone())
    );
    assert_eq!(sender(&exit_subject("gpu", "w1", run), "exit"), Some(from));
    assert_eq!(sender(&exit_subject("gpu", "w1", run), "call"), None);
    for subject in [
        format!("troupe.worker.gpu.w1.call.{run}.x"),
        "troupe.worker.gpu.w1.call".to_string(),
        format!("troupe.pool.gpu.w1.call.{run}"),
        format!("troupe.worker.gpu.w/1.call.{run}"),
        format!("troupe.worker.gpu.{}.call.{run}", "w".repeat(65)),
        format!("troupe.worker..w1.call.{run}"),
    ] {
        assert_eq!(sender(&subject, "call"), None, "{subject}");
    }
    // The wildcards the hub reads with match exactly these.
    assert_eq!(CALLS, "troupe.worker.*.*.call.*");
    assert_eq!(EXITS, "troupe.worker.*.*.exit.*");
    // A pool's leases, stops, code and its workers' replies are under its name too.
    assert_eq!(lease_key("gpu", run), format!("gpu.{run}"));
    assert_eq!(
        stop_subject("gpu", run),
        format!("troupe.hub.stop.gpu.{run}")
    );
    assert_eq!(code_bucket_name("gpu"), "troupe_code_gpu");
    assert_eq!(inbox_prefix("gpu", "w1"), "_INBOX.troupe.gpu.w1");
}

/// A worker's default name is a subject token whatever its host is called.
#[test]
fn a_workers_default_name_is_a_subject_token() {
    let name = worker::default_name("build.example.com", 4242);
    assert_eq!(name, "build-example-com-4242");
    assert!(troupe_engine::spec::is_safe_name(&name));
    let long = worker::default_name(&"h".repeat(300), u32::MAX);
    assert!(troupe_engine::spec::is_safe_name(&long), "{long}");
}
