//! The pull requests' watcher: for each party whose work went out as a pull request, the
//! daemon looks at the forge (every `poll_secs`, and at once when a webhook says something
//! changed) and brings it back to the team. A failing check (its text and annotations) starts a
//! round of fixes for the members whose changes the failure touches (the diff's paths decide),
//! up to the project's `max_ci_rounds`; a review comment on a line goes to the member whose
//! change holds that line; once their reworks end, the work is landed again and pushed to the
//! same pull request. Green and approved, it is merged (`auto_merge`) or waits in the inbox as
//! ready. Each thing the forge says is handled once (claimed in the store), so a restart or a
//! second look never starts a round twice. Text from the forge reaches members marked as
//! untrusted.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::json;
use troupe_api::ApiError;
use troupe_api::types::{LandPartyParams, LandTo, PullRequestView};
use troupe_forge::{Check, CheckState, LineComment, ReviewState};
use troupe_store::{ForgeLink, NewEvent};

use crate::collab::{Ctx, PartyView, tell_leader_or_person, tell_person};
use crate::daemon::Daemon;
use crate::forge::{ProjectForge, api_error, retry};
use crate::landing::{Checkout, blocking, checkouts, live_reworks, rework, tell_member};

/// How often a round of fixes is looked at for its end.
const ROUND_LOOK: std::time::Duration = std::time::Duration::from_millis(200);

/// The states the watcher looks at.
const WATCHED: [&str; 3] = ["open", "fixing", "ready"];

/// Starts the watcher (until the daemon stops).
pub fn watch(d: &Arc<Daemon>) {
    let ctx = Ctx::of(d);
    let mut stop = d.shutdown_requested();
    tokio::spawn(async move {
        loop {
            let poll = ctx
                .forges
                .settings()
                .map(|s| s.poll())
                .unwrap_or(std::time::Duration::from_secs(60));
            // While a round of fixes is under way, its end (its members' runs ending) is looked
            // for often: that look reads only the store, and the fix goes out at once.
            let fixing = look(&ctx, &stop).await;
            let next = if fixing { poll.min(ROUND_LOOK) } else { poll };
            tokio::select! {
                _ = tokio::time::sleep(next) => {}
                _ = ctx.forges.wake.notified() => {}
                _ = stop.changed() => break,
            }
        }
    });
}

/// One look at every watched pull request (a failure while the daemon stops is not one);
/// whether a round of fixes is under way.
pub async fn look(ctx: &Ctx, stop: &tokio::sync::watch::Receiver<bool>) -> bool {
    let links = match ctx.store.forge_links_in(&WATCHED) {
        Ok(links) => links,
        Err(e) => {
            tracing::warn!(error = %e, "the pull requests could not be read");
            return false;
        }
    };
    let mut fixing = false;
    for link in links {
        fixing |= link.state == "fixing";
        let party_id = link.party_id.clone();
        if let Err(e) = tick(ctx, link).await {
            if matches!(&e, ApiError::Unavailable(m) if m.contains("credential")) {
                ctx.forges.forget();
            }
            let stopping = matches!(&e, ApiError::Unavailable(m) if m.contains("shutting down"));
            if *stop.borrow() || stopping {
                return fixing;
            }
            tracing::warn!(party = %party_id, error = %e, "the pull request's look failed");
            note_error(ctx, &party_id, &e).await;
        }
    }
    // A round this look started counts too.
    fixing
        || ctx
            .store
            .forge_links_in(&["fixing"])
            .is_ok_and(|l| !l.is_empty())
}

/// Records a failed look in the link's detail and tells the person once per distinct error.
async fn note_error(ctx: &Ctx, party_id: &str, e: &ApiError) {
    let Ok(Some(mut link)) = ctx.store.get_forge_link(party_id) else {
        return;
    };
    let text = format!("the forge could not be asked: {e}");
    if link.detail.as_deref() == Some(text.as_str()) {
        return;
    }
    link.detail = Some(text.clone());
    let event = NewEvent {
        kind: "forge_error".into(),
        party_id: Some(party_id.to_string()),
        data: json!({ "error": e.to_string() }),
        ..NewEvent::default()
    };
    if ctx.store.put_forge_link(link, Some(event)).await.is_ok()
        && let Ok(party) = PartyView::load(&ctx.store, party_id)
    {
        tell_person(
            ctx,
            &party,
            "forge_error",
            &text,
            json!({ "party_id": party_id }),
        )
        .await;
    }
}

