"""The Python API: a typed outcome from the same core, store and audit as `pollwarden watch`."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import timedelta
from pathlib import Path

import pytest

import pollwarden
from pollwarden import Progress, Stopped, Succeeded, Watch, WatchError, watch, watch_sync
from pollwarden.core.reasons import StopReason
from pollwarden.home.operating import open_store
from pollwarden.simulator import Simulator, Step
from tests.conftest import run_cli, write_contract


def test_sync_watch_succeeds_with_the_validated_result(sim: Simulator, tmp_path: Path, home: Path) -> None:
    contract = write_contract(tmp_path / "c.toml", sim.url)
    outcome = Watch(contract, "happy-1", home=home, operation_id="api-happy").run()
    assert isinstance(outcome, Succeeded)
    assert (outcome.operation_id, outcome.result) == ("api-happy", "/results/happy-1")
    assert outcome.record.status_requests_used == sim.request_count("happy-1") == 4
    # The same store and audit as the CLI: `status` and `story` read what the API left.
    status = run_cli("status", "api-happy", "--json", home=home)
    assert json.loads(status.stdout)["phase"] == "succeeded"
    story = run_cli("story", "api-happy", home=home)
    assert story.code == 0 and "succeeded" in story.stdout
    again = Watch(contract, home=home, operation_id="api-happy").run()  # resumed: nothing more is sent
    assert isinstance(again, Succeeded) and sim.request_count("happy-1") == 4


def test_watch_sync_stops_with_the_open_decision(sim: Simulator, tmp_path: Path, home: Path) -> None:
    contract = write_contract(tmp_path / "c.toml", sim.url)
    outcome = watch_sync(contract, "unknown_state-1", home=home, max_requests=5)
    assert isinstance(outcome, Stopped)
    assert outcome.reason is StopReason.UNKNOWN_STATE and not outcome.job_ended
    assert outcome.decision is not None and outcome.decision.operation_id == outcome.operation_id
    listed = json.loads(run_cli("decisions", "--json", home=home).stdout)
    assert [d["decision_id"] for d in listed] == [outcome.decision.decision_id]


def test_async_watch_does_not_block_the_event_loop(sim: Simulator, tmp_path: Path, home: Path) -> None:
    contract = write_contract(tmp_path / "c.toml", sim.url, base_delay="200ms", max_delay="400ms")
    ticks: list[float] = []

    async def ticker(stop: asyncio.Event) -> None:
        while not stop.is_set():
            ticks.append(time.time())  # the simulator's clock for the requests it records
            await asyncio.sleep(0.02)

    async def main() -> tuple[pollwarden.Outcome, pollwarden.Outcome]:
        stop = asyncio.Event()
        tick_task = asyncio.create_task(ticker(stop))
        outcomes = await asyncio.gather(
            watch(contract, "happy-2", home=home), watch(contract, "failed-2", home=home, deadline="30s")
        )
        stop.set()
        await tick_task
        return outcomes[0], outcomes[1]

    succeeded, stopped = asyncio.run(main())
    assert isinstance(succeeded, Succeeded) and succeeded.result == "/results/happy-2"
    assert isinstance(stopped, Stopped) and stopped.reason is StopReason.JOB_FAILED and stopped.job_ended
    # The loop kept running while the watches slept between polls: it ticked between happy-2's first and last
    # request (four, three sleeps apart). A watch that blocked the loop would leave no tick while it ran; a slow
    # machine only spaces the ticks out (a count of them was a timing).
    first, *_, last = (r.at for r in sim.requests("happy-2"))
    assert any(first < tick < last for tick in ticks), (first, last, ticks)


def test_an_existing_store_is_shared_and_limits_are_never_widened(sim: Simulator, tmp_path: Path, home: Path) -> None:
    contract = write_contract(tmp_path / "c.toml", sim.url)
    store = open_store(home)
    try:
        first = Watch(contract, "never-3", store=store, max_requests=2, operation_id="api-never").run()
        assert isinstance(first, Stopped) and first.reason is StopReason.REQUEST_BUDGET_EXHAUSTED
        with pytest.raises(WatchError, match="exceeds the approved 2"):
            Watch(contract, store=store, max_requests=10, operation_id="api-never").run()
        with pytest.raises(WatchError, match="watches job never-3"):
            Watch(contract, "other", store=store, operation_id="api-never").run()
        assert [e.kind for e in store.events("api-never")][-1] == "resume_refused"
    finally:
        store.close()
    assert sim.request_count("never-3") == 2


def test_contracts_that_need_agent_approval_are_refused_in_process(sim: Simulator, tmp_path: Path) -> None:
    contract = write_contract(tmp_path / "c.toml", sim.url)
    contract.write_text('approval = "per_call"\n' + contract.read_text(encoding="utf-8"), encoding="utf-8")
    with pytest.raises(WatchError, match="pollwarden mcp"):
        Watch(contract, "happy-1", home=tmp_path / "home")
    with pytest.raises(WatchError, match="job_id"):
        Watch(write_contract(tmp_path / "d.toml", sim.url), "", home=tmp_path / "home")
    assert sim.request_count("happy-1") == 0


def test_a_contract_that_may_not_be_watched_is_said_first_whatever_else_is_wrong(tmp_path: Path) -> None:
    """As before the preamble (issue 25): the contract's own refusal comes before the job id, operation id and
    duration checks, so a caller fixes the contract, not the arguments it can never use."""
    contract = write_contract(tmp_path / "c.toml", "http://127.0.0.1:9")
    unsafe = contract.read_text(encoding="utf-8").replace("safe_status = true", "safe_status = false", 1)
    contract.write_text(unsafe, encoding="utf-8")
    for options in ({}, {"operation_id": "bad id"}, {"job_id": "j-1", "deadline": "soon"}):
        with pytest.raises(WatchError, match="safe_status = false"):
            Watch(contract, home=tmp_path / "home", **options)  # type: ignore[arg-type]
    assert not (tmp_path / "home").exists()


def test_a_shipped_contract_by_name_with_vars_and_a_status_url(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.loopback import provider

    with provider() as gitlab:
        gitlab.answer("/api/v4/projects/42/pipelines/7", (200, {"status": "success", "web_url": f"{gitlab.url}/p/7"}))
        monkeypatch.setenv("GITLAB_TOKEN", "glpat-api-test")
        outcome = watch_sync("gitlab-pipeline", "7", home=home, vars={"base_url": gitlab.url, "project": "42"})
        with pytest.raises(WatchError, match="unknown var projct; this contract declares: base_url, project"):
            Watch("gitlab-pipeline", "7", home=home, vars={"projct": "1"})
        for wrong in ("project=42", {"project": 42}, {None: "42"}):
            with pytest.raises(WatchError, match="vars must be a mapping of names to strings"):
                Watch("gitlab-pipeline", "7", home=home, vars=wrong)  # type: ignore[arg-type]
        with pytest.raises(WatchError, match="status_url contract 'gitlab-pipeline' does not take a status URL"):
            Watch("gitlab-pipeline", home=home, vars={"project": "4"}, status_url=f"{gitlab.url}/x")
        with pytest.raises(WatchError, match=r"job_id has an empty, '\.' or '\.\.' path segment"):
            contract = tmp_path / "g.toml"
            contract.write_text(
                f'name = "g"\nstatus_url = "{gitlab.url}/v1/{{job_id:path}}"\nstatus_url_handles = true\n'
                '[states]\npending = ["r"]\nsuccess = ["success"]\nfailure = ["f"]\n[fields]\nstate = "status"\n',
                encoding="utf-8",
            )
            Watch(contract, "a/../b", home=home)
        with pytest.raises(WatchError, match="status_url is not on"):
            Watch(contract, home=home, status_url="http://evil.example/v1/x")
        assert [s.headers["private-token"] for s in gitlab.seen] == ["glpat-api-test"]  # refusals sent nothing
    assert isinstance(outcome, Succeeded) and outcome.result == f"{gitlab.url}/p/7"


def test_a_respelt_numeric_id_resumes_its_operation(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 23: a pipeline id is an integer; `007` and `+7.0` are pipeline 7, one operation and one budget."""
    from tests.loopback import provider

    with provider() as gitlab:
        gitlab.answer("/api/v4/projects/42/pipelines/7", (200, {"status": "success", "web_url": f"{gitlab.url}/p/7"}))
        monkeypatch.setenv("GITLAB_TOKEN", "glpat-api-test")
        where = {"base_url": gitlab.url, "project": "42"}
        first = watch_sync("gitlab-pipeline", "007", home=home, vars=where)
        again = watch_sync("gitlab-pipeline", "+7.0", home=home, vars=where)
        assert isinstance(first, Succeeded) and again.operation_id == first.operation_id
        assert first.record.job_id == "7" and len(gitlab.seen) == 1  # the second found it finished: nothing sent
        with pytest.raises(WatchError, match="job_id must be a whole number, like 42"):
            Watch("gitlab-pipeline", "7a", home=home, vars=where)


