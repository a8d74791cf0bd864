-- pollwarden schema 3: one signed head per committed transaction, over every log at once (docs/audit.md,
-- "Signed heads"). Each row chains onto the one before it (prev_hash) and lists the logs that commit
-- appended to (changes: canonical JSON [[log_id, seq, this_hash], ...]), so the newest head commits to the
-- whole history, hence to the size and last hash of every log: a log deleted or cut short, or heads
-- deleted, no longer verifies. Rows are written under one lock (PostgreSQL: an advisory lock taken just
-- before commit; SQLite: the file's write lock), so counter is dense and MAX(counter) + 1 is the next one.
-- A store upgraded from schema 2 gets its first head from `pollwarden db upgrade` or the first write, which
-- covers every log as it stood (its changes list them all).
CREATE TABLE audit_heads (
    counter {int} PRIMARY KEY,
    prev_hash text NOT NULL,
    changes text NOT NULL,
    logs {int} NOT NULL,
    records {int} NOT NULL,
    at text NOT NULL,
    head_hash text NOT NULL,
    key_id text NOT NULL,
    signature text NOT NULL
){strict};
