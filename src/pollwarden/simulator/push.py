"""The simulated provider announcing each job's end with a signed push (issue 27): Standard Webhooks, as OpenAI
and Replicate sign theirs, posted to a receiver (`pollwarden hooks`) when a scripted job's timed steps run out.

Only jobs whose steps before the last all have `seconds` end at a known moment; the push goes out then, or is
lost on purpose (`lost`, a fraction), as a real provider's can be. The body names the job in `data.id` with the
type `job.ended`: a receiver's contract reads them with `job_id = "data.id"`.
"""

from __future__ import annotations

import contextlib
import json
import random
import secrets
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..core.push_signature import standard_headers, standard_key
from .script import Step

EVENT_TYPE = "job.ended"


def signed_push(
    secret: str, job_id: str, delivery_id: str, *, stamp: int | None = None, event: str = EVENT_TYPE
) -> tuple[dict[str, str], bytes]:
    """A push naming `job_id` in `data.id`, signed per Standard Webhooks at `stamp` (default now)."""
    body = json.dumps({"type": event, "data": {"id": job_id}}).encode()
    moment = int(time.time()) if stamp is None else stamp
    headers = standard_headers(secret, delivery_id, moment, body)
    return {**headers, "Content-Type": "application/json"}, body


def forged(signature: str) -> str:
    """A `v1,` signature with its first byte's characters changed: never the one it was (a test's forgery)."""
    scheme, _, value = signature.partition(",")
    return f"{scheme},{'B' if value[:1] == 'A' else 'A'}{value[1:]}"


@dataclass
class Pusher:
    url: str
    """Where each push is posted: the receiver's `/hooks/CONTRACT`."""
    secret: str
    """The `whsec_` secret the receiver verifies with."""
    lost: float = 0.0
    rng: random.Random = field(default_factory=random.Random)
    ended: dict[str, float] = field(default_factory=dict)
    """Each job's end, wall-clock seconds: what detection lag is measured from."""
    sent: dict[str, int] = field(default_factory=dict)
    """The receiver's answer to each push sent (a lost one is absent)."""
    answered_in: dict[str, float] = field(default_factory=dict)
    """Seconds from each push's sending to the receiver's answer."""
    _timers: list[threading.Timer] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        if standard_key(self.secret) is None:
            raise ValueError("the push secret must be a whsec_ base64 secret")
        if not 0.0 <= self.lost <= 1.0:
            raise ValueError(f"lost must be a fraction from 0 to 1, got {self.lost}")

    def schedule(self, job_id: str, steps: Sequence[Step], time_scale: float) -> None:
        """Push at the job's end, if its timed steps fix that moment."""
        if len(steps) < 2 or any(step.seconds is None for step in steps[:-1]):
            return
        after = sum(step.seconds or 0.0 for step in steps[:-1]) * time_scale
        with self._lock:
            self.ended[job_id] = time.time() + after
            timer = threading.Timer(after, self._push, args=(job_id,))
            timer.daemon = True
            self._timers.append(timer)
        timer.start()

    def _push(self, job_id: str) -> None:
        with self._lock:
            lost = self.rng.random() < self.lost
        if lost:
            return
        headers, body = signed_push(self.secret, job_id, "msg_" + secrets.token_hex(12))
        request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
        status, started = 0, time.monotonic()
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                status = int(answer.status)
        except urllib.error.HTTPError as exc:
            status = int(exc.code)
        except OSError:
            status = 0
        with self._lock:
            self.sent[job_id] = status
            self.answered_in[job_id] = time.monotonic() - started

    def stop(self) -> None:
        with self._lock:
            timers, self._timers = self._timers, []
        for timer in timers:
            timer.cancel()
        for timer in timers:
            with contextlib.suppress(RuntimeError):
                timer.join()
