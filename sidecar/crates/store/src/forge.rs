//! The forge's records: a party's link to its issue and pull request (with its timeline event
//! in the same transaction), the forge's things already handled (each claimed once, so a
//! webhook delivery replayed or a comment seen twice does nothing), and the polls' cursors.

use rusqlite::{Connection, OptionalExtension, Row, params};

use crate::events::append_event;
use crate::{ForgeLink, NewEvent, Store, StoreError};

const NOW: &str = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')";
const COLUMNS: &str = "party_id, repo, issue_number, pull_number, pull_url, head_branch, \
                       base_branch, head_sha, state, ci_rounds, detail, created_at, updated_at";

fn from_row(r: &Row<'_>) -> rusqlite::Result<ForgeLink> {
    Ok(ForgeLink {
        party_id: r.get(0)?,
        repo: r.get(1)?,
        issue_number: r.get(2)?,
        pull_number: r.get(3)?,
        pull_url: r.get(4)?,
        head_branch: r.get(5)?,
        base_branch: r.get(6)?,
        head_sha: r.get(7)?,
        state: r.get(8)?,
        ci_rounds: r.get(9)?,
        detail: r.get(10)?,
        created_at: r.get(11)?,
        updated_at: r.get(12)?,
    })
}

fn load(conn: &Connection, party_id: &str) -> Result<Option<ForgeLink>, StoreError> {
    Ok(conn
        .prepare_cached(&format!(
            "SELECT {COLUMNS} FROM forge_links WHERE party_id = ?1"
        ))?
        .query_row(params![party_id], from_row)
        .optional()?)
}

/// Writes a link (and its event); a link becoming or leaving `ready` changes the inbox.
fn put(
    conn: &Connection,
    link: &ForgeLink,
    event: Option<&NewEvent>,
) -> Result<ForgeLink, StoreError> {
    let before = load(conn, &link.party_id)?;
    conn.prepare_cached(&format!(
        "INSERT INTO forge_links ({COLUMNS}) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, {NOW}, {NOW}) \
         ON CONFLICT(party_id) DO UPDATE SET repo = ?2, issue_number = ?3, \
         pull_number = ?4, pull_url = ?5, head_branch = ?6, base_branch = ?7, \
         head_sha = ?8, state = ?9, ci_rounds = ?10, detail = ?11, updated_at = {NOW}"
    ))?
    .execute(params![
        link.party_id,
        link.repo,
        link.issue_number,
        link.pull_number,
        link.pull_url,
        link.head_branch,
        link.base_branch,
        link.head_sha,
        link.state,
        link.ci_rounds,
        link.detail,
    ])?;
    let was = before.as_ref().map(|l| l.state.as_str());
    if (was == Some("ready")) != (link.state == "ready") {
        crate::changes::mark(crate::Topic::Inbox);
    }
    if let Some(e) = event {
        append_event(conn, e)?;
    }
    load(conn, &link.party_id)?.ok_or_else(|| StoreError::NotFound {
        what: "forge link",
        id: link.party_id.clone(),
    })
}

impl Store {
    /// Writes a party's forge link (inserted or replaced whole) and, if given, its timeline
    /// event, in one transaction. A link becoming or leaving `ready` changes the inbox.
    pub async fn put_forge_link(
        &self,
        link: ForgeLink,
        event: Option<NewEvent>,
    ) -> Result<ForgeLink, StoreError> {
        self.write(move |conn| put(conn, &link, event.as_ref()))
            .await
    }

    /// Claims `keys` and, only if one was new, writes the link and its event: one transaction,
    /// so a kill -9 leaves either both or neither. True when this call claimed one.
    pub async fn claim_and_put_forge_link(
        &self,
        keys: Vec<String>,
        link: ForgeLink,
        event: Option<NewEvent>,
    ) -> Result<bool, StoreError> {
        let claimed = self
            .write(move |conn| {
                let mut n = 0;
                for key in &keys {
                    n += conn
                        .prepare_cached(&format!(
                            "INSERT OR IGNORE INTO forge_seen (key, party_id, created_at) \
                             VALUES (?1, ?2, {NOW})"
                        ))?
                        .execute(params![key, link.party_id])?;
                }
                if n == 0 {
                    return Ok(false);
                }
                put(conn, &link, event.as_ref())?;
                Ok(true)
            })
            .await?;
        Ok(claimed)
    }

