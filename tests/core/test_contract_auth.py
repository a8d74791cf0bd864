"""`[auth]` kinds (spec part 8): header from an env var, a command or a file; Basic; SigV4. The account names the
source and never a value; today's header+secret_env contracts keep their account and fingerprint."""

from __future__ import annotations

from datetime import timedelta

import pytest

from pollwarden.core import parse_contract
from pollwarden.core.contract.auth import AuthKind
from pollwarden.core.contract.parse import ContractError

from .support import contract_text


def _with(auth: str) -> str:
    return contract_text().replace("[states]", f"[auth]\n{auth}\n[states]", 1)


def test_today_s_header_contract_keeps_its_account_and_fingerprint() -> None:
    contract = parse_contract(_with('secret_env = "EXPORTS_TOKEN"'), source="t.toml")
    assert contract.account == "env:EXPORTS_TOKEN via Authorization"
    # computed by the code before part 8 from the same text (main at 4019f7e)
    assert contract.fingerprint() == "d8a3e1ec3646363a1cf561b2766cf3610c518495a8ad45a10d88a78376676f4b"


def test_kinds_and_their_accounts() -> None:
    command = parse_contract(_with('token_command = ["gcloud", "auth", "print-access-token"]'), source="t.toml")
    assert command.auth is not None and command.auth.refreshable
    assert command.account == "command:gcloud auth print-access-token via Authorization"
    assert command.auth.token_ttl == timedelta(minutes=5)
    token_file = parse_contract(_with('token_file = "/run/secrets/token"\ntoken_ttl = "50m"'), source="t.toml")
    assert token_file.account == "file:/run/secrets/token via Authorization"
    assert token_file.auth is not None and token_file.auth.token_ttl == timedelta(minutes=50)
    basic = parse_contract(_with('kind = "basic"\nusername_env = "U"\npassword_env = "P"'), source="t.toml")
    assert basic.auth is not None and basic.auth.kind is AuthKind.BASIC and not basic.auth.refreshable
    assert basic.account == "basic:env:U,env:P via Authorization"
    sigv4 = parse_contract(
        _with(
            'kind = "sigv4"\nservice = "textract"\nregion = "us-east-1"\naccess_key_env = "AWS_ACCESS_KEY_ID"\n'
            'secret_key_env = "AWS_SECRET_ACCESS_KEY"\nsession_token_env = "AWS_SESSION_TOKEN"'
        ),
        source="t.toml",
    )
    assert sigv4.auth is not None and sigv4.auth.env_names == (
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
    )
    assert (
        sigv4.account
        == "sigv4:textract/us-east-1 env:AWS_ACCESS_KEY_ID,env:AWS_SECRET_ACCESS_KEY,env:AWS_SESSION_TOKEN"
    )
    assert len({c.fingerprint() for c in (command, token_file, basic, sigv4)}) == 4


