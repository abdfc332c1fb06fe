//! Notifications away from the desk: each new item of the person's inbox (followed through the
//! core's `subscribe_inbox` feed, not by polling the store) becomes a desktop notification
//! (`org.freedesktop.Notifications.Notify` on the session D-Bus, when `DBUS_SESSION_BUS_ADDRESS`
//! is set) and, when `[notify]` of the person's `<data dir>/config.toml` names one, a JSON POST to
//! a webhook (ntfy, a chat's incoming webhook, or a receiver of the person's). Every kind is
//! notified but `schedule`.
//!
//! Nothing secret goes out: a notification is made of the item's kind and id, its project's
//! directory name, its party's name and id and, for an approval, the tool's name — never the
//! item's title or detail (commands, questions, diffs, reasons), which an agent wrote.
//!
//! Each item is notified once: the ids notified are kept in `<data dir>/notified.json` (written
//! before the notifications go), so a restarted daemon sends nothing again. A data dir without
//! that file (the first start with notifications on) takes what already waits as notified: no
//! storm of old items. Failures are logged and block nothing: the desktop is tried once per item
//! (again on a fresh connection when the one kept broke), the webhook up to `ATTEMPTS` times with
//! backoff; each way has its own bounded queue, and an item that finds it full is dropped (said).

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use troupe_api::types::{InboxItem, InboxResult};
use troupe_core::Daemon;

/// Kinds never notified: a schedule's items (it goes on by itself).
const QUIET_KINDS: &[&str] = &["schedule"];
/// The ids notified, in the data dir.
pub const SENT_FILE: &str = "notified.json";
/// Ids kept past those still waiting (the oldest that left the inbox go first).
const KEEP: usize = 1024;
/// Notifications queued per way (desktop, webhook) before one is dropped.
const QUEUE: usize = 256;
/// How long the session bus gets to connect, and the notification server to answer.
const DESKTOP_TIMEOUT: Duration = Duration::from_secs(5);
/// Tries per notification to the webhook (the first included).
const ATTEMPTS: u32 = 4;
/// The wait before the second try; doubled before each next one (1 s, 2 s, 4 s).
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// A whole webhook request, its answer included.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// When the inbox feed ended (a read failed), how long before it is opened again.
const REOPEN_AFTER: Duration = Duration::from_secs(5);

/// `[notify]` of `<data dir>/config.toml`.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// Desktop notifications (on by default; they need a session bus).
    pub desktop: bool,
    pub webhook: Option<Webhook>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            desktop: true,
            webhook: None,
        }
    }
}

/// Where and how notifications are POSTed.
#[derive(Debug, Clone, PartialEq)]
pub struct Webhook {
    /// `https://…`, or `http://` to a loopback address.
    pub url: reqwest::Url,
    /// ntfy's topic (`topic` in the JSON; the URL is then the server's root).
    pub topic: Option<String>,
    pub format: Format,
}

/// The shape of the webhook's JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Every field (ntfy's, `text`, and the item's kind, ids, project, party and tool).
    Json,
    /// ntfy's JSON publishing only: `topic`, `title`, `message`, `tags`, `priority`.
    Ntfy,
    /// `text` only: Slack, Mattermost and other Slack-compatible incoming webhooks.
    Slack,
}

impl Settings {
    /// The settings of `data_dir` (the defaults when there is no `[notify]`); a bad value is
    /// named (a webhook URL never is: it may hold a secret).
    pub fn load(data_dir: &Path) -> Result<Settings, String> {
        let path = data_dir.join("config.toml");
        match troupe_core::project_config::person_section(data_dir, "notify")? {
            None => Ok(Settings::default()),
            Some(toml::Value::Table(section)) => Settings::from_table(&section)
                .map_err(|e| format!("{}: [notify] {e}", path.display())),
            Some(_) => Err(format!("{}: [notify] must be a table", path.display())),
        }
    }

