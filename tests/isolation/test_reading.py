"""What an agent with a shell can read: nothing the broker guards (issue 22's first promise)."""

from __future__ import annotations

import json
from collections.abc import Callable

from .users import READ_PROBE, Broker, Place, Users


def test_an_agent_user_reads_nothing_the_broker_holds(
    users: Users, place: Place, start: Callable[..., Broker], secret: str
) -> None:
    broker = start(fresh=True)  # its own process: the one whose /proc entries are read
    assert broker.process.pid
    # setpriv execs the broker: the pid is the broker's own process.
    where = (str(place.home), str(place.secrets), str(broker.process.pid), secret)
    probed = users.python_as(users.agent, READ_PROBE, *where, str(place.root), "/tmp")
    assert probed.returncode == 0, probed.stderr
    seen = json.loads(probed.stdout)
    assert seen["tried"] == {
        "home listing": "PermissionError",
        "database": "PermissionError",
        "keys": "PermissionError",
        "secrets file": "PermissionError",
        "broker environment": "PermissionError",
        "broker memory": "PermissionError",
    }
    assert seen["found"] == []
    # The same probe as the broker's own user reads them all: the test can fail.
    own = users.python_as(users.service, READ_PROBE, *where, str(place.root))
    assert json.loads(own.stdout)["tried"]["secrets file"] == "read"
