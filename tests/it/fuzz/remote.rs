//! Fuzz target for remote workers over NATS: arbitrary and message-shaped payloads on the
//! subjects a hub (`troupe serve --nats`) and a `troupe worker` read, sent through a real
//! nats-server (Debian's, as `remote.rs` starts it): remote calls on a worker's call subjects
//! (as the worker holding the run or another, run ids the hub waits for or not, wrong secrets,
//! any op and params), exits on the exits stream (from the run's worker or another), runs on
//! the pool's work queue, calls where workers of protocol 1 sent them, and `troupe.hub.up`. Each
//! is refused cleanly: a call gets an error with a typed code, a bad exit and a run that cannot
//! be taken are logged and dropped (the queues drain: nothing comes back for ever), nothing
//! panics, both processes live on, the hub serves a real member's call after every case, and a
//! real remote run completes at the end.

use std::path::Path;
use std::time::Duration;

use proptest::prelude::*;
use serde_json::{Value, json};
use troupe::remote::{
    CallReply, EXITS_STREAM, HUB_UP, OLD_CALLS, PROTOCOL, RUNS_STREAM, call_subject, exit_subject,
};
use troupe_api::error::codes;
use troupe_fuzz::proptest;

use super::{HANG, runtime};
use crate::remote::{Nats, Worker, hub};
use crate::support::{TestDaemon, define, executable, register, repo, wait_for};

/// A remote member that holds its run (and a worker slot) until stopped: the run whose calls
/// probe the hub.
const HOLDER: &str = "#!/bin/sh\nexec sleep 900\n";

/// A remote member that completes at once.
const QUICK: &str = "#!/bin/sh\ntroupe call complete '{\"output\":\"remote done\"}' >/dev/null\n";

/// The codes a refused remote call may carry (an internal error fails the case).
const TYPED: &[i32] = &[
    codes::INVALID_REQUEST,
    codes::INVALID_PARAMS,
    codes::NOT_FOUND,
    codes::UNAUTHORIZED,
    codes::FORBIDDEN,
    codes::METHOD_NOT_FOUND,
    codes::UNAVAILABLE,
];

#[derive(Debug, Clone)]
enum Msg {
    /// A request on the call subject of a worker (the probe's, `w1`, or another) for a run
    /// (answered by the hub).
    Call(String, String, Vec<u8>),
    /// A request where workers of protocol 1 called.
    OldCall(Vec<u8>),
    /// On the exits stream, as worker `.0` of pool gpu's exit of run `.1`.
    Exit(String, String, Vec<u8>),
    /// On the pool's work queue.
    Run(Vec<u8>),
    /// `troupe.hub.up`: a hub (re)started.
    HubUp(Vec<u8>),
}

fn call_schema() -> Value {
    let s = json!({ "type": "string" });
    let ops: Vec<&str> = troupe_api::OPERATIONS
        .iter()
        .map(|o| o.name)
        .chain(["__claim"])
        .collect();
    json!({ "type": "object", "properties": {
        "run_id": s, "secret": s, "op": { "enum": ops }, "params": {}, "result_bundle": s },
        "required": ["run_id", "secret", "op"] })
}

fn spec_schema() -> Value {
    let s = json!({ "type": "string" });
    json!({ "type": "object", "properties": {
        "protocol": { "const": PROTOCOL },
        "run_id": s, "session_id": s, "pool": { "enum": ["gpu", "cpu"] },
        "command": { "type": "array", "items": s },
        "env": { "type": "array", "items": { "type": "array", "items": s } },
        "branch": s, "base": s, "bundle": s, "secret": s, "workdir": s },
        "required": ["protocol", "run_id", "session_id", "pool", "command", "env", "branch",
                     "base", "bundle", "secret", "workdir"] })
}

fn exit_schema() -> Value {
    json!({ "type": "object", "properties": {
        "run_id": { "type": "string" }, "worker": { "type": "string" },
        "code": { "type": ["integer", "null"] }, "signal": { "type": ["integer", "null"] },
        "error": { "type": ["string", "null"] } },
        "required": ["run_id", "worker"] })
}

