//! A party as stored, read once: its row (typed by the store, the run-time recovery overrides
//! included) and members, with the launch snapshot parsed into the engine's types. The one party loader every part of the daemon
//! uses (operations, the orchestrator, collaboration, landing, the inbox, the radar).

use std::collections::BTreeMap;

use troupe_api::ApiError;
use troupe_engine::{AgentDefinition, PartyDefinition, Strategy};
use troupe_model::MemberStatus;
use troupe_store::{MemberRow, PartyRow, Store};

/// The frozen launch snapshot of a party: its definition and the agent definitions it uses.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Snapshot {
    pub party: PartyDefinition,
    pub agents: BTreeMap<String, AgentDefinition>,
    /// The session that leads the party itself (`launch_party {mode: "self"}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub self_led_by: Option<String>,
}

/// A party: its row, its members and its parsed snapshot.
#[derive(Debug, Clone)]
pub struct PartyView {
    pub row: PartyRow,
    pub members: Vec<MemberRow>,
    pub snapshot: Snapshot,
}

impl PartyView {
    /// Reads a party and parses it.
    pub fn load(store: &Store, party_id: &str) -> Result<PartyView, ApiError> {
        let (row, members) = store.get_party(party_id)?;
        PartyView::from_rows(row, members)
    }

    /// Parses a party's rows (as `Store::get_party` returns them).
    pub fn from_rows(row: PartyRow, members: Vec<MemberRow>) -> Result<PartyView, ApiError> {
        let snapshot: Snapshot = serde_json::from_value(row.snapshot.clone()).map_err(|e| {
            ApiError::Internal(format!("party {} snapshot unreadable: {e}", row.party_id))
        })?;
        Ok(PartyView {
            row,
            members,
            snapshot,
        })
    }

    pub fn roles(&self) -> impl Iterator<Item = &str> {
        self.snapshot.party.roles.keys().map(String::as_str)
    }

    pub fn has_role(&self, role: &str) -> bool {
        self.snapshot.party.roles.contains_key(role)
    }

    pub fn leader(&self) -> Option<&str> {
        self.snapshot.party.leader()
    }

    /// Whether `session` leads the party: a member of its leading role, or the session that
    /// launched it to lead it itself.
    pub fn is_led_by(&self, session: &str) -> bool {
        if self.snapshot.self_led_by.as_deref() == Some(session) {
            return true;
        }
        let Some(leader) = self.leader() else {
            return false;
        };
        self.members
            .iter()
            .any(|m| m.role_name == leader && m.session_id.as_deref() == Some(session))
    }

    /// A role's recovery strategy in force: its run-time override, else its own, else the
    /// party's.
    pub fn on_crash(&self, role: &str) -> Strategy {
        self.row
            .overrides
            .get(role)
            .cloned()
            .or_else(|| {
                self.snapshot
                    .party
                    .roles
                    .get(role)
                    .and_then(|r| r.on_crash.clone())
            })
            .unwrap_or_else(|| self.snapshot.party.recovery.on_crash.clone())
    }

    /// Refuses a change to a party that has ended.
    pub fn check_live(&self) -> Result<(), ApiError> {
        if self.row.status.is_over() {
            return Err(ApiError::Conflict(format!(
                "party {} is {}",
                self.row.party_id, self.row.status
            )));
        }
        Ok(())
    }

    /// The sessions of a role's running members.
    pub fn live_sessions(&self, role: &str) -> Vec<String> {
        self.members
            .iter()
            .filter(|m| m.role_name == role && m.status == MemberStatus::Running)
            .filter_map(|m| m.session_id.clone())
            .collect()
    }

    /// The runs of a role's members (any state).
    pub fn role_runs(&self, role: &str) -> Vec<String> {
        self.members
            .iter()
            .filter(|m| m.role_name == role)
            .filter_map(|m| m.agent_run_id.clone())
            .collect()
    }
}
