"""`audit verify`, `audit export` and `audit repair`."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import stat
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from ..audit import (
    ALL_LOGS,
    SIGNING_KEY_ENV,
    AuditError,
    Checkpoint,
    HeadFile,
    Problem,
    VerifyReport,
    key_id_of,
    load_export,
    read_public_key_file,
    refuse_private_key,
    replay,
    write_checkpoint_file,
    write_export,
    write_head_file,
)
from ..audit.export import head_file_text
from ..audit.keys import install_signing_key, stage_signing_key, staged_signing_key, write_private_key_file
from ..clock import utcnow
from ..core.durations import format_rfc3339
from ..events import WitnessCleared, WitnessConfigured
from ..home.directory import ensure_home, resolve_home, trusted_checkpoint_path, unknown_operation, witness_config_path
from ..home.operating import (
    HomeError,
    configured_witness,
    database_target,
    operation_known,
    trusted_checkpoint,
    verify_home,
)
from ..shown import shown
from ..store.base import StoreError
from ..store.witness import Witness
from ..store.witnessing import WITNESS_LOG, Kept, LocationError, read_location, reading_location
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
            f"{source}: {state}: {report.records} records in {report.logs} logs,"
            + (f" {report.rows} rows," if report.rows else "")
            + f" {report.checkpoints} checkpoints, {report.bytes_verified} bytes verified"
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


def _trusted(path: Path | None) -> tuple[Checkpoint | HeadFile | None, str | None]:
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
        kept = Kept()
        if args.witness:
            try:
                read_location(reading_location(args.witness, "--witness"), kept)
            except LocationError as exc:
                raise UsageError(str(exc)) from None
        report = contents.verify(
            pinned_key=pinned[0] if pinned else None,
            trusted_checkpoint=trusted if isinstance(trusted, Checkpoint) else None,
            witnesses=[*([trusted] if isinstance(trusted, HeadFile) else []), *kept.heads],
            findings=[Problem(ALL_LOGS, None, what) for what in kept.problems],
        )
        notes = ((NO_LOG_SIZES,) if contents.heads is None else ()) + tuple(kept.notes)
        names = ", ".join(name for name in (trusted_name, *kept.names) if name) or None
        return _print_report(
            report, as_json=args.json, source=str(path), trusted=names, pinned=fingerprint, notes=notes
        )
    try:
        check = verify_home(resolve_home(args.home), explicit, pinned, args.witness)
    except HomeError as exc:
        raise UsageError(str(exc)) from None
    return _print_report(
        check.report,
        as_json=args.json,
        source=check.source,
        trusted=check.trusted,
        pinned=fingerprint,
        notes=check.notes,
    )


def cmd_audit_export(args: argparse.Namespace) -> int:
    out = Path(args.out)
    _require_log(args.home)
    # Both files are checked and their temporary twins made before the store is touched: a bad --out changes
    # nothing, and a failure half-way leaves neither a partial export nor a checkpoint without its export.
    with output_file(args.out, "--out") as temp, output_file(f"{args.out}.checkpoint", "--out") as temp_checkpoint:
        store = _open_store(args.home, keys="write")
        try:
            if args.operation and not operation_known(store, args.operation):
                raise UsageError(unknown_operation(store.path, args.operation))
            assert store.keys is not None
            if args.operation:
                # One operation's log: its own checkpoint, since the store's heads cover every other log too.
                made = store.checkpoint_heads(store.db_now(), [args.operation])
                checkpoints = store.audit_checkpoints(args.operation)
                count = write_export(
                    temp,
                    store.audit_records(args.operation),
                    checkpoints,
                    store.keys.public_key,
                    exported_at=format_rfc3339(store.db_now()),
                )
                write_checkpoint_file(temp_checkpoint, max(made, key=lambda cp: cp.counter))
                logs = len(made)
            else:
                newest = store.newest_head()
                if newest is None:
                    raise UsageError("the audit log is empty: nothing to export")
                with store.audit_snapshot() as snapshot:
                    heads = snapshot.heads()
                    count = write_export(
                        temp,
                        snapshot.records(),
                        snapshot.checkpoints(),
                        store.keys.public_key,
                        exported_at=format_rfc3339(store.db_now()),
                        heads=heads,
                        rotations=snapshot.rotations(),
                    )
                # The head file beside it lists every log the newest exported head fixes.
                head, _ = newest
                state = replay(heads, None).state
                write_head_file(temp_checkpoint, heads[-1] if heads else head, state)
                logs = len(state)
        finally:
            store.close()
    shown_out = shown(out)
    print(f"exported {count} records in {logs} logs to {shown_out}; keep {shown_out}.checkpoint somewhere else")
    return EXIT_OK


def _require_log(home_arg: str | None) -> None:
    """A command that reads the log must not create a home, keys and an empty database where none was."""
    home = resolve_home(home_arg)
    target = database_target(home)
    if isinstance(target, Path) and not target.exists():
        raise UsageError(f"no audit log in {shown(home)} (no {target.name}); pass --home or --db")


def cmd_audit_checkpoint(args: argparse.Namespace) -> int:
    """The newest signed head, with the state it fixes: the file a witness keeps (`verify --checkpoint`)."""
    to_stdout = args.out in (None, "-")
    _require_log(args.home)
    with contextlib.ExitStack() as stack:
        temp = None if to_stdout else stack.enter_context(output_file(args.out, "--out"))
        store = _open_store(args.home, keys="write")
        try:
            newest = store.newest_head()
        finally:
            store.close()
        if newest is None:
            raise UsageError("the audit log is empty: there is no signed head yet")
        head, state = newest
        if temp is None:
            print(head_file_text(head, state))
            return EXIT_OK
        write_head_file(temp, head, state)
    print(
        f"wrote signed head #{head.counter} ({head.logs} logs, {head.records} records) to {shown(Path(args.out))};"
        " keep it where this machine cannot write, and check the store against it with"
        f" `pollwarden audit verify --checkpoint {shown(Path(args.out))}`"
    )
    return EXIT_OK


def cmd_audit_witness(args: argparse.Namespace) -> int:
    """Show, set or clear the witness location every store of this home sends its new heads to. A change is also
    recorded in the store, in the log `@audit/witness` and a row its heads vouch for, so a plain `audit verify`
    knows the witness even once the home's setting is gone."""
    home = resolve_home(args.home)
    path = witness_config_path(home)
    if args.clear:
        # Recorded first, while the old setting still sends this commit's head to the old witness.
        _record_witness(args, "", WitnessCleared(by=args.by))
        path.unlink(missing_ok=True)
        print(f"no witness: new heads are kept only in {shown(trusted_checkpoint_path(home))}")
        return EXIT_OK
    if args.location is None:
        try:
            witness = configured_witness(home)
        except StoreError as exc:
            raise UsageError(str(exc)) from None
        print(witness.location if witness is not None else "no witness configured")
        return EXIT_OK
    try:
        witness = Witness.parse(args.location, "the witness location")
    except StoreError as exc:
        raise UsageError(str(exc)) from None
    ensure_home(home)
    with output_file(str(path), "the witness setting") as temp:
        Path(temp).write_text(witness.location + "\n", encoding="utf-8")
    # Recorded once the setting is in place: this commit's head is the first the new witness keeps.
    _record_witness(args, witness.location, WitnessConfigured(location=witness.location, by=args.by))
    print(f"new signed heads of {shown(home)} go to {witness.location} (at each outcome, and at most a second apart)")
    return EXIT_OK