def test_on_progress_gets_one_polled_progress_per_request_in_order(sim: Simulator, tmp_path: Path, home: Path) -> None:
    contract = write_contract(tmp_path / "c.toml", sim.url)
    seen: list[Progress] = []
    outcome = pollwarden.watch_sync(contract, "happy-5", home=home, on_progress=seen.append)
    assert isinstance(outcome, Succeeded)
    polled = [p for p in seen if p.polled]
    assert [p.checks_used for p in polled] == [1, 2, 3, 4] == list(range(1, sim.request_count("happy-5") + 1))
    assert [p.state for p in polled] == ["queued", "running", "running", "succeeded"]
    assert all(isinstance(p, Progress) and p.operation_id == outcome.operation_id for p in seen)
    assert [p.final for p in seen].count(True) == 1 and seen[-1].final  # the last one, and only it
    assert all(p.next_check_at is not None for p in seen[:-1])


def test_useful_for_shorter_than_the_deadline_stops_at_the_usefulness_bound(
    sim: Simulator, tmp_path: Path, home: Path
) -> None:
    # R12, R33: the business deadline is kept apart from the provider deadline, and stops first.
    sim.add_job("forever-1", [Step(body={"state": "running"})])
    contract = write_contract(tmp_path / "c.toml", sim.url, base_delay="50ms", max_delay="50ms", max_requests=200)
    outcome = pollwarden.watch_sync(contract, "forever-1", home=home, deadline="1m", useful_for="400ms")
    assert isinstance(outcome, pollwarden.Stopped)
    assert outcome.reason.value == "usefulness_window_closed"
    record = outcome.record
    assert record is not None and record.plan.useful_until is not None
    assert record.plan.useful_until < record.deadline_at
    assert record.plan.useful_until - record.created_at == timedelta(milliseconds=400)
    assert 1 <= record.status_requests_used == sim.request_count("forever-1") < 200  # stopped well short of it


