"""Signed heads: one per committed transaction, over every log at once.

A per-log checkpoint shows a log was cut or rewritten only while that log's checkpoints survive, and says
nothing about a log deleted whole. A head instead commits to the store: each head lists the logs its
transaction appended to (`changes`: log id, new last seq, new last hash), chains onto the head before it
(`prev_hash`), and is signed. The newest head therefore fixes the whole history of heads, hence the size and
last hash of every log (the *state* they replay to): a log deleted or cut short, heads deleted, or records
written without a head no longer verify. This is Certificate Transparency's shape (RFC 9162) with the
commits as its leaves and a hash chain as its tree: consistency between two heads is the chain between
them, and a witness that keeps a head elsewhere turns a rollback of everything into a finding.

Pure functions and frozen values, no storage: the store writes heads (`store/trail.py`), the verifier
replays them (`journal.py`).
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from pollwarden.audit.chain import _PACK_1, _PACK_2, GENESIS_HASH, MAX_SEQ, check_utc_time, is_hash_text
from pollwarden.audit.checkpoint import key_id_of
from pollwarden.audit.crypto import length_prefixed
from pollwarden.audit.vouch import Vouch, vouches_text

__all__ = [
    "HEAD_DOMAIN",
    "Change",
    "Head",
    "changes_text",
    "head_digest",
    "head_hash_of",
    "head_hash_ok",
    "head_message",
    "head_valid",
    "parse_changes",
    "sign_head",
]

HEAD_DOMAIN = b"pollwarden-head-v1"
SIGNATURE_DOMAIN = b"pollwarden-head-signature-v1"

Change = tuple[str, int, str]
"""(log_id, the log's last seq after the commit, that record's this_hash)."""

HEAD_FIELDS = ("counter", "prev_hash", "changes", "logs", "records", "at", "head_hash", "key_id", "signature")
"""The fields every head has; a head from schema 8 on also has `vouches` (`Head.vouches`)."""


class Head(NamedTuple):
    """One signed head. `changes` is kept as the exact text the hash covers (canonical JSON).

    A named tuple, not a dataclass: a verifier builds one per commit of the store's history, and a tuple is
    built from a database row several times faster while staying immutable and typed."""

    counter: int
    prev_hash: str
    changes: str
    logs: int
    records: int
    at: str
    head_hash: str
    key_id: str
    signature: str
    vouches: str = ""
    """The rows this commit changed, as the exact text the hash covers (canonical JSON, `audit/vouch.py`); '' for a
    head written before schema 8, whose hash covers no vouches at all."""

    def to_json(self) -> dict[str, Any]:
        data = self._asdict()
        if not self.vouches:  # a head from before schema 8 is written as it always was
            del data["vouches"]
        return data

    @classmethod
    def from_json(cls, data: object) -> Head:
        """Build from parsed JSON, checking types so a malformed file fails here with the field named."""
        if not isinstance(data, Mapping):
            raise ValueError("a head must be a JSON object")
        missing = [name for name in HEAD_FIELDS if name not in data]
        if missing:
            raise ValueError(f"head lacks field(s): {', '.join(missing)}")
        for name in ("prev_hash", "changes", "at", "head_hash", "key_id", "signature"):
            if not isinstance(data[name], str):
                raise ValueError(f"head field {name!r} must be a string")
        vouches = data.get("vouches", "")
        if not isinstance(vouches, str):
            raise ValueError("head field 'vouches' must be a string")
        for name in ("counter", "logs", "records"):
            value = data[name]
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SEQ:
                raise ValueError(f"head field {name!r} must be a non-negative integer")
        return cls(**{name: data[name] for name in HEAD_FIELDS}, vouches=vouches)

    @classmethod
    def from_row(cls, row: tuple[Any, ...] | list[Any]) -> Head:
        """From a database row in `HEAD_FIELDS` order, then `vouches` (a row without it is a head from before)."""
        counter, prev_hash, changes, logs, records, at, head_hash, key_id, signature, *rest = row
        vouches = rest[0] if rest else ""
        return cls(int(counter), prev_hash, changes, int(logs), int(records), at, head_hash, key_id, signature, vouches)

    def replayed(self) -> tuple[Any, ...]:
        """The head as a verifier replays it (`journal.HeadRow`): every field its hash covers, and the hash."""
        return (*self[:7], self.vouches)

    def values(self) -> tuple[Any, ...]:
        return tuple(self)


def changes_text(changes: Iterable[Change]) -> str:
    """The canonical text of a commit's changes: `[[log_id, seq, hash], ...]` sorted by log id, no spaces."""
    ordered = sorted(changes)
    seen: set[str] = set()
    for log_id, seq, this_hash in ordered:
        if not isinstance(log_id, str) or not log_id or log_id in seen:
            raise ValueError(f"changes name log {log_id!r} twice or not as a non-empty string")
        seen.add(log_id)
        if isinstance(seq, bool) or not isinstance(seq, int) or not 1 <= seq <= MAX_SEQ:
            raise ValueError(f"change of log {log_id!r}: seq must be an integer from 1, got {seq!r}")
        if not is_hash_text(this_hash):
            raise ValueError(f"change of log {log_id!r}: hash must be 64 lowercase hex characters")
    return json.dumps([list(change) for change in ordered], ensure_ascii=False, separators=(",", ":"))


