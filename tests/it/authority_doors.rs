//! The editor and hook doors are whoever their process's credential says: `troupe lsp`,
//! `troupe acp` and `troupe hook` run with a member's `TROUPE_RUN_TOKEN` (as a member could run
//! them) are that member and get only its rights; run by the person they are the person (LSP,
//! ACP, recorded as that door) or an agent CLI of the person's (hooks). The JSON-RPC and MCP
//! doors' rows are in `authority.rs`.

use std::path::Path;
use std::process::Stdio;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::authority::{KEEPER, one_dev_party, token_of};
use crate::lsp_client::LspClient;
use crate::scenario::Scenario;
use crate::support::{BIN, TestDaemon, executable, register, wait_for};

/// A `troupe acp` child spoken to in newline-delimited JSON-RPC, as an ACP editor does.
struct Acp {
    _child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    stdout: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    next_id: i64,
}

impl Acp {
    fn start(d: &TestDaemon, env: &[(&str, &str)]) -> Acp {
        let mut child = tokio::process::Command::new(BIN)
            .arg("--data-dir")
            .arg(&d.layout.data_dir)
            .arg("acp")
            .env("TROUPE_RUNTIME_DIR", &d.layout.runtime_dir)
            .env("TROUPE_LOG", "warn")
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        Acp {
            stdin: child.stdin.take().unwrap(),
            stdout: BufReader::new(child.stdout.take().unwrap()).lines(),
            _child: child,
            next_id: 0,
        }
    }

    /// Sends a request and returns its answer (declining whatever the door asks meanwhile).
    async fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let line = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        self.stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
        self.stdin.flush().await.unwrap();
        let answer = async {
            loop {
                let text = self
                    .stdout
                    .next_line()
                    .await
                    .unwrap()
                    .expect("troupe acp ended");
                let msg: Value = serde_json::from_str(&text).unwrap();
                if msg.get("method").is_none() && msg["id"] == id {
                    return msg;
                }
                if msg.get("method").is_some() && msg.get("id").is_some() {
                    let no = json!({ "jsonrpc": "2.0", "id": msg["id"],
                        "result": { "outcome": { "outcome": "cancelled" } } });
                    self.stdin
                        .write_all(format!("{no}\n").as_bytes())
                        .await
                        .unwrap();
                }
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(60), answer)
            .await
            .expect("an answer from troupe acp")
    }
}

