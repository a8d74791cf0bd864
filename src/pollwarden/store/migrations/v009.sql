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

-- The console's search by job id over every contract (operations_job serves one contract's jobs).
CREATE INDEX operations_job_id ON operations (job_id);

-- The console's pages of operations that ended, newest first, and its filter by phase.
CREATE INDEX operations_phase_updated ON operations (phase, updated_at);