@pytest.mark.parametrize(
    ("useful_for", "words"),
    [
        ("soon", "useful_for: "),
        ("0s", "useful_for must be longer than zero"),
        (10, "useful_for must be a timedelta or a duration like '10m'"),
    ],
)
def test_a_bad_useful_for_is_a_watch_error_naming_it(
    useful_for: str, words: str, sim: Simulator, tmp_path: Path, home: Path
) -> None:
    contract = write_contract(tmp_path / "c.toml", sim.url)
    with pytest.raises(pollwarden.WatchError, match=words):
        Watch(contract, "happy-8", home=home, deadline="1m", useful_for=useful_for)
    assert sim.request_count("happy-8") == 0


@pytest.mark.parametrize(
    ("lag_target", "words"), [("0s", "lag_target must be longer than zero"), ("-3s", "lag_target: ")]
)
def test_a_bad_lag_target_is_a_watch_error_naming_it(
    lag_target: str, words: str, sim: Simulator, tmp_path: Path, home: Path
) -> None:
    contract = write_contract(tmp_path / "c.toml", sim.url)
    with pytest.raises(pollwarden.WatchError, match=words):
        Watch(contract, "happy-8", home=home, lag_target=lag_target)
    assert sim.request_count("happy-8") == 0


def test_a_lag_target_is_kept_in_the_operations_plan(sim: Simulator, tmp_path: Path, home: Path) -> None:
    contract = write_contract(tmp_path / "c.toml", sim.url)
    outcome = pollwarden.watch_sync(contract, "happy-10", home=home, lag_target="45s")
    assert isinstance(outcome, Succeeded)
    assert outcome.record.plan.schedule.lag_target == timedelta(seconds=45)


