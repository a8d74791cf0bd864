"""Item 14: the home holds result references and provider errors, so it is the owner's alone.

The home is 0700 and every file in it 0600 (database, -wal, -shm, the trusted checkpoint, the keys), from
creation whatever the umask, and an existing loose home is tightened when a store opens it. Each check is
os.stat on what real `python -m pollwarden` runs left behind.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from pollwarden.simulator import Simulator
from tests.conftest import Ran, write_contract

WAL_PROBE = """
import json, sys
from pathlib import Path
from pollwarden.audit import load_or_create_keys
from pollwarden.store.sqlite import SQLiteStore
home = Path(sys.argv[1])
store = SQLiteStore(home / "pollwarden.db", keys=load_or_create_keys(home))
from pollwarden.events import Paced
store.append("probe", Paced.prepared({"n": 1}), store.db_now())  # a write: the -wal and -shm exist while open
modes = {s: oct(Path(f"{home}/pollwarden.db{s}").stat().st_mode & 0o777) for s in ("", "-wal", "-shm")}
print(json.dumps(modes))
store.close()
"""


def _run(*args: str, home: Path, umask: int) -> Ran:
    proc = subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        env={**os.environ, "POLLWARDEN_HOME": str(home)},
        timeout=60,
        stdin=subprocess.DEVNULL,
        umask=umask,
    )
    return Ran(proc.returncode, proc.stdout, proc.stderr)


def _watch(sim: Simulator, tmp_path: Path, home: Path, op: str, *, umask: int = 0o022) -> None:
    contract = write_contract(tmp_path / "c.toml", sim.url)
    ran = _run("-m", "pollwarden", "watch", "--contract", str(contract), "--job", f"happy-{op}", "--operation", op,
               home=home, umask=umask)  # fmt: skip
    assert ran.code == 0, ran.stderr


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _loose(home: Path) -> dict[str, str]:
    """Everything under the home (the home included) that is not 0700 (directories) or 0600 (files).

    The one exception is the public key, 0644 by design (a verifier may be handed it); inside the 0700
    home nobody else can reach it anyway."""
    found: dict[str, str] = {}
    for path in [home, *sorted(home.rglob("*"))]:
        want = 0o700 if path.is_dir() else 0o644 if path.name == "signing.pub" else 0o600
        if _mode(path) != want:
            found[str(path.relative_to(home.parent))] = oct(_mode(path))
    return found


@pytest.mark.slow  # starts a process: `make test` only (tests/conftest.py FAST)
def test_a_fresh_home_is_private_even_under_an_open_umask(sim: Simulator, tmp_path: Path) -> None:
    home = tmp_path / "state" / "home"  # neither exists yet
    _watch(sim, tmp_path, home, "op-1", umask=0o000)
    names = {p.name for p in home.rglob("*")}
    assert {"pollwarden.db", "audit-head.checkpoint", "keys", "audit.key", "signing.key"} <= names
    assert _loose(home) == {}


@pytest.mark.slow  # starts a process: `make test` only (tests/conftest.py FAST)
def test_a_freshly_created_wal_and_shm_are_private(sim: Simulator, tmp_path: Path) -> None:
    home = tmp_path / "home"
    _watch(sim, tmp_path, home, "op-1")
    assert not (home / "pollwarden.db-wal").exists()  # the last close removed it: the probe makes a new one
    ran = _run("-c", WAL_PROBE, str(home), home=home, umask=0o000)
    assert ran.code == 0, ran.stderr
    assert ran.stdout.strip() == '{"": "0o600", "-wal": "0o600", "-shm": "0o600"}'


@pytest.mark.slow  # starts a process: `make test` only (tests/conftest.py FAST)
def test_an_existing_loose_home_is_tightened_when_a_store_opens_it(sim: Simulator, tmp_path: Path) -> None:
    home = tmp_path / "home"
    _watch(sim, tmp_path, home, "op-1")
    # What an older pollwarden left: a 0755 home and keys directory, a 0644 database and checkpoint.
    for path, mode in (
        (home, 0o755),
        (home / "keys", 0o755),
        (home / "pollwarden.db", 0o644),
        (home / "audit-head.checkpoint", 0o644),
    ):
        os.chmod(path, mode)
    ran = _run("-m", "pollwarden", "status", home=home, umask=0o022)  # a reader: no keys, nothing written
    assert ran.code == 0, ran.stderr
    assert _mode(home) == 0o700 and _mode(home / "pollwarden.db") == 0o600
    assert _mode(home / "audit-head.checkpoint") == 0o600
    _watch(sim, tmp_path, home, "op-2")  # a writer loads the keys: their directory is tightened too
    assert _loose(home) == {}


@pytest.mark.slow  # starts a process: `make test` only (tests/conftest.py FAST)
def test_a_database_path_that_is_not_a_regular_file_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    """Run as root, `--db /dev/null` once made /dev/null 0600 for everyone else on the machine. A FIFO stands in
    for the device here: the same kind of file, harmless to test with."""
    fifo = tmp_path / "not-a-db"
    os.mkfifo(fifo, 0o644)
    ran = _run("-m", "pollwarden", "status", "--db", str(fifo), home=tmp_path / "home", umask=0o022)
    assert ran.code == 2, ran.stderr
    assert f"{fifo} is not a regular file" in ran.stderr
    assert _mode(fifo) == 0o644


@pytest.mark.slow  # starts a process: `make test` only (tests/conftest.py FAST)
def test_an_existing_directory_that_is_not_a_pollwarden_home_keeps_its_mode(tmp_path: Path) -> None:
    """`--home /proc` once made /proc 0500. A home that holds other things than pollwarden's is not ours to
    chmod; what pollwarden puts in it is private all the same (0600 files, a 0700 keys directory)."""
    home = tmp_path / "shared"
    home.mkdir()
    (home / "someone-elses.txt").write_text("x", encoding="utf-8")
    os.chmod(home, 0o755)
    for _ in range(2):  # the second run finds pollwarden's files there too: still not its directory to chmod
        ran = _run("-m", "pollwarden", "status", home=home, umask=0o022)
        assert ran.code == 0, ran.stderr
        assert _mode(home) == 0o755
    assert _mode(home / "pollwarden.db") == 0o600
    empty = tmp_path / "empty"
    empty.mkdir()
    os.chmod(empty, 0o755)
    assert _run("-m", "pollwarden", "status", home=empty, umask=0o022).code == 0
    assert _mode(empty) == 0o700  # an empty directory given as a home is made the home
