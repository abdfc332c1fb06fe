//! `troupe gc`: the retention rules applied now (`gc`): what went, by kind, the checkouts
//! removed and those kept with why, and the database's size before and after its `VACUUM`.

use clap::Args;
use serde_json::{Value, json};
use troupe_api::layout::Layout;

use super::{print_json, print_line};
use crate::client;

#[derive(Debug, Args)]
pub struct GcArgs {
    /// Say what would go; remove nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// What is older than this many days may go (default: `[retention] max_age_days` of the
    /// data dir's config.toml, else 30; 0: whatever its age).
    #[arg(long, value_name = "DAYS")]
    pub max_age_days: Option<f64>,
}

pub async fn run(layout: &Layout, args: GcArgs, json: bool) -> anyhow::Result<()> {
    let client = client::connect(layout, true).await?;
    let r = client
        .call(
            "gc",
            json!({ "dry_run": args.dry_run, "max_age_days": args.max_age_days }),
        )
        .await?;
    if json {
        return print_json(&r);
    }
    for line in report(&r) {
        print_line(format_args!("{line}"));
    }
    Ok(())
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// The human report of a `gc` result.
fn report(r: &Value) -> Vec<String> {
    let n = |k: &str| r[k].as_u64().unwrap_or(0);
    let dry = r["dry_run"] == true;
    let mut out = vec![format!(
        "{} (older than {} days):",
        if dry { "would remove" } else { "removed" },
        r["max_age_days"].as_f64().unwrap_or(0.0)
    )];
    for (key, what) in [
        ("events", "timeline events"),
        ("messages", "messages"),
        ("notifications", "notifications"),
        ("approvals", "answered permission requests"),
        ("questions", "answered questions"),
        ("runs", "ended runs"),
        ("sessions", "ended sessions"),
    ] {
        out.push(format!("  {:>9}  {what}", n(key)));
    }
    out.push(format!(
        "  {:>9}  run log files ({})",
        n("log_files"),
        mib(n("log_bytes"))
    ));
    if let Some(age) = r["size_limit_age_days"].as_f64() {
        out.push(format!(
            "  the database was over [retention] max_db_mib: rows down to {age} days old went too"
        ));
    }
    let removed = r["checkouts_removed"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    out.push(format!(
        "checkouts {}: {}",
        if dry { "to remove" } else { "removed" },
        removed.len()
    ));
    for c in &removed {
        out.push(format!("  {}", c.as_str().unwrap_or("?")));
    }
    let kept = r["checkouts_kept"].as_array().cloned().unwrap_or_default();
    if !kept.is_empty() {
        out.push(format!("checkouts kept: {}", kept.len()));
        for c in &kept {
            out.push(format!(
                "  {}\n    {}",
                c["workdir"].as_str().unwrap_or("?"),
                c["reason"].as_str().unwrap_or("?")
            ));
        }
    }
    out.push(format!(
        "database: {} → {}{}",
        mib(n("db_bytes_before")),
        mib(n("db_bytes_after")),
        if r["vacuumed"] == true {
            " (vacuumed)"
        } else {
            ""
        }
    ));
    out
}
