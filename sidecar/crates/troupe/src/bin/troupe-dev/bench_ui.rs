//! `troupe-dev bench ui`: the dashboard's figures with `troupe ui` running in a real terminal
//! (tmux, 80×24) while parties of one trivial member run one after another. From a member's
//! status change on the daemon's timeline to the dashboard drawing the party's new status
//! (`TROUPE_UI_LATENCY_LOG`), beside a floor measured in the same run: the same events reaching
//! a bare `subscribe_events` client. Then the dashboard's CPU and memory while nothing happens.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use clap::Args;
use serde::Serialize;
use serde_json::json;

use crate::harness::{cpu_ticks, median, rss_kib, scratch_layout, start_daemon, ticks_per_second};

#[derive(Debug, Args)]
pub struct UiArgs {
    /// Parties launched one after another (one member each).
    #[arg(long, default_value_t = 20)]
    pub parties: usize,
    /// Seconds the idle CPU is measured over.
    #[arg(long, default_value_t = 10)]
    pub idle_secs: u64,
}

#[derive(Debug, Serialize)]
struct Figures {
    parties: usize,
    member_events: usize,
    floor_event_to_subscriber_ms: f64,
    status_change_to_screen_ms: f64,
    status_change_to_screen_p90_ms: f64,
    screen_over_floor: f64,
    idle_cpu_percent: f64,
    idle_rss_mib: f64,
}

