"""Benchmark of the audit log: verify throughput on a real store, and append cost, next to raw SHA-256.

The real-store figure comes first: the bench builds a SQLite home the way a fleet writes one (600 logs,
20,000 records, one signed head per committed transaction), then times `pollwarden audit verify`'s own
path (`operating.verify_home`: snapshot, heads, records, verify) and, in the same run, raw SHA-256 over the
same ciphertext bytes. The in-memory figure (records already in a list) stays beside it.

Not a test: it prints a table and writes docs/audit-benchmark.md. Run from the repository root:

    python -m bench.audit_bench [--records N] [--logs L] [--repeat R]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from pollwarden.audit import (
    GENESIS_HASH,
    AuditCipher,
    AuditRecord,
    canonical_json,
    seal_record,
    sign_checkpoint,
    verify,
)
from pollwarden.audit.keys import load_or_create_keys
from pollwarden.home import database_path, ensure_home, trusted_checkpoint_path
from pollwarden.operating import verify_home
from pollwarden.store.sqlite import SQLiteStore

DOC = Path(__file__).resolve().parents[1] / "docs" / "audit-benchmark.md"
START = datetime(2025, 3, 1, 10, 20, tzinfo=UTC)


def rfc3339(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def decision_event(seq: int) -> dict[str, Any]:
    """A decision record shaped like the ones the controller writes (about 400 bytes of JSON)."""
    now = START + timedelta(seconds=17 * seq)
    return {
        "event": "decision",
        "state": "running",
        "decision": "poll_again",
        "delay_source": "local_backoff",
        "now": rfc3339(now),
        "next_poll_at": rfc3339(now + timedelta(seconds=17)),
        "deadline_at": "2025-03-01T11:00:00.000Z",
        "requests_used": seq % 12,
        "max_requests": 12,
        "response": {"status": 200, "provider_request_id": f"req_{seq:012d}", "job_state": "running"},
        "inputs": {"attempt": seq % 12, "base": "5s", "factor": 2.0, "cap": "2m", "jitter_seed": seq * 7919},
    }


@dataclass(frozen=True)
class Result:
    records: int
    payload_bytes: float
    ciphertext_bytes: int
    append_us: float
    verify_s: float
    sha_per_record_s: float
    sha_bulk_s: float

    @property
    def verify_mbs(self) -> float:
        return self.ciphertext_bytes / self.verify_s / 1e6

    @property
    def sha_per_record_mbs(self) -> float:
        return self.ciphertext_bytes / self.sha_per_record_s / 1e6

    @property
    def sha_bulk_mbs(self) -> float:
        return self.ciphertext_bytes / self.sha_bulk_s / 1e6


def best_of(repeat: int, run: Callable[[], Any]) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - started)
    return best


def raw_sha256(ciphertexts: list[bytes], repeat: int) -> tuple[float, float]:
    """Best seconds for SHA-256 over these bytes: one hashlib call per record, and one over them all."""
    blob = b"".join(ciphertexts)

    def per_record() -> None:
        for ct in ciphertexts:
            hashlib.sha256(ct).digest()

    return best_of(repeat, per_record), best_of(repeat, lambda: hashlib.sha256(blob).digest())


# -- the real store ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StoreResult:
    records: int
    logs: int
    heads: int
    ciphertext_bytes: int
    database_bytes: int
    build_s: float
    read_rows_s: float
    verify_s: float
    sha_per_record_s: float
    sha_bulk_s: float

    def mbs(self, seconds: float) -> float:
        return self.ciphertext_bytes / seconds / 1e6


def build_store(home: Path, count: int, logs: int) -> float:
    """A home as a fleet leaves it: `count` records over `logs` logs, interleaved, one head per transaction.

    Every record goes through `SQLiteStore.append` (its own transaction, sealed, chained and headed exactly
    as in production); only fsync is off (`synchronous=OFF`), which changes nothing the verifier reads.
    """
    ensure_home(home)
    keys = load_or_create_keys(home)
    store = SQLiteStore(
        database_path(home), keys=keys, trusted_checkpoint_path=trusted_checkpoint_path(home), synchronous="OFF"
    )
    started = time.perf_counter()
    try:
        for index in range(count):
            seq = index // logs + 1
            kind = "created" if seq == 1 else "decision"
            at = START + timedelta(seconds=index)
            store.append(f"op_{index % logs:05d}", kind, decision_event(seq), at)
    finally:
        store.close()
    return time.perf_counter() - started


def read_ciphertexts(home: Path) -> list[bytes]:
    with sqlite3.connect(database_path(home)) as conn:
        return [bytes(row[0]) for row in conn.execute("SELECT ciphertext FROM audit_records ORDER BY log_id, seq")]


def read_rows(home: Path) -> None:
    """Only SQLite handing over every row the verifier reads, as tuples: the floor under any verify."""
    conn = sqlite3.connect(database_path(home))
    try:
        for _ in conn.execute(
            "SELECT log_id, seq, at, kind, prev_hash, ciphertext, this_hash FROM audit_records ORDER BY log_id, seq"
        ):
            pass
        for _ in conn.execute("SELECT * FROM audit_heads ORDER BY counter"):
            pass
    finally:
        conn.close()


def measure_store(count: int, logs: int, repeat: int, keep: Path | None) -> StoreResult:
    with tempfile.TemporaryDirectory(prefix="pollwarden-bench-") as scratch:
        home = keep if keep is not None else Path(scratch) / "home"
        build_s = 0.0
        if not database_path(home).exists():
            print(f"building a store of {count:,} records over {logs} logs in {home} ...", flush=True)
            build_s = build_store(home, count, logs)
        check = verify_home(home)
        report = check.report
        if not report.ok:
            raise SystemExit(f"benchmark store failed to verify: {report.problems[0]}")
        ciphertexts = read_ciphertexts(home)
        total = sum(len(ct) for ct in ciphertexts)
        if report.bytes_verified != total:
            raise SystemExit(f"verify hashed {report.bytes_verified} ciphertext bytes, the store holds {total}")
        blob = b"".join(ciphertexts)

        def sha_per_record() -> None:
            for ct in ciphertexts:
                hashlib.sha256(ct).digest()

        # Interleaved rounds, best of each kept: on a shared machine the load changes from second to second,
        # and a ratio of figures taken minutes apart would measure the neighbours.
        runs: dict[str, Callable[[], Any]] = {
            "verify": lambda: verify_home(home),
            "sha_per_record": sha_per_record,
            "sha_bulk": lambda: hashlib.sha256(blob).digest(),
            "read_rows": lambda: read_rows(home),
        }
        best = dict.fromkeys(runs, float("inf"))
        for _ in range(repeat):
            for name, run in runs.items():
                best[name] = min(best[name], best_of(1, run))
        return StoreResult(
            records=report.records,
            logs=report.logs,
            heads=report.heads,
            ciphertext_bytes=total,
            database_bytes=database_path(home).stat().st_size,
            build_s=build_s,
            read_rows_s=best["read_rows"],
            verify_s=best["verify"],
            sha_per_record_s=best["sha_per_record"],
            sha_bulk_s=best["sha_bulk"],
        )


# -- in memory -----------------------------------------------------------------------------------------


def measure(count: int, repeat: int) -> Result:
    cipher = AuditCipher(os.urandom(32))
    signing = Ed25519PrivateKey.generate()
    payloads = [decision_event(seq) for seq in range(1, count + 1)]
    times = [rfc3339(START + timedelta(seconds=17 * seq)) for seq in range(1, count + 1)]
    records: list[AuditRecord] = []

    def append_all() -> None:
        records.clear()
        prev = GENESIS_HASH
        for seq, (payload, at) in enumerate(zip(payloads, times, strict=True), start=1):
            record = seal_record(
                cipher, log_id="op_bench", seq=seq, at=at, kind="decision", prev_hash=prev, payload=payload
            )
            records.append(record)
            prev = record.this_hash

    append_s = best_of(repeat, append_all)
    head = records[-1]
    checkpoint = sign_checkpoint(
        signing, log_id="op_bench", seq=head.seq, head_hash=head.this_hash, counter=1, at=head.at
    )
    public = signing.public_key()
    report = verify(records, [checkpoint], public)
    if not report.ok:
        raise SystemExit(f"benchmark chain failed to verify: {report.problems[0]}")
    ciphertexts = [record.ciphertext for record in records]
    sha_per_record_s, sha_bulk_s = raw_sha256(ciphertexts, repeat)
    return Result(
        records=count,
        payload_bytes=sum(len(canonical_json(p)) for p in payloads) / count,
        ciphertext_bytes=sum(len(ct) for ct in ciphertexts),
        append_us=append_s / count * 1e6,
        verify_s=best_of(repeat, lambda: verify(records, [checkpoint], public)),
        sha_per_record_s=sha_per_record_s,
        sha_bulk_s=sha_bulk_s,
    )


def machine() -> list[tuple[str, str]]:
    import cryptography

    return [
        ("platform", platform.platform()),
        ("machine", platform.machine()),
        ("processor", platform.processor() or "unknown"),
        ("cpu count", str(os.cpu_count())),
        ("python", f"{platform.python_implementation()} {platform.python_version()}"),
        ("cryptography", cryptography.__version__),
        ("openssl", __import__("ssl").OPENSSL_VERSION),
    ]


def store_table(result: StoreResult) -> list[tuple[str, str]]:
    verify_mbs = result.mbs(result.verify_s)
    per_record = result.mbs(result.sha_per_record_s)
    bulk = result.mbs(result.sha_bulk_s)
    return [
        ("records / logs / signed heads", f"{result.records:,} / {result.logs:,} / {result.heads:,}"),
        (
            "ciphertext total (database file)",
            f"{result.ciphertext_bytes / 1e6:.2f} MB ({result.database_bytes / 1e6:.1f} MB)",
        ),
        ("verify_home end to end (snapshot, heads, records, verify)", f"{verify_mbs:.1f} MB/s"),
        ("verify_home, per record", f"{result.verify_s / result.records * 1e6:.2f} µs/record"),
        (
            "SQLite reading the same record and head rows as tuples, nothing else",
            f"{result.mbs(result.read_rows_s):.1f} MB/s",
        ),
        ("raw SHA-256, one call per record's ciphertext", f"{per_record:.1f} MB/s"),
        ("raw SHA-256, one call over all ciphertext", f"{bulk:.1f} MB/s"),
        ("**verify / raw SHA-256 per record** (the target: >= 50%)", f"**{verify_mbs / per_record:.0%}**"),
        ("verify / raw SHA-256 over all bytes", f"{verify_mbs / bulk:.0%}"),
    ]


def verdict(result: StoreResult) -> str:
    """The target in words, from this run's figures: met or not, and what bounds it."""
    ratio = result.sha_per_record_s / result.verify_s
    floor = result.sha_per_record_s / result.read_rows_s
    met = "meets" if ratio >= 0.5 else "does not meet"
    return (
        f"This run {met} the target (verify at >= 50% of raw per-record SHA-256: {ratio:.0%}). Bound: SQLite "
        "alone, handing over the record rows and the head rows (one per record here, one transaction each) "
        f"as tuples with no work on them, runs at {floor:.0%} of that raw figure; so on this path the target is "
        + ("within reach." if floor >= 1.0 else "out of reach whatever the verifier does in Python.")
    )


