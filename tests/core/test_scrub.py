"""The one definition of "the credential in any form": text, bytes and JSON values, every encoding an echo uses."""

from __future__ import annotations

import base64
import json
import re
import sys
from urllib.parse import quote

import pytest

from pollwarden.core.scrub import MARK, MIN_SECRET_LENGTH, Scrubber

SECRET = 'sk-live/7f3a+9c1e=DO "NOT" LEAK'


@pytest.mark.parametrize(
    "form",
    [
        SECRET,
        f"Bearer {SECRET}",
        quote(SECRET, safe=""),
        re.sub("%[0-9A-F]{2}", lambda m: m.group().lower(), quote(SECRET, safe="")),
        quote(SECRET, safe="").replace("%", "%25"),
        json.dumps(SECRET)[1:-1],
        base64.b64encode(SECRET.encode()).decode(),
        base64.b64encode(SECRET.encode()).decode().rstrip("="),
        base64.urlsafe_b64encode(SECRET.encode()).decode(),
    ],
    ids=["raw", "scheme", "percent", "percent-lower", "percent-twice", "json-escaped", "b64", "b64-bare", "b64url"],
)
def test_every_form_is_replaced_in_text_and_bytes(form: str) -> None:
    scrub = Scrubber([SECRET], scheme="Bearer")
    text = f"before {form} after"
    assert form not in scrub.text(text) and MARK in scrub.text(text)
    assert form.encode() not in scrub.binary(text.encode()) and MARK.encode() in scrub.binary(text.encode())
    assert scrub.found_in(text) and not scrub.found_in(scrub.text(text))


def test_a_value_read_from_a_file_with_its_newline_is_found_stripped_too() -> None:
    scrub = Scrubber(["tok-123456\n"])
    assert scrub.text("echo: tok-123456.") == f"echo: {MARK}."


def test_basic_credentials_are_found_decoded() -> None:
    token = base64.b64encode(b"alice:correct-horse-battery").decode()
    scrub = Scrubber([token], scheme="Basic")
    assert scrub.text(f"Basic {token}") == MARK
    assert scrub.text("user alice:correct-horse-battery denied") == f"user {MARK} denied"
    assert scrub.text("password correct-horse-battery") == f"password {MARK}"
    assert "alice" in scrub.text("alice logged in")  # the user name alone is not the secret


def test_a_utf8_secret_in_a_latin1_decoded_header_is_found() -> None:
    secret = "cl\u00e9-secr\u00e8te-42"
    scrub = Scrubber([secret])
    assert scrub.text(secret.encode().decode("latin-1")) == MARK


def test_nested_json_values_keys_included() -> None:
    scrub = Scrubber([SECRET])
    value = {"a": [SECRET, {SECRET: 1, "n": 2.5, "t": True, "z": None}], "b": ("x", f"Bearer {SECRET}")}
    cleaned = scrub.value(value)
    assert SECRET not in json.dumps(cleaned)
    assert cleaned["a"][1]["n"] == 2.5 and cleaned["a"][1]["t"] is True and cleaned["a"][1]["z"] is None


def test_longest_form_first_leaves_no_fragment() -> None:
    scrub = Scrubber(["abcd", "abcdefgh"])
    assert scrub.text("xabcdefghx") == f"x{MARK}x"


@pytest.mark.parametrize("values", [[], [None], [""], ["abc"], ["a"]])
def test_empty_and_very_short_values_are_ignored_safely(values: list[str | None]) -> None:
    scrub = Scrubber(values)
    assert not scrub
    assert scrub.text("a b c abc") == "a b c abc"
    assert scrub.binary(b"abc") == b"abc"
    assert MIN_SECRET_LENGTH == 4


def test_a_lone_surrogate_in_a_secret_or_text_never_raises() -> None:
    scrub = Scrubber(["sec\ud800ret"])
    assert scrub.text("x sec\ud800ret y") == f"x {MARK} y"
    assert scrub.binary(b"nothing here") == b"nothing here"


def test_scrubbing_a_large_body_stays_linear() -> None:
    scrub = Scrubber([SECRET], scheme="Bearer")
    body = (b"x" * 1023 + b"\n") * 1024 + SECRET.encode()
    assert scrub.binary(body).endswith(MARK.encode()) and sys.getsizeof(body) > 1_000_000


def test_a_credential_spelled_with_json_escapes_is_scrubbed_and_repeated_keys_survive() -> None:
    """A provider can hide the echo from a byte search: `\\u0073k-...` decodes to the credential."""
    scrubber = Scrubber(["sk-SECRET-123"], scheme="Bearer")
    body = b'{"state":"\\u0073k-SECRET-123","error":{"x":"a\\u0073k-SECRET-123b"},"state":"running"}'
    cleaned = scrubber.binary(body)
    assert b"SECRET" not in cleaned and b"\\u0073k" not in cleaned
    assert cleaned.count(b'"state"') == 2  # the strict parser still sees the repeated key and refuses it
    assert scrubber.binary(b'{"state":"\\u0072unning"}') == b'{"state":"\\u0072unning"}'  # untouched when clean
