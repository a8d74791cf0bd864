"""Heads kept elsewhere, as a verifier reads them: every head file of a witness location, whatever key signed it.

Delivery (`store/witness.py`, `HeadKeeper`) writes each key's newest head to `pollwarden-head-<key_id>.json` in a
witness directory, or posts it to a witness URL. A verifier that looked only for the file of the home's current
key found none once a forger had made a new key, and said "intact". So verification reads every head file of the
location (a directory: each `*.json` in it; a URL: what it answers to GET, one head file or a list of them), and
the verifier (`audit/verifier.py`) requires each to be signed by a key of the store's lineage of rotations.

A location that cannot be read is a finding, never silence: the heads it holds are the only evidence against a
rollback of everything on the machine. A location is one store's: another store's heads there are reported,
since nothing tells them apart from a replaced key's.
"""

from __future__ import annotations

import json
import os
import stat
import urllib.error
import urllib.request
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..audit import AuditError, HeadFile
from ..audit.export import head_file_from_json, read_kept_file
from ..errors import PollwardenError
from .base import StoreError
from .witness import Witness

__all__ = ["WITNESS_LOG", "Kept", "LocationError", "read_location", "reading_location"]

WITNESS_LOG = "@audit/witness"
"""The log (and the `audit_settings` row) of the witness setting: `audit witness` records each change there, so a
verifier knows the location from the store, and a home whose setting was removed behind its back is seen."""

MAX_FILES = 1000
"""Head files read from one directory: one per signing key the store ever had, far fewer in practice."""
MAX_ANSWER_BYTES = 64 * 1024 * 1024
"""What a witness URL may answer (a head file lists every log's tip: large for a big fleet, not this)."""
GET_TIMEOUT = 10.0


class LocationError(PollwardenError):
    """A witness location that is not one (a relative path, a URL of another scheme): exit 2, naming what to give."""


@dataclass
class Kept:
    """What was read of the heads kept elsewhere: the heads, each with where it was read; what could not be
    read, as findings; and notes (a witness that holds no head yet)."""

    heads: list[HeadFile] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    """Every file or URL whose heads were checked, for the report to say."""


def reading_location(text: str, source: str) -> str:
    """A witness location to read: an absolute directory, or an https URL (http only to a loopback address). The
    directory need not exist or be writable here (a verifier's read-only mount): reading it says what is wrong."""
    location = text.strip()
    if not location:
        raise LocationError(f"{source} is empty: give a directory or an https:// URL")
    if "://" in location:
        try:  # a URL is checked as delivery checks it (it touches nothing to check one)
            return Witness.parse(location, source).location
        except StoreError as exc:
            raise LocationError(str(exc)) from None
    path = Path(location).expanduser()
    if not path.is_absolute():
        raise LocationError(f"{source}: a witness directory must be an absolute path, got {location!r}")
    return str(path)


def read_location(location: str, kept: Kept) -> None:
    """Every head file `location` holds, into `kept`; what cannot be read becomes a finding."""
    if "://" in location:
        _read_url(location, kept)
    else:
        _read_directory(Path(location), kept)


def _cannot(kept: Kept, location: str, why: str) -> None:
    kept.problems.append(
        f"the witness at {location} cannot be read ({why}): the heads kept there cannot be checked, so a rollback"
        " of everything on this machine cannot be ruled out"
    )


def _read_directory(directory: Path, kept: Kept) -> None:
    try:
        names = sorted(entry.name for entry in os.scandir(directory) if entry.name.endswith(".json"))
    except OSError as exc:
        _cannot(kept, str(directory), exc.strerror or type(exc).__name__)
        return
    before = len(kept.heads)
    for name in names[:MAX_FILES]:
        path = directory / name
        try:
            if not stat.S_ISREG(path.stat().st_mode):
                continue
            found = read_kept_file(path)
        except OSError as exc:
            _cannot(kept, str(path), exc.strerror or type(exc).__name__)
            continue
        except AuditError as exc:
            _cannot(kept, str(path), str(exc))
            continue
        if isinstance(found, HeadFile):
            kept.heads.append(replace(found, source=str(path)))
            kept.names.append(str(path))
    if len(names) > MAX_FILES:
        _cannot(kept, str(directory), f"it holds over {MAX_FILES} files ending in .json: not one store's heads")
    if len(kept.heads) == before and len(names) <= MAX_FILES:
        kept.notes.append(f"the witness at {directory} holds no head yet")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A witness answers for itself: a redirect elsewhere is not followed (nor is a head taken from there)."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def _read_url(url: str, kept: Kept) -> None:
    opener = urllib.request.build_opener(_NoRedirect)
    request = urllib.request.Request(url, method="GET", headers={"Accept": "application/json"})
    try:
        with opener.open(request, timeout=GET_TIMEOUT) as answer:
            body = answer.read(MAX_ANSWER_BYTES + 1)
    except urllib.error.HTTPError as exc:
        _cannot(kept, url, f"it answered HTTP {exc.code}")
        return
    except (OSError, ValueError) as exc:  # refused, timed out, a name that does not resolve, TLS
        _cannot(kept, url, type(exc).__name__)
        return
    if len(body) > MAX_ANSWER_BYTES:
        _cannot(kept, url, f"its answer is over {MAX_ANSWER_BYTES} bytes")
        return
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        _cannot(kept, url, "its answer is not JSON")
        return
    files = value if isinstance(value, list) else [value]
    for index, item in enumerate(files[:MAX_FILES]):
        where = f"{url} (head file {index + 1})" if isinstance(value, list) else url
        try:
            kept.heads.append(replace(head_file_from_json(item, where), source=where))
        except AuditError as exc:
            _cannot(kept, url, str(exc))
            continue
        kept.names.append(where)
    if not files:
        kept.notes.append(f"the witness at {url} holds no head yet")
