"""Whole numbers in text from outside: headers, stored rows, form fields, environment variables."""

from __future__ import annotations


def whole_number(text: str, most_digits: int) -> int | None:
    """`text` as a whole number when it is 1 to `most_digits` ASCII digits, else None.

    `str.isdigit` alone also takes '²' (which `int()` refuses) and '１２' (which it reads), and `int()` refuses more
    than 4,300 digits: a number that arrived from outside is read by this rule, so none of those can raise."""
    if 0 < len(text) <= most_digits and text.isascii() and text.isdigit():
        return int(text)
    return None
