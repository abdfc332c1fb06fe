//! `[notify]` read and checked, notifications made from an item's kind, ids and facts alone
//! (never its title or detail), the webhook's three shapes, and the ids notified kept across a
//! restart.

use serde_json::json;
use troupe_api::types::{InboxAnswer, InboxItem};

use super::*;

const SECRET: &str = "sk-live-SECRET-0123456789";

fn settings(toml: &str) -> Result<Settings, String> {
    let table: toml::Table = toml::from_str(toml).unwrap();
    Settings::from_table(table["notify"].as_table().unwrap())
}

fn item(kind: &str, id: &str) -> InboxItem {
    InboxItem {
        item_id: id.into(),
        kind: kind.into(),
        project_id: Some("p1".into()),
        party_id: Some("party-1".into()),
        session_id: Some("s1".into()),
        title: format!("worker asks to use Bash: curl -H 'Authorization: Bearer {SECRET}'"),
        detail: Some(format!("the command holds {SECRET}")),
        since: "2026-01-01T00:00:00Z".into(),
        answer: InboxAnswer {
            op: "decide_approval".into(),
            params: json!({ "approval_id": id, "hint": SECRET }),
            choice_field: Some("decision".into()),
            choices: vec![json!("approve")],
        },
    }
}

fn facts() -> Facts {
    Facts {
        project: Some("repo".into()),
        party: Some("refactor".into()),
        tool: Some("Bash".into()),
    }
}

#[test]
fn notify_defaults_to_the_desktop_alone_and_reads_every_key() {
    assert_eq!(settings("[notify]").unwrap(), Settings::default());
    assert!(Settings::default().desktop);
    let s = settings(
        "[notify]\ndesktop = false\nwebhook_url = \"https://ntfy.sh\"\nwebhook_topic = \"my-topic\"\nwebhook_format = \"ntfy\"",
    )
    .unwrap();
    assert!(!s.desktop);
    let hook = s.webhook.unwrap();
    assert_eq!(hook.url.as_str(), "https://ntfy.sh/");
    assert_eq!(hook.topic.as_deref(), Some("my-topic"));
    assert_eq!(hook.format, Format::Ntfy);
    assert_eq!(hook.origin(), "https://ntfy.sh");
    let s = settings("[notify]\nwebhook_url = \"http://127.0.0.1:8080/hook\"").unwrap();
    assert_eq!(s.webhook.unwrap().format, Format::Json);
    for loopback in [
        "http://localhost/x",
        "http://[::1]:9/x",
        "http://127.0.0.2/",
    ] {
        assert!(
            settings(&format!("[notify]\nwebhook_url = \"{loopback}\"")).is_ok(),
            "{loopback}"
        );
    }
    // No config file: the defaults.
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(Settings::load(dir.path()).unwrap(), Settings::default());
    std::fs::write(
        dir.path().join("config.toml"),
        "[retention]\nmax_age_days = 3\n[notify]\ndesktop = false\n",
    )
    .unwrap();
    assert!(!Settings::load(dir.path()).unwrap().desktop);
}

#[test]
fn a_bad_notify_is_named_without_repeating_the_url() {
    let secret_url = format!("http://hooks.example.com/services/{SECRET}");
    for (toml, says) in [
        (
            format!("[notify]\nwebhook_url = \"{secret_url}\""),
            "https://",
        ),
        ("[notify]\nwebhook_url = \"ftp://x/\"".into(), "https://"),
        ("[notify]\nwebhook_url = \"not a url\"".into(), "not a URL"),
        ("[notify]\ndesktop = \"yes\"".into(), "true or false"),
        ("[notify]\nwebhook = \"x\"".into(), "has no \"webhook\""),
        (
            "[notify]\nwebhook_url = \"https://ntfy.sh\"\nwebhook_format = \"ntfy\"".into(),
            "needs a webhook_topic",
        ),
        (
            "[notify]\nwebhook_url = \"https://ntfy.sh\"\nwebhook_topic = \"a b\"".into(),
            "letters, digits",
        ),
        (
            "[notify]\nwebhook_url = \"https://x\"\nwebhook_format = \"xml\"".into(),
            "\"json\", \"ntfy\" or \"slack\"",
        ),
        (
            "[notify]\nwebhook_topic = \"t\"".into(),
            "need a webhook_url",
        ),
    ] {
        let e = settings(&toml).unwrap_err();
        assert!(e.contains(says), "{toml}: {e}");
        assert!(!e.contains(SECRET), "{e}");
    }
}