    /// The settings of a `[notify]` table.
    pub fn from_table(section: &toml::Table) -> Result<Settings, String> {
        let mut settings = Settings::default();
        let (mut url, mut topic, mut format) = (None, None, None);
        for (key, value) in section {
            let text = || {
                value
                    .as_str()
                    .map(str::trim)
                    .ok_or_else(|| format!("{key} must be a string"))
            };
            match key.as_str() {
                "desktop" => {
                    settings.desktop = value
                        .as_bool()
                        .ok_or("desktop must be true or false".to_string())?;
                }
                "webhook_url" => url = Some(text()?).filter(|u| !u.is_empty()),
                "webhook_topic" => topic = Some(text()?).filter(|t| !t.is_empty()),
                "webhook_format" => {
                    format = Some(match text()? {
                        "json" => Format::Json,
                        "ntfy" => Format::Ntfy,
                        "slack" => Format::Slack,
                        other => {
                            return Err(format!(
                                "webhook_format must be \"json\", \"ntfy\" or \"slack\", not {other:?}"
                            ));
                        }
                    });
                }
                other => {
                    return Err(format!(
                        "has no {other:?} (desktop, webhook_url, webhook_topic, webhook_format)"
                    ));
                }
            }
        }
        let Some(url) = url else {
            if topic.is_some() || format.is_some() {
                return Err("webhook_topic and webhook_format need a webhook_url".into());
            }
            return Ok(settings);
        };
        settings.webhook = Some(Webhook::new(url, topic, format.unwrap_or(Format::Json))?);
        Ok(settings)
    }
}

impl Webhook {
    /// Checks the URL (`https://`, or `http://` to a loopback address), the topic (ntfy's:
    /// letters, digits, `-` and `_`, at most 64) and that the ntfy format has one.
    pub fn new(url: &str, topic: Option<&str>, format: Format) -> Result<Webhook, String> {
        // The URL is not repeated in errors: it may be a secret (a Slack webhook's, a topic).
        let url = reqwest::Url::parse(url).map_err(|e| format!("webhook_url is not a URL: {e}"))?;
        let host = url.host_str().unwrap_or("");
        let loopback = host.eq_ignore_ascii_case("localhost")
            || host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback());
        match url.scheme() {
            "https" if !host.is_empty() => {}
            "http" if loopback => {}
            _ => {
                return Err(
                    "webhook_url must be https://… (or http:// to a loopback address)".into(),
                );
            }
        }
        if let Some(t) = topic
            && !(t.len() <= 64
                && t.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'))
        {
            return Err("webhook_topic must be letters, digits, - and _ (at most 64)".into());
        }
        if format == Format::Ntfy && topic.is_none() {
            return Err("webhook_format = \"ntfy\" needs a webhook_topic".into());
        }
        Ok(Webhook {
            url,
            topic: topic.map(String::from),
            format,
        })
    }

    /// Where it goes, for the log: scheme, host and port (the path may hold a secret).
    pub fn origin(&self) -> String {
        self.url.origin().ascii_serialization()
    }
}

/// What the records say of an item beyond its kind and ids (read by `facts`): never its title
/// or detail.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Facts {
    /// The project's directory name.
    pub project: Option<String>,
    /// The party's name.
    pub party: Option<String>,
    /// An approval's tool.
    pub tool: Option<String>,
}

/// One notification, whichever way it goes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Note {
    pub item_id: String,
    pub kind: String,
    pub project: Option<String>,
    pub party_id: Option<String>,
    pub party: Option<String>,
    pub tool: Option<String>,
    /// `Troupe: approval waiting`.
    pub title: String,
    /// `an approval is waiting in party X of project Y (tool: Bash)`.
    pub message: String,
    /// Someone is stopped until the person answers (an approval, a question).
    pub urgent: bool,
}

/// Control characters out, at most `max` characters.
fn plain(s: &str, max: usize) -> String {
    s.chars()
        .filter(|c| !c.is_control())
        .take(max)
        .collect::<String>()
        .trim()
        .to_string()
}

