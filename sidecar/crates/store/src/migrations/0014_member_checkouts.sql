-- The conflict radar asks, at each look (up to four a second while members complete), whether a
-- running party has any member with a checkout of its own. Without an index that was a walk over
-- all the party's members: a look cost as much as the party is large. This index holds only the
-- members with a branch, so the answer is one probe.
-- Released migrations are never edited: add a new file instead.

CREATE INDEX idx_party_members_checkout ON party_members(party_id) WHERE branch_name IS NOT NULL;
