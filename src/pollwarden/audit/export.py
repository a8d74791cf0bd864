"""A self-contained export of audit logs, verifiable on a machine with no pollwarden home at all.

JSON Lines, UTF-8, one object per line, every line ending in a newline::

    {"format": "pollwarden-audit-export", "version": 2, "exported_at": ..., "public_key": ...,
     "logs": [{"log_id": ..., "records": N, "head_hash": ...}, ...]}
    {"type": "record", "log_id": ..., "seq": ..., "at": ..., "kind": ..., "prev_hash": ...,
     "ciphertext": <base64>, "this_hash": ...}
    ...
    {"type": "checkpoint", "log_id": ..., "seq": ..., "head_hash": ..., "counter": ..., "at": ...,
     "key_id": ..., "signature": ...}

The file is written to a temp file, fsynced and renamed, so a crash leaves the old file or the new one.
A file cut short some other way (a copy that stopped) has a last line without its newline: the reader says
"torn tail" and names the line, instead of verifying a silently shorter log.

Version 2 headers list each log's record count and last hash, so lines removed whole (a log, or a log's
tail with its checkpoints) no longer leave a file that verifies. Version 1 headers list only the log ids;
they are still read, and verified exactly as before.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import os
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from pollwarden.audit.chain import GENESIS_HASH, AuditRecord, is_hash_text
from pollwarden.audit.checkpoint import Checkpoint, load_public_key_text, public_key_text
from pollwarden.audit.crypto import AuditError, AuditKeyError
from pollwarden.audit.verifier import LogHead, VerifyReport, verify

__all__ = [
    "CHECKPOINT_FORMAT",
    "EXPORT_FORMAT",
    "ExportContents",
    "ExportFormatError",
    "load_export",
    "read_checkpoint_file",
    "read_export",
    "write_checkpoint_file",
    "write_export",
]

EXPORT_FORMAT = "pollwarden-audit-export"
CHECKPOINT_FORMAT = "pollwarden-audit-checkpoint"
EXPORT_VERSION = 2
CHECKPOINT_VERSION = 1  # the checkpoint file keeps its format
_EXPORT_VERSIONS = (1, 2)
_RECORD_FIELDS = ("log_id", "seq", "at", "kind", "prev_hash", "ciphertext", "this_hash")


class ExportFormatError(AuditError):
    """The file is not a well-formed export (or checkpoint file); the message names the line."""


def _dumps(value: dict[str, Any]) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _record_line(record: AuditRecord) -> str:
    return _dumps(
        {
            "type": "record",
            "log_id": record.log_id,
            "seq": record.seq,
            "at": record.at,
            "kind": record.kind,
            "prev_hash": record.prev_hash,
            "ciphertext": base64.b64encode(record.ciphertext).decode("ascii"),
            "this_hash": record.this_hash,
        }
    )


def _checkpoint_line(cp: Checkpoint) -> str:
    return _dumps({"type": "checkpoint", **cp.to_json()})


def _atomic_write(path: Path, write: Any, mode: int = 0o644) -> None:
    """Call write(handle) on a temp file beside `path`, fsync, rename over `path`, fsync the directory."""
    path = Path(path)
    directory = path.parent if str(path.parent) else Path(".")
    fd, temp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp_name, mode)
        os.replace(temp_name, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp_name)
        raise
    with contextlib.suppress(OSError):
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def write_export(
    path: Path,
    records: Iterable[AuditRecord],
    checkpoints: Sequence[Checkpoint],
    public_key: Ed25519PublicKey,
    *,
    exported_at: str,
) -> int:
    """Write an export and return how many records it holds.

    Records stream through a spool file, because the header (written first) lists the logs and the
    records may be too many to hold in memory.
    """
    path = Path(path)
    directory = path.parent if str(path.parent) else Path(".")
    # Per log, in first-seen order: [records written, this_hash of the last one].
    logs: dict[str, list[Any]] = {}
    count = 0
    with tempfile.TemporaryFile("w+", encoding="utf-8", newline="\n", dir=directory) as spool:
        for record in records:
            head = logs.setdefault(record.log_id, [0, GENESIS_HASH])
            head[0] += 1
            head[1] = record.this_hash
            spool.write(_record_line(record))
            spool.write("\n")
            count += 1
        for cp in checkpoints:
            logs.setdefault(cp.log_id, [0, GENESIS_HASH])
        header = {
            "format": EXPORT_FORMAT,
            "version": EXPORT_VERSION,
            "exported_at": exported_at,
            "public_key": public_key_text(public_key),
            "logs": [{"log_id": log_id, "records": n, "head_hash": last} for log_id, (n, last) in logs.items()],
        }

        def write(handle: IO[str]) -> None:
            handle.write(_dumps(header) + "\n")
            spool.seek(0)
            while chunk := spool.read(1 << 20):
                handle.write(chunk)
            for cp in checkpoints:
                handle.write(_checkpoint_line(cp) + "\n")

        _atomic_write(path, write)
    return count


def _lines(path: Path) -> Iterator[tuple[int, str, bool]]:
    """Yield (line number, text, is_last) so the parser can tell a torn tail from a bad middle line."""
    try:
        handle = open(path, "rb")  # noqa: SIM115 - closed below, the generator owns it
    except OSError as exc:
        raise ExportFormatError(f"cannot read {path}: {exc.strerror}") from None
    with handle:
        number = 0
        previous: bytes | None = None
        for raw in handle:
            if previous is not None:
                yield from _decode_line(path, number, previous, False)
            number += 1
            previous = raw
        if previous is None:
            raise ExportFormatError(f"{path}: line 1: the file is empty, expected the export header")
        yield from _decode_line(path, number, previous, True)


def _decode_line(path: Path, number: int, raw: bytes, last: bool) -> Iterator[tuple[int, str, bool]]:
    if not raw.endswith(b"\n"):
        raise ExportFormatError(
            f"{path}: torn tail at line {number}: the last line has no newline, so the file was cut short "
            "(an interrupted copy or write); export again from the source"
        )
    try:
        text = raw[:-1].decode("utf-8")
    except UnicodeDecodeError:
        raise ExportFormatError(f"{path}: line {number}: not valid UTF-8") from None
    yield number, text, last


def _parse(path: Path, number: int, text: str, last: bool) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        if last:
            raise ExportFormatError(
                f"{path}: torn tail at line {number}: the last line is not complete JSON ({exc.msg}); "
                "the file was cut short, export again from the source"
            ) from None
        raise ExportFormatError(f"{path}: line {number}: invalid JSON ({exc.msg} at column {exc.colno})") from None


def _str_field(obj: dict[str, Any], name: str, where: str) -> str:
    value = obj.get(name)
    if not isinstance(value, str):
        raise ExportFormatError(f"{where}: field {name!r} must be a string")
    return value


def _record_from(obj: dict[str, Any], where: str) -> AuditRecord:
    missing = [name for name in _RECORD_FIELDS if name not in obj]
    if missing:
        raise ExportFormatError(f"{where}: record lacks field(s): {', '.join(missing)}")
    seq = obj["seq"]
    if isinstance(seq, bool) or not isinstance(seq, int):
        raise ExportFormatError(f"{where}: field 'seq' must be an integer")
    encoded = _str_field(obj, "ciphertext", where)
    try:
        ciphertext = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise ExportFormatError(f"{where}: field 'ciphertext' is not valid base64") from None
    return AuditRecord(
        log_id=_str_field(obj, "log_id", where),
        seq=seq,
        at=_str_field(obj, "at", where),
        kind=_str_field(obj, "kind", where),
        prev_hash=_str_field(obj, "prev_hash", where),
        ciphertext=ciphertext,
        this_hash=_str_field(obj, "this_hash", where),
    )


def _checkpoint_from(obj: dict[str, Any], where: str) -> Checkpoint:
    try:
        return Checkpoint.from_json({key: value for key, value in obj.items() if key != "type"})
    except ValueError as exc:
        raise ExportFormatError(f"{where}: {exc}") from None


def _check_header(obj: Any, where: str, expected_format: str, versions: tuple[int, ...]) -> dict[str, Any]:
    if not isinstance(obj, dict) or obj.get("format") != expected_format:
        raise ExportFormatError(f'{where}: not a {expected_format} file (no "format": "{expected_format}")')
    version = obj.get("version")
    if type(version) is not int or version not in versions:  # not a bool, not 1.0
        readable = " and ".join(str(v) for v in versions)
        raise ExportFormatError(
            f"{where}: unsupported version {version!r} (this pollwarden reads version {readable}); "
            "use the pollwarden version that wrote it"
        )
    return obj


def _heads_from(header: dict[str, Any], where: str) -> dict[str, LogHead]:
    """The version 2 "logs" field: one {"log_id", "records", "head_hash"} object per log, each log once."""
    logs = header.get("logs")
    if not isinstance(logs, list):
        raise ExportFormatError(f"{where}: field 'logs' must be a list of the logs in the file")
    heads: dict[str, LogHead] = {}
    for index, entry in enumerate(logs):
        at = f"{where}: field 'logs' entry {index + 1}"
        if not isinstance(entry, dict):
            raise ExportFormatError(f"{where}: field 'logs' must list objects (log_id, records, head_hash)")
        for name in ("log_id", "records", "head_hash"):
            if name not in entry:
                raise ExportFormatError(f"{at} lacks '{name}'")
        log_id, records, head_hash = entry["log_id"], entry["records"], entry["head_hash"]
        if not isinstance(log_id, str) or not log_id:
            raise ExportFormatError(f"{at}: 'log_id' must be a non-empty string")
        if isinstance(records, bool) or not isinstance(records, int) or records < 0:
            raise ExportFormatError(f"{at}: 'records' must be a non-negative integer")
        if not is_hash_text(head_hash):
            raise ExportFormatError(f"{at}: 'head_hash' must be 64 lowercase hex characters")
        if log_id in heads:
            raise ExportFormatError(f"{at}: log {log_id!r} is listed twice")
        heads[log_id] = LogHead(records, head_hash)
    return heads


@dataclass(frozen=True)
class ExportContents:
    """A parsed export. `heads` is what a version 2 header lists per log; None for a version 1 export."""

    records: list[AuditRecord]
    checkpoints: list[Checkpoint]
    public_key: Ed25519PublicKey
    version: int
    heads: dict[str, LogHead] | None

    def verify(
        self, *, pinned_key: Ed25519PublicKey | None = None, trusted_checkpoint: Checkpoint | None = None
    ) -> VerifyReport:
        """Verify the body, against the header's sizes and heads when it has them."""
        return verify(
            self.records,
            self.checkpoints,
            self.public_key,
            trusted_checkpoint=trusted_checkpoint,
            pinned_key=pinned_key,
            expected_heads=self.heads,
        )


