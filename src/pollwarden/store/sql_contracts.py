"""The contracts registry's bodies (schema 6), for SQLite and PostgreSQL: the versions an operator installed.

A version is keyed by its digest (the SHA-256 of the exact text its operations store), so installing one twice
is one row and one audit record, and a text nobody installed has no row at all. Each install is sealed in a log
of its own, `@contract/<digest>`, in the transaction that adds the row.
"""

from __future__ import annotations

from datetime import datetime

from ..core.contract.vars import text_digest
from ..events import ContractInstalled
from .base import CONTRACT_LOG_PREFIX, InstalledContract, StoreError
from .common import Row, marks
from .trail import AuditTrail
from .vouching import VOUCHED_CONTRACT_COLUMNS, contract_vouch

_COLUMNS = VOUCHED_CONTRACT_COLUMNS


def contract_log_id(digest: str) -> str:
    """The audit log of one installed contract version ('@' cannot start an operation id: no collision)."""
    return CONTRACT_LOG_PREFIX + digest


class ContractRegistry(AuditTrail):
    """Installing a contract version and looking one up."""

    def install_contract(
        self, name: str, text: str, *, by: str, at: datetime, event: ContractInstalled
    ) -> tuple[InstalledContract, bool]:
        """Install this text under `name` once, with its `contract_installed` event: (the row, whether this call
        added it). A version installed already is left as it was (who installed it first stays on record)."""
        digest = text_digest(text)
        with self._tx() as tx:
            cursor = tx.execute(
                f"INSERT INTO contracts ({_COLUMNS}) VALUES ({marks(5)}) ON CONFLICT (digest) DO NOTHING",
                (digest, name, text, by, self.dialect.stamp(at)),
            )
            added = cursor.rowcount == 1
            row = tx.one(f"SELECT {_COLUMNS} FROM contracts WHERE digest = ?", (digest,))
            if row is None:  # pragma: no cover - the row was there or was just added, in this transaction
                raise StoreError(f"contract {digest} vanished while it was installed")
            installed = self._installed(row)
            if added:  # the head of this commit vouches for the row as read back (`store/vouching.py`)
                self._append(tx, contract_log_id(digest), event, at)
                tx.vouch(*contract_vouch(digest, name, text, by, installed.installed_at))
        return installed, added

    def installed_contract(self, digest: str) -> InstalledContract | None:
        row = self._row(f"SELECT {_COLUMNS} FROM contracts WHERE digest = ?", (digest,))
        return None if row is None else self._installed(row)

    def installed_contracts(self, name: str | None = None) -> list[InstalledContract]:
        """Every installed version (of one contract name), oldest first within a name."""
        where, params = ("WHERE name = ?", (name,)) if name is not None else ("", ())
        rows = self._rows(f"SELECT {_COLUMNS} FROM contracts {where} ORDER BY name, installed_at, digest", params)
        return [self._installed(row) for row in rows]

    def _installed(self, row: Row) -> InstalledContract:
        return InstalledContract(
            digest=str(row[0]),
            name=str(row[1]),
            text=str(row[2]),
            installed_by=str(row[3]),
            installed_at=self.dialect.moment(row[4]),
        )
