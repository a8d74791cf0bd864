-- pollwarden schema 8: rows the audit vouches for, and a witness that holds (issue 23).
--
-- Each signed head now also commits to the rows its commit changed (docs/audit.md, "Rows the audit vouches
-- for"): audit_heads.vouches is canonical JSON [[log_id, state_hash, identity_hash or null], ...]. Heads
-- written before this schema hold '' there, and their hash is computed as it always was. A store upgraded
-- with operations in it gets a mark in audit_vouches_pending: its next head vouches for every row as it
-- stands (like schema 3's first head over every log), and until then `audit verify` says the rows are not
-- yet vouched for.
ALTER TABLE audit_heads ADD COLUMN vouches text NOT NULL DEFAULT '';

CREATE TABLE audit_vouches_pending (
    row_count {int} NOT NULL
){strict};

-- The rows to vouch for: the operations and the installed contracts (schema 6's registry) already there.
INSERT INTO audit_vouches_pending (row_count)
SELECT n FROM (SELECT (SELECT COUNT(*) FROM operations) + (SELECT COUNT(*) FROM contracts) AS n) AS found WHERE n > 0;

-- A change of signing key, signed by the old key: "after head #counter (head_hash), heads are signed by
-- new_public" (`pollwarden audit rotate-key`). A verifier follows these from the key of any head kept
-- elsewhere to the key of the newest head; a key with no such link is a key replaced, which is tampering.
CREATE TABLE audit_key_rotations (
    counter {int} PRIMARY KEY,
    head_hash text NOT NULL,
    at text NOT NULL,
    old_public text NOT NULL,
    new_public text NOT NULL,
    signature text NOT NULL
){strict};

-- Settings the audit log vouches for, each row with a log of its own (`@audit/witness`: where heads are
-- kept elsewhere), so a verifier knows them from the store and a setting removed behind its back is seen.
CREATE TABLE audit_settings (
    log_id {id} PRIMARY KEY,
    value text NOT NULL,
    at text NOT NULL
){strict};

-- A row whose record cannot be decoded is set aside by the claim that met it (why, in words): the fleet claim
-- skips it from then on, and `status` and the workers' gauge count it. Not vouched for (like the lease).
ALTER TABLE operations ADD COLUMN unreadable text;

CREATE INDEX operations_unreadable ON operations (operation_id) WHERE unreadable IS NOT NULL;
