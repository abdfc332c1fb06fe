-- Approvals: permission requests from workers, waiting for a person; and the rules
-- ("approve pattern") that answer matching requests automatically. Released migrations are
-- never edited: add a new file instead.

CREATE TABLE approvals (
    id                TEXT PRIMARY KEY,
    request_key       TEXT,                -- the caller's key: a retried request is the same one
    project_id        TEXT NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    session_id        TEXT NOT NULL REFERENCES sessions(id),
    run_id            TEXT,
    party_id          TEXT,
    role_name         TEXT,
    tool_name         TEXT NOT NULL,
    input             TEXT NOT NULL,       -- JSON
    subject           TEXT NOT NULL,       -- what rule patterns match: file path, command or input
    file_path         TEXT,
    start_line        INTEGER,
    end_line          INTEGER,
    diff              TEXT,
    is_dangerous      INTEGER NOT NULL DEFAULT 0,
    danger_reason     TEXT,
    status            TEXT NOT NULL DEFAULT 'pending'
                      CHECK (status IN ('pending', 'approved', 'denied', 'aborted')),
    decision          TEXT,                -- approve, deny, abort, approve_pattern, timeout, rule
    decided_by        TEXT,
    reason            TEXT,
    rule_id           TEXT,
    expires_at_ms     INTEGER NOT NULL,
    created_at        TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    decided_at        TEXT
) STRICT;
CREATE UNIQUE INDEX idx_approvals_key ON approvals(session_id, request_key)
    WHERE request_key IS NOT NULL;
CREATE INDEX idx_approvals_pending ON approvals(created_at) WHERE status = 'pending';

CREATE TABLE approval_rules (
    id          TEXT PRIMARY KEY,
    project_id  TEXT NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    party_id    TEXT,                      -- NULL: the whole project
    tool_name   TEXT NOT NULL,             -- '*' for any tool
    pattern     TEXT NOT NULL,             -- a glob over the request's subject
    created_by  TEXT,
    created_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    revoked_at  TEXT
) STRICT;
CREATE INDEX idx_approval_rules_project ON approval_rules(project_id) WHERE revoked_at IS NULL;
