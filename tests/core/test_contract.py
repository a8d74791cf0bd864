"""The contract loader is strict: every refusal names the key, and the example from issue 2 loads as written."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from pollwarden.core import Category, ContractError, Jitter, load_contract, parse_contract
from pollwarden.core.contract.parse import MAX_CONTRACT_BYTES
from tests.conftest import endless_file

from .support import EXAMPLE_CONTRACT, contract_text, make_contract

MINIMAL = """\
name = "exports"
status_url = "https://provider.example/jobs/{job_id}"
[states]
pending = ["running"]
success = ["done"]
failure = ["failed"]
[fields]
state = "state"
"""


def test_issue_example_loads_with_every_value() -> None:
    c = parse_contract(EXAMPLE_CONTRACT)
    assert c.name == "exports"
    assert c.status_url == "http://127.0.0.1:8080/jobs/{job_id}"
    assert c.timeout == timedelta(seconds=5)
    assert c.safe_status is True
    assert c.auth is not None
    assert (c.auth.header, c.auth.scheme, c.auth.secret_env) == ("Authorization", "Bearer", "EXPORTS_TOKEN")
    assert c.states.pending == ("queued", "running")
    assert c.states.success == ("succeeded",)
    assert c.states.failure == ("failed",)
    assert c.states.cancelled == ("cancelled",)
    assert c.states.expired == ("expired",)
    assert c.fields.state == "state"
    assert c.fields.result == "result_url"
    assert c.fields.error == "error"
    assert c.fields.expires_at == "expires_at"
    assert c.fields.poll_after_seconds == "poll_after_seconds"
    assert c.fields.next_check_at == "next_check_at"
    assert c.schedule.base_delay == timedelta(seconds=5)
    assert c.schedule.max_delay == timedelta(seconds=120)
    assert c.schedule.jitter is Jitter.BOUNDED
    assert c.schedule.first_check == timedelta(0)
    assert c.limits.deadline == timedelta(minutes=40)
    assert (c.limits.max_requests, c.limits.max_transport_failures, c.limits.max_rate_limited) == (12, 3, 3)
    assert c.not_found_grace == timedelta(seconds=30)
    assert c.request_id_header == "X-Request-Id"
    assert c.account == "env:EXPORTS_TOKEN via Authorization"
    assert c.source_text == EXAMPLE_CONTRACT
    assert c.states.terminal() == ("succeeded", "failed", "cancelled", "expired")


def test_minimal_contract_takes_documented_defaults() -> None:
    c = parse_contract(MINIMAL)
    assert c.timeout == timedelta(seconds=10)
    assert c.safe_status is True
    assert c.auth is None
    assert c.account == "anonymous"
    assert c.schedule.base_delay == timedelta(seconds=5)
    assert c.schedule.max_delay == timedelta(seconds=120)
    assert c.schedule.jitter is Jitter.BOUNDED
    assert c.limits.deadline == timedelta(minutes=40)
    assert c.limits.max_requests == 12
    assert c.not_found_grace is None
    assert c.fields.result is None


def test_load_contract_from_file(tmp_path: Path) -> None:
    path = tmp_path / "exports.toml"
    path.write_text(EXAMPLE_CONTRACT, encoding="utf-8")
    assert load_contract(path) == parse_contract(EXAMPLE_CONTRACT)
    with pytest.raises(ContractError, match="does not exist"):
        load_contract(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_bytes(b"\xff\xfe name")
    with pytest.raises(ContractError, match="cannot read contract file"):
        load_contract(bad)


def test_state_table_matches_exactly() -> None:
    states = parse_contract(EXAMPLE_CONTRACT).states
    assert states.category("running") is Category.PENDING
    assert states.category("queued") is Category.PENDING
    assert states.category("succeeded") is Category.SUCCESS
    assert states.category("failed") is Category.FAILURE
    assert states.category("cancelled") is Category.CANCELLED
    assert states.category("expired") is Category.EXPIRED
    for value in ["Running", "running ", "paused", "awaiting_review", "needs_payment", "blocked", ""]:
        assert states.category(value) is Category.UNKNOWN, value


def _with(extra: str) -> str:
    return MINIMAL + extra


def _top(line: str) -> str:
    """Top-level keys must come before the first table header."""
    return line + MINIMAL


# (contract text, the key the message must name, a word from the complaint)
REFUSALS: list[tuple[str, str, str]] = [
    # unknown keys, at every level
    (_top('colour = "blue"\n'), "colour", "unknown key"),
    (_with('[schedule]\nbase_dealy = "5s"\n'), "[schedule].base_dealy", "unknown key"),
    (_with("[limits]\nmax_request = 3\n"), "[limits].max_request", "unknown key"),
    (MINIMAL.replace('state = "state"', 'state = "state"\nstatus = "x"'), "[fields].status", "unknown key"),
    (
        MINIMAL.replace('failure = ["failed"]', 'failure = ["failed"]\npaused = ["paused"]'),
        "[states].paused",
        "unknown",
    ),
    (_with('[auth]\nsecret_env = "T"\ntoken = "s3cret"\n'), "[auth].token", "unknown key"),
    (_with('[not_found]\ngrace = "5s"\nmode = "x"\n'), "[not_found].mode", "unknown key"),
    # wrong types
    (MINIMAL.replace('name = "exports"', "name = 5"), "name", "must be a string"),
    (_top("timeout = 5\n"), "timeout", "duration string"),
    (_top('safe_status = "yes"\n'), "safe_status", "true or false"),
    (_with('[limits]\nmax_requests = "12"\n'), "[limits].max_requests", "whole number"),
    (_with("[limits]\nmax_requests = true\n"), "[limits].max_requests", "whole number"),
    (_with("[limits]\nmax_requests = 1.5\n"), "[limits].max_requests", "whole number"),
    (_with("[limits]\nmax_requests = 0\n"), "[limits].max_requests", "between 1"),
    (_with("[limits]\nmax_transport_failures = 0\n"), "[limits].max_transport_failures", "between 1"),
    (_with("[limits]\nmax_rate_limited = 0\n"), "[limits].max_rate_limited", "between 1"),
    (_top("max_body_bytes = 1023\n"), "max_body_bytes", "between 1024 and 268435456"),
    (_top("max_body_bytes = 268435457\n"), "max_body_bytes", "between 1024 and 268435456"),
    (_with("[schedule]\nbase_delay = 5\n"), "[schedule].base_delay", "duration string"),
    (MINIMAL.replace('pending = ["running"]', 'pending = "running"'), "[states].pending", "list"),
    (MINIMAL.replace('pending = ["running"]', "pending = []"), "[states].pending", "at least one"),
    (MINIMAL.replace('pending = ["running"]', 'pending = [""]'), "[states].pending", "non-empty"),
    (MINIMAL.replace('state = "state"', "state = 1"), "[fields].state", "must be a string"),
    (
        MINIMAL.replace('state = "state"', 'state = "job..state"'),
        "[fields].state",
        "not a JMESPath expression (it breaks at column 5",
    ),
    (_top('auth = "Bearer x"\n'), "auth", "must be a table"),
    # missing required keys
    (MINIMAL.replace('name = "exports"\n', ""), "name", "required key is missing"),
    (MINIMAL.replace('status_url = "https://provider.example/jobs/{job_id}"\n', ""), "status_url", "missing"),
    (MINIMAL.replace('success = ["done"]\n', ""), "[states].success", "required key is missing"),
    (MINIMAL.replace('failure = ["failed"]\n', ""), "[states].failure", "required key is missing"),
    (MINIMAL.replace('[fields]\nstate = "state"\n', ""), "fields", "required key is missing"),
    (MINIMAL.replace('[fields]\nstate = "state"\n', "[fields]\n"), "[fields].state", "required key is missing"),
    (_with('[auth]\nheader = "X-Key"\n'), "[auth].secret_env", "required key is missing"),
    # durations
    (_with('[schedule]\nbase_delay = "fast"\n'), "[schedule].base_delay", "cannot read duration"),
    (_with('[schedule]\nbase_delay = "5"\n'), "[schedule].base_delay", "cannot read duration"),
    (_with('[schedule]\nbase_delay = "0s"\n'), "[schedule].base_delay", "longer than zero"),
    (_with('[schedule]\nmax_delay = "1h1h"\n'), "[schedule].max_delay", "repeats"),
    (_with('[schedule]\nfirst_check = "-5s"\n'), "[schedule].first_check", "cannot read duration"),
    (_with('[limits]\ndeadline = ""\n'), "[limits].deadline", "empty"),
    (_with('[not_found]\ngrace = "soon"\n'), "[not_found].grace", "cannot read duration"),
    (_top('timeout = "0ms"\n'), "timeout", "longer than zero"),
    (_with('[schedule]\nbase_delay = "10s"\nmax_delay = "5s"\n'), "[schedule].max_delay", "shorter"),
    # jitter
    (_with('[schedule]\njitter = "none"\n'), "[schedule].jitter", "'bounded' or 'full'"),
    (_with("[schedule]\njitter = 0.5\n"), "[schedule].jitter", "must be a string"),
    # status_url
    (MINIMAL.replace("/jobs/{job_id}", "/jobs/current"), "status_url", "{job_id}"),
    (MINIMAL.replace("/jobs/{job_id}", "/jobs/{job_id}/{job_id}"), "status_url", "exactly once"),
    (MINIMAL.replace("https://provider.example", "https://user:pw@provider.example"), "status_url", "credentials"),
    (MINIMAL.replace("https://provider.example", "https://token@provider.example"), "status_url", "credentials"),
    (
        MINIMAL.replace("https://provider.example/jobs/{job_id}", "https://{job_id}.provider.example/"),
        "status_url",
        "host",
    ),
    (MINIMAL.replace("https://", "ftp://"), "status_url", "http(s)"),
    (MINIMAL.replace("https://provider.example", ""), "status_url", "http(s)"),
    # item 15: URLs that cannot be requested as written are refused at load, before anything is created
    (MINIMAL.replace("https://provider.example", "http://127.0.0.1:1:80"), "status_url", "port"),
    (MINIMAL.replace("https://provider.example", "http://127.0.0.1:70000"), "status_url", "port"),
    (MINIMAL.replace("https://provider.example", "http://127.0.0.1:0"), "status_url", "port"),
    (MINIMAL.replace("https://provider.example", "http://127.0.0.1:x"), "status_url", "port"),
    (MINIMAL.replace("https://provider.example", "http://[::1"), "status_url", "not a valid URL"),
    (MINIMAL.replace("/jobs/{job_id}", "/jobs/\\u0000{job_id}"), "status_url", "control character"),
    (MINIMAL.replace("/jobs/{job_id}", "/jobs/{job_id}\\r\\nHost: evil"), "status_url", "control character"),
    (MINIMAL.replace("/jobs/{job_id}", "/jobs/\\t{job_id}"), "status_url", "control character"),
    (MINIMAL.replace("/jobs/{job_id}", "/my jobs/{job_id}"), "status_url", "a space"),
    (MINIMAL.replace("/jobs/{job_id}", "/t\u00e2ches/{job_id}"), "status_url", "non-ASCII"),
    (MINIMAL.replace("https://provider.example", "https://pr\u00f6vider.example"), "status_url", "non-ASCII"),
    (MINIMAL.replace("https://provider.example", "https://provider_$.example"), "status_url", "host"),
    (MINIMAL.replace("https://", "file://"), "status_url", "http(s)"),
    (_with('[cancel]\nurl = "https://provider.example/jobs/{job_id}/can cel"\n'), "[cancel].url", "a space"),
    (_with('[cancel]\nurl = "https://provider.example:99999/jobs/{job_id}"\n'), "[cancel].url", "port"),
    (_with('[submit]\nurl = "https://provider.example/jobs\\n"\n'), "[submit].url", "control character"),
    (_with('[submit]\nurl = "https://u:p@provider.example/jobs"\n'), "[submit].url", "credentials"),
    (
        _with('[escalation]\nconsole_url = "https://u:p@console.example/{job_id}"\n'),
        "[escalation].console_url",
        "credentials",
    ),
    (_with('[escalation]\nconsole_url = "https://console.example/a b"\n'), "[escalation].console_url", "a space"),
    (_with('[escalation]\nwebhook_url = "http://[::1/hook"\n'), "[escalation].webhook_url", "not a valid URL"),
    (_with('[escalation]\nwebhook_url = "http://hooks.example:0/x"\n'), "[escalation].webhook_url", "port"),
    (_with('[escalation]\nwebhook_url = "http://hooks.example/x\\u0000"\n'), "[escalation].webhook_url", "control"),
    (_with('[escalation]\nwebhook_url = "ftp://hooks.example/x"\n'), "[escalation].webhook_url", "http(s)"),
    # item 12: what goes into a header must be ASCII
    (_with('[auth]\nsecret_env = "T"\nscheme = "B\u00e9arer"\n'), "[auth].scheme", "letters, digits"),
    (_with('[auth]\nsecret_env = "T"\nscheme = "Bearer x"\n'), "[auth].scheme", "letters, digits"),
    (_with('[auth]\nsecret_env = "T"\nheader = "X-K\u00e9y"\n'), "[auth].header", "letters, digits"),
    (_with('[auth]\nsecret_env = "T\u00d6KEN"\n'), "[auth].secret_env", "letters, digits"),
    (_top('request_id_header = "X-\u00cfd"\n'), "request_id_header", "letters"),
    # header tokens
    (_with('[auth]\nsecret_env = "MY TOKEN"\n'), "[auth].secret_env", "letters, digits"),
    (_with('[auth]\nsecret_env = "T"\nheader = "X-Key: 1"\n'), "[auth].header", "letters, digits"),
    (_top('request_id_header = "X Id"\n'), "request_id_header", "letters"),
]


@pytest.mark.parametrize(("text", "key", "complaint"), REFUSALS, ids=[f"{k}:{c}" for _, k, c in REFUSALS])
def test_refusals_name_the_key(text: str, key: str, complaint: str) -> None:
    with pytest.raises(ContractError) as info:
        parse_contract(text, source="exports.toml")
    message = str(info.value)
    assert message.startswith("exports.toml: "), message
    assert key in message, message
    assert complaint in message, message


def test_max_body_bytes_may_exceed_the_default_up_to_its_limit() -> None:
    """A finished transcript carries every word in its status answer (assemblyai-transcript: 64 MiB); before
    issue 24 the key took at most 1,000,000, less than its own 1 MiB default."""
    assert parse_contract(MINIMAL).max_body_bytes == 1_048_576
    assert parse_contract(_top("max_body_bytes = 67108864\n")).max_body_bytes == 64 * 1_048_576
    assert parse_contract(_top("max_body_bytes = 268435456\n")).max_body_bytes == 256 * 1_048_576


def test_duplicate_state_across_categories_is_refused() -> None:
    text = MINIMAL.replace('failure = ["failed"]', 'failure = ["failed", "running"]')
    with pytest.raises(ContractError) as info:
        parse_contract(text, source="exports.toml")
    message = str(info.value)
    assert "[states]" in message
    assert "'running'" in message
    assert "pending" in message and "failure" in message


def test_not_toml_is_refused_with_the_source() -> None:
    with pytest.raises(ContractError, match=r"^exports.toml: not valid TOML"):
        parse_contract("name = ", source="exports.toml")


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        (MINIMAL + "[limits]\nx = " + "[" * 100_000 + "]" * 100_000 + "\n", "not valid TOML"),
        (MINIMAL + "[limits]\nx = " + "{a=" * 100_000 + "1" + "}" * 100_000 + "\n", "not valid TOML"),
        ('{"pollwarden_contract": 1, "vars": {}, "text": ' + "[" * 100_000 + "]" * 100_000 + "}", "envelope"),
        (
            MINIMAL.replace('state = "state"', 'state = "state"\n')
            + "[status]\nmethod = 'POST'\nbody = '"
            + "[" * 100_000
            + "]" * 100_000
            + "'\n",
            "[status].body",
        ),
    ],
    ids=["toml-array", "toml-table", "envelope", "status-body"],
)
def test_nesting_deeper_than_the_parsers_recurse_is_refused_not_a_traceback(text: str, complaint: str) -> None:
    # tomllib and json recurse once per level: a contract file (or an MCP contracts directory entry) nested
    # 100,000 deep was a RecursionError traceback, exit 1, instead of a ContractError naming the file.
    with pytest.raises(ContractError) as info:
        parse_contract(text, source="deep.toml")
    assert str(info.value).startswith("deep.toml") and complaint in str(info.value), str(info.value)


def test_empty_auth_scheme_is_allowed_and_default_header_applies() -> None:
    c = parse_contract(MINIMAL + '[auth]\nscheme = ""\nsecret_env = "TOKEN"\n')
    assert c.auth is not None
    assert (c.auth.header, c.auth.scheme, c.auth.secret_env) == ("Authorization", "", "TOKEN")


def test_status_url_for_quotes_the_whole_job_id() -> None:
    c = parse_contract(MINIMAL)
    assert c.status_url_for("exp_71c") == "https://provider.example/jobs/exp_71c"
    url = c.status_url_for("../x?y")
    assert url == "https://provider.example/jobs/..%2Fx%3Fy"
    parts = urlsplit(url)
    assert parts.netloc == "provider.example"
    assert parts.path == "/jobs/..%2Fx%3Fy"
    assert parts.query == "" and parts.fragment == ""
    for hostile in ["a/b", "a#frag", "@evil.example", "a b", "x%2F", "é"]:
        hostile_parts = urlsplit(c.status_url_for(hostile))
        assert hostile_parts.netloc == "provider.example", hostile
        assert hostile_parts.path.count("/") == 2, hostile
        assert hostile_parts.query == "" and hostile_parts.fragment == "", hostile


@pytest.mark.parametrize(("job_id", "segment"), [(".", "%2E"), ("..", "%2E%2E")])
def test_dot_segment_job_ids_cannot_climb_the_path(job_id: str, segment: str) -> None:
    c = parse_contract(MINIMAL)
    assert c.status_url_for(job_id) == f"https://provider.example/jobs/{segment}"


def test_fingerprint_follows_meaning_not_schedule() -> None:
    base = make_contract()
    assert base.fingerprint() == make_contract().fingerprint()
    assert len(base.fingerprint()) == 64
    # schedule and limits do not change what a poll means
    assert make_contract(base_delay="1s", max_delay="10s", jitter="full").fingerprint() == base.fingerprint()
    assert make_contract(deadline="2h", max_requests=50).fingerprint() == base.fingerprint()
    # states, fields and the account do
    more_states = parse_contract(contract_text().replace('pending = ["queued", "running"]', 'pending = ["queued"]'))
    assert more_states.fingerprint() != base.fingerprint()
    moved = parse_contract(contract_text().replace('failure = ["failed"]', 'failure = ["failed", "paused"]'))
    assert moved.fingerprint() != base.fingerprint()
    assert make_contract(result=None).fingerprint() != base.fingerprint()
    assert make_contract(state_field="job.state").fingerprint() != base.fingerprint()
    with_auth = parse_contract(contract_text() + '[auth]\nsecret_env = "TOKEN"\n')
    assert with_auth.fingerprint() != base.fingerprint()
    other_url = parse_contract(contract_text().replace("/v1/", "/v2/"))
    assert other_url.fingerprint() != base.fingerprint()


def test_origin() -> None:
    assert parse_contract(EXAMPLE_CONTRACT).origin == "http://127.0.0.1:8080"


# -- agent keys (issue 6): approval mode and what an agent may ask for ------------------------------------


def test_agent_defaults_follow_the_contract_limits() -> None:
    c = parse_contract(MINIMAL + '[limits]\ndeadline = "10m"\nmax_requests = 5\n')
    assert c.approval == "none"
    assert c.agent_max_deadline == timedelta(minutes=10)
    assert c.agent_max_requests == 5
    assert c.agent.approval_timeout == timedelta(minutes=2)


def test_agent_table_and_approval_mode_load() -> None:
    text = (
        'approval = "per_call"\n'
        + MINIMAL
        + ('[agent]\nmax_deadline = "5m"\nmax_requests = 4\napproval_timeout = "1s"\n')
    )
    c = parse_contract(text)
    assert c.approval == "per_call"
    assert (c.agent_max_deadline, c.agent_max_requests) == (timedelta(minutes=5), 4)
    assert c.agent.approval_timeout == timedelta(seconds=1)
    assert parse_contract('approval = "session"\n' + MINIMAL).approval == "session"


@pytest.mark.parametrize(
    ("prefix", "suffix", "message"),
    [
        ('approval = "always"\n', "", "approval: must be 'none', 'session' or 'per_call'"),
        ("approval = true\n", "", "approval: must be a string"),
        ("", '[agent]\nmax_deadline = "2h"\n', "[agent].max_deadline: must not be longer than [limits].deadline"),
        ("", "[agent]\nmax_requests = 13\n", "[agent].max_requests: must not exceed [limits].max_requests"),
        ("", "[agent]\nmax_requests = 0\n", "[agent].max_requests: must be between 1"),
        ("", '[agent]\napproval_timeout = "0s"\n', "[agent].approval_timeout: must be longer than zero"),
        ("", '[agent]\napproval = "session"\n', "[agent].approval: unknown key"),
        ("", 'agent = "x"\n', "agent: must be a table"),
    ],
)
def test_agent_keys_are_strict(prefix: str, suffix: str, message: str) -> None:
    text = prefix + MINIMAL + suffix
    if suffix.startswith("agent ="):
        text = prefix + suffix + MINIMAL
    with pytest.raises(ContractError) as err:
        parse_contract(text)
    assert message in str(err.value)


def test_a_contract_file_is_parsed_once_per_text_and_a_changed_file_is_read_again(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(MINIMAL, encoding="utf-8")
    first = load_contract(path)
    assert load_contract(path) is first  # the same text: parsed once (watches started together share it)
    path.write_text(MINIMAL.replace('name = "exports"', 'name = "imports"'), encoding="utf-8")
    changed = load_contract(path)
    assert changed.name == "imports" and first.name == "exports"
    broken = tmp_path / "broken.toml"
    broken.write_text(MINIMAL.replace('status_url = "https', 'status_url = "ftp'), encoding="utf-8")
    for _ in range(2):  # a refusal is not remembered as a contract
        with pytest.raises(ContractError, match="status_url"):
            load_contract(broken)
    broken.write_text(MINIMAL, encoding="utf-8")
    assert load_contract(broken).name == "exports"


def test_a_contract_file_that_never_ends_is_refused_after_a_bounded_read(tmp_path: Path) -> None:
    # `--contract /dev/zero` read until memory ran out (22 GB in 8 s, then the kernel killed it).
    endless = endless_file(tmp_path / "endless.toml", MAX_CONTRACT_BYTES)
    with endless as wrote_all, pytest.raises(ContractError, match=f"larger than {MAX_CONTRACT_BYTES} bytes"):
        load_contract(tmp_path / "endless.toml")
    assert not wrote_all.is_set()


# --- issue 23: no credential over plain http off the loopback --------------------------------------------------

_AUTH = '[auth]\nsecret_env = "EXPORTS_TOKEN"\n'


def _at(url: str, *, top: str = "", auth: str = _AUTH) -> str:
    return top + MINIMAL.replace("https://provider.example/jobs/{job_id}", url) + auth


@pytest.mark.parametrize(
    "url",
    ["http://provider.example/jobs/{job_id}", "http://10.0.0.7:8080/jobs/{job_id}", "http://[fd00::1]/j/{job_id}"],
)
def test_a_credential_over_plain_http_off_the_loopback_is_refused_naming_the_key_and_the_fix(url: str) -> None:
    with pytest.raises(ContractError) as caught:
        parse_contract(_at(url), source="c.toml")
    message = str(caught.value)
    assert message.startswith("c.toml: status_url:") and "plain http" in message
    assert "allow_plain_http = true" in message and "https://" in message


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8080/jobs/{job_id}",
        "http://127.3.4.5/jobs/{job_id}",
        "http://[::1]:9/jobs/{job_id}",
        "http://localhost:9/jobs/{job_id}",
        "http://LOCALHOST/jobs/{job_id}",
        "https://provider.example/jobs/{job_id}",
    ],
)
def test_the_loopback_and_https_need_no_permission(url: str) -> None:
    assert parse_contract(_at(url)).allow_plain_http is False


def test_plain_http_is_allowed_when_the_contract_says_so_or_sends_no_credential() -> None:
    url = "http://provider.example/jobs/{job_id}"
    allowed = parse_contract(_at(url, top="allow_plain_http = true\n"))
    assert allowed.allow_plain_http is True and allowed.auth is not None
    assert parse_contract(_at(url, auth="")).auth is None  # nothing secret to protect
    with pytest.raises(ContractError, match="allow_plain_http: must be true or false"):
        parse_contract(_at(url, top='allow_plain_http = "yes"\n'))


def test_the_origin_is_judged_after_vars_and_the_key_joins_the_fingerprint_only_when_used() -> None:
    text = _at("{base_url}/jobs/{job_id}") + '[vars]\nbase_url = "https://provider.example"\n'
    assert parse_contract(text).status_url.startswith("https://")
    with pytest.raises(ContractError, match="allow_plain_http"):
        parse_contract(text, vars={"base_url": "http://provider.example"})
    plain = parse_contract(_at("https://provider.example/jobs/{job_id}"))
    assert plain.fingerprint() == parse_contract(MINIMAL + _AUTH).fingerprint()
    allowed = parse_contract(_at("https://provider.example/jobs/{job_id}", top="allow_plain_http = true\n"))
    assert allowed.fingerprint() != plain.fingerprint()
