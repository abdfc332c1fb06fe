//! Host tests with components made here from the real WIT and hand-written core WAT (no guest
//! toolchain): calls, traps, epoch deadlines, memory caps, WIT versions, bad manifests, the
//! compile cache, and the frozen fixture of each released WIT version.

use std::path::{Path, PathBuf};

use super::*;

mod fuzz;
mod wat_component;

use wat_component::{WIT_DIR, Wit, component};

/// Writes a plugin folder (manifest + component) under `root`.
fn plugin_dir(root: &Path, manifest: &str, wasm: &[u8]) -> PathBuf {
    let m = Manifest::parse(manifest).unwrap();
    let dir = root.join(&m.name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("plugin.toml"), manifest).unwrap();
    std::fs::write(dir.join(m.component_file()), wasm).unwrap();
    dir
}

fn manifest(name: &str, kind: &str) -> String {
    format!("name = \"{name}\"\nversion = \"1.0.0\"\nkind = \"{kind}\"\nwit = \"0.1.0\"\n")
}

const ALLOC: &str = r#"
    (memory (export "memory") 2)
    (global $bump (mut i32) (i32.const 4096))
    (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32)
      (local $p i32)
      (local.set $p (i32.and
        (i32.add (global.get $bump) (i32.sub (local.get 2) (i32.const 1)))
        (i32.sub (i32.const 0) (local.get 2))))
      (global.set $bump (i32.add (local.get $p) (local.get 3)))
      (local.get $p))
"#;

/// A router that picks the first candidate, reason "first".
fn first_router() -> Vec<u8> {
    let wat = format!(
        r#"(module {ALLOC}
          (data (i32.const 64) "first")
          (func (export "troupe:plugin/routing@0.1.0#route")
            (param i32 i32 i32 i32 i32 i32) (result i32)
            (if (i32.eqz (local.get 5))
              (then
                ;; err("no candidates")
                (i32.store8 (i32.const 128) (i32.const 1))
                (i32.store (i32.const 132) (i32.const 96))
                (i32.store (i32.const 136) (i32.const 13))
                (return (i32.const 128))))
            (i32.store8 (i32.const 128) (i32.const 0))
            (i32.store (i32.const 132) (i32.load (local.get 4)))
            (i32.store (i32.const 136) (i32.load offset=4 (local.get 4)))
            (i32.store (i32.const 140) (i32.const 64))
            (i32.store (i32.const 144) (i32.const 5))
            (i32.const 128))
          (data (i32.const 96) "no candidates"))"#
    );
    component(Wit::Dir(WIT_DIR), "router", &wat)
}

/// A recovery strategy whose `decide` runs `body` and then answers restart(crash-count × 100).
fn recovery(body: &str) -> Vec<u8> {
    let wat = format!(
        r#"(module {ALLOC}
          (func (export "troupe:plugin/recovery-strategy@0.1.0#decide")
            (param i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32)
            {body}
            (i32.store8 (i32.const 256) (i32.const 0))
            (i64.store (i32.const 264) (i64.mul (i64.extend_i32_u (local.get 6)) (i64.const 100)))
            (i32.const 256)))"#
    );
    component(Wit::Dir(WIT_DIR), "recovery", &wat)
}

fn host() -> PluginHost {
    PluginHost::new(HostOptions::default()).unwrap()
}

fn crash(n: u32) -> CrashContext {
    CrashContext {
        party: "p".into(),
        role: "developer".into(),
        member: "developer#0".into(),
        crash_count: n,
        retry_limit: 3,
        exit_status: Some(1),
        reason: "exit status 1".into(),
        recent_events: vec!["member.crashed: developer#0".into()],
        strategy: "plugin:backoff".into(),
    }
}

fn candidates() -> Vec<Candidate> {
    ["reviewer", "developer"]
        .into_iter()
        .map(|n| Candidate {
            name: n.into(),
            description: format!("the {n}"),
            capabilities: vec![n.into()],
        })
        .collect()
}

