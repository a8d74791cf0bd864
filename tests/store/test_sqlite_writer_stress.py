"""Group commit under load: many threads over many stores of one SQLite file, appending, creating operations,
checkpointing and reading the newest head, with some bodies failing on purpose. Whatever the interleaving, the
counts are exact and the audit verifies: every record under the newest head, heads dense and chained."""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path

from pollwarden import events as ev
from pollwarden.audit import load_or_create_keys, verify
from pollwarden.core.contract.parse import parse_contract
from pollwarden.core.record import new_record
from pollwarden.store.sqlite import SQLiteStore

from .test_store import CONTRACT, T0

STORES, THREADS, ROUNDS, SHARED_LOGS = 6, 18, 24, 4


class _Boom(Exception):
    """A body that fails after writing (its records and its changes to the batch's Tx must vanish)."""


def test_many_threads_over_many_stores_keep_exact_counts_and_a_verifiable_trail(tmp_path: Path) -> None:
    keys = load_or_create_keys(tmp_path / "home")
    contract = parse_contract(CONTRACT)
    stores = [SQLiteStore(tmp_path / "state.db", keys=keys) for _ in range(STORES)]
    expected: list[Counter[str]] = [Counter() for _ in range(THREADS)]
    checkpoints = [0] * THREADS
    problems: list[str] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(THREADS)

    def worker(t: int) -> None:
        store, mine, got = stores[t % STORES], f"own-{t}", expected[t]
        barrier.wait(30)
        for i in range(ROUNDS):
            shared = f"shared-{(t + i) % SHARED_LOGS}"
            if i % 6 == 0:
                op = f"op-{t}-{i}"
                store.create(
                    new_record(contract, operation_id=op, job_id=op, now=T0), CONTRACT, ev.Created.prepared({"t": t})
                )
                got[op] += 1
            else:
                store.append_many(
                    [(shared, ev.Paced.prepared({"t": t, "i": i})), (mine, ev.Paced.prepared({"i": i}))], T0
                )
                got[shared] += 1
                got[mine] += 1
            if i % 4 == 1:
                try:
                    with store._tx() as tx:  # chained onto the heads of logs others in its batch append to
                        store._append(tx, shared, ev.Paced.prepared({"t": t}), T0)
                        store._append(tx, mine, ev.Paced.prepared({}), T0)
                        raise _Boom
                except _Boom:
                    pass
            if i % 7 == 3:
                checkpoints[t] += len(store.checkpoint_heads(T0, [mine]))
            if i % 9 == 4:
                newest = store.newest_head()
                assert newest is not None
                head, state = newest
                if (head.logs, head.records) != (len(state), sum(seq for seq, _ in state.values())):
                    problems.append(f"newest_head paired head #{head.counter} with another state")

    def guarded(t: int) -> None:
        try:
            worker(t)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(t,)) for t in range(THREADS)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert not any(thread.is_alive() for thread in threads), "a writer never returned"
        assert errors == [] and problems == []
        reader = stores[0]
        want = sum(expected, Counter[str]())
        stored = Counter(r.log_id for r in reader.audit_records())
        assert stored == want  # every successful body's records, none of the failed ones'
        assert all(r.kind != "lost" for r in reader.audit_records())
        assert len(reader.audit_checkpoints()) == sum(checkpoints) == THREADS * len(range(3, ROUNDS, 7))
        heads = reader.audit_heads()
        assert [h.counter for h in heads] == list(range(1, len(heads) + 1))  # dense
        assert (heads[-1].logs, heads[-1].records) == (len(want), sum(want.values()))  # the newest covers all
        report = verify(reader.audit_records(), reader.audit_checkpoints(), keys.public_key, heads=heads)
        assert report.ok, report.problems
        assert (report.records, report.logs) == (sum(want.values()), len(want))
    finally:
        for store in stores:
            store.close()
