-- Run-level patterns (handoff, router, advisors): a run records why it was started and, when it
-- is a step of a pattern run, that run (its root) and its step number; a pattern run's state (the
-- engine's flow, as JSON) is kept until it ends, so a restarted daemon resumes it without
-- running a completed step again. Released migrations are never edited: add a new file instead.

ALTER TABLE agent_runs ADD COLUMN run_trigger TEXT;   -- root, handoff, router, advisor, subagent
ALTER TABLE agent_runs ADD COLUMN flow_root TEXT;     -- the pattern run this run is a step of
ALTER TABLE agent_runs ADD COLUMN flow_step INTEGER;
CREATE INDEX idx_agent_runs_flow ON agent_runs(flow_root) WHERE flow_root IS NOT NULL;

CREATE TABLE pattern_flows (
    root_run_id TEXT PRIMARY KEY REFERENCES agent_runs(id),
    state       TEXT NOT NULL,                  -- the engine's Flow, JSON
    finished    INTEGER NOT NULL DEFAULT 0,
    updated_at  TEXT NOT NULL
) STRICT;
