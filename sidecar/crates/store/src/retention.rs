//! Retention: the rows the store may forget once they are older than a cutoff — the timeline
//! outside open parties, read messages (or those whose recipient ended), notifications outside
//! open parties, answered requests and questions, ended runs of ended parties and standalone
//! ones, ended sessions nothing refers to — removed a window of 1,000 rows per write job
//! (children before the rows they refer to), so the writer keeps serving between windows. Never
//! touched: anything of a pending or running party, pending requests and questions, unread
//! messages of a live session, plans, decisions, tasks, definitions, rules, parties and their
//! members. Also the database's size and `VACUUM` (run by the writer between two group commits,
//! outside any transaction).

use rusqlite::{Connection, ErrorCode, params};

use crate::runs::{RUN_COLUMNS, run_from_row};
use crate::{AgentRun, Store, StoreError};

/// Rows looked at per write job (one window).
pub const WINDOW: i64 = 1000;

/// The parties still open: nothing of theirs is removed.
const OPEN: &str = "(SELECT id FROM parties WHERE status IN ('pending', 'running'))";

/// A table the retention rules remove rows from, in the order they are swept (children before
/// the rows they refer to: questions before runs, runs before sessions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Events,
    Messages,
    Notifications,
    Approvals,
    Questions,
    Runs,
    Sessions,
}

impl Kind {
    pub const ALL: [Kind; 7] = [
        Kind::Events,
        Kind::Messages,
        Kind::Notifications,
        Kind::Approvals,
        Kind::Questions,
        Kind::Runs,
        Kind::Sessions,
    ];

    fn table(self) -> &'static str {
        match self {
            Kind::Events => "events",
            Kind::Messages => "inter_session_messages",
            Kind::Notifications => "notifications",
            Kind::Approvals => "approvals",
            Kind::Questions => "questions",
            Kind::Runs => "agent_runs",
            Kind::Sessions => "sessions",
        }
    }

    /// The column windows walk in order.
    fn key(self) -> &'static str {
        match self {
            Kind::Events | Kind::Messages | Kind::Notifications => "seq",
            _ => "rowid",
        }
    }

    /// When the row was made or ended, compared with the cutoff.
    fn time(self) -> &'static str {
        match self {
            Kind::Events => "t.at",
            Kind::Runs => "coalesce(t.completed_at, t.created_at)",
            Kind::Sessions => "coalesce(t.ended_at, t.last_seen_at)",
            _ => "t.created_at",
        }
    }

    /// Whether rows in key order are in time order (appended as they happen): a window whose
    /// last row is younger than the cutoff ends the sweep of such a table.
    fn ordered(self) -> bool {
        matches!(self, Kind::Events | Kind::Messages | Kind::Notifications)
    }

    /// Whether a row (`t`) may go, once older than the cutoff (`?1`).
    fn removable(self) -> String {
        let not_open = format!("(t.party_id IS NULL OR t.party_id NOT IN {OPEN})");
        let old = format!("{} < ?1", self.time());
        match self {
            // The landings' outcomes stay: the inbox derives its merge conflicts from them.
            Kind::Events => {
                format!("{old} AND t.kind NOT IN ('merge_conflict', 'party_landed') AND {not_open}")
            }
            Kind::Messages => format!(
                "{old} AND (t.read_at IS NOT NULL OR EXISTS (SELECT 1 FROM sessions s \
                 WHERE s.id = t.to_session_id AND s.status = 'ended')) AND {not_open}"
            ),
            // Nothing marks a notification read: what still waits for the person is in the
            // inbox, derived from live state; a notification is kept while its party is open.
            Kind::Notifications => format!("{old} AND {not_open}"),
            Kind::Approvals | Kind::Questions => {
                format!("{old} AND t.status != 'pending' AND {not_open}")
            }
            Kind::Runs => {
                format!("{old} AND t.status NOT IN ('pending', 'running') AND {not_open}")
            }
            Kind::Sessions => format!(
                "{old} AND t.status = 'ended' AND {not_open} \
                 AND NOT EXISTS (SELECT 1 FROM agent_runs r WHERE r.session_id = t.id) \
                 AND NOT EXISTS (SELECT 1 FROM agent_runs r WHERE r.parent_session_id = t.id) \
                 AND NOT EXISTS (SELECT 1 FROM sessions c WHERE c.parent_session_id = t.id) \
                 AND NOT EXISTS (SELECT 1 FROM inter_session_messages m WHERE m.to_session_id = t.id) \
                 AND NOT EXISTS (SELECT 1 FROM inter_session_messages m WHERE m.from_session_id = t.id) \
                 AND t.id NOT IN (SELECT session_id FROM approvals) \
                 AND t.id NOT IN (SELECT session_id FROM questions) \
                 AND t.id NOT IN (SELECT created_by_session_id FROM parties \
                                  WHERE created_by_session_id IS NOT NULL) \
                 AND t.id NOT IN (SELECT session_id FROM party_members WHERE session_id IS NOT NULL)"
            ),
        }
    }
}

