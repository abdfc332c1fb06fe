//! Agent and party definitions: JSON documents the daemon validated, versioned, built in or the
//! person's.

use rusqlite::{Connection, OptionalExtension, Row, params};
use serde_json::Value;

use crate::events::append_event;
use crate::{DefinitionRow, NewEvent, Store, StoreError};

use crate::columns::{NOW, json_col};

/// Which definitions table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DefinitionKind {
    Agent,
    Party,
}

impl DefinitionKind {
    fn table(self) -> &'static str {
        match self {
            DefinitionKind::Agent => "agent_definitions",
            DefinitionKind::Party => "party_definitions",
        }
    }
    fn what(self) -> &'static str {
        match self {
            DefinitionKind::Agent => "agent definition",
            DefinitionKind::Party => "party definition",
        }
    }
}

/// How to write a definition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Put {
    /// Refuse if the name exists.
    Create,
    /// Refuse if the name does not exist.
    Update,
    /// Insert a built-in only if absent (never overwrites the user's).
    SeedBuiltin,
}

pub(crate) fn definition_from_row(row: &Row<'_>) -> rusqlite::Result<DefinitionRow> {
    Ok(DefinitionRow {
        name: row.get(0)?,
        definition: json_col(row, 1)?,
        version: row.get(2)?,
        builtin: row.get(3)?,
        created_at: row.get(4)?,
        updated_at: row.get(5)?,
    })
}

pub(crate) fn definition_select(kind: DefinitionKind, tail: &str) -> String {
    let builtin = if kind == DefinitionKind::Party {
        "builtin"
    } else {
        "0"
    };
    let version = if kind == DefinitionKind::Party {
        "version"
    } else {
        "1"
    };
    format!(
        "SELECT name, definition, {version}, {builtin}, created_at, updated_at FROM {} {tail}",
        kind.table()
    )
}

pub(crate) fn get_definition_in(
    conn: &Connection,
    kind: DefinitionKind,
    name: &str,
) -> Result<DefinitionRow, StoreError> {
    conn.prepare_cached(&definition_select(kind, "WHERE name = ?1"))?
        .query_row([name], definition_from_row)
        .optional()?
        .ok_or_else(|| StoreError::not_found(kind.what(), name))
}

impl Store {
    /// Creates or updates a definition.
    pub async fn put_definition(
        &self,
        kind: DefinitionKind,
        name: String,
        definition: Value,
        put: Put,
    ) -> Result<DefinitionRow, StoreError> {
        self.write(move |conn| {
            let table = kind.table();
            let json = serde_json::to_string(&definition)?;
            let exists: bool = conn
                .prepare_cached(&format!("SELECT count(*) FROM {table} WHERE name = ?1"))?
                .query_row([&name], |r| r.get::<_, i64>(0))?
                > 0;
            match (put, exists) {
                (Put::Create, true) => {
                    return Err(StoreError::Conflict(format!(
                        "{} {name} already exists (use update)",
                        kind.what()
                    )));
                }
                (Put::Update, false) => return Err(StoreError::not_found(kind.what(), &name)),
                (Put::SeedBuiltin, true) => {}
                (Put::Create | Put::SeedBuiltin, false) => {
                    let builtin = kind == DefinitionKind::Party && put == Put::SeedBuiltin;
                    let sql = if kind == DefinitionKind::Party {
                        format!("INSERT INTO {table} (name, definition, builtin) VALUES (?1, ?2, ?3)")
                    } else {
                        format!("INSERT INTO {table} (name, definition) VALUES (?1, ?2)")
                    };
                    if kind == DefinitionKind::Party {
                        conn.execute(&sql, params![name, json, builtin])?;
                    } else {
                        conn.execute(&sql, params![name, json])?;
                    }
                    append_event(
                        conn,
                        &NewEvent {
                            kind: format!("{}_created", table.trim_end_matches('s')),
                            data: serde_json::json!({ "name": name }),
                            ..NewEvent::default()
                        },
                    )?;
                }
                (Put::Update, true) => {
                    let bump = if kind == DefinitionKind::Party {
                        ", version = version + 1"
                    } else {
                        ""
                    };
                    conn.execute(
                        &format!(
                            "UPDATE {table} SET definition = ?2, updated_at = {NOW}{bump} WHERE name = ?1"
                        ),
                        params![name, json],
                    )?;
                    append_event(
                        conn,
                        &NewEvent {
                            kind: format!("{}_updated", table.trim_end_matches('s')),
                            data: serde_json::json!({ "name": name }),
                            ..NewEvent::default()
                        },
                    )?;
                }
            }
            get_definition_in(conn, kind, &name)
        })
        .await
    }

    pub fn get_definition(
        &self,
        kind: DefinitionKind,
        name: &str,
    ) -> Result<DefinitionRow, StoreError> {
        self.read(|conn| get_definition_in(conn, kind, name))
    }

    pub fn list_definitions(&self, kind: DefinitionKind) -> Result<Vec<DefinitionRow>, StoreError> {
        self.read(|conn| {
            let sql = definition_select(kind, "ORDER BY name");
            let rows = conn
                .prepare_cached(&sql)?
                .query_map([], definition_from_row)?
                .collect::<Result<_, _>>()?;
            Ok(rows)
        })
    }

    /// Deletes a definition; returns it.
    pub async fn delete_definition(
        &self,
        kind: DefinitionKind,
        name: String,
    ) -> Result<DefinitionRow, StoreError> {
        self.write(move |conn| {
            let row = get_definition_in(conn, kind, &name)?;
            conn.execute(
                &format!("DELETE FROM {} WHERE name = ?1", kind.table()),
                [&name],
            )?;
            append_event(
                conn,
                &NewEvent {
                    kind: format!("{}_deleted", kind.table().trim_end_matches('s')),
                    data: serde_json::json!({ "name": name }),
                    ..NewEvent::default()
                },
            )?;
            Ok(row)
        })
        .await
    }
}