fn payload(schema: Value, pool: Vec<String>) -> BoxedStrategy<Vec<u8>> {
    prop_oneof![
        6 => troupe_fuzz::shaped(&schema, pool.clone()).prop_map(|v| v.to_string().into_bytes()),
        1 => troupe_fuzz::json_from(pool).prop_map(|v| v.to_string().into_bytes()),
        1 => troupe_fuzz::bytes(),
    ]
    .boxed()
}

/// `probe` is the run the hub waits for, held by worker `w1`: calls may name it (never with its
/// secret), exits and runs never do as `w1` (an exit with its id would end it; that is its
/// worker's to say), an exit of another worker may (it is refused).
fn msg(probe: &str) -> BoxedStrategy<Msg> {
    let others = vec![
        "0198a3c2-7f4e-7b1a-9c3d-1e2f3a4b5c6d".to_string(),
        "gpu".into(),
        "main".into(),
        "troupe/member-1".into(),
        "--upload-pack=touch /tmp/troupe-fuzz-pwned".into(),
        "0198a3c2-7f4e-7b1a-9c3d-1e2f3a4b5c6d/base".into(),
        "true".into(),
        "/tmp".into(),
    ];
    let mut with_probe = others.clone();
    with_probe.extend([probe.to_string(), format!("{probe}/result")]);
    // A subject token: no dots, wildcards or spaces.
    let token = prop_oneof![
        Just("0198a3c2-7f4e-7b1a-9c3d-1e2f3a4b5c6d".to_string()),
        "[a-zA-Z0-9_-]{1,40}",
    ];
    let worker = prop_oneof![Just("w1".to_string()), "[a-zA-Z0-9_-]{1,20}"];
    let run = prop_oneof![Just(probe.to_string()), token.clone()];
    let exit = prop_oneof![
        (
            Just("w1".to_string()),
            token,
            payload(exit_schema(), others.clone())
        ),
        (
            "[a-zA-Z0-9_-]{1,20}".prop_filter("not w1", |w| w != "w1"),
            Just(probe.to_string()),
            payload(exit_schema(), with_probe.clone()),
        ),
    ];
    prop_oneof![
        5 => (worker, run, payload(call_schema(), with_probe.clone()))
            .prop_map(|(w, r, p)| Msg::Call(w, r, p)),
        1 => payload(call_schema(), with_probe).prop_map(Msg::OldCall),
        3 => payload(spec_schema(), others).prop_map(Msg::Run),
        2 => exit.prop_map(|(w, r, p)| Msg::Exit(w, r, p)),
        1 => troupe_fuzz::bytes().prop_map(Msg::HubUp),
    ]
    .boxed()
}

/// The set-up the cases run against (dropped in this order: the worker and the hub stop
/// while NATS still runs).
struct Remote {
    worker: Worker,
    hub: TestDaemon,
    nats: async_nats::Client,
    js: async_nats::jetstream::Context,
    /// The probe run's id, its secret and its session.
    probe: (String, String, String),
    _nats: Nats,
    _scratch: tempfile::TempDir,
}

/// Checks the hub's answer to a call: an error with a typed code (without a run's secret
/// nothing is served).
fn check_reply(call: &[u8], reply: &[u8]) -> Result<(), TestCaseError> {
    let text = String::from_utf8_lossy(call);
    match serde_json::from_slice::<CallReply>(reply) {
        Ok(CallReply::Error { code, message, .. }) => {
            prop_assert!(
                TYPED.contains(&code),
                "{text} was refused with code {code}: {message}"
            );
            Ok(())
        }
        Ok(CallReply::Result(v)) => Err(TestCaseError::fail(format!(
            "{text} was served without its run's secret: {v}"
        ))),
        Err(e) => Err(TestCaseError::fail(format!(
            "{text} got an unreadable answer ({e}): {}",
            String::from_utf8_lossy(reply)
        ))),
    }
}

