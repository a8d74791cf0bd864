"""One job, one identity: every spelling of a job that a provider reads alike is admitted as one job.

Issue 23: an agent refilled its budget by respelling an Azure status URL (`&x=1`, a reordered query, `%61` for
`a`, a trailing `/`, path case: 8 operations for one Azure operation) and a numeric id (`042`, `+42`, `42.0`).
"""

from __future__ import annotations

import pytest

from pollwarden.core.admission import (
    Create,
    Refusal,
    Refuse,
    Resume,
    WatchRequest,
    admit,
    check,
    check_many,
    status_location_problem,
)
from pollwarden.core.contract.parse import Contract, ContractError, parse_contract
from pollwarden.core.contract.vars import shipped_text
from pollwarden.core.identity import NotOneJob, canonical_job_id, canonical_status_url

from .support import T0


def resolve_contract(name: str, vars: dict[str, str] | None = None) -> Contract:
    return parse_contract(shipped_text(name), source=f"shipped contract {name}", vars=vars)


BASE = "https://res.cognitiveservices.azure.com"
AZURE = resolve_contract("azure-operation", {"base_url": BASE})
PATH = "/documentintelligence/documentModels/prebuilt-layout/analyzeResults/3b31320d-8bab-4f88"
CANONICAL = f"{BASE}{PATH.lower()}?api-version=2024-11-30"

RESPELLINGS = [
    f"{BASE}{PATH}?api-version=2024-11-30",
    f"{BASE}{PATH}?api-version=2024-11-30&x=1",
    f"{BASE}{PATH}?x=1&api-version=2024-11-30",
    f"{BASE}{PATH.replace('analyzeResults', '%61nalyzeResults')}?api-version=2024-11-30",
    f"{BASE}{PATH}/?api-version=2024-11-30",
    f"{BASE}{PATH.upper().replace('/DOCUMENTINTELLIGENCE', '/documentintelligence')}?api-version=2024-11-30",
    f"{BASE}{PATH}?api-version=2024-11-30&empty=&flag",
    f"{BASE}{PATH}?%61pi-version=2024-11-30",
    f"{BASE.upper().replace('HTTPS', 'https')}:443{PATH}?api-version=2024-11-30",
    f"{BASE}{PATH.replace('/analyzeResults/', '//analyzeResults//')}?API-Version=2024-11-30",
]


@pytest.mark.parametrize("url", RESPELLINGS)
def test_every_respelling_of_an_azure_status_url_is_one_canonical_url(url: str) -> None:
    assert canonical_status_url(AZURE, url) == CANONICAL
    request = WatchRequest(AZURE, None, status_location=url, agent=True)
    assert (request.job_id, request.status_location) == (CANONICAL, CANONICAL)
    assert check(request) is None


def test_a_job_path_of_a_status_url_contract_is_the_same_job_as_its_url() -> None:
    """`--job PATH` and `--status-url URL` name one job: both are stored as the canonical URL."""
    request = WatchRequest(AZURE, PATH.lstrip("/").upper().replace("DOCUMENTINTELLIGENCE", "documentintelligence"))
    assert (request.job_id, request.status_location) == (CANONICAL, CANONICAL)


def test_the_respellings_resume_the_first_operation_never_a_fresh_budget() -> None:
    first = admit(WatchRequest(AZURE, None, status_location=RESPELLINGS[0], agent=True), None, [], T0, token="t")
    assert isinstance(first, Create) and first.record.job_id == first.record.status_location == CANONICAL
    for url in RESPELLINGS[1:]:
        again = admit(WatchRequest(AZURE, None, status_location=url, agent=True), None, [first.record], T0, token="u")
        assert isinstance(again, Resume) and again.record is first.record and again.reused_job


def test_one_batch_giving_two_spellings_of_one_job_is_refused_as_a_repeat() -> None:
    requests = [WatchRequest(AZURE, None, status_location=url) for url in RESPELLINGS[:2]]
    [(index, refusal)] = check_many(requests, lambda i: f"line {i + 1}")
    assert index == 1 and "is given twice (also at line 1)" in refusal.message


