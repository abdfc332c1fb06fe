//! What the forge's events start: a label on an issue (the project's `[forge] label`) or a
//! comment mentioning the project's `[forge] mention` starts the project's `[forge] party` on
//! that issue — only when its author can write to the repository (author association); an
//! event from anyone else starts nothing and says so on the timeline. Checks, statuses,
//! reviews and pull request changes wake the pull requests' watcher. Two ways in: the webhook
//! receiver (the `troupe` binary checks the signature, then calls `receive_forge_event`), and,
//! for projects with `[forge] poll = true`, polling here with conditional requests (an ETag per
//! poll: an unchanged answer costs no rate limit), paused until the forge's limit resets when
//! it says it is spent. Each issue starts one party, once (claimed in the store), and the party
//! is linked to its issue before its members start (`link_issue`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use troupe_api::ApiError;
use troupe_forge::{Association, Polled, RepoRef};
use troupe_store::NewEvent;

use crate::daemon::Daemon;
use crate::forge::{ProjectForge, retry};
use crate::runners::host::Calls;

/// What an event asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Start `party` in the project at `root` on issue `issue` (`owner/repo#n`).
    Start {
        root: PathBuf,
        project_id: String,
        party: String,
        issue: String,
    },
    /// Something on a pull request changed: look now.
    Wake,
    /// Nothing to do, and why; `project_id` when the event was a project's.
    Ignore {
        project_id: Option<String>,
        reason: String,
    },
}

/// The projects whose forge repository is `repo`, with their `[forge]`.
fn projects_of(d: &Daemon, repo: &RepoRef) -> Vec<(String, PathBuf, ProjectForge)> {
    let Ok(projects) = d.store.list_projects() else {
        return Vec::new();
    };
    projects
        .into_iter()
        .filter_map(|p| {
            let root = PathBuf::from(&p.root_path);
            let forge = ProjectForge::of(&root).ok()?;
            let own = d.forges.repo_of(&root, &forge.remote).ok()?;
            (own.owner.eq_ignore_ascii_case(&repo.owner)
                && own.name.eq_ignore_ascii_case(&repo.name))
            .then_some((p.project_id, root, forge))
        })
        .collect()
}

/// What an event (`X-GitHub-Event` and its payload) asks of the daemon.
pub async fn decide(d: &Daemon, event: &str, payload: &Value) -> Decision {
    let ignore = |reason: String| Decision::Ignore {
        project_id: None,
        reason,
    };
    match event {
        "check_run"
        | "check_suite"
        | "status"
        | "pull_request"
        | "pull_request_review"
        | "pull_request_review_comment"
        | "pull_request_review_thread" => return Decision::Wake,
        "issues" | "issue_comment" => {}
        "ping" => return ignore("a ping: the webhook reaches the daemon".into()),
        other => return ignore(format!("Troupe does not act on {other:?} events")),
    }
    let Some(full) = payload["repository"]["full_name"].as_str() else {
        return ignore("the event names no repository".into());
    };
    let Ok(repo) = RepoRef::parse(full) else {
        return ignore(format!("{full:?} is not a repository name"));
    };
    let Some(number) = payload["issue"]["number"].as_u64() else {
        return ignore("the event names no issue".into());
    };
    let is_pull = payload["issue"]
        .get("pull_request")
        .is_some_and(|p| !p.is_null());
    let action = payload["action"].as_str().unwrap_or_default();
    let projects = projects_of(d, &repo);
    let Some((project_id, root, forge)) = projects.into_iter().next() else {
        return ignore(format!(
            "no project of this daemon has {repo} as its forge repository"
        ));
    };
    let ignore = |reason: String| Decision::Ignore {
        project_id: Some(project_id.clone()),
        reason,
    };
    let Some(party) = forge.party.clone() else {
        return ignore("the project names no [forge] party to start".into());
    };
    if is_pull {
        return ignore(format!("#{number} is a pull request, not an issue"));
    }
    match (event, action) {
        ("issues", "labeled") => {
            let label = payload["label"]["name"].as_str().unwrap_or_default();
            if !label.eq_ignore_ascii_case(&forge.label) {
                return ignore(format!("label {label:?} is not {:?}", forge.label));
            }
            // Who applied it (an issue template applies labels for anyone who opens one).
            let Some(who) = payload["sender"]["login"].as_str() else {
                return ignore("the label's event names no sender".into());
            };
            match crate::forge::can_write(&d.forges, &repo, who).await {
                Ok(true) => {}
                Ok(false) => {
                    return ignore(format!(
                        "@{who} labeled it but has no write access to {repo}: a label of theirs starts nothing"
                    ));
                }
                Err(e) => return ignore(format!("@{who}'s access could not be read: {e}")),
            }
        }
        ("issue_comment", "created") => {
            let body = payload["comment"]["body"].as_str().unwrap_or_default();
            if !mentions(body, &forge.mention) {
                return ignore(format!("the comment does not mention {}", forge.mention));
            }
            let who = payload["comment"]["user"]["login"]
                .as_str()
                .unwrap_or("someone");
            let association = Association::parse(
                payload["comment"]["author_association"]
                    .as_str()
                    .unwrap_or_default(),
            );
            // The association first (no request for outsiders), then the real permission
            // (an organisation's member may only read).
            let writes = association.can_write()
                && matches!(
                    crate::forge::can_write(&d.forges, &repo, who).await,
                    Ok(true)
                );
            if !writes {
                return ignore(format!(
                    "@{who} ({association:?}) has no write access to {repo}: a comment of theirs starts nothing"
                ));
            }
        }
        _ => return ignore(format!("{event}.{action} starts nothing")),
    }
    Decision::Start {
        root,
        project_id,
        party,
        issue: format!("{repo}#{number}"),
    }
}

