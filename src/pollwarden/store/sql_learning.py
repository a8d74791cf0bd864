"""What each contract's jobs took (`core.learnt`), for SQLite and PostgreSQL: the rows of `learnt_samples`
(schemas 12 and 14), written by the write that ends an operation and read for the contract's learnt schedule."""

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
            " sample_key = excluded.sample_key, ended_at = excluded.ended_at",
            [
                value
                for record, sample in rows
                for value in (
                    record.operation_id,
                    record.contract_name,
                    record.sample_key or "",
                    sample.lower,
                    sample.upper,
                    self.dialect.stamp(now),
                )
            ],
        )

    def learnt_samples(self, contract: str, since: datetime, limit: int, key: str | None = None) -> list[Sample]:
        """The newest `limit` samples of `contract` that ended at or after `since`, of every key or of `key` (an
        indexed read either way: schema 14's index for the whole contract, schema 12's for one key)."""
        if key is None:
            sql = "SELECT lower_s, upper_s FROM learnt_samples WHERE contract = ? AND ended_at >= ?"
            params: tuple[object, ...] = (contract, self.dialect.stamp(since), limit)
        else:
            sql = "SELECT lower_s, upper_s FROM learnt_samples WHERE contract = ? AND sample_key = ? AND ended_at >= ?"
            params = (contract, key, self.dialect.stamp(since), limit)
        # Ties broken by operation id: every process reads the same window in the same order (`core.learnt`).
        rows = self._rows(sql + " ORDER BY ended_at DESC, operation_id DESC LIMIT ?", params)
        return [Sample(float(low), None if high is None else float(high)) for low, high in rows]

    def learnt_keys(self, contract: str, since: datetime) -> list[tuple[str, int]]:
        """Each key `contract`'s samples since `since` were kept under, with how many, most samples first."""
        rows = self._rows(
            "SELECT sample_key, COUNT(*) AS n FROM learnt_samples WHERE contract = ? AND ended_at >= ?"
            " GROUP BY sample_key ORDER BY n DESC, sample_key LIMIT 1000",
            (contract, self.dialect.stamp(since)),
        )
        return [(str(key), int(count)) for key, count in rows]

    def learnt_contracts(self) -> list[tuple[str, int]]:
        """Each contract with samples, and how many it has."""
        rows = self._rows("SELECT contract, COUNT(*) FROM learnt_samples GROUP BY contract ORDER BY contract")
        return [(str(name), int(count)) for name, count in rows]
