-- One inbox (everything that waits for a person): the items a person dismissed (an escalation
-- read, a merge conflict dealt with by hand). The items themselves are derived from live state.
-- Released migrations are never edited: add a new file instead.

CREATE TABLE inbox_dismissed (
    item_id      TEXT PRIMARY KEY,
    dismissed_at TEXT NOT NULL
) STRICT;
