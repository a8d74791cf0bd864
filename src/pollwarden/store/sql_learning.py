"""What each contract's jobs took (`core.learnt`), for SQLite and PostgreSQL: the rows of `learnt_samples`
(schema 11), written by the write that ends an operation and read for the contract's learnt schedule."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from ..core.learnt import Sample, sample_of
from ..core.record import OperationRecord
from .common import Tx, marks
from .sql_reads import Reads


class LearntSamples(Reads):
    """The samples' writes (inside a fenced write's transaction) and reads."""

    def _insert_samples(self, tx: Tx, ended: Sequence[OperationRecord], now: datetime) -> None:
        """What each operation that just ended says of its job's duration (`core.learnt.sample_of`), in the write
        that ended it: the contract's learnt schedule reads these, never the records themselves."""
        rows = [(record, sample) for record in ended if (sample := sample_of(record)) is not None]
        if not rows:
            return
        tx.execute(
            "INSERT INTO learnt_samples (operation_id, contract, sample_key, lower_s, upper_s, ended_at) VALUES "
            + ",".join([f"({marks(6)})"] * len(rows))
            + " ON CONFLICT (operation_id) DO UPDATE SET lower_s = excluded.lower_s, upper_s = excluded.upper_s,"
            " ended_at = excluded.ended_at",
            [
                value
                for record, sample in rows
                for value in (
                    record.operation_id,
                    record.contract_name,
                    "",
                    sample.lower,
                    sample.upper,
                    self.dialect.stamp(now),
                )
            ],
        )

    def learnt_samples(self, contract: str, since: datetime, limit: int) -> list[Sample]:
        """The newest `limit` samples of `contract` that ended at or after `since` (an indexed read)."""
        rows = self._rows(
            "SELECT lower_s, upper_s FROM learnt_samples WHERE contract = ? AND sample_key = '' AND ended_at >= ?"
            " ORDER BY ended_at DESC LIMIT ?",
            (contract, self.dialect.stamp(since), limit),
        )
        return [Sample(float(low), None if high is None else float(high)) for low, high in rows]

    def learnt_contracts(self) -> list[tuple[str, int]]:
        """Each contract with samples, and how many it has."""
        rows = self._rows("SELECT contract, COUNT(*) FROM learnt_samples GROUP BY contract ORDER BY contract")
        return [(str(name), int(count)) for name, count in rows]
