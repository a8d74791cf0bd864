-- pollwarden schema 13: each contract's newest active operation, found without reading the table (issue 28).
--
-- The console's urgency (`active_contracts`) and the fleet's counts (`fleet_counts`) read the contract text of
-- each contract's newest active operation for its lease TTL. Without this index PostgreSQL sorts every active row
-- of the contract, a scan of the table's kilobyte-wide rows (about 30 ms a contract at 10,000 operations); with it
-- each is one index probe read backwards, then one row.
CREATE INDEX operations_newest_active ON operations (contract_name, created_at, operation_id) WHERE phase = 'active';
