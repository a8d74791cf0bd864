"""The one definition of "the credential in any form": text, bytes and JSON values, every encoding an echo uses."""

from __future__ import annotations

import base64
import html
import json
import re
import string
import sys
from urllib.parse import quote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


# --- issue 23: the encodings an echo can still hide in ---------------------------------------------------------

TOKEN = "sk-live-7f3a9c1eDO_NOT_LEAK_01234"


def _undecodable(text: str, secret: bytes) -> bool:
    """No run of base64 left around the marks decodes, at any alignment and in either alphabet, to the secret."""
    for piece in text.split(MARK):
        for run in re.findall(r"[A-Za-z0-9+/_-]+", piece):
            for start in range(4):
                chunk = run[start:]
                chunk = chunk[: len(chunk) - len(chunk) % 4]
                for alphabet in (b"+/", b"-_"):
                    try:
                        decoded = base64.b64decode(chunk.encode(), altchars=alphabet)
                    except ValueError:
                        continue
                    if secret in decoded:
                        return False
    return True


@pytest.mark.parametrize("upper", [False, True])
def test_the_credential_hex_encoded_in_either_case_is_replaced(upper: bool) -> None:
    scrub = Scrubber([TOKEN], scheme="Bearer")
    spelled = TOKEN.encode().hex().upper() if upper else TOKEN.encode().hex()
    assert scrub.text(f"key={spelled};") == f"key={MARK};"
    assert scrub.binary(f'{{"k":"{spelled}"}}'.encode()) == f'{{"k":"{MARK}"}}'.encode()


@pytest.mark.parametrize("schemed", [False, True], ids=["token", "bearer-token"])
@pytest.mark.parametrize("offset", [0, 1, 2])
@pytest.mark.parametrize("length", [30, 31, 32], ids=["len%3=0", "len%3=1", "len%3=2"])
def test_base64_of_a_longer_text_holding_the_credential_at_each_alignment(
    schemed: bool, offset: int, length: int
) -> None:
    secret = (TOKEN * 2)[:length]
    scrub = Scrubber([secret], scheme="Bearer")
    inner = f"Bearer {secret}" if schemed else secret
    blob = b"ab"[:offset] + b"Authorization: " + inner.encode() + b"\r\nX-Trace: 1\r\n"
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        text = f"logged: {encode(blob).decode()} end"
        cleaned = scrub.text(text)
        assert MARK in cleaned and _undecodable(cleaned, secret.encode()), cleaned
        assert scrub.found_in(text) and MARK.encode() in scrub.binary(text.encode())


def _entity(c: str, how: str) -> str:
    return {
        "dec": f"&#{ord(c)};",
        "dec-bare": f"&#{ord(c)}",
        "hex": f"&#x{ord(c):x};",
        "HEX": f"&#X{ord(c):X};",
        "hex-bare": f"&#x{ord(c):x}",
        "zeros": f"&#000{ord(c)};",
    }[how]


def _spelled(secret: str, hows: list[str], gaps: list[str] | None = None, after: str = "") -> str:
    """The secret with each character spelled as `hows` says and `gaps` after each but the last. A bare entity
    before a character that would continue its number reads as another number in HTML, so an encoder writes the
    `;` there, and so does this."""
    out = ""
    for i, (c, how) in enumerate(zip(secret, hows, strict=False)):
        gap = gaps[i] if gaps is not None and i < len(secret) - 1 else ""
        piece = c if how == "raw" else _entity(c, how)
        following = (gap + secret[i + 1 :] + after)[:1]
        if how == "dec-bare" and following.isdigit():
            piece += ";"
        if how == "hex-bare" and following and following in string.hexdigits:
            piece += ";"
        out += piece + gap
    return out


@pytest.mark.parametrize("how", ["dec", "dec-bare", "hex", "HEX", "hex-bare", "zeros"])
def test_the_credential_spelled_with_html_entities_is_replaced(how: str) -> None:
    scrub = Scrubber([TOKEN], scheme="Bearer")
    # Every character, then every other one (mixed with the raw characters).
    for hows in ([how] * len(TOKEN), [how, "raw"] * len(TOKEN)):
        body = f"<p>token {_spelled(TOKEN, hows)} refused</p>"
        assert scrub.text(body) == f"<p>token {MARK} refused</p>"
        assert scrub.binary(body.encode()) == f"<p>token {MARK} refused</p>".encode()
        assert scrub.found_in(body)


