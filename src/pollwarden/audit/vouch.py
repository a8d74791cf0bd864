"""Rows the audit vouches for: the hash of a row's durable content, committed to by the signed head of the commit
that changed it.

A log proves what happened to an operation; the operation's row is what the next worker acts on. Without a
commitment to the row, editing it (a stopped operation put back to `active` with its budget unspent) changes
what happens next while every log still verifies. So each head lists, beside the logs it appended to, the rows
its commit changed (`vouches`): per row, keyed by the log that tells its story,

- `state`: the hash of the columns a write may change (an operation's phase, times, counts and record);
- `identity`: the hash of the columns fixed when the row was made (an operation's job, contract name, contract
  text and creation time), or None when the commit did not make the row (unchanged since it was vouched for).

Identity and state are apart because a writer vouches only for what it writes: a fenced write sets the state and
never reads the contract text back, so a contract swapped in the database is never vouched for by the next poll.

Pure functions, no storage: the store computes the hashes of the rows it writes and of the rows a verifier
reads (`store/vouching.py`), the verifier compares them with what the heads replay to (`verifier.py`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pollwarden.audit.chain import _PACK_1, is_hash_text
from pollwarden.audit.crypto import length_prefixed

__all__ = ["ROW_DOMAIN", "RowFindings", "Vouch", "Vouched", "compare_rows", "parse_vouches", "row_hash", "vouches_text"]

ROW_DOMAIN = b"pollwarden-row-v1"

Vouch = tuple[str, str, str | None]
"""(log_id, state hash, identity hash or None: not made by this commit)."""

RowValue = str | int | None
"""A column as hashed: text, an integer, or NULL. A time is hashed as whole microseconds since 1970-01-01 UTC,
which both backends give back exactly (SQLite's epoch seconds as read back, PostgreSQL's microseconds)."""

_DOMAIN_FRAME = length_prefixed(ROW_DOMAIN)


def row_hash(table: str, part: str, log_id: str, values: Sequence[RowValue]) -> str:
    """``SHA-256( lp(b"pollwarden-row-v1") || lp(table) || lp(part) || lp(log_id) || count (8-byte BE)
    || per value: b"n" (NULL) | b"i" || lp(decimal) | b"s" || lp(UTF-8) )`` as 64 lowercase hex characters.

    `part` is "state" or "identity". Every value is typed and length-prefixed, so no two rows share an encoding.
    Built in one join and hashed in one call: every fenced write hashes the state it leaves."""
    parts = [_DOMAIN_FRAME]
    for text in (table, part, log_id):
        raw = text.encode("utf-8")
        parts += (_PACK_1(len(raw)), raw)
    parts.append(_PACK_1(len(values)))
    for value in values:
        kind = type(value)  # exact types: a bool is no integer here, and a database gives plain str and int
        if value is None:
            parts.append(b"n")
        elif kind is str:
            raw = value.encode("utf-8", "surrogatepass")  # type: ignore[union-attr]
            parts += (b"s", _PACK_1(len(raw)), raw)
        elif kind is int:
            raw = str(value).encode("ascii")
            parts += (b"i", _PACK_1(len(raw)), raw)
        else:
            raise TypeError(f"a row value is text, an integer or NULL, not {kind.__name__}")
    return hashlib.sha256(b"".join(parts)).hexdigest()


def vouches_text(vouches: Iterable[Vouch]) -> str:
    """The canonical text of a commit's vouches: `[[log_id, state, identity or null], ...]` sorted by log id."""
    ordered = sorted(vouches, key=lambda vouch: vouch[0])
    seen: set[str] = set()
    for log_id, state, identity in ordered:
        if not isinstance(log_id, str) or not log_id or log_id in seen:
            raise ValueError(f"vouches name log {log_id!r} twice or not as a non-empty string")
        seen.add(log_id)
        if not is_hash_text(state) or not (identity is None or is_hash_text(identity)):
            raise ValueError(f"the vouch for log {log_id!r} must hold 64 lowercase hex characters per hash")
    return json.dumps([list(vouch) for vouch in ordered], ensure_ascii=False, separators=(",", ":"))


