-- pollwarden schema 15: one operation's decisions read by index (status, story, the console's page of it, MCP).
--
-- Schema 1's decisions_open holds open decisions only, so every decision of one operation was a read of the whole
-- table and a sort, on SQLite (no statistics) and PostgreSQL alike. This index serves that read in its order.
CREATE INDEX decisions_operation ON decisions (operation_id, created_at, decision_id);

-- The fleet claim's look for dead holders (`dead_holders_query`) reads the holders of due rows. Through
-- operations_due_order it read every due row's lease from the table, and sorted them for its GROUP BY: 31 ms a look
-- at 50,000 due on SQLite, paid once a second by every claimer on a long backlog. Leases are given back on release,
-- so the rows held are the ones in flight (and a dead holder's): this index reads only them, by holder.
CREATE INDEX operations_held ON operations (lease_owner, lease_expires_at) WHERE phase = 'active' AND lease_owner IS NOT NULL;

-- The console's newest answered decisions (`RECENT_DECISIONS`), newest first: without it every answered decision
-- was read and sorted for a page of them, 18 ms a console view at 27,000 answered on SQLite.
CREATE INDEX decisions_answered ON decisions (decided_at, decision_id) WHERE status <> 'open' AND decided_at IS NOT NULL;
