"""`enqueue --jobs-file FILE`: many operations from a file of job ids, admitted whole before one is written.

The file is outside input like any flag: it is read whole (bounded), every line is parsed and every job id
is admitted (`Engine.admit_many`, the rule one `enqueue` follows) before the first batch is written, and a bad
line is named by its number with what is wrong, exit 2, nothing enqueued. The format, one job id a line:

- blank lines and lines whose first non-blank character is `#` are skipped (a job id cannot start with `#`);
- spaces and tabs around an id, a CR before the LF and a UTF-8 byte order mark at the start are not part of
  it; anything else is the id, checked by the one job id rule (controls, invisible characters, length);
- the text must be UTF-8; a job id given twice is an error naming both lines.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import BinaryIO

from ..core.admission import Refuse, operation_id_problem
from ..core.bounded import TooLarge, read_bounded, read_stream_bounded
from ..engine import Admitted
from ..shown import shown
from .common import UsageError
from .watch import FLAGS

MAX_JOBS = 100_000
"""Job ids per file: every one is admitted in memory before the first is written; split a larger list."""
MAX_BYTES = 64 * 1024 * 1024
"""Far more than MAX_JOBS ids of any real provider take; a larger input (a device, a runaway pipe) is refused
after reading this much, never read whole."""
SHOWN_PROBLEMS = 100
"""Bad lines listed one by one; beyond these, only their count (the first ones are what a person fixes first)."""

NAMES = {**FLAGS, "job_id": "job id", "operation_id": "operation id"}
"""Admission's field names for a line of the file (the limits keep their flag names: they come from flags)."""


@dataclass(frozen=True)
class JobLine:
    number: int
    """1-based, as an editor counts lines."""
    job_id: str


@dataclass(frozen=True)
class JobsFile:
    name: str
    """The file as messages name it (`standard input` for `-`)."""
    jobs: list[JobLine]
    problems: list[tuple[int, str]]
    """(line number, what is wrong) for lines that are not even text."""


def read_jobs_file(path: str, stdin: BinaryIO | None = None) -> JobsFile:
    """Read and split `path` (`-`: standard input). Unreadable or oversized input is a UsageError."""
    name = "standard input" if path == "-" else shown(path)
    too_large = f"--jobs-file {name}: larger than {MAX_BYTES} bytes; split it (at most {MAX_JOBS} job ids)"
    try:
        if path == "-":
            data = read_stream_bounded(stdin or sys.stdin.buffer, MAX_BYTES, name)
        else:
            data = read_bounded(path, MAX_BYTES)
    except TooLarge:
        raise UsageError(too_large) from None
    except OSError as exc:
        raise UsageError(f"--jobs-file {name}: {exc.strerror or type(exc).__name__}") from None
    return parse_jobs(name, data)


def parse_jobs(name: str, data: bytes) -> JobsFile:
    jobs: list[JobLine] = []
    problems: list[tuple[int, str]] = []
    lines = data.removeprefix(b"\xef\xbb\xbf").split(b"\n")
    if lines and not lines[-1]:
        lines.pop()  # the newline that ends the last line does not start another
    for number, raw in enumerate(lines, 1):
        try:
            text = raw.removesuffix(b"\r").decode("utf-8")
        except UnicodeDecodeError as exc:
            problems.append((number, f"is not UTF-8 text (byte {exc.start + 1} of the line)"))
            continue
        job_id = text.strip(" \t")
        if job_id and not job_id.startswith("#"):
            jobs.append(JobLine(number, job_id))
    if len(jobs) > MAX_JOBS:
        raise UsageError(f"--jobs-file {name}: {len(jobs)} job ids; at most {MAX_JOBS} per file, split it")
    return JobsFile(name, jobs, problems)


def operation_ids(prefix: str | None, count: int) -> list[str | None]:
    """`--operation-prefix P`: `P-1` .. `P-<count>`, numbered by the job's place among the file's job ids (not
    its line number, so comments can be added without renaming anything; appending jobs to the file and
    running again creates only the new ones). Without a prefix every id is generated, as for one `enqueue`."""
    if prefix is None:
        return [None] * count
    if problem := operation_id_problem(f"{prefix}-{max(count, 1)}"):
        raise UsageError(
            f"--operation-prefix {shown(prefix)}: with -<n> appended it must be an operation id: {problem}"
        )
    return [f"{prefix}-{n}" for n in range(1, count + 1)]


def refused(file: JobsFile, problems: Sequence[tuple[int, str]], *, admitted: int = 0) -> UsageError:
    """Every bad line on stderr (`FILE:LINE: ...`), then the one error line the command ends with."""
    ordered = sorted(problems)
    for number, text in ordered[:SHOWN_PROBLEMS]:
        print(f"pollwarden: {file.name}:{number}: {shown(text)}", file=sys.stderr)
    if len(ordered) > SHOWN_PROBLEMS:
        print(f"pollwarden: ... and {len(ordered) - SHOWN_PROBLEMS} more bad lines", file=sys.stderr)
    lines = f"{len(ordered)} bad line{'s' if len(ordered) != 1 else ''} (listed above)"
    if admitted:  # another process created some of the same operations meanwhile: whole batches were kept
        return UsageError(
            f"--jobs-file {file.name}: {lines} met while writing; {admitted} operations were admitted before them."
            " Run the same command again to continue"
        )
    return UsageError(f"--jobs-file {file.name}: {lines}; nothing was enqueued")


def line_problems(file: JobsFile, refusals: Sequence[tuple[int, Refuse]]) -> list[tuple[int, str]]:
    """Refusals of the file's requests (by index) as (line number, text). The line's text is not repeated: the
    number finds it, and a line refused for holding the credential must not print it."""
    return [(file.jobs[index].number, refusal.message_for(NAMES)) for index, refusal in refusals]


def summary(file: JobsFile, admitted: Sequence[Admitted]) -> str:
    """One line: how many were created, the first and last of them, and how many were there already."""
    created = [(job, a) for job, a in zip(file.jobs, admitted, strict=True) if a.created]
    existing = [(job, a) for job, a in zip(file.jobs, admitted, strict=True) if not a.created]
    if not created:
        return (
            f"nothing new was created: all {len(existing)} jobs of {file.name} were already enqueued"
            f" (first {existing[0][1].record.operation_id}, last {existing[-1][1].record.operation_id})"
        )
    (first_job, first), (last_job, last) = created[0], created[-1]
    line = (
        f"enqueued {len(created)} operation{'s' if len(created) != 1 else ''} from {file.name}:"
        f" first {first.record.operation_id} (line {first_job.number}),"
        f" last {last.record.operation_id} (line {last_job.number})"
    )
    if existing:
        job, again = existing[0]
        line += (
            f"; {len(existing)} already enqueued (the first: {again.record.operation_id}, line {job.number}),"
            " nothing new was created for them"
        )
    return line
