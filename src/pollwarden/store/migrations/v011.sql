-- pollwarden schema 11: pacing is a due time, not an event per wake-up (issue 25). A worker that finds a
-- provider's next fleet-wide slot far away no longer moves the operation's next_poll_at (which hid it from the
-- due, overdue and oldest-lag gauges while it waited): it sets paced_until, the earliest moment a claim may
-- take it, and writes one `paced` event for the whole wait (`Store.defer_paced`). Any write of the record
-- (its poll, a person's answer) clears the column. Like the lease it is not vouched for: it changes no fact of
-- the operation, only when the fleet looks at it again.
ALTER TABLE operations ADD COLUMN paced_until {time};

-- A worker's sleep (`next_due`) is the earliest of the unpaced due times and the paced ones: the paced are few.
CREATE INDEX operations_paced ON operations (paced_until) WHERE paced_until IS NOT NULL;
