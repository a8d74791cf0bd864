-- pollwarden schema 5: who watches an operation (issue 15). A lease is held only for one step, so between polls
-- nothing in schema 4 said whether anyone was still watching: an `active` operation whose `pollwarden watch` had
-- died looked like one that was merely waiting. Every claim now also records its owner as the operation's
-- watcher ("kind/host:pid:nonce", store/owner.py), and since when that owner has been stepping it. A release
-- leaves both as they are, so `status` can ask whether that owner is still alive. Older rows have no watcher
-- until their next claim.
ALTER TABLE operations ADD COLUMN watcher text;
ALTER TABLE operations ADD COLUMN watcher_since {time};