/// `troupe hook <event>` with `payload` on stdin and `env`: its stdout and stderr.
fn hook(d: &TestDaemon, event: &str, payload: &Value, env: &[(&str, &str)]) -> (String, String) {
    let mut child = std::process::Command::new(BIN)
        .arg("--data-dir")
        .arg(&d.layout.data_dir)
        .args(["hook", event])
        .env("TROUPE_RUNTIME_DIR", &d.layout.runtime_dir)
        .env("TROUPE_LOG", "warn")
        .env_remove("TROUPE_SESSION_ID")
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(
        &mut child.stdin.take().unwrap(),
        payload.to_string().as_bytes(),
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    // A hook never fails Claude Code's tool call by its exit status: it says why on stderr.
    assert!(out.status.success(), "{out:?}");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs `troupe.<op>` through an LSP door's `workspace/executeCommand`: its answer.
async fn execute(lsp: &mut LspClient, op: &str, args: Value) -> Value {
    let id = lsp
        .request(
            "workspace/executeCommand",
            json!({ "command": format!("troupe.{op}"), "arguments": [args] }),
        )
        .await
        .unwrap();
    lsp.until(|m| m["id"] == id && m.get("method").is_none())
        .await
        .unwrap()
}

/// An answer is a refusal of `op`'s access to the member (not some other failure).
fn refused_to_member(answer: &Value, op: &str) {
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert_eq!(answer["error"]["code"], -32022, "{op}: {answer}");
    assert!(
        message.contains(op) && message.contains("member dev#0"),
        "the refusal names the operation and the member: {answer}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lsp_acp_and_hook_doors_are_whoever_their_credential_says() {
    let s = Scenario::new().await;
    let (d, c, project) = (&s.daemon, &s.person, &s.project);
    let keys = s.shared().join("keys");
    std::fs::create_dir_all(&keys).unwrap();
    let keeper = executable(s.dir(), "keeper.sh", KEEPER);
    one_dev_party(
        c,
        "keeper",
        keeper,
        json!({ "KEYS": keys.display().to_string() }),
        &[&keys],
    )
    .await;
    let party = s.launch("keeper-party").await;
    let token = token_of(&keys, "dev").await;
    let member = [("TROUPE_RUN_TOKEN", token.as_str())];
    let person_session = register(c, "human", project, None).await;

    // The member asks to run a command; the request waits for the person.
    let dev = troupe::client::connect_with_token(&d.layout, &token)
        .await
        .unwrap();
    let ask = tokio::spawn(async move {
        dev.call(
            "request_permission",
            json!({ "tool_name": "Bash", "input": { "command": "rm -rf ~/important" },
                    "wait_ms": 120_000 }),
        )
        .await
    });
    let approval = crate::support::pending_approval(c).await;
    let id = approval["approval_id"].as_str().unwrap().to_string();

    // LSP, run by the member: the editor's commands are refused to it.
    let mut lsp = LspClient::start_with_env(
        Path::new(BIN),
        &d.layout,
        Path::new(&project),
        "warn",
        &member,
    )
    .await
    .unwrap();
    let decide = json!({ "approval_id": id, "decision": "approve" });
    refused_to_member(
        &execute(&mut lsp, "decide_approval", decide.clone()).await,
        "decide_approval",
    );
    refused_to_member(
        &execute(&mut lsp, "shutdown_daemon", json!({})).await,
        "shutdown_daemon",
    );
    refused_to_member(
        &execute(
            &mut lsp,
            "land_party",
            json!({ "party_id": party, "test_command": "touch /tmp/pwned" }),
        )
        .await,
        "land_party",
    );
    // What a member may do, it does through the same door, as itself.
    let status = execute(&mut lsp, "get_party_status", json!({ "party_id": party })).await;
    assert_eq!(
        status["result"]["party"]["party_id"],
        party.as_str(),
        "{status}"
    );
    lsp.stop().await.unwrap();

    // ACP, run by the member: it cannot launch a party (the person's power) through it.
    let mut acp = Acp::start(d, &member);
    let init = acp
        .call(
            "initialize",
            json!({ "protocolVersion": 1, "clientCapabilities": {} }),
        )
        .await;
    assert!(init.get("result").is_some(), "{init}");
    let new = acp
        .call("session/new", json!({ "cwd": project, "mcpServers": [] }))
        .await;
    let prompt = match new["result"]["sessionId"].as_str() {
        Some(session) => {
            acp.call(
                "session/prompt",
                json!({ "sessionId": session,
                        "prompt": [{ "type": "text", "text": "/party keeper-party go" }] }),
            )
            .await
        }
        // Refused already at the session (whichever comes first is the member's limit).
        None => new,
    };
    assert_eq!(prompt["error"]["code"], -32022, "{prompt}");
    assert!(
        prompt["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("member dev#0")),
        "{prompt}"
    );
    let parties = c.call("list_parties", json!({})).await.unwrap();
    assert_eq!(
        parties["parties"].as_array().unwrap().len(),
        1,
        "the member launched nothing: {parties}"
    );
    drop(acp);

    // Hooks, run by the member: as itself it is answered; claiming another session, refused.
    let payload = json!({ "session_id": "member-claude", "cwd": project,
                          "hook_event_name": "SessionStart", "source": "startup" });
    let (_, err) = hook(
        d,
        "SessionStart",
        &payload,
        &[member[0], ("TROUPE_SESSION_ID", person_session.as_str())],
    );
    assert!(
        err.contains("claude_hook") && err.contains("member dev#0"),
        "a member's hook claiming the person's session is refused: {err}"
    );
    let (out, err) = hook(d, "SessionStart", &payload, &member);
    assert!(
        err.trim().is_empty(),
        "as itself the hook is answered: {err}"
    );
    assert!(out.contains("SessionStart"), "{out}");

    // Nothing the member tried decided anything.
    let pending = c
        .call("list_approvals", json!({ "status": "pending" }))
        .await
        .unwrap();
    assert_eq!(pending["approvals"][0]["approval_id"], id.as_str());

    // Hooks, run by the person's own Claude Code: an agent, answered, and no person's power
    // (its one operation answers the hook; the request is still the person's to decide).
    let (out, err) = hook(
        d,
        "SessionStart",
        &json!({ "session_id": "person-claude", "cwd": project,
                 "hook_event_name": "SessionStart", "source": "startup" }),
        &[],
    );
    assert!(err.trim().is_empty(), "{err}");
    assert!(out.contains("You are Troupe session"), "{out}");

    // LSP, run by the person: the decision is taken, and recorded as the LSP door's.
    let mut lsp = LspClient::start(Path::new(BIN), &d.layout, Path::new(&project), "warn")
        .await
        .unwrap();
    let decided = execute(
        &mut lsp,
        "decide_approval",
        json!({ "approval_id": id, "decision": "deny" }),
    )
    .await;
    assert!(decided.get("error").is_none(), "{decided}");
    let asked = ask.await.unwrap().unwrap();
    assert_eq!(asked["status"], "denied", "{asked}");
    let record = wait_for("the decision recorded", 30, || async {
        let l = c
            .call("list_approvals", json!({ "status": "denied" }))
            .await
            .unwrap();
        l["approvals"].as_array().unwrap().first().cloned()
    })
    .await;
    assert_eq!(record["decided_by"], "lsp", "{record}");
    lsp.stop().await.unwrap();

    std::fs::write(keys.join("release"), "").unwrap();
}
