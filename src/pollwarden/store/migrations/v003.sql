-- pollwarden schema 3: one signed head per committed transaction, over every log at once (docs/audit.md,
-- "Signed heads"). Each row chains onto the one before it (prev_hash) and lists the logs that commit
-- appended to (changes: canonical JSON [[log_id, seq, this_hash], ...]), so the newest head commits to the
-- whole history, hence to the size and last hash of every log: a log deleted or cut short, or heads
-- deleted, no longer verifies. Rows are written under one lock (PostgreSQL: an advisory lock taken just
-- before commit; SQLite: the file's write lock), so counter is dense and MAX(counter) + 1 is the next one.
-- A store upgraded from schema 2 with records in it gets a mark in audit_heads_pending instead: its first
-- head (the first write, or `pollwarden audit checkpoint`) covers every log as it stands and removes the
-- mark. Without the mark, records that no head covers are reported as tampering: heads deleted are never
-- quietly replaced by a new first head.
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

CREATE TABLE audit_heads_pending (
    records {int} NOT NULL
){strict};

INSERT INTO audit_heads_pending (records) SELECT COUNT(*) FROM audit_records HAVING COUNT(*) > 0;