impl Remote {
    async fn send(&self, m: &Msg) -> Result<(), TestCaseError> {
        let failed = |what: &str, e: &dyn std::fmt::Display| {
            TestCaseError::fail(format!("{what} not sent: {e}"))
        };
        match m {
            Msg::Call(worker, run, body) => {
                let request = async_nats::Request::new()
                    .payload(body.clone().into())
                    .timeout(Some(HANG));
                let reply = self
                    .nats
                    .send_request(call_subject("gpu", worker, run), request)
                    .await
                    .map_err(|e| failed("a call", &e))?;
                check_reply(body, &reply.payload)
            }
            Msg::OldCall(body) => {
                let request = async_nats::Request::new()
                    .payload(body.clone().into())
                    .timeout(Some(HANG));
                let reply = self
                    .nats
                    .send_request(OLD_CALLS, request)
                    .await
                    .map_err(|e| failed("an old call", &e))?;
                check_reply(body, &reply.payload)
            }
            Msg::Exit(worker, run, body) => {
                let subject = exit_subject("gpu", worker, run);
                self.js
                    .publish(subject, body.clone().into())
                    .await
                    .map_err(|e| failed("an exit", &e))?
                    .await
                    .map_err(|e| failed("an exit", &e))?;
                Ok(())
            }
            Msg::Run(body) => {
                self.js
                    .publish(troupe::remote::runs_subject("gpu"), body.clone().into())
                    .await
                    .map_err(|e| failed("a run", &e))?
                    .await
                    .map_err(|e| failed("a run", &e))?;
                Ok(())
            }
            Msg::HubUp(body) => {
                self.nats
                    .publish(HUB_UP, body.clone().into())
                    .await
                    .map_err(|e| failed("hub up", &e))?;
                Ok(())
            }
        }
    }

    /// Whether the consumer `name` of `stream` has nothing left to deliver or acknowledge.
    async fn drained(&self, stream: &str, name: &str) -> Result<bool, String> {
        let mut consumer: async_nats::jetstream::consumer::PullConsumer = self
            .js
            .get_stream(stream)
            .await
            .map_err(|e| e.to_string())?
            .get_consumer(name)
            .await
            .map_err(|e| e.to_string())?;
        let info = consumer.info().await.map_err(|e| e.to_string())?;
        Ok(info.num_pending == 0 && info.num_ack_pending == 0)
    }

