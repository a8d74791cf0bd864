"""The operator console: a small standard-library web server over a pollwarden home.

Security model, in order of the request:

- It binds to loopback unless told otherwise, and answers only to the host names it was bound to (a page on
  another site that rebinds its DNS name to 127.0.0.1 gets a 400, not the console).
- Every page but /login needs a session cookie (HttpOnly, SameSite=Strict) that only the login token opens;
  the token is compared in constant time and never written to a page or a log line.
- Every POST must carry the session's CSRF token in a hidden field, and a POST whose Origin header names
  another origin is refused (403) before anything is read from the store.
- Pages are rendered on the server with every value escaped, under a Content-Security-Policy without scripts.

The store is opened per request, so the pages always show fresh state and the console never holds a lease;
a decision is applied by `operating.decide`, that is `apply_decision`, the one path that widens authority,
and an agent's approval request is answered by `operating.answer_grant`, as `pollwarden approve-session`,
`approve-call` and `revoke-session` answer it.
"""

from __future__ import annotations

import hmac
import ipaddress
import re
import secrets
import signal
import socket
import sys
import threading
import time
import traceback
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any, TextIO
from urllib.parse import parse_qs, quote, unquote, urlsplit

from ..audit import AuditError
from ..clock import utcnow
from ..core.escalation import DecisionError
from ..operating import (
    GRANT_ANSWERS,
    HomeError,
    answer_grant,
    decide,
    grant_step,
    open_store,
    verify_home,
    watch_command,
)
from ..shown import has_control, shown
from ..store.base import Store, StoreError
from ..story import story_lines
from . import pages
from .pages import Flash

SESSION_COOKIE = "pollwarden_console"
SESSION_IDLE_SECONDS = 12 * 3600
MAX_SESSIONS = 64
MAX_BODY = 16 * 1024
MAX_BY = 100
MAX_NOTE = 500
RECENT_DECISIONS = 10
RECENT_APPROVALS = 10

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

_DECIDE_PATH = re.compile(r"^/decisions/([^/]+)/decide$")
_ANSWER_PATH = re.compile(r"^/approvals/([^/]+)/answer$")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _is_wildcard(host: str) -> bool:
    return host in ("", "0.0.0.0", "::")