/// What a sweep removed (or, dry, would remove), by kind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Swept {
    pub events: u64,
    pub messages: u64,
    pub notifications: u64,
    pub approvals: u64,
    pub questions: u64,
    pub runs: u64,
    pub sessions: u64,
    /// The ended runs the rules let go, their rows removed or kept only because a party's
    /// member still names them (their logs may go either way).
    pub ended_runs: Vec<String>,
}

impl Swept {
    fn count(&mut self, kind: Kind) -> &mut u64 {
        match kind {
            Kind::Events => &mut self.events,
            Kind::Messages => &mut self.messages,
            Kind::Notifications => &mut self.notifications,
            Kind::Approvals => &mut self.approvals,
            Kind::Questions => &mut self.questions,
            Kind::Runs => &mut self.runs,
            Kind::Sessions => &mut self.sessions,
        }
    }

    /// Adds another sweep's figures to these.
    pub fn add(&mut self, other: Swept) {
        self.events += other.events;
        self.messages += other.messages;
        self.notifications += other.notifications;
        self.approvals += other.approvals;
        self.questions += other.questions;
        self.runs += other.runs;
        self.sessions += other.sessions;
        self.ended_runs.extend(other.ended_runs);
    }

    /// Rows removed in all.
    pub fn rows(&self) -> u64 {
        self.events
            + self.messages
            + self.notifications
            + self.approvals
            + self.questions
            + self.runs
            + self.sessions
    }
}

/// The database's size: every page, and the free ones among them (which only `VACUUM` gives
/// back to the file system).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DbSize {
    pub bytes: u64,
    pub free_bytes: u64,
}

impl DbSize {
    /// The bytes rows use.
    pub fn live_bytes(&self) -> u64 {
        self.bytes.saturating_sub(self.free_bytes)
    }
}

/// One window of a sweep.
#[derive(Debug, Default)]
struct Window {
    removed: u64,
    last_key: i64,
    /// No row after this window needs looking at.
    done: bool,
    ended_runs: Vec<String>,
}

