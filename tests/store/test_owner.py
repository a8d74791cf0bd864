"""Who may take a lease before it runs out: a holder proved dead (this host, this boot, this PID namespace, its
pid gone), and nobody else.

A pid means a process only within one PID namespace of one boot: a claimer in a container that shares the host's
network (and so its host name) looked the holder's pid up in its own namespace, found nothing, and took the lease
of a live worker mid-request. The claimer here really runs in a second PID namespace (`unshare --pid --fork
--mount-proc`, which needs root, as CI has); the holder is this test's own process, alive throughout.
"""

from __future__ import annotations

import json
import os
import subprocess
from datetime import timedelta
from pathlib import Path

import pytest

from pollwarden import events as ev
from pollwarden.report.ownership import ownership_of
from pollwarden.store.owner import holder_dead, owner_alive, parse_owner, process_owner, this_host, this_place
from tests.namespaces import run_there

from .conftest import AnyStore, Backend
from .test_store import CONTRACT, T0, TTL, _record

CLAIM_THERE = """
import json, sys
from datetime import datetime, timedelta
from pollwarden.audit import load_or_create_keys
from pollwarden.store.open import open_store
from pollwarden.store.owner import holder_dead, process_owner, this_place
target, keys, holder, at = sys.argv[1:]
store = open_store(target, keys=load_or_create_keys(keys), trusted_checkpoint_path=None)
try:
    claimed = store.claim("op", process_owner("watch"), datetime.fromisoformat(at), timedelta(seconds=10))
finally:
    store.close()
print(json.dumps({"taken": claimed is not None, "dead": holder_dead(holder), "place": this_place()}))
"""


@pytest.mark.slow  # starts a process: `make test` only (tests/conftest.py FAST)
def test_a_live_holder_is_not_taken_over_from_another_pid_namespace(store: AnyStore, backend: Backend) -> None:
    store.create(_record(), CONTRACT, ev.Created.prepared({}))
    holder = process_owner("worker")  # this test's process: alive until the test ends
    assert store.claim("op", holder, T0, TTL) is not None
    later = (T0 + timedelta(seconds=1)).isoformat()
    seen = json.loads(run_there(CLAIM_THERE, str(backend.target), str(backend.home), holder, later))
    # The same host and boot, another namespace: the holder's pid means nothing there, which proves nothing.
    assert seen["place"][0] == this_place()[0] and seen["place"][1] != this_place()[1]
    assert seen == {"taken": False, "dead": False, "place": seen["place"]}
    stored = store.get("op")
    assert stored is not None and stored.lease_owner == holder and stored.lease_token == 1
    assert [event.kind for event in store.events("op")].count("lease_taken_over") == 0


@pytest.mark.slow  # starts a process: `make test` only (tests/conftest.py FAST)
def test_a_dead_holder_of_this_namespace_is_taken_over_at_once_and_one_of_elsewhere_is_waited_out(
    store: AnyStore,
) -> None:
    dead = _dead_pid()
    boot, pidns = this_place()
    if boot is None or pidns is None:
        pytest.skip("no /proc here: nothing can be proved dead, every lease runs out")
    for n, owner in enumerate(
        [
            f"watch/{this_host()}:{dead}:aa",  # written before boots and namespaces were: unprovable
            f"watch/{this_host()}:{dead}:aa:{'0' * 16}:{pidns}",  # another boot of this host
            f"watch/{this_host()}:{dead}:aa:{boot}:1",  # another PID namespace
            f"watch/elsewhere-{this_host()}:{dead}:aa:{boot}:{pidns}",  # another host
        ]
    ):
        op = f"op-{n}"
        store.create(_record(op), CONTRACT, ev.Created.prepared({}))
        assert store.claim(op, owner, T0, TTL) is not None
        assert owner_alive(owner) is None and not holder_dead(owner), owner
        assert store.claim(op, process_owner("api"), T0 + timedelta(seconds=1), TTL) is None, owner
        assert store.claim(op, process_owner("api"), T0 + TTL, TTL) is not None, owner  # once it ran out
    provable = process_owner("watch", pid=dead)
    store.create(_record("op-dead"), CONTRACT, ev.Created.prepared({}))
    assert store.claim("op-dead", provable, T0, TTL) is not None
    assert owner_alive(provable) is False
    taken = store.claim("op-dead", process_owner("api"), T0 + timedelta(seconds=1), TTL)
    assert taken is not None and taken[0].token == 2


def test_owner_strings_say_where_their_pid_means_something() -> None:
    owner = parse_owner(process_owner("worker"))
    assert (owner.kind, owner.host, owner.pid) == ("worker", this_host(), os.getpid())
    assert (owner.boot, owner.pidns) == this_place()
    assert owner_alive(process_owner("worker")) is True
    older = parse_owner("watch/web-1:4242:ab12")
    assert (older.kind, older.host, older.pid, older.boot, older.pidns) == ("watch", "web-1", 4242, None, None)
    legacy = parse_owner("web-1:4242:ab12")
    assert (legacy.kind, legacy.host, legacy.pid) == (None, "web-1", 4242)


@pytest.mark.slow  # starts a process: `make test` only (tests/conftest.py FAST)
def test_status_names_a_watcher_it_cannot_see_by_where_it_ran(store: AnyStore) -> None:
    """A watcher in another PID namespace is neither alive nor gone to `status`: it says where it ran, and the
    operation is not flagged orphaned (nobody knows it is)."""
    boot, pidns = this_place()
    if boot is None or pidns is None:
        pytest.skip("no /proc here")
    store.create(_record(), CONTRACT, ev.Created.prepared({}))
    there = f"watch/{this_host()}:{_dead_pid()}:aa:{boot}:{int(pidns) + 1}"
    claimed = store.claim("op", there, T0, TTL)
    assert claimed is not None
    store.release(claimed[0])
    stored = store.get("op")
    assert stored is not None
    shown = ownership_of(stored, T0 + timedelta(seconds=5))
    assert shown.alive is None and shown.flags == []
    assert shown.describe(T0 + timedelta(seconds=5)).endswith("in another PID namespace")


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()  # reaped: the pid names no process now
    return proc.pid


@pytest.mark.slow  # starts a process: `make test` only (tests/conftest.py FAST)
def test_the_claimer_in_a_new_namespace_is_really_elsewhere(tmp_path: Path) -> None:
    """The instrument itself: a process in the second namespace sees another PID namespace and the same boot."""
    seen = run_there(
        "import json, os; from pollwarden.store.owner import this_place; print(json.dumps([os.getpid(), this_place()]))"
    )
    pid, (boot, pidns) = json.loads(seen)
    assert pid == 1 and boot == this_place()[0] and pidns != this_place()[1]


@pytest.mark.parametrize("pid", ["²", "9" * 5000, str(2**31), str(2**63)])
def test_an_owner_whose_pid_is_no_pid_proves_nothing_and_raises_nothing(pid: str) -> None:
    """A stored owner is read back from a row: every fleet claim now reads every holder, so one whose pid text is
    a digit that int() refuses, or a number past the kernel's reach, must not stop the claim (it raised ValueError
    or OverflowError); it proves nothing, so its lease runs out."""
    boot, pidns = this_place()
    owner = f"worker/{this_host()}:{pid}:aa:{boot or ''}:{pidns or ''}"
    assert owner_alive(owner) is None and not holder_dead(owner)
    assert parse_owner(owner).pid is None or parse_owner(owner).pid == int(pid)