def _record_witness(args: argparse.Namespace, location: str, event: WitnessConfigured | WitnessCleared) -> None:
    """The setting's event, in the store; its head is given to the witness at once (one attempt, at most
    `outbox.EXIT_WAIT` seconds): the location is tried as it is set, and holds this store's head from now on."""
    from ..home.outbox import delivering

    store = _open_store(args.home, keys="write")
    try:
        with delivering(store, "outbox"):
            store.set_setting(WITNESS_LOG, location, event, utcnow())
    finally:
        store.close()


def cmd_audit_rotate_key(args: argparse.Namespace) -> int:
    """A new signing key, linked to the current one by a rotation the current one signs (`audit/rotation.py`).

    The new key is staged beside the old one before the rotation commits and put in place after it, so a process
    that dies in between leaves the store expecting a key the home holds: running the command again finishes."""
    by = args.by.strip()
    if not by:
        raise UsageError("--by must name who rotates the key (it is recorded in the audit log)")
    home = resolve_home(args.home)
    _require_log(args.home)
    out = Path(args.key_out) if args.key_out else None
    if out is None and os.environ.get(SIGNING_KEY_ENV):
        raise UsageError(
            f"the signing key comes from {SIGNING_KEY_ENV}: give --key-out FILE for the new private key, then set the"
            " variable from that file for every process that writes to the store, and restart them; nothing changed"
        )
    store = _open_store(args.home, keys="write")
    try:
        assert store.keys is not None and store.keys.signing_key is not None  # keys="write" made or read both
        old_id = key_id_of(store.keys.public_key)
        staged = staged_signing_key(home) if out is None else None
        last = store.last_rotation()
        if (
            staged is not None
            and last is not None
            and (last.old_key_id, last.new_key_id)
            == (
                old_id,
                key_id_of(staged.public_key()),
            )
        ):
            finished = True
            new_key, rotation = staged, last
        else:
            finished = False
            new_key = Ed25519PrivateKey.generate()
            if out is None:
                stage_signing_key(home, new_key)
            else:
                write_private_key_file(out, new_key)
            rotation = store.rotate_signing_key(new_key, by=by, at=utcnow())
    except (AuditError, OSError) as exc:
        raise UsageError(f"the signing key was not rotated: {exc}") from None
    finally:
        store.close()
    if out is None:
        try:
            install_signing_key(home, new_key)
        except (AuditError, OSError) as exc:
            raise UsageError(
                f"the rotation is recorded, but the new key could not be put in place ({exc}): run the command again"
            ) from None
    new_id = key_id_of(new_key.public_key())
    where = shown(out) if out is not None else shown(home / "keys" / "signing.key")
    print(
        ("finished an interrupted rotation: " if finished else "rotated the signing key: ")
        + f"head #{rotation.counter} is the last one key {old_id} signed; key {new_id} ({where}) signs from the next."
        " Restart every process that writes to this store (one that still holds the old key is refused), and"
        " replace any copy of the public key kept for `audit verify --public-key`"
    )
    return EXIT_OK


def cmd_audit_repair(args: argparse.Namespace) -> int:
    """An export cut off mid-line (a crash while copying) loses only its torn last line, kept aside."""
    path = Path(args.file)
    try:
        if not stat.S_ISREG(path.stat().st_mode):  # /dev/zero or a FIFO would be read (or waited on) forever
            raise UsageError(f"{path} is not a regular file; `audit repair` mends an export file in place")
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
