"""What an agent with a shell can read: nothing the broker guards (issue 22's first promise)."""

from __future__ import annotations

import json
from collections.abc import Callable

from .conftest import Place
from .users import Broker, Users

PROBE = r"""
import json, os, sys
home, secrets_file, pid, secret = sys.argv[1:5]
tried = {}
def attempt(name, fn):
    try:
        fn()
        tried[name] = "read"
    except OSError as exc:
        tried[name] = type(exc).__name__
attempt("home listing", lambda: os.listdir(home))
attempt("database", lambda: open(os.path.join(home, "pollwarden.db"), "rb").read(1))
attempt("keys", lambda: os.listdir(os.path.join(home, "keys")))
attempt("secrets file", lambda: open(secrets_file, "rb").read())
attempt("broker environment", lambda: open(f"/proc/{pid}/environ", "rb").read())
attempt("broker memory", lambda: open(f"/proc/{pid}/mem", "rb").read(1))
found = []
try:
    found.append("argv") if secret.encode() in open(f"/proc/{pid}/cmdline", "rb").read() else None
except OSError:
    pass
if secret in "".join(os.environ.values()):
    found.append("own environment")
for top in sys.argv[5:]:
    for folder, _, names in os.walk(top):
        for name in names:
            try:
                if secret.encode() in open(os.path.join(folder, name), "rb").read():
                    found.append(os.path.join(folder, name))
            except OSError:
                pass
print(json.dumps({"tried": tried, "found": found}))
"""


def test_an_agent_user_reads_nothing_the_broker_holds(
    users: Users, place: Place, start: Callable[..., Broker], secret: str
) -> None:
    broker = start()
    assert broker.process.pid
    # setpriv execs the broker: the pid is the broker's own process.
    where = (str(place.home), str(place.secrets), str(broker.process.pid), secret)
    probed = users.python_as(users.agent, PROBE, *where, str(place.root), "/tmp")
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
    own = users.python_as(users.service, PROBE, *where, str(place.root))
    assert json.loads(own.stdout)["tried"]["secrets file"] == "read"
