"""The provider contract: one TOML file that says what each status value means and how to wait.

Meaning is never guessed from a field name (R3): every state the provider may send is listed in a
category, and anything else is `unknown`. Loading is strict so that a typo in a key is an error at
start-up, not a silent default at 3 a.m.
"""

from __future__ import annotations

import functools
import json
import tomllib
from collections.abc import Mapping
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .. import expr
from ..bounded import TooLarge, read_bounded
from ..durations import TIMESTAMP_FORMATS, DurationError, format_duration
from ..identity import IDENTITY_KEYS, parse_job_identity
from ..reasons import Category, Jitter
from .auth import Auth as Auth
from .auth import parse_auth
from .model import (
    APPROVAL_MODES,
    FORBIDDEN_HEADERS,
    JOB_PATH,
    MAX_BODY_BYTES_DEFAULT,
    MAX_BODY_BYTES_LIMIT,
    Endpoint,
    StateTable,
    StatusRequest,
    Timestamps,
)
from .model import AgentLimits as AgentLimits
from .model import Contract as Contract
from .model import Escalation as Escalation
from .model import Fields as Fields
from .model import Limits as Limits
from .model import Schedule as Schedule
from .model import Submit as Submit
from .model import job_path_problem as job_path_problem
from .push import parse_push
from .reader import PLAIN_HTTP_FIX, Reader, check_token, check_url, in_clear
from .reader import ContractError as ContractError
from .result import parse_result
from .signals import parse_rate_limits
from .vars import (
    declared_vars,
    dump_toml,
    expand,
    merge_use,
    resolve_vars,
    shipped_text,
    unwrap,
    wrap,
)

MAX_CONTRACT_BYTES = 1024 * 1024
"""Far more than any contract takes (the shipped ones are under 4 KiB); a larger file, a device or a pipe that
never ends is refused after reading this much, never read whole."""


def load_contract(path: Path, vars: Mapping[str, str] | None = None) -> Contract:
    try:
        text = read_bounded(path, MAX_CONTRACT_BYTES).decode("utf-8")
    except FileNotFoundError:
        raise ContractError(f"contract file {path} does not exist") from None
    except TooLarge:
        raise ContractError(f"contract file {path} is larger than {MAX_CONTRACT_BYTES} bytes") from None
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
    """Plain TOML, a `use = "NAME"` file or a stored JSON envelope; `vars` are given values (`--var`).

    Parsing is pure and a Contract is immutable, so one text with one source and vars is parsed once per process
    (a bounded cache): fifty watches of one contract file started together parsed it fifty times under one GIL.
    A changed file is a new text, parsed anew; a refused text raises every time (errors are not cached)."""
    return _parse(text, source, tuple(sorted((vars or {}).items())))


@functools.lru_cache(maxsize=128)
def _parse(text: str, source: str, vars: tuple[tuple[str, str], ...]) -> Contract:
    given = dict(vars)
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
    "allow_plain_http",
    "tls",
    "push",
}


