"""Files a contract names on this machine (issue 24): `[tls] ca_file`, `[auth] token_file` from a var, and the
`*_file` vars that fill them, with an exit-2 message for every malformed one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pollwarden.core.contract.parse import Contract, ContractError, parse_contract
from tests.conftest import run_cli

PLAIN = """
name = "files"
status_url = "https://api.example.com/jobs/{job_id}"

[states]
pending = ["running"]
success = ["done"]
failure = ["failed"]

[fields]
state = "status"
"""

BASE = (
    PLAIN.replace("https://api.example.com", "{base_url}")
    + """
[vars]
base_url = "https://api.example.com"
token_file = "/var/run/secrets/example/token"
ca_file = "/var/run/secrets/example/ca.crt"

[auth]
token_file = "{token_file}"

[tls]
ca_file = "{ca_file}"
"""
)


def parse(text: str = BASE, **given: str) -> Contract:
    return parse_contract(text, source="t.toml", vars=given)


def test_file_vars_fill_the_token_file_and_the_ca_bundle() -> None:
    contract = parse()
    assert contract.auth is not None and contract.auth.token_file == "/var/run/secrets/example/token"
    assert contract.ca_file == "/var/run/secrets/example/ca.crt"
    moved = parse(token_file="/run/other/token", ca_file="/etc/cluster/ca.pem")
    assert moved.auth is not None and moved.auth.token_file == "/run/other/token"
    assert moved.ca_file == "/etc/cluster/ca.pem"
    # Which bundle is trusted and which file the token comes from are part of the poll's meaning.
    assert moved.fingerprint() != contract.fingerprint()
    assert parse(ca_file="/etc/cluster/ca.pem").fingerprint() != contract.fingerprint()
    stored = json.loads(moved.source_text)
    assert stored["vars"]["ca_file"] == "/etc/cluster/ca.pem"  # a worker and a resume read the same files


def test_a_contract_without_tls_keeps_its_fingerprint() -> None:
    plain = parse(PLAIN)
    with_tls = parse(PLAIN + '\n[tls]\nca_file = "/etc/ca.pem"\n')
    assert plain.ca_file is None and with_tls.ca_file == "/etc/ca.pem"
    assert plain.fingerprint() != with_tls.fingerprint()
    assert "tls" not in plain.source_text


@pytest.mark.parametrize(
    ("tls", "words"),
    [
        pytest.param('tls = "/etc/ca.pem"', "tls: must be a table like [tls], got str", id="not-a-table"),
        pytest.param("[tls]", "[tls].ca_file: required key is missing", id="empty-table"),
        pytest.param('[tls]\nca = "/etc/ca.pem"', "[tls].ca: unknown key; allowed here: ca_file", id="unknown-key"),
        pytest.param("[tls]\nca_file = 3", "[tls].ca_file: must be a string, got int", id="not-a-string"),
        pytest.param('[tls]\nca_file = ""', "[tls].ca_file: must not be empty", id="empty"),
        pytest.param(
            '[tls]\nca_file = "certs/ca.pem"', "[tls].ca_file: must be an absolute path on one line", id="relative"
        ),
        pytest.param(
            '[tls]\nca_file = "/etc/ca.pem\\n/x"', "[tls].ca_file: must be an absolute path on one line", id="two-lines"
        ),
        pytest.param(
            '[tls]\nca_file = "{ca}"', "[tls].ca_file: {ca} names no declared var and no placeholder", id="unknown-var"
        ),
    ],
)
def test_a_malformed_tls_table_is_named(tls: str, words: str) -> None:
    line = 'status_url = "https://api.example.com/jobs/{job_id}"\n'
    text = PLAIN.replace(line, f"{line}{tls}\n")  # before [states]: a top-level key stays top-level
    with pytest.raises(ContractError) as raised:
        parse(text)
    assert words in str(raised.value), str(raised.value)


@pytest.mark.parametrize(
    ("given", "words"),
    [
        pytest.param({"token_file": "token"}, "var token_file: 'token' must be an absolute path", id="relative"),
        pytest.param({"ca_file": "/etc/../ca.pem"}, "var ca_file: holds '..'", id="dot-dot"),
        pytest.param({"ca_file": "/etc/ca\n.pem"}, "var ca_file: holds a control character", id="control"),
        pytest.param(
            {"ca_file": "/" + "a" * 5000}, "must be an absolute path (starting with '/') of at most", id="long"
        ),
    ],
)
def test_a_file_var_is_an_absolute_path(given: dict[str, str], words: str) -> None:
    with pytest.raises(ContractError) as raised:
        parse(**given)
    assert words in str(raised.value), str(raised.value)


@pytest.mark.parametrize(
    "where",
    [
        pytest.param('status_url = "{base_url}/jobs/{job_id}{token_file}"', id="status-url"),
        pytest.param('[headers]\nX-Where = "{ca_file}"', id="header"),
    ],
)
def test_a_file_var_goes_only_where_a_file_is_named(where: str) -> None:
    """A path to the machine's secrets in a URL or a header would tell the provider where they are kept."""
    text = BASE.replace('status_url = "{base_url}/jobs/{job_id}"', where) if where.startswith("status_url") else BASE
    if where.startswith("[headers]"):
        text = text + "\n" + where + "\n"
    with pytest.raises(ContractError, match=r"names a file on this machine; a \*_file var may be used only in"):
        parse(text)