fn event(link: &ForgeLink, kind: &str, data: serde_json::Value) -> NewEvent {
    NewEvent {
        kind: kind.into(),
        party_id: Some(link.party_id.clone()),
        data,
        ..NewEvent::default()
    }
}

async fn tick(ctx: &Ctx, mut link: ForgeLink) -> Result<(), ApiError> {
    let party = PartyView::load(&ctx.store, &link.party_id)?;
    let root = PathBuf::from(&party.row.repo_root);
    let project = ProjectForge::of(&root).map_err(ApiError::Unavailable)?;
    let Some(number) = link.pull_number.map(|n| n as u64) else {
        return Ok(());
    };
    // A round of fixes still at work: nothing to ask the forge yet.
    if link.state == "fixing" && !round_done(ctx, &party)? {
        return Ok(());
    }
    let client = ctx.forges.client().await?;
    let repo = troupe_forge::RepoRef::parse(&link.repo).map_err(ApiError::Internal)?;
    let what = format!("pull request {}#{number}", link.repo);
    let pr = retry(&what, || client.pull(&repo, number))
        .await
        .map_err(|e| api_error(&what, e))?;
    // Closed or merged by someone (mid-round too): nothing more to do for it.
    if pr.merged || pr.state == "closed" {
        link.state = if pr.merged { "merged" } else { "closed" }.into();
        link.detail = None;
        let kind = format!("pull_request_{}", link.state);
        let e = event(&link, &kind, json!({ "number": number, "url": pr.url }));
        ctx.store.put_forge_link(link, Some(e)).await?;
        return Ok(());
    }
    if link.state == "fixing" {
        return finish_round(ctx, &party, link).await;
    }
    let head = pr.head_sha.clone();
    // A head the daemon did not push (someone pushed to the branch): neither a round nor a
    // merge acts on work the merge queue never tested; the person is told once.
    if link.head_sha.as_deref().is_some_and(|h| h != head) {
        let text = format!(
            "pull request #{number} has a head Troupe did not push ({}): rounds and merges wait for you",
            &head[..head.len().min(12)]
        );
        if link.detail.as_deref() != Some(text.as_str()) {
            link.detail = Some(text.clone());
            if link.state == "ready" {
                link.state = "open".into();
            }
            let e = event(
                &link,
                "pull_request_foreign_head",
                json!({ "number": number, "head": head }),
            );
            ctx.store.put_forge_link(link, Some(e)).await?;
            tell_person(
                ctx,
                &party,
                "pull_request_foreign_head",
                &text,
                json!({ "party_id": party.row.party_id }),
            )
            .await;
        }
        return Ok(());
    }
    let checks = retry(&what, || client.checks(&repo, &head))
        .await
        .map_err(|e| api_error(&what, e))?;
    let reviews = retry(&what, || client.reviews(&repo, number))
        .await
        .map_err(|e| api_error(&what, e))?;
    let lines = retry(&what, || client.line_comments(&repo, number))
        .await
        .map_err(|e| api_error(&what, e))?;
    // Review comments on lines, each once: from people who can write, to the member whose
    // change holds the line; from anyone else, only the timeline hears of it.
    let mut unseen: Vec<&LineComment> = Vec::new();
    for c in &lines {
        if !ctx.store.forge_key_seen(&format!("line:{}", c.id))? {
            unseen.push(c);
        }
    }
    let all = checkouts(&party);
    let target = link.base_branch.clone();
    let changed = changed_files(&party, &all, target.as_deref()).await?;
    let mut to_member: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut to_leader = Vec::new();
    let mut ignored = Vec::new();
    for c in &unseen {
        let writes = c.association.can_write()
            && crate::forge::can_write(&ctx.forges, &repo, &c.author).await?;
        if !writes {
            ignored.push(event(
                &link,
                "forge_event_ignored",
                json!({ "what": "review comment", "id": c.id, "author": c.author,
                        "association": c.association,
                        "reason": format!("@{} has no write access to {}", c.author, link.repo) }),
            ));
            continue;
        }
        let at = match c.line {
            Some(line) => format!("{}:{line}", c.path),
            None => c.path.clone(),
        };
        let text = format!(
            "Review comment by @{} on pull request #{number} at {at}:\n{}\n",
            c.author,
            crate::forge::fenced("review comment", &c.body)
        );
        match owner_of_line(&party, &all, &changed, target.as_deref(), c).await {
            Some(label) => to_member.entry(label).or_default().push(text),
            None => to_leader.push(text),
        }
    }
    let keys: Vec<String> = unseen.iter().map(|c| format!("line:{}", c.id)).collect();
    if !keys.is_empty() {
        // Claimed with the round they start (or alone, when they start none): a kill -9
        // leaves both or neither.
        let claimed = if to_member.is_empty() {
            !ctx.store
                .claim_forge_keys(keys, Some(link.party_id.clone()), None)
                .await?
                .is_empty()
        } else {
            let mut round = link.clone();
            round.state = "fixing".into();
            round.detail = Some("review comments are being addressed".into());
            let members: Vec<&String> = to_member.keys().collect();
            let e = event(
                &round,
                "review_round_started",
                json!({ "number": number, "members": members }),
            );
            ctx.store
                .claim_and_put_forge_link(keys, round, Some(e))
                .await?
        };
        if claimed {
            for e in ignored {
                ctx.store.append_event(e).await?;
            }
            for text in &to_leader {
                tell_leader_or_person(ctx, &party, "pull_request_comment", text).await;
            }
            for (label, texts) in &to_member {
                let Some(c) = all.iter().find(|c| &c.label() == label) else {
                    continue;
                };
                send_or_rework(
                    ctx,
                    &party,
                    c,
                    "address review comments on pull request",
                    &texts.join("\n"),
                )
                .await?;
                let e = event(
                    &link,
                    "pull_request_comment_routed",
                    json!({ "number": number, "member": label, "comments": texts.len() }),
                );
                ctx.store.append_event(e).await?;
            }
            if !to_member.is_empty() {
                return Ok(());
            }
        }
    }
    // Failing checks: a round of fixes, once per head.
    let failing: Vec<&Check> = checks
        .iter()
        .filter(|c| c.state == CheckState::Failure)
        .collect();
    // No check yet on a head just pushed is CI not started, not CI passed (unless the
    // project has no CI: `require_checks = false`).
    let pending = checks.iter().any(|c| c.state == CheckState::Pending)
        || (checks.is_empty() && project.require_checks);
    if !failing.is_empty() {
        // The round is claimed and recorded in one transaction before anyone is started: a
        // restart never starts it twice (one that died before its reworks began ends at its
        // re-landing, which finds nothing changed and hands the pull request to the person).
        let key = format!("failed:{}:{head}", link.party_id);
        let names: Vec<String> = failing.iter().map(|c| c.name.clone()).collect();
        if link.ci_rounds >= i64::from(project.max_ci_rounds) {
            let text = format!(
                "pull request #{number}: checks still fail ({}) after {} rounds of fixes; it is yours now",
                names.join(", "),
                link.ci_rounds
            );
            link.state = "gave_up".into();
            link.detail = Some(text.clone());
            let e = event(
                &link,
                "pull_request_gave_up",
                json!({ "number": number, "checks": names }),
            );
            if ctx
                .store
                .claim_and_put_forge_link(vec![key], link, Some(e))
                .await?
            {
                tell_person(
                    ctx,
                    &party,
                    "pull_request_gave_up",
                    &text,
                    json!({ "party_id": party.row.party_id }),
                )
                .await;
            }
            return Ok(());
        }
        let (text, paths) = failure_text(number, &failing);
        let mut owners: Vec<&Checkout> = all
            .iter()
            .filter(|c| {
                changed.get(&c.label()).is_some_and(|files| {
                    files
                        .iter()
                        .any(|f| paths.contains(f) || text.contains(f.as_str()))
                })
            })
            .collect();
        if owners.is_empty() {
            owners = all
                .iter()
                .filter(|c| changed.get(&c.label()).is_some_and(|f| !f.is_empty()))
                .collect();
        }
        let labels: Vec<String> = owners.iter().map(|c| c.label()).collect();
        let mut round = link.clone();
        round.ci_rounds += 1;
        round.state = "fixing".into();
        round.detail = Some(format!(
            "round {} of fixes: {} failed",
            round.ci_rounds,
            names.join(", ")
        ));
        let e = event(
            &round,
            "ci_round_started",
            json!({ "number": number, "round": round.ci_rounds, "head": head,
                    "owners": labels, "checks": names }),
        );
        if ctx
            .store
            .claim_and_put_forge_link(vec![key], round, Some(e))
            .await?
        {
            for c in &owners {
                send_or_rework(
                    ctx,
                    &party,
                    c,
                    "fix the failing checks of the pull request",
                    &text,
                )
                .await?;
            }
            return Ok(());
        }
    }
    // Ready: every check green, no change requested, enough approvals (the latest review of
    // each person who can write counts).
    let mut latest: BTreeMap<&str, ReviewState> = BTreeMap::new();
    let mut writers = Vec::new();
    for r in reviews.iter().filter(|r| r.association.can_write()) {
        // An organisation's member may only read: the forge's permission decides.
        if crate::forge::can_write(&ctx.forges, &repo, &r.author).await? {
            writers.push(r);
        }
    }
    for r in writers {
        if matches!(
            r.state,
            ReviewState::Approved | ReviewState::ChangesRequested | ReviewState::Dismissed
        ) {
            latest.insert(r.author.as_str(), r.state);
        }
    }
    let approvals = latest
        .values()
        .filter(|s| **s == ReviewState::Approved)
        .count();
    let blocked = latest.values().any(|s| *s == ReviewState::ChangesRequested);
    let ready = failing.is_empty()
        && !pending
        && !blocked
        && approvals >= project.required_approvals as usize;
    if !ready {
        if link.state == "ready" {
            link.state = "open".into();
            link.detail = Some("no longer ready: checks or reviews changed".into());
            let e = event(&link, "pull_request_not_ready", json!({ "number": number }));
            ctx.store.put_forge_link(link, Some(e)).await?;
        }
        return Ok(());
    }
    if project.auto_merge {
        merge(ctx, &party, link, &head).await?;
        return Ok(());
    }
    if link.state != "ready" {
        link.state = "ready".into();
        link.detail = Some(format!(
            "checks pass and {approvals} approval(s): ready to merge"
        ));
        let e = event(
            &link,
            "pull_request_ready",
            json!({ "number": number, "url": pr.url, "head": head }),
        );
        let link = ctx.store.put_forge_link(link, Some(e)).await?;
        tell_person(
            ctx,
            &party,
            "pull_request_ready",
            &format!(
                "pull request #{number} is ready to merge ({})",
                link.pull_url.clone().unwrap_or_default()
            ),
            json!({ "party_id": party.row.party_id }),
        )
        .await;
    }
    Ok(())
}

