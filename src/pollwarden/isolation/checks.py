"""What the broker checks before it serves anyone: that only its own user can read what it guards.

Each problem is one sentence naming the path, what is wrong and the command that fixes it; the broker prints them
all and exits 2 without serving. The home (store, audit keys), the `--secrets` file and the contracts are the
three things an agent with a shell would go for: the first two to read, the third to change (a contract decides
where the credential is sent).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

from ..home.directory import PRIVATE_DIR
from .peers import Who, user_name

MAX_SECRETS_BYTES = 64 * 1024
MAX_HOME_ENTRIES = 10_000
"""The home holds a database, its journal, keys and checkpoints: a walk that finds more stops looking."""


def run_as_problems(uid: int, agents: Who, approvers: Who) -> list[str]:
    problems: list[str] = []
    if uid == 0:
        problems.append(
            "the broker must not run as root: run it as its own service user (useradd --system pollwarden;"
            " sudo -u pollwarden pollwarden broker ..., or User=pollwarden in the systemd unit)"
        )
    both = sorted(agents.members() & approvers.members())
    if both:
        problems.append(
            f"{', '.join(both)} would be both an agent and an approver: an agent must not approve its own calls."
            " Remove them from --agents or --approvers (or from the group that puts them on both)"
        )
    me = user_name(uid)
    if uid != 0 and (agents.includes(uid) or approvers.includes(uid)):
        problems.append(
            f"the broker's own user {me} is on --agents or --approvers: whoever runs as it can read the credential"
            " and the keys. Run the broker as a user of its own"
        )
    return problems


def _mode(info: os.stat_result) -> str:
    return f"{stat.S_IMODE(info.st_mode):04o}"


def home_problems(home: Path, uid: int) -> list[str]:
    """The home is this user's and no one else's, down to the keys; a missing home is made 0700 by the caller."""
    me = user_name(uid)
    try:
        info = home.stat()
    except FileNotFoundError:
        return []
    if not stat.S_ISDIR(info.st_mode):
        return [f"--home {home} is not a directory"]
    if info.st_uid != uid:
        return [f"--home {home} belongs to {user_name(info.st_uid)}, not the broker's user {me}: chown -R {me} {home}"]
    if stat.S_IMODE(info.st_mode) & 0o077:
        return [f"--home {home} is open to others (mode {_mode(info)}): chmod 700 {home}"]
    problems: list[str] = []
    for path, entry in _walk(home):
        if entry.st_uid != uid:
            problems.append(f"{path} belongs to {user_name(entry.st_uid)}, not {me}: chown -R {me} {home}")
        elif stat.S_IMODE(entry.st_mode) & 0o077 and not path.name.endswith(".pub"):  # a public key is public
            problems.append(f"{path} is open to others (mode {_mode(entry)}): chmod -R go-rwx {home}")
    return problems[:10]


def _walk(top: Path) -> Iterator[tuple[Path, os.stat_result]]:
    seen = 0
    stack = [top]
    while stack and seen < MAX_HOME_ENTRIES:
        directory = stack.pop()
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            continue
        for name in names:
            path = directory / name
            try:
                entry = path.lstat()
            except OSError:
                continue
            seen += 1
            yield path, entry
            if stat.S_ISDIR(entry.st_mode):
                stack.append(path)


def make_home(home: Path) -> None:
    """An absent home is made here, 0700, whatever the umask; an empty one (systemd's StateDirectory=) is kept."""
    home.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
    os.chmod(home, PRIVATE_DIR)


def secrets_problems(path: Path, uid: int) -> list[str]:
    me = user_name(uid)
    try:
        info = path.stat()
    except OSError as exc:
        return [f"--secrets {path}: cannot be read ({exc.strerror}); give a file of KEY=VALUE lines"]
    if not stat.S_ISREG(info.st_mode):
        return [f"--secrets {path} is not a regular file"]
    if info.st_uid not in (uid, 0):
        return [f"--secrets {path} belongs to {user_name(info.st_uid)}: chown {me} {path}"]
    if stat.S_IMODE(info.st_mode) & 0o077:
        return [f"--secrets {path} is open to others (mode {_mode(info)}): chmod 600 {path}"]
    if info.st_size > MAX_SECRETS_BYTES:
        return [f"--secrets {path} is larger than {MAX_SECRETS_BYTES} bytes; it holds KEY=VALUE lines only"]
    return []


def read_secrets(path: Path) -> tuple[dict[str, str], list[str]]:
    """KEY=VALUE lines (blank lines and # comments skipped, `export ` allowed, quotes around a value removed);
    a bad line is named by its number, never by its text, which may hold a credential."""
    values: dict[str, str] = {}
    problems: list[str] = []
    try:
        text = path.read_bytes()[:MAX_SECRETS_BYTES].decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return {}, [f"--secrets {path}: cannot be read as UTF-8 text ({exc.__class__.__name__})"]
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        line = line.removeprefix("export ").lstrip()
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not key.replace("_", "a").isalnum() or key[0].isdigit():
            problems.append(f"--secrets {path}: line {number} is not KEY=VALUE (a name of letters, digits and _)")
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        values[key] = value
    return values, problems


def contracts_problems(directory: Path, uid: int) -> list[str]:
    """Contracts nobody else can change: a contract says where the credential goes and what runs to refresh it."""
    me = user_name(uid)
    try:
        info = directory.stat()
    except OSError as exc:
        return [f"--contracts {directory}: {exc.strerror}"]
    if not stat.S_ISDIR(info.st_mode):
        return [f"--contracts {directory} is not a directory of contract files (*.toml)"]
    problems: list[str] = []
    for path in [directory, *sorted(directory.glob("*.toml"))]:
        try:
            entry = path.stat()
        except OSError:
            continue
        if entry.st_uid not in (uid, 0):
            problems.append(
                f"{path} belongs to {user_name(entry.st_uid)}, who could point a contract (and so the credential)"
                f" anywhere: chown root {path} (or {me})"
            )
        elif stat.S_IMODE(entry.st_mode) & 0o022:
            problems.append(f"{path} can be changed by others (mode {_mode(entry)}): chmod go-w {path}")
    return problems


def socket_dir_problems(socket_path: Path, uid: int) -> list[str]:
    """A socket's directory only the broker (or root) can change: in one others can write to, an agent could put
    its own socket there first, or in place of the broker's, and answer the approvers' commands itself."""
    directory = socket_path.parent
    try:
        info = directory.stat()
    except OSError:
        return [f"--socket {socket_path}: its directory {directory} does not exist"]
    if info.st_uid not in (uid, 0) or stat.S_IMODE(info.st_mode) & 0o022:
        return [
            f"--socket {socket_path}: its directory {directory} can be changed by others (mode {_mode(info)},"
            f" owner {user_name(info.st_uid)}), who could put a socket of their own there: give a directory of the"
            f" broker's own (install -d -o {user_name(uid)} -m 0755 DIR; systemd's RuntimeDirectory=)"
        ]
    return []
