//! Only the person decides: a member Troupe started calls with its own run's credential (never
//! the person's token), as itself, and only what its operation's access admits. The regression
//! of a member approving its own `rm -rf ~/important`, and a table of operation × caller (the
//! person, the party's leader, a member, a member of another party, a run that has ended, an
//! agent CLI of the person's, nobody) against a real daemon, through the JSON-RPC and MCP doors
//! (the LSP, ACP and hook doors: `authority_doors.rs`).

use std::path::Path;

use serde_json::{Value, json};
use troupe::client::{self, Client};

use crate::scenario::Scenario;
use crate::support::{
    TestDaemon, define, executable, item, launch, register, repo, shares, wait_for,
};

/// A member that leaves its run's credential in `$KEYS/<role>.tok` (and its environment in
/// `$KEYS/<role>.env`), then stays until `$KEYS/release` appears.
pub(crate) const KEEPER: &str = r#"#!/bin/sh
env > "$KEYS/$TROUPE_ROLE.env"
printf '%s' "$TROUPE_RUN_TOKEN" > "$KEYS/$TROUPE_ROLE.tmp" && mv "$KEYS/$TROUPE_ROLE.tmp" "$KEYS/$TROUPE_ROLE.tok"
while [ ! -e "$KEYS/release" ]; do sleep 0.05; done
troupe call complete '{"output":"released"}' >/dev/null
"#;

/// The credential a role's member left, once it did.
pub(crate) async fn token_of(keys: &Path, role: &str) -> String {
    let path = keys.join(format!("{role}.tok"));
    wait_for(&format!("{role}'s credential"), 30, || async {
        std::fs::read_to_string(&path)
            .ok()
            .filter(|t| !t.is_empty())
    })
    .await
}

/// An agent running `script` in a worktree with `env`, its box given `shared` (what it shares
/// with the test: `TestDaemon::shared`), and a party of one `dev` role of it.
pub(crate) async fn one_dev_party(
    c: &Client,
    name: &str,
    script: String,
    env: Value,
    shared: &[&Path],
) {
    define(
        c,
        "agent",
        shares(
            json!({ "name": name, "command": [script], "isolation": "worktree", "env": env }),
            shared,
        ),
    )
    .await;
    define(
        c,
        "party",
        json!({ "name": format!("{name}-party"), "roles": { "dev": { "agent": name } } }),
    )
    .await;
}

