-- A live leader (seed 000): a flow edge may wait for a signal (`"developer": ["leader:signal"]`)
-- instead of the role's completion; the roles released by a signal so far are kept with the
-- party, so a restarted daemon does not hold them back again. Released migrations are never
-- edited: add a new file instead.

ALTER TABLE parties ADD COLUMN released TEXT NOT NULL DEFAULT '[]';   -- JSON array of role names