/// Merges the link's pull request at `head` (what the forge's rules allow), and records it.
pub async fn merge(
    ctx: &Ctx,
    party: &PartyView,
    mut link: ForgeLink,
    head: &str,
) -> Result<ForgeLink, ApiError> {
    let root = PathBuf::from(&party.row.repo_root);
    let project = ProjectForge::of(&root).map_err(ApiError::Unavailable)?;
    let client = ctx.forges.client().await?;
    let repo = troupe_forge::RepoRef::parse(&link.repo).map_err(ApiError::Internal)?;
    let number = link.pull_number.ok_or_else(|| {
        ApiError::Conflict(format!("party {} has no pull request yet", link.party_id))
    })? as u64;
    let what = format!("merging pull request {}#{number}", link.repo);
    let merged = retry(&what, || {
        client.merge(&repo, number, head, project.merge_method)
    })
    .await
    .map_err(|e| api_error(&what, e))?;
    if !merged.merged {
        return Err(ApiError::Conflict(format!("{what}: {}", merged.message)));
    }
    link.state = "merged".into();
    link.detail = Some(format!("merged as {}", merged.sha));
    let e = event(
        &link,
        "pull_request_merged",
        json!({ "number": number, "sha": merged.sha }),
    );
    ctx.store
        .put_forge_link(link, Some(e))
        .await
        .map_err(Into::into)
}

