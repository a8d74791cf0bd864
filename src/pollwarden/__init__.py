"""pollwarden: bounded, durable, auditable waiting on external jobs."""

__version__ = "0.1.0"

# After __version__: the modules behind the API read it while this package is still initialising.
from .api import Outcome, Stopped, Succeeded, Watch, WatchError, watch, watch_sync

__all__ = ["Outcome", "Stopped", "Succeeded", "Watch", "WatchError", "__version__", "watch", "watch_sync"]
