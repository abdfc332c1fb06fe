//! Who may call an operation: the policy each operation declares beside its name in the one
//! operation list (`for_each_operation!`), and the kinds of caller a credential makes. The core
//! enforces it for every door (`troupe_core::authority`); this module only says what it is.

use serde::{Deserialize, Serialize};

/// Who may call an operation. The person may call every operation; the other callers are the
/// agents: an agent CLI the person runs themselves (through `troupe mcp` or a hook: it holds
/// the person's token, so this is a guard against a misled model, not a boundary) and a member
/// Troupe started (its run's own credential: a hard boundary).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Any authenticated caller (reads that change nothing).
    Anyone,
    /// Any authenticated caller acting as itself: the field names the caller's session. For an
    /// agent it is taken from its credential (filled in when absent, refused when different);
    /// only the person may name another session or leave it out.
    Caller(&'static str),
    /// As [`Access::Caller`], but a caller without a session of its own may leave the field out:
    /// the operation then finds the session itself (a hook, from the agent CLI's own ids).
    SelfOrFound(&'static str),
    /// The person, or the leader of the party the params name (`party_id`).
    Leader,
    /// The person, the session that started the run the params name (`run_id`), or the leader
    /// of that run's party.
    RunParent,
    /// The person, or an agent CLI the person runs (not a member Troupe started): what an agent
    /// leading its own parties needs (launching them, defining them). The field, if any, names
    /// the caller's session as for [`Access::Caller`].
    OwnAgent(Option<&'static str>),
    /// The person only: decisions, rules, grants, landing, shutdown, what runs on the machine.
    Person,
}

impl Access {
    /// Who may call, in words (a refusal says it).
    pub fn who(self) -> &'static str {
        match self {
            Access::Anyone => "anyone authenticated",
            Access::Caller(_) | Access::SelfOrFound(_) => "any session, acting as itself",
            Access::Leader => "the person or the party's leader",
            Access::RunParent => "the person, the run's parent session or its party's leader",
            Access::OwnAgent(_) => "the person or an agent CLI the person runs (not a member)",
            Access::Person => "the person only",
        }
    }

    /// A short name for tables (`troupe api list`, docs/security.md).
    pub fn label(self) -> &'static str {
        match self {
            Access::Anyone => "anyone",
            Access::Caller(_) | Access::SelfOrFound(_) => "itself",
            Access::Leader => "leader",
            Access::RunParent => "run's parent",
            Access::OwnAgent(_) => "own agent",
            Access::Person => "person",
        }
    }

    /// The param that names the caller, if any.
    pub fn caller_field(self) -> Option<&'static str> {
        match self {
            Access::Caller(f) | Access::SelfOrFound(f) | Access::OwnAgent(Some(f)) => Some(f),
            _ => None,
        }
    }
}

/// What kind of caller a credential makes (as a refusal and the timeline name it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CallerKind {
    /// The data dir's token, from the CLI, an editor's `troupe lsp`, `troupe acp` or a script.
    Person,
    /// The person's token presented for an agent CLI the person runs (`troupe mcp`, hooks).
    Agent,
    /// A run's own credential: a member Troupe started, here or on a remote worker.
    Member,
}