/// Whether a round's members are done: no rework of the party's, and no member running.
fn round_done(ctx: &Ctx, party: &PartyView) -> Result<bool, ApiError> {
    if !live_reworks(&ctx.store, &party.row.party_id)?.is_empty() {
        return Ok(false);
    }
    let fresh = PartyView::load(&ctx.store, &party.row.party_id)?;
    Ok(!fresh
        .members
        .iter()
        .any(|m| m.status == troupe_store::MemberStatus::Running))
}

/// A round's end: once no member of the party is at work (its reworks, its running members),
/// the work is landed again and pushed to the same pull request.
async fn finish_round(ctx: &Ctx, party: &PartyView, mut link: ForgeLink) -> Result<(), ApiError> {
    if !round_done(ctx, party)? {
        return Ok(());
    }
    let options = party
        .snapshot
        .agents
        .values()
        .find(|a| a.runner == crate::runners::land::LAND)
        .and_then(|a| a.land.clone())
        .unwrap_or_default();
    let params = LandPartyParams {
        party_id: party.row.party_id.clone(),
        target: link.base_branch.clone().or(options.target),
        strategy: options.strategy,
        test_command: options.test_command,
        test_timeout_secs: options.test_timeout_secs,
        dry_run: false,
        to: LandTo::PullRequest,
    };
    let before = link.head_sha.clone();
    let root = party.row.repo_root.clone();
    // The same tree as before (a landing remakes its commits): the round changed nothing.
    let unchanged = |tip: &str| {
        let (root, tip, before) = (root.clone(), tip.to_string(), before.clone());
        async move {
            let Some(before) = before else {
                return false;
            };
            blocking(move || {
                let root = Path::new(&root);
                Ok(troupe_worktree::push::tree_of(root, &before)?
                    == troupe_worktree::push::tree_of(root, &tip)?)
            })
            .await
            .unwrap_or(false)
        }
    };
    let landed = crate::landing::land(ctx, params).await;
    let same = match &landed {
        Ok(r) => unchanged(&r.tip).await,
        Err(_) => false,
    };
    match landed {
        Ok(r) if r.pull_request.is_some() && same => {
            // Nothing new to push: the round's members changed nothing.
            let Some(mut link) = ctx.store.get_forge_link(&party.row.party_id)? else {
                return Ok(());
            };
            let text = format!(
                "the round of fixes changed nothing on pull request #{}; it is yours now",
                link.pull_number.unwrap_or_default()
            );
            link.state = "gave_up".into();
            link.detail = Some(text.clone());
            let e = event(&link, "pull_request_gave_up", json!({ "reason": text }));
            ctx.store.put_forge_link(link, Some(e)).await?;
            tell_person(
                ctx,
                party,
                "pull_request_gave_up",
                &text,
                json!({ "party_id": party.row.party_id }),
            )
            .await;
            Ok(())
        }
        Ok(r) if r.pull_request.is_some() => Ok(()),
        Ok(r) => {
            link.state = "gave_up".into();
            link.detail = Some(format!("the fixes did not land: {}", r.summary));
            let e = event(
                &link,
                "pull_request_gave_up",
                json!({ "summary": r.summary }),
            );
            ctx.store.put_forge_link(link, Some(e)).await?;
            tell_person(
                ctx,
                party,
                "pull_request_gave_up",
                &r.summary,
                json!({ "party_id": party.row.party_id }),
            )
            .await;
            Ok(())
        }
        // The forge or the network: the next look tries again.
        Err(e @ ApiError::Unavailable(_)) => Err(e),
        Err(e) => {
            link.state = "gave_up".into();
            link.detail = Some(format!("the fixes did not land: {e}"));
            let ev = event(
                &link,
                "pull_request_gave_up",
                json!({ "error": e.to_string() }),
            );
            ctx.store.put_forge_link(link, Some(ev)).await?;
            tell_person(
                ctx,
                party,
                "pull_request_gave_up",
                &e.to_string(),
                json!({ "party_id": party.row.party_id }),
            )
            .await;
            Ok(())
        }
    }
}