def test_entities_of_every_kind_mixed_and_named_ones_for_what_html_escapes() -> None:
    secret = "pa&ss<wo>rd\"42'x"
    scrub = Scrubber([secret])
    kinds = ["dec", "dec-bare", "hex", "HEX", "hex-bare", "zeros"]
    mixed = _spelled(secret, [*(kinds * 3)[: len(secret) - 1], "raw"])
    assert scrub.text(f"[{mixed}]") == f"[{MARK}]"
    named = (
        secret.replace("&", "&amp;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace('"', "&quot;")
        .replace("'", "&apos;")
    )
    assert scrub.text(f"value={named}.") == f"value={MARK}."


def test_a_bare_entity_is_read_as_html_reads_it_the_digits_run_on() -> None:
    scrub = Scrubber([TOKEN])
    # `&#1151` is one character (U+047F), not `s` and a `1`: this is not the credential and stays as it was.
    near = "&#1151" + TOKEN[1:]
    assert scrub.text(near) == near
    assert scrub.text("&#115" + TOKEN[1:]) == MARK  # a letter ends the number: `s`
    assert scrub.text("&#99999999999999999999999" + TOKEN) == "&#99999999999999999999999" + MARK


@pytest.mark.parametrize("splitter", ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad"])
def test_the_credential_split_by_zero_width_characters_and_soft_hyphens(splitter: str) -> None:
    scrub = Scrubber([TOKEN], scheme="Bearer")
    split = splitter.join(TOKEN)
    assert scrub.text(f"id {split} end") == f"id {MARK} end"
    assert scrub.binary(f"id {split} end".encode()) == f"id {MARK} end".encode()
    # In a header: its UTF-8 bytes read as latin-1. In a JSON body: as a \\u escape.
    header = f"id {split} end".encode().decode("latin-1")
    assert scrub.headers({"x-echo": header}) == {"x-echo": f"id {MARK} end"}
    escaped = json.dumps({"error": f"id {split} end"}).encode()
    assert json.loads(scrub.binary(escaped)) == {"error": f"id {MARK} end"}
    # Splitters and entities together, a few in one gap.
    both = "".join(c + (splitter * 3 if i % 3 else "&#8203;") for i, c in enumerate(TOKEN))
    assert MARK in scrub.text(both) and TOKEN[4:12] not in scrub.text(both).replace(splitter, "")


def test_headers_are_searched_whole_and_scrubbed_one_by_one() -> None:
    scrub = Scrubber([TOKEN], scheme="Bearer")
    clean = {"content-type": "application/json", "retry-after": "5"}
    assert scrub.headers(clean) == clean
    hexed = TOKEN.encode().hex()
    echoed = {**clean, "x-echo": f"k={hexed}", f"x-{TOKEN}": "1"}
    assert scrub.headers(echoed) == {**clean, "x-echo": f"k={MARK}", f"x-{MARK}": "1"}


def test_an_answer_without_a_secret_is_left_exactly_as_it_was() -> None:
    scrub = Scrubber([TOKEN], scheme="Bearer")
    body = "a &amp; b &#60;c&#62; \u200b d\u00ad e &#x2F; &#1151 &#x; &#; &".encode()
    assert scrub.binary(body) == body and scrub.text(body.decode()) == body.decode()


SECRETS = st.text(alphabet=string.ascii_letters + string.digits + "-_.+/=", min_size=12, max_size=48)
AROUND = st.text(alphabet=string.ascii_letters + string.digits + " :=,\r\n", max_size=40)


@settings(max_examples=200, deadline=None)
@given(secret=SECRETS, before=AROUND, after=AROUND, schemed=st.booleans())
def test_property_no_base64_alignment_leaves_the_credential_decodable(
    secret: str, before: str, after: str, schemed: bool
) -> None:
    scrub = Scrubber([secret], scheme="Bearer")
    inner = f"Bearer {secret}" if schemed else secret
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        cleaned = scrub.text(encode(f"{before}{inner}{after}".encode()).decode())
        assert MARK in cleaned and _undecodable(cleaned, secret.encode())


@settings(max_examples=200, deadline=None)
@given(
    secret=SECRETS,
    spellings=st.lists(
        st.sampled_from(["raw", "dec", "dec-bare", "hex", "HEX", "hex-bare", "zeros"]), min_size=48, max_size=48
    ),
    gaps=st.lists(st.text(alphabet="\u200b\u200c\u200d\u2060\ufeff\u00ad", max_size=3), min_size=48, max_size=48),
    before=AROUND,
    after=AROUND,
)
def test_property_entities_and_splitters_in_any_mix_leave_nothing_readable(
    secret: str, spellings: list[str], gaps: list[str], before: str, after: str
) -> None:
    scrub = Scrubber([secret])
    spelled = _spelled(secret, spellings, gaps, after)
    for cleaned in (scrub.text(before + spelled + after), scrub.binary((before + spelled + after).encode()).decode()):
        readable = html.unescape(cleaned)
        for s in "\u200b\u200c\u200d\u2060\ufeff\u00ad":
            readable = readable.replace(s, "")
        assert secret not in readable and MARK in cleaned


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=200))
def test_property_text_without_the_secret_comes_back_unchanged(text: str) -> None:
    scrub = Scrubber([TOKEN], scheme="Bearer")
    assert scrub.text(text) == text
    assert scrub.binary(text.encode("utf-8", "surrogatepass")) == text.encode("utf-8", "surrogatepass")


@pytest.mark.parametrize(
    "unit",
    ["&#1;", "&#115;", "&#x6B", "s\u200b", "\u00ad", "&amp;"],
    ids=["other-entity", "its-entity", "its-hex-entity", "split", "soft-hyphens", "named"],
)
def test_a_body_of_the_maximum_size_made_of_loose_spellings_costs_little(unit: str) -> None:
    """A provider knows the credential (it was sent one), so it can fill a 1 MiB answer with its characters spelled
    as entities or split: the scrubber decodes only references to the credential's own characters, in one `sub`,
    and walks token by token only when the decoded text holds it (the second body: the credential at its end).
    Linear either way: CPU time, not wall time, bounded at about 8 times what both take on a loaded 2-core
    machine (0.1-1 s); a quadratic walk would take minutes."""
    import time

    scrub = Scrubber([TOKEN], scheme="Bearer")
    body = unit.encode() * ((1 << 20) // len(unit.encode()))
    started = time.process_time()
    assert scrub.binary(body) == body
    echoed = body[: -len(TOKEN) * 4] + "\u200b".join(TOKEN).encode()
    assert scrub.binary(echoed).endswith(MARK.encode())
    assert time.process_time() - started < 8.0
