"""The contract the benchmarks poll, written once: a job that is queued or running, then succeeded or failed, with
its state (and, by default, a result URL) in the body. Each benchmark names only what it changes: the name, the
status URL, the states it pends in, its schedule and its limits."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

Value = str | int | float | bool


def _toml(value: Value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value)  # a str as a TOML basic string, a number as itself


def _table(name: str, values: Mapping[str, Value]) -> list[str]:
    return [f"[{name}]", *(f"{key} = {_toml(value)}" for key, value in values.items())] if values else []


def contract_text(
    name: str = "exports",
    *,
    status_url: str = "https://provider.example/jobs/{job_id}",
    pending: Sequence[str] = ("queued", "running"),
    result: bool = True,
    top: Mapping[str, Value] | None = None,
    schedule: Mapping[str, Value] | None = None,
    limits: Mapping[str, Value] | None = None,
) -> str:
    """The benchmark contract's TOML: `top` holds top-level keys beside the name and the status URL (`timeout`)."""
    lines = [
        f"name = {_toml(name)}",
        f"status_url = {_toml(status_url)}",
        *(f"{key} = {_toml(value)}" for key, value in (top or {}).items()),
        "[states]",
        f"pending = {json.dumps(list(pending))}",
        'success = ["succeeded"]',
        'failure = ["failed"]',
        "[fields]",
        'state = "state"',
        *(['result = "result_url"'] if result else []),
        *_table("schedule", schedule or {}),
        *_table("limits", limits or {}),
    ]
    return "\n".join(lines) + "\n"
