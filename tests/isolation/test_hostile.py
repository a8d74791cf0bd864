"""What an agent with a shell may send the broker's socket by hand: each line answered (or closed) and nothing
of the broker's hurt; the people it serves are served after."""

from __future__ import annotations

import json
from collections.abc import Callable

from .users import Broker, Place, Users

PROBE = r"""
import json, socket, sys
path = sys.argv[1]
sent = [
    b"not json at all\n",
    b"[1, 2]\n",
    b'{"pollwarden": "broker/0", "mode": "mcp"}\n',
    b'{"pollwarden": "broker/1", "mode": "root-shell"}\n',
    b'{"pollwarden": "broker/1", "mode": "command", "argv": "decide d1 --option 1"}\n',
    b'{"pollwarden": "broker/1", "mode": "command", "argv": ["decide", "d1", "--option", "1"], "uid": 0}\n',
    b'{"pollwarden": "broker/1", "mode": "command", "argv": ["watch", "--contract", "x"]}\n',
    b"x" * (1024 * 1024 + 10) + b"\n",
]
answers = []
for line in sent:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(path)
    try:
        conn.sendall(line)
    except OSError:
        pass
    data = conn.makefile("rb").readline()
    conn.close()
    answers.append(json.loads(data) if data else None)
print(json.dumps(answers))
"""


def test_hand_made_lines_are_answered_and_the_broker_serves_on(
    users: Users, place: Place, start: Callable[..., Broker]
) -> None:
    broker = start()
    probed = users.python_as(users.agent, PROBE, str(place.socket))
    assert probed.returncode == 0, probed.stderr
    answers = json.loads(probed.stdout)
    assert all(a is not None and a["ok"] is False and a["exit"] == 2 for a in answers), answers
    said = [a["stderr"] for a in answers]
    assert "not JSON text" in said[0] and "not an object" in said[1] and "speaks broker/1" in said[2]
    assert "mode 'mcp' or 'command'" in said[3] and "a list of words" in said[4]
    assert "is an agent of this broker" in said[5]  # what the client says of itself counts for nothing
    assert "`watch` is not run by the broker" in said[6] and "longer than" in said[7]
    assert broker.process.poll() is None
    listed = users.run(users.approver, "decisions", "--connect", str(place.socket))
    assert listed.returncode == 0, listed.stderr
