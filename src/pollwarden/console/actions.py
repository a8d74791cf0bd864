"""The forms that change something: a decision's option, an approval's answer.

Each is applied by the one function the CLI uses too (`operating.decide`, `operating.answer_grant`), names the
person who made it, and ends in a redirect to its page with a flash that says what happened.
"""

from __future__ import annotations

from collections.abc import Callable

from ..actions.decisions import MAX_DECIDER, MAX_NOTE, person_problem
from ..audit import AuditError
from ..core.digits import whole_number
from ..core.escalation import DecisionError, OptionKind
from ..home.closing import BULK_REASONS, closable, close_ended
from ..home.operating import GRANT_ANSWERS, HomeError, answer_grant, decide, grant_step, watch_command
from ..shown import shown
from ..store.base import StoreError
from . import pages
from .auth import AuthHandler
from .pages import Flash
from .sessions import Session

Back = Callable[[str, str], None]
"""Queue a flash (kind, text) and redirect to the form's page."""


class FormActions(AuthHandler):
    def _back(self, session: Session, page: str) -> Back:
        def back(kind: str, text: str) -> None:
            session.flashes.append(Flash(kind, text))
            self._redirect(page)

        return back

    def _operator(self, form: dict[str, str], back: Back, session: Session) -> tuple[str, str | None] | None:
        """The checked 'Decided by' name and note of a form; None after an error flash was queued. In a session a
        one-time link opened, the name is that link's user, and a form naming anyone else is refused."""
        by = form.get("by", "").strip()
        if session.bound_user is not None:
            if by not in ("", session.bound_user):
                back("error", f"You are logged in as {session.bound_user}; 'Decided by' must be you. Nothing changed.")
                return None
            by = session.bound_user
        note = form.get("note", "").strip() or None
        problem = person_problem(by, note)
        if problem is None:
            return by, note
        if not by:
            back(
                "error", "Type your name in 'Decided by': every decision names the person who made it. Nothing changed."
            )
        elif problem[0] == "by":
            back("error", f"'Decided by' must be at most {MAX_DECIDER} characters of plain text. Nothing changed.")
        else:
            back("error", f"The note must be at most {MAX_NOTE} characters of plain text. Nothing changed.")
        return None

    def _decide(self, session: Session, decision_id: str, form: dict[str, str]) -> None:
        back = self._back(session, "/decisions")
        operator = self._operator(form, back, session)
        if operator is None:
            return
        by, note = operator
        choice = form.get("option", "").strip()
        refuse = choice == "refuse"
        option: int | None = None
        if not refuse:
            option = whole_number(choice, 4)
            if option is None:
                back("error", "Choose one of the options (or refuse). Nothing changed.")
                return
        session.by = by
        if not refuse and form.get("confirm") != "yes" and self._asks_confirmation(session, decision_id, option, note):
            return
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

    def _asks_confirmation(self, session: Session, decision_id: str, option: int | None, note: str | None) -> bool:
        """A cancel at the provider cannot be taken back: the first click shows what it sends and asks again (the
        answer posts `confirm=yes`). True when that page was sent instead of deciding."""
        try:
            with self.console.store("none") as store:
                stored = store.get_decision(decision_id)
        except (HomeError, StoreError):
            return False  # `decide` reports the problem as it always does
        if stored is None or stored.status != "open" or option is None:
            return False
        chosen = next((o for o in stored.request.options if o.number == option), None)
        if chosen is None or chosen.kind is not OptionKind.CANCEL:
            return False
        self._send(200, pages.confirm_cancel_page(stored, option, note, by=session.by, chrome=self._chrome(session)))
        return True

    def _close_ended(self, session: Session, form: dict[str, str]) -> None:
        """The console's bulk close: the first post shows what would be closed, the second (`confirm=yes`, with the
        person's name) closes each by `closing.close_ended`, as `pollwarden decisions close` does."""
        back = self._back(session, "/decisions")
        reason = form.get("reason", "").strip()
        if reason not in BULK_REASONS:
            back("error", "Only decisions about jobs that ended at the provider close in bulk. Nothing changed.")
            return
        if form.get("confirm") != "yes":
            try:
                with self.console.store("none") as store:
                    found = closable(store, reason)
            except (HomeError, StoreError) as exc:
                back("error", f"Nothing was closed: {exc}")
                return
            if not found:
                back("ok", f"No open {reason} decision is left to close.")
                return
            self._send(200, pages.confirm_close_page(reason, found, by=session.by, chrome=self._chrome(session)))
            return
        operator = self._operator(form, back, session)
        if operator is None:
            return
        by, note = operator
        session.by = by
        try:
            with self.console.store("write") as store:
                done = close_ended(store, closable(store, reason), by=by, note=note)
        except (HomeError, StoreError, AuditError) as exc:
            back("error", f"Nothing more was closed: {exc}")
            return
        closed = sum(1 for c in done if c.closed)
        self.console.log(f"{self.client_address[0]} bulk close {reason} by {by!r}: {closed} of {len(done)}")
        left = [c for c in done if not c.closed]
        if left:
            back(
                "error", f"Closed {closed} of {len(done)} {reason} decisions; {left[0].decision_id}: {left[0].message}"
            )
        else:
            back("ok", f"Closed {closed} {reason} decision{'s' if closed != 1 else ''}; each is in the audit log.")

    def _answer(self, session: Session, grant_id: str, form: dict[str, str]) -> None:
        """Approve, refuse or revoke an agent's approval request: `operating.answer_grant`, as the CLI does."""
        back = self._back(session, "/approvals")
        operator = self._operator(form, back, session)
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
                answered = answer_grant(store, grant_id, kind=kind, step=step, by=by, note=note)
        except (HomeError, StoreError, AuditError) as exc:
            self.console.log(
                f"{self.client_address[0]} approval {shown(grant_id)} {answer} by {by!r} refused: {shown(exc)}"
            )
            back("error", str(exc))
            return
        self.console.log(f"{self.client_address[0]} approval {shown(grant_id)} by {by!r}: {answered.status}")
        back("ok", answered.message)
