//! Schema migrations, applied by `PRAGMA user_version` (rusqlite_migration). Released
//! migrations are never edited; a new one is appended. `schema.snapshot.sql` is the schema as
//! SQLite reports it; a unit test fails on any change.
//!
//! Indexes are chosen by measurement (`troupe-dev bench messaging`): every index a send touches
//! costs a page per sender or recipient per group commit, so the timeline (`events`) is indexed by
//! party only (a per-session timeline query scans from its `since` cursor) and pages are 2 KiB.
//! Messages are indexed by sender with the idempotency key: the keyed send's look-up, and the
//! retention's check of an ended session against the messages it sent.

use rusqlite::Connection;
use rusqlite_migration::{M, Migrations};

use crate::StoreError;

pub(crate) const MIGRATIONS: &[M<'static>] = &[
    M::up(include_str!("migrations/0001_foundation.sql")),
    M::up(include_str!("migrations/0002_parties.sql")),
    M::up(include_str!("migrations/0003_approvals.sql")),
    M::up(include_str!("migrations/0004_usage.sql")),
    M::up(include_str!("migrations/0005_reliability.sql")),
    M::up(include_str!("migrations/0006_patterns.sql")),
    M::up(include_str!("migrations/0007_live_leader.sql")),
    M::up(include_str!("migrations/0008_collaboration.sql")),
    M::up(include_str!("migrations/0009_member_picks.sql")),
    M::up(include_str!("migrations/0010_inbox.sql")),
    M::up(include_str!("migrations/0011_questions.sql")),
    M::up(include_str!("migrations/0012_retention.sql")),
    M::up(include_str!("migrations/0013_run_prompts.sql")),
    M::up(include_str!("migrations/0014_member_checkouts.sql")),
    M::up(include_str!("migrations/0015_schedules.sql")),
    M::up(include_str!("migrations/0016_forge.sql")),
];

/// The schema version a fully migrated database has.
pub const SCHEMA_VERSION: usize = MIGRATIONS.len();

pub(crate) fn migrate(conn: &mut Connection) -> Result<(), StoreError> {
    Migrations::from_slice(MIGRATIONS).to_latest(conn)?;
    Ok(())
}

/// The schema as SQLite reports it (`sqlite_master`), sorted: the schema snapshot tests
/// compare this against a checked-in copy.
pub fn schema_sql(conn: &Connection) -> Result<String, StoreError> {
    let mut stmt = conn.prepare(
        "SELECT sql FROM sqlite_master WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%' \
         ORDER BY type DESC, name",
    )?;
    let rows = stmt.query_map([], |row| row.get::<_, String>(0))?;
    let mut out = String::new();
    for sql in rows {
        out.push_str(&sql?);
        out.push_str(";\n");
    }
    Ok(out)
}
