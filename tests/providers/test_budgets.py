"""Every shipped contract's budget lasts its deadline, computed from the schedule's worst case (issue 24).

openai-batch gave 200 checks to a 25 h deadline; with its schedule most full-length watches spent the budget
first, so a batch that ended at the window stopped `request_budget_exhausted` instead of with its outcome. A
simulation's average hides that: the worst case is the jitter's shortest delays (bounded jitter keeps at least
half of each capped delay), so the budget here is held to the shortest time N requests can span, computed with
the core's own `raw_delay` and `jittered` (u = 0). A budget that lasts then lasts in every watch, not 99%.

Person-granted extensions are held to the same rule: "extend by 6h with 40 more checks" that spends its checks in
3 h is a promise the option does not keep. And a budget far above what its deadline can use is a poller that is
not bounded by its deadline after all, so neither may be more than half again what the worst case needs.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from pollwarden.catalogue import shipped, shipped_contract, shipped_names
from pollwarden.core.contract.parse import Contract, Schedule
from pollwarden.core.reasons import Jitter
from pollwarden.core.schedule import jittered, raw_delay

SLACK = 1.5
"""How much more than the worst case needs a budget may grant."""


def _vars(name: str) -> dict[str, str]:
    """A placeholder for each var the contract requires (budgets do not depend on them)."""
    (described,) = [s for s in shipped() if s.name == name]
    return {var: ("https://provider.example" if var.endswith("_url") else "x") for var in described.required_vars}


def shortest_span(schedule: Schedule, requests: int) -> timedelta:
    """The least time `requests` status requests can take: the first after `first_check`, each next one after
    the shortest delay the schedule allows (the k-th wait follows k completed polls, as `decide` computes it)."""
    span = schedule.first_check
    for completed in range(1, requests):
        span += jittered(schedule, raw_delay(schedule, completed), 0.0)
    return span


def requests_needed(schedule: Schedule, deadline: timedelta) -> int:
    """How many requests it takes, at the shortest delays, to reach `deadline`: fewer and the worst-case watch
    spends its budget before its deadline."""
    needed = 1
    while shortest_span(schedule, needed) < deadline:
        needed += 1
    return needed


def extension_checks_needed(contract: Contract) -> int:
    """An extension polls at once, then at the capped delay (the polls so far have grown it to the cap)."""
    shortest = jittered(contract.schedule, contract.schedule.max_delay, 0.0)
    return 1 + int(contract.escalation.extend / shortest)


@pytest.mark.parametrize("name", shipped_names())
def test_the_default_budget_lasts_the_default_deadline_in_the_worst_case(name: str) -> None:
    contract = shipped_contract(name, _vars(name))
    schedule, limits = contract.schedule, contract.limits
    assert schedule.jitter is Jitter.BOUNDED, f"{name}: full jitter has no shortest delay but zero; nothing lasts"
    span = shortest_span(schedule, limits.max_requests)
    needed = requests_needed(schedule, limits.deadline)
    assert span >= limits.deadline, (
        f"{name}: {limits.max_requests} requests can all be spent in {span} at the schedule's shortest delays,"
        f" before the {limits.deadline} deadline; it needs max_requests = {needed} (or a longer max_delay)"
    )
    assert limits.max_requests <= SLACK * needed, (
        f"{name}: {limits.max_requests} requests are far more than the {needed} its deadline can use"
    )


@pytest.mark.parametrize("name", shipped_names())
def test_an_extension_s_checks_last_its_time_in_the_worst_case(name: str) -> None:
    contract = shipped_contract(name, _vars(name))
    escalation = contract.escalation
    needed = extension_checks_needed(contract)
    assert needed <= escalation.extend_checks <= SLACK * needed, (
        f"{name}: the extension offers {escalation.extend_checks} checks for {escalation.extend}; at the capped"
        f" delay's shortest ({jittered(contract.schedule, contract.schedule.max_delay, 0.0)}) it needs {needed}"
    )


def test_the_worst_case_is_the_core_s_own_shortest_schedule() -> None:
    """The arithmetic above against a schedule small enough to count by hand: first check 30 s, base 60 s,
    cap 10 min, bounded jitter (OpenAI's): waits of at least 60, 120, 240, then 300 s each."""
    schedule = Schedule(
        base_delay=timedelta(seconds=60), max_delay=timedelta(minutes=10), first_check=timedelta(seconds=30)
    )
    assert shortest_span(schedule, 1) == timedelta(seconds=30)
    assert shortest_span(schedule, 5) == timedelta(seconds=30 + 60 + 120 + 240 + 300)
    # The 200 checks openai-batch had: about 16.5 h of a 25 h deadline.
    assert shortest_span(schedule, 200) == timedelta(seconds=30 + 60 + 120 + 240 + 300 * 196)
    assert requests_needed(schedule, timedelta(hours=25)) == 303
