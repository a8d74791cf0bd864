-- pollwarden schema 15: one operation's decisions read by index (status, story, the console's page of it, MCP).
--
-- Schema 1's decisions_open holds open decisions only, so every decision of one operation was a read of the whole
-- table and a sort, on SQLite (no statistics) and PostgreSQL alike. This index serves that read in its order.
CREATE INDEX decisions_operation ON decisions (operation_id, created_at, decision_id);
