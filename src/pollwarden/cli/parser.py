"""The `pollwarden` command's grammar: every command, its flags and its help, with no command's code loaded.

Each command names its function as a `Command` (module in `pollwarden.cli`, name), imported only when it runs:
`pollwarden --help`, and every command, load only what they use (`mcp` the MCP SDK, `console` the console,
`worker` prometheus_client, a `postgresql://` --db psycopg), while `--help` still lists every command.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

from .. import __version__
from ..fleet.defaults import (
    AUTO_PROCESSES_CAP,
    DEFAULT_CONCURRENCY,
    LANES,
    MAX_PROCESSES,
    POSTGRES_CONCURRENCY,
    auto_processes,
)
from ..simulator.scenarios import scenario_listing
from .common import EXIT_USAGE, _positive, add_var_flag, host_name, port_number, real_number, whole_number


@dataclass(frozen=True)
class Command:
    """A command's function, named by its module in `pollwarden.cli` and its name, imported when it runs."""

    module: str
    name: str

    def __call__(self, args: argparse.Namespace) -> int:
        func: Callable[[argparse.Namespace], int] = getattr(
            importlib.import_module(f"{__package__}.{self.module}"), self.name
        )
        return func(args)


CONNECT_HELP = (
    "the socket of a `pollwarden broker`: it runs the command on its own home, and records the decision with your"
    " user name as the kernel tells it"
)


LIMIT_FLAGS = {
    "--deadline": "wall-clock deadline from the operation's start, e.g. 40m",
    "--max-requests": "status request budget",
    "--max-transport-failures": "transport-failure budget",
    "--base-delay": "backoff base delay, e.g. 5s",
    "--max-delay": "backoff cap, e.g. 120s",
    "--useful-for": "business deadline: stop with usefulness_window_closed after this, e.g. 20m",
    "--lag-target": "p95 detection lag the contract's learnt schedule keeps, e.g. 30s",
}
"""The limits a new operation may be given, in the same words on every command that takes them (`watch` takes
all; `enqueue` and `submit` some)."""

_COUNTS = frozenset({"--max-requests", "--max-transport-failures"})


def limit_flags(p: argparse.ArgumentParser, *flags: str) -> None:
    """`flags` of LIMIT_FLAGS (all of them when none is named), each with its help; the budgets whole numbers."""
    for flag in flags or tuple(LIMIT_FLAGS):
        p.add_argument(flag, type=_positive if flag in _COUNTS else str, help=LIMIT_FLAGS[flag])


def job_flags(p: argparse.ArgumentParser) -> None:
    """--job and --status-url: the job a new operation watches (`watch`, `enqueue`)."""
    p.add_argument("--job", help="the provider's job id (required for a new operation, unless --status-url)")
    p.add_argument(
        "--status-url",
        help="the status URL the provider returned (for a contract with status_url_handles); it is the job id"
        " unless --job is given",
    )


def serving_flags(
    p: argparse.ArgumentParser, server: str = "", *, port: int | None = None, what: str | None = None, dest: str = ""
) -> None:
    """--[SERVER-]port and --[SERVER-]host of a server the command runs, bound to loopback unless a host is given,
    read as `[DEST_]port` and `[DEST_]host` (DEST: SERVER unless given); the port is required when it has no
    default and the server is the command itself (no SERVER)."""
    flag = f"--{server}-" if server else "--"
    stem = f"{dest or server}_" if dest or server else ""
    required = port is None and not server
    p.add_argument(f"{flag}port", dest=f"{stem}port", type=port_number, default=port, required=required, help=what)
    bind = "address to bind (default loopback only)"
    p.add_argument(f"{flag}host", dest=f"{stem}host", type=host_name, default="127.0.0.1", help=bind)


