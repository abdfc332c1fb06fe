//! `troupe-dev bench forge`: a party on an issue, through the fake GitHub of the integration
//! tests (every request checked against GitHub's OpenAPI description) and a real bare git
//! remote, with instant members (puppet processes that write a file and commit it; started again
//! in their checkout they add "reworked"). Each party: the issue is read, the merge queue pushes
//! and opens a pull request, a check fails on a file of one member, that member fixes it and
//! the daemon pushes the fix to the same pull request, then the check passes, a review
//! approves and the daemon merges. Measured:
//! - failing check set on the fake → the owner's fix pushed (the pull request's head moves in
//!   the bare remote), in three modes: the watcher polling every `--poll-secs`; a `check_run`
//!   event (`receive_forge_event`) at each change on the forge, with `--webhook-poll-secs`
//!   (the rework's end is no event: the push waits for the next poll); and the same plus a
//!   second event the bench sends when it sees the rework end on the timeline, with a long
//!   `--woken-poll-secs`, which leaves the daemon's own work. Each is split by the timeline's
//!   timestamps (round started, the member's rework, integrated again, pushed);
//! - requests to the forge per party, by operation; and, watching one open pull request,
//!   requests per look (counted over `--watch-looks` looks at the fast poll), scaled to an
//!   hour at `poll_secs = 60` (60 looks) — computed, not measured over an hour;
//! - the fake's count of requests, all of which must be valid (else the bench fails).
//!
//! The floor, in the same run: a plain `land_party` onto a branch (no forge) of the same
//! puppet party, finished.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, bail};
use clap::Args;
use serde_json::{Value, json};
use troupe::client::Client;

use crate::harness::{median, scratch_layout, start_daemon_with};

/// The integration tests' fake GitHub (`tests/it/fake_github.rs` and its folder), shared by
/// path: test code, so its unwraps and panics stand (a broken fake ends the bench).
#[path = "../../../../../../tests/it"]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod it {
    pub mod fake_github;
}

use it::fake_github::{Annotation, FakeGitHub, Recorded};

/// The forge repository the project's `origin` names (rewritten by git to a bare repository).
const REPO: &str = "octo/widgets";

#[derive(Debug, Args)]
pub struct ForgeArgs {
    /// Parties measured in each mode (polling, webhook, woken at the rework's end), after one
    /// not counted.
    #[arg(long, default_value_t = 10)]
    pub rounds: usize,
    /// The watcher's `poll_secs` in the polling mode (0.05 is the least the daemon takes).
    #[arg(long, default_value_t = 0.05)]
    pub poll_secs: f64,
    /// The watcher's `poll_secs` in the webhook mode, where a `check_run` event wakes it.
    #[arg(long, default_value_t = 3.0)]
    pub webhook_poll_secs: f64,
    /// The watcher's `poll_secs` in the mode where the watcher is also woken when the owner's
    /// rework ends (by the bench, with a second event): only the daemon's own work is left.
    #[arg(long, default_value_t = 60.0)]
    pub woken_poll_secs: f64,
    /// Looks at one open pull request counted for the requests per look (at `--poll-secs`).
    #[arg(long, default_value_t = 20)]
    pub watch_looks: usize,
}

/// One party's figures.
#[derive(Debug, Clone, Default)]
struct Round {
    /// Failing check set → the pull request's head moved in the remote.
    fix_ms: f64,
    /// Failing check set → `ci_round_started` (the owner started again).
    round_started_ms: f64,
    /// The owner's rework run, created → completed.
    rework_ms: f64,
    /// The rework completed → the fixes integrated again (`land_integrated`).
    to_landed_ms: f64,
    /// Integrated → `pull_request_updated` (push and the pull request's update).
    to_pushed_ms: f64,
    /// Requests to the forge from the launch to the merge.
    requests: usize,
    /// Of those, answered 304 (conditional, not counted against the rate limit).
    not_modified: usize,
    /// Requests by operation.
    by_op: BTreeMap<String, usize>,
    /// The floor: `land_party` onto a branch of the same party, finished.
    floor_ms: f64,
}