#[test]
fn a_notification_holds_the_kind_the_project_the_party_and_the_tool_and_nothing_an_agent_wrote() {
    let n = note(&item("approval", "approval:a1"), &facts());
    assert_eq!(n.title, "Troupe: approval waiting");
    assert_eq!(
        n.message,
        "an approval is waiting in party refactor of project repo (tool: Bash)"
    );
    assert!(n.urgent);
    assert_eq!(n.party_id.as_deref(), Some("party-1"));

    let q = note(
        &item("question", "question:q1"),
        &Facts {
            project: Some("repo".into()),
            ..Facts::default()
        },
    );
    assert_eq!(q.message, "a question is waiting in project repo");
    let pr = note(&item("pull_request_ready", "pr:1"), &facts());
    assert_eq!(pr.title, "Troupe: pull request ready");
    assert!(!pr.urgent);
    let other = note(&item("new_kind_of_thing", "x:1"), &Facts::default());
    assert_eq!(other.message, "new kind of thing is waiting");
    // A tool name that is not an identifier is left out.
    let odd = note(
        &item("approval", "approval:a2"),
        &Facts {
            tool: Some(format!("Bash {SECRET} && rm")),
            ..Facts::default()
        },
    );
    assert_eq!(odd.message, "an approval is waiting");

    for format in [Format::Json, Format::Ntfy, Format::Slack] {
        let hook = Webhook::new("https://ntfy.sh", Some("t"), format).unwrap();
        let body = payload(&hook, &n).to_string();
        assert!(!body.contains(SECRET), "{body}");
        assert!(!body.contains("curl"), "{body}");
    }
    assert!(!format!("{n:?}").contains(SECRET));
}

#[test]
fn the_webhook_gets_one_of_three_shapes() {
    let n = note(&item("approval", "approval:a1"), &facts());
    let json_hook = Webhook::new("https://ntfy.sh", Some("my-topic"), Format::Json).unwrap();
    assert_eq!(
        payload(&json_hook, &n),
        json!({
            "topic": "my-topic",
            "title": "Troupe: approval waiting",
            "message": "an approval is waiting in party refactor of project repo (tool: Bash)",
            "text": "Troupe: approval waiting: an approval is waiting in party refactor of project repo (tool: Bash)",
            "tags": ["troupe", "approval"],
            "priority": 4,
            "kind": "approval",
            "item_id": "approval:a1",
            "project": "repo",
            "party": "refactor",
            "party_id": "party-1",
            "tool": "Bash",
        })
    );
    // Without a topic and facts, absent fields are left out (not null).
    let bare = Webhook::new("http://127.0.0.1:1/", None, Format::Json).unwrap();
    let q = note(&item("question", "question:q"), &Facts::default());
    let body = payload(&bare, &q);
    assert!(
        body.get("topic").is_none() && body.get("project").is_none(),
        "{body}"
    );
    assert_eq!(body["priority"], 4);
    let ntfy = Webhook::new("https://ntfy.sh", Some("my-topic"), Format::Ntfy).unwrap();
    assert_eq!(
        payload(&ntfy, &n),
        json!({
            "topic": "my-topic",
            "title": "Troupe: approval waiting",
            "message": "an approval is waiting in party refactor of project repo (tool: Bash)",
            "tags": ["troupe", "approval"],
            "priority": 4,
        })
    );
    let slack = Webhook::new("https://hooks.slack.com/services/x", None, Format::Slack).unwrap();
    assert_eq!(
        payload(&slack, &n),
        json!({ "text": "Troupe: approval waiting: an approval is waiting in party refactor of project repo (tool: Bash)" })
    );
}

#[tokio::test]
async fn an_item_is_notified_once_across_restarts_and_the_first_inbox_is_taken_as_seen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(SENT_FILE);
    let old = [item("approval", "approval:old")];
    let mut sent = Sent::load(path.clone());
    // No file yet: what waits is taken as notified, and the file is made.
    assert_eq!(sent.take_new(&old).map(|n| n.len()), Some(0));
    sent.save().await;
    assert!(path.exists());
    assert_eq!(sent.take_new(&old), None, "nothing new");
    let now = [
        item("approval", "approval:old"),
        item("question", "question:new"),
        item("schedule", "schedule:nightly"),
    ];
    let new = sent.take_new(&now).unwrap();
    assert_eq!(
        new.iter().map(|i| i.item_id.as_str()).collect::<Vec<_>>(),
        ["question:new"],
        "only the new one, and never a schedule's"
    );
    sent.save().await;
    // A restart reads what was notified.
    let mut again = Sent::load(path.clone());
    assert_eq!(again.take_new(&now), None);
    let plus = [item("approval", "approval:later")];
    assert_eq!(again.take_new(&plus).unwrap().len(), 1);

    // Past KEEP ids, the oldest that no longer wait go, those still waiting stay.
    let many: Vec<InboxItem> = (0..KEEP + 10)
        .map(|i| item("approval", &format!("approval:{i}")))
        .collect();
    again.take_new(&many);
    let waiting = [item("approval", "approval:0")];
    let more: Vec<InboxItem> = (0..5)
        .map(|i| item("question", &format!("question:more{i}")))
        .chain(waiting.iter().cloned())
        .collect();
    again.take_new(&more);
    assert!(again.order.len() <= KEEP + 1, "{}", again.order.len());
    assert!(again.ids.contains("approval:0"), "still waiting: kept");
    assert_eq!(again.ids.len(), again.order.len());

    // An unreadable file is not a storm either.
    std::fs::write(&path, "not json").unwrap();
    let mut broken = Sent::load(path);
    assert_eq!(broken.take_new(&now).map(|n| n.len()), Some(0));
}
