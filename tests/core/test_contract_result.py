"""`[result]`: parsing (every malformed key a ContractError naming it), `check_result`, `fetch_url`, and the
any-JSON result through the record's codec and the audit event."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pollwarden import events as ev
from pollwarden.core.codec import record_from_json, record_to_json
from pollwarden.core.contract.parse import ContractError, parse_contract
from pollwarden.core.contract.result import (
    FETCH_MAX_BYTES_DEFAULT,
    MAX_RESULT_JSON_BYTES,
    ResultSpec,
    check_result,
    fetch_url,
    result_text,
    result_url_problem,
)
from pollwarden.core.record import new_record

BASE = """\
name = "files"
status_url = "https://api.example/v1/jobs/{job_id}"

[states]
pending = ["running"]
success = ["done"]
failure = ["failed"]

[fields]
state = "status"
result = "output"
"""


def load(extra: str = "", base: str = BASE) -> Any:
    return parse_contract(base + extra, source="c.toml")


def test_no_result_table_is_todays_meaning_and_fingerprint() -> None:
    contract = load()
    assert contract.result == ResultSpec()
    assert contract.result.credential is None and not contract.result.declared
    # Declaring the defaults changes what a poll means only by being declared: the fingerprint moves then.
    declared = load('\n[result]\ntype = "string"\ncredential = true\n')
    assert declared.fingerprint() != contract.fingerprint()
    # The fetch keys do not change what a poll means.
    other = load('\n[result]\ntype = "string"\ncredential = false\nmax_bytes = 10\n')
    assert other.fingerprint() == declared.fingerprint()


def test_a_full_table() -> None:
    contract = load(
        '\n[result]\ntype = "string"\nurl = "https://api.example/v1/files/{result}/content"\n'
        "credential = true\nmax_bytes = 2048\nnon_empty = false\n"
    )
    spec = contract.result
    assert (spec.type, spec.url, spec.credential, spec.max_bytes, spec.non_empty) == (
        "string",
        "https://api.example/v1/files/{result}/content",
        True,
        2048,
        False,
    )
    assert load('\n[result]\ntype = "object"\n').result.max_bytes == FETCH_MAX_BYTES_DEFAULT


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('type = "blob"', "[result].type: must be 'string', 'object', 'array' or 'any', got 'blob'"),
        ("type = 3", "[result].type: must be a string, got int"),
        ('type = "string"', "[result].credential: required key is missing"),
        ('type = "any"\nurl = "https://api.example/f/{result}"', "[result].credential: required key is missing"),
        ('type = "object"\nurl = "https://api.example/f/{result}"\ncredential = false', "needs a string result"),
        ('url = "https://api.example/f/"\ncredential = true', "must contain the placeholder {result} or {job_id}"),
        ('url = "https://api.example/{result}/{result}"\ncredential = true', "each at most once"),
        ('url = "https://{result}.example/f"\ncredential = true', "a placeholder may not be part of the host"),
        ('url = "ftp://api.example/{result}"\ncredential = true', "must be an absolute http(s) URL"),
        ('url = "https://api.example/{result} x"\ncredential = true', "holds a space"),
        ('url = "https://api.example/{Result}/{result}"\ncredential = true', "{Result} names no declared var"),
        ('type = "string"\ncredential = "yes"', "[result].credential: must be true or false, got str"),
        ('type = "object"\nnon_empty = 1', "[result].non_empty: must be true or false, got int"),
        ('type = "object"\nmax_bytes = 0', "[result].max_bytes: must be between 1 and"),
        ('type = "object"\nmax_bytes = "1GiB"', "[result].max_bytes: must be a whole number of bytes, got str"),
        ('type = "object"\nmax_bytes = true', "must be a whole number of bytes, got bool"),
        ('type = "object"\ncolour = "red"', "[result].colour: unknown key; allowed here: credential, hosts"),
        ('type = "object"\nhosts = "files.example"', "[result].hosts: must be a list of host names"),
        ('type = "object"\nhosts = ["https://files.example"]', "is not a host name, `host:port` or `*.domain`"),
        ('type = "object"\nhosts = ["files.example/x"]', "is not a host name"),
        ('type = "object"\nhosts = ["files.example:0"]', "is not a host name"),
        ('type = "object"\nhosts = ["a.*.example"]', "is not a host name"),
    ],
)
def test_malformed_result_tables(table: str, message: str) -> None:
    with pytest.raises(ContractError) as caught:
        load("\n[result]\n" + table + "\n")
    assert str(caught.value).startswith("c.toml: ") and message in str(caught.value)


def test_result_table_needs_the_field() -> None:
    with pytest.raises(ContractError, match=r"needs \[fields\]\.result"):
        load('\n[result]\ntype = "object"\n', base=BASE.replace('result = "output"\n', ""))
    with pytest.raises(ContractError, match=r"result: must be a table like \[result\], got str"):
        load("", base='result = "x"\n' + BASE)


def test_a_var_in_the_template_is_expanded_and_result_is_kept_for_the_fetch() -> None:
    text = '\n[vars]\nbase_url = "https://api.example"\n[result]\nurl = "{base_url}/v1/files/{result}/content"\n'
    spec = load(text + "credential = true\n").result
    assert spec.url == "https://api.example/v1/files/{result}/content"


OBJECT = ResultSpec(type="object", declared=True)
ARRAY = ResultSpec(type="array", declared=True)
ANY = ResultSpec(type="any", declared=True)
STRING = ResultSpec()


@pytest.mark.parametrize(
    ("spec", "found", "value", "problem"),
    [
        (STRING, False, None, "result field 'out' is missing"),
        (STRING, True, None, "result field 'out' is null"),
        (ANY, True, None, "result field 'out' is null"),
        (STRING, True, 5, "result field 'out' is a JSON number, not a string"),
        (STRING, True, True, "is a JSON boolean, not a string"),
        (OBJECT, True, [1], "is a JSON array, not an object"),
        (OBJECT, True, "x", "is a JSON string, not an object"),
        (ARRAY, True, {"a": 1}, "is a JSON object, not an array"),
        (STRING, True, " ", "is empty"),
        (OBJECT, True, {}, "is an empty object"),
        (ARRAY, True, [], "is an empty array"),
        (ANY, True, "", "is empty"),
        (STRING, True, "a\nb", "not a usable reference"),
        (OBJECT, True, {"a": "x" * MAX_RESULT_JSON_BYTES}, "more than the 65536 a record holds"),
    ],
)
def test_check_result_problems(spec: ResultSpec, found: bool, value: object, problem: str) -> None:
    result, why = check_result(spec, "out", found, value)
    assert result is None and why is not None and problem in why
    assert "NoneType" not in why and "dict" not in why


@pytest.mark.parametrize(
    ("spec", "value"),
    [
        (STRING, "file-abc"),
        (OBJECT, {"@type": "x", "n": [1, 2]}),
        (ARRAY, ["https://replicate.delivery/a.png"]),
        (ANY, 0),
        (ANY, False),
        (ANY, "text\nwith a line"),
        (ResultSpec(type="object", non_empty=False, declared=True), {}),
        (ResultSpec(type="string", non_empty=False, declared=True), ""),
    ],
)
def test_check_result_accepts(spec: ResultSpec, value: object) -> None:
    assert check_result(spec, "out", True, value) == (value, None)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12,
)


@given(spec=st.sampled_from([STRING, OBJECT, ARRAY, ANY]), found=st.booleans(), value=_JSON)
def test_check_result_is_total_and_exclusive(spec: ResultSpec, found: bool, value: object) -> None:
    """Exactly one of (result, problem); an accepted result is the value itself, of the declared JSON type."""
    result, why = check_result(spec, "a.b", found, value)
    assert (result is None) != (why is None)
    if why is not None:
        assert why.startswith("result field 'a.b' ") and "NoneType" not in why
    else:
        assert found and result is value
        kinds = {"string": str, "object": dict, "array": list}
        if spec.type in kinds:
            assert isinstance(result, kinds[spec.type])


@given(value=st.text(min_size=1))
def test_a_template_quotes_the_result_as_one_segment(value: str) -> None:
    spec = ResultSpec(url="https://api.example/v1/files/{result}/content", credential=True, declared=True)
    url, why = fetch_url(spec, value)
    assert why is None and url is not None
    segment = url.removeprefix("https://api.example/v1/files/").removesuffix("/content")
    assert "/" not in segment and "?" not in segment and "#" not in segment and segment not in {".", ".."}


def test_fetch_url_without_a_template() -> None:
    assert fetch_url(STRING, "https://files.example/a?sig=1") == ("https://files.example/a?sig=1", None)
    assert fetch_url(STRING, "/results/1") == ("/results/1", None)
    assert fetch_url(OBJECT, {"a": 1}) == (None, None)
    by_job = ResultSpec(url="https://api.example/v1/batches/{job_id}/results", credential=True, declared=True)
    assert fetch_url(by_job, "https://elsewhere.example/x", "msgbatch_01/..") == (
        "https://api.example/v1/batches/msgbatch_01%2F../results",
        None,
    )
    url, why = fetch_url(STRING, "file-abc")
    assert url is None and why is not None and "[result].url" in why
    url, why = fetch_url(STRING, "//evil.example/x")
    assert url is None and why is not None
    spec = ResultSpec(type="any", url="https://api.example/{result}", credential=False, declared=True)
    url, why = fetch_url(spec, ["a"])
    assert url is None and why is not None and "JSON array" in why


def test_result_text() -> None:
    assert result_text("https://x/a") == "https://x/a"
    assert result_text({"b": 1, "a": [True, None]}) == '{"a":[true,null],"b":1}'
    assert result_text(0) == "0" and result_text(None) is None


@pytest.mark.parametrize("value", ["/results/1", {"a": [1, 2.5, None]}, [{"x": "é"}], 3, 2.5, False])
def test_any_json_result_round_trips_the_record_and_the_event(value: Any) -> None:
    now = datetime(2025, 4, 18, 10, 0, tzinfo=UTC)
    record = new_record(load(), operation_id="op", job_id="j", now=now).succeeded(value, "state 'done'", now)
    again = record_from_json(json.loads(json.dumps(record_to_json(record))))
    assert again == record and type(again.result) is type(value)
    event = ev.outcome_events(record)[0]
    parsed = ev.SucceededEvent.from_json(json.loads(json.dumps(event.to_json())))
    assert parsed.result == value and type(parsed.result) is type(value)
    assert record.summary()["result"] == value


HOSTS = (
    '\n[result]\ntype = "any"\ncredential = false\n'
    'hosts = ["Files.Example", "*.cdn.example", "dl.example:8443", "[::1]:9"]\n'
)


@pytest.mark.parametrize(
    "url",
    [
        "https://api.example/v1/files/1",  # the status URL's origin
        "HTTPS://API.example:443/v1/files/1",  # the same origin, spelt otherwise
        "https://files.example/out.png",
        "http://files.example/out.png",
        "https://a.b.cdn.example/out.png",
        "https://dl.example:8443/x",
        "http://[::1]:9/x",
    ],
)
def test_a_result_url_on_the_status_origin_or_a_named_host_may_be_fetched(url: str) -> None:
    contract = load(HOSTS)
    assert contract.result.hosts == ("files.example", "*.cdn.example", "dl.example:8443", "[::1]:9")
    assert result_url_problem(contract.result, contract.origin, url) is None


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/",
        "http://metadata.google.internal/computeMetadata/v1/",
        "https://api.example:8443/v1/files/1",  # another port of the status host is another origin
        "https://files.example:8443/out.png",  # a named host on a port it does not name
        "https://dl.example/x",
        "https://cdn.example/out.png",  # `*.cdn.example` names its subdomains, not itself
        "https://evilcdn.example/out.png",
        "https://files.example.evil.example/out.png",
        "ftp://files.example/out.png",
        "https://files.example:99999/out.png",
    ],
)
def test_any_other_result_url_is_refused_before_anything_is_sent(url: str) -> None:
    contract = load(HOSTS)
    problem = result_url_problem(contract.result, contract.origin, url)
    assert problem is not None and "nothing was sent" in problem