/// The notification of `item`, from its kind, ids and `facts` alone.
pub fn note(item: &InboxItem, facts: &Facts) -> Note {
    let kind = plain(&item.kind, 40);
    let (what, headline) = match kind.as_str() {
        "approval" => ("an approval is waiting".into(), "approval waiting".into()),
        "question" => ("a question is waiting".into(), "question waiting".into()),
        "pull_request_ready" => (
            "a pull request is ready".into(),
            "pull request ready".into(),
        ),
        "paused_role" => ("a paused role is waiting".into(), "role paused".into()),
        "escalation" => (
            "an escalated task is waiting".into(),
            "task escalated".into(),
        ),
        "decision" => ("a decision is waiting".into(), "decision waiting".into()),
        "pick" => (
            "a pick among attempts is waiting".into(),
            "pick waiting".into(),
        ),
        "merge_conflict" => (
            "a merge conflict is waiting".into(),
            "merge conflict".into(),
        ),
        other => {
            let words = other.replace('_', " ");
            (format!("{words} is waiting"), format!("{words} waiting"))
        }
    };
    let project = facts.project.as_deref().map(|p| plain(p, 64));
    let party = facts.party.as_deref().map(|p| plain(p, 64));
    // A tool's name as an identifier (a member names it): anything else is left out.
    let tool = facts.tool.as_deref().filter(|t| {
        !t.is_empty()
            && t.len() <= 64
            && t.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_-.:/".contains(&b))
    });
    let mut message: String = what;
    match (&party, &project) {
        (Some(party), Some(project)) => {
            message += &format!(" in party {party} of project {project}");
        }
        (Some(party), None) => message += &format!(" in party {party}"),
        (None, Some(project)) => message += &format!(" in project {project}"),
        (None, None) => {}
    }
    if let Some(tool) = tool {
        message += &format!(" (tool: {tool})");
    }
    Note {
        item_id: plain(&item.item_id, 200),
        urgent: matches!(kind.as_str(), "approval" | "question"),
        title: format!("Troupe: {headline}"),
        kind,
        project,
        party_id: item.party_id.as_deref().map(|p| plain(p, 100)),
        party,
        tool: tool.map(String::from),
        message,
    }
}

/// The JSON POSTed to the webhook for `note` (see docs/daemon.md).
pub fn payload(hook: &Webhook, note: &Note) -> Value {
    let text = format!("{}: {}", note.title, note.message);
    let priority = if note.urgent { 4 } else { 3 };
    let tags = json!(["troupe", note.kind]);
    let mut body = match hook.format {
        Format::Slack => return json!({ "text": text }),
        Format::Ntfy => json!({
            "topic": hook.topic,
            "title": note.title,
            "message": note.message,
            "tags": tags,
            "priority": priority,
        }),
        Format::Json => json!({
            "topic": hook.topic,
            "title": note.title,
            "message": note.message,
            "text": text,
            "tags": tags,
            "priority": priority,
            "kind": note.kind,
            "item_id": note.item_id,
            "project": note.project,
            "party": note.party,
            "party_id": note.party_id,
            "tool": note.tool,
        }),
    };
    // Absent is absent (ntfy refuses a `topic` of null).
    if let Value::Object(fields) = &mut body {
        fields.retain(|_, v| !v.is_null());
    }
    body
}

