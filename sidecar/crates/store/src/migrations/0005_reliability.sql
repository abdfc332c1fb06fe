-- Reliability: a run's process group is recorded (its whole group is ended with it, also after a
-- daemon restart), a permission request whose run has ended becomes 'expired' instead of
-- waiting forever as a ghost, and a request for a path outside the member's checkout says so. Released migrations are never edited: add a new file instead.

ALTER TABLE agent_runs ADD COLUMN pgid INTEGER;     -- the run's process group (NULL: in-daemon)
UPDATE agent_runs SET pgid = pid
    WHERE pid IS NOT NULL AND coalesce(json_extract(definition, '$.runner'), 'process') NOT LIKE 'wasm:%';

-- SQLite cannot change a CHECK constraint in place: the table is rebuilt with 'expired' allowed.
CREATE TABLE approvals_new (
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
                      CHECK (status IN ('pending', 'approved', 'denied', 'aborted', 'expired')),
    decision          TEXT,                -- approve, deny, abort, approve_pattern, timeout, rule, expired
    decided_by        TEXT,
    reason            TEXT,
    rule_id           TEXT,
    expires_at_ms     INTEGER NOT NULL,
    created_at        TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    decided_at        TEXT,
    outside_worktree  INTEGER NOT NULL DEFAULT 0   -- a path outside the asking member's checkout
) STRICT;
INSERT INTO approvals_new (id, request_key, project_id, session_id, run_id, party_id, role_name,
    tool_name, input, subject, file_path, start_line, end_line, diff, is_dangerous, danger_reason,
    status, decision, decided_by, reason, rule_id, expires_at_ms, created_at, decided_at)
    SELECT id, request_key, project_id, session_id, run_id, party_id, role_name,
    tool_name, input, subject, file_path, start_line, end_line, diff, is_dangerous, danger_reason,
    status, decision, decided_by, reason, rule_id, expires_at_ms, created_at, decided_at
    FROM approvals;
DROP TABLE approvals;
ALTER TABLE approvals_new RENAME TO approvals;
CREATE UNIQUE INDEX idx_approvals_key ON approvals(session_id, request_key)
    WHERE request_key IS NOT NULL;
CREATE INDEX idx_approvals_pending ON approvals(created_at) WHERE status = 'pending';
CREATE INDEX idx_approvals_run ON approvals(run_id) WHERE status = 'pending';

-- Ghosts an earlier version left: pending requests of runs that have ended.
UPDATE approvals SET status = 'expired', decision = 'expired', decided_by = 'troupe',
    reason = 'the run that asked had ended', decided_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
    WHERE status = 'pending' AND run_id IN (
        SELECT id FROM agent_runs WHERE status NOT IN ('pending', 'running'));
