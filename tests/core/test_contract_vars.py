"""[vars], `use = NAME`, the stored envelope, [status], [headers], {job_id:path} and status URL handles."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pollwarden.catalogue import resolve_contract, shipped, shipped_contract
from pollwarden.core.admission import Refuse, WatchRequest, check, status_location_problem
from pollwarden.core.contract.parse import Contract, ContractError, load_contract, parse_contract
from pollwarden.core.contract.vars import dump_toml, shipped_text, var_value_problem

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

BASE = """
name = "vt"
status_url = "{base_url}/v1/{project}/jobs/{job_id}"

[vars]
base_url = "https://api.example.com"
project = ""

[states]
pending = ["running"]
success = ["done"]
failure = ["failed"]

[fields]
state = "status"
"""


def parse(text: str = BASE, **given: str) -> Contract:
    return parse_contract(text, source="t.toml", vars=given)


def test_old_contracts_keep_their_fingerprint_and_stored_text() -> None:
    # Computed on main before part 8: a resumed operation is matched by this value.
    contract = load_contract(EXAMPLES / "exports.toml")
    assert contract.fingerprint() == "46f1005ed3b13ff0ef189bdd32aee03be3e3f00dffe083985d46fff5b34baaaa"
    assert contract.source_text == (EXAMPLES / "exports.toml").read_text(encoding="utf-8")
    assert contract.vars == () and contract.status.method == "GET" and contract.headers == ()


def test_vars_expand_with_defaults_and_given_values() -> None:
    contract = parse(project="team/app")
    assert contract.status_url == "https://api.example.com/v1/team/app/jobs/{job_id}"
    moved = parse(project="p", base_url="http://127.0.0.1:8080/")  # the trailing slash is removed
    assert moved.status_url_for("j 1") == "http://127.0.0.1:8080/v1/p/jobs/j%201"
    assert moved.origin == "http://127.0.0.1:8080"
    assert parse(project="p").fingerprint() != moved.fingerprint()  # vars are part of the meaning


def test_required_and_unknown_vars_are_named() -> None:
    with pytest.raises(ContractError, match="var project is required: give it with --var project=VALUE"):
        parse()
    with pytest.raises(ContractError, match="unknown var projekt; this contract declares: base_url, project"):
        parse(project="p", projekt="q")
    with pytest.raises(ContractError, match="unknown var x; this contract declares: none"):
        parse_contract((EXAMPLES / "exports.toml").read_text(), vars={"x": "1"})


def test_an_unknown_placeholder_names_the_key_and_the_var() -> None:
    with pytest.raises(ContractError, match=r"t.toml: \[cancel\].url: \{projct\} names no declared var"):
        parse(BASE + '\n[cancel]\nurl = "{base_url}/v1/{projct}/jobs/{job_id}/cancel"\n', project="p")
    with pytest.raises(ContractError, match=r"status_url: \{region\} names no declared var"):
        parse(BASE.replace("{project}", "{region}"), project="p")


def test_a_default_may_use_one_other_var_one_level_only() -> None:
    text = BASE.replace('project = ""', 'project = "{team}/app"\nteam = "core"')
    assert parse(text).status_url == "https://api.example.com/v1/core/app/jobs/{job_id}"
    assert parse(text, team="ops").status_url == "https://api.example.com/v1/ops/app/jobs/{job_id}"
    two = BASE.replace('project = ""', 'project = "{team}"\nteam = "{org}"\norg = "x"')
    with pytest.raises(ContractError, match=r"\[vars\].project: \{team\} itself references a var"):
        parse(two)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("base_url", "https://x.example/?a=1"),
        ("base_url", "https://user@x.example"),
        ("base_url", "https://x.example/#f"),
        ("base_url", "ftp://x.example"),
        ("base_url", "https://x.example/a/../b"),
        ("project", "a/../b"),
        ("project", "a/./b"),
        ("project", "/a"),
        ("project", "a//b"),
        ("project", "a?b"),
        ("project", "a%2Fb"),
        ("project", "a b"),
        ("project", "a\nb"),
    ],
)
def test_var_values_that_could_steer_a_request_are_refused(name: str, value: str) -> None:
    with pytest.raises(ContractError, match=f"var {name}: "):
        parse(**{"project": "p", name: value})


SAFE = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_~-", min_size=1, max_size=12)


@given(st.lists(SAFE, min_size=1, max_size=4))
def test_any_allowed_value_round_trips(segments: list[str]) -> None:
    value = "/".join(segments)
    assert var_value_problem("project", value) is None
    contract = parse(project=value)
    assert contract.status_url == f"https://api.example.com/v1/{value}/jobs/{{job_id}}"
    again = parse_contract(contract.source_text, source="stored")  # the envelope alone says the same
    assert again.status_url == contract.status_url and again.fingerprint() == contract.fingerprint()


@given(
    st.text(max_size=10),
    st.sampled_from(["..", "?", "#", "@", " ", "\x00", "\x1f", "\x7f", "\n"]),
    st.text(max_size=10),
)
def test_any_value_with_a_dangerous_character_is_refused(before: str, bad: str, after: str) -> None:
    value = before + bad + after
    assert var_value_problem("project", value) is not None
    assert var_value_problem("base_url", "https://x.example/" + value) is not None


def test_the_stored_envelope_is_self_contained_and_strict() -> None:
    contract = parse(project="p")
    envelope = json.loads(contract.source_text)
    assert envelope["pollwarden_contract"] == 1
    assert envelope["vars"] == {"base_url": "https://api.example.com", "project": "p"}
    assert parse_contract(contract.source_text).status_url == contract.status_url
    for bad in ('{"pollwarden_contract": 2, "text": "", "vars": {}}', '{"text": ""}', "{not json"):
        with pytest.raises(ContractError, match="envelope"):
            parse_contract(bad, source="stored")


USE = """
use = "gitlab-pipeline"
name = "my-gitlab"

