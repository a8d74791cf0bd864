"""`core.digits.whole_number`: the one reading of a number that arrived from outside."""

from __future__ import annotations

import pytest

from pollwarden.core.digits import whole_number


@pytest.mark.parametrize(
    ("text", "number"),
    [("0", 0), ("007", 7), ("123", 123), ("1234", None), ("", None), ("-1", None), ("+1", None), (" 1", None),
     ("1.0", None), ("\u00b2", None), ("\uff11\uff12", None), ("\u0663", None), ("9" * 5000, None)],
)  # fmt: skip
def test_only_one_to_three_ascii_digits_are_a_number_of_at_most_three(text: str, number: int | None) -> None:
    assert whole_number(text, 3) == number
