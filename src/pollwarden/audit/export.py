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
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, BinaryIO

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from pollwarden.audit.chain import GENESIS_HASH, AuditRecord, is_hash_text
from pollwarden.audit.checkpoint import Checkpoint, load_public_key_text, public_key_text
from pollwarden.audit.crypto import AuditError, AuditKeyError
from pollwarden.audit.heads import Head
from pollwarden.audit.journal import HeadFile, LogTip
from pollwarden.audit.rotation import Rotation
from pollwarden.audit.verifier import LogHead, Problem, VerifyReport, verify
from pollwarden.core.bounded import TooLarge, read_bounded

__all__ = [
    "CHECKPOINT_FORMAT",
    "EXPORT_FORMAT",
    "HEAD_FORMAT",
    "ExportContents",
    "ExportFormatError",
    "head_file_from_json",
    "head_file_text",
    "load_export",
    "read_checkpoint_file",
    "read_export",
    "read_head_file",
    "read_kept_file",
    "write_checkpoint_file",
    "write_export",
    "write_head_file",
]

EXPORT_FORMAT = "pollwarden-audit-export"
CHECKPOINT_FORMAT = "pollwarden-audit-checkpoint"
HEAD_FORMAT = "pollwarden-audit-head"
EXPORT_VERSION = 4
CHECKPOINT_VERSION = 1  # the checkpoint file keeps its format
HEAD_VERSION = 2
"""Version 2 head files may carry a head's `vouches` (schema 8); a head without them is still written as version 1,
so a witness file of an older store reads as it always did."""
_HEAD_VERSIONS = (1, 2)
_EXPORT_VERSIONS = (1, 2, 3, 4)
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
    heads: Sequence[Head] = (),
    rotations: Sequence[Rotation] = (),
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
            "heads": len(heads),
        }

        def write(handle: IO[str]) -> None:
            handle.write(_dumps(header) + "\n")
            spool.seek(0)
            while chunk := spool.read(1 << 20):
                handle.write(chunk)
            for cp in checkpoints:
                handle.write(_checkpoint_line(cp) + "\n")
            for head in heads:
                handle.write(_dumps({"type": "head", **head.to_json()}) + "\n")
            for rotation in rotations:
                handle.write(_dumps({"type": "rotation", **rotation.to_json()}) + "\n")

        _atomic_write(path, write)
    return count


MAX_LINE_BYTES = 512 * 1024 * 1024
"""Longer than any record line (a sealed provider answer is capped far below); an endless line (`/dev/zero`) is
refused after this much, never read whole."""
MAX_KEPT_FILE_BYTES = 512 * 1024 * 1024
"""The same for a checkpoint or head file (a head file lists every log's tip: large for a big fleet, not this)."""


def _lines(path: Path) -> Iterator[tuple[int, str, bool]]:
    """Yield (line number, text, is_last) so the parser can tell a torn tail from a bad middle line."""
    try:
        handle = open(path, "rb")  # noqa: SIM115 - closed below, the generator owns it
    except OSError as exc:
        raise ExportFormatError(f"cannot read {path}: {exc.strerror}") from None
    with handle:
        number = 0
        previous: bytes | None = None
        while raw := _read_line(path, handle, number + 1):
            if previous is not None:
                yield from _decode_line(path, number, previous, False)
            number += 1
            previous = raw
        if previous is None:
            raise ExportFormatError(f"{path}: line 1: the file is empty, expected the export header")
        yield from _decode_line(path, number, previous, True)


