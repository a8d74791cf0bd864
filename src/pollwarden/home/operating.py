"""What an operator does to a home, shared by the CLI and the console.

Open the home's store, read an operation's stored contract, apply a person's decision, answer an agent's
approval request, verify the audit log. Each problem a person can act on is a `HomeError` (or the
`DecisionError` of `apply_decision`) whose message is shown as it is: the CLI prints it and exits 2, the
console shows it as a flash message.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from ..audit.crypto import AuditError
from ..clock import CarriedClock, utcnow
from ..core.bounded import TooLarge, read_bounded
from ..core.contract.parse import Contract, ContractError
from ..core.escalation import OptionKind
from ..core.record import OperationRecord
from ..errors import PollwardenError
from ..shown import shown
from ..store.base import Grant, Store, StoreError, UnreadableRecord, agent_log_id
from ..store.delivery import WITNESS
from ..store.open import is_postgres_url, redact_url
from ..store.open import open_store as open_target
from ..store.roles import Deliveries, Grants, Operations
from ..transport.http import CredentialError, StatusClient, resolve_secret
from .directory import database_path, ensure_home, trusted_checkpoint_path, unknown_operation, witness_config_path

MAX_WITNESS_SETTING_BYTES = 65536
"""The witness setting is one line (a directory or an HTTPS URL); a bigger file is not one pollwarden wrote."""

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    from ..actions.decisions import Outcome
    from ..audit import Checkpoint, HeadFile, StoredHeads, VerifyReport
    from ..store.witness import Witness
    from ..store.witnessing import Kept

# The audit keys, heads, witness and verifier, and `decisions`, are imported by the functions that use them: most
# commands, the console and a watch's first run import this module, and most of them never decide or verify, nor
# need keys (and with them cryptography) before a store opens.


class HomeError(PollwardenError):
    """A problem with the home, its store or an operation's contract, in words a person can act on."""


def database_target(home: Path) -> str | Path:
    """$POLLWARDEN_DB (set by --db) when given, else the home's SQLite file: one rule for every command."""
    return os.environ.get("POLLWARDEN_DB") or database_path(home)


def open_store(home: Path, *, keys: str = "write") -> Store:
    """keys: "write" loads or creates both audit keys, "read" needs the existing ones, "none" neither.

    The keys stay in the home even when the records are in PostgreSQL: a fleet shares them by environment."""
    from ..audit.keys import load_or_create_keys

    try:
        audit_keys = None
        ensure_home(home, create=keys != "none")
        if keys != "none":
            audit_keys = load_or_create_keys(home, create=keys == "write")
        return open_target(
            database_target(home),
            keys=audit_keys,
            trusted_checkpoint_path=trusted_checkpoint_path(home),
            # A reader signs no head: it sends none to the witness, which need not even be writable from here.
            witness=configured_witness(home) if keys != "none" else None,
        )
    except (StoreError, AuditError, OSError) as exc:
        raise HomeError(str(exc)) from None


def configured_witness(home: Path) -> Witness | None:
    """The witness location: $POLLWARDEN_AUDIT_WITNESS, else the one `audit witness` saved in the home."""
    from ..store.witness import Witness

    found = witness_setting(home)
    return None if found is None else Witness.parse(*found)


