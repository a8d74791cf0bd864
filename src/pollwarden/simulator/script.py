"""The script engine: how a job's steps answer its status requests, and how a script is rendered and read.

Scripting model: a job is a list of `Step`s. Each status request is answered by the current
step; a step ends after it answered `times` requests, or, when it has `seconds`, once that much
(scaled) time has passed since it became active. The last step answers forever.

Placeholders: body strings (at any depth of a JSON body) and header values are rendered at
answer time by `substitute`, because a static script cannot know the job id or "now":

- `{job_id}`          the job's id
- `{rfc3339+N}`       now + N seconds as RFC 3339 UTC (`{rfc3339-N}` for the past)
- `{http_date+N}`     now + N seconds as an RFC 9110 HTTP-date (`{http_date-N}` too)

N is scaled by `time_scale` like every scenario time except `delay`.
"""

from __future__ import annotations

import base64
import binascii
import email.utils
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

_PLACEHOLDER = re.compile(r"\{(job_id|(rfc3339|http_date)([+-])(\d+(?:\.\d+)?))\}")


@dataclass(frozen=True)
class Step:
    """One phase of a scripted job; see this module's docstring for how steps advance."""

    status: int = 200
    body: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)
    times: int = 1
    seconds: float | None = None
    delay: float = 0.0
    close: bool = False

    def __post_init__(self) -> None:
        # A script error should fail where the script is written, not as a hung test later.
        if not 100 <= self.status <= 599:
            raise ValueError(f"status must be 100..599, got {self.status}")
        if self.times < 1:
            raise ValueError(f"times must be at least 1, got {self.times}")
        if self.seconds is not None and (math.isnan(self.seconds) or self.seconds < 0):
            raise ValueError(f"seconds must be >= 0, got {self.seconds}")
        if math.isnan(self.delay) or self.delay < 0:
            raise ValueError(f"delay must be >= 0, got {self.delay}")


def substitute(text: str, *, job_id: str, now: float, time_scale: float = 1.0) -> str:
    """Render the placeholders in one string; unknown `{...}` text is left alone on purpose."""

    def one(match: re.Match[str]) -> str:
        if match.group(1) == "job_id":
            return job_id
        offset = float(match.group(4)) * time_scale
        when = now + offset if match.group(3) == "+" else now - offset
        if match.group(2) == "rfc3339":
            return datetime.fromtimestamp(when, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        # HTTP-dates have whole seconds; round up so "+N" is never earlier than asked.
        return email.utils.formatdate(math.ceil(when), usegmt=True)

    return _PLACEHOLDER.sub(one, text)


def render(value: Any, *, job_id: str, now: float, time_scale: float) -> Any:
    if isinstance(value, str):
        return substitute(value, job_id=job_id, now=now, time_scale=time_scale)
    if isinstance(value, Mapping):
        return {k: render(v, job_id=job_id, now=now, time_scale=time_scale) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [render(v, job_id=job_id, now=now, time_scale=time_scale) for v in value]
    return value


class Job:
    """Progress through a script; every method is called with the simulator lock held."""

    def __init__(self, steps: Sequence[Step], now: float) -> None:
        if not steps:
            raise ValueError("a job needs at least one step")
        self.steps = tuple(steps)
        self.index = 0
        self.answered = 0
        self.active_since = now
        self.cancelled = False

    def take(self, now: float, time_scale: float) -> Step:
        """The step answering a request arriving at `now`, advancing the script past it."""
        last = len(self.steps) - 1
        while self.index < last:
            current = self.steps[self.index]
            if current.seconds is None:
                break
            ends = self.active_since + current.seconds * time_scale
            if now < ends:
                break
            self.index += 1
            self.answered = 0
            self.active_since = ends
        step = self.steps[self.index]
        if step.seconds is None and self.index < last:
            self.answered += 1
            if self.answered >= step.times:
                self.index += 1
                self.answered = 0
                self.active_since = now
        return step


def parse_script(raw: bytes) -> tuple[str, list[Step]]:
    """Read a `/_sim/jobs` body; bytes bodies travel as `body_base64` because JSON cannot carry them."""
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise ValueError("body is not JSON") from exc
    if not isinstance(data, dict):
        raise ValueError("expected an object with job_id and steps")
    job_id, raw_steps = data.get("job_id"), data.get("steps")
    if not isinstance(job_id, str) or not job_id or "/" in job_id:
        raise ValueError("job_id must be a non-empty string without '/'")
    if not isinstance(raw_steps, list) or not raw_steps:
        raise ValueError("steps must be a non-empty list")
    steps: list[Step] = []
    allowed = {"status", "body", "body_base64", "headers", "times", "seconds", "delay", "close"}
    for i, item in enumerate(raw_steps):
        if not isinstance(item, dict) or not set(item) <= allowed:
            raise ValueError(f"step {i}: expected an object with keys from {sorted(allowed)}")
        headers = item.get("headers", {})
        if not isinstance(headers, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
        ):
            raise ValueError(f"step {i}: headers must map strings to strings")
        body: Any = item.get("body")
        if "body_base64" in item:
            try:
                body = base64.b64decode(item["body_base64"], validate=True)
            except (binascii.Error, TypeError) as exc:
                raise ValueError(f"step {i}: body_base64 is not base64") from exc
        status, times, seconds, delay, close = (
            item.get("status", 200),
            item.get("times", 1),
            item.get("seconds"),
            item.get("delay", 0.0),
            item.get("close", False),
        )
        if type(status) is not int or type(times) is not int or type(close) is not bool:
            raise ValueError(f"step {i}: status and times must be integers, close a boolean")
        if seconds is not None and not isinstance(seconds, int | float):
            raise ValueError(f"step {i}: seconds must be a number or null")
        if not isinstance(delay, int | float) or isinstance(delay, bool):
            raise ValueError(f"step {i}: delay must be a number")
        steps.append(Step(status, body, headers, times, seconds, float(delay), close))
    return job_id, steps
