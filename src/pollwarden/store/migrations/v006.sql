-- pollwarden schema 6: the contracts registry (issue 23). Until now each operation carried its whole contract
-- and every runner (a worker, `watch --operation`, `decide`'s cancel, `fetch-result`) ran the stored text with
-- its own environment: whoever could enqueue chose where the workers' credential went and which token command
-- ran on them. Now a runner runs only a version an operator installed: one row per version, keyed by the
-- SHA-256 of the exact text stored with its operations (the merged TOML and the vars, `Contract.digest`).
-- Each install is audited in a log of its own, `@contract/<digest>`.
-- An upgraded store adopts the contracts its operations already carry (installed_by 'schema upgrade 6'), so a
-- running fleet goes on as before; `pollwarden contracts installed` lists them for review. The adoption is done
-- by the code that applies this file (migrations.adopt_stored_contracts): SQLite has no SHA-256 of its own.
-- On PostgreSQL, grant the roles that enqueue SELECT on contracts and keep INSERT for the operators' role.
CREATE TABLE contracts (
    digest {id} PRIMARY KEY,
    name text NOT NULL,
    text text NOT NULL,
    installed_by text NOT NULL,
    installed_at {time} NOT NULL
){strict};

CREATE INDEX contracts_by_name ON contracts (name, installed_at);