    /// A party's forge link, if it has one.
    pub fn get_forge_link(&self, party_id: &str) -> Result<Option<ForgeLink>, StoreError> {
        let id = party_id.to_string();
        self.read(move |c| load(c, &id))
    }

    /// The links in one of `states`, oldest first (the watcher's work).
    pub fn forge_links_in(&self, states: &[&str]) -> Result<Vec<ForgeLink>, StoreError> {
        let states: Vec<String> = states.iter().map(|s| s.to_string()).collect();
        self.read(move |c| {
            let mut stmt = c.prepare_cached(&format!(
                "SELECT {COLUMNS} FROM forge_links WHERE state IN \
                 (SELECT value FROM json_each(?1)) ORDER BY created_at, party_id"
            ))?;
            let list = serde_json::to_string(&states)
                .map_err(|e| StoreError::Invalid(format!("states: {e}")))?;
            let rows = stmt
                .query_map(params![list], from_row)?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(rows)
        })
    }

    /// Claims each key (a delivery id, a comment, a review, a failed check): returns those
    /// never claimed before, in order, now claimed; with `event`, appended in the same
    /// transaction when at least one was new.
    pub async fn claim_forge_keys(
        &self,
        keys: Vec<String>,
        party_id: Option<String>,
        event: Option<NewEvent>,
    ) -> Result<Vec<String>, StoreError> {
        self.write(move |conn| {
            let mut fresh = Vec::new();
            for k in &keys {
                let n = conn
                    .prepare_cached(&format!(
                        "INSERT OR IGNORE INTO forge_seen (key, party_id, created_at) \
                         VALUES (?1, ?2, {NOW})"
                    ))?
                    .execute(params![k, party_id])?;
                if n == 1 {
                    fresh.push(k.clone());
                }
            }
            if !fresh.is_empty()
                && let Some(e) = &event
            {
                append_event(conn, e)?;
            }
            Ok(fresh)
        })
        .await
    }

    /// Gives a claimed key back (what it claimed could not be carried out: a party that did
    /// not launch), so that the next event or poll may try again.
    pub async fn release_forge_key(&self, key: String) -> Result<(), StoreError> {
        self.write(move |conn| {
            conn.prepare_cached("DELETE FROM forge_seen WHERE key = ?1")?
                .execute(params![key])?;
            Ok(())
        })
        .await
    }

    /// Whether a key was claimed.
    pub fn forge_key_seen(&self, key: &str) -> Result<bool, StoreError> {
        let key = key.to_string();
        self.read(move |c| {
            Ok(c.prepare_cached("SELECT 1 FROM forge_seen WHERE key = ?1")?
                .query_row(params![key], |_| Ok(()))
                .optional()?
                .is_some())
        })
    }

    /// A poll's cursor (an ETag, a time).
    pub fn forge_cursor(&self, key: &str) -> Result<Option<String>, StoreError> {
        let key = key.to_string();
        self.read(move |c| {
            Ok(
                c.prepare_cached("SELECT value FROM forge_cursors WHERE key = ?1")?
                    .query_row(params![key], |r| r.get(0))
                    .optional()?,
            )
        })
    }

    /// Sets a poll's cursor.
    pub async fn set_forge_cursor(&self, key: String, value: String) -> Result<(), StoreError> {
        self.write(move |conn| {
            conn.prepare_cached(&format!(
                "INSERT INTO forge_cursors (key, value, updated_at) VALUES (?1, ?2, {NOW}) \
                 ON CONFLICT(key) DO UPDATE SET value = ?2, updated_at = {NOW}"
            ))?
            .execute(params![key, value])?;
            Ok(())
        })
        .await
    }
}
