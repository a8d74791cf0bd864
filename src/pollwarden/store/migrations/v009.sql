-- pollwarden schema 9: a console for 10,000 operations (issue 28).
--
-- A decision's reason as a column: the stop reason of the operation it is about, or what an active operation's
-- question is about (`DecisionRequest.why`: "cancel"), so the console groups open decisions and the gauges label
-- them without parsing each request. Back-filled from the request each row already holds.
ALTER TABLE decisions ADD COLUMN reason text;

-- only sqlite
UPDATE decisions SET reason = COALESCE(json_extract(request, '$.reason'), json_extract(request, '$.topic'), 'stop');

-- only postgresql
UPDATE decisions SET reason = COALESCE(request::json ->> 'reason', request::json ->> 'topic', 'stop');

-- The open decisions by reason, oldest first: the console's groups and pages of them.
CREATE INDEX decisions_open_reason ON decisions (reason, created_at) WHERE status = 'open';

-- The console's page of operations reads every row's urgency but only its page's records: this index holds every
-- column the ranking, the filters, the search and the fleet's counts read (all but the record and the contract
-- texts, a kilobyte or more a row), so they scan it instead of the table, and a page of 50 reads 50 records.
CREATE INDEX operations_console ON operations (
    phase, contract_name, next_poll_at, updated_at, created_at, lease_expires_at, lease_owner, watcher, unreadable,
    job_id, operation_id
);

-- The fleet's count of rows set aside, per contract (`fleet_counts`): without it the count reads every row.
CREATE INDEX operations_unreadable_contract ON operations (contract_name) WHERE unreadable IS NOT NULL;
