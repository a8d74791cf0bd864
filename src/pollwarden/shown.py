"""Text from a provider or a person, made safe to show on a terminal, in a log line or on a web page.

A provider's state, error or result is read by a person deciding what to do next. Raw, an ESC sequence can
clear the screen or recolour a line, a CR or LF can forge a line the program never wrote, and a bidi override
can make "cancel" read as something else. `shown` replaces each such code point with a visible escape, so
what is shown is exactly what was sent, and nothing more. It is applied at output only: stored values and
the audit log keep the original.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .core.escalation import DecisionRequest

# C0 controls (TAB, LF, CR, ESC, BEL included), DEL, C1 controls; the bidi marks, embeddings, overrides and
# isolates (Trojan Source); the Unicode line and paragraph separators, which break lines in browsers and some
# terminals; and surrogates, which in a str are always lone (a pair would have been one code point).
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def shown(value: object) -> str:
    """`value` as text a person can read safely: unsafe code points become `\\x1b` / `\\u202e`; None is `-`."""
    if value is None:
        return "-"
    return _UNSAFE.sub(_escape, value if isinstance(value, str) else str(value))


def has_control(text: str) -> bool:
    """Whether `text` holds a code point `shown` would escape: input a person types is refused for it."""
    return _UNSAFE.search(text) is not None


def shown_json(value: Any) -> Any:
    """A JSON-shaped value with every string in it passed through `shown`, for text output built from it."""
    if isinstance(value, str):
        return shown(value)
    if isinstance(value, list):
        return [shown_json(v) for v in value]
    if isinstance(value, dict):
        return {k: shown_json(v) for k, v in value.items()}
    return value


def shown_request(request: DecisionRequest) -> DecisionRequest:
    """The request with every text field passed through `shown`, so its multi-line `render()` stays safe."""
    return type(request).from_json(shown_json(request.to_json()))
