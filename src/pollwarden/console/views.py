"""The console's pages as views: read the store (opened per request, never holding a lease), render, send."""

from __future__ import annotations

from datetime import datetime
from urllib.parse import parse_qs

from ..audit import AuditError
from ..clock import utcnow
from ..core.digits import whole_number
from ..core.learnt import Summary
from ..core.record import OperationRecord
from ..engine.learning import summaries
from ..home.operating import HomeError, open_store, verify_home
from ..report.followup import follow_ups
from ..report.ownership import lease_ttl_of, ownership_of, urgency_of
from ..report.story import story_lines
from ..shown import has_control
from ..store.base import Event, Store, StoreError, UnreadableRecord
from ..store.roles import Grants, Operations, Pages
from . import pages
from .auth import AuthHandler
from .sessions import Session

RECENT_DECISIONS = 10
RECENT_APPROVALS = 10


def _open_count(store: Pages) -> int:
    """Open decisions, counted by the database (a page never reads 2,000 requests to count them)."""
    return sum(group.count for group in store.decision_groups())


def _pending_approvals(store: Grants) -> int:
    return len(store.grants(status="pending"))


def _record_of(store: Operations, operation_id: str) -> OperationRecord | None:
    stored = store.get(operation_id)
    return None if stored is None else stored.record


def list_reads(store: Store, view: pages.ListView) -> tuple[datetime, pages.ListData, int, int]:
    """Everything `/` reads for one view: the time, the page of operations with its counts and the fleet's, the
    open decisions and the pending approvals (bench/console.py times these reads statement by statement)."""
    now = store.db_now()
    found = store.operations_page(view.query, urgency_of(store, now))
    data = pages.ListData(
        rows=[pages.Row(s.record, ownership_of(s, now), found.awaiting.get(s.record.operation_id)) for s in found.rows],
        matched=found.matched,
        counts=found.counts,
        fleet=store.fleet_counts(now, lease_ttl_of, pressure=False),
        contracts=store.contract_names(),
        unreadable=found.unreadable,
    )
    return now, data, _open_count(store), _pending_approvals(store)


class PageViews(AuthHandler):
    def _unreadable(self, session: Session, exc: Exception) -> None:
        self._problem(500, "Cannot read the state", str(exc), session)

    def _operations(self, session: Session, query: str = "") -> None:
        view = pages.ListView.parse(parse_qs(query))
        try:
            with self.console.store("none") as store:
                now, data, open_count, pending = list_reads(store, view)
        except (HomeError, StoreError) as exc:
            self._unreadable(session, exc)
            return
        chrome = self._chrome(session, open_count, pending)
        self._send(200, pages.operations_page(data, view, now, chrome=chrome))

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
                open_count = _open_count(store)
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
        view = pages.OperationView(stored.record, ownership_of(stored, now), events, story, problem, decisions, follow)
        body = pages.operation_page(
            view,
            now,
            chrome=self._chrome(session, open_count, pending),
        )
        self._send(200, body)

    def _decisions(self, session: Session, query: str = "") -> None:
        params = parse_qs(query)
        page_text = (params.get("page") or ["1"])[0]
        page = max(1, whole_number(page_text, 6) or 1)
        try:
            with self.console.store("none") as store:
                groups = store.decision_groups()
                wanted = (params.get("reason") or [""])[0]
                reason = wanted if wanted in {g.reason for g in groups} else None
                offset = (page - 1) * pages.DECISIONS_PAGE
                cards = store.open_decisions(reason, offset=offset, limit=pages.DECISIONS_PAGE)
                one = (params.get("decision") or [""])[0]
                if one and not has_control(
                    one
                ):  # a link to one decision (from the list, a history): its card alone, if still open
                    found = store.get_decision(one[:200])
                    cards = [found] if found is not None and found.status == "open" else []
                    reason, page = (found.request.why, 1) if found is not None else (reason, 1)
                recent = store.recent_decisions(RECENT_DECISIONS)
                pending = _pending_approvals(store)
        except (HomeError, StoreError) as exc:
            self._unreadable(session, exc)
            return
        data = pages.DecisionsData(groups, reason, page, cards, recent)
        body = pages.decisions_page(data, by=session.by, chrome=self._chrome(session, pending_approvals=pending))
        self._send(200, body)

    def _audit(self, session: Session) -> None:
        check = None
        problem = None
        open_count = 0
        pending: int | None = None
        try:
            with self.console.store("none") as store:
                open_count = _open_count(store)
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

    def _schedules(self, session: Session) -> None:
        """Each contract's learnt distribution (`engine.learning.summaries`), as `pollwarden schedules` shows it."""
        found: list[Summary] = []
        problem = None
        open_count = 0
        pending: int | None = None
        try:
            with self.console.store("none") as store:
                found = summaries(store)
                open_count = _open_count(store)
                pending = _pending_approvals(store)
        except (HomeError, StoreError) as exc:
            problem = str(exc)
        self._send(200, pages.schedules_page(found, problem, chrome=self._chrome(session, open_count, pending)))

    def _approvals(self, session: Session) -> None:
        try:
            with self.console.store("none") as store:
                everything = store.grants()
                open_count = _open_count(store)
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
