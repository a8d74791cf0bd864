-- pollwarden schema 1: the same tables and columns on both backends ({tokens}: see DIALECTS).
-- Times the database compares (due, deadlines, leases) are {time}: timestamptz on PostgreSQL, epoch
-- seconds on SQLite. Times that are hashed or signed (audit_records.at, audit_checkpoints.at) stay text:
-- the chain covers their exact RFC 3339 spelling.
-- JSON documents are text, not jsonb: jsonb rejects the \u0000 escape a provider's error text may carry,
-- and reorders keys, and the record must read back exactly as the SQLite backend returns it.
-- Identifiers are {id}: byte order on both backends, so listings and exports come out in the same order,
-- and the primary-key indexes serve those ORDER BYs.

CREATE TABLE operations (
    operation_id {id} PRIMARY KEY,
    job_id text NOT NULL,
    contract_name text NOT NULL,
    phase text NOT NULL,
    next_poll_at {time} NOT NULL,
    deadline_at {time} NOT NULL,
    status_requests_used {int} NOT NULL,
    max_status_requests {int} NOT NULL,
    record text NOT NULL,
    contract text NOT NULL,
    lease_owner text,
    lease_token {int} NOT NULL DEFAULT 0,
    lease_expires_at {time},
    created_at {time} NOT NULL,
    updated_at {time} NOT NULL
){strict};

-- The fleet claim scans only rows that can still be polled, in due order.
CREATE INDEX operations_due ON operations (next_poll_at) WHERE phase = 'active';

CREATE TABLE audit_records (
    log_id {id} NOT NULL,
    seq {int} NOT NULL,
    at text NOT NULL,
    kind text NOT NULL,
    prev_hash text NOT NULL,
    ciphertext {bytes} NOT NULL,
    this_hash text NOT NULL,
    PRIMARY KEY (log_id, seq)
){strict};

CREATE TABLE decisions (
    decision_id {id} PRIMARY KEY,
    operation_id text NOT NULL,
    status text NOT NULL,
    created_at {time} NOT NULL,
    request text NOT NULL,
    decided_by text,
    decided_at {time},
    option {int},
    note text
){strict};

CREATE INDEX decisions_open ON decisions (operation_id) WHERE status = 'open';

CREATE TABLE submissions (
    operation_id {id} PRIMARY KEY,
    fingerprint text NOT NULL,
    idempotency_token text,
    body {bytes} NOT NULL,
    state text NOT NULL,
    job_id text,
    status_location text,
    created_at {time} NOT NULL,
    updated_at {time} NOT NULL
){strict};

-- Agent approvals (a whole session, or one provider call); each change is audited in the session's log.
CREATE TABLE grants (
    grant_id {id} PRIMARY KEY,
    kind text NOT NULL,
    subject text NOT NULL,
    scope text NOT NULL,
    status text NOT NULL,
    requested_at {time} NOT NULL,
    detail text NOT NULL,
    decided_by text,
    decided_at {time}
){strict};

CREATE TABLE audit_checkpoints (
    counter {int} PRIMARY KEY,
    log_id {id} NOT NULL,
    seq {int} NOT NULL,
    head_hash text NOT NULL,
    at text NOT NULL,
    key_id text NOT NULL,
    signature text NOT NULL
){strict};

-- Checkpoint counters come from a sequence so that writers on different logs never queue on one lock.
-- A rolled-back transaction leaves a gap; the verifier only needs counters to grow, not to be dense.
-- SQLite has one writer at a time, so there the next counter is the largest one plus one.
-- only postgresql
CREATE SEQUENCE audit_checkpoint_counter AS bigint OWNED BY audit_checkpoints.counter;

-- Fleet-wide pacing per provider: the next free request slot, shared by every worker.
CREATE TABLE provider_pacing (
    provider {id} PRIMARY KEY,
    interval_seconds {float} NOT NULL,
    next_slot_at {time} NOT NULL
){strict};
