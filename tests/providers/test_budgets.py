"""The six job APIs of issue 24: each contract's default budget lasts its default deadline under its own schedule,
computed from the schedule's worst case, not a simulation's average.

Bounded jitter waits at least half of min(max_delay, base_delay * 2^n) after the n-th check (`core.schedule`);
so the most checks a watch can spend before its deadline is when every wait is that half. A budget that covers
that many covers every watch (100% of them, beyond the issue's 99%): a job that ends at the deadline stops with
its outcome or `deadline_exceeded`, never `request_budget_exhausted` first. An extension's checks cover its time
the same way, at the longest delay (a watch that is extended has backed off already).
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from pollwarden.catalogue import shipped_contract
from pollwarden.core.contract import Contract
from pollwarden.core.reasons import Jitter
from pollwarden.core.schedule import jittered, raw_delay

NEW = {
    "kubernetes-job": {"namespace": "batch"},
    "bigquery-job": {"project": "p", "location": "US"},
    "databricks-run": {"base_url": "https://my-workspace.cloud.databricks.com"},
    "aws-step-functions-execution": {"region": "eu-west-1"},
    "vertex-ai-batch-prediction": {"project": "p", "location": "us-central1"},
    "assemblyai-transcript": {},
}


def most_checks(contract: Contract, within: timedelta) -> int:
    """The most status checks a watch can send in `within` from its start: every wait the shortest one."""
    schedule = contract.schedule
    at, checks = schedule.first_check, 0
    while at <= within:
        checks += 1
        at += jittered(schedule, raw_delay(schedule, checks), 0.0)
    return checks


@pytest.mark.parametrize("name", NEW)
def test_the_default_budget_lasts_the_default_deadline(name: str) -> None:
    contract = shipped_contract(name, NEW[name])
    assert contract.schedule.jitter is Jitter.BOUNDED  # full jitter may wait nothing: no worst case to budget for
    needed = most_checks(contract, contract.limits.deadline)
    assert contract.limits.max_requests >= needed, (
        f"{name}: {contract.limits.max_requests} checks, but {needed} fit in {contract.limits.deadline}"
    )
    # And not far more than that: a budget nobody can spend is no bound on what the provider sees.
    assert contract.limits.max_requests <= needed * 1.05 + 10, (name, contract.limits.max_requests, needed)


@pytest.mark.parametrize("name", NEW)
def test_an_extension_lasts_its_time(name: str) -> None:
    contract = shipped_contract(name, NEW[name])
    shortest = jittered(contract.schedule, contract.schedule.max_delay, 0.0)
    assert contract.escalation.extend_checks >= contract.escalation.extend / shortest, name


def test_the_worst_case_is_counted_as_the_schedule_runs() -> None:
    """first_check 5 s, then waits of 5, 10, 20, 40, 60 s (half of 10, 20, 40, 80, 120): checks at 5, 10, 20, 40,
    80 and 140 s."""
    contract = shipped_contract("kubernetes-job", NEW["kubernetes-job"])
    assert [most_checks(contract, timedelta(seconds=s)) for s in (4, 5, 9, 10, 79, 80, 140)] == [0, 1, 1, 2, 4, 5, 6]
