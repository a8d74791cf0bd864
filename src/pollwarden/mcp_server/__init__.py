"""`pollwarden mcp`: an agent waits on external jobs through tools, never through a loop or a credential.

The server is the credential broker of R47: contracts in `--contracts DIR` bind each secret to its status URL
origin, the agent names a contract only by its `name`, and the server makes every provider call itself, through
the same engine step as `pollwarden watch` (same core, same store, same audit). No tool argument can choose a
host, a path outside the status template, a header or a credential.

The package, by concept: `broker` (the session's state, the store, one dispatch), `tools` (the tools as functions
over the broker), `submit` (submit_job), `cancel` (request_cancel), `tasks` (MCP tasks: task-augmented calls the
server waits on, `tasks/get`, `tasks/result`, `tasks/cancel`), `gates` (the fixed call order and the approval
gates), `views` (what an agent reads), `reporting` (progress notifications and heartbeats), `scrub` (every reply,
error and log line scrubbed of secrets), `contracts` (the served directory), `server` (the SDK wiring and `serve`),
`wire` (every stdin line checked; a bad one answered, never dropped). Every reply and error passes through one
`Scrubber`, the project's (`core.scrub`)."""

from ..core.scrub import Scrubber
from .base import MAX_WAIT_SECONDS, CallContext, ToolFailure
from .broker import Broker
from .contracts import load_contracts
from .scrub import ScrubLogs, secret_values
from .server import build_server, serve

__all__ = [
    "MAX_WAIT_SECONDS",
    "Broker",
    "CallContext",
    "ScrubLogs",
    "Scrubber",
    "ToolFailure",
    "build_server",
    "load_contracts",
    "secret_values",
    "serve",
]