/// How the watcher hears of the failing check and of the rework's end.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    /// It looks every `--poll-secs`.
    Poll,
    /// A `check_run` event wakes it with each change on the forge (`--webhook-poll-secs`).
    Webhook,
    /// The same, and a second event when the owner's rework ends (sent by the bench, which sees
    /// it on the timeline): what is left is the daemon's own work (`--woken-poll-secs`).
    Woken,
}

impl Mode {
    fn key(self) -> &'static str {
        match self {
            Mode::Poll => "polling",
            Mode::Webhook => "webhook",
            Mode::Woken => "woken",
        }
    }

    fn poll_secs(self, args: &ForgeArgs) -> f64 {
        match self {
            Mode::Poll => args.poll_secs,
            Mode::Webhook => args.webhook_poll_secs,
            Mode::Woken => args.woken_poll_secs,
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Mode::Poll => "polling",
            Mode::Webhook => "a check_run event at each change on the forge",
            Mode::Woken => "the same, and a wake when the owner's rework ends (sent by the bench)",
        }
    }
}

/// The scratch project, its bare remote and the daemon's client.
struct Bench {
    c: Client,
    fake: FakeGitHub,
    data_dir: PathBuf,
    project: String,
    bare: PathBuf,
    puppet: String,
}

pub async fn run(args: ForgeArgs, json_out: bool) -> anyhow::Result<()> {
    if args.rounds == 0 || args.watch_looks == 0 {
        bail!("--rounds and --watch-looks must be at least 1");
    }
    for (name, secs) in [
        ("--poll-secs", args.poll_secs),
        ("--webhook-poll-secs", args.webhook_poll_secs),
        ("--woken-poll-secs", args.woken_poll_secs),
    ] {
        if !(0.05..=600.0).contains(&secs) {
            bail!("{name} must be between 0.05 and 600");
        }
    }
    let fixtures = it::fake_github::spec::fixtures_dir();
    if !fixtures.join("@octokit/openapi").is_dir() {
        bail!(
            "GitHub's OpenAPI description is not installed at {} (run `cd tests/forge-fixtures && npm ci`)",
            fixtures.display()
        );
    }
    let spec_loaded = Instant::now();
    it::fake_github::spec::spec();
    let spec_ms = spec_loaded.elapsed().as_secs_f64() * 1000.0;
    let fake = FakeGitHub::start();

    let (scratch, layout) = scratch_layout("troupe-bench-forge-")?;
    write_settings(&layout.data_dir, &fake.url, args.poll_secs)?;
    let project = scratch.path().join("project");
    let bare = scratch.path().join("remote.git");
    setup_repositories(&project, &bare)?;
    fake.add_repo(REPO, Some(&bare));
    let project = std::fs::canonicalize(&project)?.display().to_string();
    let puppet = puppet_script(scratch.path())?;
    let token = fake.token.clone();
    let (_daemon, c, _) = start_daemon_with(
        &layout,
        &[
            ("GH_TOKEN", token.as_str()),
            ("GITHUB_TOKEN", token.as_str()),
        ],
    )
    .await?;
    let bench = Bench {
        c,
        fake,
        data_dir: layout.data_dir.clone(),
        project,
        bare,
        puppet,
    };

    // The looks at one open pull request, on a party of its own (it warms the daemon up too).
    let per_look = bench
        .forge_round("warm", Mode::Poll, Some(args.watch_looks))
        .await?
        .1
        .context("no look was counted")?;
    bench.floor_round("warm-floor").await?;
    // The modes in turn in each round, so that what grows over the run (the parties the daemon
    // holds, the machine's other load) weighs on each alike.
    let modes = [Mode::Poll, Mode::Webhook, Mode::Woken];
    let mut by_mode: Vec<(Mode, f64, Vec<Round>)> = modes
        .iter()
        .map(|m| (*m, m.poll_secs(&args), Vec::new()))
        .collect();
    let mut wakes = 0;
    for i in 0..args.rounds {
        for (mode, poll, rounds) in &mut by_mode {
            // The watcher reads its poll before each sleep: woken, it takes the new one now.
            write_settings(&bench.data_dir, &bench.fake.url, *poll)?;
            wakes += 1;
            bench
                .send_event("check_suite", "completed", &format!("settings-{wakes}"))
                .await?;
            let name = format!("{}{i}", mode.key());
            let mut round = bench.forge_round(&name, *mode, None).await?.0;
            round.floor_ms = bench.floor_round(&format!("{name}-floor")).await?;
            eprintln!(
                "{name}: fix pushed {:.1} ms (round started {:.1}, rework {:.1}, → integrated {:.1}, → pushed {:.1}); {} requests; floor {:.1} ms",
                round.fix_ms,
                round.round_started_ms,
                round.rework_ms,
                round.to_landed_ms,
                round.to_pushed_ms,
                round.requests,
                round.floor_ms
            );
            rounds.push(round);
        }
    }

    let all = bench.fake.requests();
    let invalid: Vec<&Recorded> = all.iter().filter(|r| !r.valid).collect();
    let strayed = bench.fake.answer_problems();
    let summary = summarize(
        &args,
        &by_mode,
        per_look,
        (all.len(), invalid.len(), strayed.len(), spec_ms),
    );
    if json_out {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        print_text(&args, &summary, &by_mode);
    }
    if !invalid.is_empty() {
        bail!(
            "the fake GitHub received {} request(s) GitHub's description does not allow:\n{}",
            invalid.len(),
            invalid
                .iter()
                .map(|r| r.summary())
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    Ok(())
}

/// The medians and counts, as JSON.
fn summarize(
    args: &ForgeArgs,
    by_mode: &[(Mode, f64, Vec<Round>)],
    (looks, look_requests, look_not_modified): (usize, usize, usize),
    (total, invalid, strayed, spec_ms): (usize, usize, usize, f64),
) -> Value {
    let med = |rounds: &[Round], f: fn(&Round) -> f64| median(rounds.iter().map(f).collect());
    let range = |rounds: &[Round], f: fn(&Round) -> f64| {
        let v: Vec<f64> = rounds.iter().map(f).collect();
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        json!([lo, hi])
    };
    let mode = |rounds: &[Round], poll: f64| {
        let fix = med(rounds, |r| r.fix_ms);
        let floor = med(rounds, |r| r.floor_ms);
        json!({
            "poll_secs": poll,
            "fix_pushed_ms": { "median": fix, "range": range(rounds, |r| r.fix_ms) },
            "round_started_ms": med(rounds, |r| r.round_started_ms),
            "rework_ms": med(rounds, |r| r.rework_ms),
            "rework_end_to_landed_ms": med(rounds, |r| r.to_landed_ms),
            "landed_to_pushed_ms": med(rounds, |r| r.to_pushed_ms),
            "floor_land_party_ms": { "median": floor, "range": range(rounds, |r| r.floor_ms) },
            "ratio_to_floor": fix / floor.max(0.001),
            "requests_per_party": { "median": med(rounds, |r| r.requests as f64),
                                    "range": range(rounds, |r| r.requests as f64),
                                    "not_modified_median": med(rounds, |r| r.not_modified as f64) },
        })
    };
    let per_look = look_requests as f64 / looks as f64;
    let counted_per_look = (look_requests - look_not_modified) as f64 / looks as f64;
    let mut out = json!({
        "rounds": args.rounds,
        "watching": {
            "looks_counted": looks,
            "poll_secs": args.poll_secs,
            "requests_per_look": per_look,
            "rate_limited_per_look": counted_per_look,
            "requests_per_hour_at_poll_60": per_look * 60.0,
            "rate_limited_per_hour_at_poll_60": counted_per_look * 60.0,
            "how": "requests per look × 60 looks an hour (computed, not measured over an hour)",
        },
        "fake_github": {
            "requests": total,
            "invalid": invalid,
            "answers_strayed_from_the_description": strayed,
            "description_load_ms": spec_ms,
        },
    });
    for (m, poll, rounds) in by_mode {
        out[m.key()] = mode(rounds, *poll);
    }
    out
}

fn print_text(args: &ForgeArgs, s: &Value, by_mode: &[(Mode, f64, Vec<Round>)]) {
    let f = |v: &Value| v.as_f64().unwrap_or(0.0);
    println!(
        "troupe-dev bench forge: {} parties per mode (2 puppet developers + the merge queue; issue → pull request → 1 failing check fixed by its owner → green, approved → merged); fake GitHub on loopback",
        args.rounds
    );
    for (mode, _, rounds) in by_mode {
        let (m, name) = (&s[mode.key()], mode.describe());
        println!(
            "  {name}, poll_secs {}:\n    failing check → fix pushed to the same PR  median {:.1} ms  (range {:.1}–{:.1})  floor (land_party onto a branch, same party) {:.1} ms  ×{:.1}\n    split (medians): check → round started {:.1} ms; the owner's rework {:.1} ms; rework end → integrated again {:.1} ms; → pushed and PR updated {:.1} ms\n    requests to the forge per party  median {:.0} (range {:.0}–{:.0}; {:.0} of them 304)",
            m["poll_secs"],
            f(&m["fix_pushed_ms"]["median"]),
            f(&m["fix_pushed_ms"]["range"][0]),
            f(&m["fix_pushed_ms"]["range"][1]),
            f(&m["floor_land_party_ms"]["median"]),
            f(&m["ratio_to_floor"]),
            f(&m["round_started_ms"]),
            f(&m["rework_ms"]),
            f(&m["rework_end_to_landed_ms"]),
            f(&m["landed_to_pushed_ms"]),
            f(&m["requests_per_party"]["median"]),
            f(&m["requests_per_party"]["range"][0]),
            f(&m["requests_per_party"]["range"][1]),
            f(&m["requests_per_party"]["not_modified_median"]),
        );
        if let Some(last) = rounds.last() {
            let ops: Vec<String> = last
                .by_op
                .iter()
                .map(|(op, n)| format!("{op} {n}"))
                .collect();
            println!("    by operation (its last party): {}", ops.join(", "));
        }
    }
    let w = &s["watching"];
    println!(
        "  watching one open pull request: {:.2} requests per look ({:.2} counted against the rate limit; {} looks at poll_secs {}) → at poll_secs 60: {:.0} requests an hour ({:.0} counted) — computed from requests per look",
        f(&w["requests_per_look"]),
        f(&w["rate_limited_per_look"]),
        w["looks_counted"],
        w["poll_secs"],
        f(&w["requests_per_hour_at_poll_60"]),
        f(&w["rate_limited_per_hour_at_poll_60"]),
    );
    let g = &s["fake_github"];
    println!(
        "  fake GitHub: {} requests checked against GitHub's OpenAPI description, {} invalid; its own answers strayed from the description {} time(s) (description loaded in {:.0} ms)",
        g["requests"],
        g["invalid"],
        g["answers_strayed_from_the_description"],
        f(&g["description_load_ms"]),
    );
}

impl Bench {
    /// Defines agents `<name>-dev` and `<name>-docs` (puppets writing `<name>.txt` and
    /// `<name>.md`) and party `name` of them, with the merge queue after them if `queue`.
    async fn define_team(&self, name: &str, queue: bool) -> anyhow::Result<()> {
        let mut roles = serde_json::Map::new();
        for (role, file) in [
            ("dev", format!("{name}.txt")),
            ("docs", format!("{name}.md")),
        ] {
            let agent = format!("{name}-{role}");
            self.define(
                "agent",
                json!({ "name": agent,
                        "command": [self.puppet, file, format!("{role} v1"), "-"],
                        "isolation": "worktree", "timeout_secs": 120 }),
            )
            .await?;
            roles.insert(role.to_string(), json!({ "agent": agent }));
        }
        let mut party = json!({ "name": name, "roles": roles });
        if queue {
            let agent = format!("{name}-queue");
            self.define("agent", json!({ "name": agent, "runner": "land" }))
                .await?;
            party["roles"]["merge"] = json!({ "agent": agent });
            party["flow"] = json!({ "merge": ["dev", "docs"] });
        }
        self.define("party", party).await
    }

    async fn define(&self, kind: &str, definition: Value) -> anyhow::Result<()> {
        self.c
            .call(
                &format!("create_{kind}_definition"),
                json!({ "definition": definition }),
            )
            .await?;
        Ok(())
    }

    /// The party's pull request as the daemon sees it, once it exists.
    async fn pull_request(&self, party: &str) -> Option<Value> {
        self.c
            .call("get_pull_request", json!({ "party_id": party }))
            .await
            .ok()
    }

    /// Waits (60 s at most) until `pred` holds for the party's pull request.
    async fn wait_pull(
        &self,
        party: &str,
        what: &str,
        pred: impl Fn(&Value) -> bool,
    ) -> anyhow::Result<Value> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(pr) = self.pull_request(party).await
                && pred(&pr)
            {
                return Ok(pr);
            }
            if Instant::now() > deadline {
                let pr = self.pull_request(party).await;
                bail!("party {party}: waited 60 s for its pull request {what}; it is {pr:?}");
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// The party's timeline entries of `kind`, oldest first.
    async fn events(&self, party: &str, kind: &str) -> anyhow::Result<Vec<Value>> {
        let r = self
            .c
            .call("list_events", json!({ "party_id": party, "kind": kind }))
            .await?;
        Ok(r["events"].as_array().cloned().unwrap_or_default())
    }

    /// `receive_forge_event` with GitHub's example payload of `event`, pointed at `REPO`, its
    /// object's `id` made `tag`'s own (the daemon refuses a body it has received before).
    async fn send_event(&self, event: &str, action: &str, tag: &str) -> anyhow::Result<()> {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        tag.hash(&mut hasher);
        let id = hasher.finish() >> 12;
        let delivery = self
            .fake
            .webhook(event, Some(action), "unused", |v: &mut Value| {
                v["repository"]["full_name"] = json!(REPO);
                v[event]["id"] = json!(id);
            });
        let payload: Value = serde_json::from_slice(&delivery.body)?;
        let r = self
            .c
            .call(
                "receive_forge_event",
                json!({ "event": event, "delivery_id": delivery.delivery_id, "payload": payload }),
            )
            .await?;
        if r["outcome"] != "woke" {
            bail!("a {event} event did not wake the watcher: {r}");
        }
        Ok(())
    }

    /// One party on an issue through its pull request's merge; with `watch`, first counts the
    /// requests of that many looks at the open pull request: (looks, requests, 304s).
    async fn forge_round(
        &self,
        name: &str,
        mode: Mode,
        watch: Option<usize>,
    ) -> anyhow::Result<(Round, Option<(usize, usize, usize)>)> {
        self.define_team(name, true).await?;
        let issue = self.fake.add_issue(
            REPO,
            &format!("Widgets break on empty input ({name})"),
            "Steps: run it empty.",
            &[],
            "alice",
            "OWNER",
        );
        let before = self.fake.requests().len();
        let launched = self
            .c
            .call(
                "launch_party",
                json!({ "name": name, "cwd": self.project, "issue": format!("#{issue}") }),
            )
            .await?;
        let party = launched["party_id"]
            .as_str()
            .context("launch_party gave no party_id")?
            .to_string();
        let pr = self
            .wait_pull(&party, "open", |pr| pr["state"] == "open")
            .await?;
        let number = pr["number"]
            .as_u64()
            .context("the pull request has no number")?;
        let branch = pr["head_branch"]
            .as_str()
            .context("the pull request has no head branch")?
            .to_string();
        let looked = match watch {
            Some(looks) => Some(self.count_looks(number, looks).await?),
            None => None,
        };

        // The rework's end is seen on the project's timeline (a rework is a run of no party).
        let mut timeline = match mode {
            Mode::Woken => {
                let status = self
                    .c
                    .call("get_party_status", json!({ "party_id": party }))
                    .await?;
                let project = status["party"]["project_id"].clone();
                if !project.is_string() {
                    bail!("party {party} names no project: {status}");
                }
                Some(
                    self.c
                        .subscribe(
                            "subscribe_events",
                            json!({ "project_id": project }),
                            "unsubscribe_events",
                        )
                        .await?,
                )
            }
            Mode::Poll | Mode::Webhook => None,
        };

        // The failing check, on the file of dev (not docs).
        let first = remote_head(&self.bare, &branch)?;
        let failed_wall = SystemTime::now();
        let failed_at = Instant::now();
        self.fake.set_check_run(
            REPO,
            &first,
            "ci / test",
            "completed",
            Some("failure"),
            "1 test failed",
            "widget_spec failed",
            "expected a widget, got nothing",
            &[Annotation::new(
                &format!("{name}.txt"),
                1,
                "failure",
                "expected v2",
            )],
        );
        if mode != Mode::Poll {
            self.send_event("check_run", "completed", &format!("{name}-failing"))
                .await?;
        }
        if let Some(timeline) = timeline.as_mut() {
            let mut rework = None;
            loop {
                let e = tokio::time::timeout(Duration::from_secs(60), timeline.next())
                    .await
                    .with_context(|| format!("party {party}: no rework ended within 60 s"))?
                    .context("the timeline's feed ended")??;
                match e["kind"].as_str() {
                    Some("member_restarted") if e["party_id"] == party.as_str() => {
                        rework = e["data"]["run_id"].as_str().map(str::to_string);
                    }
                    Some("agent_run_finished")
                        if rework.is_some()
                            && e["data"]["run_id"].as_str() == rework.as_deref() =>
                    {
                        break;
                    }
                    _ => {}
                }
            }
            self.send_event("check_run", "completed", &format!("{name}-reworked"))
                .await?;
        }
        drop(timeline);
        let deadline = Instant::now() + Duration::from_secs(120);
        let second = loop {
            let head = remote_head(&self.bare, &branch)?;
            if head != first {
                break head;
            }
            if Instant::now() > deadline {
                bail!("party {party}: the fix was not pushed within 120 s");
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        };
        let fix_ms = failed_at.elapsed().as_secs_f64() * 1000.0;
        self.wait_pull(&party, "back open after the round", |pr| {
            pr["state"] == "open" && pr["ci_rounds"] == 1 && pr["head_sha"] == second.as_str()
        })
        .await?;
        let split = self.split(&party, failed_wall).await?;

        // Green and approved: merged (auto_merge).
        self.fake.set_check_run(
            REPO,
            &second,
            "ci / test",
            "completed",
            Some("success"),
            "ok",
            "",
            "",
            &[],
        );
        self.fake
            .add_review(REPO, number, "carol", "MEMBER", "APPROVED", "LGTM", &second);
        if mode != Mode::Poll {
            self.send_event("check_run", "completed", &format!("{name}-green"))
                .await?;
        }
        self.wait_pull(&party, "merged", |pr| pr["state"] == "merged")
            .await?;
        let requests: Vec<Recorded> = self.fake.requests().split_off(before);
        let mut by_op = BTreeMap::new();
        for r in &requests {
            *by_op
                .entry(r.operation_id.clone().unwrap_or_else(|| "none".into()))
                .or_insert(0) += 1;
        }
        let round = Round {
            fix_ms,
            requests: requests.len(),
            not_modified: requests.iter().filter(|r| r.status == 304).count(),
            by_op,
            ..split
        };
        Ok((round, looked))
    }

    /// The requests of `looks` looks at the open pull request `number`, each starting with its
    /// `GET …/pulls/{number}`: (looks, requests, of them 304).
    async fn count_looks(
        &self,
        number: u64,
        looks: usize,
    ) -> anyhow::Result<(usize, usize, usize)> {
        let path = format!("/repos/{REPO}/pulls/{number}");
        let starts = |all: &[Recorded]| -> Vec<usize> {
            all.iter()
                .enumerate()
                .filter(|(_, r)| r.method == "GET" && r.path == path)
                .map(|(i, _)| i)
                .collect()
        };
        // A look already under way when the pull request opened is left out.
        let from = starts(&self.fake.requests()).len() + 1;
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let all = self.fake.requests();
            let at = starts(&all);
            if at.len() > from + looks {
                let (a, b) = (at[from], at[from + looks]);
                let window = &all[a..b];
                let not_modified = window.iter().filter(|r| r.status == 304).count();
                return Ok((looks, window.len(), not_modified));
            }
            if Instant::now() > deadline {
                bail!("{looks} looks at the pull request did not happen within 120 s");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The round's parts, from the timeline's timestamps (ms; the daemon's clock, which is
    /// this machine's): check set → round started, the rework's run, its end → the fixes
    /// integrated, → the pull request updated.
    async fn split(&self, party: &str, failed: SystemTime) -> anyhow::Result<Round> {
        let mut last = BTreeMap::new();
        for kind in [
            "ci_round_started",
            "member_restarted",
            "land_integrated",
            "pull_request_updated",
        ] {
            let event = self.events(party, kind).await?.pop();
            last.insert(
                kind,
                event.with_context(|| format!("party {party}: no {kind} event"))?,
            );
        }
        let at = |kind: &str| time_ms(&last[kind]["at"]);
        let run_id = last["member_restarted"]["data"]["run_id"]
            .as_str()
            .context("member_restarted names no run")?;
        let run = self
            .c
            .call("get_agent_result", json!({ "run_id": run_id }))
            .await?;
        let (run_created, run_done) = (
            time_ms(&run["run"]["created_at"])?,
            time_ms(&run["run"]["completed_at"])?,
        );
        let failed_ms = failed.duration_since(SystemTime::UNIX_EPOCH)?.as_secs_f64() * 1000.0;
        Ok(Round {
            round_started_ms: at("ci_round_started")? - failed_ms,
            rework_ms: run_done - run_created,
            to_landed_ms: at("land_integrated")? - run_done,
            to_pushed_ms: at("pull_request_updated")? - at("land_integrated")?,
            ..Round::default()
        })
    }

    /// The floor: the same puppet party without the forge, finished, landed onto a branch by
    /// `land_party`; its ms.
    async fn floor_round(&self, name: &str) -> anyhow::Result<f64> {
        self.define_team(name, false).await?;
        let launched = self
            .c
            .call(
                "launch_party",
                json!({ "name": name, "cwd": self.project, "inputs": { "task": "go" } }),
            )
            .await?;
        let party = launched["party_id"]
            .as_str()
            .context("launch_party gave no party_id")?
            .to_string();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let s = self
                .c
                .call("get_party_status", json!({ "party_id": party }))
                .await?;
            match s["party"]["status"].as_str() {
                Some("completed") => break,
                Some("failed" | "cancelled") => bail!("floor party {name} ended: {s}"),
                _ => {}
            }
            if Instant::now() > deadline {
                bail!("floor party {name} did not end within 60 s");
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let t0 = Instant::now();
        let landed = self
            .c
            .call(
                "land_party",
                json!({ "party_id": party, "target": "bench-floor" }),
            )
            .await?;
        let ms = t0.elapsed().as_secs_f64() * 1000.0;
        if landed["landed"] != true {
            bail!("floor party {name} did not land: {landed}");
        }
        Ok(ms)
    }
}

/// `[forge]` of the daemon's `config.toml`: the fake's API, polled every `poll_secs`.
fn write_settings(data_dir: &Path, api_url: &str, poll_secs: f64) -> anyhow::Result<()> {
    std::fs::write(
        data_dir.join("config.toml"),
        format!("[forge]\napi_url = \"{api_url}\"\npoll_secs = {poll_secs}\ntimeout_secs = 5\n"),
    )?;
    Ok(())
}

fn git(dir: &Path, args: &[&str]) -> anyhow::Result<String> {
    let out = std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .context("cannot run git")?;
    if !out.status.success() {
        bail!(
            "git {} in {}: {}",
            args.join(" "),
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The project (one commit on `main`, a `bench-floor` branch beside it) whose `origin` is
/// `REPO` on github.com, rewritten by git to the bare repository `bare`; its `.troupe/` asks
/// for the comments, one round of fixes and merging once green and approved.
fn setup_repositories(project: &Path, bare: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(project)?;
    std::fs::write(project.join("README.md"), "# widgets\n")?;
    git(project, &["init", "-q", "-b", "main"])?;
    git(project, &["add", "."])?;
    git(
        project,
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-qm",
            "init",
        ],
    )?;
    git(project, &["branch", "bench-floor"])?;
    let parent = bare.parent().context("the bare repository has no parent")?;
    let bare_text = bare.display().to_string();
    git(parent, &["init", "-q", "--bare", "-b", "main", &bare_text])?;
    let url = format!("https://github.com/{REPO}.git");
    git(project, &["remote", "add", "origin", &url])?;
    git(
        project,
        &["config", &format!("url.file://{bare_text}.insteadOf"), &url],
    )?;
    git(project, &["push", "-q", "origin", "main"])?;
    let troupe = project.join(".troupe");
    std::fs::create_dir_all(&troupe)?;
    std::fs::write(
        troupe.join("config.toml"),
        "[forge]\ncomment_on_start = true\ncomment_on_pull_request = true\nauto_merge = true\nmax_ci_rounds = 2\n",
    )?;
    Ok(())
}

/// The puppet member (the integration tests' `scenario-puppet.sh`): writes `$1` with `$2` and
/// commits it; started again in its checkout, it adds "reworked".
fn puppet_script(dir: &Path) -> anyhow::Result<String> {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("puppet.sh");
    std::fs::write(
        &path,
        r#"#!/bin/sh
set -e
if [ "$1" != "-" ]; then
  printf '%s\n' "$2" > "$1"
  if echo "$TROUPE_PROMPT" | grep -q "again, in your checkout"; then printf 'reworked\n' >> "$1"; fi
  git add -A
  git -c user.name=member -c user.email=member@troupe commit -qm "$TROUPE_ROLE#$TROUPE_INSTANCE writes $1"
fi
troupe call complete "{\"output\":\"$TROUPE_ROLE done\"}" >/dev/null
"#,
    )?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
    Ok(path.display().to_string())
}

/// The commit a branch of the bare remote points at (its loose ref, as a push writes it).
fn remote_head(bare: &Path, branch: &str) -> anyhow::Result<String> {
    match std::fs::read_to_string(bare.join("refs/heads").join(branch)) {
        Ok(sha) => Ok(sha.trim().to_string()),
        Err(_) => git(bare, &["rev-parse", &format!("refs/heads/{branch}")]),
    }
}

/// Milliseconds since the epoch of a time the daemon recorded (ms precision).
fn time_ms(at: &Value) -> anyhow::Result<f64> {
    let text = at.as_str().context("a record without its time")?;
    troupe::ui::parse_ms(text)
        .map(|ms| ms as f64)
        .with_context(|| format!("not a time: {text:?}"))
}
