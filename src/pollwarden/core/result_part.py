"""What part of a job a kept result is: all of a validated success, or the finished part of a job the provider
ended (`[result].partial`: an expired batch's output file), with the provider's counts. Every interface that shows
or fetches a result asks here, so none can take a partial result for the whole, or refuse one another fetches.
"""

from __future__ import annotations

from typing import Any

from .contract.result import counts_text
from .reasons import Phase
from .record import OperationRecord


def no_result_problem(record: OperationRecord) -> str | None:
    """Why `record` has nothing to fetch, or None: a validated success, or a stop that kept the finished part of a
    job the provider ended (`[result].partial`: an expired batch's output file). Every interface asks this."""
    if record.result is not None and (record.phase is Phase.SUCCEEDED or record.partial):
        return None
    state = record.reason.value if record.reason else record.phase.value
    return (
        f"operation {record.operation_id} has no validated result ({state}); output may be fetched only after a"
        " validated success, or from the finished part a job that ended left (R6, R17)"
    )


def result_part(record: OperationRecord) -> dict[str, Any]:
    """What part of the job a fetched result is: all of a success, or the finished part of a job that ended (why,
    and the provider's counts), so a reader never takes a partial result for the whole."""
    return {
        "partial": record.partial,
        "ended": None if record.reason is None else record.reason.value,
        "counts": None if record.counts is None else dict(record.counts),
    }


def part_words(record: OperationRecord) -> str | None:
    """`result_part` in a line a person reads (None for a success without counts: the result is all there is)."""
    told = counts_text(record.counts)
    if record.partial:
        ended = record.reason.value.replace("_", " ") if record.reason else "ended"
        return f"a partial result: the finished part of a job that ended ({ended})" + (f": {told}" if told else "")
    return None if told is None else f"the result covers: {told}"
