//! Plugin host benchmark (`cargo bench -p troupe-plugin-host`): a warm router call, a fresh
//! pooled instance per call, a whole `route` call, loading a component from the disk cache
//! against compiling it, and the cost of one guest→host tool call. Uses the frozen 0.1.0
//! router fixture (a real Rust guest) and an executor made from WAT, so it needs no guest
//! toolchain. Prints medians and p99s.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use troupe_plugin_host::{
    CallContext, Candidate, ExecTask, HostOptions, PluginHost, Source, ToolHandler,
};

#[path = "../src/tests/wat_component.rs"]
mod wat_component;
const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/v0.1.0");

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn report(name: &str, mut v: Vec<Duration>) {
    let p50 = pct(&mut v, 0.5);
    let p99 = pct(&mut v, 0.99);
    println!(
        "{name:<44} p50 {:>9.2} µs   p99 {:>9.2} µs   (n={})",
        p50.as_secs_f64() * 1e6,
        p99.as_secs_f64() * 1e6,
        v.len()
    );
}

/// An executor whose `run` calls `call-tool("echo", "{}")` max-turns times, then errs.
fn tool_loop_executor() -> Vec<u8> {
    let wat = r#"(module
      (import "troupe:plugin/tools@0.1.0" "call-tool"
        (func $call (param i32 i32 i32 i32 i32)))
      (memory (export "memory") 64)
      (global $bump (mut i32) (i32.const 65536))
      (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32)
        (local $p i32)
        ;; Reset when near the end: the bench makes many calls.
        (if (i32.gt_u (global.get $bump) (i32.const 4000000))
          (then (global.set $bump (i32.const 65536))))
        (local.set $p (i32.and
          (i32.add (global.get $bump) (i32.sub (local.get 2) (i32.const 1)))
          (i32.sub (i32.const 0) (local.get 2))))
        (global.set $bump (i32.add (local.get $p) (local.get 3)))
        (local.get $p))
      (data (i32.const 16) "echo{}done")
      (func (export "troupe:plugin/execution@0.1.0#run")
        (param i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i64) (result i32)
        (local $i i32)
        (block $out
          (loop $again
            (br_if $out (i32.ge_u (local.get $i) (local.get 10)))
            (call $call (i32.const 16) (i32.const 4) (i32.const 20) (i32.const 2) (i32.const 1024))
            (local.set $i (i32.add (local.get $i) (i32.const 1)))
            (br $again)))
        ;; err("done")
        (i32.store8 (i32.const 2048) (i32.const 1))
        (i32.store (i32.const 2056) (i32.const 22))
        (i32.store (i32.const 2060) (i32.const 4))
        (i32.const 2048)))"#;
    wat_component::component(
        wat_component::Wit::Dir(wat_component::WIT_DIR),
        "executor",
        wat,
    )
}

/// Answers every tool call at once, counting them.
struct Echo(Arc<AtomicU64>);

impl ToolHandler for Echo {
    fn call(
        &self,
        _name: String,
        arguments: String,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<String, String>> + Send + 'static>> {
        self.0.fetch_add(1, Ordering::Relaxed);
        Box::pin(async move { Ok(arguments) })
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let tmp = tempfile::tempdir().unwrap();
    let plugin_dir = tmp.path().join("template");
    copy_dir(Path::new(FIXTURE), &plugin_dir);
    let wasm_len = std::fs::metadata(plugin_dir.join("template.wasm"))
        .unwrap()
        .len();
    println!("router: the frozen 0.1.0 fixture (a Rust guest), {wasm_len} bytes");

    // Compile (fresh cache each time) against loading from the cache.
    let mut compile = Vec::new();
    let mut cached = Vec::new();
    for i in 0..5 {
        let host = PluginHost::new(HostOptions {
            cache_dir: Some(tmp.path().join(format!("cache-{i}"))),
            ..Default::default()
        })
        .unwrap();
        let p = host.load(&plugin_dir).unwrap();
        assert_eq!(p.source, Source::Compiled);
        compile.push(Duration::from_secs_f64(p.load_ms / 1e3));
        for _ in 0..20 {
            let p = host.load(&plugin_dir).unwrap();
            assert_eq!(p.source, Source::Cache);
            cached.push(Duration::from_secs_f64(p.load_ms / 1e3));
        }
    }
    report("load: compile (read, hash, compile, link)", compile);
    report("load: from the disk cache (read, hash, map)", cached);

    let host = PluginHost::new(HostOptions {
        cache_dir: Some(tmp.path().join("cache")),
        ..Default::default()
    })
    .unwrap();
    host.load(&plugin_dir).unwrap();
    let candidates: Vec<Candidate> = ["reviewer", "developer", "tester", "writer"]
        .into_iter()
        .map(|n| Candidate {
            name: n.into(),
            description: format!("the {n}"),
            capabilities: vec![n.into()],
        })
        .collect();
    // Warm up, then measure.
    host.bench_router("template", candidates.clone(), "ask the developer", 200)
        .await
        .unwrap();
    let t = host
        .bench_router("template", candidates, "ask the developer", 5000)
        .await
        .unwrap();
    report("router: warm call (instance exists)", t.warm_call);
    report("router: a fresh store alone", t.store);
    report("router: fresh pooled instance (InstancePre)", t.instantiate);
    report("router: first call on a fresh instance", t.first_call);
    report("router: whole route() (store+instance+call)", t.full_call);

    // Guest → host tool calls.
    let exec_dir = tmp.path().join("tool-loop");
    std::fs::create_dir_all(&exec_dir).unwrap();
    std::fs::write(
        exec_dir.join("plugin.toml"),
        "name = \"tool-loop\"\nversion = \"1.0.0\"\nkind = \"executor\"\nwit = \"0.1.0\"\n",
    )
    .unwrap();
    std::fs::write(exec_dir.join("tool_loop.wasm"), tool_loop_executor()).unwrap();
    host.load(&exec_dir).unwrap();
    let counter = Arc::new(AtomicU64::new(0));
    let run = |calls: u32| {
        let host = host.clone();
        let counter = counter.clone();
        async move {
            let task = ExecTask {
                prompt: String::new(),
                system_prompt: None,
                model: None,
                tools: Vec::new(),
                max_turns: calls,
                deadline: SystemTime::now() + Duration::from_secs(60),
            };
            let started = Instant::now();
            let err = host
                .execute(
                    "tool-loop",
                    task,
                    &CallContext::default(),
                    Arc::new(Echo(counter.clone())),
                )
                .await
                .unwrap_err();
            assert!(err.to_string().contains("done"), "{err}");
            let elapsed = started.elapsed();
            assert_eq!(counter.swap(0, Ordering::Relaxed), u64::from(calls));
            elapsed
        }
    };
    run(1000).await;
    let mut per_call = Vec::new();
    // A run may make at most 1000 tool calls.
    for _ in 0..50 {
        let base = run(0).await;
        let many = run(1000).await;
        per_call.push(many.saturating_sub(base) / 1000);
    }
    report("executor: one guest→host call-tool round trip", per_call);
}
