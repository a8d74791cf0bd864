"""The base of the console's request handler: responses with the security headers, logging, the form reader.

Every answer goes out through `_send` or `_redirect`, so none can miss a security header; every log line goes
through the console's log with the path only, so a login URL's token never reaches one.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from contextlib import AbstractContextManager, suppress
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

from ..core.digits import whole_number
from ..shown import shown
from ..store.base import Store
from . import pages
from .logins import OneTimeLogins
from .sessions import Session, Sessions


class Console(Protocol):
    """What a request's handler sees of the console serving it (`server.ConsoleServer`): named here, so the
    handlers never import the server that imports them."""

    home: Path
    logins: OneTimeLogins | None
    sessions: Sessions

    def log(self, line: str) -> None: ...

    def token_ok(self, candidate: str) -> bool: ...

    def allowed_netlocs(self) -> set[str] | None: ...

    def store(self, keys: str) -> AbstractContextManager[Store]: ...

    def metrics(self) -> tuple[bytes, str] | None:
        """The fleet gauges as a /metrics answer (body, Content-Type), or None when this console serves none."""
        ...


class Serving(ThreadingHTTPServer):
    """The HTTP server a handler runs under: `server.ConsoleHTTPServer`, which sets `console`."""

    console: Console


MAX_BODY = 16 * 1024

SECURITY_HEADERS = (
    (
        "Content-Security-Policy",
        "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    ),
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
    ("Referrer-Policy", "same-origin"),  # "no-referrer" would make a browser send "Origin: null"
    ("Cache-Control", "no-store"),
)


class BaseHandler(BaseHTTPRequestHandler):
    server_version = "pollwarden-console"
    sys_version = ""
    timeout = 30
    server: Serving

    def version_string(self) -> str:
        return self.server_version

    @property
    def console(self) -> Console:
        return self.server.console

    # -- logging: the path without its query, so a login URL's token never reaches a log line -----------

    _held: str | None = None
    _holding = False

    def _request_words(self) -> str:
        path = urlsplit(self.path).path if hasattr(self, "path") else "-"
        method = getattr(self, "command", None) or "-"
        return f'{self.client_address[0]} "{shown(method)} {shown(path)}"'

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        line = f"{self._request_words()} {code}"
        if self._holding:  # said once the answer is written (or the client is gone): one line either way
            self._held = line
        else:
            self.console.log(line)

    def log_error(self, format: str, *args: Any) -> None:
        self.console.log(f"{self.client_address[0]} bad request")

    def log_message(self, format: str, *args: Any) -> None:
        pass

    # -- responses -----------------------------------------------------------------------------------

    def _send(self, status: int, body: str, headers: tuple[tuple[str, str], ...] = ()) -> None:
        data = body.encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        for name, value in SECURITY_HEADERS + headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _send_bytes(self, status: int, data: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in SECURITY_HEADERS:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _redirect(self, location: str, headers: tuple[tuple[str, str], ...] = ()) -> None:
        self.send_response(303)
        self.send_header("Location", location)
        self.send_header("Content-Length", "0")
        for name, value in SECURITY_HEADERS + headers:
            self.send_header(name, value)
        self.end_headers()

    def _problem(self, status: int, title: str, text: str, session: Session | None = None) -> None:
        self._send(status, pages.message_page(title, text, csrf=session.csrf if session else None))

    def _guarded(self, handle: Callable[[], None]) -> None:
        self._holding, self._held = True, None
        try:
            handle()
        except (ConnectionError, TimeoutError) as exc:
            # The client went away (or fell silent for `timeout`) mid-request or mid-answer: nobody is left to
            # answer, and nothing failed here, so one line says so, never a traceback.
            self.close_connection = True
            said = self._held or self._request_words()
            self._held = None
            self.console.log(f"{said} - the client disconnected before the answer was sent ({type(exc).__name__})")
        except Exception:
            # The operator sees a sentence; the traceback goes to the console's own log, never to a page.
            self.console.log("internal error:\n" + traceback.format_exc().rstrip())
            with suppress(OSError):
                self._problem(500, "Internal error", "The console failed on this request; its log says why.")
        finally:
            held, self._holding, self._held = self._held, False, None
            if held is not None:
                self.console.log(held)

    # -- the request body ------------------------------------------------------------------------------

    def _form(self) -> dict[str, str] | None:
        """The urlencoded body, first value of each field; None after an error answer was sent."""
        content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        if content_type != "application/x-www-form-urlencoded":
            self._problem(415, "Unsupported form", "The console accepts HTML form posts only.")
            return None
        length = whole_number(self.headers.get("Content-Length") or "", 19)
        if length is None:
            self._problem(411, "Length required", "The form had no Content-Length.")
            return None
        if length > MAX_BODY:
            self._problem(413, "Form too large", f"A console form is at most {MAX_BODY} bytes.")
            return None
        raw = self.rfile.read(length).decode("utf-8", errors="replace")
        try:
            parsed = parse_qs(raw, keep_blank_values=True, max_num_fields=20)
        except ValueError:
            self._problem(400, "Bad form", "The form could not be read.")
            return None
        return {key: values[0] for key, values in parsed.items() if values}
