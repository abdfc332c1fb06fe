//! `troupe-dev bench authority`: what admitting a call costs. A real daemon (child process)
//! with one process member that hands over its run's credential; then, in the same run: the
//! `list_sessions` round trip as the person (the floor) and as the member (its credential
//! checked and its run's liveness read on every call), a bound call (`poll_messages`, the
//! session filled from the credential) as the member against the person naming the session,
//! and `troupe_core::authority::admit` alone, in process, on the daemon's database; and what
//! the member box adds to a start: `true` started and waited for plain (the floor), in the
//! bubblewrap box of no run (the merge queue's tests), and in a run's whole box as a member gets
//! it (its paths, its egress proxy open, the relay inside) under bubblewrap and under Landlock
//! (`troupe_core::sandbox`).

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use serde::Serialize;
use serde_json::json;

use troupe::client::{self, Client};

#[derive(Debug, Args)]
pub struct AuthorityArgs {
    /// Round trips per measurement.
    #[arg(long, default_value_t = 3000)]
    pub calls: usize,
    /// Independent runs (fresh daemon each); medians are reported.
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
}

#[derive(Debug, Clone, Serialize)]
struct Figures {
    /// `list_sessions` as the person: the floor.
    person_list_sessions_us: f64,
    /// `list_sessions` with a run's credential.
    member_list_sessions_us: f64,
    /// `poll_messages {session_id, wait_ms: 0}` as the person.
    person_poll_us: f64,
    /// `poll_messages {wait_ms: 0}` as the member (session bound from the credential).
    member_poll_us: f64,
    /// `admit` alone, in process: the person (no check) and a member on a bound operation.
    admit_person_us: f64,
    admit_member_us: f64,
    /// Start and wait of `true`: plain (the floor) and in the sandbox, ms.
    plain_start_ms: f64,
    sandboxed_start_ms: f64,
    /// In a run's whole box (paths, egress proxy, relay): bubblewrap, then Landlock.
    run_box_bwrap_ms: f64,
    run_box_landlock_ms: f64,
}

/// `true` in a run's whole box under `layer`: planned as the daemon plans a member's, with its
/// egress proxy open (so the relay starts inside a bubblewrap box).
async fn run_box_ms(
    layout: &troupe_api::layout::Layout,
    workdir: &std::path::Path,
    layer: troupe_core::sandbox::LayerKind,
    n: usize,
) -> anyhow::Result<f64> {
    use troupe_core::sandbox::{LayerKind, Sandbox, plan};
    let exe = std::env::current_exe()?.with_file_name("troupe");
    if !exe.is_file() {
        bail!(
            "{} is not built: build the troupe binary beside troupe-dev",
            exe.display()
        );
    }
    let sandbox = Sandbox::detect_with(layout, &exe, Some(layer));
    if sandbox.layer() != layer {
        bail!(
            "the {} layer is not available here: {}",
            layer.as_str(),
            sandbox.status()
        );
    }
    let agent: troupe_engine::AgentDefinition =
        serde_json::from_value(json!({ "name": "bench", "command": ["true"] }))?;
    let mut planned = plan::plan(
        sandbox.base(),
        plan::PlanInput {
            run_id: &format!("bench-{}", layer.as_str()),
            agent: &agent,
            env: &[],
            project: None,
            troupe_exe: &exe,
            project_root: None,
        },
    );
    let store = troupe_store::Store::open(&layout.data_dir.join("bench-egress.db"))?;
    let gate = troupe_core::egress::Gate::new(
        "bench".into(),
        "bench".into(),
        None,
        None,
        "bench".into(),
        Vec::new(),
        Duration::from_secs(1),
        store,
        None,
    );
    let endpoint = troupe_core::egress::open(
        std::sync::Arc::new(gate),
        &planned.box_dir.join("egress").join("sock"),
        layer == LayerKind::Landlock,
    )?;
    planned.egress = Some(plan::Egress {
        socket: endpoint.socket.clone(),
        tcp_port: endpoint.tcp_port,
        forwards: Vec::new(),
    });
    let argv = sandbox
        .for_run(planned)
        .argv(vec!["true".to_string()], workdir)
        .map_err(anyhow::Error::msg)?;
    let ms = tokio::task::spawn_blocking(move || start_ms(&argv, n)).await??;
    drop(endpoint);
    Ok(ms)
}

/// Median ms to start `argv` and wait for it, over `n` starts.
fn start_ms(argv: &[String], n: usize) -> anyhow::Result<f64> {
    let (program, args) = argv.split_first().context("empty command")?;
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let status = std::process::Command::new(program)
            .args(args)
            .stdin(std::process::Stdio::null())
            .status()?;
        if !status.success() {
            bail!("{argv:?} failed: {status}");
        }
        samples.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    Ok(crate::harness::median(samples))
}

