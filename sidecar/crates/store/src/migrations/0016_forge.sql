-- The forge: a party's link to the forge's issue it started from and the pull request it
-- delivered (with where that stands: CI rounds, ready, merged), the forge's things already
-- handled (webhook deliveries, comments, reviews, failed checks: each handled once), and the
-- cursors of the polls (an ETag, a `since`).
-- Released migrations are never edited: add a new file instead.

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
CREATE INDEX idx_forge_links_state ON forge_links(state);

CREATE TABLE forge_seen (
    key        TEXT PRIMARY KEY,
    party_id   TEXT,
    created_at TEXT NOT NULL
);

CREATE TABLE forge_cursors (
    key        TEXT PRIMARY KEY,
    value      TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