# The text of a head with one change, in the canonical form `changes_text` writes, with a log id that
# needs no JSON escape: what a store writes for a commit of one record. Matching it is exactly what
# json.loads and the checks below would conclude (JSON strings refuse raw control characters; without a
# backslash the string is its own content), at a third of the cost; anything else takes the general path.
_ONE_CHANGE = re.compile(r'\[\["([^"\\\x00-\x1f]+)",([1-9][0-9]{0,18}),"([0-9a-f]{64})"\]\]')


def parse_changes(text: str) -> list[Change]:
    """The changes a head's text lists; ValueError names what is malformed (a verifier reports it)."""
    match = _ONE_CHANGE.fullmatch(text) if isinstance(text, str) else None
    if match is not None:
        log_id, seq_text, this_hash = match.groups()
        seq = int(seq_text)
        if seq <= MAX_SEQ:
            return [(log_id, seq, this_hash)]
    return parse_changes_json(text)


def parse_changes_json(text: str) -> list[Change]:
    """`parse_changes` by the general path alone: json.loads, then every change checked."""
    value = changes_value(text)
    found = _checked_at_once(value)
    return found if found is not None else checked_each(value)


def changes_value(text: str) -> list[Any]:
    """A head's changes text as JSON, which must be a list."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        raise ValueError("its changes are not JSON") from None
    if not isinstance(value, list):
        raise ValueError("its changes are not a JSON list")
    return value


def checked_each(value: list[Any]) -> list[Change]:
    """The rules of a head's changes, one change at a time; ValueError names the first that breaks one."""
    found: list[Change] = []
    for item in value:
        if not (isinstance(item, list) and len(item) == 3):
            raise ValueError("a change is not a [log_id, seq, hash] triple")
        log_id, seq, this_hash = item
        if not isinstance(log_id, str) or not log_id:
            raise ValueError("a change names no log")
        if isinstance(seq, bool) or not isinstance(seq, int) or not 1 <= seq <= MAX_SEQ:
            raise ValueError(f"the change of log {log_id!r} has a malformed seq")
        if not is_hash_text(this_hash):
            raise ValueError(f"the change of log {log_id!r} has a malformed hash")
        found.append((log_id, seq, this_hash))
    return found


def _checked_at_once(value: list[Any]) -> list[Change] | None:
    """The checks of `checked_each` over all changes at once, or None to let it say what is wrong.

    A group-commit head lists one change per log of its batch, and these checks run in C. json gives exact
    lists, strings and ints, so `type(...) is` concludes what the loop's isinstance does (a bool's type is
    not int)."""
    if not value or set(map(type, value)) != {list} or set(map(len, value)) != {3}:
        return None
    log_ids, seqs, hashes = zip(*value, strict=True)
    if (
        set(map(type, log_ids)) != {str}
        or not all(log_ids)
        or set(map(type, seqs)) != {int}
        or not 1 <= min(seqs) <= max(seqs) <= MAX_SEQ
        or set(map(type, hashes)) != {str}
        or set(map(len, hashes)) != {64}
    ):
        return None
    joined = "".join(hashes)
    try:
        # Lowercase, and hex digits only: fromhex refuses anything else but ASCII whitespace, which would
        # leave fewer bytes than half the characters.
        if joined != joined.lower() or len(bytes.fromhex(joined)) * 2 != len(joined):
            return None
    except ValueError:
        return None
    return list(zip(log_ids, seqs, hashes, strict=True))


def head_hash_of(
    *, counter: int, prev_hash: str, changes: str, logs: int, records: int, at: str, vouches: str = ""
) -> str:
    """SHA-256 that chains a head onto the one before it, as 64 lowercase hex characters.

    ``SHA-256( lp(b"pollwarden-head-v1") || counter (8-byte BE) || lp(bytes.fromhex(prev_hash))
    || lp(changes UTF-8) || logs (8-byte BE) || records (8-byte BE) || lp(at)
    [|| lp(b"vouches") || lp(vouches UTF-8)] )``, the last two frames only when `vouches` is not empty: a head
    written before schema 8 has none, and hashes exactly as it did.
    """
    return head_digest(counter, prev_hash, changes, logs, records, at, vouches)