#[tokio::test]
async fn a_router_and_a_recovery_strategy_answer() {
    let tmp = tempfile::tempdir().unwrap();
    let host = host();
    host.load(&plugin_dir(
        tmp.path(),
        &manifest("first", "router"),
        &first_router(),
    ))
    .unwrap();
    let choice = host
        .route(
            "first",
            "review this".into(),
            vec![],
            candidates(),
            &CallContext::default(),
        )
        .await
        .unwrap();
    assert_eq!(
        choice,
        RouteChoice {
            agent: "reviewer".into(),
            reason: "first".into()
        }
    );
    let err = host
        .route("first", "x".into(), vec![], vec![], &CallContext::default())
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "plugin first@1.0.0 returned an error: no candidates"
    );

    host.load(&plugin_dir(
        tmp.path(),
        &manifest("backoff", "recovery"),
        &recovery(""),
    ))
    .unwrap();
    let d = host
        .recover("backoff", crash(3), &CallContext::default())
        .await
        .unwrap();
    assert_eq!(d, RecoveryDecision::Restart { delay_ms: 300 });

    // Kinds are checked.
    let err = host
        .recover("first", crash(1), &CallContext::default())
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "plugin first@1.0.0 is a router plugin, not a recovery"
    );
    let err = host
        .recover("nope", crash(1), &CallContext::default())
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "no plugin named nope is installed");
}

#[tokio::test]
async fn traps_loops_and_memory_hogs_are_stopped_and_named() {
    let tmp = tempfile::tempdir().unwrap();
    let host = host();
    host.load(&plugin_dir(
        tmp.path(),
        &manifest("trapper", "recovery"),
        &recovery("unreachable"),
    ))
    .unwrap();
    host.load(&plugin_dir(
        tmp.path(),
        &manifest("looper", "recovery"),
        &recovery("(loop $l (br $l))"),
    ))
    .unwrap();
    host.load(&plugin_dir(
        tmp.path(),
        &manifest("hog", "recovery"),
        &recovery("(drop (memory.grow (i32.const 2000)))"),
    ))
    .unwrap();
    let mut grants = Grants::default();
    grants.plugins.insert(
        "looper".into(),
        PluginGrant {
            call_timeout_ms: Some(100),
            ..Default::default()
        },
    );
    host.set_grants(grants);
    let call = CallContext::default();

    let err = host.recover("trapper", crash(1), &call).await.unwrap_err();
    assert!(matches!(err, PluginError::Trap { .. }), "{err}");
    assert!(
        err.to_string()
            .starts_with("plugin trapper@1.0.0 trapped: "),
        "{err}"
    );
    assert!(err.to_string().contains("unreachable"), "{err}");

    let started = Instant::now();
    let err = host.recover("looper", crash(1), &call).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "plugin looper@1.0.0 ran past its 100 ms deadline and was stopped"
    );
    assert!(started.elapsed() < Duration::from_secs(2));

    let err = host.recover("hog", crash(1), &call).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "plugin hog@1.0.0 ran out of memory (its limit is 64 MiB)"
    );

    // Each call had its own store: the host goes on, and the same plugins answer again
    // (the trapping ones trap again, freshly).
    host.load(&plugin_dir(
        tmp.path(),
        &manifest("fine", "recovery"),
        &recovery(""),
    ))
    .unwrap();
    for _ in 0..3 {
        assert_eq!(
            host.recover("fine", crash(2), &call).await.unwrap(),
            RecoveryDecision::Restart { delay_ms: 200 }
        );
        assert!(host.recover("trapper", crash(1), &call).await.is_err());
    }
}

