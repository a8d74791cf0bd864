-- pollwarden schema 14: a contract's learnt samples read across its keys (issue 26, `[schedule] learn_key`).
--
-- Samples are kept under the value of the contract's `learn_key` (a model, an endpoint, a size class; '' for
-- none). A key with fewer than 20 ended operations is planned from its contract's whole history, the newest
-- samples of every key: schema 12's index (contract, sample_key, ended_at) serves one key's read, this one the
-- read across keys, newest first, without sorting the contract's rows.
CREATE INDEX learnt_samples_contract_recent ON learnt_samples (contract, ended_at);