/// The message `content` that `session` received (read or not).
async fn heard(c: &Client, session: &str, content: &str) -> Value {
    let all = c
        .call(
            "poll_messages",
            json!({ "session_id": session, "since": 0, "mark_read": false, "limit": 100 }),
        )
        .await
        .unwrap();
    all["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["content"] == content)
        .cloned()
        .unwrap_or_else(|| panic!("{content:?} not in {all}"))
}

/// The error of a refused call, or `None` if the call was admitted (whatever it then did).
async fn refusal(c: &Client, op: &str, params: Value) -> Option<Value> {
    match c.call(op, params).await {
        Ok(_) => None,
        Err(e) if e.kind() == Some("forbidden") => {
            let client::CallError::Rpc { message, data, .. } = e else {
                unreachable!()
            };
            let mut data = data.unwrap_or_default();
            data["message"] = message.into();
            // A refusal of the operation's access names it; a handler's own rule does not.
            data.get("op").is_some().then_some(data)
        }
        Err(_) => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_cannot_approve_its_own_request_to_run_rm_rf_home() {
    let s = Scenario::new().await;
    let (d, c) = (&s.daemon, &s.person);
    let out = s.shared().join("out");
    std::fs::create_dir_all(&out).unwrap();
    // The scenario as a tester ran it: ask in the background, find the request, approve it
    // with the session left out (which used to make any caller "the person").
    let script = executable(
        s.dir(),
        "sly.sh",
        r#"#!/bin/sh
troupe call request_permission '{"tool_name":"Bash","input":{"command":"rm -rf ~/important"},"wait_ms":60000}' > "$OUT/ask.json" 2>&1 &
asker=$!
until A=$(troupe call list_approvals '{"status":"pending"}' | python3 -c 'import json,sys; print(json.load(sys.stdin)["approvals"][0]["approval_id"])' 2>/dev/null); [ -n "$A" ]; do sleep 0.05; done
troupe call shutdown_daemon > /dev/null 2> "$OUT/shutdown.err"
env -u TROUPE_SESSION_ID troupe call decide_approval "{\"approval_id\":\"$A\",\"decision\":\"approve\"}" > "$OUT/decide.out" 2> "$OUT/decide.err"
echo $? > "$OUT/decide.rc.tmp" && mv "$OUT/decide.rc.tmp" "$OUT/decide.rc"
wait $asker
troupe call complete '{"output":"done"}' > /dev/null
"#,
    );
    one_dev_party(
        c,
        "sly",
        script,
        json!({ "OUT": out.display().to_string() }),
        &[&out],
    )
    .await;
    let party = s.launch("sly-party").await;

    let rc = wait_for("the member's decide call", 60, || async {
        std::fs::read_to_string(out.join("decide.rc")).ok()
    })
    .await;
    let err = std::fs::read_to_string(out.join("decide.err")).unwrap();
    assert_ne!(rc.trim(), "0", "the member's approval was taken: {err}");
    assert!(
        err.contains("decide_approval") && err.contains("the person only"),
        "the refusal names the operation and who may call it: {err}"
    );
    assert!(err.contains("member dev#0"), "and who called: {err}");

    // Nothing was decided: the request still waits for the person, flagged as leaving the
    // member's worktree.
    let pending = c
        .call(
            "list_approvals",
            json!({ "status": "pending", "party_id": party }),
        )
        .await
        .unwrap();
    let approval = &pending["approvals"][0];
    assert_eq!(approval["status"], "pending", "{pending}");
    // The daemon is still serving (the member could not stop it either).
    assert!(c.call("daemon_status", json!({})).await.is_ok());

    let id = approval["approval_id"].as_str().unwrap().to_string();
    let out_cli = d.cli(&["approvals", "decide", &id, "deny"]);
    assert!(out_cli.status.success(), "{out_cli:?}");
    let ask = wait_for("the member's request answered", 30, || async {
        std::fs::read_to_string(out.join("ask.json"))
            .ok()
            .filter(|t| t.contains("denied"))
    })
    .await;
    assert!(ask.contains("denied"), "{ask}");
    let shutdown = std::fs::read_to_string(out.join("shutdown.err")).unwrap_or_default();
    assert!(shutdown.contains("shutdown_daemon"), "{shutdown}");
    let decided = c
        .call("list_approvals", json!({ "status": "denied" }))
        .await
        .unwrap();
    assert_eq!(
        decided["approvals"][0]["decided_by"], "cli",
        "the record names the door the person used: {decided}"
    );
}

/// Who may call what: each row an operation with params that pass any handler check up to the
/// point of admission (unknown ids are fine: a call admitted and then not found is admitted),
/// and for each caller whether its access refuses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_caller_gets_exactly_what_its_operation_admits() {
    let s = Scenario::new().await;
    let (d, c, project) = (&s.daemon, &s.person, &s.project);
    // Each keeper leaves its credential in a dir of the test's, which its box is given.
    let keys = s.shared().join("keys");
    std::fs::create_dir_all(&keys).unwrap();
    let keeper = executable(s.dir(), "keeper.sh", KEEPER);
    define(
        c,
        "agent",
        shares(
            json!({ "name": "keeper", "command": [keeper],
                    "env": { "KEYS": keys.display().to_string() } }),
            &[&keys],
        ),
    )
    .await;
    define(
        c,
        "party",
        json!({ "name": "table", "roles": {
            "lead": { "agent": "keeper", "is_leader": true },
            "dev": { "agent": "keeper" } } }),
    )
    .await;
    let other_keys = s.shared().join("other-keys");
    std::fs::create_dir_all(&other_keys).unwrap();
    define(
        c,
        "agent",
        shares(
            json!({ "name": "other-keeper", "command": [executable(s.dir(), "other.sh", KEEPER)],
                    "env": { "KEYS": other_keys.display().to_string() } }),
            &[&other_keys],
        ),
    )
    .await;
    define(
        c,
        "party",
        json!({ "name": "other", "roles": { "stranger": { "agent": "other-keeper" } } }),
    )
    .await;
    let party = s.launch("table").await;
    let other_party = s.launch("other").await;
    let lead = client::connect_with_token(&d.layout, &token_of(&keys, "lead").await)
        .await
        .unwrap();
    let dev = client::connect_with_token(&d.layout, &token_of(&keys, "dev").await)
        .await
        .unwrap();
    let stranger = client::connect_with_token(&d.layout, &token_of(&other_keys, "stranger").await)
        .await
        .unwrap();
    let env = std::fs::read_to_string(keys.join("dev.env")).unwrap();
    let person_token = d.token();
    assert!(
        !env.contains(&person_token) && !env.contains("TROUPE_TOKEN_FILE"),
        "a member is never given the person's token nor where it is kept"
    );
    let sessions = c
        .call("get_party_status", json!({ "party_id": party }))
        .await
        .unwrap();
    let member_field = |role: &str, field: &str| {
        item(&sessions, "members", "role", role)[field]
            .as_str()
            .unwrap()
            .to_string()
    };
    let (lead_s, dev_s) = (
        member_field("lead", "session_id"),
        member_field("dev", "session_id"),
    );

    // A run that has ended: a standalone run that leaves its credential and completes.
    let ended_keys = s.shared().join("ended-keys");
    std::fs::create_dir_all(&ended_keys).unwrap();
    std::fs::write(ended_keys.join("release"), "").unwrap();
    define(
        c,
        "agent",
        shares(
            json!({ "name": "brief", "command": [executable(s.dir(), "brief.sh", KEEPER)],
                    "env": { "KEYS": ended_keys.display().to_string(), "TROUPE_ROLE": "brief" } }),
            &[&ended_keys],
        ),
    )
    .await;
    let parent = register(c, "human", project, None).await;
    let run = crate::support::start(c, "brief", "go", &parent).await;
    let ended_token = token_of(&ended_keys, "brief").await;
    crate::support::wait_run(c, &run).await;

    // (operation, params, who is admitted: P person, L leader, M member, O other party's member)
    let pid = party.as_str();
    let rows: Vec<(&str, Value, &str)> = vec![
        (
            "decide_approval",
            json!({ "approval_id": "nope", "decision": "approve" }),
            "P",
        ),
        ("revoke_approval_rule", json!({ "rule_id": 999 }), "P"),
        (
            "answer_question",
            json!({ "question_id": "nope", "answer": "yes" }),
            "P",
        ),
        ("dismiss_inbox_item", json!({ "item_id": "nope" }), "P"),
        ("grant_plugin", json!({ "name": "nope" }), "P"),
        ("install_plugin", json!({ "path": "/nonexistent" }), "P"),
        ("remove_plugin", json!({ "name": "nope" }), "P"),
        (
            "land_party",
            json!({ "party_id": "nope", "test_command": ["sh", "-c", "touch /tmp/pwned"] }),
            "P",
        ),
        ("cleanup_party", json!({ "party_id": "nope" }), "P"),
        (
            "create_agent_definition",
            json!({ "definition": { "name": "evil", "command": ["sh"] } }),
            "P",
        ),
        (
            "delete_agent_definition",
            json!({ "name": "keeper-x" }),
            "P",
        ),
        (
            "launch_party",
            json!({ "name": "no-such-party", "cwd": project }),
            "P",
        ),
        (
            "create_party_definition",
            json!({ "definition": { "name": "x", "roles": {} } }),
            "P",
        ),
        (
            "signal_role",
            json!({ "party_id": pid, "role_name": "dev", "signal": "proceed" }),
            "PL",
        ),
        (
            "override_recovery",
            json!({ "party_id": pid, "role_name": "dev", "strategy": "restart" }),
            "PL",
        ),
        (
            "reassign_task",
            json!({ "party_id": pid, "task_id": "nope", "to_role": "dev" }),
            "PL",
        ),
        (
            "commit_plan",
            json!({ "party_id": pid, "version": 1 }),
            "PLMO",
        ),
        (
            "vote",
            json!({ "decision_id": "nope", "option": "a", "rationale": "r" }),
            "PLMO",
        ),
        ("get_party_status", json!({ "party_id": pid }), "PLMO"),
        ("list_approvals", json!({}), "PLMO"),
        ("poll_messages", json!({ "wait_ms": 0 }), "PLMO"),
    ];
    let callers: [(&str, char, &Client); 4] = [
        ("person", 'P', c),
        ("leader", 'L', &lead),
        ("member", 'M', &dev),
        ("other party's member", 'O', &stranger),
    ];
    let mut wrong = Vec::new();
    for (op, params, admitted) in &rows {
        for (who, letter, client) in callers {
            let refused = refusal(client, op, params.clone()).await;
            let expected_admitted = admitted.contains(letter);
            if expected_admitted == refused.is_some() {
                wrong.push(format!(
                    "{op} by the {who}: expected {}, got {}",
                    if expected_admitted {
                        "admitted"
                    } else {
                        "refused"
                    },
                    refused.map(|r| r.to_string()).unwrap_or("admitted".into())
                ));
            } else if let Some(r) = refused {
                let message = r["message"].as_str().unwrap_or_default();
                assert!(
                    message.contains(op) && r["allowed"].is_string() && r["caller"].is_string(),
                    "a refusal names the operation, the caller and who may: {r}"
                );
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));

    // Every operation only the person may call is refused to a member, whatever its params.
    for op in troupe_api::OPERATIONS
        .iter()
        .filter(|o| o.access == troupe_api::Access::Person)
    {
        assert!(
            refusal(&dev, op.name, json!({})).await.is_some(),
            "{} admitted a member",
            op.name
        );
    }

    // A member speaks only as itself: naming another session is refused, not replaced.
    let r = refusal(
        &dev,
        "send_message",
        json!({ "from_session_id": lead_s, "to_session_id": dev_s, "content": "I am the lead" }),
    )
    .await
    .expect("a member naming another session as its own");
    assert!(r["message"].as_str().unwrap().contains(&lead_s), "{r}");
    // ... and as itself it is served, the session filled in from its credential.
    dev.call(
        "send_message",
        json!({ "to_session_id": lead_s, "content": "hello lead" }),
    )
    .await
    .unwrap();
    let hello = heard(c, &lead_s, "hello lead").await;
    assert_eq!(hello["from_session_id"], dev_s, "{hello}");
    // Nor does it end another member's run: naming the lead's run to `complete` is refused
    // (its session is the caller's own, which the lead's run is not), and the lead runs on.
    let lead_run = member_field("lead", "run_id");
    let err = dev
        .call(
            "complete",
            json!({ "run_id": lead_run, "output": "done, on the lead's behalf" }),
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains(&lead_run) && err.contains(&dev_s), "{err}");
    let now = c
        .call("get_party_status", json!({ "party_id": party }))
        .await
        .unwrap();
    let lead_now = item(&now, "members", "role", "lead");
    assert_eq!(lead_now["run_status"], "running", "{lead_now}");

    // A run that has ended: its credential no longer opens the door.
    let ended = client::connect_with_token(&d.layout, &ended_token).await;
    if let Ok(ended) = ended {
        assert!(ended.call("list_sessions", json!({})).await.is_err());
    }
    // Nobody: no token, or a forged one.
    assert!(
        client::connect_with_token(&d.layout, "trn1.nope.0000")
            .await
            .is_err()
    );
    let (status, _) = crate::support::http_post(
        &d.ws_addr(),
        None,
        br#"{"jsonrpc":"2.0","id":1,"method":"list_sessions"}"#,
    );
    assert_eq!(status, 401);

    mcp_rows(
        d,
        &token_of(&keys, "dev").await,
        &dev_s,
        &lead_s,
        &token_of(&keys, "lead").await,
        &party,
    )
    .await;

    std::fs::write(keys.join("release"), "").unwrap();
    std::fs::write(other_keys.join("release"), "").unwrap();
    s.ended(&party).await;
    s.ended(&other_party).await;
}

/// docs/security.md's table is the operation list's access, operation by operation (run with
/// `UPDATE_EXPECT=1` to rewrite it).
#[test]
fn the_security_docs_table_is_the_operation_list() {
    let path = crate::support::workspace_root().join("docs/security.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let start_marker = "<!-- access table: generated from the operation list; tests/it/authority.rs checks it -->\n";
    let end_marker = "<!-- end of access table -->";
    let start = text.find(start_marker).expect("the table's start marker") + start_marker.len();
    let end = text.find(end_marker).expect("the table's end marker");
    let mut table = String::from("| operation | who may call it |\n| --- | --- |\n");
    for op in troupe_api::OPERATIONS {
        let field = op
            .access
            .caller_field()
            .map(|f| format!(" (`{f}`)"))
            .unwrap_or_default();
        table.push_str(&format!(
            "| `{}` | {}{field} |\n",
            op.name,
            op.access.label()
        ));
    }
    if text[start..end] != table {
        if std::env::var_os("UPDATE_EXPECT").is_some() {
            let updated = format!("{}{table}{}", &text[..start], &text[end..]);
            std::fs::write(&path, updated).unwrap();
        } else {
            panic!(
                "docs/security.md's table is out of date (UPDATE_EXPECT=1 rewrites it):\n{table}"
            );
        }
    }
}

/// The MCP door (streamable HTTP) admits the same way: a member's credential is its session
/// whatever its headers claim, and the person's token there is an agent CLI's, not the person.
async fn mcp_rows(
    d: &TestDaemon,
    dev_token: &str,
    dev_s: &str,
    lead_s: &str,
    lead_token: &str,
    party: &str,
) {
    use rmcp::ServiceExt;
    use rmcp::model::CallToolRequestParams;
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    let url = client::read_endpoint(&d.layout).unwrap().mcp_url.unwrap();
    let connect = |token: String, session: String| {
        let url = url.clone();
        async move {
            crate::support::rustls_provider();
            let cfg = StreamableHttpClientTransportConfig::with_uri(url)
                .auth_header(token)
                .custom_headers(std::collections::HashMap::from([(
                    http::HeaderName::from_static("x-troupe-session"),
                    http::HeaderValue::from_str(&session).unwrap(),
                )]));
            ().serve(StreamableHttpClientTransport::from_config(cfg))
                .await
                .unwrap()
        }
    };
    let call =
        |m: &rmcp::service::RunningService<rmcp::RoleClient, ()>, tool: &str, args: Value| {
            let req = CallToolRequestParams::new(tool.to_string())
                .with_arguments(args.as_object().unwrap().clone());
            let peer = m.peer().clone();
            async move { peer.call_tool(req).await }
        };
    let tools = |m: &rmcp::service::RunningService<rmcp::RoleClient, ()>| {
        let peer = m.peer().clone();
        async move {
            peer.list_all_tools()
                .await
                .unwrap()
                .iter()
                .map(|t| t.name.to_string())
                .collect::<Vec<_>>()
        }
    };
    // The member claims to be the leader in its headers: its credential says otherwise.
    let m = connect(dev_token.to_string(), lead_s.to_string()).await;
    assert!(
        !tools(&m).await.contains(&"signal_role".to_string()),
        "a member is not offered the leader's tools"
    );
    let r = call(
        &m,
        "signal_role",
        json!({ "party_id": party, "role_name": "dev", "signal": "proceed" }),
    )
    .await;
    assert!(
        r.is_err() || r.as_ref().is_ok_and(|r| r.is_error == Some(true)),
        "{r:?}"
    );
    let sent = call(
        &m,
        "send_message",
        json!({ "to_session_id": lead_s, "content": "via mcp" }),
    )
    .await
    .unwrap();
    assert_eq!(sent.is_error, Some(false), "{sent:?}");
    m.cancel().await.unwrap();
    let c = d.client().await;
    let via = heard(&c, lead_s, "via mcp").await;
    assert_eq!(via["from_session_id"], dev_s, "sent as itself: {via}");
    // The leader, by its own credential, gets and may use the leader's tools.
    let l = connect(lead_token.to_string(), String::new()).await;
    let offered = tools(&l).await;
    assert!(offered.contains(&"signal_role".to_string()));
    assert!(offered.contains(&"commit_plan".to_string()));
    // ... but not what only the person or their own agent CLIs may do: a member is not
    // offered a tool it would be refused.
    for theirs in [
        "launch_party",
        "create_party_definition",
        "delete_party_definition",
    ] {
        assert!(
            !offered.contains(&theirs.to_string()),
            "{theirs}: {offered:?}"
        );
    }
    l.cancel().await.unwrap();
    // The person's token over MCP is an agent CLI's: it acts as the session it names and may
    // not take the person's decisions through a tool (they are not tools), nor lead a party
    // it does not lead.
    let a = connect(d.token(), dev_s.to_string()).await;
    let r = call(&a, "cancel_party", json!({ "party_id": party })).await;
    assert!(
        r.is_err() || r.as_ref().is_ok_and(|r| r.is_error == Some(true)),
        "{r:?}"
    );
    a.cancel().await.unwrap();
}

/// The member sandbox: a member reads neither the person's token nor the database nor another
/// run's checkout (the data dir is not there for it), and still works in its own worktree and
/// reports back through the socket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(troupe_test_tools),
    ignore = "drives a real tool scripts/test installs: run with TROUPE_TEST_TOOLS=1"
)]
async fn a_sandboxed_member_cannot_read_the_token_or_the_database_and_still_works() {
    let s = Scenario::new().await;
    let (d, c, _project) = (&s.daemon, &s.person, &s.project);
    let status = c.call("daemon_status", json!({})).await.unwrap();
    let sandbox = status["sandbox"].as_str().unwrap().to_string();
    assert!(
        sandbox.starts_with("on:"),
        "scripts/test installs bubblewrap; the sandbox must be on: {sandbox}"
    );
    // Where it reports what it tried: a dir of the test's, beside the data dir, its box is given.
    let out = s.shared().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let token_path = d.layout.token_path();
    let db = d.layout.data_dir.join("troupe.db");
    let script = executable(
        s.dir(),
        "prober.sh",
        &format!(
            r#"#!/bin/sh
cat '{token}' > "$OUT/token.out" 2> "$OUT/token.err"; echo $? > "$OUT/token.rc"
cat '{db}' > /dev/null 2> "$OUT/db.err"; echo $? > "$OUT/db.rc"
ls '{worktrees}' > "$OUT/worktrees.out" 2>&1; echo $? > "$OUT/worktrees.rc"
echo work > done.txt
git add done.txt && git -c user.name=m -c user.email=m@m commit -qm work
troupe call complete '{{"output":"worked"}}' > /dev/null 2> "$OUT/complete.err"
"#,
            token = token_path.display(),
            db = db.display(),
            // Where sandboxed members' checkouts are (borrowing clones, worktrees or not).
            worktrees = d.layout.data_dir.join("clones").display(),
        ),
    );
    one_dev_party(
        c,
        "prober",
        script,
        json!({ "OUT": out.display().to_string() }),
        &[&out],
    )
    .await;
    let party = s.launch("prober-party").await;
    let end = s.ended(&party).await;
    let complete = std::fs::read_to_string(out.join("complete.err")).unwrap_or_default();
    assert_eq!(end["party"]["status"], "completed", "{end}\n{complete}");
    assert_eq!(end["members"][0]["output"], "worked", "{end}");
    let person_token = d.token();
    let read = std::fs::read_to_string(out.join("token.out")).unwrap_or_default();
    assert!(
        !read.contains(&person_token),
        "the member read the person's token"
    );
    assert_ne!(
        std::fs::read_to_string(out.join("token.rc"))
            .unwrap()
            .trim(),
        "0"
    );
    assert_ne!(
        std::fs::read_to_string(out.join("db.rc")).unwrap().trim(),
        "0",
        "the member opened the database"
    );
    let listed = std::fs::read_to_string(out.join("worktrees.out")).unwrap_or_default();
    assert!(
        !listed.contains("member-0") || listed.trim() == "probe",
        "other runs' checkouts are not there: {listed}"
    );
    // Its work is in its branch, for the merge queue.
    let log = std::process::Command::new("git")
        .args(["log", "--oneline", "-1"])
        .current_dir(end["members"][0]["workdir"].as_str().unwrap())
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&log.stdout).contains("work"));
}