/// Notifications running: they stop when this is dropped.
#[derive(Debug)]
pub struct Away {
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Away {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// One way out, and its queue.
struct Way {
    name: &'static str,
    tx: mpsc::Sender<Note>,
}

/// Starts following the inbox, if a way out is configured (a bad `[notify]` is logged, and
/// nothing leaves until it is fixed and the daemon restarted).
pub fn start(daemon: &Arc<Daemon>) -> Option<Away> {
    let settings = match Settings::load(&daemon.layout.data_dir) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "no notifications leave until [notify] is fixed");
            return None;
        }
    };
    let bus = std::env::var_os("DBUS_SESSION_BUS_ADDRESS").is_some_and(|a| !a.is_empty());
    if settings.desktop && !bus {
        tracing::debug!("no DBUS_SESSION_BUS_ADDRESS: no desktop notifications");
    }
    let mut tasks = Vec::new();
    let mut ways = Vec::new();
    if settings.desktop && bus {
        let (tx, rx) = mpsc::channel(QUEUE);
        tasks.push(tokio::spawn(desktop(rx)));
        ways.push(Way {
            name: "desktop",
            tx,
        });
    }
    let mut webhook = None;
    if let Some(hook) = settings.webhook {
        match http_client() {
            Ok(client) => {
                webhook = Some(hook.origin());
                let (tx, rx) = mpsc::channel(QUEUE);
                tasks.push(tokio::spawn(post(client, hook, rx)));
                ways.push(Way {
                    name: "webhook",
                    tx,
                });
            }
            Err(e) => tracing::error!(error = %e, "no HTTP client: no webhook notifications"),
        }
    }
    if ways.is_empty() {
        for task in &tasks {
            task.abort();
        }
        return None;
    }
    tracing::info!(
        desktop = settings.desktop && bus,
        webhook = webhook.as_deref().unwrap_or("none"),
        "notifications away from the desk"
    );
    tasks.push(tokio::spawn(follow(daemon.clone(), ways)));
    Some(Away { tasks })
}

/// Follows the inbox and queues a notification for each new item.
async fn follow(daemon: Arc<Daemon>, ways: Vec<Way>) {
    let mut sent = Sent::load(daemon.layout.data_dir.join(SENT_FILE));
    loop {
        match troupe_core::feeds::open(&daemon, "subscribe_inbox", None) {
            Ok(mut feed) => {
                while let Some(pushed) = feed.next().await {
                    for inbox in pushed {
                        match serde_json::from_value::<InboxResult>(inbox) {
                            Ok(inbox) => take(&daemon, &mut sent, &ways, &inbox.items).await,
                            Err(e) => tracing::warn!(error = %e, "an inbox not understood"),
                        }
                    }
                }
                tracing::warn!("the inbox feed ended: opened again in a moment");
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot follow the inbox: tried again in a moment")
            }
        }
        tokio::time::sleep(REOPEN_AFTER).await;
    }
}

/// Queues the notifications of the items not notified yet, once they are recorded as notified.
async fn take(daemon: &Daemon, sent: &mut Sent, ways: &[Way], items: &[InboxItem]) {
    let Some(new) = sent.take_new(items) else {
        return;
    };
    sent.save().await;
    for item in new {
        let note = note(item, &facts(daemon, item));
        for way in ways {
            if way.tx.try_send(note.clone()).is_err() {
                tracing::warn!(
                    way = way.name,
                    item = %note.item_id,
                    "too many notifications waiting to go: this one is dropped"
                );
            }
        }
    }
}

/// What the records say of `item`: its project's directory, its party's name, an approval's
/// tool (what cannot be read is left out).
fn facts(daemon: &Daemon, item: &InboxItem) -> Facts {
    let store = &daemon.store;
    let project = item
        .project_id
        .as_deref()
        .and_then(|id| store.get_project(id).ok())
        .and_then(|p| {
            Path::new(&p.root_path)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
        });
    let party = item
        .party_id
        .as_deref()
        .and_then(|id| store.get_party(id).ok())
        .map(|(row, _)| row.name);
    let tool = item
        .item_id
        .strip_prefix("approval:")
        .filter(|_| item.kind == "approval")
        .and_then(|id| store.get_approval(id).ok())
        .map(|a| a.tool_name);
    Facts {
        project,
        party,
        tool,
    }
}

/// The ids notified (kept in `SENT_FILE`).
struct Sent {
    path: PathBuf,
    /// Oldest first.
    order: VecDeque<String>,
    ids: HashSet<String>,
    /// No file was there: the first inbox is taken as notified.
    first: bool,
}