def _build(r: Reader) -> Contract:
    r.only(_TOP_KEYS)
    name = r.text("name", required=True)
    status_url = r.text("status_url", required=True)
    status_table = r.data.get("status")
    body = status_table.get("body") if isinstance(status_table, dict) else None
    _check_status_url(r, status_url, job_in_body=isinstance(body, str) and "{job_id}" in body)
    auth = parse_auth(r)
    allow_plain_http = r.boolean("allow_plain_http", False)
    if auth is not None and in_clear(status_url) and not allow_plain_http:
        # Cancel, submit and a result fetched with the credential are on this origin too: one check holds for all.
        raise r.fail(
            "status_url", f"{_origin(status_url)} would receive the credential over plain http; {PLAIN_HTTP_FIX}"
        )
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
    f.only(
        {
            "state", "result", "error", "expires_at", "poll_after_seconds", "next_check_at", "job_id_type", "counts",
            "estimated_completion_at",
        }
    )  # fmt: skip
    fields = Fields(
        state=f.expression("state", required=True) or "state",
        result=f.expression("result"),
        error=f.expression("error"),
        expires_at=f.expression("expires_at"),
        poll_after_seconds=f.expression("poll_after_seconds"),
        next_check_at=f.expression("next_check_at"),
        counts=f.expression("counts"),
        estimated_completion_at=f.expression("estimated_completion_at"),
    )
    timestamps = Timestamps()
    if "timestamps" in r.data:
        ts = r.table("timestamps")
        ts.only({"expires_at", "next_check_at", "estimated_completion_at"})
        forms = {key: ts.text(key) or "rfc3339" for key in ("expires_at", "next_check_at", "estimated_completion_at")}
        for key, form in forms.items():
            if form not in TIMESTAMP_FORMATS:
                raise ts.fail(key, f"must be one of {', '.join(TIMESTAMP_FORMATS)}, got {form!r}")
            if key in ts.data and getattr(fields, key) is None:
                raise ts.fail(key, f"gives a form for [fields].{key}, which the contract does not read")
        timestamps = Timestamps(**forms)
    schedule = Schedule()
    if "schedule" in r.data:
        sc = r.table("schedule")
        sc.only(
            {"base_delay", "max_delay", "jitter", "first_check", "retry_after_on_success", "learn", "lag_target",
             "learn_key"}
        )  # fmt: skip
        jitter_text = sc.text("jitter") or Jitter.BOUNDED.value
        if jitter_text not in {j.value for j in Jitter}:
            raise ContractError(f"{r.source}: [schedule].jitter: must be 'bounded' or 'full', got {jitter_text!r}")
        schedule = Schedule(
            base_delay=sc.duration("base_delay", schedule.base_delay, positive=True),
            max_delay=sc.duration("max_delay", schedule.max_delay, positive=True),
            jitter=Jitter(jitter_text),
            first_check=sc.duration("first_check", schedule.first_check),
            retry_after_on_success=sc.boolean("retry_after_on_success", False),
            learn=sc.boolean("learn", schedule.learn),
            lag_target=sc.duration("lag_target", schedule.lag_target, positive=True),
            learn_key=sc.expression("learn_key"),
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
        ag.only({"max_deadline", "max_requests", "approval_timeout", "max_operations"})
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
            max_operations=ag.integer("max_operations", agent.max_operations, minimum=1),
        )
    _first_check_fits(r, schedule.first_check, limits, agent, escalation)
    safe_status = r.boolean("safe_status", True)
    status = _status_request(r, safe_status)
    status_url_handles = r.boolean("status_url_handles", False)
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
        max_body_bytes=r.integer("max_body_bytes", MAX_BODY_BYTES_DEFAULT, minimum=1024, maximum=MAX_BODY_BYTES_LIMIT),
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
        status_url_handles=status_url_handles,
        job_identity=parse_job_identity(r, status_url_handles=status_url_handles),
        allow_plain_http=allow_plain_http,
        ca_file=_ca_file(r),
        push=parse_push(r),
    )


def _ca_file(r: Reader) -> str | None:
    """`[tls] ca_file`: the PEM bundle that verifies the provider over https instead of the system's store (a
    cluster's own CA, a gateway's private one). Read where the connection is made, never at load: the file is the
    machine's that runs the operation (a worker's mounted service account), not the one that enqueued it."""
    if "tls" not in r.data:
        return None
    t = r.table("tls")
    t.only({"ca_file"})
    return t.path("ca_file", required=True)


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
    st.only({"method", "body", "content_type", *IDENTITY_KEYS})
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


def _first_check_fits(
    r: Reader, first_check: timedelta, limits: Limits, agent: AgentLimits, escalation: Escalation
) -> None:
    """No wait outlasts the deadline, so a first check at or after one of the contract's own bounds could never be
    sent: such a contract is refused as it is read, naming both durations."""
    bounds = (
        ("[limits].deadline", limits.deadline),
        ("[agent].max_deadline", agent.max_deadline),
        ("[escalation].useful_for", escalation.useful_for),
    )
    for where, bound in bounds:
        if bound is not None and first_check >= bound:
            raise ContractError(
                f"{r.source}: [schedule].first_check {format_duration(first_check)} is not shorter than {where}"
                f" {format_duration(bound)}: the first status request would fall at or after it, so no watch could"
                " send one; shorten first_check or lengthen the bound"
            )


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
