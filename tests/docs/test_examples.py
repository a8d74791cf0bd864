"""README.md and docs/*.md run as written: each document's ```sh and ```python blocks, in order, in one sandbox (a
fresh home, a copy of examples/, the simulator the README starts on port 8080), and each ```toml block read as a
contract. A block that cannot run here (it needs root, a provider account, PostgreSQL elsewhere, or is a
synopsis) is preceded by `<!-- not run: reason -->`.

Two liberties taken: the simulator listens on a free port, not 8080 (other suites may hold it), so `8080`
becomes that port in the blocks and the copied examples, and `pollwarden simulate --port 8080 &` is the one
this test started; and `pollwarden` on the sandbox's PATH is forked from a zygote that has imported it
(tests/prefork.py), as the suite's other command runs are, not a fresh interpreter."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from pollwarden.core.contract.parse import load_contract
from pollwarden.simulator import Simulator
from tests import prefork
from tests.docs.examples import ROOT, RUN, Block, blocks, contract_text, documents, every_block, shell_script

BASE = (ROOT / "examples" / "exports.toml").read_text(encoding="utf-8")
_SIMULATE = re.compile(r"^\s*pollwarden simulate --port 8080.*&\s*(#.*)?$", re.MULTILINE)


def _runnable(path: Path) -> list[Block]:
    return [b for b in blocks(path) if b.lang in RUN and b.not_run is None]


RUNNABLE = [path for path in documents() if _runnable(path)]
TOML = [b for b in every_block() if b.lang == "toml" and b.not_run is None]


def test_each_block_kept_out_says_why_and_each_language_is_named() -> None:
    for block in every_block():
        assert block.not_run is None or len(block.not_run) >= 10, f"{block.where}: say why it is not run"
        if block.lang in ("bash", "shell", "console", "py"):
            pytest.fail(f"{block.where}: name it ```sh or ```python, so it is run (or mark it not run)")


@pytest.mark.parametrize("block", TOML, ids=[b.where for b in TOML])
def test_a_toml_block_is_a_contract(block: Block, tmp_path: Path) -> None:
    """A whole contract as it stands; a table or two as they would sit in examples/exports.toml."""
    path = tmp_path / "contract.toml"
    text, given = contract_text(block.text, BASE)
    path.write_text(text, encoding="utf-8")
    load_contract(path, given)


@contextmanager
def _sandbox(tmp_path: Path) -> Iterator[tuple[Path, dict[str, str], Simulator]]:
    """A document's own: a fresh home, a copy of examples/ pointed at its own simulator."""
    with Simulator() as sim:
        port = sim.url.rsplit(":", 1)[1]
        cwd = tmp_path / "work"
        shutil.copytree(ROOT / "examples", cwd / "examples")
        for toml in (cwd / "examples").glob("*.toml"):
            toml.write_text(toml.read_text(encoding="utf-8").replace(":8080", f":{port}"), encoding="utf-8")
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith("POLLWARDEN_") and not key.endswith("_TOKEN") and not key.endswith("_API_KEY")
        }
        env.update(
            POLLWARDEN_HOME=str(tmp_path / "home"),
            PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
            HOME=str(tmp_path),
            PYTHONUNBUFFERED="1",
            TERM="dumb",
        )
        yield cwd, env, sim


_NO_HOME = str(Path(tempfile.gettempdir()) / "pollwarden-docs-no-home")  # never made: no user site in it


def _pollwarden_from_a_zygote(bin_dir: Path, env: dict[str, str]) -> None:
    """`pollwarden` on the sandbox's PATH forked from a zygote that has imported it (tests/prefork.py), as the
    suite's other CLI runs are: a fresh interpreter's imports were most of the CPU of the documents' two dozen
    commands. Without a zygote the installed script stays first on PATH.

    The zygote is keyed by its start-up environment, HOME among it for the user site: each sandbox's fresh HOME
    has none, and neither has `_NO_HOME`, so one zygote serves every document (a command still gets the
    sandbox's own environment, HOME included, when it is forked)."""
    started = env | {"HOME": _NO_HOME}
    if prefork.zygote_for(started) is None:
        return
    bin_dir.mkdir()
    shim = bin_dir / "pollwarden"
    command = shlex.join([sys.executable, *prefork.spawn_args([], started)])
    shim.write_text(f'#!/bin/sh\nexec {command} "$@"\n', encoding="utf-8")
    shim.chmod(0o755)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"


def _runs_as_written(path: Path, tmp_path: Path) -> str | None:
    """The document's blocks in order in its own sandbox: None, or what the first that failed showed."""
    with _sandbox(tmp_path) as (cwd, env, sim):
        port = sim.url.rsplit(":", 1)[1]
        if any(block.lang == "sh" for block in _runnable(path)):  # a zygote costs an import: only where it serves
            _pollwarden_from_a_zygote(tmp_path / "bin", env)
        for n, block in enumerate(_runnable(path)):
            text = _SIMULATE.sub("", block.text).replace(":8080", f":{port}").replace("--port 8080", f"--port {port}")
            if block.lang == "sh":
                argv = ["bash", "-c", shell_script(text)]
            else:
                script = cwd / f"block{n}.py"
                script.write_text(text, encoding="utf-8")
                argv = [sys.executable, str(script)]
            # A bound that only stops a hang: the slowest block waits some seconds on the simulator.
            ran = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False)
            shown = f"{block.where} ({block.lang}) exit {ran.returncode}\n{ran.stdout[-3000:]}\n{ran.stderr[-3000:]}"
            if ran.returncode != 0 or "Traceback" in ran.stderr:
                return shown
    return None


@pytest.mark.parametrize("path", RUNNABLE, ids=[str(path.relative_to(ROOT)) for path in RUNNABLE])
def test_every_document_runs_as_written(path: Path, tmp_path: Path) -> None:
    """Each document in its own sandbox, one test per document: their blocks mostly wait on their simulators'
    scripted jobs (a minute and a half of waiting one after another), so xdist spreads the documents over its
    workers rather than one test holding one worker for the slowest document's whole wait. A block that exits
    non-zero, or prints a traceback, fails the document's test."""
    shown = _runs_as_written(path, tmp_path)
    assert shown is None, f"{path.relative_to(ROOT)}: {shown}"