#[test]
fn unsupported_wit_versions_and_bad_manifests_are_refused_clearly() {
    let tmp = tempfile::tempdir().unwrap();
    let host = host();

    // A manifest claiming a version the host does not know.
    let m = "name = \"future\"\nversion = \"1.0.0\"\nkind = \"router\"\nwit = \"0.9.0\"\n";
    let err = host
        .load(&plugin_dir(tmp.path(), m, &first_router()))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "plugin future@1.0.0 targets WIT troupe:plugin@0.9.0, which this host does not support (it supports 0.1.0)"
    );

    // A component built against another version of the package, claiming 0.1.0.
    let other = r#"
        package troupe:plugin@0.2.0;
        interface routing { route: func(text: string) -> string; }
        world router { export routing; }
    "#;
    let wat = format!(
        r#"(module {ALLOC}
          (func (export "troupe:plugin/routing@0.2.0#route") (param i32 i32) (result i32)
            (i32.const 0)))"#
    );
    let wasm = component(Wit::Inline(other), "router", &wat);
    let err = host
        .load(&plugin_dir(tmp.path(), &manifest("liar", "router"), &wasm))
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with(
            "plugin liar@1.0.0 cannot be loaded: it does not implement the troupe:plugin@0.1.0 router world"
        ),
        "{err}"
    );

    // A router must not import anything beyond host + WASI: a router built as an executor
    // (importing `tools`) is refused.
    let wat = format!(
        r#"(module
          (import "troupe:plugin/tools@0.1.0" "report-usage" (func $usage (param i64 i64 f64)))
          {ALLOC}
          (func (export "troupe:plugin/execution@0.1.0#run")
            (param i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i64) (result i32)
            (call $usage (i64.const 1) (i64.const 1) (f64.const 0))
            (i32.const 0)))"#
    );
    let wasm = component(Wit::Dir(WIT_DIR), "executor", &wat);
    let err = host
        .load(&plugin_dir(
            tmp.path(),
            &manifest("sneaky", "router"),
            &wasm,
        ))
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with(
            "plugin sneaky@1.0.0 cannot be loaded: it imports something a router plugin is not given"
        ),
        "{err}"
    );

    // Manifests.
    let cases: &[(&str, &str)] = &[
        ("name = \"x\"\n", "missing field `version`"),
        (
            "name = \"Bad Name\"\nversion = \"1.0.0\"\nkind = \"router\"\nwit = \"0.1.0\"\n",
            "name \"Bad Name\" must be 1-64 characters of a-z, 0-9 and '-'",
        ),
        (
            "name = \"x\"\nversion = \"1\"\nkind = \"router\"\nwit = \"0.1.0\"\n",
            "version \"1\" must look like 1.2.3",
        ),
        (
            "name = \"x\"\nversion = \"1.0.0\"\nkind = \"wizard\"\nwit = \"0.1.0\"\n",
            "unknown variant `wizard`",
        ),
        (
            "name = \"x\"\nversion = \"1.0.0\"\nkind = \"router\"\nwit = \"0.1.0\"\ncomponent = \"../../etc/x.wasm\"\n",
            "must be a .wasm file name in the plugin's folder",
        ),
        (
            "name = \"x\"\nversion = \"1.0.0\"\nkind = \"router\"\nwit = \"0.1.0\"\n[http]\nhosts = [\"example.com\"]\n",
            "a router plugin cannot ask for HTTP; only executors may",
        ),
        (
            "name = \"x\"\nversion = \"1.0.0\"\nkind = \"router\"\nwit = \"0.1.0\"\nsurprise = 1\n",
            "unknown field `surprise`",
        ),
    ];
    for (text, want) in cases {
        let err = Manifest::parse(text).unwrap_err();
        assert!(err.contains(want), "{text:?}: {err}");
    }
    let dir = tmp.path().join("broken");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("plugin.toml"), "kind = 3").unwrap();
    let err = host.load(&dir).unwrap_err().to_string();
    assert!(err.starts_with("bad plugin manifest "), "{err}");
    assert!(err.contains("broken/plugin.toml"), "{err}");

    // Not a component at all.
    let err = host
        .load(&plugin_dir(
            tmp.path(),
            &manifest("junk", "router"),
            b"\0asm junk",
        ))
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("plugin junk@1.0.0 cannot be loaded: not a valid component"),
        "{err}"
    );
}

#[test]
fn compiled_components_come_back_from_the_disk_cache() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let dir = plugin_dir(tmp.path(), &manifest("first", "router"), &first_router());
    let a = PluginHost::new(HostOptions {
        cache_dir: Some(cache.clone()),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(a.load(&dir).unwrap().source, Source::Compiled);
    assert_eq!(a.load(&dir).unwrap().source, Source::Cache);
    // A fresh host (a restarted daemon) too.
    let b = PluginHost::new(HostOptions {
        cache_dir: Some(cache.clone()),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(b.load(&dir).unwrap().source, Source::Cache);
    // A corrupt entry is recompiled, not trusted. (Replaced by a rename, as the cache itself
    // writes: truncating a file a live component has mapped would pull memory from under it.)
    for e in std::fs::read_dir(&cache).unwrap() {
        let path = e.unwrap().path();
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, b"garbage").unwrap();
        std::fs::rename(&tmp, &path).unwrap();
    }
    assert_eq!(b.load(&dir).unwrap().source, Source::Compiled);
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&cache).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o700);
}