#[derive(Serialize, Deserialize)]
struct SentFile {
    notified: Vec<String>,
}

impl Sent {
    fn load(path: PathBuf) -> Sent {
        let read = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice::<SentFile>(&bytes).map_err(|e| e.to_string()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(String::new()),
            Err(e) => Err(e.to_string()),
        };
        let (order, first) = match read {
            Ok(file) => (file.notified.into(), false),
            Err(e) => {
                if !e.is_empty() {
                    tracing::warn!(
                        error = %e,
                        file = %path.display(),
                        "the ids notified are unreadable: what waits now is taken as notified"
                    );
                }
                (VecDeque::new(), true)
            }
        };
        Sent {
            path,
            ids: order.iter().cloned().collect(),
            order,
            first,
        }
    }

    /// The items not notified yet, now recorded as notified (none the first time: what waits
    /// already is taken as notified); `None` when nothing changed.
    fn take_new<'a>(&mut self, items: &'a [InboxItem]) -> Option<Vec<&'a InboxItem>> {
        let new: Vec<&InboxItem> = items
            .iter()
            .filter(|i| !QUIET_KINDS.contains(&i.kind.as_str()) && !self.ids.contains(&i.item_id))
            .collect();
        if new.is_empty() && !self.first {
            return None;
        }
        for item in &new {
            self.ids.insert(item.item_id.clone());
            self.order.push_back(item.item_id.clone());
        }
        if self.order.len() > KEEP {
            // The oldest that no longer wait go; those still waiting stay whatever their age.
            let waiting: HashSet<&str> = items.iter().map(|i| i.item_id.as_str()).collect();
            let mut excess = self.order.len() - KEEP;
            let ids = &mut self.ids;
            self.order.retain(|id| {
                if excess > 0 && !waiting.contains(id.as_str()) {
                    excess -= 1;
                    ids.remove(id);
                    false
                } else {
                    true
                }
            });
        }
        if std::mem::take(&mut self.first) {
            return Some(Vec::new());
        }
        Some(new)
    }

    /// Writes the file (0600, replaced whole); a failure is logged (a restart may then notify
    /// again what waits).
    async fn save(&self) {
        let file = SentFile {
            notified: self.order.iter().cloned().collect(),
        };
        let path = self.path.clone();
        let written = match serde_json::to_vec(&file) {
            Ok(bytes) => tokio::task::spawn_blocking(move || {
                troupe_api::layout::write_private_file(&path, &bytes).map_err(|e| format!("{e:#}"))
            })
            .await
            .unwrap_or_else(|e| Err(e.to_string())),
            Err(e) => Err(e.to_string()),
        };
        if let Err(e) = written {
            tracing::warn!(error = %e, "cannot record the ids notified");
        }
    }
}

/// Sends each note to the desktop's notification server.
async fn desktop(mut rx: mpsc::Receiver<Note>) {
    let mut bus: Option<zbus::Connection> = None;
    // Said once at warn until one goes through again (a desktop without a server says it at
    // every item otherwise).
    let mut failing = false;
    while let Some(note) = rx.recv().await {
        let kept = bus.is_some();
        let mut shown = notify(&mut bus, &note).await;
        if shown.is_err() && kept {
            // The connection kept may have broken (the bus restarted): once more on a new one.
            shown = notify(&mut bus, &note).await;
        }
        match shown {
            Ok(id) => {
                failing = false;
                tracing::debug!(item = %note.item_id, id, "desktop notification shown");
            }
            Err(e) if !failing => {
                failing = true;
                tracing::warn!(item = %note.item_id, error = %e, "no desktop notification");
            }
            Err(e) => tracing::debug!(item = %note.item_id, error = %e, "no desktop notification"),
        }
    }
}

