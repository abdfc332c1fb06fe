//! `troupe land PARTY`: the merge queue from a terminal, with a progress bar through its stages
//! (integrate the members' branches → test → move the target), followed on the party's
//! timeline while `land_party` runs; the exit code says whether it landed (0) or not (1).

use anyhow::Context as _;
use clap::Args;
use serde_json::json;
use troupe_api::layout::Layout;

use super::{QuietExit, print_json, print_line};
use crate::client;

#[derive(Debug, Args)]
pub struct LandArgs {
    pub party_id: String,
    /// The branch to land on (default: the branch the project has out).
    #[arg(long)]
    pub target: Option<String>,
    /// Run this in the integration worktree; the target moves only if it passes.
    #[arg(long)]
    pub test_command: Option<String>,
    /// Integrate and test, but leave the target where it is.
    #[arg(long)]
    pub dry_run: bool,
}

pub async fn run(layout: &Layout, args: LandArgs, json: bool) -> anyhow::Result<()> {
    let client = client::connect(layout, true).await?;
    // The timeline from now on: the landing's stages as they happen.
    let mut events = client
        .subscribe(
            "subscribe_events",
            json!({ "party_id": args.party_id }),
            "unsubscribe_events",
        )
        .await?;
    let bar = if json {
        indicatif::ProgressBar::hidden()
    } else {
        indicatif::ProgressBar::with_draw_target(Some(3), indicatif::ProgressDrawTarget::stderr())
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} [{pos}/{len}] {msg}")
            .context("the progress bar's template")?,
    );
    bar.enable_steady_tick(std::time::Duration::from_millis(120));
    bar.set_message("integrating the members' branches");
    let params = json!({
        "party_id": args.party_id, "target": args.target,
        "test_command": args.test_command, "dry_run": args.dry_run,
    });
    let land = client.call("land_party", params);
    tokio::pin!(land);
    let result = loop {
        tokio::select! {
            result = &mut land => break result,
            event = events.next() => {
                let Some(Ok(event)) = event else { continue };
                match event["kind"].as_str() {
                    Some("land_integrated") => {
                        bar.set_position(1);
                        match event["data"]["test_command"].as_str() {
                            Some(cmd) => bar.set_message(format!("testing: {cmd}")),
                            None => bar.set_message("moving the target (no test command)"),
                        }
                    }
                    Some("land_tests_passed") => {
                        bar.set_position(2);
                        bar.set_message("tests passed; moving the target");
                    }
                    _ => {}
                }
            }
        }
    };
    let result = match result {
        Ok(r) => r,
        Err(e) => {
            bar.abandon_with_message("not landed");
            return Err(e.into());
        }
    };
    let landed = result["landed"] == true;
    if landed {
        bar.set_position(3);
        bar.finish_with_message("landed");
    } else {
        bar.abandon_with_message("not landed");
    }
    if json {
        print_json(&result)?;
    } else {
        print_line(format_args!("{}", result["summary"].as_str().unwrap_or("")));
        for m in result["members"].as_array().into_iter().flatten() {
            print_line(format_args!(
                "  {}#{}  {}",
                m["role"].as_str().unwrap_or("?"),
                m["index"],
                m["outcome"].as_str().unwrap_or("?")
            ));
        }
        if let Some(test) = result["test"].as_object()
            && test.get("passed") == Some(&json!(false))
        {
            print_line(format_args!(
                "test failed: {}\n{}",
                test.get("command").and_then(|c| c.as_str()).unwrap_or("?"),
                test.get("output").and_then(|o| o.as_str()).unwrap_or("")
            ));
        }
    }
    if landed || args.dry_run && result["test"]["passed"] != false {
        Ok(())
    } else {
        Err(QuietExit(1).into())
    }
}
