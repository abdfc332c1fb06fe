-- Foundation: projects, sessions, peer-to-peer messages and the durable timeline.
-- A released migration is never edited: add a new file instead.

CREATE TABLE projects (
    id          TEXT PRIMARY KEY,
    root_path   TEXT NOT NULL UNIQUE,
    name        TEXT NOT NULL,
    created_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
) STRICT;

CREATE TABLE sessions (
    id                   TEXT PRIMARY KEY,
    project_id           TEXT NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    cli                  TEXT NOT NULL,
    cwd                  TEXT NOT NULL,
    external_id          TEXT,
    parent_session_id    TEXT REFERENCES sessions(id),
    agent_depth          INTEGER NOT NULL DEFAULT 0,
    spawned_by_agent_id  TEXT,
    party_id             TEXT,
    status               TEXT NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'ended')),
    created_at           TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    last_seen_at         TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    ended_at             TEXT
) STRICT;
CREATE UNIQUE INDEX idx_sessions_external ON sessions(project_id, cli, external_id)
    WHERE external_id IS NOT NULL;
CREATE INDEX idx_sessions_project ON sessions(project_id, status);
CREATE INDEX idx_sessions_parent ON sessions(parent_session_id) WHERE parent_session_id IS NOT NULL;
CREATE INDEX idx_sessions_party ON sessions(party_id) WHERE party_id IS NOT NULL;

-- seq is the delivery order: one writer assigns it in commit order. (No AUTOINCREMENT: rows
-- are never deleted from the top, so rowids are never reused, and it saves a write per row.)
CREATE TABLE inter_session_messages (
    seq              INTEGER PRIMARY KEY,
    id               TEXT NOT NULL UNIQUE,
    project_id       TEXT NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    from_session_id  TEXT NOT NULL REFERENCES sessions(id),
    to_session_id    TEXT NOT NULL REFERENCES sessions(id),
    content          TEXT NOT NULL,
    priority         TEXT NOT NULL DEFAULT 'normal'
                     CHECK (priority IN ('low', 'normal', 'high', 'urgent')),
    message_type     TEXT NOT NULL DEFAULT 'direct',
    party_id         TEXT,
    idempotency_key  TEXT,
    created_at       TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    read_at          TEXT
) STRICT;
CREATE INDEX idx_ism_inbox ON inter_session_messages(to_session_id, seq);
-- A key is unique per sender; one keyed send to many recipients (a broadcast) shares it.
CREATE INDEX idx_ism_idempotency ON inter_session_messages(from_session_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX idx_ism_party ON inter_session_messages(party_id) WHERE party_id IS NOT NULL;

-- The durable timeline of everything the daemon does; later features append to it.
CREATE TABLE events (
    seq         INTEGER PRIMARY KEY,
    at          TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    kind        TEXT NOT NULL,
    project_id  TEXT,
    session_id  TEXT,
    party_id    TEXT,
    data        TEXT NOT NULL DEFAULT '{}'
) STRICT;
CREATE INDEX idx_events_party ON events(party_id, seq) WHERE party_id IS NOT NULL;
