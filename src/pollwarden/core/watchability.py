"""Whether a watch may start, as every interface asks it before anything is opened (issue 25), and its refusal,
which each interface says in its own words (`Refused.said`). The engine's preamble (`engine.preamble.ready`) adds
the credential between the two questions; the Python API asks them as a `Watch` is built, with the core alone."""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import PollwardenError
from .admission import Refuse, WatchRequest, check, watchable_problem


class Refused(PollwardenError, ValueError):
    """A watch that may not start as asked; nothing was created or sent. `refusal` is admission's (its fields named
    by each interface as it names them, `said`); None when the contract may not be watched at all or its
    credential is not there, and the message is the whole story."""

    def __init__(self, message: str, refusal: Refuse | None = None) -> None:
        super().__init__(message)
        self.refusal = refusal

    def message_for(self, names: Mapping[str, str]) -> str:
        """The refusal with each field as `names` calls it (a flag, a parameter)."""
        return str(self) if self.refusal is None else self.refusal.message_for(names)

    def said(self, names: Mapping[str, str], doing: str) -> str:
        """In an interface's words: admission's refusal as `cannot DOING: ...` with each field as `names` calls
        it; a contract that may not be watched, or a credential not there, as it is."""
        return self.message_for(names) if self.refusal is None else f"cannot {doing}: {self.message_for(names)}"


def watchable(request: WatchRequest) -> None:
    """Refused, in the contract's own words, when no operation of its contract may be polled (`safe_status`):
    asked first, so nothing else (a credential, a token command) is read for such a contract."""
    if (unwatchable := watchable_problem(request.contract)) is not None:
        raise Refused(unwatchable)


def checked(request: WatchRequest) -> WatchRequest:
    """The request, when admission's `check` passes (with the credential it carries); Refused otherwise."""
    watchable(request)
    if (refusal := check(request)) is not None:
        raise Refused(refusal.message, refusal)
    return request


__all__ = ["Refused", "checked", "watchable"]
