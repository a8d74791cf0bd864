"""Long-running servers and the newcomer's demo: `console`, `simulate`, `demo`."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from ..console import ConsoleServer, is_loopback, serve_until_signalled
from ..core.words import plural
from ..home.directory import resolve_home
from ..home.outbox import delivering_home
from ..shown import shown
from ..simulator import Simulator, Step, contract_text, scenario_listing, serve
from ..simulator.push import Pusher
from .common import (
    EXIT_ESCALATED,
    EXIT_INTERNAL,
    EXIT_OK,
    UsageError,
    _open_store,
)
from .inspect import cmd_story
from .parser import build_parser
from .watch import cmd_watch

# -- console --------------------------------------------------------------------------------------


def cmd_console(args: argparse.Namespace) -> int:
    """The operator console on loopback: a token printed here (or taken from --token-env) opens it."""
    token = None
    if args.token_env:
        token = os.environ.get(args.token_env)
        if not token:
            raise UsageError(f"--token-env {args.token_env}: that environment variable is not set")
        if len(token) < 16:
            raise UsageError(f"--token-env {args.token_env}: the token must be at least 16 characters")
    home = resolve_home(args.home)
    _open_store(args.home, keys="none").close()  # a home that cannot be opened is reported here, not per page
    from ..fleet.gauges import fleet_registry, metrics_page
    from ..fleet.log import JsonLog
    from ..home.operating import open_store as open_home_store

    # /metrics on the console too (issue 28): the same gauges `pollwarden metrics` serves, read at each scrape.
    registry, gauges = fleet_registry(
        lambda: open_home_store(home, keys="none"), log=JsonLog(worker=f"console/{os.getpid()}")
    )
    server = ConsoleServer(home, host=args.host, port=args.port, token=token, metrics=lambda: metrics_page(registry))
    if not is_loopback(args.host):
        print(
            f"pollwarden: warning: binding to {args.host}, not loopback: anyone who can reach this port can try"
            " the token, and the traffic is plain HTTP",
            file=sys.stderr,
        )

    def ready() -> None:
        print(f"pollwarden console on {server.url}/ for {home}")
        if token is None:
            print(f"log in: {server.login_url}")
        else:
            print(f"log in with the token in ${args.token_env}")
        print("stop with Ctrl-C")
        sys.stdout.flush()

    try:
        # What its people's answers commit (the witness's heads) goes out from the outbox while it serves.
        with delivering_home(home, "console"):
            serve_until_signalled(server, ready)
    except OSError as exc:
        raise UsageError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from None
    finally:
        gauges.close()
    print("console stopped")
    return EXIT_OK


# -- simulate and demo --------------------------------------------------------------------------------


def cmd_simulate(args: argparse.Namespace) -> int:
    token = None
    if args.token_env:
        token = os.environ.get(args.token_env)
        if not token:
            raise UsageError(f"--token-env {args.token_env}: that environment variable is not set")

    def ready(url: str) -> None:
        print(f"simulated provider listening on {url}", flush=True)
        if not args.quiet:
            print(scenario_listing(), flush=True)

    pusher = _pusher(args)
    try:
        serve(args.host, args.port, token=token, time_scale=args.time_scale, on_ready=ready, pusher=pusher)
    except OSError as exc:
        raise UsageError(f"cannot listen on {args.host}:{args.port}: {exc.strerror}") from None
    return EXIT_OK


def _pusher(args: argparse.Namespace) -> Pusher | None:
    """`--push-to URL --push-secret-env NAME [--push-lost F]`, checked before anything listens."""
    if args.push_to is None:
        if args.push_secret_env is not None or args.push_lost:
            raise UsageError("--push-secret-env and --push-lost go with --push-to URL")
        return None
    if not args.push_to.startswith(("http://", "https://")):
        raise UsageError(
            f"--push-to {shown(args.push_to)}: give an http(s) URL, e.g. http://127.0.0.1:8090/hooks/exports"
        )
    if args.push_secret_env is None:
        raise UsageError("--push-to needs --push-secret-env NAME: the environment variable holding the whsec_ secret")
    secret = os.environ.get(args.push_secret_env)
    if not secret:
        raise UsageError(f"--push-secret-env {args.push_secret_env}: that environment variable is not set")
    try:
        return Pusher(args.push_to, secret, lost=args.push_lost)
    except ValueError:
        raise UsageError(f"--push-secret-env {args.push_secret_env}: not a whsec_ base64 secret") from None


def cmd_demo(args: argparse.Namespace) -> int:
    """The newcomer's first command: a real provider on loopback, a real watch, the story it leaves."""
    home = Path(tempfile.mkdtemp(prefix="pollwarden-demo-")) if args.home is None else Path(args.home)
    with Simulator() as sim:
        sim.add_job(
            "exp_71c",
            [
                Step(body={"state": "queued"}),
                Step(body={"state": "running"}),
                Step(status=503, body={"error": "maintenance"}, headers={"Retry-After": "5"}),
                Step(body={"state": "running", "poll_after_seconds": 1}),
                Step(body={"state": "succeeded", "result_url": "https://files.example/exports/exp_71c.csv"}),
            ],
        )
        sim.add_job("exp_72d", [Step(body={"state": "running"}), Step(body={"state": "awaiting_review"})])
        contract_path = home / "demo-contract.toml"
        home.mkdir(parents=True, exist_ok=True)
        demo = contract_text(
            sim.url, name="demo-exports", base_delay="500ms", max_delay="4s", deadline="2m", max_requests=8
        )
        contract_path.write_text(demo, encoding="utf-8")
        print(f"pollwarden demo: a simulated provider on {sim.url}, state in {home}\n")
        codes = []
        for job in ("exp_71c", "exp_72d"):
            print(f"$ pollwarden watch --contract {contract_path} --job {job} --operation demo-{job}")
            ns = build_parser().parse_args(
                [
                    "watch",
                    "--contract",
                    str(contract_path),
                    "--job",
                    job,
                    "--operation",
                    f"demo-{job}",
                    "--home",
                    str(home),
                ]
            )
            code = cmd_watch(ns)
            codes.append(code)
            print(f"(exit code {code}; the provider saw {plural(sim.request_count(job), 'check')})\n")
            print(f"$ pollwarden story demo-{job}")
            cmd_story(build_parser().parse_args(["story", f"demo-{job}", "--home", str(home)]))
            print()
    ok = codes == [EXIT_OK, EXIT_ESCALATED]
    print("demo finished: one job succeeded with a validated result, one stopped on an unknown state.")
    return EXIT_OK if ok else EXIT_INTERNAL
