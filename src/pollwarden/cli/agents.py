"""The commands around agents: `mcp` serves them; `approvals`, `approve-session`, `revoke-session` and
`approve-call` are how a person answers them (R41, R42, R48).

The agent surface is one module (its flags are in cli/parser.py, with every command's). Every answer
is a once-only state change of a grant, recorded in the agent session's audit chain with the name of the
person who gave it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..home.directory import resolve_home
from ..home.operating import GrantStep, HomeError, answer_command, answer_grant, describe_grant, grant_step, open_store
from ..store.base import Store
from .common import UsageError, settle

EXIT_OK, EXIT_USAGE = 0, 2


def _usage(message: str) -> Exception:
    return UsageError(message)


def _store(home: str | None, keys: str = "write") -> Store:
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
    if args.connect:
        if args.contracts or args.home or args.db:
            raise _usage(
                "--connect carries MCP to the broker, which serves its own contracts and home: give --connect alone"
            )
        from ..isolation.shim import run_shim

        return run_shim(args.connect)
    if not args.contracts:
        raise _usage("give --contracts DIR (served here, as this user) or --connect SOCKET (a broker's)")
    directory = Path(args.contracts)
    if not directory.is_dir():
        raise _usage(f"--contracts {directory}: not a directory of contract files (*.toml)")
    from ..mcp_server import load_contracts, serve

    settle()
    contracts, problems = load_contracts(directory)
    if not contracts:
        details = "; ".join(problems) if problems else "no *.toml files"
        raise _usage(f"--contracts {directory}: no usable contract ({details})")
    return serve(directory, resolve_home(args.home))


def cmd_approvals(args: argparse.Namespace) -> int:
    store = _store(args.home, keys="none")
    try:
        rows = store.grants() if args.all else store.grants(status="pending")
    finally:
        store.close()
    if args.json:
        print(json.dumps([{**g.to_json(), "what": describe_grant(g)} for g in rows], sort_keys=True))
        return EXIT_OK
    if not rows:
        print("no pending approvals" if not args.all else "no approvals")
        return EXIT_OK
    for grant in rows:
        print(f"{grant.grant_id}  {grant.kind:7}  {grant.status:8}  {describe_grant(grant)}")
        if grant.status == "pending":
            command = answer_command(grant.kind)
            print(f"    approve: pollwarden {command} {grant.grant_id} --by YOUR_NAME   (refuse: add --refuse)")
    return EXIT_OK


def _answer(args: argparse.Namespace, *, kind: str, step: GrantStep) -> int:
    by = _by(args)
    store = _store(args.home)
    try:
        answer = answer_grant(store, args.grant, kind=kind, step=step, by=by, note=args.note)
    except HomeError as exc:
        raise _usage(str(exc)) from None
    finally:
        store.close()
    print(answer.message)
    return EXIT_OK


def cmd_approve_session(args: argparse.Namespace) -> int:
    return _answer(args, kind="session", step=grant_step("refuse" if args.refuse else "approve", None))


def cmd_revoke_session(args: argparse.Namespace) -> int:
    store = _store(args.home, keys="none")
    try:
        grant = store.get_grant(args.grant)
    finally:
        store.close()
    return _answer(args, kind="session", step=grant_step("revoke", grant))


def cmd_approve_call(args: argparse.Namespace) -> int:
    return _answer(args, kind="call", step=grant_step("refuse" if args.refuse else "approve", None))