/// `Notify` on the session bus (connected first if need be); the notification's id. A failure
/// drops the connection.
async fn notify(bus: &mut Option<zbus::Connection>, note: &Note) -> Result<u32, String> {
    let result = async {
        let conn = match bus.as_ref() {
            Some(conn) => conn.clone(),
            None => {
                let conn = tokio::time::timeout(DESKTOP_TIMEOUT, zbus::Connection::session())
                    .await
                    .map_err(|_| "the session bus did not answer in time".to_string())?
                    .map_err(|e| format!("cannot reach the session bus: {e}"))?;
                *bus = Some(conn.clone());
                conn
            }
        };
        let hints = HashMap::from([(
            "urgency",
            zbus::zvariant::Value::U8(if note.urgent { 2 } else { 1 }),
        )]);
        let args = (
            "Troupe",
            0u32,
            "",
            note.title.as_str(),
            note.message.as_str(),
            Vec::<&str>::new(),
            hints,
            -1i32,
        );
        let reply = tokio::time::timeout(
            DESKTOP_TIMEOUT,
            conn.call_method(
                Some("org.freedesktop.Notifications"),
                "/org/freedesktop/Notifications",
                Some("org.freedesktop.Notifications"),
                "Notify",
                &args,
            ),
        )
        .await
        .map_err(|_| "the notification server did not answer in time".to_string())?
        .map_err(|e| format!("the notification server: {e}"))?;
        reply
            .body()
            .deserialize::<u32>()
            .map_err(|e| format!("the notification server's answer: {e}"))
    }
    .await;
    if result.is_err() {
        *bus = None;
    }
    result
}

/// The webhook's client: HTTP/1, rustls on ring with the system's roots, no redirects.
fn http_client() -> Result<reqwest::Client, String> {
    use rustls_platform_verifier::BuilderVerifierExt;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_platform_verifier()
        .map_err(|e| e.to_string())?
        .with_no_client_auth();
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(REQUEST_TIMEOUT)
        .user_agent(concat!("troupe/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| e.to_string())
}

/// POSTs each note to the webhook, in order.
async fn post(client: reqwest::Client, hook: Webhook, mut rx: mpsc::Receiver<Note>) {
    while let Some(note) = rx.recv().await {
        match serde_json::to_vec(&payload(&hook, &note)) {
            Ok(body) => deliver(&client, &hook, &note, body).await,
            Err(e) => tracing::warn!(item = %note.item_id, error = %e, "a notification not made"),
        }
    }
}

/// One note to the webhook: tried again after a failure to connect, a timeout, a 5xx, 408 or
/// 429 (up to `ATTEMPTS` in all, with backoff); another answer outside 2xx is final.
async fn deliver(client: &reqwest::Client, hook: &Webhook, note: &Note, body: Vec<u8>) {
    let mut wait = FIRST_BACKOFF;
    for attempt in 1..=ATTEMPTS {
        let sent = client
            .post(hook.url.clone())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.clone())
            .send()
            .await;
        let (error, again) = match sent {
            Ok(answer) if answer.status().is_success() => {
                tracing::debug!(item = %note.item_id, attempt, "webhook notified");
                return;
            }
            Ok(answer) => {
                let status = answer.status();
                let again = status.is_server_error()
                    || status == reqwest::StatusCode::REQUEST_TIMEOUT
                    || status == reqwest::StatusCode::TOO_MANY_REQUESTS;
                (format!("answered {status}"), again)
            }
            // Without the URL: it may hold a secret.
            Err(e) => (causes(&e.without_url()), true),
        };
        if !again || attempt == ATTEMPTS {
            tracing::warn!(
                item = %note.item_id,
                webhook = %hook.origin(),
                attempts = attempt,
                error = %error,
                "the webhook did not take a notification: given up"
            );
            return;
        }
        tracing::info!(
            item = %note.item_id,
            webhook = %hook.origin(),
            attempt,
            error = %error,
            retry_in_ms = wait.as_millis() as u64,
            "the webhook did not take a notification: trying again"
        );
        tokio::time::sleep(wait).await;
        wait *= 2;
    }
}

/// An error with its causes, `: `-joined.
fn causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text += &format!(": {cause}");
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests;
