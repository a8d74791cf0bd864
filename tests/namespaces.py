"""A second PID namespace on this host (`unshare --pid --fork --mount-proc`): a container's view of the machine,
with the same host name and boot, where the pids of this namespace mean nothing. Making one needs root (CI runs as
root); where it cannot be made, the tests that need one are skipped with the reason."""

from __future__ import annotations

import functools
import shutil
import subprocess
import sys

import pytest


@functools.cache
def cannot_unshare() -> str | None:
    """Why a second PID namespace cannot be made here, or None when it can."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return "no unshare(1) on this machine"
    probe = subprocess.run(
        [unshare, "--pid", "--fork", "--mount-proc", "true"], capture_output=True, text=True, timeout=60, check=False
    )
    if probe.returncode != 0:
        return f"unshare --pid --fork --mount-proc needs root (CI runs as root): {probe.stderr.strip()[:200]}"
    return None


def in_another_pid_namespace() -> list[str]:
    """The argv prefix that runs a command in a PID namespace of its own; skips the test where none can be made."""
    why = cannot_unshare()
    if why is not None:
        pytest.skip(why)
    unshare = shutil.which("unshare")
    assert unshare is not None
    return [unshare, "--pid", "--fork", "--mount-proc"]


def run_there(code: str, *args: str) -> str:
    """`code` run by this interpreter, with `args`, in a PID namespace of its own; its stdout."""
    ran = subprocess.run(
        [*in_another_pid_namespace(), sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    return ran.stdout
