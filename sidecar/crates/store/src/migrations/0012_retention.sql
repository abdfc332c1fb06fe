-- Retention (`troupe gc`, and the daemon's own hourly pass) removes ended sessions nothing refers
-- to. SQLite checks each removed session against the messages it sent, which without an index on
-- the sender is a scan of every message per session. The idempotency look-up's partial index
-- becomes a full one on the same columns: a keyed send touches as many indexes as before, and the
-- look-up (sender and key) uses it as it did.
-- Released migrations are never edited: add a new file instead.

DROP INDEX idx_ism_idempotency;
CREATE INDEX idx_ism_sender ON inter_session_messages(from_session_id, idempotency_key);
