"""What fits a terminal: every line cut to its width (never wrapped), and tables that drop columns to fit.

A line one column too long wraps, and a line redrawn in place (`\\r\\033[K`) that wrapped leaves its first row
behind on every redraw: the README's own example of the live `watch` line was 94 columns. So on a terminal each
line is cut to one column less than the width (a line that fills the last column leaves some terminals waiting to
wrap), ending in `…`. Piped output is not cut: a log keeps every word. Tables (`status`, `contracts`) are no
wider than `MAX_TABLE_WIDTH` and narrow to the terminal, or to `COLUMNS` when piped, by dropping the columns that
matter least, never by cutting a row out of line.

Prose (`story`, `why`, `decisions`) is word-wrapped instead, to the terminal's width or to `COLUMNS` when piped
(`WrappedOut`): those lines are read once, not redrawn, and their ends are what a person reads them for (the
provider's error, what an option does and until when), so no word is dropped. Piped without `COLUMNS`, they are
written as given: scripts parse them.
"""

from __future__ import annotations

import os
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TextIO

from ..core.digits import whole_number

__all__ = [
    "Column",
    "FittedOut",
    "Table",
    "WrappedOut",
    "cell_width",
    "fit",
    "fit_middle",
    "output_width",
    "table",
    "table_width",
    "terminal_width",
    "wrap",
]

MAX_TABLE_WIDTH = 100
"""A table wider than this is hard to read on any screen; `status` and `contracts` fit it."""

CUT_TO = 16
"""A table's last column is cut rather than dropped while this many of its columns still show."""


def cell_width(text: str) -> int:
    """Columns `text` takes on a terminal: wide (East Asian) characters two, combining marks none."""
    width = 0
    for char in text:
        if unicodedata.combining(char):
            continue
        width += 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1
    return width


def fit(text: str, width: int) -> str:
    """`text` in at most `width` columns: cut with `…` at the end when it is longer."""
    if cell_width(text) <= width:
        return text
    if width <= 0:
        return ""
    kept: list[str] = []
    used = 0
    for char in text:
        step = cell_width(char)
        if used + step > width - 1:
            break
        kept.append(char)
        used += step
    return "".join(kept) + "…"


def fit_middle(text: str, width: int) -> str:
    """`text` in at most `width` columns, cut in the middle: generated ids differ at their ends
    (`deploys-2026…-193332-0417`), so both ends stay."""
    if cell_width(text) <= width:
        return text
    if width <= 2:
        return fit(text, width)
    tail_room = (width - 1) // 2
    head = fit(text, width - tail_room)[:-1]
    tail: list[str] = []
    used = 0
    for char in reversed(text):
        if used + cell_width(char) > tail_room:
            break
        tail.append(char)
        used += cell_width(char)
    return head + "…" + "".join(reversed(tail))


def terminal_width(out: TextIO, *, default: int = 80) -> int | None:
    """The width of the terminal `out` writes to; None when it is no terminal (piped: nothing is cut)."""
    try:
        if not out.isatty():
            return None
        return os.get_terminal_size(out.fileno()).columns or default
    except (OSError, ValueError, AttributeError):
        return None


def output_width(out: TextIO) -> int | None:
    """The width `out` is read at: the terminal's, else `COLUMNS` when piped and set; None when neither."""
    width = terminal_width(out)
    if width is None:
        columns = os.environ.get("COLUMNS", "")
        width = whole_number(columns, 6) or None  # 0 is no width either
    return width


def table_width(out: TextIO) -> int:
    """How wide a table may be: `output_width`, at most `MAX_TABLE_WIDTH` (also its width when there is none)."""
    width = output_width(out)
    return max(20, min(width or MAX_TABLE_WIDTH, MAX_TABLE_WIDTH))


HANG = 2
"""A wrapped line's further rows are indented this much more than its first, so its first column (a time, an
option's number, a key) still starts each entry."""