def _netloc(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@dataclass
class Session:
    csrf: str
    seen: float
    flashes: list[Flash] = field(default_factory=list)
    by: str = ""
    """The operator name last used in this session, offered again in the next form."""


class Sessions:
    """Logged-in browsers, in memory only: restarting the console logs everyone out."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: OrderedDict[str, Session] = OrderedDict()

    def new(self) -> tuple[str, Session]:
        sid = secrets.token_urlsafe(32)
        session = Session(csrf=secrets.token_urlsafe(32), seen=time.monotonic())
        with self._lock:
            self._items[sid] = session
            while len(self._items) > MAX_SESSIONS:
                self._items.popitem(last=False)
        return sid, session

    def get(self, sid: str | None) -> Session | None:
        if not sid:
            return None
        now = time.monotonic()
        with self._lock:
            session = self._items.get(sid)
            if session is None:
                return None
            if now - session.seen > SESSION_IDLE_SECONDS:
                del self._items[sid]
                return None
            session.seen = now
            self._items.move_to_end(sid)
            return session

    def drop(self, sid: str | None) -> None:
        if sid:
            with self._lock:
                self._items.pop(sid, None)


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
    ) -> None:
        if token is not None and not token:
            raise ValueError("the console token must not be empty")
        self.home = home
        self.host = host
        self.token = token if token is not None else secrets.token_urlsafe(32)
        self.sessions = Sessions()
        self._requested_port = port
        self._log_stream = log if log is not None else sys.stderr
        self._log_lock = threading.Lock()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------------------------

    def start(self) -> None:
        if self._httpd is not None:
            raise RuntimeError("the console is already running")
        self._httpd = _HTTPServer((self.host, self._requested_port), self)
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
        return f"{self.url}/login?token={quote(self.token, safe='')}"

    # -- what the handler asks -----------------------------------------------------------------------

    def log(self, line: str) -> None:
        with self._log_lock:
            try:
                self._log_stream.write(f"console: {line}\n")
                self._log_stream.flush()
            except (OSError, ValueError):
                pass

    def token_ok(self, candidate: str) -> bool:
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


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], console: ConsoleServer) -> None:
        self.console = console
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A dropped connection is not worth a traceback on the operator's terminal.
        self.console.log(f"{client_address[0]} connection error: {shown(repr(sys.exc_info()[1]))}")


class _Handler(BaseHTTPRequestHandler):
    server_version = "pollwarden-console"
    sys_version = ""
    timeout = 30
    server: _HTTPServer

    def version_string(self) -> str:
        return self.server_version

    @property
    def console(self) -> ConsoleServer:
        return self.server.console

    # -- logging: the path without its query, so a login URL's token never reaches a log line -----------

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        path = urlsplit(self.path).path if hasattr(self, "path") else "-"
        method = getattr(self, "command", None) or "-"
        self.console.log(f'{self.client_address[0]} "{shown(method)} {shown(path)}" {code}')

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

    def _redirect(self, location: str, headers: tuple[tuple[str, str], ...] = ()) -> None:
        self.send_response(303)
        self.send_header("Location", location)
        self.send_header("Content-Length", "0")
        for name, value in SECURITY_HEADERS + headers:
            self.send_header(name, value)
        self.end_headers()

    def _problem(self, status: int, title: str, text: str, session: Session | None = None) -> None:
        self._send(status, pages.message_page(title, text, csrf=session.csrf if session else None))

    # -- request checks ------------------------------------------------------------------------------

    def _session_id(self) -> str | None:
        for header in self.headers.get_all("Cookie") or []:
            for part in header.split(";"):
                name, _, value = part.strip().partition("=")
                if name == SESSION_COOKIE:
                    return value
        return None

    def _host_ok(self) -> bool:
        allowed = self.console.allowed_netlocs()
        if allowed is None:
            return True
        host = (self.headers.get("Host") or "").strip().lower()
        if host in allowed:
            return True
        self._problem(
            400,
            "Unexpected host name",
            f"This console answers to {', '.join(sorted(allowed))} only; bind it with --host to use another name.",
        )
        return False

    def _origin_ok(self) -> bool:
        """A browser names the page a form was sent from; a form from any other origin is refused."""
        origin = self.headers.get("Origin")
        if origin is None:
            return True
        allowed = self.console.allowed_netlocs()
        if allowed is None:
            expected = {"http://" + (self.headers.get("Host") or "").strip().lower()}
        else:
            expected = {"http://" + netloc for netloc in allowed}
        return origin.strip().lower() in expected

    def _form(self) -> dict[str, str] | None:
        """The urlencoded body, first value of each field; None after an error answer was sent."""
        content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        if content_type != "application/x-www-form-urlencoded":
            self._problem(415, "Unsupported form", "The console accepts HTML form posts only.")
            return None
        try:
            length = int(self.headers.get("Content-Length") or "")
        except ValueError:
            self._problem(411, "Length required", "The form had no Content-Length.")
            return None
        if length < 0 or length > MAX_BODY:
            self._problem(413, "Form too large", f"A console form is at most {MAX_BODY} bytes.")
            return None
        raw = self.rfile.read(length).decode("utf-8", errors="replace")
        try:
            parsed = parse_qs(raw, keep_blank_values=True, max_num_fields=20)
        except ValueError:
            self._problem(400, "Bad form", "The form could not be read.")
            return None
        return {key: values[0] for key, values in parsed.items() if values}

    # -- dispatch ------------------------------------------------------------------------------------

    def do_GET(self) -> None:
        self._guarded(self._get)

    def do_POST(self) -> None:
        self._guarded(self._post)

    def _guarded(self, handle: Callable[[], None]) -> None:
        try:
            handle()
        except Exception:
            # The operator sees a sentence; the traceback goes to the console's own log, never to a page.
            self.console.log("internal error:\n" + traceback.format_exc().rstrip())
            with suppress(OSError):
                self._problem(500, "Internal error", "The console failed on this request; its log says why.")

    def _get(self) -> None:
        if not self._host_ok():
            return
        url = urlsplit(self.path)
        path = url.path
        if path == "/login":
            self._login_get(url.query)
            return
        if path == "/favicon.ico":
            self._send(404, "")
            return
        session = self.console.sessions.get(self._session_id())
        if session is None:
            self._redirect("/login")
            return
        if path == "/":
            self._operations(session)
        elif path.startswith("/operations/"):
            self._operation(session, unquote(path.removeprefix("/operations/")))
        elif path == "/decisions":
            self._decisions(session)
        elif path == "/approvals":
            self._approvals(session)
        elif path == "/audit":
            self._audit(session)
        else:
            self._problem(404, "Not found", "There is no such page.", session)

    def _post(self) -> None:
        if not self._host_ok():
            return
        if not self._origin_ok():
            self.console.log(
                f"{self.client_address[0]} refused a form from origin {shown(repr(self.headers.get('Origin')))}"
            )
            self._problem(403, "Refused", "This form was sent from another site; nothing changed.")
            return
        form = self._form()
        if form is None:
            return
        path = urlsplit(self.path).path
        if path == "/login":
            self._login(form.get("token", ""))
            return
        sid = self._session_id()
        session = self.console.sessions.get(sid)
        if session is None:
            self._redirect("/login")
            return
        if not hmac.compare_digest(form.get("csrf", "").encode("utf-8"), session.csrf.encode("utf-8")):
            self._problem(
                403,
                "Refused",
                "The form carried no valid CSRF token (a stale page or another site); nothing changed."
                " Reload the page and try again.",
                session,
            )
            return
        if path == "/logout":
            self.console.sessions.drop(sid)
            self._redirect(
                "/login", (("Set-Cookie", f"{SESSION_COOKIE}=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict"),)
            )
            return
        match = _DECIDE_PATH.match(path)
        if match is not None:
            self._decide(session, unquote(match.group(1)), form)
            return
        match = _ANSWER_PATH.match(path)
        if match is not None:
            self._answer(session, unquote(match.group(1)), form)
            return
        self._problem(404, "Not found", "There is no such form.", session)

    # -- login ---------------------------------------------------------------------------------------

    def _login_get(self, query: str) -> None:
        tokens = parse_qs(query, keep_blank_values=True).get("token")
        if tokens:
            self._login(tokens[0])
            return
        if self.console.sessions.get(self._session_id()) is not None:
            self._redirect("/")
            return
        self._send(200, pages.login_page())

    def _login(self, candidate: str) -> None:
        if not self.console.token_ok(candidate):
            self.console.log(f"{self.client_address[0]} failed login")
            self._send(403, pages.login_page("That token is not this console's; nothing was opened."))
            return
        self.console.sessions.drop(self._session_id())
        sid, _ = self.console.sessions.new()
        cookie = f"{SESSION_COOKIE}={sid}; Path=/; HttpOnly; SameSite=Strict"
        self.console.log(f"{self.client_address[0]} logged in")
        self._redirect("/", (("Set-Cookie", cookie),))

    # -- pages ---------------------------------------------------------------------------------------

    @staticmethod
    def _flashes(session: Session) -> list[Flash]:
        flashes, session.flashes = session.flashes, []
        return flashes

    def _operations(self, session: Session) -> None:
        try:
            with self.console.store("none") as store:
                records = [s.record for s in store.all()]
                open_ones = store.decisions(open_only=True)
                pending = _pending_approvals(store)
        except (HomeError, StoreError) as exc:
            self._problem(500, "Cannot read the state", str(exc), session)
            return
        by_operation = {d.request.operation_id: d.request.decision_id for d in open_ones}
        body = pages.operations_page(
            records,
            by_operation,
            utcnow(),
            csrf=session.csrf,
            flashes=self._flashes(session),
            open_decisions=len(open_ones),
            pending_approvals=pending,
        )
        self._send(200, body)

    def _operation(self, session: Session, operation_id: str) -> None:
        story: list[str] | None = None
        problem: str | None = None
        try:
            try:
                store = open_store(self.console.home, keys="read")
            except HomeError as exc:
                problem = str(exc)  # no key to read the story with; the record itself can still be shown
                store = open_store(self.console.home, keys="none")
            try:
                stored = store.get(operation_id)
                decisions = store.decisions(operation_id)
                open_count = len(store.decisions(open_only=True))
                pending = _pending_approvals(store)
                if stored is not None and problem is None:
                    try:
                        story = story_lines(store.events(operation_id))
                    except (StoreError, AuditError) as exc:
                        problem = str(exc)
            finally:
                store.close()
        except (HomeError, StoreError) as exc:
            self._problem(500, "Cannot read the state", str(exc), session)
            return
        if stored is None:
            self._problem(404, "No such operation", f"There is no operation {operation_id!r}.", session)
            return
        body = pages.operation_page(
            stored.record,
            story,
            problem,
            decisions,
            utcnow(),
            csrf=session.csrf,
            flashes=self._flashes(session),
            open_decisions=open_count,
            pending_approvals=pending,
        )
        self._send(200, body)

    def _decisions(self, session: Session) -> None:
        try:
            with self.console.store("none") as store:
                everything = store.decisions()
                pending = _pending_approvals(store)
        except (HomeError, StoreError) as exc:
            self._problem(500, "Cannot read the state", str(exc), session)
            return
        open_ones = [d for d in everything if d.status == "open"]
        done = [d for d in everything if d.status != "open"]
        done.sort(key=lambda d: d.decided_at.timestamp() if d.decided_at else 0.0, reverse=True)
        body = pages.decisions_page(
            open_ones,
            done[:RECENT_DECISIONS],
            csrf=session.csrf,
            by=session.by,
            flashes=self._flashes(session),
            pending_approvals=pending,
        )
        self._send(200, body)

    def _audit(self, session: Session) -> None:
        check = None
        problem = None
        open_count = 0
        pending: int | None = None
        try:
            with self.console.store("none") as store:
                open_count = len(store.decisions(open_only=True))
                pending = _pending_approvals(store)
            check = verify_home(self.console.home)
        except (HomeError, StoreError, AuditError) as exc:
            problem = str(exc)
        body = pages.audit_page(
            check,
            problem,
            csrf=session.csrf,
            flashes=self._flashes(session),
            open_decisions=open_count,
            pending_approvals=pending,
        )
        self._send(200, body)

    def _approvals(self, session: Session) -> None:
        try:
            with self.console.store("none") as store:
                everything = store.grants()
                open_count = len(store.decisions(open_only=True))
        except (HomeError, StoreError) as exc:
            self._problem(500, "Cannot read the state", str(exc), session)
            return
        pending = [g for g in everything if g.status == "pending"]
        approved_sessions = [g for g in everything if g.status == "approved" and g.kind == "session"]
        shown = {g.grant_id for g in pending + approved_sessions}
        recent = [g for g in everything if g.grant_id not in shown]
        recent.sort(key=lambda g: (g.decided_at or g.requested_at).timestamp(), reverse=True)
        body = pages.approvals_page(
            pending,
            approved_sessions,
            recent[:RECENT_APPROVALS],
            utcnow(),
            csrf=session.csrf,
            by=session.by,
            flashes=self._flashes(session),
            open_decisions=open_count,
        )
        self._send(200, body)

    # -- the forms that change something --------------------------------------------------------------

    def _operator(self, form: dict[str, str], back: Callable[[str, str], None]) -> tuple[str, str | None] | None:
        """The checked 'Decided by' name and note of a form; None after an error flash was queued."""
        by = form.get("by", "").strip()
        note = form.get("note", "").strip() or None
        if not by:
            back(
                "error", "Type your name in 'Decided by': every decision names the person who made it. Nothing changed."
            )
            return None
        if len(by) > MAX_BY or has_control(by):
            back("error", f"'Decided by' must be at most {MAX_BY} characters of plain text. Nothing changed.")
            return None
        if note is not None and (len(note) > MAX_NOTE or has_control(note)):
            back("error", f"The note must be at most {MAX_NOTE} characters of plain text. Nothing changed.")
            return None
        return by, note

    def _decide(self, session: Session, decision_id: str, form: dict[str, str]) -> None:
        def back(kind: str, text: str) -> None:
            session.flashes.append(Flash(kind, text))
            self._redirect("/decisions")

        operator = self._operator(form, back)
        if operator is None:
            return
        by, note = operator
        choice = form.get("option", "").strip()
        refuse = choice == "refuse"
        option: int | None = None
        if not refuse:
            if not choice.isdigit() or len(choice) > 4:
                back("error", "Choose one of the options (or refuse). Nothing changed.")
                return
            option = int(choice)
        session.by = by
        try:
            with self.console.store("write") as store:
                outcome = decide(store, decision_id, option=option, refuse=refuse, by=by, note=note)
        except (HomeError, DecisionError, StoreError, AuditError) as exc:
            self.console.log(f"{self.client_address[0]} decision {shown(decision_id)} by {by!r} refused: {shown(exc)}")
            back("error", f"Decision {decision_id} was not applied: {exc}")
            return
        self.console.log(f"{self.client_address[0]} decision {shown(decision_id)} by {by!r}: {outcome.status}")
        failed = outcome.action is not None and not outcome.action.get("ok")
        hint = ""
        if outcome.resume:
            command = watch_command(outcome.resume, home=str(self.console.home))
            hint = f"; resume it with `{command}` or let a worker pick it up"
        back("error" if failed else "ok", outcome.message + hint)

    def _answer(self, session: Session, grant_id: str, form: dict[str, str]) -> None:
        """Approve, refuse or revoke an agent's approval request: `operating.answer_grant`, as the CLI does."""

        def back(kind: str, text: str) -> None:
            session.flashes.append(Flash(kind, text))
            self._redirect("/approvals")

        operator = self._operator(form, back)
        if operator is None:
            return
        by, note = operator
        answer = form.get("answer", "").strip()
        if answer not in GRANT_ANSWERS:
            back("error", "Choose Approve, Refuse or Revoke. Nothing changed.")
            return
        session.by = by
        try:
            with self.console.store("write") as store:
                # Revoking is `revoke-session`: sessions only, and a still-pending one is refused instead.
                step = grant_step(answer, store.get_grant(grant_id) if answer == "revoke" else None)
                kind = "session" if answer == "revoke" else None
                expect, status, verb = step
                answered = answer_grant(
                    store, grant_id, kind=kind, expect=expect, status=status, verb=verb, by=by, note=note
                )
        except (HomeError, StoreError, AuditError) as exc:
            self.console.log(
                f"{self.client_address[0]} approval {shown(grant_id)} {answer} by {by!r} refused: {shown(exc)}"
            )
            back("error", str(exc))
            return
        self.console.log(f"{self.client_address[0]} approval {shown(grant_id)} by {by!r}: {answered.status}")
        back("ok", answered.message)


def _pending_approvals(store: Store) -> int:
    return len(store.grants(status="pending"))


def serve_until_signalled(server: ConsoleServer, on_ready: Callable[[], None]) -> None:
    """Run a started-here console in the foreground until Ctrl-C or SIGTERM, then stop it cleanly."""
    done = threading.Event()
    previous: Any = None
    previous_int: Any = None
    in_main = threading.current_thread() is threading.main_thread()

    def on_term(signum: int, frame: FrameType | None) -> None:
        done.set()

    if in_main:
        # SIGINT too, explicitly: a process started in the background by a shell inherits SIGINT ignored, and
        # Python then installs no KeyboardInterrupt handler, so Ctrl-C (or `kill -INT`) would do nothing.
        previous = signal.signal(signal.SIGTERM, on_term)
        previous_int = signal.signal(signal.SIGINT, on_term)
    try:
        server.start()
        try:
            on_ready()
            while not done.wait(0.5):
                pass
        except KeyboardInterrupt:
            pass
        finally:
            server.stop()
    finally:
        if in_main:
            signal.signal(signal.SIGTERM, previous)
            signal.signal(signal.SIGINT, previous_int)