/// Whether `body` mentions `name` as a word (`@troupe`, not `@trouper`).
fn mentions(body: &str, name: &str) -> bool {
    let name = name.trim();
    if name.is_empty() {
        return false;
    }
    let lower = body.to_lowercase();
    let name = name.to_lowercase();
    lower.match_indices(&name).any(|(i, _)| {
        let after = lower[i + name.len()..].chars().next();
        let before = lower[..i].chars().next_back();
        !after.is_some_and(|c| c.is_alphanumeric() || c == '-' || c == '_')
            && !before.is_some_and(|c| c.is_alphanumeric())
    })
}

/// Claims issue `issue`'s start: true for the one caller that may start its party.
pub async fn claim_start(d: &Daemon, issue: &str) -> Result<bool, ApiError> {
    Ok(!d
        .store
        .claim_forge_keys(vec![format!("start:{issue}")], None, None)
        .await?
        .is_empty())
}

/// Gives issue `issue`'s start back (its party did not launch).
pub async fn release_start(d: &Daemon, issue: &str) {
    if let Err(e) = d.store.release_forge_key(format!("start:{issue}")).await {
        tracing::warn!(error = %e, "an issue's start was not given back");
    }
}

/// An ignored event on the timeline.
pub async fn record_ignored(d: &Daemon, project_id: Option<String>, what: &str, reason: &str) {
    let e = NewEvent {
        kind: "forge_event_ignored".into(),
        project_id,
        data: json!({ "what": what, "reason": reason }),
        ..NewEvent::default()
    };
    if let Err(e) = d.store.append_event(e).await {
        tracing::warn!(error = %e, "an ignored forge event was not recorded");
    }
}

