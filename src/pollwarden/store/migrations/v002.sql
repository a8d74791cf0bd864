-- pollwarden schema 2: find the operations of one job (the admission rule "never a fresh budget for an
-- existing operation of the same job" asks before it creates one). Both columns have been filled from
-- the record since schema 1, so there is nothing to back-fill.
CREATE INDEX operations_job ON operations (contract_name, job_id);