def test_a_misspelt_keyword_is_a_type_error_naming_it_and_nothing_is_sent(
    sim: Simulator, tmp_path: Path, home: Path
) -> None:
    """The keywords are declared once (`WatchOptions`); a caller the type checker does not see still gets the
    TypeError a misspelt keyword argument always raised, from all three entry points."""
    contract = write_contract(tmp_path / "c.toml", sim.url)
    wrong: dict[str, object] = {"home": home, "deadlin": "5m"}
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'deadlin'.*deadline"):
        Watch(contract, "happy-8", **wrong)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="'deadlin'"):
        watch_sync(contract, "happy-8", **wrong)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="'deadlin'"):
        asyncio.run(watch(contract, "happy-8", **wrong))  # type: ignore[arg-type]
    assert sim.request_count("happy-8") == 0


def test_useful_for_goes_through_admission_and_is_never_widened_on_resume(
    sim: Simulator, tmp_path: Path, home: Path
) -> None:
    contract = write_contract(tmp_path / "c.toml", sim.url)
    first = pollwarden.watch_sync(contract, "happy-9", home=home, operation_id="op-useful", useful_for="30s")
    assert isinstance(first, Succeeded) and first.record.plan.useful_until is not None
    with pytest.raises(pollwarden.WatchError, match="cannot watch: useful_for 50s would move the usefulness window"):
        pollwarden.watch_sync(contract, home=home, operation_id="op-useful", useful_for="50s")


def test_a_credential_fixed_after_a_401_is_checked_once_by_the_resumed_watch(
    guarded: Simulator, secret: str, tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    guarded.add_job("api-401", [Step(body={"state": "succeeded", "result_url": "/r/api"})])
    contract = write_contract(tmp_path / "c.toml", guarded.url, secret_env="API_RECHECK_TOKEN")
    monkeypatch.setenv("API_RECHECK_TOKEN", "pw-wrong-key-3a")
    denied = Watch(contract, "api-401", home=home, operation_id="api-401").run()
    assert isinstance(denied, Stopped) and denied.reason is StopReason.AUTHORIZATION_DENIED
    assert denied.decision is not None
    recheck = denied.decision.option(1)
    assert (recheck.kind.value, recheck.label) == ("recheck", "check once with the credential configured now")
    # The person decides where no credential is configured: the check is left to the resumed watch.
    monkeypatch.delenv("API_RECHECK_TOKEN")  # `decide` inherits this process's environment
    decided = run_cli("decide", denied.decision.decision_id, "--option", "1", "--by", "alice", home=home)
    assert decided.code == 0 and guarded.request_count("api-401") == 1, decided.stdout + decided.stderr
    monkeypatch.setenv("API_RECHECK_TOKEN", secret)  # fixed where this code reads it
    resumed = Watch(contract, home=home, operation_id="api-401").run()
    assert isinstance(resumed, Succeeded) and resumed.result == "/r/api"
    assert resumed.record.status_requests_used == guarded.request_count("api-401") == 2


def test_a_deadline_not_longer_than_the_first_check_is_a_watch_error_naming_both(
    sim: Simulator, tmp_path: Path, home: Path
) -> None:
    contract = write_contract(tmp_path / "c.toml", sim.url)
    text = contract.read_text(encoding="utf-8").replace("[schedule]\n", '[schedule]\nfirst_check = "30s"\n')
    contract.write_text(text, encoding="utf-8")
    with pytest.raises(WatchError, match=r"deadline 2s is not longer than contract 'exports''s first_check 30s"):
        Watch(contract, "happy-9", home=home, deadline="2s")
    assert sim.request_count("happy-9") == 0 and not (home / "pollwarden.db").exists()