/// Tells a running member, or starts a finished one again with `text`; true when a rework
/// started.
async fn send_or_rework(
    ctx: &Ctx,
    party: &PartyView,
    c: &Checkout,
    why: &str,
    text: &str,
) -> Result<bool, ApiError> {
    if tell_member(ctx, party, &c.member, text).await {
        return Ok(false);
    }
    match rework(ctx, party, c, why, text).await {
        Ok(_) => Ok(true),
        // Already at work again: it hears of it through its messages.
        Err(ApiError::Conflict(_)) => Ok(false),
        Err(e) => Err(e),
    }
}

/// The failure text of failing checks, and the files their annotations point at.
fn failure_text(number: u64, failing: &[&Check]) -> (String, BTreeSet<String>) {
    let mut paths = BTreeSet::new();
    let mut text = format!(
        "Checks failed on pull request #{number}: fix what they report, nothing else the output asks.\n"
    );
    for c in failing {
        text.push_str(&format!("\n## {} ({})\n", c.name, c.conclusion));
        if let Some(url) = &c.url {
            text.push_str(&format!("{url}\n"));
        }
        let mut output = c.text.trim().to_string();
        for a in &c.annotations {
            paths.insert(a.path.clone());
            output.push_str(&format!(
                "\n- {}:{}-{}: {}: {}",
                a.path, a.start_line, a.end_line, a.level, a.message
            ));
        }
        text.push_str(&crate::forge::fenced("CI output", &output));
        text.push('\n');
    }
    (text, paths)
}

