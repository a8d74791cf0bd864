"""Who watches an operation and whether it is stuck, driven by the clock and a stand-in for process liveness."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

from pollwarden.core.reasons import Phase, StopReason
from pollwarden.report.ownership import lease_ttl_of, ownership_of
from pollwarden.store.base import Stored
from pollwarden.store.owner import parse_owner, process_owner

from ..core.support import T0, contract_text, make_contract, make_record

TEXT = contract_text()
TTL = lease_ttl_of(TEXT)  # timeout 30 s: 65 s
WATCH = "watch/web-1:4242:ab12"


def stored(*, watcher: str | None = WATCH, lease: str | None = None, due_in: float = 0, **changes: Any) -> Stored:
    record = replace(make_record(make_contract()), next_poll_at=T0 + timedelta(seconds=due_in), **changes)
    return Stored(
        record,
        TEXT,
        lease,
        3,
        T0 + timedelta(seconds=10) if lease else None,
        watcher=watcher,
        watcher_since=T0 - timedelta(minutes=3) if watcher else None,
    )


def test_a_live_watcher_between_polls_is_named_with_since_when_and_nothing_is_flagged() -> None:
    owned = ownership_of(stored(due_in=12), T0, alive=lambda _: True)
    assert owned.owner is not None and (owned.owner.kind, owned.owner.host, owned.owner.pid) == ("watch", "web-1", 4242)
    assert owned.describe(T0) == "watch on web-1 (pid 4242), since 3m ago"
    assert owned.flags == [] and owned.to_json()["owner_since"] == "2025-04-18T10:17:00Z"


def test_due_longer_ago_than_the_lease_ttl_is_overdue_and_a_gone_watcher_orphans_it() -> None:
    late = -(TTL.total_seconds() + 1)
    assert ownership_of(stored(due_in=late), T0, alive=lambda _: True).flags == ["overdue"]
    assert ownership_of(stored(due_in=late + 2), T0, alive=lambda _: True).flags == []  # within the TTL: fine
    gone = ownership_of(stored(due_in=5), T0, alive=lambda _: False)
    assert gone.flags == ["orphaned"] and "gone" in gone.describe(T0)
    assert ownership_of(stored(due_in=late), T0, alive=lambda _: False).flags == ["overdue", "orphaned"]


def test_a_holder_killed_mid_step_is_not_polling_and_a_live_one_is() -> None:
    holder = "api/web-1:77:cd"
    assert ownership_of(stored(lease=holder, watcher=holder), T0, alive=lambda _: False).flags == ["orphaned"]
    polling = ownership_of(stored(lease=holder, watcher=holder, due_in=-600), T0, alive=lambda _: None)
    assert polling.leased and polling.flags == [] and "polling now" in polling.describe(T0)


def test_a_dead_worker_orphans_nothing_the_fleet_would_take_and_elsewhere_is_unknown() -> None:
    worker = "worker/db-2:9:ef"
    assert ownership_of(stored(watcher=worker), T0, alive=lambda _: False).flags == []
    elsewhere = ownership_of(stored(watcher=worker), T0, alive=lambda _: None)
    assert elsewhere.alive is None and "on another host" in elsewhere.describe(T0)


def test_final_operations_and_unclaimed_ones_flag_nothing() -> None:
    final = stored(due_in=-3600, phase=Phase.STOPPED, reason=StopReason.DEADLINE_EXCEEDED)
    assert ownership_of(final, T0, alive=lambda _: False).flags == []
    fresh = ownership_of(stored(watcher=None, due_in=-5), T0)
    assert fresh.owner is None and fresh.describe(T0) == "nobody yet" and fresh.flags == []
    # Enqueued and never claimed, long past due: no worker is running.
    assert ownership_of(stored(watcher=None, due_in=-600), T0).flags == ["overdue"]


def test_owner_strings_of_every_age_parse() -> None:
    assert parse_owner(process_owner("mcp")).kind == "mcp"
    legacy = parse_owner("web-1:4242:ab12")  # written before kinds existed
    assert (legacy.kind, legacy.host, legacy.pid) == (None, "web-1", 4242)
    assert lease_ttl_of("not a contract") == timedelta(seconds=65)
