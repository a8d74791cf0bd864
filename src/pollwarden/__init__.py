"""pollwarden: bounded, durable, auditable waiting on external jobs.

The package face is lazy: `import pollwarden` (and so `import pollwarden.core`, which runs this file first)
loads no dependency. The API, and with it httpx, the store and the audit crypto, loads on first use of
one of its names.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__version__ = "0.1.0"

if TYPE_CHECKING:
    from .api import Outcome, Stopped, Succeeded, Watch, WatchError, watch, watch_sync

__all__ = ["Outcome", "Stopped", "Succeeded", "Watch", "WatchError", "__version__", "watch", "watch_sync"]

_FROM_API = frozenset(__all__) - {"__version__"}


def __getattr__(name: str) -> object:
    if name not in _FROM_API:
        raise AttributeError(f"module 'pollwarden' has no attribute {name!r}")
    api = importlib.import_module(".api", __name__)
    for each in _FROM_API:  # all at once: later lookups skip this function
        globals()[each] = getattr(api, each)
    return globals()[name]


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