def read_export(path: Path) -> tuple[list[AuditRecord], list[Checkpoint], Ed25519PublicKey]:
    """The records, checkpoints and header key of an export (`load_export` also gives the header's sizes)."""
    contents = load_export(path)
    return contents.records, contents.checkpoints, contents.public_key


def load_export(path: Path) -> ExportContents:
    """Parse an export strictly; any malformed line raises ExportFormatError naming it.

    Parsing is not verifying: call `.verify()`, ideally with a pinned public key or a checkpoint kept
    elsewhere, since a forger can replace the key in the header along with everything else.
    """
    path = Path(path)
    records: list[AuditRecord] = []
    checkpoints: list[Checkpoint] = []
    public_key: Ed25519PublicKey | None = None
    version = EXPORT_VERSION
    heads: dict[str, LogHead] | None = None
    for number, text, last in _lines(path):
        where = f"{path}: line {number}"
        obj = _parse(path, number, text, last)
        if number == 1:
            header = _check_header(obj, where, EXPORT_FORMAT, _EXPORT_VERSIONS)
            try:
                public_key = load_public_key_text(
                    _str_field(header, "public_key", where), source=f"{where}: field 'public_key'"
                )
            except AuditKeyError as exc:
                raise ExportFormatError(str(exc)) from None
            version = header["version"]
            if version >= 2:
                heads = _heads_from(header, where)
            continue
        if not isinstance(obj, dict):
            raise ExportFormatError(f"{where}: expected a JSON object")
        kind = obj.get("type")
        if kind == "record":
            records.append(_record_from(obj, where))
        elif kind == "checkpoint":
            checkpoints.append(_checkpoint_from(obj, where))
        else:
            raise ExportFormatError(f"{where}: unknown line type {kind!r} (expected 'record' or 'checkpoint')")
    assert public_key is not None  # _lines raises on an empty file, so line 1 was parsed
    return ExportContents(records, checkpoints, public_key, version, heads)


def write_checkpoint_file(path: Path, cp: Checkpoint) -> None:
    """Write the checkpoint that is kept apart from the log (atomically, one JSON object)."""
    body = {"format": CHECKPOINT_FORMAT, "version": CHECKPOINT_VERSION, **cp.to_json()}

    def write(handle: IO[str]) -> None:
        handle.write(json.dumps(body, ensure_ascii=False, indent=2) + "\n")

    _atomic_write(Path(path), write, 0o600)  # kept in the home, which is the owner's alone


def read_checkpoint_file(path: Path) -> Checkpoint:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ExportFormatError(f"cannot read checkpoint file {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ExportFormatError(f"checkpoint file {path} is not valid UTF-8") from None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ExportFormatError(
            f"checkpoint file {path}: invalid JSON at line {exc.lineno} ({exc.msg}); the file is damaged"
        ) from None
    header = _check_header(obj, f"checkpoint file {path}", CHECKPOINT_FORMAT, (CHECKPOINT_VERSION,))
    try:
        return Checkpoint.from_json({k: v for k, v in header.items() if k not in ("format", "version")})
    except ValueError as exc:
        raise ExportFormatError(f"checkpoint file {path}: {exc}") from None
