-- Tokens and money spent by executor runs. A run's row counts its own usage plus that of the
-- runs it started (rolled up when reported); a party's row counts all of its members'.
CREATE TABLE usage_totals (
    scope          TEXT NOT NULL CHECK (scope IN ('run', 'party')),
    id             TEXT NOT NULL,
    input_tokens   INTEGER NOT NULL DEFAULT 0,
    output_tokens  INTEGER NOT NULL DEFAULT 0,
    cost_usd       REAL NOT NULL DEFAULT 0,
    PRIMARY KEY (scope, id)
) STRICT, WITHOUT ROWID;