# A commit that writes one row it did not make (a poll): what `vouches_text` writes for it when the log id needs
# no JSON escape. Matching it concludes what json.loads and the checks would, at a fraction of the cost.
_ONE_WRITE = re.compile(r'\[\["([^"\\\x00-\x1f]+)","([0-9a-f]{64})",null\]\]')


def parse_vouches(text: str) -> list[Vouch]:
    """The vouches a head's text lists ('' for a head from before vouches: none); ValueError says what is malformed."""
    if not text:
        return []
    match = _ONE_WRITE.fullmatch(text)
    if match is not None:
        return [(match.group(1), match.group(2), None)]
    try:
        value: Any = json.loads(text)
    except (ValueError, RecursionError):
        raise ValueError("its vouches are not JSON") from None
    if not isinstance(value, list):
        raise ValueError("its vouches are not a JSON list")
    found: list[Vouch] = []
    for item in value:
        if not (isinstance(item, list) and len(item) == 3):
            raise ValueError("a vouch is not a [log_id, state, identity] triple")
        log_id, state, identity = item
        if not isinstance(log_id, str) or not log_id:
            raise ValueError("a vouch names no log")
        if not is_hash_text(state) or not (identity is None or is_hash_text(identity)):
            raise ValueError(f"the vouch for log {log_id!r} has a malformed hash")
        found.append((log_id, state, identity))
    return found


@dataclass(slots=True)
class Vouched:
    """What the heads last vouched for one row: its state's hash and the head that did, and its identity's
    hash and the head that did (None: no head ever vouched for the row's identity)."""

    state: str
    state_at: int
    identity: str | None = None
    identity_at: int = 0


@dataclass(slots=True)
class RowFindings:
    """What comparing the stored rows with what the heads vouched for found: (log id, what) per problem."""

    rows: int = 0
    """Rows read."""
    unvouched: int = 0
    """Rows no head has vouched for yet: a store upgraded to schema 8 whose next head has not been signed."""
    problems: list[tuple[str, str]] | None = None


def compare_rows(rows: Iterable[Vouch], vouched: Mapping[str, Vouched], since: int | None) -> RowFindings:
    """Each stored row (log id, state, identity, as `store/vouching.py` hashes it) against what the heads last
    vouched for under its log. `since` is the counter of the first head that vouched for rows (None: none did,
    so every row is simply not vouched for yet). Streams the rows; keeps only the set of log ids seen."""
    found = RowFindings(problems=[])
    problems = found.problems
    assert problems is not None
    seen: set[str] = set()
    changed = "it was changed outside pollwarden, and what happens next would follow the edit"
    for log_id, state, identity in rows:
        found.rows += 1
        seen.add(log_id)
        known = vouched.get(log_id)
        if known is None:
            if since is None:
                found.unvouched += 1
            else:
                problems.append(
                    (
                        log_id,
                        f"no signed head vouches for its row, though every row is vouched for since head #{since}:"
                        " the row was written outside pollwarden",
                    )
                )
            continue
        if known.identity is None:
            problems.append(
                (log_id, f"its row was vouched for (head #{known.state_at}) but never made under a signed head")
            )
        elif known.identity != identity:
            problems.append(
                (
                    log_id,
                    f"its row's identity (job, contract name, contract or creation time) differs from what head"
                    f" #{known.identity_at} vouched for: {changed}",
                )
            )
        if known.state != state:
            problems.append(
                (
                    log_id,
                    f"its row (phase, times, request counts or record) differs from what head #{known.state_at}"
                    f" vouched for, the last commit that changed it: {changed}",
                )
            )
    for log_id in sorted(set(vouched) - seen):
        problems.append(
            (
                log_id,
                f"deleted: head #{vouched[log_id].state_at} vouches for a row of this log, but the store holds none",
            )
        )
    return found
