"""R7 backoff with jitter, and Retry-After parsing (R23): exact numbers and properties over all inputs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pollwarden.core import Jitter
from pollwarden.core.contract.parse import Schedule
from pollwarden.core.schedule import (
    MAX_RETRY_AFTER,
    RATE_LIMIT_GROWTH,
    Rejection,
    jittered,
    parse_retry_after,
    raw_delay,
)

REFERENCE = Schedule(base_delay=timedelta(seconds=5), max_delay=timedelta(seconds=120))
RECEIVED = datetime(2025, 4, 18, 10, 20, 31, tzinfo=UTC)

schedules = st.builds(
    Schedule,
    base_delay=st.integers(min_value=1, max_value=600_000).map(lambda ms: timedelta(milliseconds=ms)),
    max_delay=st.integers(min_value=1, max_value=3_600_000).map(lambda ms: timedelta(milliseconds=ms)),
    jitter=st.sampled_from(list(Jitter)),
).filter(lambda s: s.max_delay >= s.base_delay)
attempts = st.integers(min_value=0, max_value=10_000)
draws = st.floats(min_value=0.0, max_value=1.0, exclude_max=True)


@pytest.mark.parametrize(
    ("attempt", "seconds"),
    [(0, 5), (1, 10), (2, 20), (3, 40), (4, 80), (5, 120), (6, 120), (1000, 120), (10**9, 120)],
)
def test_r45_reference_schedule(attempt: int, seconds: int) -> None:
    assert raw_delay(REFERENCE, attempt) == timedelta(seconds=seconds)


def test_r45_story_delays_come_from_bounded_jitter() -> None:
    # 10:20:05 -> 10:20:14 (9 s of raw 10), 10:20:14 -> 10:20:31 (17 s of raw 20), 10:22:31 -> 10:23:48 (77 s of 80)
    assert jittered(REFERENCE, raw_delay(REFERENCE, 1), 0.8) == timedelta(seconds=9)
    assert jittered(REFERENCE, raw_delay(REFERENCE, 2), 0.7) == timedelta(seconds=17)
    assert jittered(REFERENCE, raw_delay(REFERENCE, 4), 0.925) == timedelta(seconds=77)


def test_jitter_bounds_exactly() -> None:
    raw = timedelta(seconds=80)
    full = Schedule(jitter=Jitter.FULL)
    assert jittered(REFERENCE, raw, 0.0) == timedelta(seconds=40)
    assert jittered(REFERENCE, raw, 0.5) == timedelta(seconds=60)
    assert jittered(full, raw, 0.0) == timedelta(0)
    assert jittered(full, raw, 0.5) == timedelta(seconds=40)


@pytest.mark.parametrize("u", [-0.1, 1.0, 1.5, float("nan")])
def test_jitter_draw_outside_unit_interval_is_refused(u: float) -> None:
    with pytest.raises(ValueError, match="jitter draw"):
        jittered(REFERENCE, timedelta(seconds=10), u)


def test_rate_limited_raw_delay_grows_sharply_and_stays_capped() -> None:
    big = Schedule(base_delay=timedelta(seconds=5), max_delay=timedelta(hours=1))
    assert raw_delay(big, 1, rate_limited=1) == timedelta(seconds=10 * RATE_LIMIT_GROWTH)
    assert raw_delay(big, 1, rate_limited=2) == timedelta(seconds=10 * RATE_LIMIT_GROWTH**2)
    assert raw_delay(REFERENCE, 1, rate_limited=1) == timedelta(seconds=40)
    assert raw_delay(REFERENCE, 1, rate_limited=2) == timedelta(seconds=120)


@settings(max_examples=300, deadline=None)
@given(schedules, attempts, draws, st.integers(min_value=0, max_value=50))
def test_jittered_delay_lies_within_its_band(schedule: Schedule, attempt: int, u: float, limited: int) -> None:
    raw = raw_delay(schedule, attempt, rate_limited=limited)
    assert timedelta(0) < raw <= schedule.max_delay
    assert raw >= min(schedule.base_delay, schedule.max_delay)
    actual = jittered(schedule, raw, u)
    low = raw / 2 if schedule.jitter is Jitter.BOUNDED else timedelta(0)
    # timedelta arithmetic rounds to the microsecond
    assert low - timedelta(microseconds=1) <= actual <= raw


@settings(max_examples=300, deadline=None)
@given(schedules, attempts, st.integers(min_value=0, max_value=20))
def test_raw_delay_is_non_decreasing(schedule: Schedule, attempt: int, limited: int) -> None:
    assert raw_delay(schedule, attempt) <= raw_delay(schedule, attempt + 1)
    assert raw_delay(schedule, attempt, rate_limited=limited) <= raw_delay(schedule, attempt + 1, rate_limited=limited)
    assert raw_delay(schedule, attempt, rate_limited=limited) <= raw_delay(schedule, attempt, rate_limited=limited + 1)


@settings(max_examples=100, deadline=None)
@given(schedules, st.integers(min_value=0, max_value=30))
def test_raw_delay_is_the_formula_below_the_cap(schedule: Schedule, attempt: int) -> None:
    expected = min(schedule.max_delay.total_seconds(), schedule.base_delay.total_seconds() * 2**attempt)
    assert raw_delay(schedule, attempt).total_seconds() == pytest.approx(expected, rel=1e-9, abs=1e-6)


# --- Retry-After -------------------------------------------------------------------------------------------------

FLOOR = datetime(2025, 4, 18, 10, 22, 31, tzinfo=UTC)


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("120", FLOOR),
        (" 120 ", FLOOR),
        ("0", RECEIVED),
        ("Fri, 18 Apr 2025 10:22:31 GMT", FLOOR),  # IMF-fixdate
        ("Friday, 18-Apr-25 10:22:31 GMT", FLOOR),  # obsolete RFC 850
        ("Fri Apr 18 10:22:31 2025", FLOOR),  # obsolete asctime
        ("Fri, 18 Apr 2025 12:22:31 +0200", FLOOR),  # numeric zone
        ("Fri, 18 Apr 2025 10:00:00 GMT", RECEIVED),  # in the past: the floor is the receive time
        ("Thu, 01 Jan 1970 00:00:00 GMT", RECEIVED),
        (str(366 * 86400), RECEIVED + timedelta(days=366)),
    ],
)
def test_retry_after_values(header: str, expected: datetime) -> None:
    assert parse_retry_after(header, RECEIVED) == expected


@pytest.mark.parametrize(
    ("header", "why"),
    [
        ("soon", "neither delay-seconds nor an HTTP-date"),
        ("", "neither"),
        ("1.5", "neither"),
        ("12abc", "neither"),
        ("Fri, 31 Feb 2025 10:22:31 GMT", "neither"),
        ("-5", "negative"),
        ("-120", "negative"),
        (str(366 * 86400 + 1), "absurd"),
        ("9" * 13, "absurd"),
        ("9" * 5000, "absurd"),
        ("Sat, 18 Apr 2099 10:22:31 GMT", "absurd"),
        ("²", "neither"),  # a Unicode digit is not a DIGIT
        ("１２", "neither"),  # nor are full-width digits
    ],
)
def test_retry_after_rejections(header: str, why: str) -> None:
    result = parse_retry_after(header, RECEIVED)
    assert isinstance(result, Rejection), result
    assert result.source == "Retry-After"
    assert why in result.why
    assert len(result.value) <= 80


def test_rejection_to_json() -> None:
    assert Rejection("Retry-After", "soon", "x").to_json() == {"source": "Retry-After", "value": "soon", "why": "x"}


@settings(max_examples=150, deadline=None)
@given(st.integers(min_value=0, max_value=366 * 86400))
def test_retry_after_seconds_are_exact(seconds: int) -> None:
    assert parse_retry_after(str(seconds), RECEIVED) == RECEIVED + timedelta(seconds=seconds)


@settings(max_examples=150, deadline=None)
@given(st.datetimes(min_value=datetime(1990, 1, 1), max_value=datetime(2030, 1, 1)))
def test_retry_after_imf_fixdate_round_trips(moment: datetime) -> None:
    utc = moment.replace(microsecond=0, tzinfo=UTC)
    header = utc.strftime("%a, %d %b %Y %H:%M:%S GMT")
    expected = max(utc, RECEIVED) if utc - RECEIVED <= MAX_RETRY_AFTER else None
    result = parse_retry_after(header, RECEIVED)
    if expected is None:
        assert isinstance(result, Rejection)
    else:
        assert result == expected


date_tokens = st.sampled_from(
    [
        *["Fri,", "Friday,", "18", "Apr", "2025", "18-Apr-25", "10:22:31", "GMT", "+0200", "-0000", "UTC", "99", "0"],
        *["-", "Feb", "31", "24:00:00", "99:99:99", "9999", "0001", "+9999", "EST", "1e9", "\x00", "  "],
    ]
)
header_like = st.one_of(
    st.text(max_size=60),
    st.lists(date_tokens, max_size=8).map(" ".join),
    st.integers(min_value=-(10**20), max_value=10**20).map(str),
    st.from_regex(r"\A[-+]?[0-9\u0660-\u0669\u00b2\uff10-\uff19]{1,15}\Z"),
)


@settings(max_examples=500, deadline=None)
@given(header_like)
def test_retry_after_parser_never_raises(header: str) -> None:
    result = parse_retry_after(header, RECEIVED)
    if isinstance(result, Rejection):
        assert result.why
    else:
        assert isinstance(result, datetime)
        assert RECEIVED <= result <= RECEIVED + MAX_RETRY_AFTER
        assert result.utcoffset() == timedelta(0)
