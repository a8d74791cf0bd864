"""The console's pages as views: read the store (opened per request, never holding a lease), render, send."""

from __future__ import annotations

from urllib.parse import parse_qs

from ..audit import AuditError
from ..clock import utcnow
from ..core.record import OperationRecord
from ..home.operating import HomeError, open_store, verify_home
from ..report.followup import follow_ups
from ..report.ownership import ownership_of
from ..report.story import story_lines
from ..store.base import Event, StoreError, UnreadableRecord
from ..store.roles import Grants, Operations
from . import pages
from .auth import AuthHandler
from .pages import Chrome
from .sessions import Session

RECENT_DECISIONS = 10
RECENT_APPROVALS = 10


def _pending_approvals(store: Grants) -> int:
    return len(store.grants(status="pending"))


def _record_of(store: Operations, operation_id: str) -> OperationRecord | None:
    stored = store.get(operation_id)
    return None if stored is None else stored.record


class PageViews(AuthHandler):
    @staticmethod
    def _chrome(session: Session, open_decisions: int | None = None, pending_approvals: int | None = None) -> Chrome:
        """The page's frame; the session's flashes are shown once, on this page."""
        flashes, session.flashes = session.flashes, []
        return Chrome(session.csrf, flashes, open_decisions, pending_approvals, session.bound_user)

    def _unreadable(self, session: Session, exc: Exception) -> None:
        self._problem(500, "Cannot read the state", str(exc), session)

    def _operations(self, session: Session, query: str = "") -> None:
        wanted = (parse_qs(query).get("show") or ["all"])[0]
        if wanted not in pages.FILTERS:
            wanted = "all"  # an unknown filter shows everything rather than an error page
        now = utcnow()
        try:
            with self.console.store("none") as store:
                listing = store.listing()
                everything = listing.operations
                open_ones = store.decisions(open_only=True)
                pending = _pending_approvals(store)
                now = store.db_now()
        except (HomeError, StoreError) as exc:
            self._unreadable(session, exc)
            return
        by_operation = {d.request.operation_id: d.request.decision_id for d in open_ones}
        rows = [pages.Row(s.record, ownership_of(s, now), by_operation.get(s.record.operation_id)) for s in everything]
        chrome = self._chrome(session, len(open_ones), pending)
        body = pages.operations_page(rows, wanted, now, chrome=chrome, unreadable=listing.unreadable)
        self._send(200, body)

    def _operation(self, session: Session, operation_id: str) -> None:
        story: list[str] | None = None
        events: list[Event] | None = None
        problem: str | None = None
        try:
            try:
                store = open_store(self.console.home, keys="read")
            except HomeError as exc:
                problem = str(exc)  # no key to read the story with; the record itself can still be shown
                store = open_store(self.console.home, keys="none")
            try:
                now = store.db_now()
                stored = store.get(operation_id)
                decisions = store.decisions(operation_id)
                open_count = len(store.decisions(open_only=True))
                pending = _pending_approvals(store)
                if stored is not None and problem is None:
                    try:
                        events = store.events(operation_id)
                        story = story_lines(events)
                    except (StoreError, AuditError) as exc:
                        problem = str(exc)
                        events = None
                follow = (
                    []
                    if stored is None
                    else follow_ups(stored.record, decisions, events, lambda op: _record_of(store, op))
                )
            finally:
                store.close()
        except UnreadableRecord as exc:
            self._problem(409, "Unreadable operation", str(exc), session)
            return
        except (HomeError, StoreError) as exc:
            self._unreadable(session, exc)
            return
        if stored is None:
            self._problem(404, "No such operation", f"There is no operation {operation_id!r}.", session)
            return
        body = pages.operation_page(
            stored.record,
            ownership_of(stored, now),
            events,
            story,
            problem,
            decisions,
            follow,
            now,
            chrome=self._chrome(session, open_count, pending),
        )
        self._send(200, body)

    def _decisions(self, session: Session) -> None:
        try:
            with self.console.store("none") as store:
                everything = store.decisions()
                pending = _pending_approvals(store)
        except (HomeError, StoreError) as exc:
            self._unreadable(session, exc)
            return
        open_ones = [d for d in everything if d.status == "open"]
        done = [d for d in everything if d.status != "open"]
        done.sort(key=lambda d: d.decided_at.timestamp() if d.decided_at else 0.0, reverse=True)
        body = pages.decisions_page(
            open_ones,
            done[:RECENT_DECISIONS],
            by=session.by,
            chrome=self._chrome(session, pending_approvals=pending),
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
            chrome=self._chrome(session, open_count, pending),
        )
        self._send(200, body)

    def _approvals(self, session: Session) -> None:
        try:
            with self.console.store("none") as store:
                everything = store.grants()
                open_count = len(store.decisions(open_only=True))
        except (HomeError, StoreError) as exc:
            self._unreadable(session, exc)
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
            by=session.by,
            chrome=self._chrome(session, open_count),
        )
        self._send(200, body)