@pytest.mark.parametrize(
    ("url", "words"),
    [
        (f"{BASE}{PATH}", "lacks the query parameter 'api-version'"),
        (f"{BASE}{PATH}?api-version=1&api-version=2", "gives the query parameter 'api-version' twice"),
        (f"{BASE}{PATH}?api-version=2024%2", "'%' that is not followed by two hex digits"),
        (f"{BASE}/a/%2E%2E/b?api-version=1", "dot segment"),
        (f"https://evil.example{PATH}?api-version=1", "is not on https://res.cognitiveservices.azure.com"),
        (f"http://res.cognitiveservices.azure.com{PATH}?api-version=1", "is not on https://"),
        (f"{BASE}:8443{PATH}?api-version=1", "is not on"),
    ],
)
def test_a_status_url_that_cannot_be_one_job_is_refused_naming_why(url: str, words: str) -> None:
    with pytest.raises(NotOneJob) as caught:
        canonical_status_url(AZURE, url)
    assert words in str(caught.value)
    refused = check(WatchRequest(AZURE, None, status_location=url))
    assert isinstance(refused, Refuse) and refused.kind is Refusal.INVALID
    assert refused.problems[0].field == "status_location" and words in refused.message


def test_a_percent_escape_that_is_not_unreserved_is_kept_in_upper_case_hex() -> None:
    url = f"{BASE}/ops/a%2fb%3A?api-version=v%2b1"
    assert canonical_status_url(AZURE, url) == f"{BASE}/ops/a%2Fb%3A?api-version=v%2B1"


def test_the_contract_origin_keeps_its_own_spelling_so_the_credential_still_goes_there() -> None:
    upper = resolve_contract("azure-operation", {"base_url": "https://Res.Example.com"})
    canonical = canonical_status_url(upper, f"https://res.example.COM{PATH}?api-version=1")
    assert canonical.startswith("https://Res.Example.com/")


GITHUB = resolve_contract("github-actions-run", {"repo": "acme/app"})
GITLAB = resolve_contract("gitlab-pipeline", {"project": "123"})


@pytest.mark.parametrize("contract", [GITHUB, GITLAB], ids=["github", "gitlab"])
@pytest.mark.parametrize("given", ["42", "042", "+42", "42.0", "0042.00"])
def test_numeric_ids_a_provider_reads_alike_are_one_id(contract: Contract, given: str) -> None:
    assert canonical_job_id(contract, given) == "42"
    assert WatchRequest(contract, given).job_id == "42"


def test_a_json_number_is_the_id_it_names_under_an_integer_contract() -> None:
    assert WatchRequest(GITHUB, 42).job_id == "42"  # type: ignore[arg-type]
    refused = check(WatchRequest(GITHUB, -42))  # type: ignore[arg-type]
    assert isinstance(refused, Refuse) and "whole number" in refused.message
    assert check(WatchRequest(resolve_contract("openai-batch"), 42)) is not None  # type: ignore[arg-type]


@pytest.mark.parametrize("given", ["42.5", "-42", "4_2", "4e1", "0x2a", " 42", "٤٢", "forty-two", "", "42.", "+"])
def test_a_job_id_that_is_not_a_whole_number_is_refused_naming_the_field(given: str) -> None:
    with pytest.raises(NotOneJob, match="whole number"):
        canonical_job_id(GITHUB, given)
    refused = check(WatchRequest(GITHUB, given))
    assert isinstance(refused, Refuse) and refused.kind is Refusal.INVALID
    assert refused.problems[0].field == "job_id"
    if given.strip():
        assert "whole number" in refused.message and "job_id_type" in refused.message


def test_the_stored_job_id_is_the_canonical_one_and_a_respelling_resumes_it() -> None:
    created = admit(WatchRequest(GITHUB, "042", agent=True), None, [], T0, token="t")
    assert isinstance(created, Create) and created.record.job_id == "42"
    assert GITHUB.status_url_for(created.record.job_id).endswith("/actions/runs/42")
    again = admit(WatchRequest(GITHUB, "+42.0", agent=True), None, [created.record], T0, token="u")
    assert isinstance(again, Resume) and again.record is created.record


