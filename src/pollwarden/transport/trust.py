"""A contract's own CA bundle (`[tls] ca_file`): what verifies its origin over https instead of the system's store.

A Kubernetes API server is signed by the cluster's CA (a service account's `ca.crt`), a gateway inside a company
by a private one: the system's store trusts neither, and turning verification off is never the answer. The
context is made as the system's is (`ssl.create_default_context`: the host name checked, TLS 1.2 at least), with
the bundle alone as its roots.

The file is read where the request is made, on the machine that runs the operation (a worker's mounted service
account), and read again when it changes (a cluster rotates its CA by swapping the mounted file), within a cap and
only when it is a regular file: a FIFO or a device named here must not hold a worker. Anything wrong with it is a
local failure, nothing sent, that names the file and never its contents.
"""

from __future__ import annotations

import os
import ssl
import stat
import threading
from collections import OrderedDict

from ..core.bounded import TooLarge, read_bounded
from ..core.observe import FailureKind
from .messages import WireError

MAX_CA_BYTES = 4 * 1024 * 1024
"""Far more than any bundle (the whole Mozilla store is about 220 KB); a larger file is refused, never read whole."""

_KEPT = 16
_lock = threading.Lock()
_contexts: OrderedDict[tuple[str, int, int, int, int], ssl.SSLContext] = OrderedDict()


def _refused(path: str, why: str) -> WireError:
    return WireError(FailureKind.LOCAL, f"[tls].ca_file {path} {why}")


def ca_context(path: str) -> ssl.SSLContext:
    """The verifying context whose only roots are the bundle at `path`; the same object while the file is
    unchanged (a context is safe to share between threads, and the pool keys its connections by it)."""
    try:
        info = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        raise _refused(path, "does not exist") from None
    except OSError as exc:
        raise _refused(path, f"cannot be read ({exc.__class__.__name__})") from None
    if not stat.S_ISREG(info.st_mode):
        raise _refused(path, "is not a regular file")
    key = (path, info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
    with _lock:
        found = _contexts.get(key)
        if found is not None:
            _contexts.move_to_end(key)
            return found
    context = _load(path)
    with _lock:
        _contexts[key] = context
        while len(_contexts) > _KEPT:
            _contexts.popitem(last=False)
    return context


def _load(path: str) -> ssl.SSLContext:
    try:
        data = read_bounded(path, MAX_CA_BYTES)
    except TooLarge:
        raise _refused(path, f"is larger than {MAX_CA_BYTES} bytes") from None
    except OSError as exc:
        raise _refused(path, f"cannot be read ({exc.__class__.__name__})") from None
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        raise _refused(path, "is not a PEM bundle (it holds bytes that are not ASCII)") from None
    if "-----BEGIN CERTIFICATE-----" not in text:
        # Also what keeps an empty file from meaning "the system's roots" below (an empty cadata is no cadata).
        raise _refused(path, "holds no PEM certificate")
    try:
        # Given cadata, create_default_context loads that bundle and not the system's roots.
        return ssl.create_default_context(cadata=text)
    except (ssl.SSLError, ValueError):
        raise _refused(path, "holds no PEM certificate that can be read") from None
