-- Best of N (landing the work): for a role that runs N attempts and picks one, who is picking
-- (its judge's run) and which attempt was picked. One row per role of a party; a pick is final.
-- Released migrations are never edited: add a new file instead.

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