def test_a_contract_without_the_keys_keeps_every_id_as_given() -> None:
    contract = resolve_contract("openai-batch")
    assert WatchRequest(contract, "Batch_042").job_id == "Batch_042"
    assert canonical_job_id(contract, "Batch_042") == "Batch_042"


STATUS_HANDLES = """\
name = "ops"
status_url = "https://ops.example/v1/{job_id:path}"
status_url_handles = true
[states]
pending = ["running"]
success = ["done"]
failure = ["failed"]
[fields]
state = "state"
"""


def test_without_identity_query_only_what_rfc_3986_calls_equivalent_is_normalised() -> None:
    """A provider that has not said its status URLs are identities may read `/x/`, `c=` or the order (a Django
    `/x/` answers `/x` with a redirect): only case, escapes of unreserved characters and the default port go."""
    contract = parse_contract(STATUS_HANDLES)
    url = "HTTPS://OPS.example:443/v1/%6Fps/7/?b=%2f&a=1&c="
    assert canonical_status_url(contract, url) == "https://ops.example/v1/ops/7/?b=%2F&a=1&c="
    assert status_location_problem(contract, url) is None


@pytest.mark.parametrize(
    ("table", "words"),
    [
        ('[status]\nidentity_query = "api-version"\n', "must be a list"),
        ('[status]\nidentity_query = ["a b"]\n', "letters, digits"),
        ('[status]\nidentity_query = ["a", "a"]\n', "twice"),
        ('[status]\npath_case = "lower"\n', "'sensitive' or 'insensitive'"),
    ],
)
def test_malformed_identity_keys_are_refused_at_load(table: str, words: str) -> None:
    with pytest.raises(ContractError, match=words):
        parse_contract(STATUS_HANDLES + table)


def test_identity_query_needs_a_contract_that_takes_status_urls() -> None:
    text = STATUS_HANDLES.replace("status_url_handles = true\n", "") + '[status]\nidentity_query = ["v"]\n'
    with pytest.raises(ContractError, match="status_url_handles = true"):
        parse_contract(text)


def test_job_id_type_is_string_or_integer() -> None:
    text = STATUS_HANDLES.replace('state = "state"', 'state = "state"\njob_id_type = "number"')
    with pytest.raises(ContractError, match=r"\[fields\]\.job_id_type: must be 'string' or 'integer'"):
        parse_contract(text)


def test_the_identity_keys_join_the_fingerprint_only_when_used() -> None:
    plain = parse_contract(STATUS_HANDLES)
    assert parse_contract(STATUS_HANDLES + '[status]\npath_case = "sensitive"\n').fingerprint() == plain.fingerprint()
    for table in ('[status]\npath_case = "insensitive"\n', '[status]\nidentity_query = ["v"]\n'):
        assert parse_contract(STATUS_HANDLES + table).fingerprint() != plain.fingerprint()
    integer = STATUS_HANDLES.replace('state = "state"', 'state = "state"\njob_id_type = "integer"')
    assert parse_contract(integer).fingerprint() != plain.fingerprint()


def test_agent_max_operations_is_a_whole_number_of_at_least_one_outside_the_fingerprint() -> None:
    plain = parse_contract(STATUS_HANDLES)
    assert plain.agent_max_operations == 20
    three = parse_contract(STATUS_HANDLES + "[agent]\nmax_operations = 3\n")
    assert three.agent_max_operations == 3 and three.fingerprint() == plain.fingerprint()  # a cap, not a meaning
    for bad, words in (("0", "must be between 1 and"), ('"3"', "must be a whole number")):
        with pytest.raises(ContractError, match=rf"\[agent\]\.max_operations: {words}"):
            parse_contract(STATUS_HANDLES + f"[agent]\nmax_operations = {bad}\n")