/// Starts the polling of the projects that ask for it (until the daemon stops).
pub fn poll(d: &Arc<Daemon>) {
    let d = d.clone();
    let mut stop = d.shutdown_requested();
    tokio::spawn(async move {
        let mut resume_at: Option<Instant> = None;
        loop {
            let every = d
                .forges
                .settings()
                .map(|s| s.poll())
                .unwrap_or(Duration::from_secs(60));
            if resume_at.is_none_or(|t| Instant::now() >= t) {
                resume_at = None;
                if let Err(wait) = poll_once(&d).await {
                    resume_at = Some(Instant::now() + wait.min(Duration::from_secs(24 * 3600)));
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = stop.changed() => break,
            }
        }
    });
}

/// One poll of every project with `[forge] poll = true`; Err(wait) when the forge's rate
/// limit is spent.
async fn poll_once(d: &Arc<Daemon>) -> Result<(), Duration> {
    let Ok(projects) = d.store.list_projects() else {
        return Ok(());
    };
    for p in projects {
        let root = PathBuf::from(&p.root_path);
        let Ok(forge) = ProjectForge::of(&root) else {
            continue;
        };
        if !forge.poll || forge.party.is_none() {
            continue;
        }
        let Ok(repo) = d.forges.repo_of(&root, &forge.remote) else {
            continue;
        };
        if let Err(e) = poll_project(d, &p.project_id, &repo, &forge).await {
            if let Some(secs) = e.retry_after_secs() {
                record_ignored(
                    d,
                    Some(p.project_id.clone()),
                    "polling",
                    &format!("the forge's rate limit is spent: polling waits {secs} s"),
                )
                .await;
                return Err(Duration::from_secs(secs.max(1)));
            }
            tracing::warn!(project = %p.project_id, error = %e, "polling the forge failed");
        }
    }
    Ok(())
}

async fn poll_project(
    d: &Arc<Daemon>,
    project_id: &str,
    repo: &RepoRef,
    forge: &ProjectForge,
) -> Result<(), troupe_forge::ForgeError> {
    let Ok(client) = d.forges.client().await else {
        return Ok(());
    };
    let key = format!("{project_id}:{repo}:labeled:{}", forge.label);
    let etag = d.store.forge_cursor(&key).ok().flatten();
    let what = format!("polling {repo}");
    let labeled = retry(&what, || {
        client.poll_labeled(repo, &forge.label, etag.as_deref())
    })
    .await?;
    if let Polled::Changed { items, etag } = labeled {
        for issue in items.iter().filter(|i| !i.is_pull) {
            let issue_ref = format!("{repo}#{}", issue.number);
            if d.store
                .forge_key_seen(&format!("start:{issue_ref}"))
                .unwrap_or(false)
            {
                continue; // started before: no need to ask who labeled it
            }
            let sender = retry(&what, || {
                client.labeled_by(repo, issue.number, &forge.label)
            })
            .await?;
            let payload = json!({
                "action": "labeled",
                "label": { "name": forge.label },
                "repository": { "full_name": repo.to_string() },
                "issue": { "number": issue.number },
                "sender": { "login": sender },
            });
            start_from(d, "issues", &payload).await;
        }
        if let Some(etag) = etag
            && let Err(e) = d.store.set_forge_cursor(key, etag).await
        {
            tracing::warn!(error = %e, "a poll's cursor was not kept");
        }
    }
    let key = format!("{project_id}:{repo}:comments");
    let cursor: Value = d
        .store
        .forge_cursor(&key)
        .ok()
        .flatten()
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or(Value::Null);
    let Some(since) = cursor["since"].as_str().map(String::from) else {
        // The first poll starts from now: the repository's past comments start nothing.
        let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let value = json!({ "since": now, "etag": null }).to_string();
        if let Err(e) = d.store.set_forge_cursor(key, value).await {
            tracing::warn!(error = %e, "a poll's cursor was not kept");
        }
        return Ok(());
    };
    let since = Some(since);
    let etag = cursor["etag"].as_str().map(String::from);
    let comments = retry(&what, || {
        client.poll_comments(repo, since.as_deref(), etag.as_deref())
    })
    .await?;
    if let Polled::Changed { items, etag } = comments {
        let mut newest = since.clone();
        for c in &items {
            if newest.as_deref().is_none_or(|n| c.updated_at.as_str() > n) {
                newest = Some(c.updated_at.clone());
            }
            let fresh = d
                .store
                .claim_forge_keys(vec![format!("comment:{}", c.id)], None, None)
                .await
                .unwrap_or_default();
            if fresh.is_empty() || !mentions(&c.body, &forge.mention) {
                continue;
            }
            let payload = json!({
                "action": "created",
                "repository": { "full_name": repo.to_string() },
                "issue": { "number": c.issue_number },
                "comment": { "body": c.body, "user": { "login": c.author },
                             "author_association": c.association },
            });
            start_from(d, "issue_comment", &payload).await;
        }
        // The next poll asks from the newest seen (the same URL, and so the same ETag, until
        // a comment changes).
        let value = json!({ "since": newest, "etag": etag }).to_string();
        if let Err(e) = d.store.set_forge_cursor(key, value).await {
            tracing::warn!(error = %e, "a poll's cursor was not kept");
        }
    }
    Ok(())
}

/// Carries out what an event decides: starts its party (once per issue), or records why not.
pub async fn start_from(
    d: &Arc<Daemon>,
    event: &str,
    payload: &Value,
) -> (Decision, Option<String>) {
    let decision = decide(d, event, payload).await;
    match &decision {
        Decision::Start {
            root,
            project_id,
            party,
            issue,
        } => {
            match claim_start(d, issue).await {
                Ok(true) => {}
                Ok(false) => return (decision, None),
                Err(e) => {
                    tracing::warn!(error = %e, "an issue's start was not claimed");
                    return (decision, None);
                }
            }
            let params =
                json!({ "name": party, "cwd": root.display().to_string(), "issue": issue });
            let caller = crate::authority::Caller::Person {
                door: "forge".into(),
            };
            match d
                .clone()
                .call_as(caller, "launch_party".into(), params)
                .await
            {
                Ok(v) => {
                    let id = v["party_id"].as_str().map(String::from);
                    (decision, id)
                }
                Err(e) => {
                    release_start(d, issue).await;
                    record_ignored(
                        d,
                        Some(project_id.clone()),
                        event,
                        &format!("starting party {party} on {issue} failed: {e}"),
                    )
                    .await;
                    (decision, None)
                }
            }
        }
        Decision::Wake => {
            d.forges.wake.notify_one();
            (decision, None)
        }
        Decision::Ignore { project_id, reason } => {
            record_ignored(d, project_id.clone(), event, reason).await;
            (decision, None)
        }
    }
}

/// Links a party to the issue it started from (before its members start), and comments on
/// the issue when the project asks for that (a failure tells the person; the party goes on).
pub async fn link_issue(
    ctx: &crate::collab::Ctx,
    party: &crate::party::PartyView,
    issue: &troupe_forge::IssueRef,
) -> Result<(), ApiError> {
    let link = troupe_store::ForgeLink {
        issue_number: Some(issue.number as i64),
        ..troupe_store::ForgeLink::new(&party.row.party_id, &issue.repo.to_string())
    };
    let event = troupe_store::NewEvent {
        kind: "party_started_from_issue".into(),
        project_id: Some(party.row.project_id.clone()),
        party_id: Some(party.row.party_id.clone()),
        session_id: None,
        data: serde_json::json!({ "issue": issue.to_string() }),
    };
    ctx.store.put_forge_link(link, Some(event)).await?;
    let project = ProjectForge::of(std::path::Path::new(&party.row.repo_root)).unwrap_or_default();
    if project.comment_on_start {
        let client = ctx.forges.client().await?;
        let text = format!(
            "A Troupe party (**{}**, `{}`) started on this issue; its work will arrive as a pull request.",
            party.row.name, party.row.party_id
        );
        let what = format!("commenting on {issue}");
        let (ctx2, party2, issue2) = (ctx.clone(), party.clone(), issue.clone());
        // Off the launch's path: the forge may be slow, and the comment is a courtesy.
        tokio::spawn(async move {
            if let Err(e) =
                retry(&what, || client.comment(&issue2.repo, issue2.number, &text)).await
            {
                crate::collab::tell_person(
                    &ctx2,
                    &party2,
                    "forge_error",
                    &format!("{what} failed: {e}"),
                    serde_json::json!({ "party_id": party2.row.party_id }),
                )
                .await;
            }
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_mention_is_a_whole_name() {
        assert!(super::mentions("@troupe please fix", "@troupe"));
        assert!(super::mentions("Hey @Troupe.", "@troupe"));
        assert!(!super::mentions("@trouper fix", "@troupe"));
        assert!(!super::mentions("me@troupe", "@troupe"));
        assert!(!super::mentions("nothing", "@troupe"));
    }
}
