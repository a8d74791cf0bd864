"""The operator console: a small standard-library web server over a pollwarden home.

Security model, in order of the request:

- It binds to loopback unless told otherwise, and answers only to the host names it was bound to (a page on
  another site that rebinds its DNS name to 127.0.0.1 gets a 400, not the console).
- Every page but /login needs a session cookie (HttpOnly, SameSite=Strict) that only the login token opens;
  the token is compared in constant time and never written to a page or a log line. A broker's console
  (`logins` given) takes no token: only a one-time link (`login_link`, 5 minutes, once) opens a session, bound
  to the user it was minted for, who is then the 'Decided by' of every form; the log names that user, never
  the link.
- Every POST must carry the session's CSRF token in a hidden field, and a POST whose Origin header names
  another origin is refused (403) before anything is read from the store.
- Pages are rendered on the server with every value escaped, under a Content-Security-Policy without scripts.

The store is opened per request, so the pages always show fresh state and the console never holds a lease;
a decision is applied by `operating.decide`, that is `apply_decision`, the one path that widens authority,
and an agent's approval request is answered by `operating.answer_grant`, as `pollwarden approve-session`,
`approve-call` and `revoke-session` answer it.

One request handler, `handler.ConsoleHandler`, made of: `base` (responses with the security headers, logging,
the form reader), `auth` (Host, Origin, login token, session cookie, CSRF), `views` (the pages) and `actions`
(the forms that decide or answer); `handler` itself only routes.
"""

from __future__ import annotations

import hmac
import secrets
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, TextIO
from urllib.parse import quote

from ..core.contract.reader import is_loopback as is_loopback
from ..foreground import stop_signals, wait_for
from ..home.operating import open_store
from ..shown import shown
from ..store.base import Store
from .base import Serving
from .handler import ConsoleHandler
from .logins import OneTimeLogins
from .sessions import Sessions


def _is_wildcard(host: str) -> bool:
    return host in ("", "0.0.0.0", "::")


def _netloc(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class ConsoleServer:
    """The console over one home. `start()` serves in a background thread; `stop()` ends it.

    `token` None makes a fresh random one (`.token`); `port` 0 picks a free port (`.url` tells which).
    """

    def __init__(
        self,
        home: Path,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        log: TextIO | None = None,
        logins: OneTimeLogins | None = None,
        metrics: Callable[[], tuple[bytes, str]] | None = None,
    ) -> None:
        if token is not None and not token:
            raise ValueError("the console token must not be empty")
        self.home = home
        self.host = host
        self.token = token if token is not None else secrets.token_urlsafe(32)
        self.logins = logins
        """A broker's console: only one-time links minted here let anyone in, and no token does."""
        self.sessions = Sessions()
        self._metrics = metrics
        self._requested_port = port
        self._log_stream = log if log is not None else sys.stderr
        self._log_lock = threading.Lock()
        self._httpd: ConsoleHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def metrics(self) -> tuple[bytes, str] | None:
        return self._metrics() if self._metrics is not None else None

    # -- lifecycle -----------------------------------------------------------------------------------

    def start(self) -> None:
        if self._httpd is not None:
            raise RuntimeError("the console is already running")
        self._httpd = ConsoleHTTPServer((self.host, self._requested_port), self)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.1}, name="pollwarden-console", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        httpd.shutdown()
        httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> ConsoleServer:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("the console is not running")
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        return "http://" + _netloc(self.host, self.port)

    @property
    def login_url(self) -> str:
        """The one URL that carries the token: print it once at start, never in a page or a log line."""
        if self.logins is not None:
            raise RuntimeError("a broker's console takes no token, only one-time links (login_link)")
        return f"{self.url}/login?token={quote(self.token, safe='')}"

    # -- what the handler asks -----------------------------------------------------------------------

    def log(self, line: str) -> None:
        with self._log_lock:
            try:
                self._log_stream.write(f"console: {line}\n")
                self._log_stream.flush()
            except (OSError, ValueError):
                pass

    def login_link(self, user: str) -> str:
        """A one-time link for `user` (a broker's console only): valid 5 minutes, once."""
        if self.logins is None:
            raise RuntimeError("this console takes its token, not one-time links")
        return f"{self.url}/login?once={quote(self.logins.mint(user), safe='')}"

    def token_ok(self, candidate: str) -> bool:
        if self.logins is not None:
            return False  # the broker's console: no token opens it, whoever learnt one
        return hmac.compare_digest(candidate.encode("utf-8"), self.token.encode("utf-8"))

    def allowed_netlocs(self) -> set[str] | None:
        """The Host headers this console answers to; None when bound to every address (then any name)."""
        if _is_wildcard(self.host):
            return None
        names = {self.host}
        if is_loopback(self.host):
            names |= {"localhost", "127.0.0.1"} if ":" not in self.host else {"localhost", "::1"}
        return {_netloc(name, self.port).lower() for name in names}

    @contextmanager
    def store(self, keys: str) -> Iterator[Store]:
        store = open_store(self.home, keys=keys)
        try:
            yield store
        finally:
            store.close()


class ConsoleHTTPServer(Serving):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], console: ConsoleServer) -> None:
        self.console = console
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, ConsoleHandler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A dropped connection is not worth a traceback on the operator's terminal.
        self.console.log(f"{client_address[0]} connection error: {shown(repr(sys.exc_info()[1]))}")


def serve_until_signalled(server: ConsoleServer, on_ready: Callable[[], None]) -> None:
    """Run a started-here console in the foreground until Ctrl-C or SIGTERM, then stop it cleanly."""
    with stop_signals() as done:
        server.start()
        try:
            on_ready()
            wait_for(done)
        finally:
            server.stop()
