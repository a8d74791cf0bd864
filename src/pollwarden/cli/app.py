"""The `pollwarden` command: parse, call the library, render. No decision is made here.

Exit codes: 0 succeeded, 1 internal error, 2 bad input (nothing changed), 3 the job ended at the
provider without success, 4 stopped and escalated for a decision, 5 the audit log is tampered with;
129, 130, 143 stopped by SIGHUP, SIGINT, SIGTERM (the record is kept); 141 stdout was closed (`| head`).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from contextlib import suppress
from typing import NoReturn

from .. import __version__
from ..errors import PollwardenError
from ..shown import shown
from ..simulator import scenario_listing
from .agents import add_agent_commands
from .audit import cmd_audit_checkpoint, cmd_audit_export, cmd_audit_repair, cmd_audit_verify, cmd_audit_witness
from .catalogue import add_contracts_command
from .common import EXIT_USAGE, _positive, add_var_flag, port_number, real_number, resume_hint, whole_number
from .decide import cmd_cancel, cmd_decide, cmd_decisions, cmd_fetch_result, cmd_submit
from .fleet import add_fleet_commands
from .inspect import cmd_status, cmd_story, cmd_why
from .interrupts import EXIT_BROKEN_PIPE, Interrupted, interruptible
from .serve import cmd_console, cmd_demo, cmd_simulate
from .watch import Progress, cmd_watch

# -- parser ---------------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"pollwarden: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="pollwarden", description="Bounded, durable, auditable waiting on external jobs.")
    parser.add_argument("--version", action="version", version=f"pollwarden {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def home(p: argparse.ArgumentParser) -> None:
        p.add_argument("--home", help="state directory (default $POLLWARDEN_HOME or ~/.local/state/pollwarden)")
        p.add_argument("--db", help="SQLite file or postgresql:// URL (default $POLLWARDEN_DB, else the home's file)")

    w = sub.add_parser("watch", help="watch one job until a validated result or a reasoned stop")
    w.add_argument(
        "--contract",
        help="a shipped contract's name (`pollwarden contracts`) or a contract file; to resume, the operation's"
        " stored one is used",
    )
    w.add_argument("--job", help="the provider's job id (required for a new operation, unless --status-url)")
    w.add_argument(
        "--status-url",
        help="the status URL the provider returned (for a contract with status_url_handles); it is the job id"
        " unless --job is given",
    )
    add_var_flag(w)
    w.add_argument("--operation", help="operation id: new to create, existing to resume")
    w.add_argument("--deadline", help="wall-clock deadline from the operation's start, e.g. 40m")
    w.add_argument("--max-requests", type=_positive, help="status request budget")
    w.add_argument("--max-transport-failures", type=_positive, help="transport-failure budget")
    w.add_argument("--base-delay", help="backoff base delay, e.g. 5s")
    w.add_argument("--max-delay", help="backoff cap, e.g. 120s")
    w.add_argument("--useful-for", help="business deadline: stop with usefulness_window_closed after this, e.g. 20m")
    w.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    home(w)
    w.set_defaults(func=cmd_watch)

    s = sub.add_parser("status", help="show one operation, or a table of all")
    s.add_argument("operation", nargs="?")
    s.add_argument("--json", action="store_true")
    home(s)
    s.set_defaults(func=cmd_status)

    st = sub.add_parser("story", help="an operation's decisions, told in order")
    st.add_argument("operation")
    st.add_argument("--json", action="store_true")
    home(st)
    st.set_defaults(func=cmd_story)

    sim = sub.add_parser(
        "simulate",
        help="run a scripted job provider on loopback",
        epilog=scenario_listing(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sim.add_argument("--host", default="127.0.0.1")
    sim.add_argument("--port", type=port_number, default=8080)
    sim.add_argument("--token-env", help="require 'Authorization: Bearer $VAR' on every job request")
    sim.add_argument(
        "--time-scale", type=real_number(0, 1000), default=1.0, help="scale scenario times (0.1 = ten times faster)"
    )
    sim.add_argument("--quiet", action="store_true", help="print only the listening line")
    sim.set_defaults(func=cmd_simulate)

    audit = sub.add_parser("audit", help="verify, export or repair the encrypted, hash-chained audit log")
    audit_sub = audit.add_subparsers(dest="audit_command", required=True, parser_class=_Parser)
    av = audit_sub.add_parser("verify", help="check the chains and signed heads; needs no decryption key")
    av.add_argument("--file", help="an export written by `audit export` (default: the log in the home)")
    av.add_argument(
        "--checkpoint",
        metavar="FILE",
        help="a signed head kept elsewhere (`audit checkpoint --out`): the store must extend it"
        " (default: FILE.checkpoint for an export; else the newest of the home's and the witness's)",
    )
    av.add_argument(
        "--public-key",
        metavar="FILE",
        help="trust only this signing public key (a copy of keys/signing.pub kept elsewhere)",
    )
    av.add_argument("--json", action="store_true")
    home(av)
    av.set_defaults(func=cmd_audit_verify)
    ae = audit_sub.add_parser("export", help="write a self-contained, verifiable export")
    ae.add_argument("--out", required=True)
    ae.add_argument("--operation", help="only this operation's log")
    home(ae)
    ae.set_defaults(func=cmd_audit_export)
    ac = audit_sub.add_parser("checkpoint", help="write the newest signed head, for a witness to keep elsewhere")
    ac.add_argument("--out", help="the file to write (default or '-': standard output)")
    home(ac)
    ac.set_defaults(func=cmd_audit_checkpoint)
    aw = audit_sub.add_parser("witness", help="show, set or clear where new signed heads are sent automatically")
    aw.add_argument("location", nargs="?", help="a directory on another volume, or an https:// URL")
    aw.add_argument("--clear", action="store_true", help="send heads nowhere but the home's audit-head.checkpoint")
    home(aw)
    aw.set_defaults(func=cmd_audit_witness)
    ar = audit_sub.add_parser("repair", help="cut a torn last line from an export (kept aside in FILE.torn)")
    ar.add_argument("--file", required=True)
    ar.set_defaults(func=cmd_audit_repair)

    wy = sub.add_parser("why", help="explain one decision and replay it through today's core")
    wy.add_argument("operation")
    which = wy.add_mutually_exclusive_group()
    which.add_argument("--seq", type=whole_number(0, 2**62), help="the decision's record number (see `story --json`)")
    which.add_argument("--at", help="the last decision at or before this RFC 3339 time")
    wy.add_argument("--json", action="store_true")
    home(wy)
    wy.set_defaults(func=cmd_why)

    ds = sub.add_parser("decisions", help="list decision requests waiting for a person")
    ds.add_argument("operation", nargs="?")
    ds.add_argument("--all", action="store_true", help="include decided, refused and expired ones")
    ds.add_argument("--json", action="store_true")
    home(ds)
    ds.set_defaults(func=cmd_decisions)

    dc = sub.add_parser("decide", help="apply one option of a decision request, or refuse it")
    dc.add_argument("decision")
    dc.add_argument("--option", type=whole_number(0, 9999))
    dc.add_argument("--refuse", action="store_true")
    dc.add_argument("--by", default=os.environ.get("USER", ""), help="who decides (recorded in the audit log)")
    dc.add_argument("--note")
    dc.add_argument("--json", action="store_true")
    home(dc)
    dc.set_defaults(func=cmd_decide)

    sb = sub.add_parser("submit", help="submit a job as the contract's [submit] table documents, then watch it")
    sb.add_argument("--contract", required=True)
    sb.add_argument("--body", required=True, help="JSON request body")
    add_var_flag(sb)
    sb.add_argument("--operation")
    sb.add_argument("--deadline")
    sb.add_argument("--max-requests", type=_positive)
    sb.add_argument("--useful-for", help="business deadline: the result stops being useful after this, e.g. 20m")
    sb.add_argument("--watch", action="store_true", help="watch the job right away")
    sb.add_argument("--json", action="store_true")
    home(sb)
    sb.set_defaults(func=cmd_submit)

    fr = sub.add_parser("fetch-result", help="download the validated result (only after success)")
    fr.add_argument("operation")
    fr.add_argument("--out", required=True)
    home(fr)
    fr.set_defaults(func=cmd_fetch_result)

    cn = sub.add_parser("cancel", help="send the documented cancel, only as a decided decision option")
    cn.add_argument("operation")
    home(cn)
    cn.set_defaults(func=cmd_cancel)

    add_contracts_command(sub)
    add_fleet_commands(sub, home)
    add_agent_commands(sub, home)

    co = sub.add_parser("console", help="serve the operator console (a web page) on loopback")
    co.add_argument("--host", default="127.0.0.1", help="address to bind (default loopback only)")
    co.add_argument("--port", type=port_number, default=8765)
    co.add_argument("--token-env", help="take the login token from this environment variable instead of a new one")
    home(co)
    co.set_defaults(func=cmd_console)

    d = sub.add_parser("demo", help="watch two jobs on a simulated provider and print their stories")
    home(d)
    d.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    for number, word in enumerate(words, 1):
        # Bytes that are not UTF-8 arrive as lone surrogates: no id, path or note may be one, and a store would
        # refuse to encode it; one message here instead of a traceback wherever the word first reaches a store.
        if any("\ud800" <= ch <= "\udfff" for ch in word):
            _say(f"pollwarden: error: argument {number} ({shown(word)}) is not valid UTF-8 text; nothing was done")
            return EXIT_USAGE
    parser = build_parser()
    args = parser.parse_args(words)
    func: Callable[[argparse.Namespace], int] = args.func
    if getattr(args, "db", None):
        os.environ["POLLWARDEN_DB"] = args.db  # one rule for every store this process opens (operating.py)
    try:
        with interruptible():
            return func(args)
    except PollwardenError as exc:  # every error a person acts on, with its own exit code (errors.py)
        _say(f"pollwarden: error: {shown(exc)}")
        return exc.exit_code
    except Interrupted as exc:
        _say(_interrupted(args, exc))
        return exc.exit_code
    except BrokenPipeError:
        # The reader went away (`| head`): nothing more can be said on stdout, and Python's own flush at exit
        # would raise again and print a traceback, so stdout now points at /dev/null.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_BROKEN_PIPE


def _say(line: str) -> None:
    with suppress(OSError, ValueError):
        print(line, file=sys.stderr)


def _interrupted(args: argparse.Namespace, exc: Interrupted) -> str:
    if sys.stdout.isatty():
        with suppress(OSError, ValueError):
            sys.stdout.write("\r\033[K")  # the live countdown line, if one was being drawn
            sys.stdout.flush()
    if args.command == "enqueue" and getattr(args, "jobs_file", None) is not None:
        return (
            f"pollwarden: interrupted by {exc}; the batches written are whole. Run the same command again to continue"
        )
    if args.command not in ("watch", "submit"):
        return f"pollwarden: interrupted by {exc}"
    operation = Progress.watching or args.operation
    if operation is None:
        return "interrupted before the operation was created; nothing to resume"
    return f"interrupted; the record is kept. Resume with: {resume_hint(args, operation)}"
