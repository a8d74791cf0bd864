"""A command that serves leaves what it imported out of its garbage collections (`cli.common.settle`): the MCP
SDK's objects made the exit of every `pollwarden mcp` a collection of ~0.2 s CPU, and each full collection while
it served scanned them again."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.mcp.support import agent_contract

# A fresh `python -m pollwarden` whose exit reports how many objects were frozen (atexit runs before the
# interpreter's last collection). Fresh, not forked: a zygote freezes its own imports before any fork.
PROBE = (
    "import atexit, gc, runpy, sys; atexit.register(lambda: print('frozen', gc.get_freeze_count(), file=sys.stderr));"
    " runpy.run_module('pollwarden', run_name='__main__', alter_sys=True)"
)


def test_a_served_mcp_session_ends_with_its_imports_frozen(tmp_path: Path) -> None:
    agent_contract(tmp_path / "contracts", "http://127.0.0.1:9")
    args = ["mcp", "--contracts", str(tmp_path / "contracts"), "--home", str(tmp_path / "home")]
    ran = subprocess.run(
        [sys.executable, "-c", PROBE, *args], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120
    )
    assert ran.returncode == 0, ran.stderr
    frozen = [line for line in ran.stderr.splitlines() if line.startswith("frozen ")]
    assert frozen and int(frozen[-1].split()[1]) > 10_000, ran.stderr  # the SDK's and pollwarden's: ~100,000
