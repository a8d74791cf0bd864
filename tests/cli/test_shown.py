"""`shown`: what a person sees of text someone else wrote."""

from __future__ import annotations

import unicodedata

import pytest

from pollwarden.shown import has_control, shown


@pytest.mark.parametrize(
    ("raw", "seen"),
    [
        ("running", "running"),
        ("\x1b[2J\x1b[H", "\\x1b[2J\\x1b[H"),
        ("ok\rFORGED", "ok\\x0dFORGED"),
        ("a\nb\tc\x07", "a\\x0ab\\x09c\\x07"),
        ("\x00\x7f\x85\x9b", "\\x00\\x7f\\x85\\x9b"),
        ("abc\u202efdp.exe", "abc\\u202efdp.exe"),
        (
            "\u202a\u202b\u202c\u202d\u2066\u2067\u2068\u2069",
            "\\u202a\\u202b\\u202c\\u202d\\u2066\\u2067\\u2068\\u2069",
        ),
        ("line\u2028sep", "line\\u2028sep"),
        ("lone \ud800 surrogate", "lone \\ud800 surrogate"),
        ("héllo, 世界, emoji \U0001f600", "héllo, 世界, emoji \U0001f600"),
    ],
)
def test_unsafe_code_points_become_visible_escapes(raw: str, seen: str) -> None:
    assert shown(raw) == seen
    assert has_control(raw) is (raw != seen)


def test_none_and_other_values() -> None:
    assert shown(None) == "-"
    assert shown(42) == "42"
    assert shown(["\x1b"]) == "['\\x1b']"  # the list's repr escaped it already


def test_no_control_surrogate_or_bidi_code_point_survives() -> None:
    out = shown("".join(chr(c) for c in range(0x10000)))
    out.encode("utf-8")
    assert not [ch for ch in out if unicodedata.category(ch) in ("Cc", "Cs", "Zl", "Zp")]
    assert not [
        ch
        for ch in out
        if unicodedata.bidirectional(ch) in ("LRE", "RLE", "PDF", "LRO", "RLO", "LRI", "RLI", "FSI", "PDI")
    ]
