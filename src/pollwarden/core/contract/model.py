"""The provider contract's model: the frozen tables a contract file is read into (`contract.py` reads it).

A contract fixes the meaning of every poll (R3): its fingerprint is part of each operation's record.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import timedelta
from functools import cached_property
from urllib.parse import quote, urlsplit

from ..reasons import Category, Jitter
from .auth import FRAMING_HEADERS, Auth
from .push import Push
from .reader import quote_segment
from .result import ResultSpec
from .signals import RateLimitSignal
from .vars import text_digest

MAX_BODY_BYTES_DEFAULT = 1_048_576
MAX_BODY_BYTES_LIMIT = 256 * 1_048_576
"""The largest status answer a contract may accept (`max_body_bytes`): a finished transcript carries every word
with its timings in the status answer itself (AssemblyAI), tens of MB for hours of audio. The default stays 1 MiB,
and the body is held in memory while it is read, so only a contract that needs more says so."""


@dataclass(frozen=True)
class StateTable:
    pending: tuple[str, ...]
    success: tuple[str, ...]
    failure: tuple[str, ...]
    cancelled: tuple[str, ...] = ()
    expired: tuple[str, ...] = ()
    needs_person: tuple[str, ...] = ()
    """The job waits for a person at the provider (GitHub's `action_required`): polling cannot move it on."""

    def category(self, value: str) -> Category:
        """Exact match only: `Running` is not `running`, and a new value is unknown (R2)."""
        for category, values in self._by_category():
            if value in values:
                return category
        return Category.UNKNOWN

    def _by_category(self) -> tuple[tuple[Category, tuple[str, ...]], ...]:
        return (
            (Category.PENDING, self.pending),
            (Category.SUCCESS, self.success),
            (Category.FAILURE, self.failure),
            (Category.CANCELLED, self.cancelled),
            (Category.EXPIRED, self.expired),
            (Category.NEEDS_PERSON, self.needs_person),
        )

    def terminal(self) -> tuple[str, ...]:
        return self.success + self.failure + self.cancelled + self.expired

    def identity(self) -> dict[str, list[str]]:
        """For the fingerprint: a category a contract does not use is left out, so older contracts keep theirs."""
        listed = {c.value: list(v) for c, v in self._by_category()}
        if not self.needs_person:
            del listed[Category.NEEDS_PERSON.value]
        return listed


@dataclass(frozen=True)
class Fields:
    state: str
    result: str | None = None
    error: str | None = None
    expires_at: str | None = None
    poll_after_seconds: str | None = None
    next_check_at: str | None = None
    counts: str | None = None
    """What part of the job the result covers, as the provider counts it (`request_counts`): an object whose number
    members are kept with the outcome, read on every answer that ends the waiting."""
    estimated_completion_at: str | None = None
    """When the provider says the job will end (issue 26): a pending job's next check is placed near it
    (`core.learnt_inputs`), never long before it nor long after."""

    def identity(self) -> dict[str, str | None]:
        """For the fingerprint: `counts` and the estimate only when used, so every older contract keeps its
        fingerprint."""
        listed = dict(self.__dict__)
        for optional in ("counts", "estimated_completion_at"):
            if listed[optional] is None:
                del listed[optional]
        return listed


@dataclass(frozen=True)
class Timestamps:
    """The form each time field is written in: RFC 3339, or Unix seconds or milliseconds (OpenAI's `expires_at`)."""

    expires_at: str = "rfc3339"
    next_check_at: str = "rfc3339"
    estimated_completion_at: str = "rfc3339"

    def identity(self) -> dict[str, str]:
        """For the fingerprint: the estimate's form only when not the default, so older contracts keep theirs."""
        listed = dict(self.__dict__)
        if self.estimated_completion_at == "rfc3339":
            del listed["estimated_completion_at"]
        return listed


@dataclass(frozen=True)
class Schedule:
    base_delay: timedelta = timedelta(seconds=5)
    max_delay: timedelta = timedelta(seconds=120)
    jitter: Jitter = Jitter.BOUNDED
    first_check: timedelta = timedelta(0)
    retry_after_on_success: bool = False
    """The provider sends Retry-After on a 2xx pending answer (Azure) and means it: it raises the next poll time."""
    learn: bool = True
    """Checks placed from the contract's history once enough of its operations have ended (`core.learnt`)."""
    lag_target: timedelta = timedelta(seconds=30)
    """How late, at the 95th percentile, a person accepts learning that a job ended: what a learnt plan keeps."""
    learn_key: str | None = None
    """A JMESPath naming a field of the submitted body or of the first answer (a model, an endpoint, a size class):
    samples are kept, and plans made, per value of it (`core.learnt_inputs.key_value`)."""


@dataclass(frozen=True)
class Limits:
    deadline: timedelta = timedelta(minutes=40)
    max_requests: int = 12
    max_transport_failures: int = 3
    max_rate_limited: int = 3


@dataclass(frozen=True)
class Escalation:
    """What a person is offered when waiting stops (R32): bounded, priced options, never "continue?"."""

    extend: timedelta = timedelta(minutes=15)
    extend_checks: int = 4
    pause: timedelta = timedelta(minutes=30)
    console_url: str | None = None
    webhook_url: str | None = None
    webhook_secret_env: str | None = None
    useful_for: timedelta | None = None


APPROVAL_MODES = ("none", "session", "per_call")
"""How a person authorises an agent's provider calls (R42, R48): not at all beyond the contract's limits, once per
agent session, or every single call."""


@dataclass(frozen=True)
class AgentLimits:
    """What an agent may ask for through the MCP server: less than these, never more (R40, R41).

    None means "the contract's [limits] value"; `Contract.agent_max_deadline` and `agent_max_requests` resolve it.
    """

    max_deadline: timedelta | None = None
    max_requests: int | None = None
    approval_timeout: timedelta = timedelta(minutes=2)
    max_operations: int = 20
    """How many operations one agent session may create under the contract (resumes are not counted): a
    session that respells jobs, or makes them up, runs out here rather than refilling its budget."""


@dataclass(frozen=True)
class JobIdentity:
    """What the provider reads alike, so admission stores, finds and sends one spelling of a job (`core.identity`).

    The defaults are today's meaning: a contract without these keys keeps its ids and its fingerprint."""

    query: tuple[str, ...] | None = None
    """`[status] identity_query`: the query parameters of a status URL that name the job (each required, once);
    any other parameter is dropped, neither part of the identity nor sent. None: every parameter is kept."""
    path_case: str = "sensitive"
    """`[status] path_case = "insensitive"`: the provider reads paths (and query parameter names) without regard
    to ASCII case (Azure's), so they are folded to lower case."""
    id_type: str = "string"
    """`[fields] job_id_type = "integer"`: the provider's ids are whole numbers (`042`, `+42`, `42.0` are 42)."""

    def identity(self) -> dict[str, object] | None:
        """For the fingerprint (what is stored and sent changes with these); None when all are the defaults."""
        if self == JobIdentity():
            return None
        return {"query": None if self.query is None else list(self.query), "path_case": self.path_case,
                "id_type": self.id_type}  # fmt: skip


@dataclass(frozen=True)
class Endpoint:
    """A documented provider action (cancel): without one, the option is never offered."""

    url: str
    method: str = "POST"

    def url_for(self, job_id: str) -> str:
        return fill_job(self.url, job_id)


@dataclass(frozen=True)
class Submit:
    url: str
    method: str = "POST"
    idempotency_header: str | None = None
    job_id: str = "job_id"
    status_location: str | None = None
    """Where the 202 names the status resource: "header:Location", "header:Operation-Location" or "body:PATH"."""
    encoding: str = "json"
    """How the body file is sent: "json" as it is, "form" (a JSON object of scalars) as x-www-form-urlencoded."""
    idempotency_field: str | None = None
    """The body field the durable idempotency token is placed in (as `idempotency_header` places it in a header)."""

    @property
    def job_id_header(self) -> str | None:
        """`job_id = "header:Location"`: the job id is the last path segment of that header's URL."""
        return self.job_id.partition(":")[2] if self.job_id.startswith("header:") else None


JOB_PATH = "{job_id:path}"


def job_path_problem(job_id: str) -> str | None:
    """Why this id cannot fill `{job_id:path}`, or None: its `/` are kept, so nothing else may steer the path."""
    if job_id.startswith("/"):
        return "starts with '/'; give the id relative to the contract's status URL"
    if "?" in job_id or "#" in job_id:
        return "holds '?' or '#'; a path job id may not add a query or a fragment"
    for segment in job_id.split("/"):
        if segment in {"", ".", ".."}:
            return "has an empty, '.' or '..' path segment"
    return None


def _quote_job_path(job_id: str) -> str:
    if (problem := job_path_problem(job_id)) is not None:
        # Admission refuses such an id on every interface; this guard keeps a dot segment off the wire regardless.
        raise ValueError(f"job id {problem}")
    return "/".join(quote(segment, safe="") for segment in job_id.split("/"))


def fill_job(template: str, job_id: str) -> str:
    """`{job_id}` quoted completely, `{job_id:path}` with its slashes kept and its dot segments refused."""
    if JOB_PATH in template:
        return template.replace(JOB_PATH, _quote_job_path(job_id))
    return template.replace("{job_id}", quote_segment(job_id))


@dataclass(frozen=True)
class StatusRequest:
    """How the status is asked for: GET by default, or a POST with a JSON body template (AWS Textract)."""

    method: str = "GET"
    body: str | None = None
    content_type: str = "application/json"

    def body_for(self, job_id: str) -> bytes | None:
        """`{job_id}` becomes a JSON string literal, so no id can change the body's structure."""
        if self.body is None:
            return None
        return self.body.replace("{job_id}", json.dumps(job_id)).encode("utf-8")


def _poll_header(value: str) -> bool:
    return "{reservation}" in value or "{lease}" in value


FORBIDDEN_HEADERS = frozenset({"authorization", *FRAMING_HEADERS})
"""Static headers may not set these: the credential travels only through [auth], framing only through the client."""


@dataclass(frozen=True)
class Contract:
    name: str
    status_url: str
    states: StateTable
    fields: Fields
    timestamps: Timestamps = field(default_factory=Timestamps)
    timeout: timedelta = timedelta(seconds=10)
    safe_status: bool = True
    auth: Auth | None = None
    schedule: Schedule = field(default_factory=Schedule)
    limits: Limits = field(default_factory=Limits)
    not_found_grace: timedelta | None = None
    request_id_header: str = "X-Request-Id"
    max_body_bytes: int = MAX_BODY_BYTES_DEFAULT
    escalation: Escalation = field(default_factory=Escalation)
    cancel: Endpoint | None = None
    submit: Submit | None = None
    approval: str = "none"
    agent: AgentLimits = field(default_factory=AgentLimits)
    rate_limits: tuple[RateLimitSignal, ...] = ()
    result: ResultSpec = field(default_factory=ResultSpec)
    provider: str | None = None
    docs: str | None = None
    status: StatusRequest = field(default_factory=StatusRequest)
    headers: tuple[tuple[str, str], ...] = ()
    """The `[headers]` table: each sent on every request to the contract's origin, except one whose value holds
    `{reservation}` or `{lease}`, sent filled in with status requests only (`poll_headers`)."""
    status_url_handles: bool = False
    """A status URL the provider returned may be given instead of a job id (`watch --status-url`)."""
    job_identity: JobIdentity = field(default_factory=JobIdentity)
    allow_plain_http: bool = False
    """The credential may go over plain http to an origin that is not the loopback (refused otherwise)."""
    vars: tuple[tuple[str, str], ...] = ()
    """Every declared var's value, as substituted (part of the fingerprint when any is declared)."""
    ca_file: str | None = None
    """`[tls] ca_file`: the CA bundle that verifies the contract's origin over https instead of the system's store."""
    push: Push | None = None
    """`[push]`: the provider's signed webhook that makes an operation due now (not in the fingerprint: it changes
    when a poll happens, never what a poll means)."""
    source_text: str = field(default="", compare=False, repr=False)

    @property
    def agent_max_deadline(self) -> timedelta:
        return self.agent.max_deadline if self.agent.max_deadline is not None else self.limits.deadline

    @property
    def agent_max_requests(self) -> int:
        return self.agent.max_requests if self.agent.max_requests is not None else self.limits.max_requests

    @property
    def agent_max_operations(self) -> int:
        return self.agent.max_operations

    @cached_property
    def static_headers(self) -> tuple[tuple[str, str], ...]:
        """The `[headers]` sent as written, on every request to the contract's origin."""
        return tuple((name, value) for name, value in self.headers if not _poll_header(value))

    def poll_headers(self, *, reservation: int, lease: int) -> dict[str, str]:
        """The `[headers]` that name the status request (`{reservation}`, `{lease}`), filled in for one: pollwarden
        sends the provider nothing of its own unless the contract asks for it here."""
        filled = {"{reservation}": str(reservation), "{lease}": str(lease)}
        out: dict[str, str] = {}
        for name, value in self.headers:
            if _poll_header(value):
                for placeholder, text in filled.items():
                    value = value.replace(placeholder, text)
                out[name] = value
        return out

    def status_url_for(self, job_id: str) -> str:
        """`{job_id}` is quoted completely, so it can never add a path segment, query or host; `{job_id:path}`
        keeps the id's `/` and refuses (ValueError) an id that would make a dot or empty segment."""
        return fill_job(self.status_url, job_id)

    @property
    def job_is_path(self) -> bool:
        return JOB_PATH in self.status_url

    def console_url_for(self, job_id: str) -> str | None:
        url = self.escalation.console_url
        if url is None:
            return None
        try:
            return fill_job(url, job_id)
        except ValueError:
            return None

    @property
    def origin(self) -> str:
        parts = urlsplit(self.status_url)
        return f"{parts.scheme}://{parts.netloc}"

    @cached_property
    def digest(self) -> str:
        """This version's key in a store's contracts registry: the SHA-256 of the text stored with its operations
        (the merged TOML and every var's value), so any change of meaning or of where it sends is a new version."""
        return text_digest(self.source_text)

    def fingerprint(self) -> str:
        """What fixes the meaning of a poll: a resumed operation must be read with the same table."""
        return self._fingerprint

    @cached_property
    def _fingerprint(self) -> str:
        # Once per contract: a bulk enqueue admits thousands of operations under one (the contract is frozen).
        identity: dict[str, object] = {
            "name": self.name,
            "status_url": self.status_url,
            "states": self.states.identity(),
            "fields": self.fields.identity(),
            "account": self.account,
        }
        if self.timestamps != Timestamps():  # only when used, so every older contract keeps its fingerprint
            identity["timestamps"] = self.timestamps.identity()
        if self.rate_limits:
            identity["rate_limit"] = [signal.to_json() for signal in self.rate_limits]
        if (result := self.result.identity()) is not None:  # only when declared: old fingerprints stay the same
            identity["result"] = result
        # The part-8 keys join the identity only when used, so every older contract keeps its fingerprint.
        if self.vars:
            identity["vars"] = dict(self.vars)
        if self.status != StatusRequest():
            identity["status_request"] = self.status.__dict__
        if self.headers:
            identity["headers"] = dict(self.headers)
        if (job_identity := self.job_identity.identity()) is not None:  # issue 23's keys, only when used
            identity["job_identity"] = job_identity
        if self.allow_plain_http:  # issue 23: only when used, so every older contract keeps its fingerprint
            identity["allow_plain_http"] = True
        if self.ca_file is not None:  # issue 24's [tls], only when used: whom the poll trusts to answer it
            identity["tls"] = {"ca_file": self.ca_file}
        blob = json.dumps(identity, sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(blob).hexdigest()

    @property
    def account(self) -> str:
        """The credential context in words that contain no secret: which variable, sent how."""
        return "anonymous" if self.auth is None else self.auth.account
