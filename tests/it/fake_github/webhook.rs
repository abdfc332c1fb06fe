//! Webhook deliveries as GitHub sends them: a payload from GitHub's own examples
//! (`@octokit/webhooks-examples`), patched by the test, signed with the hook's secret
//! (`X-Hub-Signature-256`), and posted over plain HTTP/1.1.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use hmac::{KeyInit, Mac};
use serde_json::Value;

use super::Delivery;
use super::spec::fixtures_dir;

/// The hook id every delivery names.
pub const HOOK_ID: &str = "519583241";

static EXAMPLES: OnceLock<Value> = OnceLock::new();

fn examples() -> &'static Value {
    EXAMPLES.get_or_init(|| {
        let path = fixtures_dir().join("@octokit/webhooks-examples/api.github.com/index.json");
        let bytes = std::fs::read(&path).unwrap_or_else(|error| {
            panic!(
                "fake GitHub: cannot read GitHub's webhook examples {} ({error}); `scripts/test` \
                 installs tests/forge-fixtures (or run `cd tests/forge-fixtures && npm ci`)",
                path.display()
            )
        });
        serde_json::from_slice(&bytes).unwrap()
    })
}

/// The first example payload of `event` (with `action`, if given).
pub fn example(event: &str, action: Option<&str>) -> Value {
    let entry = examples()
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == event)
        .unwrap_or_else(|| panic!("fake GitHub: no webhook event {event:?} in the examples"));
    entry["examples"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| action.is_none_or(|a| e["action"] == a))
        .cloned()
        .unwrap_or_else(|| {
            panic!(
                "fake GitHub: no {event} example with action {action:?}; its actions: {}",
                entry["actions"]
            )
        })
}

/// `sha256=<hex HMAC-SHA256 of body with secret>`.
pub fn signature(secret: &str, body: &[u8]) -> String {
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(body);
    let hex: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("sha256={hex}")
}

/// A fresh delivery id, shaped like GitHub's (a UUID).
fn delivery_id() -> String {
    use sha2::Digest;
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let seed = format!(
        "{:?} {} {}",
        std::time::SystemTime::now(),
        std::process::id(),
        COUNT.fetch_add(1, Ordering::SeqCst)
    );
    let hex: String = sha2::Sha256::digest(seed.as_bytes())
        .iter()
        .take(16)
        .map(|b| format!("{b:02x}"))
        .collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

pub fn delivery(
    event: &str,
    action: Option<&str>,
    secret: &str,
    patch: impl FnOnce(&mut Value),
) -> Delivery {
    let mut payload = example(event, action);
    patch(&mut payload);
    let body = serde_json::to_vec(&payload).unwrap();
    let delivery_id = delivery_id();
    let mut headers = vec![
        (
            "User-Agent".to_owned(),
            "GitHub-Hookshot/6b02022".to_owned(),
        ),
        ("Content-Type".to_owned(), "application/json".to_owned()),
        ("X-GitHub-Event".to_owned(), event.to_owned()),
        ("X-GitHub-Delivery".to_owned(), delivery_id.clone()),
        ("X-GitHub-Hook-ID".to_owned(), HOOK_ID.to_owned()),
        (
            "X-GitHub-Hook-Installation-Target-Type".to_owned(),
            "repository".to_owned(),
        ),
    ];
    if let Some(id) = payload["repository"]["id"].as_u64() {
        headers.push((
            "X-GitHub-Hook-Installation-Target-ID".to_owned(),
            id.to_string(),
        ));
    }
    headers.push(("X-Hub-Signature-256".to_owned(), signature(secret, &body)));
    Delivery {
        delivery_id,
        event: event.to_owned(),
        headers,
        body,
    }
}