def head_digest(counter: int, prev_hash: str, changes: str, logs: int, records: int, at: str, vouches: str = "") -> str:
    """`head_hash_of` with positional arguments and no checks (a malformed field raises one of `DIGEST_ERRORS`)."""
    message = head_message(counter, bytes.fromhex(prev_hash), changes, logs, records, at, vouches)
    return hashlib.sha256(message).hexdigest()


def head_message(
    counter: int, prev_raw: bytes, changes: str, logs: int, records: int, at: str, vouches: str = ""
) -> bytes:
    """The exact bytes a head's hash covers, with the previous head's hash raw: the one place the encoding
    lives. A verifier replaying heads builds one per commit, chaining each head's raw digest into the next, so
    it never turns a hash back from hex; three packs of 8-byte big-endian integers instead of six calls."""
    changes_raw = changes.encode("utf-8")
    at_raw = at.encode("utf-8")
    parts = [
        _HEAD_DOMAIN_FRAME,
        _PACK_2(counter, len(prev_raw)),
        prev_raw,
        _PACK_1(len(changes_raw)),
        changes_raw,
        _PACK_3(logs, records, len(at_raw)),
        at_raw,
    ]
    if vouches:
        vouches_raw = vouches.encode("utf-8")
        parts += (_VOUCHES_FRAME, _PACK_1(len(vouches_raw)), vouches_raw)
    return b"".join(parts)


# Built once: a verifier hashes every head (one per commit).
_HEAD_DOMAIN_FRAME = length_prefixed(HEAD_DOMAIN)
_VOUCHES_FRAME = length_prefixed(b"vouches")
_PACK_3 = struct.Struct(">QQQ").pack

DIGEST_ERRORS = (ValueError, TypeError, AttributeError, OverflowError, UnicodeEncodeError, struct.error)
"""What `head_digest` and `head_message` raise for a malformed field (a stored head is hostile until checked)."""


def _signed_message(head_hash: str, key_id: str) -> bytes:
    return b"".join(
        (
            length_prefixed(SIGNATURE_DOMAIN),
            length_prefixed(bytes.fromhex(head_hash)),
            length_prefixed(key_id.encode("utf-8")),
        )
    )


def sign_head(
    key: Ed25519PrivateKey,
    *,
    counter: int,
    prev_hash: str,
    changes: Iterable[Change],
    logs: int,
    records: int,
    at: str,
    vouches: Iterable[Vouch] | None = None,
) -> Head:
    """Hash and sign one head; `prev_hash` is the previous head's `head_hash` (GENESIS_HASH for counter 1).

    `vouches`: the rows this commit changed (a store from schema 8 on always gives them, none as an empty list);
    None writes a head as before schema 8, which vouches for nothing."""
    for name, value in (("counter", counter), ("logs", logs), ("records", records)):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SEQ:
            raise ValueError(f"{name} must be an integer from 0 to 2**63-1, got {value!r}")
    if counter < 1:
        raise ValueError("the first head has counter 1")
    if not is_hash_text(prev_hash) or (counter == 1) != (prev_hash == GENESIS_HASH):
        raise ValueError("prev_hash must be the previous head's hash, and GENESIS_HASH only for head 1")
    check_utc_time(at)
    text = changes_text(changes)
    vouched = "" if vouches is None else vouches_text(vouches)
    head_hash = head_hash_of(
        counter=counter, prev_hash=prev_hash, changes=text, logs=logs, records=records, at=at, vouches=vouched
    )
    key_id = key_id_of(key.public_key())
    signature = key.sign(_signed_message(head_hash, key_id)).hex()
    return Head(counter, prev_hash, text, logs, records, at, head_hash, key_id, signature, vouched)


def head_hash_ok(head: Head) -> bool:
    """True when the stored `head_hash` is the hash of the head's fields; malformed fields are simply False."""
    try:
        if not is_hash_text(head.prev_hash) or not is_hash_text(head.head_hash):
            return False
        computed = head_digest(
            head.counter, head.prev_hash, head.changes, head.logs, head.records, head.at, head.vouches
        )
    except DIGEST_ERRORS:
        return False
    return computed == head.head_hash


def head_valid(head: Head, public_key: Ed25519PublicKey) -> bool:
    """True only if the hash is right and `public_key` signed it; any malformed field is simply invalid."""
    try:
        if head.key_id != key_id_of(public_key) or not head_hash_ok(head):
            return False
        public_key.verify(bytes.fromhex(head.signature), _signed_message(head.head_hash, head.key_id))
    except (InvalidSignature, ValueError, TypeError, AttributeError):
        return False
    return True
