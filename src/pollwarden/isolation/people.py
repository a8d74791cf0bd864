"""A person's command at the broker: who may run which, the refusals the broker records, and the run itself.

Only an approver's connection may run these; an agent's `decide`, `approve-call`, `approve-session` or
`revoke-session` is refused with exit 2 and an `approval_refused` record (its uid and pid from the kernel) in the
broker's log, and nothing changes. What an approver runs is carried out by `cli.brokered` on the broker's home, as
themselves: `--by` is their user name.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..events import ApprovalRefused, AuditEvent, ConnectionRefused, NewEvent, PersonCommand
from ..shown import shown
from .commands import BROKERED, decides
from .peers import Peer, Role
from .protocol import MAX_LINE

COMMAND_SECONDS = 300.0
"""A command's bound in the broker: a decided cancel sends one request, bounded by its contract's timeout."""
CONSOLE_LOGIN = "console-login"


@dataclass(frozen=True)
class Answer:
    exit: int
    stdout: str = ""
    stderr: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.exit == 0, "exit": self.exit, "stdout": self.stdout, "stderr": self.stderr}


def refusal(message: str) -> Answer:
    return Answer(2, stderr=f"pollwarden: error: {message}\n")


Audit = Callable[[NewEvent], None]


def subject_of(words: list[str]) -> str | None:
    """The id a command is about (a decision, a grant, an operation), for the record: shown safely, cut short."""
    for word in words[1:]:
        if not word.startswith("-"):
            return shown(word)[:80]
    return None


def answer_command(
    words: object,
    peer: Peer,
    role: Role | None,
    *,
    approvers: str,
    home: Path,
    environ: Mapping[str, str],
    audit: Audit,
    console_login: Callable[[str], str | None],
) -> Answer:
    if not isinstance(words, list) or not words or not all(isinstance(w, str) for w in words):
        return refusal("the broker takes a command as a list of words; nothing was done")
    command = words[0]
    subject = subject_of(words)
    if command not in BROKERED and command != CONSOLE_LOGIN:
        served = ", ".join(sorted(BROKERED | {CONSOLE_LOGIN}))
        return refusal(f"`{shown(command)[:40]}` is not run by the broker; it runs: {served}")
    if role != "approver":
        kind: type[AuditEvent] = ApprovalRefused if decides(words) else ConnectionRefused
        why = (
            f"{peer.user} (uid {peer.uid}) is an agent of this broker"
            if role == "agent"
            else f"{peer.user} (uid {peer.uid}) is neither an agent nor an approver of this broker"
        )
        audit(
            kind.prepared(
                {"peer": peer.to_json(), "command": command, "subject": subject, "why": why, "mode": "command"}
            )
        )
        return refusal(
            f"refused: {why}; only an approver ({approvers}) may run `{command}` here. Nothing changed"
            + (" (agents use the MCP tools, through pollwarden mcp --connect)" if role == "agent" else "")
        )
    if command == CONSOLE_LOGIN:
        link = console_login(peer.user)
        if link is None:
            return refusal("this broker serves no console: a person starts it with `pollwarden broker --console-port`")
        return Answer(0, stdout=f"open this link within 5 minutes, once (it logs you in as {peer.user}):\n{link}\n")
    answer = _run_child(words, peer, home, environ)
    if decides(words):
        audit(
            PersonCommand.prepared(
                {"peer": peer.to_json(), "command": command, "subject": subject, "exit": answer.exit}
            )
        )
    return answer


def _run_child(words: list[str], peer: Peer, home: Path, environ: Mapping[str, str]) -> Answer:
    env = dict(environ)
    env["USER"] = env["LOGNAME"] = peer.user
    env.pop("POLLWARDEN_HOME", None)
    request = json.dumps({"argv": words, "home": str(home), "user": peer.user})
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pollwarden.cli.brokered"],
            input=request.encode("utf-8"),
            capture_output=True,
            env=env,
            cwd=home,
            timeout=COMMAND_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return Answer(1, stderr=f"pollwarden: error: the command did not finish within {COMMAND_SECONDS:g} s\n")
    except OSError as exc:
        return Answer(1, stderr=f"pollwarden: error: the broker could not run the command ({exc.strerror})\n")
    half = MAX_LINE // 4  # JSON escaping may double a text: the answer stays one readable line
    code = done.returncode if done.returncode >= 0 else 128 - done.returncode
    return Answer(
        code,
        done.stdout.decode("utf-8", "replace")[:half],
        done.stderr.decode("utf-8", "replace")[:half],
    )