fn tmux(socket: &Path) -> Command {
    let mut c = Command::new("tmux");
    c.arg("-S").arg(socket).arg("-f").arg("/dev/null");
    c
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

pub async fn run(args: UiArgs, json_out: bool) -> anyhow::Result<()> {
    ensure!(args.parties >= 1, "--parties must be at least 1");
    ensure!(
        Command::new("tmux").arg("-V").output().is_ok(),
        "this bench runs the dashboard in tmux: install it (apt install tmux)"
    );
    let (scratch, layout) = scratch_layout("troupe-bench-ui-")?;
    let (daemon, client, _) = start_daemon(&layout).await?;
    let project = scratch.path().join("proj");
    std::fs::create_dir_all(&project)?;
    std::fs::write(project.join("README.md"), "bench\n")?;
    for git in [
        &["init", "-q", "-b", "main"][..],
        &["add", "."],
        &[
            "-c",
            "user.name=b",
            "-c",
            "user.email=b@b",
            "commit",
            "-qm",
            "init",
        ],
    ] {
        let ok = Command::new("git")
            .args(git)
            .current_dir(&project)
            .status()?;
        ensure!(ok.success(), "git {git:?} failed");
    }
    client
        .call(
            "create_agent_definition",
            json!({ "definition": { "name": "quick", "command": ["sh", "-c",
                "troupe call complete '{\"output\":\"ok\"}' >/dev/null"] } }),
        )
        .await?;
    client
        .call(
            "create_party_definition",
            json!({ "definition": { "name": "one", "roles": { "m": { "agent": "quick" } } } }),
        )
        .await?;

    // The floor: when each event reaches a bare subscriber.
    let mut events = client
        .subscribe("subscribe_events", json!({}), "unsubscribe_events")
        .await?;
    let floor = tokio::spawn(async move {
        let mut seen: HashMap<i64, (String, i64)> = HashMap::new();
        while let Some(Ok(e)) = events.next().await {
            let at = e["at"].as_str().and_then(troupe::ui::parse_ms);
            if let (Some(seq), Some(at)) = (e["seq"].as_i64(), at) {
                let kind = e["kind"].as_str().unwrap_or("").to_string();
                seen.insert(seq, (kind, now_ms() - at));
            }
        }
        seen
    });

    let socket = scratch.path().join("tmux.sock");
    let log = scratch.path().join("latency.log");
    let ui = format!(
        "exec '{}' --data-dir '{}' ui",
        crate::troupe_exe()?.display(),
        layout.data_dir.display()
    );
    let ok = tmux(&socket)
        .args([
            "new-session",
            "-d",
            "-x",
            "80",
            "-y",
            "24",
            "-s",
            "ui",
            "-c",
        ])
        .arg(&project)
        .arg("-e")
        .arg(format!(
            "TROUPE_RUNTIME_DIR={}",
            layout.runtime_dir.display()
        ))
        .arg("-e")
        .arg(format!("TROUPE_UI_LATENCY_LOG={}", log.display()))
        .args(["-e", "TERM=xterm-256color", &ui])
        .status()?;
    ensure!(ok.success(), "tmux could not start the dashboard");
    let screen = || -> String {
        tmux(&socket)
            .args(["capture-pane", "-p", "-t", "ui"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while !screen().contains("● connected") {
        if Instant::now() > deadline {
            bail!("the dashboard did not connect; its screen:\n{}", screen());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    for i in 0..args.parties {
        let r = client
            .call(
                "launch_party",
                json!({ "name": "one", "cwd": project.display().to_string() }),
            )
            .await?;
        let party = r["party_id"].as_str().context("no party_id")?.to_string();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let s = client
                .call("get_party_status", json!({ "party_id": party }))
                .await?;
            if s["party"]["status"] == "completed" {
                break;
            }
            if Instant::now() > deadline {
                bail!("party {} did not complete: {s}", i + 1);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    // The last party's last status reaches the screen.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !screen().contains(&format!("Parties ({})", args.parties.min(30))) {
        if Instant::now() > deadline {
            bail!("the dashboard never showed every party:\n{}", screen());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;

    // Idle: nothing happens for a while.
    let pid: u32 = String::from_utf8_lossy(
        &tmux(&socket)
            .args(["list-panes", "-t", "ui", "-F", "#{pane_pid}"])
            .output()?
            .stdout,
    )
    .trim()
    .parse()
    .context("the dashboard's pid")?;
    let before = cpu_ticks(pid)?;
    tokio::time::sleep(Duration::from_secs(args.idle_secs)).await;
    let idle_ticks = cpu_ticks(pid)? - before;
    let idle_rss = rss_kib(pid)? as f64 / 1024.0;
    let _ = tmux(&socket).arg("kill-server").status();
    drop(client);
    drop(daemon);
    let floor = floor.await.context("the floor's subscriber")?;

    let text = std::fs::read_to_string(&log).context("the dashboard's latency log")?;
    let mut screen_ms = Vec::new();
    let mut floor_ms = Vec::new();
    for line in text.lines() {
        let mut parts = line.split_whitespace();
        let (Some(seq), Some(ms)) = (parts.next(), parts.next()) else {
            continue;
        };
        let (Ok(seq), Ok(ms)) = (seq.parse::<i64>(), ms.parse::<f64>()) else {
            continue;
        };
        // A member's status changes: its events.
        if let Some((kind, floor)) = floor.get(&seq)
            && kind.starts_with("member_")
        {
            screen_ms.push(ms);
            floor_ms.push(*floor as f64);
        }
    }
    ensure!(!screen_ms.is_empty(), "no member event reached the screen");
    let p90 = {
        let mut v = screen_ms.clone();
        v.sort_by(f64::total_cmp);
        v[((v.len() - 1) as f64 * 0.9).round() as usize]
    };
    let floor_median = median(floor_ms);
    let screen_median = median(screen_ms.clone());
    let figures = Figures {
        parties: args.parties,
        member_events: screen_ms.len(),
        floor_event_to_subscriber_ms: floor_median,
        status_change_to_screen_ms: screen_median,
        status_change_to_screen_p90_ms: p90,
        // The floor rounds to whole ms and may be 0: compare with at least 1 ms.
        screen_over_floor: screen_median / floor_median.max(1.0),
        idle_cpu_percent: idle_ticks as f64 / ticks_per_second() / args.idle_secs as f64 * 100.0,
        idle_rss_mib: idle_rss,
    };
    if json_out {
        println!("{}", serde_json::to_string_pretty(&figures)?);
    } else {
        println!(
            "troupe ui, {} parties ({} member events):\n  \
             floor: event → bare subscriber     {:>7.1} ms (median)\n  \
             status change → dashboard screen   {:>7.1} ms (median; p90 {:.1} ms) = {:.1}× the floor\n  \
             idle: CPU {:.2}% over {} s, RSS {:.1} MiB",
            figures.parties,
            figures.member_events,
            figures.floor_event_to_subscriber_ms,
            figures.status_change_to_screen_ms,
            figures.status_change_to_screen_p90_ms,
            figures.screen_over_floor,
            figures.idle_cpu_percent,
            args.idle_secs,
            figures.idle_rss_mib
        );
    }
    Ok(())
}