/// Inside the box a member's edits in its own checkout and its commands that stay there go
/// through without asking, unless the project says otherwise (`[sandbox]
/// approve_own_checkout_edits = false`, `approve_in_box_commands = false`): the same party run
/// asks the person five times with both off, once by default (the command that reads outside
/// its checkout).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(troupe_test_tools),
    ignore = "drives a real tool scripts/test installs: run with TROUPE_TEST_TOOLS=1"
)]
async fn sandboxed_edits_inside_a_members_own_checkout_need_no_person_when_the_project_says_so() {
    let d = TestDaemon::start();
    let c = d.client().await;
    // Three edits in its checkout and a command reaching outside; it waits for each answer
    // (the test answers the person's prompts as they come), then completes.
    let script = executable(
        d.dir.path(),
        "editor.sh",
        r#"#!/bin/sh
ask() {
  R=$(troupe call request_permission "$1")
  A=$(echo "$R" | python3 -c 'import json,sys; print(json.load(sys.stdin)["approval_id"])')
  S=$(echo "$R" | python3 -c 'import json,sys; print(json.load(sys.stdin)["status"])')
  while [ "$S" = pending ]; do
    S=$(troupe call request_permission "{\"approval_id\":\"$A\",\"wait_ms\":20000}" | python3 -c 'import json,sys; print(json.load(sys.stdin)["status"])')
  done
}
for f in a.txt src/b.txt c.txt; do
  ask "{\"tool_name\":\"Write\",\"input\":{\"file_path\":\"$PWD/$f\",\"content\":\"x\"},\"file_path\":\"$PWD/$f\",\"wait_ms\":20000}"
done
ask '{"tool_name":"Bash","input":{"command":"make test"},"wait_ms":20000}'
ask '{"tool_name":"Bash","input":{"command":"cat ~/.ssh/config"},"wait_ms":20000}'
troupe call complete '{"output":"asked"}' > /dev/null
"#,
    );
    one_dev_party(&c, "editor", script, json!({}), &[]).await;
    let mut prompts = Vec::new();
    for (name, allow) in [("asking", false), ("boxed", true)] {
        let project = repo(&d.dir.path().join(name));
        if !allow {
            std::fs::create_dir_all(Path::new(&project).join(".troupe")).unwrap();
            std::fs::write(
                Path::new(&project).join(".troupe/config.toml"),
                "[sandbox]\napprove_own_checkout_edits = false\napprove_in_box_commands = false\n",
            )
            .unwrap();
        }
        let party = launch(&c, "editor-party", &project).await;
        let started = std::time::Instant::now();
        let mut asked = 0;
        loop {
            let status = c
                .call("get_party_status", json!({ "party_id": party }))
                .await
                .unwrap();
            if status["party"]["status"] != "running" {
                break;
            }
            let pending = c
                .call(
                    "list_approvals",
                    json!({ "status": "pending", "party_id": party }),
                )
                .await
                .unwrap();
            for a in pending["approvals"].as_array().unwrap() {
                let id = a["approval_id"].as_str().unwrap();
                if c.call(
                    "decide_approval",
                    json!({ "approval_id": id, "decision": "approve" }),
                )
                .await
                .is_ok()
                {
                    asked += 1;
                }
            }
            // Polls for the next request or the party's end, within a bound.
            assert!(
                started.elapsed() < std::time::Duration::from_secs(90),
                "the {name} party did not end"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        let all = c
            .call("list_approvals", json!({ "party_id": party }))
            .await
            .unwrap();
        let by_sandbox = all["approvals"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|a| a["rule_id"] == "sandbox:own-checkout")
            .count();
        prompts.push((name, asked, by_sandbox));
    }
    assert_eq!(
        prompts,
        [("asking", 5, 0), ("boxed", 1, 4)],
        "prompts to the person, and requests let through by the box"
    );
}
