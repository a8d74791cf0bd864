-- pollwarden schema 7: the outbox (issue 23). What a commit announces to the world outside (a decision request's
-- webhook, the newest signed head for the home's witness) is written here in the transaction that commits it, so
-- a crash never loses one, and nothing on the polling path waits for a receiver. A delivery loop of each
-- long-running process (src/pollwarden/outbox.py) claims what is due with a lease, as operations are claimed, so
-- two processes never send one delivery at once; it retries with backoff and gives a webhook up (audited) after
-- its attempts or its age. A delivered row is deleted; a webhook given up stays, status 'failed', for
-- `pollwarden outbox` to show.
-- kind 'webhook': subject is the decision id, operation_id the log its outcome is audited in.
-- kind 'witness': subject is the witness's key (a hash of its location: the location itself is not stored), head
-- the counter of the newest head it has not taken. One row per witness: a newer head replaces the pending one.
-- queued_by names the process whose commit queued it (host:pid:nonce), so a `watch` that ends can wait, briefly,
-- for its own deliveries.
CREATE TABLE outbox (
    delivery_id {id} PRIMARY KEY,
    kind text NOT NULL,
    subject text NOT NULL,
    operation_id text,
    head {int},
    status text NOT NULL,
    attempts {int} NOT NULL DEFAULT 0,
    created_at {time} NOT NULL,
    next_attempt_at {time} NOT NULL,
    queued_by text NOT NULL,
    lease_owner text,
    lease_token {int} NOT NULL DEFAULT 0,
    lease_expires_at {time},
    last_status {int},
    last_error text
){strict};

-- A delivery loop asks for the pending ones in due order.
CREATE INDEX outbox_due ON outbox (next_attempt_at) WHERE status = 'pending';
