"""Where state lives: --home, else $POLLWARDEN_HOME, else the XDG state directory; and who may read it.

The home holds result references (often presigned URLs), provider errors and the audit keys, so it is
the owner's alone: the directory is 0700 and every file pollwarden writes in it 0600, from the moment it
is created (whatever the umask) and again each time a store opens it (a home made by an older version,
or by hand, is tightened). Only what the running user owns is tightened: someone else's file is theirs
to guard, and a reader of it must not fail for not being able to chmod it.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterable
from pathlib import Path

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600


def resolve_home(explicit: str | None = None) -> Path:
    if explicit:
        return Path(explicit).expanduser()
    env = os.environ.get("POLLWARDEN_HOME")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "state"
    return base / "pollwarden"


def database_path(home: Path) -> Path:
    return home / "pollwarden.db"


def trusted_checkpoint_path(home: Path) -> Path:
    """The newest signed checkpoint, kept beside the database and not in it (rollback evidence)."""
    return home / "audit-head.checkpoint"


def witness_config_path(home: Path) -> Path:
    """Where `pollwarden audit witness LOCATION` keeps the witness location (one line)."""
    return home / "audit-witness"


KEYS_DIR = "keys"
"""The home's directory of audit keys (`audit/keys.py`)."""

HOME_NAMES = (
    KEYS_DIR,
    *(where(Path()).name for where in (database_path, trusted_checkpoint_path, witness_config_path)),
)
"""What pollwarden keeps in a home: a directory holding one of them is one (`tighten_own_dir`)."""


def unknown_operation(where: object, operation_id: str) -> str:
    """The one wording of a missing operation: where it was looked for (a store's path), and what lists them."""
    return f"no operation {operation_id!r} in {where}; `pollwarden status` lists them"


def ensure_home(home: Path, *, create: bool = True) -> None:
    """Create the home 0700 (missing parents too), or tighten an existing one to 0700."""
    if create and not home.exists():
        # mkdir's mode passes through the umask: the chmod below makes it exact.
        home.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
    tighten_own_dir(home, HOME_NAMES)


def tighten(path: Path, mode: int) -> None:
    """Take every permission beyond `mode` away from `path`, if it exists and is the running user's.

    A symlink is left alone (its target may be anything), and so is anything but a regular file or a
    directory: run as root, `--db /dev/null` made /dev/null private to root. A vanished file is nothing to
    tighten.
    """
    with contextlib.suppress(FileNotFoundError):
        info = os.lstat(path)
        if not (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)) or info.st_uid != os.geteuid():
            return
        if stat.S_IMODE(info.st_mode) & ~mode:
            os.chmod(path, stat.S_IMODE(info.st_mode) & mode)


def tighten_own_dir(directory: Path, own: Iterable[str]) -> None:
    """`tighten` an existing directory to 0700 only when it is pollwarden's: holding nothing but the `own` names
    (a database's -wal, -shm and -writer.lock files, and a ".NAME.*.tmp" being written, count as theirs).
    Anything else was handed over (`--home /proc`, `--home ~`, `--home /`): its mode is its owner's business, and
    what pollwarden puts in it is private by itself (0600 files, a 0700 keys directory). Holding one of the names
    is not enough: `--home /` made / hold a `keys` directory and a `pollwarden.db`, and the next command made /
    0700, so that no other user (PostgreSQL's included) could reach anything on the machine."""
    try:
        with os.scandir(directory) as entries:
            names = {entry.name for entry in entries}
    except OSError:
        return
    mine = tuple(own)
    if all(_is_own(name, mine) for name in names):
        tighten(directory, PRIVATE_DIR)


def _is_own(name: str, own: tuple[str, ...]) -> bool:
    return any(name == one or name.startswith((f"{one}-", f".{one}.")) for one in own)


def create_private(path: Path) -> None:
    """Create `path` empty with mode 0600 unless it exists (then tighten it): the file is private before
    anything is written to it, whatever the umask."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), PRIVATE_FILE)
    except FileExistsError:
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise OSError(
                f"{path} is not a regular file (a device, a pipe or a directory); give the path of a file"
            ) from None
        tighten(path, PRIVATE_FILE)
        return
    try:
        os.fchmod(fd, PRIVATE_FILE)
    finally:
        os.close(fd)