def connect_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--connect", metavar="SOCKET", help=CONNECT_HELP)


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
        p.add_argument(
            "--db",
            type=database,
            help="SQLite file or postgresql:// URL (default $POLLWARDEN_DB, else the home's file)",
        )

    w = sub.add_parser("watch", help="watch one job until a validated result or a reasoned stop")
    w.add_argument(
        "--contract",
        help="a shipped contract's name (`pollwarden contracts`) or a contract file; to resume, the operation's"
        " stored one is used",
    )
    job_flags(w)
    add_var_flag(w)
    w.add_argument("--operation", help="operation id: new to create, existing to resume")
    limit_flags(w)
    w.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    w.add_argument(
        "--quiet",
        action="store_true",
        help="on a terminal too, one plain line per decision instead of the line redrawn in place",
    )
    home(w)
    w.set_defaults(func=Command("watch", "cmd_watch"))

    s = sub.add_parser(
        "status",
        help="show one operation, or a table of all, with who owns each and what is stuck",
        description="Show one operation, or a table of all. OWNER is who is polling an active operation (or"
        " last did): a watch process, the Python API, an MCP server or a worker, since when, and whether that"
        " process is gone. FLAGS: overdue (due longer ago than the lease TTL and nobody polling it), orphaned"
        " (its watching process is gone: resume it with `watch --operation ID`, or let a worker take it).",
    )
    s.add_argument("operation", nargs="?")
    s.add_argument("--json", action="store_true")
    s.add_argument("--overdue", action="store_true", help="only operations that are overdue")
    s.add_argument("--orphaned", action="store_true", help="only operations whose watching process is gone")
    home(s)
    connect_flag(s)
    s.set_defaults(func=Command("inspect", "cmd_status"))

    sch = sub.add_parser(
        "schedules",
        help="each contract's learnt schedule: its jobs' durations, the checks it plans, requests per job saved",
    )
    sch.add_argument("--json", action="store_true")
    home(sch)
    sch.set_defaults(func=Command("schedules", "cmd_schedules"))

    st = sub.add_parser("story", help="an operation's decisions, told in order")
    st.add_argument("operation")
    st.add_argument("--json", action="store_true")
    home(st)
    connect_flag(st)
    st.set_defaults(func=Command("inspect", "cmd_story"))

    sim = sub.add_parser(
        "simulate",
        help="run a scripted job provider on loopback",
        epilog=scenario_listing(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    serving_flags(sim, port=8080)
    sim.add_argument("--token-env", help="require 'Authorization: Bearer $VAR' on every job request")
    sim.add_argument(
        "--time-scale", type=real_number(0, 1000), default=1.0, help="scale scenario times (0.1 = ten times faster)"
    )
    sim.add_argument("--quiet", action="store_true", help="print only the listening line")
    sim.add_argument(
        "--push-to",
        metavar="URL",
        help="at each scripted job's end post a signed push (Standard Webhooks) here, e.g. a receiver's"
        " http://127.0.0.1:PORT/hooks/CONTRACT",
    )
    sim.add_argument("--push-secret-env", metavar="NAME", help="the environment variable holding the whsec_ secret")
    sim.add_argument(
        "--push-lost", type=real_number(0, 1), default=0.0, help="the fraction of pushes lost on purpose (default 0)"
    )
    sim.set_defaults(func=Command("serve", "cmd_simulate"))

    audit = sub.add_parser("audit", help="verify, export or repair the encrypted, hash-chained audit log")
    audit_sub = audit.add_subparsers(dest="audit_command", required=True, parser_class=_Parser)
    av = audit_sub.add_parser("verify", help="check the chains and signed heads; needs no decryption key")
    av.add_argument("--file", help="an export written by `audit export` (default: the log in the home)")
    av.add_argument(
        "--checkpoint",
        metavar="FILE",
        help="a signed head kept elsewhere (`audit checkpoint --out`): the store must extend it"
        " (default: FILE.checkpoint for an export; else the home's head file)",
    )
    av.add_argument(
        "--witness",
        metavar="DIR|URL",
        help="check every head file this witness location holds, whatever key signed it (default: the location"
        " `audit witness` configured, and the one the log says was configured)",
    )
    av.add_argument(
        "--public-key",
        metavar="FILE",
        help="trust only this signing public key (a copy of keys/signing.pub kept elsewhere)",
    )
    av.add_argument("--json", action="store_true")
    home(av)
    av.set_defaults(func=Command("audit", "cmd_audit_verify"))
    ae = audit_sub.add_parser("export", help="write a self-contained, verifiable export")
    ae.add_argument("--out", required=True)
    ae.add_argument("--operation", help="only this operation's log")
    home(ae)
    ae.set_defaults(func=Command("audit", "cmd_audit_export"))
    ac = audit_sub.add_parser("checkpoint", help="write the newest signed head, for a witness to keep elsewhere")
    ac.add_argument("--out", help="the file to write (default or '-': standard output)")
    home(ac)
    ac.set_defaults(func=Command("audit", "cmd_audit_checkpoint"))
    aw = audit_sub.add_parser("witness", help="show, set or clear where new signed heads are sent automatically")
    aw.add_argument("location", nargs="?", help="a directory on another volume, or an https:// URL")
    aw.add_argument("--clear", action="store_true", help="send heads nowhere but the home's audit-head.checkpoint")
    aw.add_argument("--by", default=os.environ.get("USER", ""), help="who changes it (recorded in the audit log)")
    home(aw)
    aw.set_defaults(func=Command("audit", "cmd_audit_witness"))
    ak = audit_sub.add_parser(
        "rotate-key",
        help="replace the signing key with a new one, linked by a rotation the old key signs",
        description="Make a new signing key and have the old one sign, in the audit log, that the heads after this"
        " commit are signed by the new one: a verifier follows that link from the key of any head kept elsewhere."
        " Restart every process that writes to the store afterwards: one still holding the old key is refused.",
    )
    ak.add_argument("--by", required=True, help="who rotates the key (recorded in the audit log)")
    ak.add_argument(
        "--key-out",
        metavar="FILE",
        help="write the new private key to FILE (a new file, mode 0600) instead of the home's keys/signing.key:"
        " needed when the signing key comes from POLLWARDEN_SIGNING_KEY",
    )
    home(ak)
    ak.set_defaults(func=Command("audit", "cmd_audit_rotate_key"))
    ar = audit_sub.add_parser("repair", help="cut a torn last line from an export (kept aside in FILE.torn)")
    ar.add_argument("--file", required=True)
    ar.set_defaults(func=Command("audit", "cmd_audit_repair"))

    ob = sub.add_parser(
        "outbox",
        help="show the deliveries waiting to go out (decision webhooks, the witness's heads); --deliver sends them",
        description="Decision webhooks and the witness's heads are written to the outbox with the commit they"
        " announce and sent by the delivery loop of each long-running process (worker, watch, MCP server, broker,"
        " console, Python API). A command that ends (decide, enqueue, a watch after its short wait) leaves what it"
        " queued for the next process; this shows it, and --deliver sends it now.",
    )
    ob.add_argument(
        "--deliver",
        action="store_true",
        help="attempt every pending delivery now, once each (a webhook's outcome is audited), and show what came of it",
    )
    ob.add_argument("--json", action="store_true")
    home(ob)
    ob.set_defaults(func=Command("outbox", "cmd_outbox"))

    wy = sub.add_parser("why", help="explain one decision and replay it through today's core")
    wy.add_argument("operation")
    which = wy.add_mutually_exclusive_group()
    which.add_argument("--seq", type=whole_number(0, 2**62), help="the decision's record number (see `story --json`)")
    which.add_argument("--at", help="the last decision at or before this RFC 3339 time")
    wy.add_argument("--json", action="store_true")
    home(wy)
    connect_flag(wy)
    wy.set_defaults(func=Command("inspect", "cmd_why"))

    ds = sub.add_parser(
        "decisions",
        help="list decision requests waiting for a person; `decisions close` closes those about ended jobs",
        description="List the decision requests waiting for a person (of one operation, or all). `pollwarden"
        " decisions close --by NAME [--reason REASON] [--note N]` closes, without a prompt, every open decision about"
        " a job the provider ended (failed, cancelled, expired), one audited decision each.",
    )
    ds.add_argument("operation", nargs="?", help="an operation's id; or `close` (see above)")
    ds.add_argument("--all", action="store_true", help="include decided, refused and expired ones")
    ds.add_argument(
        "--reason", help="only this reason's decisions (with close: job_failed, job_cancelled or job_expired)"
    )
    ds.add_argument("--by", help="with close: who closes them (recorded in the audit log); required")
    ds.add_argument("--note", help="with close: why, recorded with each")
    ds.add_argument("--json", action="store_true")
    home(ds)
    connect_flag(ds)
    ds.set_defaults(func=Command("decide", "cmd_decisions"))

    dc = sub.add_parser("decide", help="apply one option of a decision request, or refuse it")
    dc.add_argument("decision")
    dc.add_argument("--option", type=whole_number(0, 9999))
    dc.add_argument("--refuse", action="store_true")
    dc.add_argument("--by", default=os.environ.get("USER", ""), help="who decides (recorded in the audit log)")
    dc.add_argument("--note")
    dc.add_argument("--json", action="store_true")
    home(dc)
    connect_flag(dc)
    dc.set_defaults(func=Command("decide", "cmd_decide"))

    sb = sub.add_parser("submit", help="submit a job as the contract's [submit] table documents, then watch it")
    sb.add_argument("--contract", required=True)
    sb.add_argument(
        "--body",
        required=True,
        metavar="FILE",
        help="a file holding the JSON request body (- reads standard input), sent as the contract's [submit] says",
    )
    add_var_flag(sb)
    sb.add_argument("--operation")
    limit_flags(sb, "--deadline", "--max-requests", "--useful-for")
    sb.add_argument("--watch", action="store_true", help="watch the job right away")
    sb.add_argument("--json", action="store_true")
    home(sb)
    sb.set_defaults(func=Command("decide", "cmd_submit"))

    fr = sub.add_parser(
        "fetch-result", help="download the validated result (after success, or the finished part a job that ended left)"
    )
    fr.add_argument("operation")
    fr.add_argument("--out", required=True)
    home(fr)
    fr.set_defaults(func=Command("decide", "cmd_fetch_result"))

    cn = sub.add_parser("cancel", help="send the documented cancel, only as a decided decision option")
    cn.add_argument("operation")
    home(cn)
    cn.set_defaults(func=Command("decide", "cmd_cancel"))

    _contracts_command(sub, home)
    _fleet_commands(sub, home)
    _agent_commands(sub, home)

    co = sub.add_parser("console", help="serve the operator console (a web page) on loopback")
    serving_flags(co, port=8765)
    co.add_argument("--token-env", help="take the login token from this environment variable instead of a new one")
    home(co)
    co.set_defaults(func=Command("serve", "cmd_console"))

    d = sub.add_parser("demo", help="watch two jobs on a simulated provider and print their stories")
    home(d)
    d.set_defaults(func=Command("serve", "cmd_demo"))
    return parser


def _contracts_command(sub: Any, home: Callable[[argparse.ArgumentParser], None]) -> None:
    c = sub.add_parser(
        "contracts",
        help="list the shipped provider contracts (`contracts show NAME` prints one, `contracts check` replays an"
        " answer through one); install one into a store",
    )
    c.add_argument("--json", action="store_true")
    c.set_defaults(func=Command("catalogue", "cmd_contracts"))
    inner = c.add_subparsers(dest="contracts_command", required=False, parser_class=type(c))
    show = inner.add_parser("show", help="print a shipped contract's TOML (copy it to write your own)")
    show.add_argument("name")
    show.set_defaults(func=Command("catalogue", "cmd_contracts"))
    install = inner.add_parser(
        "install",
        help="install a contract version into the store: only installed versions are enqueued and run by workers",
        description="Install one contract version (a file, or a shipped name with its --var values) into the store's"
        " registry, audited. Workers, resumes, `decide` and `fetch-result` run an operation only when the contract"
        " it carries is an installed version, and `enqueue` never installs: an operation runs with the credential"
        " of whoever runs it, so an operator chooses what that may be. Installing the same text again changes"
        " nothing.",
    )
    install.add_argument("contract", help="a contract file, or a shipped contract's name")
    add_var_flag(install)
    install.add_argument("--by", required=True, help="who installs it (recorded in the audit log)")
    install.add_argument("--json", action="store_true")
    home(install)
    install.set_defaults(func=Command("catalogue", "cmd_contracts_install"))
    check = inner.add_parser(
        "check",
        help="replay one recorded answer through a contract: its meaning, fields and next wait; sends nothing",
        description="Replay one recorded status answer through the contract as a watch's first check would read"
        " it, and print its meaning, the fields the contract reads (the result among them, the error, the hints)"
        " and the next wait with its source. Nothing is sent and no store is opened. --answer FILE is the JSON"
        ' body, or {"status": 200, "headers": {...}, "body": ...} ("body_text" for a body that is not JSON), or'
        " - for standard input. Exit 0 when a watch would act on it (wait, succeed, or end with the job), 4 when it"
        " would stop for a person (unknown for what the contract does not document), 2 for a bad file.",
    )
    check.add_argument("contract", help="a shipped contract's name, or a contract file")
    check.add_argument("--answer", required=True, metavar="FILE", help="the recorded answer (- for standard input)")
    add_var_flag(check)
    check.add_argument("--json", action="store_true")
    check.set_defaults(func=Command("check", "cmd_contracts_check"))
    listing = inner.add_parser(
        "installed", help="list the contract versions installed in the store (with who installed each, and when)"
    )
    listing.add_argument("name", nargs="?", help="only this contract name's versions")
    listing.add_argument("--json", action="store_true")
    home(listing)
    listing.set_defaults(func=Command("catalogue", "cmd_contracts_installed"))


_whole_processes = whole_number(1, MAX_PROCESSES)


def database(text: str) -> str:
    """`--db`, refused at the parser when it cannot name a database (`store.open.check_target`, which a store
    opened from $POLLWARDEN_DB goes through as well)."""
    from ..store.base import StoreError
    from ..store.open import check_target

    try:
        check_target(text)
    except StoreError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _processes(text: str) -> int:
    """--processes: `auto` (argparse applies this to the default too) or a whole number in range."""
    if text.strip().lower() == "auto":
        return auto_processes()
    try:
        return _whole_processes(text)
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(
            f"{exc} (or auto: one per usable core, at most {AUTO_PROCESSES_CAP})"
        ) from None


_processes.__name__ = "process count"  # argparse words its own errors with the type's name


def _fleet_commands(sub: Any, home: Callable[[argparse.ArgumentParser], None]) -> None:
    def db(p: argparse.ArgumentParser) -> None:
        home(p)  # which also adds --db

    w = sub.add_parser("worker", help="poll every due operation in the store, as one of a fleet")
    w.add_argument(
        "--concurrency",
        type=whole_number(1, 256),
        help=f"status requests in flight at once per worker process, in {LANES} batches that commit together"
        f" (default {DEFAULT_CONCURRENCY} on SQLite, {POSTGRES_CONCURRENCY} on PostgreSQL)",
    )
    w.add_argument(
        "--processes",
        type=_processes,
        default="auto",
        metavar="N",
        help=f"worker processes to run, 1 to {MAX_PROCESSES}, or auto: one per usable core, at most"
        f" {AUTO_PROCESSES_CAP} (default auto; 1 runs in this process)",
    )
    serving_flags(w, "metrics", what="serve Prometheus metrics on this port")
    w.add_argument(
        "--provider-rate",
        action="append",
        metavar="NAME=RPS",
        help="fleet-wide cap of status requests per second for a contract, shared through the database",
    )
    serving_flags(w, "hooks", what="also receive provider pushes (POST /hooks/CONTRACT) on this port")
    db(w)
    w.set_defaults(func=Command("fleet", "cmd_worker"))

    mt = sub.add_parser(
        "metrics",
        help="serve the fleet's gauges on /metrics for Prometheus, read from the database: no worker needed",
        description="Serve the fleet's gauges (active, due, overdue, orphaned, rate-limited operations, open"
        " decisions by reason, the outbox) on http://HOST:PORT/metrics, read from the database at each scrape (at"
        " most once a second). A database that cannot be read answers pollwarden_fleet_scrape_ok 0 and is logged.",
    )
    serving_flags(mt, what="the port to serve on", dest="metrics")
    db(mt)
    mt.set_defaults(func=Command("fleet", "cmd_metrics"))

    hk = sub.add_parser(
        "hooks",
        help="receive the providers' signed pushes (POST /hooks/CONTRACT): each makes its operation due now",
        description="Serve POST /hooks/CONTRACT for every installed contract with a [push] table, meant to sit"
        " behind your HTTPS proxy. Each webhook secret is read from this process's environment, by the"
        " contract's [push] secret_env. A verified push makes the job's operation due now (its waiter, in"
        " any process, checks at once); it sends the provider nothing. GET /metrics counts the outcomes.",
    )
    serving_flags(hk)
    db(hk)
    hk.set_defaults(func=Command("fleet", "cmd_hooks"))

    e = sub.add_parser("enqueue", help="create an operation for the worker fleet to watch")
    e.add_argument("--contract", required=True)
    job_flags(e)
    e.add_argument("--operation")
    e.add_argument(
        "--jobs-file",
        metavar="FILE",
        help="many jobs at once: one job id per line ('-' reads standard input; blank lines and # comments are"
        " skipped); every line is checked before anything is enqueued",
    )
    e.add_argument(
        "--operation-prefix",
        metavar="P",
        help="with --jobs-file: name the operations P-1, P-2, ... in the order of the file's job ids",
    )
    limit_flags(e, "--deadline", "--max-requests", "--lag-target")
    add_var_flag(e)
    db(e)
    e.set_defaults(func=Command("fleet", "cmd_enqueue"))

    dbp = sub.add_parser("db", help="database administration")
    dbs = dbp.add_subparsers(dest="db_command", required=True)
    up = dbs.add_parser("upgrade", help="apply pending schema migrations to a PostgreSQL database")
    db(up)
    up.set_defaults(func=Command("fleet", "cmd_db_upgrade"))


def _agent_commands(sub: Any, home_arg_adder: Callable[[argparse.ArgumentParser], None]) -> None:
    """Add `mcp`, `approvals`, `approve-session`, `revoke-session` and `approve-call` to the CLI's subparsers."""
    m = sub.add_parser("mcp", help="serve agents over MCP (stdio): bounded waits, credentials kept here")
    m.add_argument("--contracts", help="directory of contract files; agents name them by `name` (not with --connect)")
    m.add_argument(
        "--connect",
        metavar="SOCKET",
        help="carry MCP to a `pollwarden broker` on this socket: this process then holds no credential, key or"
        " database (the broker's own user does)",
    )
    home_arg_adder(m)
    m.set_defaults(func=Command("agents", "cmd_mcp"))

    ap = sub.add_parser("approvals", help="list agent approval requests waiting for a person")
    ap.add_argument("--all", action="store_true", help="include answered, revoked and expired ones")
    ap.add_argument("--json", action="store_true")
    home_arg_adder(ap)
    connect_flag(ap)
    ap.set_defaults(func=Command("agents", "cmd_approvals"))

    for name, func, help_text in (
        ("approve-session", "cmd_approve_session", "approve an agent session's use of one contract"),
        ("revoke-session", "cmd_revoke_session", "revoke a session approval: later calls need a new one"),
        ("approve-call", "cmd_approve_call", "approve (or --refuse) one provider call an agent is waiting on"),
    ):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("grant", help="the approval request id (see `pollwarden approvals`)")
        p.add_argument(
            "--by", help="who decides (recorded in the audit log); with --connect, your user name, which is the default"
        )
        p.add_argument("--note")
        if name != "revoke-session":
            p.add_argument("--refuse", action="store_true", help="refuse instead of approving")
        home_arg_adder(p)
        connect_flag(p)
        p.set_defaults(func=Command("agents", func))
    _broker_commands(sub, home_arg_adder)


def _broker_commands(sub: Any, home_arg_adder: Callable[[argparse.ArgumentParser], None]) -> None:
    """`broker` (the service that holds the credential, the keys and the approvals) and `console-login`."""
    b = sub.add_parser(
        "broker",
        help="serve agents and people over a Unix socket, under a user of its own that holds the credential",
        description="Run the broker: it owns the home (store, audit keys), the contracts and the credentials, and"
        " serves agents (`pollwarden mcp --connect SOCKET`) and people (decide, approve-call, ... --connect SOCKET)"
        " over a Unix socket, telling them apart by the uid the kernel gives for each connection.",
    )
    b.add_argument("--contracts", help="directory of contract files the agents may use")
    b.add_argument("--socket", metavar="PATH", help="the Unix socket to serve on (mode 0660)")
    b.add_argument("--agents", metavar="WHO", help="users and @groups whose connections are agents (comma list)")
    b.add_argument("--approvers", metavar="WHO", help="users and @groups who may decide and approve (comma list)")
    b.add_argument("--secrets", metavar="FILE", help="KEY=VALUE lines for the contracts' secret_env (mode 0600)")
    b.add_argument("--socket-group", metavar="GROUP", help="the socket's group (default: the broker's primary group)")
    b.add_argument("--console-port", type=port_number, help="also serve the operator console on 127.0.0.1:PORT")
    b.add_argument(
        "--hooks-port", type=port_number, help="also receive provider pushes (POST /hooks/CONTRACT) on 127.0.0.1:PORT"
    )
    b.add_argument(
        "--metrics-port",
        type=port_number,
        help="also serve the fleet's gauges for Prometheus on 127.0.0.1:PORT/metrics (as `pollwarden metrics`)",
    )
    b.add_argument("--print-systemd-unit", action="store_true", help="print a systemd unit for this broker and exit")
    home_arg_adder(b)
    b.set_defaults(func=Command("broker", "cmd_broker"))

    cl = sub.add_parser("console-login", help="a one-time link (5 minutes) into the broker's console, as yourself")
    cl.add_argument("--connect", metavar="SOCKET", required=True, help=CONNECT_HELP)
    cl.set_defaults(func=Command("broker", "cmd_console_login"))
