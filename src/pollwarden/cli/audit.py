"""`audit verify`, `audit export` and `audit repair`."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from ..audit import (
    ALL_LOGS,
    AuditError,
    Checkpoint,
    VerifyReport,
    key_id_of,
    load_export,
    read_public_key_file,
    refuse_private_key,
    write_checkpoint_file,
    write_export,
)
from ..clock import utcnow
from ..core.durations import format_rfc3339
from ..home import resolve_home
from ..operating import HomeError, trusted_checkpoint, verify_home
from ..shown import shown
from .common import (
    EXIT_OK,
    UsageError,
    _open_store,
    output_file,
)

# -- audit and why --------------------------------------------------------------------------------

EXIT_TAMPERED = 5


NO_LOG_SIZES = (
    "the header carries no log sizes (a version 1 export): a log whose lines were removed whole, or cut short "
    "past its last checkpoint, is not detected; export again to get an export that lists them"
)


def _print_report(
    report: VerifyReport,
    *,
    as_json: bool,
    source: str,
    trusted: str | None,
    pinned: str | None = None,
    notes: tuple[str, ...] = (),
) -> int:
    if as_json:
        extra = {"source": source, "trusted_checkpoint": trusted, "pinned_key": pinned, "notes": list(notes)}
        print(json.dumps({**report.to_json(), **extra}, sort_keys=True))
    else:
        state = "intact" if report.ok else "TAMPERED"
        print(
            f"{source}: {state}: {report.records} records in {report.logs} logs, {report.checkpoints} checkpoints,"
            f" {report.bytes_verified} bytes verified"
            + (f", checked against {trusted}" if trusted else ", no checkpoint kept elsewhere to check rollback")
            + (f", with the pinned key {pinned}" if pinned else "")
        )
        for note in notes:
            print(f"  note: {note}")
        for problem in report.problems:
            where = "all logs" if problem.log_id == ALL_LOGS else f"log {problem.log_id}"
            where += f" record {problem.seq}" if problem.seq is not None else ""
            print(f"  {where}: {problem.what}")
    return EXIT_OK if report.ok else EXIT_TAMPERED


def _pinned(name: str | None) -> tuple[Ed25519PublicKey, str] | None:
    """The key given with --public-key, the only one trusted; a file that is not a key is exit 2."""
    if name is None:
        return None
    try:
        return read_public_key_file(Path(name)), f"--public-key {name}"
    except AuditError as exc:
        raise UsageError(str(exc)) from None


def _trusted(path: Path | None) -> tuple[Checkpoint | None, str | None]:
    try:
        return trusted_checkpoint(path)
    except HomeError as exc:
        raise UsageError(str(exc)) from None


def cmd_audit_verify(args: argparse.Namespace) -> int:
    """Needs no decryption key: the chain is over ciphertext, checkpoints are signed with a public key."""
    explicit = Path(args.checkpoint) if args.checkpoint else None
    if explicit is not None and not explicit.exists():
        raise UsageError(f"--checkpoint {explicit} does not exist")
    pinned = _pinned(args.public_key)
    fingerprint = key_id_of(pinned[0]) if pinned is not None else None
    if args.file:
        path = Path(args.file)
        try:
            contents = load_export(path)
            if pinned is not None:
                known = [key_id_of(contents.public_key), *(cp.key_id for cp in contents.checkpoints)]
                refuse_private_key(pinned[0], pinned[1], known)
        except AuditError as exc:
            raise UsageError(str(exc)) from None
        trusted, trusted_name = _trusted(explicit or Path(str(path) + ".checkpoint"))
        report = contents.verify(pinned_key=pinned[0] if pinned else None, trusted_checkpoint=trusted)
        notes = (NO_LOG_SIZES,) if contents.heads is None else ()
        return _print_report(
            report, as_json=args.json, source=str(path), trusted=trusted_name, pinned=fingerprint, notes=notes
        )
    try:
        check = verify_home(resolve_home(args.home), explicit, pinned)
    except HomeError as exc:
        raise UsageError(str(exc)) from None
    return _print_report(
        check.report, as_json=args.json, source=check.source, trusted=check.trusted, pinned=fingerprint
    )


def cmd_audit_export(args: argparse.Namespace) -> int:
    out = Path(args.out)
    # Both files are checked and their temporary twins made before the store is touched: a bad --out changes
    # nothing, and a failure half-way leaves neither a partial export nor a checkpoint without its export.
    with output_file(args.out, "--out") as temp, output_file(f"{args.out}.checkpoint", "--out") as temp_checkpoint:
        store = _open_store(args.home, keys="write")
        try:
            if args.operation and store.get(args.operation) is None:
                raise UsageError(f"no operation {args.operation!r} in {store.path}; `pollwarden status` lists them")
            assert store.keys is not None
            made = store.checkpoint_heads(utcnow(), [args.operation] if args.operation else None)
            if not made:
                raise UsageError("the audit log is empty: nothing to export")
            checkpoints = store.audit_checkpoints(args.operation)
            count = write_export(
                temp,
                store.audit_records(args.operation),
                checkpoints,
                store.keys.public_key,
                exported_at=format_rfc3339(utcnow()),
            )
            newest = max(made, key=lambda cp: cp.counter)
            write_checkpoint_file(temp_checkpoint, newest)
        finally:
            store.close()
    shown_out = shown(out)
    print(f"exported {count} records in {len(made)} logs to {shown_out}; keep {shown_out}.checkpoint somewhere else")
    return EXIT_OK


def cmd_audit_repair(args: argparse.Namespace) -> int:
    """An export cut off mid-line (a crash while copying) loses only its torn last line, kept aside."""
    path = Path(args.file)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    lines = data.split(b"\n")
    complete, tail = lines[:-1], lines[-1]
    torn = tail != b""
    if not torn and complete:
        try:
            json.loads(complete[-1])
        except ValueError:
            torn, tail, complete = True, complete[-1], complete[:-1]
    if not torn:
        print(f"{path}: no torn tail; nothing to repair")
        return EXIT_OK
    aside = Path(str(path) + ".torn")
    aside.write_bytes(tail)
    path.write_bytes(b"".join(line + b"\n" for line in complete))
    print(f"{path}: removed a torn last line of {len(tail)} bytes (kept in {aside}); run `audit verify` again")
    return EXIT_OK
