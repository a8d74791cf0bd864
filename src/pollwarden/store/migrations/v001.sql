-- pollwarden schema 1 for PostgreSQL: the same tables and columns as the SQLite backend.
-- Times the database compares (due, deadlines, leases) are timestamptz. Times that are hashed or signed
-- (audit_records.at, audit_checkpoints.at) stay text: the chain covers their exact RFC 3339 spelling.
-- JSON documents are text, not jsonb: jsonb rejects the \u0000 escape a provider's error text may carry,
-- and reorders keys, and the record must read back exactly as the SQLite backend returns it.
-- Identifiers are COLLATE "C": byte order, as SQLite sorts them, so listings and exports come out in the
-- same order on both backends, and the primary-key indexes serve those ORDER BYs.

CREATE TABLE operations (
    operation_id text COLLATE "C" PRIMARY KEY,
    job_id text NOT NULL,
    contract_name text NOT NULL,
    phase text NOT NULL,
    next_poll_at timestamptz NOT NULL,
    deadline_at timestamptz NOT NULL,
    status_requests_used bigint NOT NULL,
    max_status_requests bigint NOT NULL,
    record text NOT NULL,
    contract text NOT NULL,
    lease_owner text,
    lease_token bigint NOT NULL DEFAULT 0,
    lease_expires_at timestamptz,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL
);

-- The fleet claim scans only rows that can still be polled, in due order.
CREATE INDEX operations_due ON operations (next_poll_at) WHERE phase = 'active';

CREATE TABLE audit_records (
    log_id text COLLATE "C" NOT NULL,
    seq bigint NOT NULL,
    at text NOT NULL,
    kind text NOT NULL,
    prev_hash text NOT NULL,
    ciphertext bytea NOT NULL,
    this_hash text NOT NULL,
    PRIMARY KEY (log_id, seq)
);

CREATE TABLE decisions (
    decision_id text COLLATE "C" PRIMARY KEY,
    operation_id text NOT NULL,
    status text NOT NULL,
    created_at timestamptz NOT NULL,
    request text NOT NULL,
    decided_by text,
    decided_at timestamptz,
    option bigint,
    note text
);

CREATE INDEX decisions_open ON decisions (operation_id) WHERE status = 'open';

CREATE TABLE submissions (
    operation_id text COLLATE "C" PRIMARY KEY,
    fingerprint text NOT NULL,
    idempotency_token text,
    body bytea NOT NULL,
    state text NOT NULL,
    job_id text,
    status_location text,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL
);

-- Agent approvals (a whole session, or one provider call); each change is audited in the session's log.
CREATE TABLE grants (
    grant_id text COLLATE "C" PRIMARY KEY,
    kind text NOT NULL,
    subject text NOT NULL,
    scope text NOT NULL,
    status text NOT NULL,
    requested_at timestamptz NOT NULL,
    detail text NOT NULL,
    decided_by text,
    decided_at timestamptz
);

CREATE TABLE audit_checkpoints (
    counter bigint PRIMARY KEY,
    log_id text COLLATE "C" NOT NULL,
    seq bigint NOT NULL,
    head_hash text NOT NULL,
    at text NOT NULL,
    key_id text NOT NULL,
    signature text NOT NULL
);

-- Checkpoint counters come from a sequence so that writers on different logs never queue on one lock.
-- A rolled-back transaction leaves a gap; the verifier only needs counters to grow, not to be dense.
CREATE SEQUENCE audit_checkpoint_counter AS bigint OWNED BY audit_checkpoints.counter;

-- Fleet-wide pacing per provider: the next free request slot, shared by every worker.
CREATE TABLE provider_pacing (
    provider text COLLATE "C" PRIMARY KEY,
    interval_seconds double precision NOT NULL,
    next_slot_at timestamptz NOT NULL
);
