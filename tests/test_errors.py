"""One error tree: every exception pollwarden raises for a person derives from PollwardenError, and one map
turns any exception into the exit code the table of docs/watching.md documents."""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import pytest

import pollwarden
from pollwarden import errors
from pollwarden.actions.provider import ActionError, ActionRefused
from pollwarden.api import WatchError
from pollwarden.audit import AuditError
from pollwarden.audit.crypto import AuditDecryptError, AuditKeyError
from pollwarden.audit.export import ExportFormatError
from pollwarden.cli.common import UsageError
from pollwarden.core.contract.parse import ContractError
from pollwarden.core.durations import DurationError
from pollwarden.core.escalation import DecisionError
from pollwarden.errors import PollwardenError, exit_code_for
from pollwarden.home.operating import HomeError
from pollwarden.mcp_server import ToolFailure
from pollwarden.report.why import WhyError
from pollwarden.store.base import DecisionTaken, OperationExists, StoreError
from pollwarden.transport.http import CredentialError

DOCS = Path(__file__).resolve().parent.parent / "docs"
"""Where the exit codes are documented: the table in watching.md, `audit verify`'s 5 in audit.md."""


def _project_exceptions() -> set[type[BaseException]]:
    """Every exception class defined in any pollwarden module (imported, so subclasses are registered)."""
    for info in pkgutil.walk_packages(pollwarden.__path__, "pollwarden."):
        if info.name != "pollwarden.__main__":  # running it would start the CLI
            importlib.import_module(info.name)
    found: set[type[BaseException]] = set()
    todo: list[type[BaseException]] = [BaseException]
    while todo:
        cls = todo.pop()
        for sub in cls.__subclasses__():
            todo.append(sub)
            if sub.__module__.startswith("pollwarden.") or sub.__module__ == "pollwarden":
                found.add(sub)
    return found


def test_every_project_exception_is_in_the_tree() -> None:
    stray = sorted(
        f"{cls.__module__}.{cls.__qualname__}"
        for cls in _project_exceptions()
        # a BaseException that is not an Exception is a signal to stop (Interrupted), not an error to act on
        if issubclass(cls, Exception) and not issubclass(cls, PollwardenError)
    )
    assert stray == []


def test_the_named_errors_keep_their_names_modules_and_old_bases() -> None:
    # Callers that catch ValueError (argument parsing, the MCP argument checks) must keep catching these.
    for cls in (ContractError, DurationError, DecisionError, WhyError, WatchError):
        assert issubclass(cls, PollwardenError) and issubclass(cls, ValueError), cls
    assert ContractError.__module__ == "pollwarden.core.contract.parse"
    assert DurationError.__module__ == "pollwarden.core.durations"
    assert issubclass(AuditKeyError, AuditError) and issubclass(ExportFormatError, AuditError)
    assert issubclass(OperationExists, StoreError) and issubclass(DecisionTaken, StoreError)
    assert issubclass(ActionRefused, ActionError)


def _documented_exit_codes() -> set[int]:
    text = "\n".join((DOCS / page).read_text(encoding="utf-8") for page in ("watching.md", "audit.md"))
    codes = {int(m.group(1)) for m in re.finditer(r"^\| (\d+) \|", text, re.MULTILINE)}
    if "exit 0 intact, 5 tampered" in text:
        codes.add(5)
    return codes


def test_every_exit_code_is_one_the_docs_document() -> None:
    documented = _documented_exit_codes()
    assert {0, 1, 2, 3, 4, 5} <= documented
    for cls in _project_exceptions():
        if issubclass(cls, PollwardenError):
            assert cls.exit_code in documented - {0, 1}, cls  # an error is never success nor "internal"


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (UsageError("--deadline: bad"), 2),
        (ContractError("exports.toml: [states]"), 2),
        (DurationError("5x"), 2),
        (CredentialError("EXPORTS_TOKEN is not set"), 2),
        (StoreError("locked"), 2),
        (OperationExists("op"), 2),
        (DecisionTaken("d1"), 2),
        (HomeError("no operation"), 2),
        (DecisionError("expired"), 2),
        (WhyError("no decision at seq 9"), 2),
        (WatchError("would widen"), 2),
        (AuditError("key missing"), 2),
        (AuditKeyError("mode 0644"), 2),
        (ExportFormatError("line 3"), 2),
        (ActionRefused("no [submit] table"), 2),
        (ToolFailure("unknown_contract", "no such contract"), 2),
        # tried and did not succeed: a person decides what happens next, as with an escalated stop
        (ActionError("outcome unknown"), 4),
        # a record that does not authenticate is what `audit verify` reports as tampered
        (AuditDecryptError("record 4"), 5),
    ],
)
def test_one_map_from_error_to_exit_code(exc: BaseException, code: int) -> None:
    assert exit_code_for(exc) == code


def test_what_is_not_ours_is_internal_and_an_interrupt_is_130() -> None:
    assert exit_code_for(RuntimeError("bug")) == errors.EXIT_INTERNAL == 1
    assert exit_code_for(KeyError("x")) == 1
    assert exit_code_for(KeyboardInterrupt()) == errors.EXIT_INTERRUPTED == 130
    assert errors.EXIT_TERMINATED == 143  # for the SIGTERM handler; a signal is not an exception here


def test_the_tree_module_is_a_leaf() -> None:
    # core/ derives its errors from it, so it must not pull anything in behind core's back.
    source = Path(errors.__file__).read_text(encoding="utf-8")
    imports = re.findall(r"^\s*(?:from|import)\s+(\S+)", source, re.MULTILINE)
    assert set(imports) <= {"__future__", "typing"}, imports
