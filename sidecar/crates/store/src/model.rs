//! Row records: what the store reads back, and what callers hand it to write. They are plain
//! data (serde + JSON Schema) and double as the wire shape of a row; params and results of
//! operations are defined by the daemon, not here.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

macro_rules! text_enum {
    ($(#[$meta:meta])* $name:ident { $($variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
        #[serde(rename_all = "snake_case")]
        pub enum $name { $($variant),+ }

        impl $name {
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
        }

        impl std::str::FromStr for $name {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                match s {
                    $($text => Ok($name::$variant),)+
                    other => Err(format!(
                        "unknown {} {other:?} (expected one of: {})",
                        stringify!($name),
                        [$($text),+].join(", ")
                    )),
                }
            }
        }

        impl rusqlite::types::FromSql for $name {
            fn column_result(value: rusqlite::types::ValueRef<'_>) -> rusqlite::types::FromSqlResult<Self> {
                value.as_str()?.parse().map_err(|e: String| rusqlite::types::FromSqlError::Other(e.into()))
            }
        }

        impl rusqlite::ToSql for $name {
            fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
                Ok(self.as_str().into())
            }
        }
    };
}

text_enum! {
    /// Whether a session is still around.
    SessionStatus { Active = "active", Ended = "ended" }
}

text_enum! {
    /// How urgently a recipient should look at a message.
    Priority { Low = "low", Normal = "normal", High = "high", Urgent = "urgent" }
}

text_enum! {
    /// How a message was addressed.
    MessageType {
        Direct = "direct",
        ToParent = "to_parent",
        ToChild = "to_child",
        Broadcast = "broadcast",
        Party = "party",
        System = "system",
    }
}

/// A project: a git repository (worktrees of it included), or a plain directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Project {
    pub project_id: String,
    pub root_path: String,
    pub name: String,
    pub created_at: String,
}

/// A session: one agent CLI or human taking part.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Session {
    pub session_id: String,
    pub project_id: String,
    /// The kind of client: claude, codex, gemini, human, …
    pub cli: String,
    pub cwd: String,
    pub external_id: Option<String>,
    pub parent_session_id: Option<String>,
    /// 0 for a session a person started, parent's depth + 1 for a spawned one.
    pub agent_depth: i64,
    pub spawned_by_agent_id: Option<String>,
    pub party_id: Option<String>,
    pub status: SessionStatus,
    pub created_at: String,
    pub last_seen_at: String,
    pub ended_at: Option<String>,
}

/// A stored peer-to-peer message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Message {
    /// Delivery order: strictly increasing, in send (commit) order.
    pub seq: i64,
    pub message_id: String,
    pub project_id: String,
    pub from_session_id: String,
    pub to_session_id: String,
    pub content: String,
    pub priority: Priority,
    pub message_type: MessageType,
    pub party_id: Option<String>,
    pub idempotency_key: Option<String>,
    pub created_at: String,
    pub read_at: Option<String>,
}

/// One entry of the durable timeline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Event {
    pub seq: i64,
    pub at: String,
    pub kind: String,
    pub project_id: Option<String>,
    pub session_id: Option<String>,
    pub party_id: Option<String>,
    pub data: serde_json::Value,
}

/// What to record on the timeline.
#[derive(Debug, Clone, Default)]
pub struct NewEvent {
    pub kind: String,
    pub project_id: Option<String>,
    pub session_id: Option<String>,
    pub party_id: Option<String>,
    pub data: serde_json::Value,
}

/// A session to register. `project_root` is already resolved (git root or directory).
#[derive(Debug, Clone, Default)]
pub struct NewSession {
    pub cli: String,
    pub cwd: String,
    pub project_root: String,
    pub project_name: String,
    pub external_id: Option<String>,
    pub parent_session_id: Option<String>,
    pub spawned_by_agent_id: Option<String>,
    pub party_id: Option<String>,
}

/// The result of registering a session.
#[derive(Debug, Clone)]
pub struct RegisterOutcome {
    pub session: Session,
    pub project: Project,
    /// False when an existing session with the same external id was resumed.
    pub created: bool,
}

/// Which sessions to list. Empty fields do not filter.
#[derive(Debug, Clone, Default)]
pub struct SessionFilter {
    pub project_id: Option<String>,
    pub status: Option<SessionStatus>,
    pub party_id: Option<String>,
    pub parent_session_id: Option<String>,
}

/// A message to send; the recipients are resolved inside the write transaction.
#[derive(Debug, Clone)]
pub struct NewMessage {
    pub from_session_id: String,
    pub recipients: crate::Recipients,
    pub content: String,
    pub priority: Priority,
    /// Defaults to the type implied by the recipients.
    pub message_type: Option<MessageType>,
    pub idempotency_key: Option<String>,
}