def table(result: Result) -> list[tuple[str, str]]:
    return [
        ("records", f"{result.records:,}"),
        ("payload (canonical JSON), mean", f"{result.payload_bytes:.0f} B"),
        ("ciphertext total", f"{result.ciphertext_bytes / 1e6:.2f} MB"),
        ("append (canonical JSON + AES-GCM + chain hash)", f"{result.append_us:.1f} µs/event"),
        ("verify (chain + checkpoint, no key)", f"{result.verify_mbs:.1f} MB/s"),
        ("verify, per record", f"{result.verify_s / result.records * 1e6:.2f} µs/record"),
        ("raw SHA-256, one call per record", f"{result.sha_per_record_mbs:.1f} MB/s"),
        ("raw SHA-256, one call over all bytes", f"{result.sha_bulk_mbs:.1f} MB/s"),
        ("verify / raw SHA-256 per record", f"{result.verify_mbs / result.sha_per_record_mbs:.0%}"),
    ]


def markdown_table(rows: list[tuple[str, str]], header: tuple[str, str] = ("measure", "value")) -> list[str]:
    return [f"| {header[0]} | {header[1]} |", "| --- | --- |", *(f"| {name} | {value} |" for name, value in rows)]


def render_markdown(store: StoreResult, memory: Result, command: str, repeat: int) -> str:
    built = f"built in {store.build_s:.0f} s" if store.build_s else "reused from --keep"
    lines = [
        "# Audit log benchmark",
        "",
        "Written by `bench/audit_bench.py` (a benchmark, not a test). Each figure is the best of "
        f"{repeat} runs; every ratio compares figures measured in the same run on the same bytes.",
        "",
        f"Command: `{command}`",
        "",
        f"Run at: {datetime.now(UTC).isoformat(timespec='seconds').replace('+00:00', 'Z')}",
        "",
        "## Verify on a real store",
        "",
        f"A SQLite home written through `SQLiteStore.append`, as a fleet writes it ({built}): "
        f"{store.logs} logs, their records interleaved, each record its own committed transaction and so its "
        "own signed head (the most heads a store of this size can have). Verify is `operating.verify_home`, "
        "the path `pollwarden audit verify` takes: open the store without keys, read one snapshot, replay "
        "every head, stream every record, check the newest head's signature and the kept head.",
        "",
        *markdown_table(store_table(store)),
        "",
        verdict(store),
        "",
        "## Verify in memory",
        "",
        "One log of records already in a list, one checkpoint, no store: the chain walk alone.",
        "",
        *markdown_table(table(memory)),
        "",
        "## Machine",
        "",
        *markdown_table(machine(), ("", "")),
        "",
        "## Reading the numbers",
        "",
        "- Throughput counts ciphertext bytes only (what the chain hash has to read; `bytes_verified` of the "
        "report, checked against the store here).",
        "- The comparable raw figure is SHA-256 *with one hashlib call per record*: verify must hash each "
        "record separately (each hash chains onto the one before it), so it can never reach the one-call "
        "figure, which measures SHA-256's streaming speed with no per-call cost at all. Records are a few "
        "hundred bytes, so the per-call cost (a hash object, its finalisation) is a large share of raw "
        "SHA-256 itself; both ratios are shown.",
        "- *SQLite reading the same rows* is the other floor: the verifier cannot be faster than the rows arriving.",
        "- *Append* is the library's share of writing one event: canonical JSON, AES-256-GCM with a fresh "
        "nonce, and the chain hash. The store adds its own transaction, head signature and fsync on top.",
        "- Verification needs no decryption key: it reads ciphertext, clear metadata and the public key.",
        "",
    ]
    return "\n".join(lines)


def print_rows(title: str, rows: list[tuple[str, str]]) -> None:
    width = max(len(name) for name, _ in rows)
    print(title)
    for name, value in rows:
        print(f"  {name:<{width}}  {value.replace('**', '')}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.audit_bench", description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=20_000, help="records (default 20000)")
    parser.add_argument("--logs", type=int, default=600, help="logs of the real store (default 600)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per measure, best kept (default 3)")
    parser.add_argument(
        "--keep",
        type=Path,
        default=None,
        help="home to build the store in and reuse on later runs (default: a temp dir)",
    )
    parser.add_argument("--out", type=Path, default=DOC, help=f"markdown file to write (default {DOC})")
    args = parser.parse_args(argv)
    if args.records < 1 or args.repeat < 1 or args.logs < 1:
        parser.error("--records, --logs and --repeat must be at least 1")
    store = measure_store(args.records, args.logs, args.repeat, args.keep)
    print_rows("real store", store_table(store))
    memory = measure(args.records, args.repeat)
    print_rows("in memory", table(memory))
    command = " ".join(["python -m bench.audit_bench", *(argv if argv is not None else sys.argv[1:])]).strip()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(render_markdown(store, memory, command, args.repeat), encoding="utf-8")
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
