"""Who may talk to the console: the Host and Origin checks, the login token, the session cookie and CSRF.

Each check that fails sends its own answer and returns False or None, so the router only stops.
"""

from __future__ import annotations

import hmac
from urllib.parse import parse_qs

from ..shown import shown
from . import pages
from .base import BaseHandler
from .pages import Chrome
from .sessions import SESSION_COOKIE, Session

SPENT_LINK = (
    "That login link is spent, expired (links last 5 minutes) or not this console's; nothing was opened. Run"
    " `pollwarden console-login --connect SOCKET` again for a new one."
)
NO_TOKEN = (
    "This console takes no token, only a one-time link; nothing was opened. As an approver, run"
    " `pollwarden console-login --connect SOCKET` for one."
)


class AuthHandler(BaseHandler):
    @staticmethod
    def _chrome(session: Session, open_decisions: int | None = None, pending_approvals: int | None = None) -> Chrome:
        """The page's frame; the session's flashes are shown once, on this page."""
        flashes, session.flashes = session.flashes, []
        return Chrome(session.csrf, flashes, open_decisions, pending_approvals, session.bound_user)

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
        if origin.strip().lower() in expected:
            return True
        self.console.log(f"{self.client_address[0]} refused a form from origin {shown(repr(origin))}")
        self._problem(403, "Refused", "This form was sent from another site; nothing changed.")
        return False

    def _session(self) -> Session | None:
        """The logged-in session; None after a redirect to the login page was sent."""
        session = self.console.sessions.get(self._session_id())
        if session is None:
            self._redirect("/login")
        return session

    def _form_session(self, form: dict[str, str]) -> Session | None:
        """The session of a form whose CSRF token is that session's; None after the refusal was sent."""
        session = self._session()
        if session is None:
            return None
        if not hmac.compare_digest(form.get("csrf", "").encode("utf-8"), session.csrf.encode("utf-8")):
            self._problem(
                403,
                "Refused",
                "The form carried no valid CSRF token (a stale page or another site); nothing changed."
                " Reload the page and try again.",
                session,
            )
            return None
        return session

    # -- login and logout ----------------------------------------------------------------------------

    def _login_get(self, query: str) -> None:
        links = parse_qs(query, keep_blank_values=True).get("once")
        if links and self.console.logins is not None:
            self._login_once(links[0])
            return
        tokens = parse_qs(query, keep_blank_values=True).get("token")
        if tokens:
            self._login(tokens[0])
            return
        if self.console.sessions.get(self._session_id()) is not None:
            self._redirect("/")
            return
        self._send(200, pages.login_page(one_time=self.console.logins is not None))

    def _login_once(self, link: str) -> None:
        user = self.console.logins.redeem(link) if self.console.logins is not None else None
        if user is None:
            self.console.log(f"{self.client_address[0]} used a spent, expired or unknown login link")
            self._send(403, pages.login_page(SPENT_LINK, one_time=True))
            return
        self.console.sessions.drop(self._session_id())
        sid, session = self.console.sessions.new()
        session.bound_user = session.by = user
        cookie = f"{SESSION_COOKIE}={sid}; Path=/; HttpOnly; SameSite=Strict"
        self.console.log(f"{self.client_address[0]} logged in as {shown(user)} (a one-time link)")
        self._redirect("/", (("Set-Cookie", cookie),))

    def _login(self, candidate: str) -> None:
        if not self.console.token_ok(candidate):
            self.console.log(f"{self.client_address[0]} failed login")
            refused = (
                NO_TOKEN if self.console.logins is not None else "That token is not this console's; nothing was opened."
            )
            self._send(403, pages.login_page(refused, one_time=self.console.logins is not None))
            return
        self.console.sessions.drop(self._session_id())
        sid, _ = self.console.sessions.new()
        cookie = f"{SESSION_COOKIE}={sid}; Path=/; HttpOnly; SameSite=Strict"
        self.console.log(f"{self.client_address[0]} logged in")
        self._redirect("/", (("Set-Cookie", cookie),))

    def _logout(self) -> None:
        self.console.sessions.drop(self._session_id())
        self._redirect("/login", (("Set-Cookie", f"{SESSION_COOKIE}=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict"),))
