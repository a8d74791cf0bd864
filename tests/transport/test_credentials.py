"""pollwarden.transport.credentials: every source and kind of [auth], with real subprocesses and files, and SigV4
checked
against AWS's published Signature Version 4 test suite.

The SigV4 vectors are copied from botocore's copy of the suite, tests/unit/auth/aws4_testsuite/ in
github.com/boto/botocore (commit 0e6e2404b85dc336dd2889814e089bde7d1a4c55), which comes from
https://github.com/awslabs/aws-c-auth/tree/v0.3.15/tests/aws-sig-v4-test-suite (Apache License 2.0):
`get-vanilla`, `get-vanilla-with-session-token` and `post-x-www-form-urlencoded`, each with its `.authz`.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from pollwarden.core import parse_contract
from pollwarden.core.contract.auth import Auth, AuthKind
from pollwarden.core.contract.parse import Contract
from pollwarden.core.observe import FailureKind, Response, TransportFailure
from pollwarden.transport.credentials import Credential, CredentialError, resolve_secret, sign_sigv4
from pollwarden.transport.fake import FakeTransport, Reply
from pollwarden.transport.http import StatusClient
from tests.conftest import process_alive
from tests.core.support import contract_text

VECTOR_DATE = datetime(2015, 8, 30, 12, 36, 0, tzinfo=UTC)
VECTOR_AUTH = Auth(
    kind=AuthKind.SIGV4,
    service="service",
    region="us-east-1",
    access_key_env="AK",
    secret_key_env="SK",
)
VECTOR_KEYS = {"access_key": "AKIDEXAMPLE", "secret_key": "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"}
SESSION_TOKEN = "6e86291e8372ff2a2260956d9b8aae1d763fbf315fa00fa31553b73ebf194267"
CREDENTIAL = "Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request"


def test_sigv4_get_vanilla_vector() -> None:
    signed = sign_sigv4(VECTOR_AUTH, VECTOR_KEYS, "GET", "https://example.amazonaws.com/", {}, None, VECTOR_DATE)
    assert signed["X-Amz-Date"] == "20150830T123600Z"
    assert signed["Authorization"] == (
        f"AWS4-HMAC-SHA256 {CREDENTIAL}, SignedHeaders=host;x-amz-date,"
        " Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"
    )


def test_sigv4_session_token_vector_sends_the_token_header() -> None:
    keys = {**VECTOR_KEYS, "session_token": SESSION_TOKEN}
    signed = sign_sigv4(VECTOR_AUTH, keys, "GET", "https://example.amazonaws.com/", {}, None, VECTOR_DATE)
    assert signed["X-Amz-Security-Token"] == SESSION_TOKEN
    assert signed["Authorization"] == (
        f"AWS4-HMAC-SHA256 {CREDENTIAL}, SignedHeaders=host;x-amz-date;x-amz-security-token,"
        " Signature=07ec1639c89043aa0e3e2de82b96708f198cceab042d4a97044c66dd9f74e7f8"
    )


def test_sigv4_post_form_vector_signs_the_body() -> None:
    headers = {"Content-Type": "application/x-www-form-urlencoded"}
    url = "https://example.amazonaws.com/"
    signed = sign_sigv4(VECTOR_AUTH, VECTOR_KEYS, "POST", url, headers, b"Param1=value1", VECTOR_DATE)
    assert signed["Authorization"] == (
        f"AWS4-HMAC-SHA256 {CREDENTIAL}, SignedHeaders=content-type;host;x-amz-date,"
        " Signature=ff11897932ad3f4e8b18135d722051e5ac45fc38421b1da7b9d196a0fe09473a"
    )
    other = sign_sigv4(VECTOR_AUTH, VECTOR_KEYS, "POST", url, headers, b"Param1=value2", VECTOR_DATE)
    assert other["Authorization"] != signed["Authorization"]  # the body is part of the signature


def _contract(auth: str, url: str = "http://127.0.0.1:1") -> Contract:
    text = contract_text().replace("[states]", f"[auth]\n{auth}\n[states]", 1)
    return parse_contract(text.replace("https://provider.example", url), source="t.toml")


def test_sigv4_through_the_client_signs_exactly_what_the_transport_sends() -> None:
    contract = _contract(
        'kind = "sigv4"\nservice = "textract"\nregion = "us-east-1"\naccess_key_env = "AK"\n'
        'secret_key_env = "SK"\nsession_token_env = "ST"',
        url="http://127.0.0.1:8443",
    )
    env = {"AK": "AKIDEXAMPLE", "SK": VECTOR_KEYS["secret_key"], "ST": SESSION_TOKEN}
    credential = resolve_secret(contract, env)
    # a provider that echoes the secret key and the session token: neither may reach anything downstream
    echo = json.dumps({"state": "running", "key": env["SK"], "token": SESSION_TOKEN}).encode()
    fake = FakeTransport(lambda request: Reply(200, {"x-echo": SESSION_TOKEN}, echo))
    with StatusClient(contract, credential, clock=lambda: VECTOR_DATE, transport=fake) as client:
        body = b'{"JobId": "j-1"}'
        extra = {"X-Amz-Target": "Textract.GetDocumentAnalysis", "Content-Type": "application/x-amz-json-1.1"}
        answer = client.send("POST", "http://127.0.0.1:8443/v1/jobs/j-1", body=body, extra_headers=extra)
    assert isinstance(answer, Response)
    assert env["SK"].encode() not in answer.body and SESSION_TOKEN.encode() not in answer.body
    assert answer.headers["x-echo"] == "[secret]"
    sent = dict(fake.requests[0].headers)
    assert sent["X-Amz-Security-Token"] == SESSION_TOKEN and sent["X-Amz-Date"] == "20150830T123600Z"
    assert "x-amz-target" in sent["Authorization"] and "host" in sent["Authorization"]
    # the server's side: the same signature from the request as it arrived (its Host is the URL's netloc)
    unsigned = {k: v for k, v in sent.items() if k not in {"Authorization", "X-Amz-Date", "X-Amz-Security-Token"}}
    keys = {"access_key": env["AK"], "secret_key": env["SK"], "session_token": SESSION_TOKEN}
    assert contract.auth is not None
    again = sign_sigv4(contract.auth, keys, "POST", fake.requests[0].url, unsigned, body, VECTOR_DATE)
    assert again["Authorization"] == sent["Authorization"]
    assert VECTOR_KEYS["secret_key"] not in repr(fake.requests[0])


@pytest.mark.parametrize("unset", [None, "", "\n"])
def test_an_optional_session_token_that_is_not_set_signs_with_the_key_pair_alone(unset: str | None) -> None:
    contract = _contract(
        'kind = "sigv4"\nservice = "textract"\nregion = "us-east-1"\naccess_key_env = "AK"\n'
        'secret_key_env = "SK"\nsession_token_env = "ST"\nsession_token_optional = true',
        url="http://127.0.0.1:8443",
    )
    env = {"AK": "AKIDEXAMPLE", "SK": VECTOR_KEYS["secret_key"], **({} if unset is None else {"ST": unset})}
    fake = FakeTransport(lambda request: Reply(200, {}, b'{"state": "running"}'))
    with StatusClient(contract, resolve_secret(contract, env), clock=lambda: VECTOR_DATE, transport=fake) as client:
        client.send("GET", "http://127.0.0.1:8443/v1/jobs/j-1")
    sent = dict(fake.requests[0].headers)
    assert "X-Amz-Security-Token" not in sent and sent["Authorization"].startswith("AWS4-HMAC-SHA256 ")
    # ... and one that is set is sent and signed as before
    with_token = resolve_secret(contract, {**env, "ST": SESSION_TOKEN})
    with StatusClient(contract, with_token, clock=lambda: VECTOR_DATE, transport=fake) as client:
        client.send("GET", "http://127.0.0.1:8443/v1/jobs/j-1")
    assert dict(fake.requests[1].headers)["X-Amz-Security-Token"] == SESSION_TOKEN


def test_a_required_session_token_that_is_not_set_is_refused_naming_it() -> None:
    contract = _contract(
        'kind = "sigv4"\nservice = "textract"\nregion = "us-east-1"\naccess_key_env = "AK"\n'
        'secret_key_env = "SK"\nsession_token_env = "ST"'
    )
    with pytest.raises(CredentialError, match="environment variable ST"):
        resolve_secret(contract, {"AK": "AKIDEXAMPLE", "SK": VECTOR_KEYS["secret_key"]})


def test_missing_botocore_names_the_extra() -> None:
    code = (
        "import sys; sys.modules['botocore'] = None; sys.modules['botocore.auth'] = None\n"
        "from tests.transport.test_credentials import _contract\n"
        "from pollwarden.transport.credentials import CredentialError, resolve_secret\n"
        'c = _contract(\'kind = "sigv4"\\nservice = "s3"\\nregion = "us-east-1"\\naccess_key_env = "A"\\n'
        'secret_key_env = "S"\')\n'
        "try:\n    resolve_secret(c, {'A': 'akid', 'S': 'secret'})\nexcept CredentialError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert "pip install 'pollwarden[aws]'" in out.stdout


def test_basic_sends_base64_of_user_and_password_and_scrubs_both_forms() -> None:
    contract = _contract('kind = "basic"\nusername_env = "U"\npassword_env = "P"')
    credential = resolve_secret(contract, {"U": "aladdin", "P": "opensesame"})
    assert credential is not None
    headers: dict[str, str] = {}
    credential.apply("GET", "http://127.0.0.1:1/x", headers, None, VECTOR_DATE)
    assert headers["Authorization"] == "Basic YWxhZGRpbjpvcGVuc2VzYW1l"  # RFC 7617's example pair
    scrub = credential.scrubber()
    assert scrub.text("pw opensesame, b64 YWxhZGRpbjpvcGVuc2VzYW1l") == "pw [secret], b64 [secret]"
    with pytest.raises(CredentialError, match="':'"):
        resolve_secret(contract, {"U": "a:b", "P": "opensesame"})


TOKEN_SCRIPT = """\
import pathlib, sys
counter = pathlib.Path(sys.argv[1])
n = int(counter.read_text()) + 1 if counter.exists() else 1
counter.write_text(str(n))
print(f"token-number-{n}")
"""


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _command_credential(tmp_path: Path, clock: Clock) -> tuple[Credential, Path]:
    script = tmp_path / "token.py"
    script.write_text(TOKEN_SCRIPT, encoding="utf-8")
    counter = tmp_path / "calls"
    # a distinct argv per test: the cache is per process, keyed by the source
    auth = Auth(
        token_command=(sys.executable, str(script), str(counter)),
        token_ttl=timedelta(seconds=60),
    )
    return Credential("t", auth, {}, monotonic=clock), counter


def _sent(credential: Credential) -> str:
    headers: dict[str, str] = {}
    credential.apply("GET", "http://127.0.0.1:1/x", headers, None, VECTOR_DATE)
    return headers["Authorization"]


def test_a_command_token_is_reused_for_its_ttl_then_fetched_again(tmp_path: Path) -> None:
    clock = Clock()
    credential, counter = _command_credential(tmp_path, clock)
    assert _sent(credential) == "Bearer token-number-1"
    clock.now += 59
    assert _sent(credential) == "Bearer token-number-1"
    clock.now += 2
    assert _sent(credential) == "Bearer token-number-2"
    credential.invalidate()
    assert _sent(credential) == "Bearer token-number-3"
    assert counter.read_text() == "3"
    # every token ever sent stays known to the scrubber: an answer may echo an old one
    assert credential.scrubber().text("token-number-1 token-number-3") == "[secret] [secret]"


def test_a_token_file_is_read_again_after_its_ttl(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("first-token-value\n", encoding="utf-8")
    clock = Clock()
    credential = Credential("t", Auth(token_file=str(token), token_ttl=timedelta(seconds=10)), {}, monotonic=clock)
    assert _sent(credential) == "Bearer first-token-value"
    token.write_text("second-token-value\n", encoding="utf-8")
    assert _sent(credential) == "Bearer first-token-value"
    clock.now += 11
    assert _sent(credential) == "Bearer second-token-value"
    token.unlink()
    credential.invalidate()
    with pytest.raises(CredentialError, match="does not exist"):
        _sent(credential)


@pytest.mark.parametrize(
    ("script", "complaint"),
    [
        ("import sys\nprint('leaked-output-value')\nsys.exit(7)\n", "exited with status 7"),
        ("print('two\\nlines\\n')\n", "printable ASCII"),
        ("print('caf\\u00e9-token')\n", "printable ASCII"),
        ("pass\n", "not set or empty"),
        ("import time\ntime.sleep(30)\n", "did not finish within 0.5 s"),
    ],
    ids=["exit-status", "two-lines", "non-ascii", "empty", "timeout"],
)
def test_a_failing_command_names_argv0_and_never_its_output(tmp_path: Path, script: str, complaint: str) -> None:
    path = tmp_path / "cmd.py"
    path.write_text(script, encoding="utf-8")
    # Only the sleeping command is meant to outlast its timeout; the others get one no interpreter start-up on a
    # loaded machine reaches, so each fails for its own reason and never for the clock.
    timeout = 0.5 if complaint.startswith("did not finish") else 60
    credential = Credential("t", Auth(token_command=(sys.executable, str(path))), {}, command_timeout=timeout)
    with pytest.raises(CredentialError) as info:
        credential.prime()
    message = str(info.value)
    assert complaint in message and Path(sys.executable).name in message
    assert "leaked-output-value" not in message and "two" not in message and "caf" not in message


@pytest.mark.parametrize("through", ["missing-dir", "a-file"])
def test_a_command_that_does_not_exist_is_named(tmp_path: Path, through: str) -> None:
    if through == "a-file":
        (tmp_path / through).write_text("not a directory", encoding="utf-8")
    credential = Credential("t", Auth(token_command=(str(tmp_path / through / "print-token"), "--x")), {})
    with pytest.raises(CredentialError, match="'print-token' was not found"):
        credential.prime()


def test_a_failing_refresh_mid_watch_is_a_local_failure_not_a_traceback(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("file-token-value-1\n", encoding="utf-8")
    contract = _contract(f'token_file = "{token}"')
    credential = resolve_secret(contract, {})
    fake = FakeTransport(lambda request: Reply(401, {}, b"{}"))
    with StatusClient(contract, credential, clock=lambda: VECTOR_DATE, transport=fake) as client:
        first = client.fetch("j")
        token.unlink()
        second = client.fetch("j")
    assert isinstance(first, Response) and first.status == 401
    assert isinstance(second, TransportFailure) and second.kind is FailureKind.LOCAL
    assert "does not exist" in second.message and len(fake.requests) == 1


RUNAWAY = """
import os, sys
progress = sys.argv[1]
chunk = b"#" * 65536
for n in range(1, 1025):  # 64 MiB, each chunk counted once the pipe took it
    os.write(1, chunk)
    # Renamed into place: a kill between truncating and writing would leave the test an empty count.
    with open(progress + ".tmp", "w") as out:
        out.write(str(n * len(chunk)))
    os.replace(progress + ".tmp", progress)
