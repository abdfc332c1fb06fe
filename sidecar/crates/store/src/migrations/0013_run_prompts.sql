-- A run's prompt is written once, when the run is made, and is most of its row (a party member's
-- playbook is about 2.5 KB, more than a 2 KiB page holds). In `agent_runs` it spilled onto an
-- overflow page, and each later update of the run (started, ended) rewrote the whole record:
-- a new overflow page, the old one freed, for every member, twice. It lives in a table of its
-- own now, keyed by its run and removed with it; the runs' rows are small and change in place.
-- Released migrations are never edited: add a new file instead.

CREATE TABLE agent_run_prompts (
    run_id  TEXT PRIMARY KEY REFERENCES agent_runs(id) ON DELETE CASCADE,
    prompt  TEXT NOT NULL
) STRICT;
INSERT INTO agent_run_prompts (run_id, prompt) SELECT id, prompt FROM agent_runs;
ALTER TABLE agent_runs DROP COLUMN prompt;