/// Each member's changed files against the pull request's base.
async fn changed_files(
    party: &PartyView,
    all: &[Checkout],
    target: Option<&str>,
) -> Result<BTreeMap<String, Vec<String>>, ApiError> {
    let (party, all, target) = (party.clone(), all.to_vec(), target.map(String::from));
    blocking(move || {
        let mut out = BTreeMap::new();
        for c in &all {
            let files = crate::landing::measure(&party, c, target.as_deref())
                .map(|w| w.changed_files)
                .unwrap_or_default();
            out.insert(c.label(), files);
        }
        Ok(out)
    })
    .await
}

/// The member whose change holds a commented line: among those that changed the file, the
/// one whose diff adds that line (else the first that changed the file).
async fn owner_of_line(
    party: &PartyView,
    all: &[Checkout],
    changed: &BTreeMap<String, Vec<String>>,
    target: Option<&str>,
    comment: &LineComment,
) -> Option<String> {
    let candidates: Vec<Checkout> = all
        .iter()
        .filter(|c| {
            changed
                .get(&c.label())
                .is_some_and(|f| f.contains(&comment.path))
        })
        .cloned()
        .collect();
    let first = candidates.first().map(Checkout::label)?;
    let (Some(line), true) = (comment.line, candidates.len() > 1) else {
        return Some(first);
    };
    let (root, path, target) = (
        party.row.repo_root.clone(),
        comment.path.clone(),
        target.map(String::from),
    );
    let found = blocking(move || {
        for c in &candidates {
            let (_, files) = troupe_worktree::review::branch_diff(
                Path::new(&root),
                &c.branch,
                target.as_deref(),
                Some(&path),
            )?;
            if files.iter().any(|f| adds_line(&f.patch, line)) {
                return Ok(Some(c.label()));
            }
        }
        Ok(None)
    })
    .await
    .ok()
    .flatten();
    Some(found.unwrap_or(first))
}

/// Whether a unified diff adds (or changes) line `line` of the new file.
fn adds_line(patch: &str, line: u32) -> bool {
    let mut new_line = 0u32;
    for l in patch.lines() {
        if let Some(h) = l.strip_prefix("@@ ") {
            // @@ -a,b +c,d @@
            new_line = h
                .split_whitespace()
                .find_map(|p| p.strip_prefix('+'))
                .and_then(|p| p.split(',').next())
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            continue;
        }
        if new_line == 0 {
            continue;
        }
        if l.starts_with('+') && !l.starts_with("+++") {
            if new_line == line {
                return true;
            }
            new_line += 1;
        } else if l.starts_with(' ') {
            new_line += 1;
        }
    }
    false
}

/// A party's pull request as it stands.
pub fn view(ctx: &Ctx, party_id: &str) -> Result<PullRequestView, ApiError> {
    let party = PartyView::load(&ctx.store, party_id)?;
    let link = ctx
        .store
        .get_forge_link(party_id)?
        .ok_or_else(|| ApiError::NotFound {
            what: "pull request of party".into(),
            id: party_id.to_string(),
        })?;
    let project = ProjectForge::of(Path::new(&party.row.repo_root)).unwrap_or_default();
    Ok(crate::landing::pull_view(&link, &project))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_belongs_to_the_diff_that_adds_it() {
        let patch =
            "--- a/f\n+++ b/f\n@@ -1,3 +1,4 @@\n a\n+b\n c\n d\n@@ -10,2 +11,3 @@\n x\n+y\n z\n";
        assert!(adds_line(patch, 2));
        assert!(!adds_line(patch, 1));
        assert!(!adds_line(patch, 3));
        assert!(adds_line(patch, 12));
        assert!(!adds_line(patch, 11));
    }
}
