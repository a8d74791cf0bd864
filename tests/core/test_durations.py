"""Durations as people write them, and RFC 3339 timestamps: exact values and exact refusals."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pollwarden.core import DurationError, format_duration, format_rfc3339, parse_duration, parse_rfc3339


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("500ms", timedelta(milliseconds=500)),
        ("90s", timedelta(seconds=90)),
        ("40m", timedelta(minutes=40)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("2d", timedelta(days=2)),
        ("1.5s", timedelta(seconds=1.5)),
        ("0s", timedelta(0)),
        (" 10S ", timedelta(seconds=10)),
        ("1h2m3s4ms", timedelta(hours=1, minutes=2, seconds=3, milliseconds=4)),
    ],
)
def test_durations_people_write(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("5", "cannot read"),
        ("fast", "cannot read"),
        ("1h1h", "repeats the unit"),
        ("-5s", "cannot read"),
        ("", "empty"),
        ("   ", "empty"),
        ("1h 30m", "cannot read"),
        ("5 s", "cannot read"),
        ("5sec", "cannot read"),
        ("s", "cannot read"),
        ("367d", "longer than a year"),
        ("9" * 400 + "s", "longer than a year"),
    ],
)
def test_durations_refused(text: str, needle: str) -> None:
    with pytest.raises(DurationError, match=needle):
        parse_duration(text)


def test_duration_refuses_non_strings() -> None:
    with pytest.raises(DurationError, match="got int"):
        parse_duration(5)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("delta", "text"),
    [
        (timedelta(hours=1, minutes=30), "1h30m"),
        (timedelta(seconds=9), "9s"),
        (timedelta(milliseconds=750), "750ms"),
        (timedelta(seconds=90.5), "1m30.5s"),
        (timedelta(0), "0ms"),
    ],
)
def test_format_duration(delta: timedelta, text: str) -> None:
    assert format_duration(delta) == text


@settings(max_examples=150, deadline=None)
@given(st.integers(min_value=0, max_value=366 * 86400 * 1000))
def test_format_then_parse_roundtrips_to_the_millisecond(ms: int) -> None:
    delta = timedelta(milliseconds=ms)
    assert parse_duration(format_duration(delta)) == delta


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=30))
def test_parse_duration_only_raises_duration_error(text: str) -> None:
    try:
        value = parse_duration(text)
    except DurationError:
        return
    assert timedelta(0) <= value <= timedelta(days=366)


def test_rfc3339_with_zone() -> None:
    assert parse_rfc3339("2025-04-18T10:20:00Z") == datetime(2025, 4, 18, 10, 20, tzinfo=UTC)
    assert parse_rfc3339("2025-04-18T12:20:00+02:00") == datetime(2025, 4, 18, 10, 20, tzinfo=UTC)
    assert parse_rfc3339("2025-04-18T12:20:00+02:00").utcoffset() == timedelta(0)


@pytest.mark.parametrize(
    "text",
    [
        "2025-04-18T10:20:00",  # no offset: the zone would be a guess
        "yesterday",
        "",
        "2025-13-01T00:00:00Z",
        "x" * 65,
        "0001-01-01T00:00:00+01:00",  # UTC instant before year 1
        "9999-12-31T23:59:59-01:00",  # UTC instant after year 9999
    ],
)
def test_rfc3339_refused(text: str) -> None:
    with pytest.raises(DurationError):
        parse_rfc3339(text)


def test_format_rfc3339() -> None:
    assert format_rfc3339(datetime(2025, 4, 18, 10, 20, tzinfo=UTC)) == "2025-04-18T10:20:00Z"
    assert format_rfc3339(datetime(2025, 4, 18, 12, 20, tzinfo=timezone(timedelta(hours=2)))) == "2025-04-18T10:20:00Z"
    fractional = format_rfc3339(datetime(2025, 4, 18, 10, 20, 0, 250000, tzinfo=UTC))
    assert fractional.startswith("2025-04-18T10:20:00.250") and fractional.endswith("Z")


@settings(max_examples=200, deadline=None)
@given(st.datetimes(min_value=datetime(1970, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)))
def test_format_then_parse_rfc3339_is_exact(moment: datetime) -> None:
    # decisions are replayed from their audit form: a timestamp must not lose its microseconds on the way
    assert parse_rfc3339(format_rfc3339(moment)) == moment


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40))
def test_parse_rfc3339_only_raises_duration_error(text: str) -> None:
    try:
        value = parse_rfc3339(text)
    except DurationError:
        return
    assert value.utcoffset() == timedelta(0)