BAD = [
    ('secret_env = "T"\ntoken_file = "/t"', "[auth].token_file", "not both secret_env and token_file"),
    ('token_command = ["a"]\ntoken_file = "/t"', "[auth].token_file", "one credential source"),
    ('header = "X-Key"', "[auth].secret_env", "required key is missing"),
    ('token_command = "gcloud auth print-access-token"', "[auth].token_command", "list of arguments"),
    ("token_command = []", "[auth].token_command", "non-empty list"),
    ('token_command = [""]', "[auth].token_command", "non-empty list"),
    ('token_command = ["a", 1]', "[auth].token_command", "non-empty list"),
    ('token_command = ["a\\u0000b"]', "[auth].token_command", "NUL"),
    ('token_file = "relative/token"', "[auth].token_file", "absolute path"),
    ('secret_env = "T"\ntoken_ttl = "5m"', "[auth].token_ttl", "only to token_command"),
    ('token_file = "/t"\ntoken_ttl = "0s"', "[auth].token_ttl", "longer than zero"),
    ('token_file = "/t"\ntoken_ttl = "25h"', "[auth].token_ttl", "at most 24h"),
    ('kind = "oauth"', "[auth].kind", "'header', 'basic' or 'sigv4'"),
    ('kind = "basic"\nusername_env = "U"', "[auth].password_env", "required"),
    (
        'kind = "basic"\nusername_env = "U"\npassword_env = "P"\nsecret_env = "T"',
        "[auth].secret_env",
        "kind = 'header'",
    ),
    ('kind = "sigv4"\nregion = "us-east-1"\naccess_key_env = "A"\nsecret_key_env = "S"', "[auth].service", "required"),
    ('kind = "sigv4"\nservice = "textract"\naccess_key_env = "A"\nsecret_key_env = "S"', "[auth].region", "required"),
    ('kind = "sigv4"\nservice = "Text Ract"\nregion = "us-east-1"', "[auth].service", "signing name"),
    ('kind = "sigv4"\nservice = "s3"\nregion = "us east"\naccess_key_env = "A"', "[auth].region", "region"),
    ('kind = "sigv4"\nservice = "s3"\nregion = "us-east-1"\nsecret_key_env = "S"', "[auth].access_key_env", "required"),
    (
        'kind = "sigv4"\nservice = "s3"\nregion = "eu-west-1"\naccess_key_env = "A"\n'
        'secret_key_env = "S"\nheader = "X"',
        "[auth].header",
        "kind = 'header'",
    ),
    ('kind = "header"\nservice = "s3"', "[auth].service", "kind = 'sigv4'"),
    (
        'kind = "sigv4"\nservice = "s3"\nregion = "eu-west-1"\naccess_key_env = "A"\nsecret_key_env = "S"\n'
        "session_token_optional = true",
        "[auth].session_token_optional",
        "name session_token_env too",
    ),
    (
        'kind = "sigv4"\nservice = "s3"\nregion = "eu-west-1"\naccess_key_env = "A"\nsecret_key_env = "S"\n'
        'session_token_env = "T"\nsession_token_optional = "yes"',
        "[auth].session_token_optional",
        "",
    ),
    ('secret_env = "T"\nsession_token_optional = true', "[auth].session_token_optional", "kind = 'sigv4'"),
    # The credential in a framing header would be sent as the Host (routing it to whatever virtual host that
    # names, and into every access log) or as a Transfer-Encoding / Content-Length (a smuggling-shaped request):
    # the same headers [headers] refuses.
    ('secret_env = "T"\nheader = "Host"\nscheme = ""', "[auth].header", "framing"),
    ('secret_env = "T"\nheader = "transfer-encoding"', "[auth].header", "framing"),
    ('token_file = "/t"\nheader = "Content-Length"', "[auth].header", "framing"),
    ('secret_env = "T"\nheader = "Connection"', "[auth].header", "framing"),
]


@pytest.mark.parametrize(("auth", "key", "complaint"), BAD, ids=[f"{k}:{c}" for _, k, c in BAD])
def test_malformed_auth_is_refused_naming_the_key(auth: str, key: str, complaint: str) -> None:
    with pytest.raises(ContractError) as info:
        parse_contract(_with(auth), source="auth.toml")
    message = str(info.value)
    assert message.startswith("auth.toml: ") and key in message and complaint in message, message


def test_an_optional_session_token_says_so_in_the_account_only_when_used() -> None:
    """Long-term IAM keys have no session token (issue 24): `session_token_optional = true` signs with the pair
    alone when the variable is unset; a contract without the key keeps its account and fingerprint."""
    sigv4 = (
        'kind = "sigv4"\nservice = "textract"\nregion = "us-east-1"\naccess_key_env = "A"\nsecret_key_env = "S"\n'
        'session_token_env = "T"'
    )
    required = parse_contract(_with(sigv4), source="t.toml")
    optional = parse_contract(_with(sigv4 + "\nsession_token_optional = true"), source="t.toml")
    assert required.account == "sigv4:textract/us-east-1 env:A,env:S,env:T"
    assert optional.account == "sigv4:textract/us-east-1 env:A,env:S,env:T if set"
    assert optional.auth is not None and optional.auth.env_names == ("A", "S", "T")  # still scrubbed when set
    assert required.fingerprint() != optional.fingerprint()
