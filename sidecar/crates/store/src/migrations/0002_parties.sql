-- Agents and parties: definitions, agent runs, launched parties and their members, tasks
-- (with escalation) and durable notifications for the person. Released migrations are never
-- edited: add a new file instead.

CREATE TABLE agent_definitions (
    name        TEXT PRIMARY KEY,
    definition  TEXT NOT NULL,          -- JSON, validated by the daemon
    created_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    updated_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
) STRICT;

CREATE TABLE party_definitions (
    name        TEXT PRIMARY KEY,
    definition  TEXT NOT NULL,          -- JSON, validated by the daemon
    version     INTEGER NOT NULL DEFAULT 1,
    builtin     INTEGER NOT NULL DEFAULT 0,
    created_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    updated_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
) STRICT;

CREATE TABLE tasks (
    id                 TEXT PRIMARY KEY,
    project_id         TEXT NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    party_id           TEXT,
    role_name          TEXT,
    title              TEXT NOT NULL,
    description        TEXT,
    status             TEXT NOT NULL DEFAULT 'open'
                       CHECK (status IN ('open', 'in_progress', 'escalated', 'done', 'cancelled')),
    escalation_reason  TEXT,
    created_at         TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    updated_at         TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
) STRICT;
CREATE INDEX idx_tasks_party ON tasks(party_id) WHERE party_id IS NOT NULL;

CREATE TABLE parties (
    id                     TEXT PRIMARY KEY,
    name                   TEXT NOT NULL,
    project_id             TEXT NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    status                 TEXT NOT NULL DEFAULT 'pending'
                           CHECK (status IN ('pending', 'running', 'completed', 'failed', 'cancelled')),
    status_reason          TEXT,
    snapshot               TEXT NOT NULL,   -- the definition, frozen at launch
    inputs                 TEXT,
    overrides              TEXT NOT NULL DEFAULT '{}',
    paused                 TEXT NOT NULL DEFAULT '[]',
    repo_root              TEXT NOT NULL,
    task_id                TEXT REFERENCES tasks(id),
    created_by_session_id  TEXT REFERENCES sessions(id),
    created_at             TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    completed_at           TEXT
) STRICT;
CREATE INDEX idx_parties_project ON parties(project_id, status);

CREATE TABLE agent_runs (
    id                 TEXT PRIMARY KEY,
    agent_name         TEXT NOT NULL,
    definition         TEXT NOT NULL,       -- the agent definition, frozen at start
    project_id         TEXT NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    parent_session_id  TEXT REFERENCES sessions(id),
    session_id         TEXT NOT NULL REFERENCES sessions(id),
    party_id           TEXT REFERENCES parties(id),
    role_name          TEXT,
    instance_index     INTEGER,
    attempt            INTEGER NOT NULL DEFAULT 1,
    prompt             TEXT NOT NULL,
    task_id            TEXT,
    status             TEXT NOT NULL DEFAULT 'pending'
                       CHECK (status IN ('pending', 'running', 'success', 'partial', 'blocked',
                                         'crashed', 'timeout', 'cancelled')),
    result             TEXT,                -- the `complete` call, as JSON
    error              TEXT,
    pid                INTEGER,
    pid_start          INTEGER,             -- the process's start time, against pid reuse
    workdir            TEXT,
    timeout_ms         INTEGER,
    created_at         TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    started_at         TEXT,
    completed_at       TEXT
) STRICT;
CREATE INDEX idx_agent_runs_parent ON agent_runs(parent_session_id) WHERE parent_session_id IS NOT NULL;
CREATE INDEX idx_agent_runs_party ON agent_runs(party_id) WHERE party_id IS NOT NULL;
CREATE INDEX idx_agent_runs_session ON agent_runs(session_id);
CREATE INDEX idx_agent_runs_status ON agent_runs(status) WHERE status IN ('pending', 'running');

CREATE TABLE party_members (
    party_id        TEXT NOT NULL REFERENCES parties(id) ON DELETE CASCADE,
    role_name       TEXT NOT NULL,
    instance_index  INTEGER NOT NULL,
    status          TEXT NOT NULL DEFAULT 'pending',
    crash_count     INTEGER NOT NULL DEFAULT 0,
    attempts        INTEGER NOT NULL DEFAULT 0,
    session_id      TEXT REFERENCES sessions(id),
    agent_run_id    TEXT REFERENCES agent_runs(id),
    workdir         TEXT,
    branch_name     TEXT,
    started_at_ms   INTEGER,
    finished_at_ms  INTEGER,
    PRIMARY KEY (party_id, role_name, instance_index)
) STRICT;

-- Things the person should see (escalations, paused roles, finished parties); editors show them.
CREATE TABLE notifications (
    seq         INTEGER PRIMARY KEY,
    project_id  TEXT,
    party_id    TEXT,
    kind        TEXT NOT NULL,
    text        TEXT NOT NULL,
    data        TEXT NOT NULL DEFAULT '{}',
    created_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    read_at     TEXT
) STRICT;
