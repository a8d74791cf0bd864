"""The commands around agents: `mcp` serves them; `approvals`, `approve-session`, `revoke-session` and
`approve-call` are how a person answers them (R41, R42, R48).

Kept out of cli.py so the agent surface is one module; cli.py adds these with one call to
`add_agent_commands`. Every answer is a once-only state change of a grant, recorded in the agent session's
audit chain with the name of the person who gave it.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .home import resolve_home
from .operating import HomeError, open_store
from .store.base import Grant, agent_log_id
from .store.open import AnyStore
from .watch import utcnow

EXIT_OK, EXIT_USAGE = 0, 2


def _usage(message: str) -> Exception:
    from .cli import UsageError  # cli imports this module; by the time a command runs, cli is complete

    return UsageError(message)


def _store(home: str | None, keys: str = "write") -> AnyStore:
    try:
        return open_store(resolve_home(home), keys=keys)
    except HomeError as exc:
        raise _usage(str(exc)) from None


def _by(args: argparse.Namespace) -> str:
    by = (args.by or "").strip()
    if not by:
        raise _usage("--by must name the person deciding (it is recorded in the audit log)")
    return by


def cmd_mcp(args: argparse.Namespace) -> int:
    directory = Path(args.contracts)
    if not directory.is_dir():
        raise _usage(f"--contracts {directory}: not a directory of contract files (*.toml)")
    from .mcp_server import load_contracts, serve

    contracts, problems = load_contracts(directory)
    if not contracts:
        details = "; ".join(problems) if problems else "no *.toml files"
        raise _usage(f"--contracts {directory}: no usable contract ({details})")
    return serve(directory, resolve_home(args.home))


def _describe(grant: Grant) -> str:
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


def cmd_approvals(args: argparse.Namespace) -> int:
    store = _store(args.home, keys="none")
    try:
        rows = store.grants() if args.all else store.grants(status="pending")
    finally:
        store.close()
    if args.json:
        print(json.dumps([{**g.to_json(), "what": _describe(g)} for g in rows], sort_keys=True))
        return EXIT_OK
    if not rows:
        print("no pending approvals" if not args.all else "no approvals")
        return EXIT_OK
    for grant in rows:
        print(f"{grant.grant_id}  {grant.kind:7}  {grant.status:8}  {_describe(grant)}")
        if grant.status == "pending":
            command = "approve-session" if grant.kind == "session" else "approve-call"
            print(f"    approve: pollwarden {command} {grant.grant_id} --by YOUR_NAME   (refuse: add --refuse)")
    return EXIT_OK


def _answer(args: argparse.Namespace, *, kind: str, expect: str, status: str, verb: str) -> int:
    by = _by(args)
    store = _store(args.home)
    try:
        grant = store.get_grant(args.grant)
        if grant is None:
            raise _usage(f"no approval request {args.grant!r}; `pollwarden approvals` lists the pending ones")
        if grant.kind != kind:
            other = "approve-session" if grant.kind == "session" else "approve-call"
            raise _usage(f"{args.grant} is a {grant.kind} approval; answer it with `pollwarden {other}`")
        if grant.status != expect:
            when = f" at {grant.decided_at.isoformat()}" if grant.decided_at else ""
            who = f" by {grant.decided_by}" if grant.decided_by else ""
            raise _usage(f"{args.grant} is {grant.status}{who}{when}, not {expect}; nothing changed")
        changed = store.decide_grant(
            grant.grant_id,
            expect=expect,
            status=status,
            by=by,
            at=utcnow(),
            log_id=agent_log_id(grant.subject),
            note=args.note,
        )
    finally:
        store.close()
    if not changed:
        raise _usage(f"{args.grant} was answered by someone else a moment ago; nothing changed")
    print(f"{verb} {args.grant}: {_describe(grant)}")
    return EXIT_OK


def cmd_approve_session(args: argparse.Namespace) -> int:
    if args.refuse:
        return _answer(args, kind="session", expect="pending", status="refused", verb="refused")
    return _answer(args, kind="session", expect="pending", status="approved", verb="approved")


def cmd_revoke_session(args: argparse.Namespace) -> int:
    store = _store(args.home, keys="none")
    try:
        grant = store.get_grant(args.grant)
    finally:
        store.close()
    if grant is not None and grant.kind == "session" and grant.status == "pending":
        # Revoking what was never approved is a refusal: the session gets no approval at all.
        return _answer(args, kind="session", expect="pending", status="refused", verb="refused")
    return _answer(args, kind="session", expect="approved", status="revoked", verb="revoked")


def cmd_approve_call(args: argparse.Namespace) -> int:
    if args.refuse:
        return _answer(args, kind="call", expect="pending", status="refused", verb="refused")
    return _answer(args, kind="call", expect="pending", status="approved", verb="approved")


def add_agent_commands(sub: Any, home_arg_adder: Callable[[argparse.ArgumentParser], None]) -> None:
    """Add `mcp`, `approvals`, `approve-session`, `revoke-session` and `approve-call` to the CLI's subparsers."""
    m = sub.add_parser("mcp", help="serve agents over MCP (stdio): bounded waits, credentials kept here")
    m.add_argument("--contracts", required=True, help="directory of contract files; agents name them by `name`")
    home_arg_adder(m)
    m.set_defaults(func=cmd_mcp)

    ap = sub.add_parser("approvals", help="list agent approval requests waiting for a person")
    ap.add_argument("--all", action="store_true", help="include answered, revoked and expired ones")
    ap.add_argument("--json", action="store_true")
    home_arg_adder(ap)
    ap.set_defaults(func=cmd_approvals)

    for name, func, help_text in (
        ("approve-session", cmd_approve_session, "approve an agent session's use of one contract"),
        ("revoke-session", cmd_revoke_session, "revoke a session approval: later calls need a new one"),
        ("approve-call", cmd_approve_call, "approve (or --refuse) one provider call an agent is waiting on"),
    ):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("grant", help="the approval request id (see `pollwarden approvals`)")
        p.add_argument("--by", required=True, help="who decides (recorded in the audit log)")
        p.add_argument("--note")
        if name != "revoke-session":
            p.add_argument("--refuse", action="store_true", help="refuse instead of approving")
        home_arg_adder(p)
        p.set_defaults(func=func)


__all__ = ["add_agent_commands"]