[vars]
project = "42"
base_url = "http://127.0.0.1:9"

[schedule]
base_delay = "50ms"

[limits]
max_requests = 7
"""


def test_a_use_file_is_the_shipped_contract_with_its_vars_and_tuning() -> None:
    contract = parse_contract(USE, source="mine.toml")
    shipped_one = shipped_contract("gitlab-pipeline", {"project": "42", "base_url": "http://127.0.0.1:9"})
    assert contract.name == "my-gitlab"
    assert contract.status_url == "http://127.0.0.1:9/api/v4/projects/42/pipelines/{job_id}"
    assert contract.schedule.base_delay.total_seconds() == 0.05
    assert contract.schedule.max_delay == shipped_one.schedule.max_delay  # key by key: the rest is shipped
    assert contract.limits.max_requests == 7 and contract.limits.deadline == shipped_one.limits.deadline
    assert contract.states == shipped_one.states and contract.auth == shipped_one.auth
    stored = json.loads(contract.source_text)
    assert "use" not in tomllib.loads(stored["text"])  # the stored text never depends on what is shipped later
    again = parse_contract(contract.source_text, source="stored")
    assert again == contract and again.fingerprint() == contract.fingerprint()
    # --var on top of the file's own values
    assert parse_contract(USE, vars={"project": "43"}).status_url.endswith("/projects/43/pipelines/{job_id}")


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ('status_url = "http://evil.example/{job_id}"\n', "status_url: a file that says `use` may only set"),
        ('[states]\nsuccess = ["failed"]\n', "states: a file that says `use` may only set"),
        ('[fields]\nstate = "other"\n', "fields: a file that says `use` may only set"),
    ],
)
def test_a_use_file_cannot_change_the_shipped_meaning(extra: str, words: str) -> None:
    with pytest.raises(ContractError, match=words):
        text = extra + USE if extra.startswith("status_url") else USE + extra  # a table goes after the others
        parse_contract(text, source="mine.toml")


def test_a_use_file_may_take_its_credential_from_elsewhere_and_the_account_says_so() -> None:
    # Google's gcloud token, Azure's AAD bearer: where the credential comes from is the user's to say.
    text = USE + '[auth]\ntoken_command = ["gcloud", "auth", "print-access-token"]\ntoken_ttl = "50m"\n'
    contract = parse_contract(text, source="mine.toml")
    plain = parse_contract(USE, source="mine.toml")
    assert contract.auth is not None and contract.auth.token_command == ("gcloud", "auth", "print-access-token")
    assert contract.auth.header == "Authorization"  # replaced whole: nothing of the shipped PRIVATE-TOKEN stays
    assert "gcloud" in contract.account and contract.fingerprint() != plain.fingerprint()
    assert contract.status_url == plain.status_url and contract.states == plain.states


def test_use_of_an_unknown_name_lists_the_shipped_ones() -> None:
    with pytest.raises(ContractError, match=r"no shipped contract is named 'nope'; shipped: .*gitlab-pipeline"):
        parse_contract('use = "nope"\n', source="mine.toml")
    with pytest.raises(ContractError, match="no shipped contract is named 'nope'"):
        resolve_contract("nope")


def test_every_shipped_contract_round_trips_through_the_toml_writer() -> None:
    for entry in shipped():
        data = tomllib.loads(shipped_text(entry.name))
        assert tomllib.loads(dump_toml(data)) == data
        assert entry.docs.startswith("https://") and "base_url" in dict(entry.vars)
    hostile = {"a": 'x"\\\x7f\x01é', "t": {"k-1": [1, 2.5, True]}, "arr": [{"x": "1"}, {"x": "2"}]}
    assert tomllib.loads(dump_toml(hostile)) == hostile


PATH = """
name = "g"
status_url = "https://ops.example/v1/{job_id:path}"
[states]
pending = ["running"]
success = ["done"]
failure = ["failed"]
[fields]
state = "status"
"""


def test_a_path_job_id_keeps_its_slashes_and_never_makes_a_dot_segment() -> None:
    contract = parse_contract(PATH)
    assert contract.status_url_for("projects/p 1/operations/7") == "https://ops.example/v1/projects/p%201/operations/7"
    assert contract.status_url_for("a/%2e%2e/b") == "https://ops.example/v1/a/%252e%252e/b"
    for bad in ("a/../b", "a/./b", "/a", "a//b", "a/", "a?x=1", "a#f", ".."):
        with pytest.raises(ValueError, match="job id"):
            contract.status_url_for(bad)
        refused = check(WatchRequest(contract, bad))
        assert isinstance(refused, Refuse) and refused.problems[0].field == "job_id", bad
    assert check(WatchRequest(contract, "projects/p/operations/7")) is None
    plain = parse_contract(PATH.replace("{job_id:path}", "{job_id}"))
    assert plain.status_url_for("a/../b") == "https://ops.example/v1/a%2F..%2Fb"
    assert check(WatchRequest(plain, "a/../b")) is None  # quoted completely: one segment


def test_a_status_url_with_two_job_placeholders_is_refused() -> None:
    with pytest.raises(ContractError, match=r"\{job_id\} or \{job_id:path\} exactly once"):
        parse_contract(PATH.replace("{job_id:path}", "{job_id:path}/{job_id}"))


POST = PATH.replace("{job_id:path}", "").replace(
    'status_url = "https://ops.example/v1/"', 'status_url = "https://ops.example/?job={job_id}"'
)


def test_a_post_status_with_a_json_body_template() -> None:
    text = POST + '[status]\nmethod = "POST"\nbody = \'{"JobId": {job_id}, "MaxResults": 1}\'\n'
    contract = parse_contract(text)
    assert contract.status.method == "POST"
    assert json.loads(contract.status.body_for('x", "y": "1') or b"") == {"JobId": 'x", "y": "1', "MaxResults": 1}
    assert contract.fingerprint() != parse_contract(POST).fingerprint()


@pytest.mark.parametrize(
    ("status", "words"),
    [
        ('method = "POST"\nbody = \'{"JobId": {job_id}\'', r"\[status\].body: is not a JSON template"),
        ("body = '{\"JobId\": {job_id}}'", r'\[status\].body: a status body needs method = "POST"'),
        ('method = "PUT"', r"\[status\].method: must be GET or POST"),
        ('method = "POST"\nbody = \'{"a": {nope}}\'', r"\[status\].body: \{nope\} names no declared var"),
    ],
)
def test_malformed_status_requests_are_refused(status: str, words: str) -> None:
    with pytest.raises(ContractError, match=words):
        parse_contract(POST + "[status]\n" + status + "\n")


def test_a_post_status_that_is_not_safe_is_refused_at_load() -> None:
    with pytest.raises(ContractError, match=r"\[status\].method: a POST status with safe_status = false"):
        parse_contract("safe_status = false\n" + POST + '[status]\nmethod = "POST"\n')


def test_vars_in_a_body_become_json_string_literals() -> None:
    text = BASE + '[status]\nmethod = "POST"\nbody = \'{"project": {project}, "id": {job_id}}\'\n'
    contract = parse(text, project="a/b")
    assert json.loads(contract.status.body_for("7") or b"") == {"project": "a/b", "id": "7"}


def test_static_headers_and_their_refusals() -> None:
    auth = '[auth]\nsecret_env = "T"\nheader = "x-api-key"\n'
    text = BASE + auth + '[headers]\nanthropic-version = "2023-06-01"\nX-Project = "{project}"\n'
    contract = parse(text, project="p")
    assert contract.headers == (("anthropic-version", "2023-06-01"), ("X-Project", "p"))
    for name, value, words in [
        ("Authorization", "x", "may not be set here"),
        ("X-API-Key", "x", "may not be set here"),  # the auth header, in any case
        ("Host", "x", "may not be set here"),
        ("Content-Length", "1", "may not be set here"),
        ("X-Bad", "a\\nb", "printable ASCII"),
        ("X Bad", "a", "may only use letters"),
    ]:
        bad = text.replace('X-Project = "{project}"', f'"{name}" = "{value}"')
        with pytest.raises(ContractError, match=words):
            parse(bad, project="p")


def test_status_url_handles_only_on_the_credentials_origin() -> None:
    handles = parse_contract("status_url_handles = true\n" + PATH)
    assert status_location_problem(handles, "https://ops.example/v1/ops/7?api-version=2024-01-01") is None
    for url, words in [
        ("https://evil.example/v1/ops/7", "is not on https://ops.example"),
        ("https://user:pw@ops.example/v1/ops/7", "userinfo"),
        ("https://ops.example/v1/../x", "dot segment"),
        ("https://ops.example/v1/x#f", "fragment"),
        ("https://ops.example/v1/a b", "space"),
        ("ops.example/v1/x", "absolute"),
    ]:
        problem = status_location_problem(handles, url)
        assert problem is not None and words in problem, (url, problem)
    plain = parse_contract(PATH)
    assert "does not take a status URL" in (status_location_problem(plain, "https://ops.example/v1/x") or "")
    request = WatchRequest(handles, None, status_location="https://ops.example/v1/ops/7?api-version=1")
    assert request.job_id == "https://ops.example/v1/ops/7?api-version=1"  # the job id defaults to the URL
    assert check(request) is None
    refused = check(WatchRequest(plain, None, status_location="https://ops.example/v1/x"))
    assert isinstance(refused, Refuse) and refused.problems[0].field == "status_location"
