"""The console's request handler: routing only. Every check and page lives in the classes it is made of.

A GET passes the Host check, then either logs in or needs a session; a POST passes the Host and Origin
checks, is read as a form, then either logs in or needs a session whose CSRF token the form carries.
"""

from __future__ import annotations

import re
from urllib.parse import unquote, urlsplit

from .actions import FormActions
from .views import PageViews

_DECIDE_PATH = re.compile(r"^/decisions/([^/]+)/decide$")
_ANSWER_PATH = re.compile(r"^/approvals/([^/]+)/answer$")


class ConsoleHandler(PageViews, FormActions):
    def do_GET(self) -> None:
        self._guarded(self._get)

    def do_POST(self) -> None:
        self._guarded(self._post)

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
        if path == "/metrics":
            # A scraper cannot log in: the gauges are counts by contract and reason, no operation's data, served
            # as the worker's and `pollwarden metrics` serve them.
            page = self.console.metrics()
            if page is None:
                self._send(404, "")
            else:
                self._send_bytes(200, *page)
            return
        session = self._session()
        if session is None:
            return
        if path == "/":
            self._operations(session, url.query)
        elif path.startswith("/operations/"):
            self._operation(session, unquote(path.removeprefix("/operations/")))
        elif path == "/decisions":
            self._decisions(session, url.query)
        elif path == "/approvals":
            self._approvals(session)
        elif path == "/audit":
            self._audit(session)
        elif path == "/schedules":
            self._schedules(session)
        else:
            self._problem(404, "Not found", "There is no such page.", session)

    def _post(self) -> None:
        if not self._host_ok() or not self._origin_ok():
            return
        form = self._form()
        if form is None:
            return
        path = urlsplit(self.path).path
        if path == "/login":
            self._login(form.get("token", ""))
            return
        session = self._form_session(form)
        if session is None:
            return
        if path == "/logout":
            self._logout()
            return
        if path == "/decisions/close":
            self._close_ended(session, form)
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
