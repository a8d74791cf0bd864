"""Where state lives: --home, else $POLLWARDEN_HOME, else the XDG state directory."""

from __future__ import annotations

import os
from pathlib import Path


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
