"""The provider contract: one TOML file that says what each status value means and how to wait.

Meaning is never guessed from a field name (R3): every state the provider may send is listed in a
category, and anything else is `unknown`. Loading is strict so that a typo in a key is an error at
start-up, not a silent default at 3 a.m.
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from functools import cached_property
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from . import expr
from .contract_auth import FRAMING_HEADERS, parse_auth
from .contract_auth import Auth as Auth
from .contract_reader import ContractError as ContractError
from .contract_reader import Reader, check_token, check_url, quote_segment
from .contract_result import ResultSpec, parse_result
from .contract_signals import RateLimitSignal, parse_rate_limits
from .contract_vars import (
    declared_vars,
    dump_toml,
    expand,
    merge_use,
    resolve_vars,
    shipped_text,
    unwrap,
    wrap,
)
from .durations import TIMESTAMP_FORMATS, DurationError
from .reasons import Category, Jitter

MAX_BODY_BYTES_DEFAULT = 1_048_576


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


@dataclass(frozen=True)
class Timestamps:
    """The form each time field is written in: RFC 3339, or Unix seconds or milliseconds (OpenAI's `expires_at`)."""

    expires_at: str = "rfc3339"
    next_check_at: str = "rfc3339"


@dataclass(frozen=True)
class Schedule:
    base_delay: timedelta = timedelta(seconds=5)
    max_delay: timedelta = timedelta(seconds=120)
    jitter: Jitter = Jitter.BOUNDED
    first_check: timedelta = timedelta(0)
    retry_after_on_success: bool = False
    """The provider sends Retry-After on a 2xx pending answer (Azure) and means it: it raises the next poll time."""


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
    """Static headers sent on every request to the contract's origin ([headers])."""
    status_url_handles: bool = False
    """A status URL the provider returned may be given instead of a job id (`watch --status-url`)."""
    vars: tuple[tuple[str, str], ...] = ()
    """Every declared var's value, as substituted (part of the fingerprint when any is declared)."""
    source_text: str = field(default="", compare=False, repr=False)

    @property
    def agent_max_deadline(self) -> timedelta:
        return self.agent.max_deadline if self.agent.max_deadline is not None else self.limits.deadline

    @property
    def agent_max_requests(self) -> int:
        return self.agent.max_requests if self.agent.max_requests is not None else self.limits.max_requests

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
            "fields": self.fields.__dict__,
            "account": self.account,
        }
        if self.timestamps != Timestamps():  # only when used, so every older contract keeps its fingerprint
            identity["timestamps"] = self.timestamps.__dict__
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
        blob = json.dumps(identity, sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(blob).hexdigest()

    @property
    def account(self) -> str:
        """The credential context in words that contain no secret: which variable, sent how."""
        return "anonymous" if self.auth is None else self.auth.account


def load_contract(path: Path, vars: Mapping[str, str] | None = None) -> Contract:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ContractError(f"contract file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ContractError(f"cannot read contract file {path}: {exc.__class__.__name__}") from None
    return parse_contract(text, source=str(path), vars=vars)


def _toml(text: str, source: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ContractError(f"{source}: not valid TOML: {exc}") from None
    except RecursionError:  # tomllib recurses once per nesting level
        raise ContractError(f"{source}: not valid TOML: it nests too deeply to be read") from None


def parse_contract(text: str, *, source: str = "<contract>", vars: Mapping[str, str] | None = None) -> Contract:
    """Plain TOML, a `use = "NAME"` file or a stored JSON envelope; `vars` are given values (`--var`)."""
    given = dict(vars or {})
    envelope = unwrap(text, source)
    toml_text = text
    if envelope is not None:
        toml_text, stored = envelope
        given = {**stored, **given}
    data = _toml(toml_text, source)
    used = "use" in data
    if used:
        if envelope is not None:
            raise ContractError(f"{source}: a stored contract envelope holds the complete contract, never `use`")
        name = data["use"]
        if not isinstance(name, str) or not name:
            raise ContractError(f'{source}: use: must name a shipped contract, e.g. use = "gitlab-pipeline"')
        shipped_source = f"shipped contract {name}"
        shipped = _toml(shipped_text(name, f"{source}: use"), shipped_source)
        data, file_vars = merge_use(data, source, shipped)
        given = {**file_vars, **given}
        toml_text = dump_toml(data)
    values = resolve_vars(declared_vars(data, source), given, source)
    reader = Reader(source, expand(data, values, source), "")
    try:
        contract = _build(reader)
    except DurationError as exc:  # pragma: no cover - Reader wraps these; kept as a guard
        raise ContractError(f"{source}: {exc}") from None
    stored_text = wrap(toml_text, values) if (values or used) else text
    return replace(contract, vars=tuple(sorted(values.items())), source_text=stored_text)


_TOP_KEYS = {
    "name",
    "status_url",
    "timeout",
    "safe_status",
    "auth",
    "states",
    "fields",
    "timestamps",
    "schedule",
    "limits",
    "not_found",
    "request_id_header",
    "max_body_bytes",
    "escalation",
    "cancel",
    "submit",
    "approval",
    "agent",
    "rate_limit",
    "result",
    "provider",
    "docs",
    "vars",
    "status",
    "headers",
    "status_url_handles",
}


def _build(r: Reader) -> Contract:
    r.only(_TOP_KEYS)
    name = r.text("name", required=True)
    status_url = r.text("status_url", required=True)
    status_table = r.data.get("status")
    body = status_table.get("body") if isinstance(status_table, dict) else None
    _check_status_url(r, status_url, job_in_body=isinstance(body, str) and "{job_id}" in body)
    auth = parse_auth(r)
    s = r.table("states", required=True)
    s.only({c.value for c in Category if c is not Category.UNKNOWN})
    states = StateTable(
        pending=s.strings("pending", required=True),
        success=s.strings("success", required=True),
        failure=s.strings("failure", required=True),
        cancelled=s.strings("cancelled"),
        expired=s.strings("expired"),
        needs_person=s.strings("needs_person"),
    )
    seen: dict[str, str] = {}
    for category, values in states._by_category():
        for value in values:
            if value in seen and seen[value] == category.value:
                raise ContractError(f"{r.source}: [states].{category.value}: {value!r} is listed twice")
            if value in seen:
                raise ContractError(
                    f"{r.source}: [states]: {value!r} is listed under both {seen[value]} and {category.value};"
                    " each state must mean one thing"
                )
            seen[value] = category.value
    f = r.table("fields", required=True)
    f.only({"state", "result", "error", "expires_at", "poll_after_seconds", "next_check_at"})
    fields = Fields(
        state=f.expression("state", required=True) or "state",
        result=f.expression("result"),
        error=f.expression("error"),
        expires_at=f.expression("expires_at"),
        poll_after_seconds=f.expression("poll_after_seconds"),
        next_check_at=f.expression("next_check_at"),
    )
    timestamps = Timestamps()
    if "timestamps" in r.data:
        ts = r.table("timestamps")
        ts.only({"expires_at", "next_check_at"})
        forms = {key: ts.text(key) or "rfc3339" for key in ("expires_at", "next_check_at")}
        for key, form in forms.items():
            if form not in TIMESTAMP_FORMATS:
                raise ts.fail(key, f"must be one of {', '.join(TIMESTAMP_FORMATS)}, got {form!r}")
            if key in ts.data and getattr(fields, key) is None:
                raise ts.fail(key, f"gives a form for [fields].{key}, which the contract does not read")
        timestamps = Timestamps(**forms)
    schedule = Schedule()
    if "schedule" in r.data:
        sc = r.table("schedule")
        sc.only({"base_delay", "max_delay", "jitter", "first_check", "retry_after_on_success"})
        jitter_text = sc.text("jitter") or Jitter.BOUNDED.value
        if jitter_text not in {j.value for j in Jitter}:
            raise ContractError(f"{r.source}: [schedule].jitter: must be 'bounded' or 'full', got {jitter_text!r}")
        schedule = Schedule(
            base_delay=sc.duration("base_delay", schedule.base_delay, positive=True),
            max_delay=sc.duration("max_delay", schedule.max_delay, positive=True),
            jitter=Jitter(jitter_text),
            first_check=sc.duration("first_check", schedule.first_check),
            retry_after_on_success=sc.boolean("retry_after_on_success", False),
        )
        if schedule.max_delay < schedule.base_delay:
            raise ContractError(f"{r.source}: [schedule].max_delay must not be shorter than base_delay")
    limits = Limits()
    if "limits" in r.data:
        li = r.table("limits")
        li.only({"deadline", "max_requests", "max_transport_failures", "max_rate_limited"})
        limits = Limits(
            deadline=li.duration("deadline", limits.deadline, positive=True),
            max_requests=li.integer("max_requests", limits.max_requests, minimum=1),
            max_transport_failures=li.integer("max_transport_failures", limits.max_transport_failures, minimum=1),
            max_rate_limited=li.integer("max_rate_limited", limits.max_rate_limited, minimum=1),
        )
    grace = None
    if "not_found" in r.data:
        nf = r.table("not_found")
        nf.only({"grace"})
        grace = nf.duration("grace", timedelta(0))
    request_id_header = r.text("request_id_header") or "X-Request-Id"
    check_token(r, "request_id_header", request_id_header)
    origin = _origin(status_url)
    escalation = Escalation()
    if "escalation" in r.data:
        e = r.table("escalation")
        e.only({"extend", "extend_checks", "pause", "console_url", "webhook_url", "webhook_secret_env", "useful_for"})
        webhook_url = e.text("webhook_url")
        if webhook_url is not None:
            check_url(e, "webhook_url", webhook_url)
        secret_env = e.text("webhook_secret_env")
        if secret_env is not None:
            check_token(e, "webhook_secret_env", secret_env)
        console_url = e.text("console_url")
        if console_url is not None:
            check_url(e, "console_url", console_url)
        useful_for = e.duration("useful_for", timedelta(0), positive=True) if "useful_for" in e.data else None
        escalation = Escalation(
            extend=e.duration("extend", escalation.extend, positive=True),
            extend_checks=e.integer("extend_checks", escalation.extend_checks, minimum=1),
            pause=e.duration("pause", escalation.pause, positive=True),
            console_url=console_url,
            webhook_url=webhook_url,
            webhook_secret_env=secret_env,
            useful_for=useful_for,
        )
    cancel = None
    if "cancel" in r.data:
        c = r.table("cancel")
        c.only({"url", "method"})
        cancel = Endpoint(url=_action_url(c, origin), method=_method(c))
    submit = None
    if "submit" in r.data:
        sb = r.table("submit")
        sb.only({"url", "method", "idempotency_header", "job_id", "status_location", "encoding", "idempotency_field"})
        url = sb.text("url", required=True)
        check_url(sb, "url", url)
        if _origin(url) != origin:
            raise sb.fail("url", f"must be on {origin}, the origin the credential is bound to")
        idem = sb.text("idempotency_header")
        if idem is not None:
            check_token(sb, "idempotency_header", idem)
        location = sb.text("status_location")
        if location is not None and not (
            location in {"header:Location", "header:Operation-Location"} or location.startswith("body:")
        ):
            raise sb.fail("status_location", "must be 'header:Location', 'header:Operation-Location' or 'body:PATH'")
        if location is not None and location.startswith("body:"):
            try:
                expr.check(location[len("body:") :])
            except expr.ExpressionError as exc:
                raise sb.fail("status_location", f"{location!r}: the path {exc}") from None
        submit = Submit(
            url=url,
            method=_method(sb),
            idempotency_header=idem,
            job_id=_submit_job_id(sb),
            status_location=location,
            encoding=_encoding(sb),
            idempotency_field=_idempotency_field(sb),
        )
    approval = r.text("approval") or "none"
    if approval not in APPROVAL_MODES:
        raise r.fail("approval", f"must be 'none', 'session' or 'per_call', got {approval!r}")
    agent = AgentLimits()
    if "agent" in r.data:
        ag = r.table("agent")
        ag.only({"max_deadline", "max_requests", "approval_timeout"})
        max_deadline = ag.duration("max_deadline", limits.deadline, positive=True)
        if max_deadline > limits.deadline:
            raise ag.fail(
                "max_deadline", "must not be longer than [limits].deadline: an agent may be given less, never more"
            )
        max_requests = ag.integer("max_requests", limits.max_requests, minimum=1)
        if max_requests > limits.max_requests:
            raise ag.fail(
                "max_requests", "must not exceed [limits].max_requests: an agent may be given less, never more"
            )
        agent = AgentLimits(
            max_deadline=max_deadline,
            max_requests=max_requests,
            approval_timeout=ag.duration("approval_timeout", agent.approval_timeout, positive=True),
        )
    safe_status = r.boolean("safe_status", True)
    status = _status_request(r, safe_status)
    provider = r.text("provider")
    docs = r.text("docs")
    if docs is not None:
        check_url(r, "docs", docs)
    return Contract(
        name=name,
        status_url=status_url,
        states=states,
        fields=fields,
        timestamps=timestamps,
        timeout=r.duration("timeout", timedelta(seconds=10), positive=True),
        safe_status=safe_status,
        auth=auth,
        schedule=schedule,
        limits=limits,
        not_found_grace=grace,
        request_id_header=request_id_header,
        max_body_bytes=r.integer("max_body_bytes", MAX_BODY_BYTES_DEFAULT, minimum=1024),
        escalation=escalation,
        cancel=cancel,
        submit=submit,
        approval=approval,
        agent=agent,
        rate_limits=parse_rate_limits(r),
        result=parse_result(r, fields.result),
        provider=provider,
        docs=docs,
        status=status,
        headers=_headers(r, auth),
        status_url_handles=r.boolean("status_url_handles", False),
    )


def _submit_job_id(r: Reader) -> str:
    """A path into the answer's body, or `header:NAME` (the job id is the last segment of that header's URL)."""
    raw = r.text("job_id")
    if raw is not None and raw.startswith("header:"):
        check_token(r, "job_id", raw.partition(":")[2])
        return str(raw)
    return r.expression("job_id") or "job_id"


def _encoding(r: Reader) -> str:
    encoding = r.text("encoding") or "json"
    if encoding not in {"json", "form"}:
        raise r.fail("encoding", f"must be 'json' or 'form', got {encoding!r}")
    return str(encoding)


def _idempotency_field(r: Reader) -> str | None:
    name = r.text("idempotency_field")
    if name is not None:
        check_token(r, "idempotency_field", name)
    return None if name is None else str(name)


def _status_request(r: Reader, safe_status: bool) -> StatusRequest:
    if "status" not in r.data:
        return StatusRequest()
    st = r.table("status")
    st.only({"method", "body", "content_type"})
    method = (st.text("method") or "GET").upper()
    if method not in {"GET", "POST"}:
        raise st.fail("method", f"must be GET or POST, got {method!r}")
    if method == "POST" and not safe_status:
        raise st.fail(
            "method", "a POST status with safe_status = false cannot be polled; declare safe_status = true only if"
            " the provider documents the POST as a read that may be repeated",
        )  # fmt: skip
    body = st.text("body")
    if body is not None and method != "POST":
        raise st.fail("body", 'a status body needs method = "POST"')
    if body is not None:
        try:
            json.loads(body.replace("{job_id}", json.dumps("job-id")))
        except ValueError as exc:
            raise st.fail(
                "body", f"is not a JSON template (with {{job_id}} as a JSON string it reads: {exc})"
            ) from None
        except RecursionError:  # json recurses once per nesting level
            raise st.fail("body", "is not a JSON template: it nests too deeply to be read") from None
    content_type = st.text("content_type") or "application/json"
    if any(not " " <= ch <= "~" for ch in content_type):
        raise st.fail("content_type", "must be printable ASCII")
    return StatusRequest(method=method, body=body, content_type=content_type)


def _headers(r: Reader, auth: Auth | None) -> tuple[tuple[str, str], ...]:
    if "headers" not in r.data:
        return ()
    h = r.table("headers")
    forbidden = set(FORBIDDEN_HEADERS)
    if auth is not None:
        forbidden.add(auth.header.lower())
    out: list[tuple[str, str]] = []
    for name in h.data:
        value = h.text(name, allow_empty=True)
        check_token(h, name, name)
        if name.lower() in forbidden:
            raise h.fail(
                name, "may not be set here: the credential travels only through [auth], framing through the client"
            )
        if any(not " " <= ch <= "~" for ch in value) or value != value.strip():
            raise h.fail(name, "the value must be printable ASCII with no space at either end")
        out.append((name, value))
    return tuple(out)


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def _method(r: Reader) -> str:
    method = (r.text("method") or "POST").upper()
    if method not in {"POST", "PUT", "DELETE", "PATCH"}:
        raise r.fail("method", f"must be POST, PUT, DELETE or PATCH, got {method!r}")
    return method


def _job_placeholders(url: str) -> int:
    return url.count("{job_id}") + url.count(JOB_PATH)


def _action_url(r: Reader, origin: str) -> str:
    url: str = r.text("url", required=True)
    check_url(r, "url", url)
    if _job_placeholders(url) != 1:
        raise r.fail("url", "must contain the placeholder {job_id} (or {job_id:path}) exactly once")
    if _origin(url) != origin:
        raise r.fail("url", f"must be on {origin}, the origin the credential is bound to")
    return url


def _check_status_url(r: Reader, url: str, *, job_in_body: bool = False) -> None:
    if "{job_id" in url.partition("//")[2].partition("/")[0]:  # before _check_url, which would only say "host"
        raise ContractError(f"{r.source}: status_url: {{job_id}} may not be part of the host")
    check_url(r, "status_url", url)
    # A POST status whose JSON body carries the id (Textract's {"JobId": ...}) names it nowhere in the URL.
    if _job_placeholders(url) not in ({0, 1} if job_in_body else {1}):
        raise ContractError(
            f"{r.source}: status_url: must contain the placeholder {{job_id}} or {{job_id:path}} exactly once"
        )
    if "?" in url.partition(JOB_PATH)[0] and JOB_PATH in url:
        raise ContractError(f"{r.source}: status_url: {{job_id:path}} must be in the path, not the query")