    /// The hub, the worker and the queues after a case: both alive and without a panic, every
    /// run and exit taken and dropped, and the probe run's call served.
    async fn check(&mut self) -> Result<(), TestCaseError> {
        if let Some(status) = self.hub.child.as_mut().unwrap().try_wait().unwrap() {
            return Err(TestCaseError::fail(format!("the hub exited: {status}")));
        }
        prop_assert!(
            self.worker.running(),
            "the worker exited: {}",
            self.worker.log()
        );
        prop_assert!(
            !self.worker.log().contains("panicked"),
            "the worker panicked: {}",
            self.worker.log()
        );
        for (stream, consumer) in [(RUNS_STREAM, "pool-gpu"), (EXITS_STREAM, "hub")] {
            let deadline = tokio::time::Instant::now() + HANG;
            loop {
                match self.drained(stream, consumer).await {
                    Ok(true) => break,
                    Ok(false) | Err(_) if tokio::time::Instant::now() < deadline => {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    Ok(false) => {
                        return Err(TestCaseError::fail(format!(
                            "{stream} keeps messages nobody takes or drops (consumer {consumer})"
                        )));
                    }
                    Err(e) => {
                        return Err(TestCaseError::fail(format!("{stream}: {e}")));
                    }
                }
            }
        }
        let (run, secret, session) = &self.probe;
        let call = json!({ "run_id": run, "secret": secret, "op": "heartbeat",
                           "params": { "session_id": session } });
        let request = async_nats::Request::new()
            .payload(call.to_string().into())
            .timeout(Some(HANG));
        let reply = self
            .nats
            .send_request(call_subject("gpu", "w1", run), request)
            .await
            .map_err(|e| TestCaseError::fail(format!("the probe call: {e}")))?;
        match serde_json::from_slice::<CallReply>(&reply.payload) {
            Ok(CallReply::Result(_)) => Ok(()),
            other => Err(TestCaseError::fail(format!(
                "the hub no longer serves its member's call: {other:?}"
            ))),
        }
    }
}

/// Starts a run of `agent` as `parent`'s child; its run id and session.
async fn start(c: &troupe::client::Client, agent: &str, parent: &str) -> (String, String) {
    let r = c
        .call(
            "start_agent",
            json!({ "agent": agent, "prompt": "work", "parent_session_id": parent }),
        )
        .await
        .unwrap();
    (
        r["run_id"].as_str().unwrap().to_string(),
        r["session_id"].as_str().unwrap().to_string(),
    )
}

async fn set_up() -> Remote {
    let scratch = tempfile::tempdir().unwrap();
    let nats_server = Nats::start(&scratch.path().join("nats"));
    let hub = hub(&nats_server);
    // Two slots: one holds the probe run, the other takes what the cases queue.
    let worker =
        Worker::start_with_slots(&scratch.path().join("w1"), &nats_server.url, "gpu", "w1", 2);
    let c = hub.client().await;
    let dir = hub.dir.path();
    let project = repo(&dir.join("proj"));
    for (name, body) in [("holder", HOLDER), ("quick", QUICK)] {
        let command = executable(dir, &format!("{name}.sh"), body);
        define(
            &c,
            "agent",
            json!({ "name": name, "command": [command], "pool": "gpu",
                    "isolation": "worktree", "timeout_secs": 1800 }),
        )
        .await;
    }
    let parent = register(&c, "human", &project, None).await;
    let (run, session) = start(&c, "holder", &parent).await;
    // Claimed by the worker: the hub waits for it, its secret in the hub's record.
    wait_for("the probe run to start on the worker", 60, || async {
        let r = c
            .call(
                "list_events",
                json!({ "kind": "remote_started", "limit": 10 }),
            )
            .await
            .unwrap();
        (!r["events"].as_array().unwrap().is_empty()).then_some(())
    })
    .await;
    let record: Value = serde_json::from_slice(
        &std::fs::read(Path::new(&hub.layout.data_dir).join(format!("remote/{run}.json"))).unwrap(),
    )
    .unwrap();
    let secret = record["secret"].as_str().unwrap().to_string();
    let nats = async_nats::connect(&nats_server.url).await.unwrap();
    let js = async_nats::jetstream::new(nats.clone());
    Remote {
        worker,
        hub,
        nats,
        js,
        probe: (run, secret, session),
        _nats: nats_server,
        _scratch: scratch,
    }
}

#[test]
#[cfg_attr(
    not(troupe_test_tools),
    ignore = "drives a real tool scripts/test installs: run with TROUPE_TEST_TOOLS=1"
)]
fn fuzz_nats_messages() {
    let rt = runtime();
    let remote = rt.block_on(set_up());
    let probe = remote.probe.0.clone();
    let remote = tokio::sync::Mutex::new(remote);
    rt.block_on(async { remote.lock().await.check().await.unwrap() });
    let case = proptest::collection::vec(msg(&probe), 1..5);
    troupe_fuzz::run("nats_messages", 48, case, |msgs| {
        rt.block_on(async {
            let mut r = remote.lock().await;
            for m in &msgs {
                r.send(m).await?;
            }
            r.check().await
        })
    });
    // A real remote run still goes out, runs on the worker and comes back.
    rt.block_on(async {
        let r = remote.lock().await;
        let c = r.hub.client().await;
        let project = r.hub.dir.path().join("proj").display().to_string();
        let parent = register(&c, "human", &project, None).await;
        let (run, _) = start(&c, "quick", &parent).await;
        let done = crate::support::wait_run(&c, &run).await;
        assert_eq!(done["run"]["status"], "success", "{done:#}");
        assert_eq!(done["run"]["result"]["output"], "remote done", "{done:#}");
        assert!(!r.worker.log().contains("panicked"), "{}", r.worker.log());
    });
}
