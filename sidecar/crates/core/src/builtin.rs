//! Built-in definitions seeded into a new store: the seed's `feature-development` party
//! template and the demo agents it uses (`troupe demo-member`, a small real process that
//! exercises the member API, and a merger that is the merge queue). Existing definitions of the same names are never overwritten.

use serde_json::json;
use troupe_store::{DefinitionKind, Put, Store, StoreError};

/// The demo agents: name, isolation, timeout.
const DEMO_AGENTS: &[(&str, &str, &str)] = &[
    (
        "demo-coordinator",
        "none",
        "Plans the work and watches the party.",
    ),
    (
        "demo-developer",
        "worktree",
        "Implements its part in its own git worktree.",
    ),
    ("demo-qa", "clone", "Reviews the work in a local clone."),
];

/// The demo's merger: the merge queue itself (the `land` runner), landing the developers'
/// branches on the branch the demo project has out.
fn demo_merger() -> serde_json::Value {
    json!({
        "name": "demo-merger", "description": "Lands the work: the merge queue.", "runner": "land",
        "land": { "strategy": "merge" }, "timeout_secs": 300,
    })
}

/// The seed's feature-development party.
pub fn feature_development() -> serde_json::Value {
    json!({
        "name": "feature-development",
        "description": "Leader plans, developers implement, QA reviews, merger lands",
        "roles": {
            "leader": { "agent": "demo-coordinator", "workflow": "planning", "is_leader": true },
            "developer": { "agent": "demo-developer", "workflow": "implement", "count": 2,
                           "on_crash": "restart", "retry_attempts": 3 },
            "qa": { "agent": "demo-qa", "workflow": "review", "on_crash": "pause", "notify": "leader" },
            "merger": { "agent": "demo-merger", "workflow": "merge-work", "on_crash": "pause", "notify": "user" }
        },
        "flow": { "leader": [], "developer": ["leader"], "qa": ["developer"], "merger": ["qa"] },
        "recovery": { "on_crash": "pause", "notify": "leader", "max_retries": 2 }
    })
}

/// Adds the built-ins that are missing (a read when they are all there).
pub async fn seed(store: &Store) -> Result<(), StoreError> {
    for (name, isolation, description) in DEMO_AGENTS {
        if matches!(
            store.get_definition(DefinitionKind::Agent, name),
            Err(StoreError::NotFound { .. })
        ) {
            let def = normalized::<troupe_engine::AgentDefinition>(json!({
                "name": name, "description": description, "runner": "process",
                "command": ["troupe", "demo-member"], "isolation": isolation, "timeout_secs": 300,
                "instructions": format!("You are the {name}."),
            }))?;
            store
                .put_definition(
                    DefinitionKind::Agent,
                    name.to_string(),
                    def,
                    Put::SeedBuiltin,
                )
                .await?;
        }
    }
    if matches!(
        store.get_definition(DefinitionKind::Agent, "demo-merger"),
        Err(StoreError::NotFound { .. })
    ) {
        let def = normalized::<troupe_engine::AgentDefinition>(demo_merger())?;
        store
            .put_definition(
                DefinitionKind::Agent,
                "demo-merger".into(),
                def,
                Put::SeedBuiltin,
            )
            .await?;
    }
    if matches!(
        store.get_definition(DefinitionKind::Party, "feature-development"),
        Err(StoreError::NotFound { .. })
    ) {
        store
            .put_definition(
                DefinitionKind::Party,
                "feature-development".into(),
                normalized::<troupe_engine::PartyDefinition>(feature_development())?,
                Put::SeedBuiltin,
            )
            .await?;
    }
    Ok(())
}

/// The definition as the daemon stores user definitions: parsed (so it is valid) and written
/// back with every default spelled out.
fn normalized<T: serde::de::DeserializeOwned + serde::Serialize>(
    value: serde_json::Value,
) -> Result<serde_json::Value, StoreError> {
    let parsed: T = serde_json::from_value(value)?;
    Ok(serde_json::to_value(parsed)?)
}
