"""The simulator announcing a job's end with a signed push (`simulator.push`): at the end its timed steps fix,
verifiable by the receiver's own rule, or lost on purpose; `simulate --push-to` refuses what it cannot use."""

from __future__ import annotations

import random
import threading
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

from pollwarden.core.contract.push import Push
from pollwarden.core.push_signature import Verified, verify
from pollwarden.simulator import Simulator, Step
from pollwarden.simulator.push import Pusher
from tests.conftest import run_cli
from tests.e2e.test_push_cli import SECRET

PUSH = Push(kind="standard-webhooks", secret_env="H", job_id="data.id", delivery_header="webhook-id")


class _Receiver(BaseHTTPRequestHandler):
    got: ClassVar[list[tuple[dict[str, str], bytes]]] = []
    arrived = threading.Event()

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).got.append(({k.lower(): v for k, v in self.headers.items()}, body))
        self.send_response(202)
        self.send_header("Content-Length", "0")
        self.end_headers()
        type(self).arrived.set()

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_a_job_whose_timed_steps_end_is_announced_with_a_verifiable_push() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    pusher = Pusher(f"http://127.0.0.1:{server.server_address[1]}/hooks/exports", SECRET)
    try:
        with Simulator(pusher=pusher) as sim:
            sim.add_job("untimed", [Step(body={"state": "running"}), Step(body={"state": "succeeded"})])
            sim.add_job("j1", [Step(body={"state": "running"}, seconds=0.05), Step(body={"state": "succeeded"})])
            assert _Receiver.arrived.wait(30)
    finally:
        server.shutdown()
        server.server_close()
    ((headers, body),) = _Receiver.got  # one push: the untimed job's end is not known
    assert b'"j1"' in body and pusher.sent == {"j1": 202} and set(pusher.ended) == {"j1"}
    assert isinstance(verify(PUSH, SECRET, headers, body, datetime.now(UTC)), Verified)


def test_a_lost_push_is_never_sent() -> None:
    pusher = Pusher("http://127.0.0.1:9/hooks/exports", SECRET, lost=1.0, rng=random.Random(1))
    pusher._push("j1")  # the moment it would go out
    assert pusher.sent == {}


def test_simulate_refuses_push_flags_it_cannot_use(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    alone = run_cli("simulate", "--push-secret-env", "H", home=home)
    assert alone.code == 2 and "go with --push-to" in alone.stderr
    unset = run_cli("simulate", "--push-to", "http://127.0.0.1:9/hooks/x", "--push-secret-env", "NOPE_UNSET",
                    home=home)  # fmt: skip
    assert unset.code == 2 and "NOPE_UNSET" in unset.stderr
    bad = run_cli("simulate", "--push-to", "http://127.0.0.1:9/hooks/x", "--push-secret-env", "H", home=home,
                  env={"H": "not base64 !"})  # fmt: skip
    assert bad.code == 2 and "whsec_" in bad.stderr and "not base64" not in bad.stderr
