-- Questions an agent asks a person (`ask_person`): waiting in the inbox until answered (one of
-- its choices, or free text when it offers none), or expired when the run that asked ends.
-- Released migrations are never edited: add a new file instead.

CREATE TABLE questions (
    id          TEXT PRIMARY KEY,
    project_id  TEXT NOT NULL REFERENCES projects(id),
    session_id  TEXT NOT NULL REFERENCES sessions(id),
    run_id      TEXT REFERENCES agent_runs(id),
    party_id    TEXT,
    role_name   TEXT,
    question    TEXT NOT NULL,
    choices     TEXT NOT NULL DEFAULT '[]',
    status      TEXT NOT NULL DEFAULT 'pending'
                CHECK (status IN ('pending', 'answered', 'expired')),
    answer      TEXT,
    answered_by TEXT,
    created_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    answered_at TEXT
) STRICT;

CREATE INDEX idx_questions_pending ON questions(project_id, created_at) WHERE status = 'pending';
CREATE INDEX idx_questions_run ON questions(run_id) WHERE status = 'pending';
