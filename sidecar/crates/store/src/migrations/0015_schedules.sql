-- Schedules that start parties (`[schedules.<name>]` of a project's `.troupe/config.toml`): the
-- config's cron, party and task as last read, and what the daemon keeps across restarts: paused
-- or not, the next due time (UTC), the last fire and its party or error. A fire is committed
-- (`launching` = 1, with the due time it is for) before the party is launched, so a daemon
-- killed in between launches it at its next start, and never fires one due time twice.
-- Released migrations are never edited: add a new file instead.

CREATE TABLE schedules (
    project_id    TEXT NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    name          TEXT NOT NULL,
    cron          TEXT NOT NULL,
    party         TEXT NOT NULL,
    task          TEXT NOT NULL,
    missed        TEXT NOT NULL DEFAULT 'once' CHECK (missed IN ('once', 'skip')),
    paused        INTEGER NOT NULL DEFAULT 0 CHECK (paused IN (0, 1)),
    problem       TEXT,
    next_due_at   TEXT,
    last_due_at   TEXT,
    last_run_at   TEXT,
    launching     INTEGER NOT NULL DEFAULT 0 CHECK (launching IN (0, 1)),
    last_party_id TEXT,
    last_error    TEXT,
    state_at      TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    created_at    TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    PRIMARY KEY (project_id, name)
) STRICT;