def witness_setting(home: Path) -> tuple[str, str] | None:
    """(the witness location as written, where it was read): $POLLWARDEN_AUDIT_WITNESS, else the home's setting
    file; None when neither is there. StoreError when the file cannot be read."""
    from ..store.witness import WITNESS_ENV

    env = os.environ.get(WITNESS_ENV)
    if env:
        return env, WITNESS_ENV
    path = witness_config_path(home)
    try:
        text = read_bounded(path, MAX_WITNESS_SETTING_BYTES).decode("utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, TooLarge) as exc:
        raise StoreError(f"cannot read the witness setting {path}: {exc}") from None
    return text, str(path)


def operation_known(store: Operations, operation_id: str) -> bool:
    """Whether the store holds the operation, readable or not: its log is there to tell (`story`, `why`, an
    export of it) even when its row cannot be decoded."""
    try:
        return store.get(operation_id) is not None
    except UnreadableRecord:
        return True


def home_clock(home: Path) -> Callable[[], datetime]:
    """The clock of the home's store for a process that opens it call by call (the MCP server): this host's for a
    SQLite file (the SQLite store's clock is this host's), else the database server's, asked at most once a
    second and carried forward between (`clock.CarriedClock`), as a store's own `db_now` is."""
    target = database_target(home)
    if not is_postgres_url(str(target)):
        return utcnow
    from ..store.postgres import server_now

    return CarriedClock(lambda: server_now(str(target)))


def contract_of(store: Store, operation_id: str, *, by: str | None) -> tuple[Contract, OperationRecord]:
    """The contract stored with an operation (not today's file) and its record, only when that text is an
    installed version (`engine.installed.runnable`). A refusal is raised as NotInstalled, nothing of that contract
    used, and recorded on the operation as `contract_refused` with `by`, the command that refused (None: the
    caller records it otherwise, as a resume does with a stop)."""
    from ..engine.installed import NotInstalled, runnable
    from ..events import ContractRefused

    stored = store.get(operation_id)
    if stored is None:
        raise HomeError(unknown_operation(store.path, operation_id))
    try:
        return runnable(store, stored.contract_text, operation_id=operation_id), stored.record
    except NotInstalled as exc:
        if by is not None:
            refused = ContractRefused(digest=exc.digest, by=by)
            with suppress(StoreError):  # a read-only home still refuses; the refusal itself is what matters
                store.append(operation_id, refused, store.db_now())
        raise
    except ContractError as exc:
        raise HomeError(str(exc)) from None


def status_client(contract: Contract, store: Store) -> StatusClient:
    """The contract's client, its requests timed by the store's clock (as every audit time is)."""
    try:
        return StatusClient(contract, resolve_secret(contract), clock=store.db_now)
    except CredentialError as exc:
        raise HomeError(str(exc)) from None


def decide(
    store: Store,
    decision_id: str,
    *,
    option: int | None,
    refuse: bool,
    by: str,
    note: str | None,
    now: datetime | None = None,
) -> Outcome:
    """Apply one option of a decision request (or refuse it) through `apply_decision`, the only way.

    Raises HomeError (no such decision, unreadable contract, the credential missing for an option that calls
    the provider: the message names its variable) or DecisionError (no such option, already decided, ...).
    """
    from ..actions.decisions import Answer, apply_decision

    stored = store.get_decision(decision_id)
    if stored is None:
        raise HomeError(f"no decision {decision_id!r}; `pollwarden decisions` lists the open ones")
    from ..engine.installed import NotInstalled

    try:
        contract, _ = contract_of(store, stored.request.operation_id, by=f"decide (by {by})")
    except NotInstalled as exc:  # a person's answer applies nothing of a contract nobody installed
        raise HomeError(f"{exc}; the decision was left open") from None
    # Only an option that sends something needs the credential: extend, pause and close must work without it. A
    # check with the credential configured now is sent here when it is configured here, else by the next watch.
    chosen = None if refuse or option is None else stored.request.option(option).kind
    client = status_client(contract, store) if chosen in (OptionKind.CANCEL, OptionKind.RESUBMIT) else None
    if chosen is OptionKind.RECHECK:
        with suppress(HomeError):
            client = status_client(contract, store)
    try:
        answer = Answer(decision_id, option, by, note, now or store.db_now(), refuse=refuse)
        return apply_decision(store, contract, answer, client)
    finally:
        if client is not None:
            client.close()


def watch_command(operation_id: str, *, home: str | None = None, db: str | None = None) -> str:
    """`pollwarden watch --operation OP [--home DIR] [--db URL]`, quoted so it runs exactly as printed.

    A PostgreSQL URL is shown without its password: the person supplies it again (or sets POLLWARDEN_DB)."""
    return command_line(["pollwarden", "watch", "--operation", operation_id], home=home, db=db)


def command_line(words: list[str], *, home: str | None = None, db: str | None = None) -> str:
    """A command with the --home/--db it must carry, quoted so it runs exactly as printed."""
    if home:
        words = [*words, "--home", home]
    if db:
        words = [*words, "--db", redact_url(db) if is_postgres_url(db) else db]
    return " ".join(shlex.quote(shown(word)) for word in words)


def answer_command(kind: str) -> str:
    """The CLI command that answers an approval request of this kind."""
    return "approve-session" if kind == "session" else "approve-call"


GRANT_ANSWERS = ("approve", "refuse", "revoke")


def describe_grant(grant: Grant) -> str:
    """One sentence a person can say yes or no to: what the agent session would be allowed."""
    detail = grant.detail
    if grant.kind == "session":
        what = f"agent session {grant.subject} may call the provider of contract {grant.scope}"
    else:
        purpose = str(detail.get("purpose") or "call").replace("_", " ")
        number = detail.get("status_request")
        count = f" {number} of {detail.get('max_status_requests')}" if number else ""
        what = (
            f"one {purpose}{count} for operation {grant.scope} (job {detail.get('job')}, contract"
            f" {detail.get('contract')}), agent session {grant.subject}"
        )
        if detail.get("expires_at"):
            what += f"; unanswered it expires at {detail['expires_at']}"
    return what


class GrantStep(NamedTuple):
    """What a person's answer does to an approval request: from `expect` to `status`, said with `verb`."""

    expect: str
    status: str
    verb: str


def grant_step(answer: str, grant: Grant | None) -> GrantStep:
    """The step of a person's answer: "approve", "refuse" or "revoke".

    Approving and refusing answer a pending request. Revoking takes back an approved session; revoking one
    that was never approved is a refusal (`grant` is the request as last read), so the session gets no approval.
    """
    if answer == "approve":
        return GrantStep("pending", "approved", "approved")
    if answer == "refuse":
        return GrantStep("pending", "refused", "refused")
    if answer != "revoke":
        raise ValueError(f"unknown answer {answer!r}; one of {', '.join(GRANT_ANSWERS)}")
    if grant is not None and grant.kind == "session" and grant.status == "pending":
        return GrantStep("pending", "refused", "refused")
    return GrantStep("approved", "revoked", "revoked")


@dataclass(frozen=True)
class GrantAnswer:
    grant: Grant
    """The request as it was when answered."""
    status: str
    message: str
    """`approved s1a2b3c4d5: agent session ... may call ...`: what the CLI prints and the console shows."""


def answer_grant(
    store: Grants,
    grant_id: str,
    *,
    kind: str | None,
    step: GrantStep,
    by: str,
    note: str | None,
    now: datetime | None = None,
) -> GrantAnswer:
    """Move an approval request from `step.expect` to `step.status` once, audited in its agent session's log with
    `by`.

    `kind` None accepts either kind. Raises HomeError, saying why nothing changed: no such request, the other
    kind, not in `expect` (already answered, revoked or expired), or answered by someone else a moment ago.
    """
    expect, status, verb = step
    grant = store.get_grant(grant_id)
    if grant is None:
        raise HomeError(f"no approval request {grant_id!r}; `pollwarden approvals` lists the pending ones")
    if kind is not None and grant.kind != kind:
        raise HomeError(
            f"{grant_id} is a {grant.kind} approval; answer it with `pollwarden {answer_command(grant.kind)}`"
        )
    if grant.status != expect:
        when = f" at {grant.decided_at.isoformat()}" if grant.decided_at else ""
        who = f" by {grant.decided_by}" if grant.decided_by else ""
        raise HomeError(f"{grant_id} is {grant.status}{who}{when}, not {expect}; nothing changed")
    changed = store.decide_grant(
        grant.grant_id,
        expect=expect,
        status=status,
        by=by,
        at=now or store.db_now(),
        log_id=agent_log_id(grant.subject),
        note=note,
    )
    if not changed:
        raise HomeError(f"{grant_id} was answered by someone else a moment ago; nothing changed")
    return GrantAnswer(grant, status, f"{verb} {grant_id}: {describe_grant(grant)}")


def trusted_checkpoint(path: Path | None) -> tuple[Checkpoint | HeadFile | None, str | None]:
    """The head (or older checkpoint) kept outside the database, if there is one: it turns a rollback
    into a finding."""
    from ..audit.export import read_kept_file

    if path is None or not path.exists():
        return None, None
    try:
        return read_kept_file(path), str(path)
    except AuditError as exc:
        raise HomeError(f"checkpoint kept elsewhere is unreadable: {exc}") from None


def kept_elsewhere(
    home: Path, explicit: Path | None, witness: str | None, recorded: tuple[str, str] | None
) -> tuple[Kept, Checkpoint | None]:
    """Every head kept outside the database that the store must extend: the file given (`--checkpoint`), else the
    home's head file; and every head file of the witness location (`--witness`, else the configured one and the
    one the log says was configured, `recorded`: (location, when)). A location that cannot be read is a finding
    of the report, never silence; a malformed head file given by hand is a HomeError (exit 2)."""
    from ..audit import Checkpoint, HeadFile
    from ..store.witnessing import Kept, read_location

    kept = Kept()
    found, name = trusted_checkpoint(explicit or trusted_checkpoint_path(home))
    checkpoint = found if isinstance(found, Checkpoint) else None
    if isinstance(found, HeadFile):
        kept.heads.append(replace(found, source=name))
    if name is not None:
        kept.names.append(name)
    for location in _witness_locations(home, witness, recorded, kept):
        read_location(location, kept)
    return kept, checkpoint


def _witness_locations(home: Path, witness: str | None, recorded: tuple[str, str] | None, kept: Kept) -> list[str]:
    """Where to read heads kept elsewhere, and what the home's setting and the log's disagree on."""
    from ..store.witness import WITNESS_ENV
    from ..store.witnessing import LocationError, reading_location

    try:
        if witness is not None:
            return [reading_location(witness, "--witness")]
        setting = witness_setting(home)
        configured = reading_location(*setting) if setting is not None else None
    except (StoreError, LocationError) as exc:
        raise HomeError(str(exc)) from None
    locations = [configured] if configured is not None else []
    value, at = recorded if recorded is not None else ("", "")
    if not value:
        if configured is not None and recorded is None:
            kept.notes.append(
                f"the witness at {configured} is not in the log yet: run `pollwarden audit witness {configured}`"
                " once, so that `audit verify` holds even if the home's setting is removed"
            )
        return locations
    try:
        value = reading_location(value, "the witness setting the log vouches for")
    except LocationError as exc:
        kept.problems.append(f"{exc}: the setting was changed outside pollwarden")
        return locations
    said = f"the log says a witness at {value} was configured at {at}"
    if setting is None:
        kept.problems.append(
            f"{said}, but the home's setting is gone: it was removed outside pollwarden (`pollwarden audit witness"
            " --clear` records a clear); the witness was checked all the same"
        )
    elif configured != value and setting[1] == WITNESS_ENV:
        kept.notes.append(f"{WITNESS_ENV} names {configured}, but {said}: both were checked")
    elif configured != value:
        kept.problems.append(
            f"the home's setting names {configured}, but {said}: the setting was changed outside pollwarden"
            " (`pollwarden audit witness` records each change); both were checked"
        )
    if value not in locations:
        locations.append(value)
    return locations


@dataclass(frozen=True)
class AuditCheck:
    report: VerifyReport
    source: str
    trusted: str | None
    """The checkpoint file the log was checked against (None: rollback could not be checked)."""
    notes: tuple[str, ...] = ()


PENDING_NOTE = (
    "this store was upgraded from schema 2 and not written since: no signed head covers it yet, so its logs are "
    "checked by their per-log checkpoints only; any write, or `pollwarden audit checkpoint`, signs its first head"
)


def verify_home(
    home: Path,
    checkpoint: Path | None = None,
    pinned: tuple[Ed25519PublicKey, str] | None = None,
    witness: str | None = None,
) -> AuditCheck:
    """Verify the home's log; needs no decryption key (the chain is over ciphertext, checkpoints are signed).

    `pinned` is (the only key to trust, where it came from): the home's own key is then just a claim.
    `witness` is a witness location to check instead of the configured ones (`audit verify --witness`).
    """
    from ..audit import ALL_LOGS, Problem, key_id_of, load_public_key, refuse_private_key, verify
    from ..store.witnessing import WITNESS_LOG

    target = database_target(home)
    if isinstance(target, Path) and not target.exists():
        raise HomeError(f"no audit log in {home} (no {target.name}); pass --home, --db or --file EXPORT")
    try:
        home_key = load_public_key(home)
    except AuditError as exc:
        raise HomeError(str(exc)) from None
    store = open_store(home, keys="none")
    notes: tuple[str, ...] = ()
    try:
        with store.audit_snapshot() as snapshot:
            kept, trusted = kept_elsewhere(home, checkpoint, witness, snapshot.setting(WITNESS_LOG))
            checkpoints = snapshot.checkpoints()
            heads: StoredHeads | None = snapshot.stored_heads()
            if heads is not None and heads.newest is None and snapshot.pending():
                heads, notes = None, (PENDING_NOTE,)
            pinned_key = None
            if pinned is not None:
                pinned_key, source = pinned
                known = [cp.key_id for cp in checkpoints] + ([key_id_of(home_key)] if home_key is not None else [])
                known += snapshot.head_key_ids()  # none when there are no heads
                try:
                    refuse_private_key(pinned_key, source, known)
                except AuditError as exc:
                    raise HomeError(str(exc)) from None
            report = verify(
                snapshot.rows(),
                checkpoints,
                home_key,
                trusted_checkpoint=trusted,
                witnesses=kept.heads,
                pinned_key=pinned_key,
                heads=heads,
                rotations=snapshot.rotations(),
                rows=snapshot.vouched_rows(),
                findings=[Problem(ALL_LOGS, None, what) for what in kept.problems],
            )
        # A head the witness has not taken (the outbox): said, never a failure.
        notes += witness_notes(store, _witness_or_none(home))
    finally:
        store.close()
    notes = (*notes, *kept.notes)
    if report.unvouched:
        notes = (*notes, unvouched_note(report.unvouched))
    names = ", ".join(kept.names) or None
    return AuditCheck(report, str(store.path), names, notes)  # a URL's password is already left out


def _witness_or_none(home: Path) -> Witness | None:
    """The home's configured witness, or None when there is none or its setting cannot be read (verify says so)."""
    try:
        return configured_witness(home)
    except StoreError:
        return None


def unvouched_note(count: int) -> str:
    return (
        f"{count} row{'s' if count != 1 else ''} not yet vouched for: the store was upgraded to schema 8 and no head"
        " has been signed since; its next write (or `pollwarden audit checkpoint`) vouches for every row as it stands"
    )


def witness_notes(store: Deliveries, witness: Witness | None) -> tuple[str, ...]:
    """What `audit verify` says of the deliveries to `witness` (the home's, configured; a reader's store holds
    none of its own): a head it has not taken, and why."""
    if witness is None:
        return ()
    key = witness.key
    notes: list[str] = []
    for entry in store.outbox():
        if entry.kind != WITNESS or entry.subject != key or entry.status != "pending":
            continue
        if entry.attempts:
            notes.append(
                f"the witness has not taken head #{entry.head}: {entry.attempts} attempt(s) failed, the last with"
                f" {entry.last_error}; `pollwarden outbox` shows it, and every long-running pollwarden process of"
                " this home tries again"
            )
        else:
            notes.append(
                f"head #{entry.head} waits in the outbox for the witness (a command that ends leaves it to the next"
                " process); `pollwarden outbox --deliver` sends it now"
            )
    return tuple(notes)