def wrap(line: str, width: int) -> list[str]:
    """`line` word-wrapped into rows of less than `width` columns (one less, as `fit`: a row that fills the last
    column leaves some terminals waiting to wrap); every character kept: a word longer than a row is broken."""
    room = max(width - 1, 8)
    if cell_width(line) <= room:
        return [line]
    body = line.lstrip(" ")
    indent = " " * min(len(line) - len(body), room // 2)
    hang = indent + " " * HANG
    rows: list[str] = []
    current, filled = indent, False
    for word in body.split(" "):  # spaces kept as they were: "a  b" is a word, an empty one, and b
        if filled and cell_width(current) + 1 + cell_width(word) > room:
            rows.append(current)
            current, filled = hang, False
        if filled:
            current += " "
        while cell_width(current + word) > room:  # longer than a whole row: broken across rows
            head = fit(word, room - cell_width(current) + 1)[:-1] or word[0]
            rows.append(current + head)
            current, word = hang, word[len(head) :]
        current, filled = current + word, True
    rows.append(current)
    return rows


class WrappedOut:
    """A stream whose every line is word-wrapped to `output_width` (`wrap`), or written as given when there is
    none (a pipe without `COLUMNS`). Lines are wrapped whole: a part of a line waits for its newline (or `flush`)."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.width = output_width(out)
        self._pending = ""

    def isatty(self) -> bool:
        return self.out.isatty()

    def write(self, text: str) -> int:
        if self.width is None:
            return self.out.write(text)
        *lines, self._pending = (self._pending + text).split("\n")
        for line in lines:
            self.out.write("\n".join(wrap(line, self.width)) + "\n")
        return len(text)

    def flush(self) -> None:
        if self._pending and self.width is not None:
            self.out.write("\n".join(wrap(self._pending, self.width)))
            self._pending = ""
        self.out.flush()


class FittedOut:
    """A stream whose every line is cut to the terminal's width (one column less), read at each line: a terminal
    made narrower mid-watch gets lines that fit from the next redraw on. Writes may carry parts of lines; the
    column reached is kept between them. Not a terminal: written as given."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self._column = 0

    def isatty(self) -> bool:
        return self.out.isatty()

    def flush(self) -> None:
        self.out.flush()

    def write(self, text: str) -> int:
        width = terminal_width(self.out)
        if width is None:
            return self.out.write(text)
        pieces: list[str] = []
        for number, line in enumerate(text.split("\n")):
            if number:
                pieces.append("\n")
                self._column = 0
            while line.startswith(("\r", "\033[K")):
                control = "\033[K" if line.startswith("\033[K") else "\r"
                pieces.append(control)
                line = line[len(control) :]
                if control == "\r":
                    self._column = 0
            room = max(0, width - 1 - self._column)
            shown = fit(line, room)
            pieces.append(shown)
            self._column += cell_width(shown)
        self.out.write("".join(pieces))
        return len(text)


@dataclass(frozen=True)
class Column:
    """One column of a table: its heading, and how much it matters (the least, dropped first, has the highest
    `drop` rank; 0 is never dropped). `limit`: the widest its cells may be, cut with `…` beyond (an owner's
    description, a long id), so one cell cannot push the others out of line."""

    heading: str
    drop: int = 0
    limit: int | None = None
    middle: bool = False
    """Cut in the middle rather than at the end (an id: its ends tell it apart)."""

    def cut(self, cell: str, width: int) -> str:
        return fit_middle(cell, width) if self.middle else fit(cell, width)


@dataclass(frozen=True)
class Table:
    lines: list[str]
    hidden: list[str]
    """The headings of the columns dropped to fit: a command says where to read them (`--json`)."""

    def print(self, out: TextIO, *, more: str = "--json") -> None:
        for line in self.lines:
            out.write(line + "\n")
        if self.hidden:
            out.write(fit(f"({', '.join(self.hidden).lower()} left out to fit; {more} shows them)", 99) + "\n")


def table(columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int) -> Table:
    """The rows (heading first) in aligned columns two spaces apart, no line wider than `width`: the columns of
    the highest `drop` go first until it fits; what still does not fit has its last column cut."""
    cells = [[c.cut(cell, c.limit) if c.limit else cell for cell, c in zip(row, columns, strict=True)] for row in rows]
    kept = list(range(len(columns)))

    def widths(indices: list[int]) -> list[int]:
        return [max([cell_width(columns[i].heading)] + [cell_width(row[i]) for row in cells]) for i in indices]

    def total(indices: list[int]) -> int:
        return sum(widths(indices)) + 2 * (len(indices) - 1)

    def fits(indices: list[int]) -> bool:
        """Within `width`, or near enough that the last column can give the rest and keep `CUT_TO` of its own."""
        last = widths(indices)[-1]
        return total(indices) - width <= max(0, last - max(CUT_TO, cell_width(columns[indices[-1]].heading)))

    for rank in sorted({c.drop for c in columns if c.drop}, reverse=True):
        for i in [i for i in kept if columns[i].drop == rank][::-1]:
            if fits(kept):
                break
            kept.remove(i)
    sizes = widths(kept)
    over = sum(sizes) + 2 * (len(kept) - 1) - width
    if over > 0:  # the last column gives what is missing, down to its heading's width
        last = len(kept) - 1
        sizes[last] = max(cell_width(columns[kept[last]].heading), sizes[last] - over)
    while (over := sum(sizes) + 2 * (len(kept) - 1) - width) > 0:  # then the widest, one column at a time
        widest = max(range(len(kept)), key=lambda n: sizes[n])
        floor = max(cell_width(columns[kept[widest]].heading), 4)
        if sizes[widest] <= floor:
            break  # narrower than its columns' headings: nothing more can go
        sizes[widest] = max(floor, sizes[widest] - over)
    lines = []
    for row in [[c.heading for c in columns], *cells]:
        parts = []
        for position, (i, size) in enumerate(zip(kept, sizes, strict=True)):
            cell = columns[i].cut(row[i], size)
            parts.append(cell if position == len(kept) - 1 else cell + " " * (size - cell_width(cell)))
        lines.append("  ".join(parts).rstrip())
    return Table(lines, [c.heading for i, c in enumerate(columns) if i not in kept])
