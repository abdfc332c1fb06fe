//! `troupe-dev bench radar`: the conflict radar's cost on a real repository — N member
//! worktrees (default 8), each with a commit changing M files (default 200), neighbours
//! overlapping on half of theirs with adjacent-line edits (real conflicts). It measures a cold
//! scan (every pair and every branch with the target merged in memory), a warm scan (nothing
//! moved: every pair remembered), a scan after one member commits again, and the daemon's
//! idle look (reading the tips), beside a floor measured in the same run: one merge of two
//! branches that do not overlap, by a fresh radar. Medians over `--runs`.

use std::time::{Duration, Instant};

use clap::Args;
use serde::Serialize;
use troupe_worktree::radar::Radar;

use crate::harness::median;

#[derive(Debug, Args)]
pub struct RadarArgs {
    /// Member branches.
    #[arg(long, default_value_t = 8)]
    pub members: usize,
    /// Files each member changes.
    #[arg(long, default_value_t = 200)]
    pub files: usize,
    /// Repetitions of each measurement.
    #[arg(long, default_value_t = 7)]
    pub runs: usize,
}

#[derive(Debug, Serialize)]
struct Figures {
    members: usize,
    files_per_member: usize,
    files_in_repo: usize,
    pairs_merged_cold: u64,
    conflicting_pairs: usize,
    conflicting_files: usize,
    floor_one_merge_ms: f64,
    cold_scan_ms: f64,
    cold_over_floor: f64,
    warm_scan_ms: f64,
    after_one_commit_ms: f64,
    idle_look_us: f64,
    /// The merge queue's in-memory half over the same branches (merge strategy; conflicting
    /// ones left out, as `land_party` does).
    integrate_ms: f64,
    integrated: usize,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The same file with line `line` (1-based) rewritten by `who`.
fn edited(lines: usize, line: usize, who: usize) -> String {
    (1..=lines)
        .map(|i| {
            if i == line {
                format!("line {i} rewritten by member {who}\n")
            } else {
                format!("line {i}\n")
            }
        })
        .collect()
}

pub async fn run(args: RadarArgs, json: bool) -> anyhow::Result<()> {
    anyhow::ensure!(args.members >= 2, "--members must be at least 2");
    anyhow::ensure!(args.files >= 2, "--files must be at least 2");
    let scratch = tempfile::Builder::new()
        .prefix("troupe-bench-radar-")
        .tempdir()?;
    let root = scratch.path().join("repo");
    let step = args.files / 2;
    let total = step * (args.members + 1);
    const LINES: usize = 20;
    std::fs::create_dir_all(root.join("src"))?;
    for f in 0..total {
        std::fs::write(root.join(format!("src/f{f}.txt")), edited(LINES, 0, 0))?;
    }
    troupe_worktree::init_repo(&root, "base")?;
    let base = scratch.path().join("wt");
    let mut branches = Vec::new();
    for m in 0..args.members {
        let name = troupe_worktree::MemberName {
            party: "bench",
            role: "dev",
            index: u32::try_from(m)?,
        };
        let co = troupe_worktree::ensure_worktree(&root, &base, name)?;
        // Member m changes files [m·step, m·step + files): half shared with each neighbour,
        // on adjacent lines, which git will not merge.
        for f in m * step..m * step + args.files {
            let line = 2 + (m % 2) + 2 * ((f / step) % 2);
            std::fs::write(
                co.path.join(format!("src/f{f}.txt")),
                edited(LINES, line, m),
            )?;
        }
        troupe_worktree::commit_all(&co.path, &format!("member {m}"))?;
        branches.push((format!("dev#{m}"), co.branch, co.path));
    }
    let labels: Vec<(String, String)> = branches
        .iter()
        .map(|(l, b, _)| (l.clone(), b.clone()))
        .collect();
    let names: Vec<&str> = labels.iter().map(|(_, b)| b.as_str()).collect();

    let (mut floor, mut cold, mut warm, mut moved, mut idle, mut integrate) = (
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
    );
    let queue: Vec<(String, String)> = labels.iter().map(|(l, b)| (b.clone(), l.clone())).collect();
    let mut integrated = 0;
    let (mut merges, mut found) = (0, Vec::new());
    for run in 0..args.runs {
        // The floor: one merge of two members' branches that do not overlap, fresh radar.
        let apart = [labels[0].clone(), labels[2.min(labels.len() - 1)].clone()];
        let t = Instant::now();
        Radar::new().scan(&root, None, &apart)?;
        floor.push(ms(t.elapsed()));

        let mut radar = Radar::new();
        let t = Instant::now();
        found = radar.scan(&root, None, &labels)?;
        cold.push(ms(t.elapsed()));
        merges = radar.merges;

        let t = Instant::now();
        radar.scan(&root, None, &labels)?;
        warm.push(ms(t.elapsed()));

        // One member commits again: only its pairs are merged anew.
        let (_, _, path) = &branches[run % branches.len()];
        std::fs::write(path.join(format!("extra-{run}.txt")), "more\n")?;
        troupe_worktree::commit_all(path, "more work")?;
        let t = Instant::now();
        radar.scan(&root, None, &labels)?;
        moved.push(ms(t.elapsed()));

        let t = Instant::now();
        troupe_worktree::review::tips(&root, &names)?;
        idle.push(t.elapsed().as_secs_f64() * 1e6);

        let t = Instant::now();
        let done = troupe_worktree::land::integrate(
            &root,
            None,
            &queue,
            troupe_worktree::land::Strategy::Merge,
            "troupe/bench/landing",
        )?;
        integrate.push(ms(t.elapsed()));
        integrated = done
            .outcomes
            .iter()
            .filter(|(_, o)| matches!(o, troupe_worktree::land::BranchOutcome::Integrated { .. }))
            .count();
    }
    let figures = Figures {
        members: args.members,
        files_per_member: args.files,
        files_in_repo: total,
        pairs_merged_cold: merges,
        conflicting_pairs: found.len(),
        conflicting_files: found.iter().map(|c| c.files.len()).sum(),
        floor_one_merge_ms: median(floor),
        cold_scan_ms: median(cold),
        cold_over_floor: 0.0,
        warm_scan_ms: median(warm),
        after_one_commit_ms: median(moved),
        idle_look_us: median(idle),
        integrate_ms: median(integrate),
        integrated,
    };
    let figures = Figures {
        cold_over_floor: figures.cold_scan_ms / figures.floor_one_merge_ms.max(1e-9),
        ..figures
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&figures)?);
    } else {
        println!(
            "radar: {} members × {} changed files ({} files in the repo), medians of {} runs",
            figures.members, figures.files_per_member, figures.files_in_repo, args.runs
        );
        println!(
            "  cold scan (every pair + target, {} merges): {:.1} ms — {:.1}× the floor",
            figures.pairs_merged_cold, figures.cold_scan_ms, figures.cold_over_floor
        );
        println!(
            "  floor (one clean merge of two members' branches, fresh radar): {:.2} ms",
            figures.floor_one_merge_ms
        );
        println!(
            "  found: {} conflicting pairs, {} conflicting files",
            figures.conflicting_pairs, figures.conflicting_files
        );
        println!(
            "  warm scan (nothing moved): {:.2} ms",
            figures.warm_scan_ms
        );
        println!(
            "  after one member commits: {:.1} ms",
            figures.after_one_commit_ms
        );
        println!(
            "  idle look (read {} tips + HEAD): {:.0} µs",
            figures.members, figures.idle_look_us
        );
        println!(
            "  merge queue, in memory: {} branches integrated, the rest left out with conflicts: {:.1} ms",
            figures.integrated, figures.integrate_ms
        );
    }

    Ok(())
}
