-- pollwarden schema 12: what each contract's jobs took (issue 26), for its learnt schedule.
--
-- One row per operation whose waiting ended: its job's duration as the checks bracketed it, in seconds since the
-- operation was created: longer than `lower` (the last check that found it pending), at most `upper` (the first
-- that found it ended); `upper` NULL for an operation stopped while its job still ran (censored). Written in the
-- transaction of the write that ended the operation; a later end (after an extension) replaces it. Derived from
-- the records the audit vouches for, so not vouched for itself. Read per contract and key, newest first.
CREATE TABLE learnt_samples (
    operation_id {id} PRIMARY KEY,
    contract {id} NOT NULL,
    sample_key text NOT NULL DEFAULT '',
    lower_s {float} NOT NULL,
    upper_s {float},
    ended_at {time} NOT NULL
){strict};

CREATE INDEX learnt_samples_recent ON learnt_samples (contract, sample_key, ended_at);