def test_a_use_file_may_set_tls_and_a_token_file(tmp_path: Path) -> None:
    """`[tls]` is tuned key by key and `[auth]` replaced whole, over a shipped contract (kubernetes-job)."""
    text = (
        'use = "kubernetes-job"\n[vars]\nnamespace = "batch"\n'
        '[tls]\nca_file = "/etc/cluster/ca.pem"\n[auth]\ntoken_file = "/run/tokens/k8s"\ntoken_ttl = "1m"\n'
    )
    contract = parse(text)
    assert contract.ca_file == "/etc/cluster/ca.pem"
    assert contract.auth is not None and contract.auth.token_file == "/run/tokens/k8s"
    by_vars = parse('use = "kubernetes-job"\n[vars]\nnamespace = "batch"\nca_file = "/etc/c.pem"\n')
    assert by_vars.ca_file == "/etc/c.pem"
    with pytest.raises(ContractError, match=r"\[tls\].ca_file: must be an absolute path on one line"):
        parse('use = "kubernetes-job"\n[vars]\nnamespace = "b"\n[tls]\nca_file = "ca.pem"\n')


@pytest.mark.slow  # starts a process: `make test` only (tests/conftest.py FAST)
def test_malformed_files_are_exit_2_on_the_command_line_and_create_nothing(home: Path, tmp_path: Path) -> None:
    cases = [
        ("[tls]\nca_file = 'ca.pem'\n", "[tls].ca_file: must be an absolute path on one line"),
        ("[tls]\nca_file = '/x'\nverify = false\n", "[tls].verify: unknown key; allowed here: ca_file"),
    ]
    for index, (extra, words) in enumerate(cases):
        path = tmp_path / f"c{index}.toml"
        path.write_text(PLAIN + extra, encoding="utf-8")
        ran = run_cli("watch", "--contract", str(path), "--job", "j1", home=home)
        assert ran.code == 2, ran.stderr
        assert words in ran.stderr and "Traceback" not in ran.stderr, ran.stderr
    ran = run_cli(
        "watch", "--contract", "kubernetes-job", "--var", "namespace=n", "--var", "token_file=token",
        "--job", "pi", home=home,
    )  # fmt: skip
    assert ran.code == 2 and "var token_file: 'token' must be an absolute path" in ran.stderr, ran.stderr
    assert not home.exists() or list(home.iterdir()) == []  # no database, no keys: nothing was created