def _read_line(path: Path, handle: BinaryIO, number: int) -> bytes:
    try:
        raw = handle.readline(MAX_LINE_BYTES + 1)
    except OSError as exc:  # a device or a failing disk: the file cannot be read, which is not a traceback
        raise ExportFormatError(f"cannot read {path}: {exc.strerror}") from None
    if len(raw) > MAX_LINE_BYTES:
        raise ExportFormatError(f"{path}: line {number}: longer than {MAX_LINE_BYTES} bytes; not an export")
    return raw


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
    """A parsed export. `heads` is what a version 2+ header lists per log; None for a version 1 export.

    `signed_heads` are the store's signed heads a version 3 export of a whole store carries (None when its
    header lists none: an export of one operation, or an older version, relies on per-log checkpoints).
    """

    records: list[AuditRecord]
    checkpoints: list[Checkpoint]
    public_key: Ed25519PublicKey
    version: int
    heads: dict[str, LogHead] | None
    signed_heads: list[Head] | None = None
    rotations: list[Rotation] = field(default_factory=list)
    """The store's key rotations a version 4 export of a whole store carries (`{"type":"rotation", ...}` lines)."""

    def verify(
        self,
        *,
        pinned_key: Ed25519PublicKey | None = None,
        trusted_checkpoint: Checkpoint | None = None,
        witness: HeadFile | None = None,
        witnesses: Sequence[HeadFile] = (),
        findings: Sequence[Problem] = (),
    ) -> VerifyReport:
        """Verify the body, against the header's sizes and heads when it has them, and the heads kept elsewhere."""
        return verify(
            self.records,
            self.checkpoints,
            self.public_key,
            trusted_checkpoint=trusted_checkpoint,
            pinned_key=pinned_key,
            expected_heads=self.heads,
            heads=self.signed_heads,
            witness=witness,
            witnesses=witnesses,
            rotations=self.rotations,
            findings=findings,
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
    signed_heads: list[Head] | None = None
    rotations: list[Rotation] = []
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
            if version >= 3:
                listed = header.get("heads")
                if isinstance(listed, bool) or not isinstance(listed, int) or listed < 0:
                    raise ExportFormatError(f"{where}: field 'heads' must be the number of signed heads in the file")
                # A whole store's export: heads are expected even if its head lines were all removed.
                signed_heads = [] if listed else None
            continue
        if not isinstance(obj, dict):
            raise ExportFormatError(f"{where}: expected a JSON object")
        kind = obj.get("type")
        if kind == "record":
            records.append(_record_from(obj, where))
        elif kind == "checkpoint":
            checkpoints.append(_checkpoint_from(obj, where))
        elif kind == "head" and version >= 3:
            try:
                head = Head.from_json({k: v for k, v in obj.items() if k != "type"})
            except ValueError as exc:
                raise ExportFormatError(f"{where}: {exc}") from None
            signed_heads = [] if signed_heads is None else signed_heads
            signed_heads.append(head)
        elif kind == "rotation" and version >= 4:
            try:
                rotations.append(Rotation.from_json({k: v for k, v in obj.items() if k != "type"}))
            except ValueError as exc:
                raise ExportFormatError(f"{where}: {exc}") from None
        else:
            raise ExportFormatError(
                f"{where}: unknown line type {kind!r} (expected 'record', 'checkpoint' or, from version 3, 'head',"
                " from version 4, 'rotation')"
            )
    assert public_key is not None  # _lines raises on an empty file, so line 1 was parsed
    return ExportContents(records, checkpoints, public_key, version, heads, signed_heads, rotations)


def write_checkpoint_file(path: Path, cp: Checkpoint) -> None:
    """Write the checkpoint that is kept apart from the log (atomically, one JSON object)."""
    body = {"format": CHECKPOINT_FORMAT, "version": CHECKPOINT_VERSION, **cp.to_json()}

    def write(handle: IO[str]) -> None:
        handle.write(json.dumps(body, ensure_ascii=False, indent=2) + "\n")

    _atomic_write(Path(path), write, 0o600)  # kept in the home, which is the owner's alone


def _read_json_file(path: Path, what: str) -> Any:
    try:
        text = read_bounded(path, MAX_KEPT_FILE_BYTES).decode("utf-8")
    except OSError as exc:
        raise ExportFormatError(f"cannot read {what} {path}: {exc.strerror}") from None
    except TooLarge:
        raise ExportFormatError(f"{what} {path} is larger than {MAX_KEPT_FILE_BYTES} bytes; not one") from None
    except UnicodeDecodeError:
        raise ExportFormatError(f"{what} {path} is not valid UTF-8") from None
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        where = f" at line {exc.lineno} ({exc.msg})" if isinstance(exc, json.JSONDecodeError) else ""
        raise ExportFormatError(f"{what} {path}: invalid JSON{where}; the file is damaged") from None


def read_checkpoint_file(path: Path) -> Checkpoint:
    path = Path(path)
    obj = _read_json_file(path, "checkpoint file")
    header = _check_header(obj, f"checkpoint file {path}", CHECKPOINT_FORMAT, (CHECKPOINT_VERSION,))
    try:
        return Checkpoint.from_json({k: v for k, v in header.items() if k not in ("format", "version")})
    except ValueError as exc:
        raise ExportFormatError(f"checkpoint file {path}: {exc}") from None


def head_file_text(head: Head, logs: Mapping[str, LogTip] | None = None) -> str:
    """One head file, as one line of JSON (what a witness keeps or receives); `logs` lists the state it fixes."""
    version = HEAD_VERSION if head.vouches else 1
    body: dict[str, Any] = {"format": HEAD_FORMAT, "version": version, "head": head.to_json()}
    if logs is not None:
        body["logs"] = [[log_id, seq, this_hash] for log_id, (seq, this_hash) in sorted(logs.items())]
    return _dumps(body)


def write_head_file(path: Path, head: Head, logs: Mapping[str, LogTip] | None = None, mode: int = 0o600) -> None:
    """Write a signed head kept elsewhere (a witness's copy), atomically; `logs` lists the state it fixes."""
    text = head_file_text(head, logs)

    def write(handle: IO[str]) -> None:
        handle.write(text + "\n")

    _atomic_write(Path(path), write, mode)


def _head_file_from(obj: dict[str, Any], where: str) -> HeadFile:
    try:
        head = Head.from_json(obj.get("head"))
    except ValueError as exc:
        raise ExportFormatError(f"{where}: {exc}") from None
    listed = obj.get("logs")
    if listed is None:
        return HeadFile(head)
    if not isinstance(listed, list):
        raise ExportFormatError(f"{where}: field 'logs' must be a list of [log_id, seq, hash]")
    logs: dict[str, LogTip] = {}
    for index, entry in enumerate(listed):
        if not (
            isinstance(entry, list)
            and len(entry) == 3
            and isinstance(entry[0], str)
            and entry[0]
            and type(entry[1]) is int
            and entry[1] >= 1
            and is_hash_text(entry[2])
            and entry[0] not in logs
        ):
            raise ExportFormatError(
                f"{where}: field 'logs' entry {index + 1} is not a [log_id, seq, hash] of a new log"
            )
        logs[entry[0]] = (entry[1], entry[2])
    return HeadFile(head, logs)


def head_file_from_json(obj: object, where: str) -> HeadFile:
    """A head file already parsed from JSON (what a witness URL answers); ExportFormatError names what is wrong."""
    return _head_file_from(_check_header(obj, f"head file {where}", HEAD_FORMAT, _HEAD_VERSIONS), f"head file {where}")


def read_head_file(path: Path) -> HeadFile:
    """A head file as `write_head_file` wrote it; a malformed one raises ExportFormatError naming the field."""
    path = Path(path)
    where = f"head file {path}"
    return _head_file_from(_check_header(_read_json_file(path, "head file"), where, HEAD_FORMAT, _HEAD_VERSIONS), where)


def read_kept_file(path: Path) -> Checkpoint | HeadFile:
    """What is kept elsewhere: a signed head (since schema 3) or an older per-log checkpoint file."""
    path = Path(path)
    obj = _read_json_file(path, "checkpoint file")
    if isinstance(obj, dict) and obj.get("format") == HEAD_FORMAT:
        where = f"head file {path}"
        return _head_file_from(_check_header(obj, where, HEAD_FORMAT, _HEAD_VERSIONS), where)
    return read_checkpoint_file(path)
