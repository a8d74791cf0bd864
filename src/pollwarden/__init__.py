"""pollwarden: bounded, durable, auditable waiting on external jobs.

The package face is lazy (`pollwarden.lazy`): `import pollwarden` (and so `import pollwarden.core`, which runs
this file first) loads no dependency. The API loads on first use of one of its names, with the core; a watch's
first run loads the engine, the status client and the store (and with it the audit crypto).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .lazy import lazy_face

__version__ = "0.1.0"

if TYPE_CHECKING:
    from .api import Outcome, Stopped, Succeeded, Watch, WatchCancelled, WatchError, watch, watch_sync
    from .report.progress import Progress

__all__ = [
    "Outcome",
    "Progress",
    "Stopped",
    "Succeeded",
    "Watch",
    "WatchCancelled",
    "WatchError",
    "__version__",
    "watch",
    "watch_sync",
]

__getattr__, __dir__ = lazy_face(
    __name__,
    {
        ".api": "Outcome Stopped Succeeded Watch WatchCancelled WatchError watch watch_sync",
        ".report.progress": "Progress",
    },
)