"""


def test_a_command_that_prints_too_much_is_read_only_to_its_cap_and_stopped(tmp_path: Path) -> None:
    """Its output was read whole before the cap refused it (1 GiB of it peaked at 2 GiB of memory): now at most
    the cap and one byte are read, and the command is killed there, so it never gets to write the rest."""
    script, progress = tmp_path / "runaway.py", tmp_path / "written"
    script.write_text(RUNAWAY, encoding="utf-8")
    credential = Credential("t", Auth(token_command=(sys.executable, str(script), str(progress))), {})
    with pytest.raises(CredentialError, match="printed more than 65536 bytes"):
        credential.prime()
    written = int(progress.read_text()) if progress.exists() else 0
    assert written < 1 << 20, f"the command wrote {written} bytes: its output was read on past the cap"


DAEMONIZING = """
import os, pathlib, sys, time
print("tok-DAEMON-123", flush=True)
if os.fork() == 0:  # a helper left behind that holds the command's stdout open
    pathlib.Path(sys.argv[1]).write_text(str(os.getpid()))
    time.sleep(60)
    pathlib.Path(sys.argv[2]).touch()
    os._exit(0)
"""


def test_a_command_whose_helper_keeps_its_output_open_is_stopped_at_its_timeout_helper_and_all(tmp_path: Path) -> None:
    """The command exited, but a process it left behind kept its stdout open: the read waited for that helper to
    end, past the command's timeout (subprocess.run kills only the command, then waits for the pipe). The whole
    process group goes at the timeout now; the helper never gets to finish its sleep."""
    script, pid_file, finished = tmp_path / "daemon.py", tmp_path / "helper.pid", tmp_path / "helper-finished"
    script.write_text(DAEMONIZING, encoding="utf-8")
    auth = Auth(token_command=(sys.executable, str(script), str(pid_file), str(finished)))
    # 5 s: the helper must exist before the timeout (1 s, a loaded machine's start-up of the interpreter outlasted
    # it, and no helper was left to find), and still be asleep at it.
    credential = Credential("t", auth, {}, command_timeout=5.0)
    with pytest.raises(CredentialError, match="did not finish within 5 s"):
        credential.prime()
    helper = int(pid_file.read_text())
    deadline = time.monotonic() + 30  # a guard: a SIGKILL is delivered at once, but ends a process a moment later
    while process_alive(helper):
        assert time.monotonic() < deadline, "the helper the command left behind is still running"
        time.sleep(0.01)
    assert not finished.exists()
