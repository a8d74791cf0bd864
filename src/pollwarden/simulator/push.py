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

from ..core.push_signature import standard_key, standard_signature
from .script import Step

EVENT_TYPE = "job.ended"


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
        body = json.dumps({"type": EVENT_TYPE, "data": {"id": job_id}}).encode()
        delivery, stamp = "msg_" + secrets.token_hex(12), int(time.time())
        key = standard_key(self.secret)
        assert key is not None
        headers = {
            "webhook-id": delivery,
            "webhook-timestamp": str(stamp),
            "webhook-signature": standard_signature(key, delivery, stamp, body),
            "Content-Type": "application/json",
        }
        request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
        status = 0
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                status = int(answer.status)
        except urllib.error.HTTPError as exc:
            status = int(exc.code)
        except OSError:
            status = 0
        with self._lock:
            self.sent[job_id] = status

    def stop(self) -> None:
        with self._lock:
            timers, self._timers = self._timers, []
        for timer in timers:
            timer.cancel()
        for timer in timers:
            with contextlib.suppress(RuntimeError):
                timer.join()
