-- pollwarden schema 10: the deliveries of provider pushes seen (issue 27), so a replayed push is known by its
-- delivery id and changes nothing, across restarts and across the receivers of one fleet. A row is the id the
-- provider gave the delivery (or the body's SHA-256) under the contract it came in for, and when it came; rows
-- older than the receivers' memory (`store.base.PUSH_MEMORY`) are deleted as new ones come.
CREATE TABLE push_deliveries (
    contract_name {id} NOT NULL,
    delivery_id {id} NOT NULL,
    received_at {time} NOT NULL,
    PRIMARY KEY (contract_name, delivery_id)
){strict};

CREATE INDEX push_deliveries_received ON push_deliveries (received_at);
