//! The conflict radar in the editor door: two running members of a real party commit
//! conflicting changes to README.md in their worktrees, and `troupe lsp` puts a warning on the
//! line in the person's checkout (next to a pending request's diagnostic on the same file, which
//! it keeps), for an editor open before the prediction and for one opened after it; when one
//! member takes its change back, the warning goes and the request's stays.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::lsp_client::LspClient;
use crate::support::{BIN, TestDaemon, define, launch, party_end, register, repo};

/// A member that writes `$1` with the text `$2` and commits it on its branch, then waits for a
/// message saying "finish now"; with `$3 = undo`, a message saying "take it back" first resets
/// its branch to where it forked.
const MEMBER: &str = r#"#!/bin/sh
set -e
printf '%s\n' "$2" > "$1"
git add -A
git -c user.name=member -c user.email=member@troupe commit -qm "$TROUPE_ROLE writes $1"
heard=""
undone=""
until echo "$heard" | grep -q "finish now"; do
  heard="$heard $(troupe call poll_messages '{"wait_ms":2000}')"
  if [ "$3" = undo ] && [ -z "$undone" ] && echo "$heard" | grep -q "take it back"; then
    git reset -q --hard HEAD~1
    undone=1
  fi
done
troupe call complete '{"output":"done"}' >/dev/null
"#;

/// Reads the server's messages until it publishes diagnostics for `uri` that satisfy `pred`;
/// those diagnostics.
async fn diagnostics_until(
    lsp: &mut LspClient,
    uri: &str,
    what: &str,
    pred: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    let msg = tokio::time::timeout(
        Duration::from_secs(60),
        lsp.until(|m| {
            m["method"] == "textDocument/publishDiagnostics"
                && m["params"]["uri"] == uri
                && m["params"]["diagnostics"]
                    .as_array()
                    .is_some_and(|d| pred(d))
        }),
    )
    .await
    .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
    .unwrap();
    msg["params"]["diagnostics"].as_array().unwrap().clone()
}

fn is_conflict(d: &Value) -> bool {
    d["code"] == "conflict"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_editor_door_warns_of_a_predicted_conflict_on_its_lines_until_it_goes_away() {
    let d = TestDaemon::start();
    let c = d.client().await;
    let script = d.dir.path().join("member.sh");
    std::fs::write(&script, MEMBER).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let script = script.display().to_string();
    for (role, text, mode) in [
        ("a", "# demo\nThe answer is 41.", "keep"),
        ("b", "# demo\nThe answer is 43.", "undo"),
    ] {
        define(
            &c,
            "agent",
            json!({ "name": format!("race-{role}"), "command": [script, "README.md", text, mode],
                    "isolation": "worktree", "timeout_secs": 120 }),
        )
        .await;
    }
    define(
        &c,
        "party",
        json!({ "name": "race", "roles": { "a": { "agent": "race-a" }, "b": { "agent": "race-b" } } }),
    )
    .await;
    let project = std::fs::canonicalize(repo(&d.dir.path().join("proj"))).unwrap();
    let readme = format!("file://{}", project.join("README.md").display());

    // A pending request on README.md's first line, already shown by an open editor.
    let worker = register(&c, "codex", &project.display().to_string(), None).await;
    let asked = c
        .call(
            "request_permission",
            json!({ "session_id": worker, "tool_name": "write_file", "file_path": "README.md",
                    "start_line": 1, "end_line": 1, "wait_ms": 0 }),
        )
        .await
        .unwrap();
    let mut before = LspClient::start(Path::new(BIN), &d.layout, &project, "warn")
        .await
        .unwrap();
    diagnostics_until(&mut before, &readme, "the request's diagnostic", |d| {
        d.len() == 1 && d[0]["code"] == asked["approval_id"]
    })
    .await;

    // Both members change line 2: the radar predicts it, the open editor shows it there, next
    // to the request's diagnostic.
    let party = launch(&c, "race", &project.display().to_string()).await;
    let both = diagnostics_until(&mut before, &readme, "the conflict's warning", |d| {
        d.iter().any(is_conflict)
    })
    .await;
    assert_eq!(both.len(), 2, "{both:?}");
    let request = both.iter().find(|d| !is_conflict(d)).unwrap();
    assert_eq!(request["code"], asked["approval_id"]);
    assert_eq!(request["range"]["start"]["line"], 0);
    let warning = both.iter().find(|d| is_conflict(d)).unwrap();
    assert_eq!(warning["range"]["start"]["line"], 1, "{warning}");
    assert_eq!(warning["range"]["end"]["line"], 1, "{warning}");
    assert_eq!(warning["severity"], 2, "a warning: {warning}");
    assert_eq!(warning["source"], "troupe");
    assert_eq!(
        warning["message"],
        "troupe: a#0 and b#0 will conflict here (README.md)"
    );
    let listed = c
        .call("list_conflicts", json!({ "party_id": party }))
        .await
        .unwrap();
    assert_eq!(listed["conflicts"].as_array().unwrap().len(), 1, "{listed}");

    // An editor opened after the prediction shows it too.
    let mut after = LspClient::start(Path::new(BIN), &d.layout, &project, "warn")
        .await
        .unwrap();
    let late = diagnostics_until(&mut after, &readme, "the conflict on start", |d| {
        d.iter().any(is_conflict) && d.len() == 2
    })
    .await;
    assert_eq!(
        late.iter().find(|d| is_conflict(d)).unwrap()["message"],
        warning["message"]
    );

    // b takes its change back: the warning goes from both editors, the request's stays.
    let person = register(&c, "test", &project.display().to_string(), None).await;
    c.call(
        "broadcast_to_party",
        json!({ "party_id": party, "from_session_id": person, "content": "take it back" }),
    )
    .await
    .unwrap();
    for lsp in [&mut before, &mut after] {
        let left = diagnostics_until(lsp, &readme, "the warning to go", |d| {
            !d.iter().any(is_conflict)
        })
        .await;
        assert_eq!(left.len(), 1, "{left:?}");
        assert_eq!(left[0]["code"], asked["approval_id"]);
    }
    let listed = c
        .call("list_conflicts", json!({ "party_id": party }))
        .await
        .unwrap();
    assert_eq!(listed["conflicts"], json!([]), "{listed}");

    // Deciding the request clears the file.
    c.call(
        "decide_approval",
        json!({ "approval_id": asked["approval_id"], "decision": "deny" }),
    )
    .await
    .unwrap();
    diagnostics_until(&mut before, &readme, "the file to clear", |d| d.is_empty()).await;

    c.call(
        "broadcast_to_party",
        json!({ "party_id": party, "from_session_id": person, "content": "finish now" }),
    )
    .await
    .unwrap();
    let end = party_end(&c, &party, 60).await;
    assert_eq!(end["party"]["status"], "completed", "{end}");
    before.stop().await.unwrap();
    after.stop().await.unwrap();
}
