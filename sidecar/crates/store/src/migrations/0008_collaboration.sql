-- The collaboration protocol (seed 004): a party's plans (every proposal a version; a commit
-- snapshots it), reviews of them, the committed plan's steps with their live state, and
-- decisions with their votes. Released migrations are never edited: add a new file instead.

CREATE TABLE plans (
    party_id     TEXT NOT NULL REFERENCES parties(id),
    version      INTEGER NOT NULL,
    status       TEXT NOT NULL DEFAULT 'draft',   -- draft, committed, superseded
    steps        TEXT NOT NULL,                   -- JSON array of the engine's StepSpec
    summary      TEXT,
    proposed_by  TEXT,                            -- a role, or "person"
    committed_by TEXT,
    created_at   TEXT NOT NULL,
    committed_at TEXT,
    PRIMARY KEY (party_id, version)
) STRICT;

CREATE TABLE plan_reviews (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    party_id    TEXT NOT NULL,
    version     INTEGER NOT NULL,
    reviewer    TEXT NOT NULL,
    session_id  TEXT,
    verdict     TEXT NOT NULL,                    -- approve, request_changes
    comments    TEXT,
    created_at  TEXT NOT NULL,
    FOREIGN KEY (party_id, version) REFERENCES plans(party_id, version)
) STRICT;

CREATE TABLE plan_steps (
    party_id       TEXT NOT NULL REFERENCES parties(id),
    step_id        TEXT NOT NULL,
    position       INTEGER NOT NULL,
    plan_version   INTEGER NOT NULL,
    owner_role     TEXT NOT NULL,
    spec           TEXT NOT NULL,                 -- the engine's StepSpec, JSON
    state          TEXT NOT NULL DEFAULT 'pending',
    reason         TEXT,                          -- the last submission, review, handoff or blocker
    started_at_ms  INTEGER,
    usage_at_start TEXT NOT NULL DEFAULT '{}',    -- the owner's usage when it started, JSON
    updated_at     TEXT NOT NULL,
    PRIMARY KEY (party_id, step_id)
) STRICT;

CREATE TABLE decisions (
    id           TEXT PRIMARY KEY,
    party_id     TEXT NOT NULL REFERENCES parties(id),
    topic        TEXT NOT NULL,
    options      TEXT NOT NULL,                   -- JSON array of strings
    evidence     TEXT,
    voters       TEXT NOT NULL,                   -- JSON array: role names and/or "person"
    step_id      TEXT,                            -- the blocked step that raised it
    proposed_by  TEXT,
    deadline_ms  INTEGER NOT NULL,
    status       TEXT NOT NULL DEFAULT 'open',    -- open, tied, committed
    chosen       TEXT,
    how          TEXT,
    adr_path     TEXT,
    adr_commit   TEXT,
    created_at   TEXT NOT NULL,
    committed_at TEXT
) STRICT;
CREATE INDEX idx_decisions_party ON decisions(party_id, created_at);
CREATE INDEX idx_decisions_open ON decisions(status) WHERE status != 'committed';

CREATE TABLE decision_votes (
    decision_id TEXT NOT NULL REFERENCES decisions(id),
    voter       TEXT NOT NULL,
    session_id  TEXT,
    option      TEXT NOT NULL,
    rationale   TEXT,
    created_at  TEXT NOT NULL,
    PRIMARY KEY (decision_id, voter)
) STRICT;
