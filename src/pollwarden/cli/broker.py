"""`pollwarden broker` (the service under its own user) and `pollwarden console-login` (a person's way into its
console). The model and the set-up are in docs/agents.md, "The broker"."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..home.directory import resolve_home
from ..isolation.checks import (
    contracts_problems,
    home_problems,
    make_home,
    read_secrets,
    run_as_problems,
    secrets_problems,
    socket_dir_problems,
)
from ..isolation.peers import Who, WhoError
from ..shown import shown
from .common import UsageError, settle

if TYPE_CHECKING:
    from ..fleet.gauges import FleetGauges

EXIT_OK = 0


def _refuse(problems: list[str]) -> UsageError:
    """Each problem on a line of its own (the error line itself is kept to one line), then the refusal."""
    for problem in problems:
        print(f"pollwarden broker: {shown(problem)}", file=sys.stderr)
    return UsageError(f"the broker will not start ({len(problems)} problem(s) above); nothing was served")


def cmd_broker(args: argparse.Namespace) -> int:
    if args.print_systemd_unit:
        from ..isolation.systemd import systemd_unit

        print(
            systemd_unit(
                executable=None,
                contracts=args.contracts,
                agents=args.agents,
                approvers=args.approvers,
                console_port=args.console_port,
            ),
            end="",
        )
        return EXIT_OK
    missing = [f"--{n}" for n in ("contracts", "socket", "agents", "approvers") if not getattr(args, n)]
    if missing:
        raise UsageError(f"the broker needs {', '.join(missing)} (pollwarden broker --help says what each is)")
    try:
        agents, approvers = Who.parse("--agents", args.agents), Who.parse("--approvers", args.approvers)
    except WhoError as exc:
        raise UsageError(str(exc)) from None
    uid = os.geteuid()
    home = resolve_home(args.home)
    contracts_dir = Path(args.contracts)
    socket_path = Path(args.socket)
    problems = run_as_problems(uid, agents, approvers)
    problems += home_problems(home, uid)
    problems += contracts_problems(contracts_dir, uid)
    secrets: dict[str, str] = {}
    if args.secrets:
        problems += secrets_problems(Path(args.secrets), uid)
    problems += socket_dir_problems(socket_path, uid)
    from ..isolation.service import socket_group

    try:
        gid = socket_group(args.socket_group)
    except KeyError:
        problems.append(f"--socket-group {args.socket_group}: no such group")
        gid = -1
    if problems:
        raise _refuse(problems)
    if args.secrets:
        secrets, bad = read_secrets(Path(args.secrets))
        if bad:
            raise _refuse(bad)
    make_home(home)
    return _serve(args, home, contracts_dir, socket_path, gid, agents, approvers, secrets)


def _serve(
    args: argparse.Namespace,
    home: Path,
    contracts_dir: Path,
    socket_path: Path,
    gid: int,
    agents: Who,
    approvers: Who,
    secrets: dict[str, str],
) -> int:
    from ..foreground import stop_signals
    from ..home.operating import HomeError, open_store
    from ..isolation.service import BrokerService, SocketError
    from ..mcp_server import load_contracts

    settle()
    contracts, problems = load_contracts(contracts_dir)
    if not contracts:
        raise _refuse([f"--contracts {contracts_dir}: no usable contract ({'; '.join(problems) or 'no *.toml files'})"])
    try:
        open_store(home, keys="write").close()  # the keys exist before two sessions could race to make them
    except HomeError as exc:
        raise _refuse([f"--home {home}: {exc}"]) from None
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    environ = {**os.environ, **secrets}
    with stop_signals() as done:
        service = BrokerService(
            home=home,
            contracts=contracts,
            problems=problems,
            environ=environ,
            agents=agents,
            approvers=approvers,
            socket_path=socket_path,
            socket_gid=gid,
            stopping=done,
        )
        try:
            service.bind()
        except SocketError as exc:
            raise _refuse([str(exc)]) from None
        except PermissionError as exc:
            raise _refuse(
                [
                    f"--socket {socket_path}: {exc.strerror}; the broker's user must own the directory and be a member"
                    " of the socket's group"
                ]
            ) from None
        gauges = _serve_gauges(home, args.metrics_port)
        console = None
        if args.console_port is not None:
            from ..console.logins import OneTimeLogins
            from ..console.server import ConsoleServer

            console = ConsoleServer(home, port=args.console_port, logins=OneTimeLogins(), log=sys.stderr)
            console.start()
            service.console_login = console.login_link
        hooks = None
        if args.hooks_port is not None:  # the broker's environment holds the webhook secrets too
            from ..fleet.hooks import HooksServer, Receiver
            from ..store.owner import process_owner

            hooks_store = open_store(home, keys="write")
            receiver = Receiver(hooks_store, owner=process_owner("hooks"), environ=environ)
            try:
                hooks = HooksServer(receiver, port=args.hooks_port).start()
            except OSError as exc:
                hooks_store.close()
                raise _refuse([f"--hooks-port {args.hooks_port}: {exc.strerror or exc}"]) from None
        names = ", ".join(f"{n} (approval {c.approval})" for n, c in sorted(contracts.items()))
        print(
            f"pollwarden broker: serving {names} on {socket_path} for agents {agents}; approvers {approvers};"
            f" home {home}"
            + (f"; console on {console.url}" if console is not None else "")
            + (f"; pushes on {hooks.url}/hooks/CONTRACT" if hooks is not None else ""),
            file=sys.stderr,
            flush=True,
        )
        for problem in problems:
            print(f"pollwarden broker: contract not served: {problem}", file=sys.stderr, flush=True)
        try:
            service.serve()
        finally:
            if console is not None:
                console.stop()
            if gauges is not None:
                gauges.close()
            if hooks is not None:
                hooks.stop()
                hooks.receiver.store.close()
    print("pollwarden broker: stopped", file=sys.stderr, flush=True)
    return EXIT_OK


def _serve_gauges(home: Path, port: int | None) -> FleetGauges | None:
    """`--metrics-port`: the fleet's gauges (`fleet.gauges`), read from the broker's own database at each scrape."""
    if port is None:
        return None
    from ..fleet.gauges import fleet_registry, serve_metrics
    from ..fleet.log import JsonLog
    from ..home.operating import open_store

    log = JsonLog(worker=f"broker/{os.getpid()}")
    registry, gauges = fleet_registry(lambda: open_store(home, keys="none"), log=log)
    try:
        bound = serve_metrics(registry, port, "127.0.0.1")
    except OSError as exc:
        gauges.close()
        raise _refuse([f"--metrics-port {port}: cannot serve metrics on 127.0.0.1:{port}: {exc.strerror}"]) from None
    print(f"pollwarden broker: metrics on http://127.0.0.1:{bound}/metrics", file=sys.stderr, flush=True)
    return gauges


def cmd_console_login(args: argparse.Namespace) -> int:
    from ..isolation.remote import run_remote

    return run_remote(args.connect, ["console-login"], home=None, db=None)