/// Every released WIT version keeps a frozen plugin built against it; the host must keep
/// loading and calling them after the WIT moves on.
#[tokio::test]
async fn frozen_plugins_of_every_released_wit_version_still_load() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    for wit in SUPPORTED_WIT {
        let dir = fixtures.join(format!("v{wit}"));
        let host = host();
        let plugin = host.load(&dir).unwrap();
        assert_eq!(plugin.manifest.wit, *wit);
        let choice = host
            .route(
                &plugin.manifest.name,
                "please ask the developer".into(),
                vec![],
                candidates(),
                &CallContext::default(),
            )
            .await
            .unwrap();
        assert_eq!(choice.agent, "developer", "{wit}");
    }
}

#[test]
fn grants_parse_origins_and_refuse_plain_http_to_remote_hosts() {
    use crate::grants::Origin;
    assert_eq!(
        Origin::parse("api.openai.com").unwrap(),
        Origin {
            https: true,
            host: "api.openai.com".into(),
            port: 443
        }
    );
    assert_eq!(
        Origin::parse("http://127.0.0.1:8080").unwrap(),
        Origin {
            https: false,
            host: "127.0.0.1".into(),
            port: 8080
        }
    );
    assert!(Origin::parse("http://[::1]:9").is_ok());
    assert_eq!(
        Origin::parse("http://api.openai.com").unwrap_err(),
        "\"http://api.openai.com\": plain http is allowed only for local hosts; use https"
    );
    assert!(Origin::parse("https://a.com/path").is_err());
    assert!(Origin::parse("https://user@a.com").is_err());
}

#[tokio::test]
async fn granted_names_that_resolve_to_private_addresses_are_refused() {
    let why = crate::http_gate::public_only("localhost", 443)
        .await
        .unwrap_err()
        .unwrap();
    assert!(
        why.starts_with("localhost resolves to the private address "),
        "{why}"
    );
    assert_eq!(
        crate::http_gate::public_only("no-such-host.invalid", 443).await,
        Err(None)
    );
    use std::net::IpAddr;
    for private in [
        "10.1.2.3",
        "192.168.0.1",
        "169.254.169.254",
        "100.64.0.1",
        "fd00::1",
        "fe80::1",
        "::ffff:127.0.0.1",
        "64:ff9b::7f00:1",
        "2002:a00:1::1",
        "198.18.0.1",
        "240.0.0.1",
    ] {
        assert!(
            crate::grants::is_private(&private.parse::<IpAddr>().unwrap()),
            "{private}"
        );
    }
    for public in ["8.8.8.8", "2606:4700::1111"] {
        assert!(
            !crate::grants::is_private(&public.parse::<IpAddr>().unwrap()),
            "{public}"
        );
    }
}

/// A guest that spins must not hold its thread: it yields every epoch tick, so whoever runs it
/// (the daemon's runner: cancel, timeout) can drop the call long before its own deadline.
#[tokio::test(flavor = "current_thread")]
async fn a_spinning_executor_can_be_dropped_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let wat = format!(
        r#"(module {ALLOC}
          (func (export "troupe:plugin/execution@0.1.0#run")
            (param i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i64) (result i32)
            (loop $l (br $l))
            (i32.const 0)))"#
    );
    let wasm = component(Wit::Dir(WIT_DIR), "executor", &wat);
    let host = host();
    host.load(&plugin_dir(
        tmp.path(),
        &manifest("spinner", "executor"),
        &wasm,
    ))
    .unwrap();
    struct NoTools;
    impl ToolHandler for NoTools {
        fn call(
            &self,
            _: String,
            _: String,
        ) -> std::pin::Pin<Box<dyn Future<Output = Result<String, String>> + Send + 'static>>
        {
            Box::pin(async { Err("no tools".to_string()) })
        }
    }
    let task = ExecTask {
        prompt: "spin".into(),
        system_prompt: None,
        model: None,
        tools: Vec::new(),
        max_turns: 1,
        deadline: std::time::SystemTime::now() + Duration::from_secs(600),
    };
    let started = Instant::now();
    let call = CallContext::default();
    let run = host.execute("spinner", task, &call, Arc::new(NoTools));
    let dropped = tokio::time::timeout(Duration::from_millis(200), run).await;
    assert!(dropped.is_err(), "the spinning run ended by itself?");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    // The host goes on serving.
    host.load(&plugin_dir(
        tmp.path(),
        &manifest("fine", "recovery"),
        &recovery(""),
    ))
    .unwrap();
    assert_eq!(
        host.recover("fine", crash(1), &call).await.unwrap(),
        RecoveryDecision::Restart { delay_ms: 100 }
    );
}
