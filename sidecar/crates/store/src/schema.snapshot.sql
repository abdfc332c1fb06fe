CREATE TABLE agent_definitions (
    name        TEXT PRIMARY KEY,
    definition  TEXT NOT NULL,          -- JSON, validated by the daemon
    created_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    updated_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
) STRICT;
CREATE TABLE agent_run_prompts (
    run_id  TEXT PRIMARY KEY REFERENCES agent_runs(id) ON DELETE CASCADE,
    prompt  TEXT NOT NULL
) STRICT;
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
, pgid INTEGER, run_trigger TEXT, flow_root TEXT, flow_step INTEGER) STRICT;
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
CREATE TABLE "approvals" (
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
CREATE TABLE decision_votes (
    decision_id TEXT NOT NULL REFERENCES decisions(id),
    voter       TEXT NOT NULL,
    session_id  TEXT,
    option      TEXT NOT NULL,
    rationale   TEXT,
    created_at  TEXT NOT NULL,
    PRIMARY KEY (decision_id, voter)
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
CREATE TABLE events (
    seq         INTEGER PRIMARY KEY,
    at          TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    kind        TEXT NOT NULL,
    project_id  TEXT,
    session_id  TEXT,
    party_id    TEXT,
    data        TEXT NOT NULL DEFAULT '{}'
) STRICT;
CREATE TABLE forge_cursors (
    key        TEXT PRIMARY KEY,
    value      TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE TABLE forge_links (
    party_id     TEXT PRIMARY KEY REFERENCES parties(id),
    repo         TEXT NOT NULL,
    issue_number INTEGER,
    pull_number  INTEGER,
    pull_url     TEXT,
    head_branch  TEXT,
    base_branch  TEXT,
    -- What the daemon pushed last.
    head_sha     TEXT,
    -- working, open, fixing, ready, merged, closed, gave_up
    state        TEXT NOT NULL DEFAULT 'working',
    ci_rounds    INTEGER NOT NULL DEFAULT 0,
    -- The last failure, error or reason, in a sentence.
    detail       TEXT,
    created_at   TEXT NOT NULL,
    updated_at   TEXT NOT NULL
);
CREATE TABLE forge_seen (
    key        TEXT PRIMARY KEY,
    party_id   TEXT,
    created_at TEXT NOT NULL
);
CREATE TABLE inbox_dismissed (
    item_id      TEXT PRIMARY KEY,
    dismissed_at TEXT NOT NULL
) STRICT;
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
CREATE TABLE member_picks (
    party_id       TEXT NOT NULL REFERENCES parties(id),
    role_name      TEXT NOT NULL,
    judge_run_id   TEXT,
    instance_index INTEGER,
    picked_by      TEXT,
    reason         TEXT,
    created_at     TEXT NOT NULL,
    picked_at      TEXT,
    PRIMARY KEY (party_id, role_name)
) STRICT;
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
, released TEXT NOT NULL DEFAULT '[]') STRICT;
CREATE TABLE party_definitions (
    name        TEXT PRIMARY KEY,
    definition  TEXT NOT NULL,          -- JSON, validated by the daemon
    version     INTEGER NOT NULL DEFAULT 1,
    builtin     INTEGER NOT NULL DEFAULT 0,
    created_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    updated_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
) STRICT;
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
CREATE TABLE pattern_flows (
    root_run_id TEXT PRIMARY KEY REFERENCES agent_runs(id),
    state       TEXT NOT NULL,                  -- the engine's Flow, JSON
    finished    INTEGER NOT NULL DEFAULT 0,
    updated_at  TEXT NOT NULL
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
CREATE TABLE projects (
    id          TEXT PRIMARY KEY,
    root_path   TEXT NOT NULL UNIQUE,
    name        TEXT NOT NULL,
    created_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
) STRICT;
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
CREATE TABLE usage_totals (
    scope          TEXT NOT NULL CHECK (scope IN ('run', 'party')),
    id             TEXT NOT NULL,
    input_tokens   INTEGER NOT NULL DEFAULT 0,
    output_tokens  INTEGER NOT NULL DEFAULT 0,
    cost_usd       REAL NOT NULL DEFAULT 0,
    PRIMARY KEY (scope, id)
) STRICT, WITHOUT ROWID;
CREATE INDEX idx_agent_runs_flow ON agent_runs(flow_root) WHERE flow_root IS NOT NULL;
CREATE INDEX idx_agent_runs_parent ON agent_runs(parent_session_id) WHERE parent_session_id IS NOT NULL;
CREATE INDEX idx_agent_runs_party ON agent_runs(party_id) WHERE party_id IS NOT NULL;
CREATE INDEX idx_agent_runs_session ON agent_runs(session_id);
CREATE INDEX idx_agent_runs_status ON agent_runs(status) WHERE status IN ('pending', 'running');
CREATE INDEX idx_approval_rules_project ON approval_rules(project_id) WHERE revoked_at IS NULL;
CREATE UNIQUE INDEX idx_approvals_key ON approvals(session_id, request_key)
    WHERE request_key IS NOT NULL;
CREATE INDEX idx_approvals_pending ON approvals(created_at) WHERE status = 'pending';
CREATE INDEX idx_approvals_run ON approvals(run_id) WHERE status = 'pending';
CREATE INDEX idx_decisions_open ON decisions(status) WHERE status != 'committed';
CREATE INDEX idx_decisions_party ON decisions(party_id, created_at);
CREATE INDEX idx_events_party ON events(party_id, seq) WHERE party_id IS NOT NULL;
CREATE INDEX idx_forge_links_state ON forge_links(state);
CREATE INDEX idx_ism_inbox ON inter_session_messages(to_session_id, seq);
CREATE INDEX idx_ism_party ON inter_session_messages(party_id) WHERE party_id IS NOT NULL;
CREATE INDEX idx_ism_sender ON inter_session_messages(from_session_id, idempotency_key);
CREATE INDEX idx_parties_project ON parties(project_id, status);
CREATE INDEX idx_party_members_checkout ON party_members(party_id) WHERE branch_name IS NOT NULL;
CREATE INDEX idx_questions_pending ON questions(project_id, created_at) WHERE status = 'pending';
CREATE INDEX idx_questions_run ON questions(run_id) WHERE status = 'pending';
CREATE UNIQUE INDEX idx_sessions_external ON sessions(project_id, cli, external_id)
    WHERE external_id IS NOT NULL;
CREATE INDEX idx_sessions_parent ON sessions(parent_session_id) WHERE parent_session_id IS NOT NULL;
CREATE INDEX idx_sessions_party ON sessions(party_id) WHERE party_id IS NOT NULL;
CREATE INDEX idx_sessions_project ON sessions(project_id, status);
CREATE INDEX idx_tasks_party ON tasks(party_id) WHERE party_id IS NOT NULL;
