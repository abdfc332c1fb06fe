//! What the agent, party, task and notification tables share: the SQL for now, JSON columns, events
//! in bulk.

use rusqlite::{Connection, Row};
use serde_json::Value;

use crate::events::append_event;
use crate::{NewEvent, StoreError};

pub(crate) const NOW: &str = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')";

/// A JSON text column, parsed (a column that does not parse is a conversion failure).
pub(crate) fn json_col<T: serde::de::DeserializeOwned>(
    row: &Row<'_>,
    i: usize,
) -> rusqlite::Result<T> {
    let text: String = row.get(i)?;
    serde_json::from_str(&text).map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(i, rusqlite::types::Type::Text, Box::new(e))
    })
}

pub(crate) fn opt_json_col(row: &Row<'_>, i: usize) -> rusqlite::Result<Option<Value>> {
    let text: Option<String> = row.get(i)?;
    text.map(|t| {
        serde_json::from_str(&t).map_err(|e| {
            rusqlite::Error::FromSqlConversionFailure(i, rusqlite::types::Type::Text, Box::new(e))
        })
    })
    .transpose()
}

pub(crate) fn append_all(conn: &Connection, events: &[NewEvent]) -> Result<(), StoreError> {
    for e in events {
        append_event(conn, e)?;
    }
    Ok(())
}
