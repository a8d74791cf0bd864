"""A real HTTP job provider on loopback whose job lifecycles are scripted step by step.

The demo, the end-to-end tests and the benchmarks need a provider that misbehaves on purpose
(503 with Retry-After, 429 storms, states outside the table, bodies that are not JSON, resets)
and that tells afterwards exactly which requests it saw. A mock inside the client would prove
nothing about the wire, so this is a real `ThreadingHTTPServer` speaking HTTP/1.1.

Three parts: `script` (a job's steps, their placeholders, and the `/_sim/jobs` body that scripts
one over HTTP), `scenarios` (the builtin jobs a job id names, and the contract that reads their
bodies) and `server` (the HTTP server, its request log, and `serve` for the CLI). docs/watching.md
shows how to script a job of your own.

The simulator never keeps an Authorization value or any header whose name suggests a
credential: recorded requests end up in test output and logs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_face

if TYPE_CHECKING:
    from .scenarios import SCENARIOS, contract_text, scenario_listing
    from .script import Step, substitute
    from .server import RecordedRequest, Simulator, serve

    # The conformance benchmark records each answer by overriding the server's own recording.
    from .server import _Answer as _Answer
    from .server import _Handler as _Handler

__all__ = [
    "SCENARIOS",
    "RecordedRequest",
    "Simulator",
    "Step",
    "contract_text",
    "scenario_listing",
    "serve",
    "substitute",
]

# Lazy (`pollwarden.lazy`): the CLI's parser lists the scenarios in `simulate --help` without loading the server.
__getattr__, __dir__ = lazy_face(
    __name__,
    {
        ".scenarios": "SCENARIOS contract_text scenario_listing",
        ".script": "Step substitute",
        ".server": "RecordedRequest Simulator serve _Answer _Handler",
    },
)