/// Looks at the `WINDOW` rows of `kind` after `after` and removes (unless `dry`) those the rules
/// let go. A row something still refers to (a foreign key) stays.
fn window(
    conn: &Connection,
    kind: Kind,
    cutoff: &str,
    after: i64,
    dry: bool,
) -> Result<Window, StoreError> {
    let (table, key) = (kind.table(), kind.key());
    // A run's id, and whether a party's member names it (only runs are named so).
    let (id, named) = if kind == Kind::Runs {
        (
            "t.id",
            "t.id IN (SELECT agent_run_id FROM party_members WHERE agent_run_id IS NOT NULL)",
        )
    } else {
        ("NULL", "0")
    };
    let sql = format!(
        "SELECT t.{key}, ({}) AS gone, {} >= ?1 AS young, {id}, {named} \
         FROM {table} AS t WHERE t.{key} > ?2 ORDER BY t.{key} LIMIT ?3",
        kind.removable(),
        kind.time(),
    );
    let rows: Vec<(i64, bool, bool, Option<String>, bool)> = conn
        .prepare_cached(&sql)?
        .query_map(params![cutoff, after, WINDOW], |r| {
            Ok((
                r.get(0)?,
                r.get::<_, Option<bool>>(1)?.unwrap_or(false),
                r.get::<_, Option<bool>>(2)?.unwrap_or(false),
                r.get(3)?,
                r.get::<_, Option<bool>>(4)?.unwrap_or(false),
            ))
        })?
        .collect::<Result<_, _>>()?;
    let mut out = Window {
        last_key: rows.last().map_or(after, |r| r.0),
        done: (rows.len() as i64) < WINDOW || (kind.ordered() && rows.last().is_some_and(|r| r.2)),
        ..Window::default()
    };
    for (row_key, gone, _, run_id, named) in rows {
        if !gone {
            continue;
        }
        if let Some(run_id) = run_id {
            out.ended_runs.push(run_id.clone());
            if named {
                continue; // a party's member still names it: the row stays, its log may go
            }
            if dry || remove_run(conn, &run_id)? {
                out.removed += 1;
            }
            continue;
        }
        if dry {
            out.removed += 1;
            continue;
        }
        let deleted = conn
            .prepare_cached(&format!("DELETE FROM {table} WHERE {key} = ?1"))?
            .execute([row_key]);
        match deleted {
            Ok(n) => out.removed += n as u64,
            // Still referred to: it stays.
            Err(e) if is_constraint(&e) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(out)
}

fn is_constraint(e: &rusqlite::Error) -> bool {
    e.sqlite_error_code() == Some(ErrorCode::ConstraintViolation)
}

/// Removes an ended run with what hangs on it (its pattern flow, its usage, its answered
/// questions), all or nothing. False when something still refers to it.
fn remove_run(conn: &Connection, run_id: &str) -> Result<bool, StoreError> {
    conn.execute_batch("SAVEPOINT retention_run")?;
    let removed = (|| -> rusqlite::Result<usize> {
        conn.prepare_cached("DELETE FROM pattern_flows WHERE root_run_id = ?1")?
            .execute([run_id])?;
        conn.prepare_cached("DELETE FROM usage_totals WHERE scope = 'run' AND id = ?1")?
            .execute([run_id])?;
        conn.prepare_cached("DELETE FROM questions WHERE run_id = ?1 AND status != 'pending'")?
            .execute([run_id])?;
        conn.prepare_cached("DELETE FROM agent_runs WHERE id = ?1")?
            .execute([run_id])
    })();
    match removed {
        Ok(n) => {
            conn.execute_batch("RELEASE retention_run")?;
            Ok(n > 0)
        }
        Err(e) => {
            conn.execute_batch("ROLLBACK TO retention_run; RELEASE retention_run")?;
            if is_constraint(&e) {
                Ok(false)
            } else {
                Err(e.into())
            }
        }
    }
}

impl Store {
    /// The moment `days` ago (fractions allowed; 0 is now), as the store writes times.
    pub fn cutoff(&self, days: f64) -> Result<String, StoreError> {
        self.read(|conn| {
            Ok(conn.query_row(
                "SELECT strftime('%Y-%m-%dT%H:%M:%fZ', julianday('now') - ?1)",
                [days.max(0.0)],
                |r| r.get(0),
            )?)
        })
    }

    /// Removes every row the retention rules let go that is older than `cutoff` (`Store::cutoff`),
    /// table by table, a window of rows per write so other writes go on in between; with `dry`,
    /// only counts them (each table on its own: a session that only the removal of its messages
    /// would free is counted by the real sweep alone).
    pub async fn sweep(&self, cutoff: &str, dry: bool) -> Result<Swept, StoreError> {
        let mut swept = Swept::default();
        for kind in Kind::ALL {
            // Sessions that only their children's sessions kept go in a later pass.
            let passes = if kind == Kind::Sessions && !dry { 4 } else { 1 };
            for _ in 0..passes {
                let removed = self.sweep_kind(kind, cutoff, dry, &mut swept).await?;
                if removed == 0 {
                    break;
                }
            }
        }
        Ok(swept)
    }

    async fn sweep_kind(
        &self,
        kind: Kind,
        cutoff: &str,
        dry: bool,
        swept: &mut Swept,
    ) -> Result<u64, StoreError> {
        let mut after = i64::MIN;
        let mut removed = 0;
        loop {
            let w = if dry {
                self.read(|conn| window(conn, kind, cutoff, after, true))?
            } else {
                let cutoff = cutoff.to_string();
                self.write(move |conn| window(conn, kind, &cutoff, after, false))
                    .await?
            };
            removed += w.removed;
            *swept.count(kind) += w.removed;
            swept.ended_runs.extend(w.ended_runs);
            after = w.last_key;
            if w.done {
                return Ok(removed);
            }
        }
    }

    /// The database's size (`page_count × page_size`) and its free pages.
    pub fn db_size(&self) -> Result<DbSize, StoreError> {
        self.read(|conn| {
            let page: i64 = conn.query_row("PRAGMA page_size", [], |r| r.get(0))?;
            let pages: i64 = conn.query_row("PRAGMA page_count", [], |r| r.get(0))?;
            let free: i64 = conn.query_row("PRAGMA freelist_count", [], |r| r.get(0))?;
            let bytes = |n: i64| u64::try_from(n.saturating_mul(page)).unwrap_or(0);
            Ok(DbSize {
                bytes: bytes(pages),
                free_bytes: bytes(free),
            })
        })
    }

    /// Rebuilds the database without its free pages (`VACUUM`) and folds the WAL back in, so
    /// the file shrinks. Runs on the writer between two group commits: writes wait meanwhile.
    pub async fn vacuum(&self) -> Result<(), StoreError> {
        self.inner
            .writer
            .exclusive(|conn| {
                conn.execute_batch("VACUUM")?;
                conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
                Ok(())
            })
            .await
    }

    /// The runs not ended yet (their ids only, through the status index).
    pub fn active_run_ids(&self) -> Result<Vec<String>, StoreError> {
        self.read(|conn| {
            let ids = conn
                .prepare_cached(
                    "SELECT id FROM agent_runs WHERE status IN ('pending', 'running') ORDER BY id",
                )?
                .query_map([], |r| r.get(0))?
                .collect::<Result<_, _>>()?;
            Ok(ids)
        })
    }

    /// The runs whose working directory is under `dir` (standalone agents' checkouts, a
    /// landing's rework in a member's), oldest first.
    pub fn runs_working_under(&self, dir: &str) -> Result<Vec<AgentRun>, StoreError> {
        self.read(|conn| {
            let rows = conn
                .prepare_cached(&format!(
                    "SELECT {RUN_COLUMNS} FROM agent_runs \
                     WHERE workdir IS NOT NULL AND substr(workdir, 1, length(?1)) = ?1 \
                     ORDER BY created_at, id"
                ))?
                .query_map([dir], run_from_row)?
                .collect::<Result<_, _>>()?;
            Ok(rows)
        })
    }
}