const KEEPER: &str = "#!/bin/sh\nprintf '%s' \"$TROUPE_RUN_TOKEN\" > \"$KEYS/tok.tmp\" && mv \"$KEYS/tok.tmp\" \"$KEYS/tok\"\nwhile [ ! -e \"$KEYS/release\" ]; do sleep 0.05; done\ntroupe call complete '{\"output\":\"ok\"}' >/dev/null\n";

async fn median_us(
    calls: usize,
    mut call: impl AsyncFnMut() -> anyhow::Result<()>,
) -> anyhow::Result<f64> {
    let mut samples = Vec::with_capacity(calls);
    for _ in 0..calls {
        let t = Instant::now();
        call().await?;
        samples.push(t.elapsed());
    }
    let (p50, _) = crate::harness::percentiles(&mut samples);
    Ok(p50)
}

async fn one_run(args: &AuthorityArgs) -> anyhow::Result<Figures> {
    let (scratch, layout) = crate::harness::scratch_layout("troupe-bench-auth-")?;
    let (_daemon, person, _) = crate::harness::start_daemon(&layout).await?;
    let keys = scratch.path().join("keys");
    std::fs::create_dir_all(&keys)?;
    let script = scratch.path().join("keeper.sh");
    std::fs::write(&script, KEEPER)?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))?;
    }
    let project = scratch.path().join("proj");
    std::fs::create_dir_all(project.join(".git"))?;
    person
        .call(
            "create_agent_definition",
            json!({ "definition": { "name": "keeper", "command": [script],
                    "env": { "KEYS": keys.display().to_string() },
                    // It hands its credential over through this folder, outside its box.
                    "sandbox": { "writable": [keys.display().to_string()] } } }),
        )
        .await?;
    let parent = crate::harness::register(&person, &project.display().to_string()).await?;
    let run = person
        .call(
            "start_agent",
            json!({ "agent": "keeper", "prompt": "wait", "parent_session_id": parent }),
        )
        .await?;
    let session = run["session_id"]
        .as_str()
        .context("no session")?
        .to_string();
    let deadline = Instant::now() + Duration::from_secs(30);
    let token = loop {
        if let Ok(t) = std::fs::read_to_string(keys.join("tok"))
            && !t.is_empty()
        {
            break t;
        }
        if Instant::now() > deadline {
            bail!("the member did not hand over its credential");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let member: Client = client::connect_with_token(&layout, &token).await?;

    let n = args.calls;
    let person_list_sessions_us = median_us(n, async || {
        person.call("list_sessions", json!({})).await?;
        Ok(())
    })
    .await?;
    let member_list_sessions_us = median_us(n, async || {
        member.call("list_sessions", json!({})).await?;
        Ok(())
    })
    .await?;
    let person_poll_us = median_us(n, async || {
        person
            .call(
                "poll_messages",
                json!({ "session_id": session, "wait_ms": 0 }),
            )
            .await?;
        Ok(())
    })
    .await?;
    let member_poll_us = median_us(n, async || {
        member
            .call("poll_messages", json!({ "wait_ms": 0 }))
            .await?;
        Ok(())
    })
    .await?;

    // `admit` alone, on the daemon's own database (read-only use: reads of the run).
    let store = troupe_core::boot::open_store(&layout)?;
    let run_row = store.run_of_session(&session)?.context("no run row")?;
    let member_caller = troupe_core::Caller::member_of(&run_row, false);
    let person_caller = troupe_core::Caller::person("bench");
    let access = troupe_api::Access::Caller("session_id");
    let time = |caller: &troupe_core::Caller| -> anyhow::Result<f64> {
        let t = Instant::now();
        for _ in 0..n {
            troupe_core::authority::admit(
                &store,
                caller,
                "poll_messages",
                access,
                Some(json!({ "wait_ms": 0 })),
            )?;
        }
        Ok(t.elapsed().as_secs_f64() * 1e6 / n as f64)
    };
    let admit_person_us = time(&person_caller)?;
    let admit_member_us = time(&member_caller)?;
    drop(store);
    std::fs::write(keys.join("release"), "")?;
    let sandbox = troupe_core::sandbox::Sandbox::detect(&layout);
    if !sandbox.is_on() {
        bail!("the sandbox is off here: {}", sandbox.status());
    }
    let starts = 200.min(n);
    let plain_start_ms = start_ms(&["true".to_string()], starts)?;
    let sandboxed_start_ms = start_ms(
        &sandbox
            .argv(vec!["true".to_string()], scratch.path())
            .map_err(anyhow::Error::msg)?,
        starts,
    )?;
    let workdir = layout.data_dir.join("clones/bench/dev-0");
    std::fs::create_dir_all(&workdir)?;
    let run_box_bwrap_ms = run_box_ms(
        &layout,
        &workdir,
        troupe_core::sandbox::LayerKind::Bubblewrap,
        starts,
    )
    .await?;
    let run_box_landlock_ms = run_box_ms(
        &layout,
        &workdir,
        troupe_core::sandbox::LayerKind::Landlock,
        starts,
    )
    .await?;
    Ok(Figures {
        run_box_bwrap_ms,
        run_box_landlock_ms,
        person_list_sessions_us,
        member_list_sessions_us,
        person_poll_us,
        member_poll_us,
        admit_person_us,
        admit_member_us,
        plain_start_ms,
        sandboxed_start_ms,
    })
}

pub async fn run(args: AuthorityArgs, json: bool) -> anyhow::Result<()> {
    if args.runs == 0 || args.calls == 0 {
        bail!("--runs and --calls must be at least 1");
    }
    let mut runs = Vec::new();
    for i in 0..args.runs {
        let f = one_run(&args)
            .await
            .with_context(|| format!("run {}", i + 1))?;
        if !json {
            eprintln!("run {}: {f:?}", i + 1);
        }
        runs.push(f);
    }
    let m = |pick: fn(&Figures) -> f64| crate::harness::median(runs.iter().map(pick).collect());
    let summary = json!({
        "runs": args.runs,
        "calls": args.calls,
        "person_list_sessions_us": m(|f| f.person_list_sessions_us),
        "member_list_sessions_us": m(|f| f.member_list_sessions_us),
        "person_poll_us": m(|f| f.person_poll_us),
        "member_poll_us": m(|f| f.member_poll_us),
        "admit_person_us": m(|f| f.admit_person_us),
        "admit_member_us": m(|f| f.admit_member_us),
        "admit_member_share_of_list_sessions": m(|f| f.admit_member_us / f.person_list_sessions_us),
        "member_over_person_list_sessions": m(|f| f.member_list_sessions_us / f.person_list_sessions_us),
        "plain_start_ms": m(|f| f.plain_start_ms),
        "sandboxed_start_ms": m(|f| f.sandboxed_start_ms),
        "sandbox_start_added_ms": m(|f| f.sandboxed_start_ms - f.plain_start_ms),
        "run_box_bwrap_ms": m(|f| f.run_box_bwrap_ms),
        "run_box_landlock_ms": m(|f| f.run_box_landlock_ms),
        "run_box_bwrap_over_plain": m(|f| f.run_box_bwrap_ms / f.plain_start_ms),
        "run_box_landlock_over_plain": m(|f| f.run_box_landlock_ms / f.plain_start_ms),
    });
    if json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        println!(
            "authority (medians of {} runs, {} calls each):\n  list_sessions round trip: person {:.1} µs (floor), member {:.1} µs ({:.2}×)\n  poll_messages round trip: person naming the session {:.1} µs, member bound {:.1} µs\n  admit alone: person {:.2} µs, member on a bound operation {:.2} µs = {:.1}% of the floor\n  start and wait of `true`: plain {:.2} ms (floor), in the box of no run {:.2} ms (+{:.2} ms)\n  in a run's whole box (paths, egress proxy, relay): bubblewrap {:.2} ms ({:.1}× the floor), Landlock {:.2} ms ({:.1}×)",
            args.runs,
            args.calls,
            summary["person_list_sessions_us"].as_f64().unwrap_or(0.0),
            summary["member_list_sessions_us"].as_f64().unwrap_or(0.0),
            summary["member_over_person_list_sessions"]
                .as_f64()
                .unwrap_or(0.0),
            summary["person_poll_us"].as_f64().unwrap_or(0.0),
            summary["member_poll_us"].as_f64().unwrap_or(0.0),
            summary["admit_person_us"].as_f64().unwrap_or(0.0),
            summary["admit_member_us"].as_f64().unwrap_or(0.0),
            summary["admit_member_share_of_list_sessions"]
                .as_f64()
                .unwrap_or(0.0)
                * 100.0,
            summary["plain_start_ms"].as_f64().unwrap_or(0.0),
            summary["sandboxed_start_ms"].as_f64().unwrap_or(0.0),
            summary["sandbox_start_added_ms"].as_f64().unwrap_or(0.0),
            summary["run_box_bwrap_ms"].as_f64().unwrap_or(0.0),
            summary["run_box_bwrap_over_plain"].as_f64().unwrap_or(0.0),
            summary["run_box_landlock_ms"].as_f64().unwrap_or(0.0),
            summary["run_box_landlock_over_plain"]
                .as_f64()
                .unwrap_or(0.0),
        );
    }
    Ok(())
}
