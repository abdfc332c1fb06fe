//! `troupe review PARTY ROLE[#N]`: a member's committed work against its fork point, file by
//! file as a unified diff, through your pager (`$PAGER`, else `less -FRX`) when the output is a
//! terminal; `--stat` for the files alone.

use std::io::{IsTerminal as _, Write as _};

use anyhow::Context as _;
use clap::Args;
use serde_json::{Value, json};
use troupe_api::layout::Layout;

use super::{print_json, print_raw};
use crate::client;

#[derive(Debug, Args)]
pub struct ReviewArgs {
    pub party_id: String,
    /// The member: `ROLE` (its first) or `ROLE#N`.
    pub member: String,
    /// Only the files and their line counts.
    #[arg(long)]
    pub stat: bool,
}

/// `role` or `role#n`.
fn member(spec: &str) -> anyhow::Result<(String, u32)> {
    match spec.split_once('#') {
        None => Ok((spec.to_string(), 0)),
        Some((role, n)) => Ok((
            role.to_string(),
            n.parse()
                .with_context(|| format!("{spec:?}: the member is ROLE or ROLE#N"))?,
        )),
    }
}

fn render(diff: &Value, stat: bool) -> String {
    let mut out = String::new();
    let w = &diff["worktree"];
    out.push_str(&format!(
        "{}#{} on {} ({} ahead of {}): {} files, +{} -{}\n",
        w["role"].as_str().unwrap_or("?"),
        w["index"],
        w["branch"].as_str().unwrap_or("?"),
        w["ahead"],
        w["target"].as_str().unwrap_or("its target"),
        diff["files"].as_array().map_or(0, Vec::len),
        diff["additions"],
        diff["deletions"]
    ));
    for f in diff["files"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "  {:<9} +{:<5} -{:<5} {}\n",
            f["status"].as_str().unwrap_or("?"),
            f["additions"],
            f["deletions"],
            f["path"].as_str().unwrap_or("?")
        ));
    }
    if !stat {
        for f in diff["files"].as_array().into_iter().flatten() {
            out.push('\n');
            match f["patch"].as_str() {
                Some(p) if !p.is_empty() => out.push_str(p),
                _ => out.push_str(&format!(
                    "{}: binary or no text change\n",
                    f["path"].as_str().unwrap_or("?")
                )),
            }
            if !out.ends_with('\n') {
                out.push('\n');
            }
        }
    }
    out
}

/// Shows `text` in the person's pager when the output is a terminal, else prints it.
fn page(text: &str) -> anyhow::Result<()> {
    if !std::io::stdout().is_terminal() {
        print_raw(text.as_bytes());
        return Ok(());
    }
    let pager = std::env::var("PAGER")
        .ok()
        .filter(|p| !p.trim().is_empty())
        .unwrap_or_else(|| "less -FRX".to_string());
    let started = std::process::Command::new("sh")
        .args(["-c", &pager])
        .stdin(std::process::Stdio::piped())
        .spawn();
    let Ok(mut child) = started else {
        print_raw(text.as_bytes());
        return Ok(());
    };
    if let Some(mut stdin) = child.stdin.take() {
        // A pager quit early closes its end: not an error.
        let _ = stdin.write_all(text.as_bytes());
    }
    child.wait().context("waiting for the pager")?;
    Ok(())
}

pub async fn run(layout: &Layout, args: ReviewArgs, json: bool) -> anyhow::Result<()> {
    let (role, index) = member(&args.member)?;
    let client = client::connect(layout, true).await?;
    let diff = client
        .call(
            "get_member_diff",
            json!({ "party_id": args.party_id, "role": role, "index": index }),
        )
        .await?;
    if json {
        return print_json(&diff);
    }
    page(&render(&diff, args.stat))
}
