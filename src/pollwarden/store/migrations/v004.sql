-- pollwarden schema 4: the fleet claim's order, served by an index (issue 13). The claim asks for due active
-- operations "ORDER BY next_poll_at, operation_id LIMIT k"; with an index on next_poll_at alone both backends
-- sorted the whole due backlog on every claim (16-19 ms at 10,000 due rows on SQLite). With both columns in the
-- index the claim reads the first k rows in order and stops. The old index is a prefix of this one: dropped.
-- PostgreSQL builds the index under a lock that holds writers back until it is built: run `pollwarden db
-- upgrade` with the workers stopped, as for every migration.
CREATE INDEX operations_due_order ON operations (next_poll_at, operation_id) WHERE phase = 'active';
DROP INDEX operations_due;
