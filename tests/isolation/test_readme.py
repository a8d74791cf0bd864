"""The broker set-up of docs/agents.md (once in the README), run as written: its users, paths and placeholders
mapped to this test's own."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path

from pollwarden.simulator import Simulator, Step
from tests.mcp.support import run

from .users import TOKEN_ENV, Place, Users, shim_agent, start_broker

README = Path(__file__).resolve().parents[2] / "docs" / "agents.md"


def _blocks() -> list[str]:
    text = README.read_text(encoding="utf-8")
    section = text.split("### An agent with a shell: the broker, in short", 1)[1].split("\n## ", 1)[0]
    return [block.split("```", 1)[0].replace("\\\n", " ") for block in section.split("```sh\n")[1:]]


def _mapped(line: str, users: Users, place: Place, secret: str) -> str:
    for word, mine in (
        ("/var/lib/pollwarden", str(place.home)),
        ("/run/pollwarden/broker.sock", str(place.socket)),
        ("/run/pollwarden", str(place.run)),
        ("/etc/pollwarden/secrets", str(place.secrets)),
        ("/etc/pollwarden/contracts", str(place.contracts)),
        ("EXPORTS_TOKEN=...", f"{TOKEN_ENV}={secret}"),
    ):
        line = line.replace(word, mine)
    # The service user shares its name with the command: it is a user's name only after -u, -o and -aG.
    line = re.sub(r"(?<=-u |-o |aG )pollwarden(?![\w/.-])", users.service, line)
    for name, mine in (("agent", users.agent), ("alice", users.approver)):
        line = re.sub(rf"(?<![\w/.-]){name}(?![\w/.-])", mine, line)
    return line


def test_the_readme_broker_runs_as_written(
    users: Users, place: Place, guarded: Simulator, secret: str, tmp_path: Path
) -> None:
    setup, broker, person = _blocks()
    for line in setup.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("useradd"):  # the suite made the users (useradd --system), once for all
            continue
        done = subprocess.run(["bash", "-c", _mapped(line, users, place, secret)], capture_output=True, text=True)
        assert done.returncode == 0, (line, done.stderr)
    assert place.secrets.read_text(encoding="utf-8") == f"{TOKEN_ENV}={secret}\n"

    words = shlex.split(_mapped(broker.strip(), users, place, secret))
    assert words[:4] == ["sudo", "-u", users.service, "pollwarden"], words
    argv = words[words.index("broker") + 1 :]
    started = start_broker(users, argv, place.socket, place.home)
    try:
        guarded.add_job("slow-9", [Step(body={"state": "running"})])
        decision = ""

        async def body() -> None:
            nonlocal decision
            async with shim_agent(users, place.socket, tmp_path / "shim.err") as agent:
                op = (await agent.call("start_watch", contract="exports", job_id="slow-9", max_requests=1)).data
                stopped = await agent.call("wait_operation", operation_id=op["operation_id"], max_wait_seconds=30)
                decision = stopped.data["decision"]["decision_id"]

        run(body)
        for line in person.strip().splitlines():
            words = shlex.split(_mapped(line, users, place, secret).replace("D1", decision))
            assert words[0] == "pollwarden"
            done = users.run(users.approver, *words[1:])
            assert done.returncode == 0, (line, done.stderr)
        decided = users.run(users.approver, "decisions", "--all", "--json", "--connect", str(place.socket))
        assert [d["decided_by"] for d in json.loads(decided.stdout)] == [users.approver]
    finally:
        started.stop()
