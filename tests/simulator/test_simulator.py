"""The simulator is the ground truth of the end-to-end tests, so its own behaviour is pinned here
over real HTTP: exact bodies, exact headers, exact request counts."""

from __future__ import annotations

import base64
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any

import httpx
import pytest

from pollwarden.simulator import SCENARIOS, Simulator, Step, substitute

TOKEN = "s3cr3t-token-value"


@pytest.fixture
def sim() -> Iterator[Simulator]:
    with Simulator() as running:
        yield running


@pytest.fixture
def client(sim: Simulator) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=sim.url, timeout=5.0) as c:
        yield c


def states(client: httpx.Client, job_id: str, n: int) -> list[str]:
    return [client.get(f"/jobs/{job_id}").json()["state"] for _ in range(n)]


def test_happy_progression_is_exact(sim: Simulator, client: httpx.Client) -> None:
    assert states(client, "happy-42", 6) == [
        "queued",
        "running",
        "running",
        "succeeded",
        "succeeded",
        "succeeded",
    ]
    last = client.get("/jobs/happy-42")
    assert last.status_code == 200
    assert last.headers["content-type"] == "application/json"
    assert last.json() == {"job_id": "happy-42", "state": "succeeded", "result_url": "/results/happy-42"}
    assert sim.request_count("happy-42") == 7
    result = client.get(last.json()["result_url"])
    assert result.json() == {"job_id": "happy-42", "data": "result of happy-42"}
    # Result fetches are not status requests.
    assert sim.request_count("happy-42") == 7
    assert len(sim.requests("happy-42")) == 8


def test_every_answer_has_a_distinct_provider_request_id(sim: Simulator, client: httpx.Client) -> None:
    ids = [client.get("/jobs/never").headers["x-request-id"] for _ in range(3)]
    ids.append(client.get("/jobs/nope").headers["x-request-id"])
    assert ids == ["sim-1", "sim-2", "sim-3", "sim-4"]
    assert [r.request_id for r in sim.requests()] == ids


def test_unknown_job_is_404_and_scenario_prefix_must_be_exact(client: httpx.Client) -> None:
    for job_id in ("nope", "happyx", "happy_1"):
        response = client.get(f"/jobs/{job_id}")
        assert response.status_code == 404
        assert response.json() == {"error": "no such job"}
    assert client.get("/results/nope").status_code == 404


def test_longest_scenario_name_wins(client: httpx.Client) -> None:
    response = client.get("/jobs/rate_limited_retry_after-1")
    assert response.status_code == 429
    assert response.headers["retry-after"] == "1"
    assert client.get("/jobs/rate_limited_retry_after-1").json()["state"] == "succeeded"
    limited = client.get("/jobs/rate_limited-1")
    assert limited.status_code == 429
    assert "retry-after" not in limited.headers


def test_retry_after_seconds(client: httpx.Client) -> None:
    assert client.get("/jobs/retry_after-1").json()["state"] == "queued"
    busy = client.get("/jobs/retry_after-1")
    assert busy.status_code == 503
    assert busy.headers["retry-after"] == "1"
    assert states(client, "retry_after-1", 3) == ["running", "succeeded", "succeeded"]


def test_retry_after_http_date_is_in_the_future(client: httpx.Client) -> None:
    before = datetime.now(UTC)
    busy = client.get("/jobs/retry_after_date-1")
    after = datetime.now(UTC)
    assert busy.status_code == 503
    when = parsedate_to_datetime(busy.headers["retry-after"])
    # {http_date+2}: the answer's moment plus 2 s, rounded up to the whole second, and the answer came between
    # `before` and `after` (a slow machine only widens the bracket).
    assert before + timedelta(seconds=2) <= when < after + timedelta(seconds=3)
    assert client.get("/jobs/retry_after_date-1").json()["state"] == "succeeded"


def test_placeholders() -> None:
    now = 1_700_000_000.0  # 2023-11-14T22:13:20Z
    assert substitute("/results/{job_id}", job_id="j1", now=now) == "/results/j1"
    assert substitute("{rfc3339-3600}", job_id="j", now=now) == "2023-11-14T21:13:20Z"
    assert substitute("{rfc3339+60}", job_id="j", now=now, time_scale=0.5) == "2023-11-14T22:13:50Z"
    assert substitute("{http_date+2}", job_id="j", now=now + 0.25) == "Tue, 14 Nov 2023 22:13:23 GMT"
    assert substitute("{unknown} {job_id", job_id="j", now=now) == "{unknown} {job_id"


def test_expired_running_is_an_hour_past(client: httpx.Client) -> None:
    before = datetime.now(UTC)
    body = client.get("/jobs/expired_running").json()
    after = datetime.now(UTC)
    assert body["state"] == "running"
    expires = datetime.fromisoformat(body["expires_at"])
    # {rfc3339-3600}: the answer's moment an hour back, to the whole second (truncated).
    assert before - timedelta(hours=1, seconds=1) < expires <= after - timedelta(hours=1)


def test_token_is_enforced_and_never_recorded() -> None:
    with Simulator(token=TOKEN) as sim, httpx.Client(base_url=sim.url) as c:
        missing = c.get("/jobs/happy-1")
        wrong = c.get("/jobs/happy-1", headers={"Authorization": "Bearer nope"})
        right = c.get(
            "/jobs/happy-1",
            headers={"Authorization": f"Bearer {TOKEN}", "X-Api-Key": TOKEN, "X-Trace": "t1"},
        )
        assert [missing.status_code, wrong.status_code, right.status_code] == [401, 401, 200]
        assert missing.json() == {"error": "unauthorized"}
        # Refused requests do not move the script.
        assert right.json()["state"] == "queued"
        assert c.get("/results/happy-1").status_code == 401
        recorded = sim.requests("happy-1")
        assert [r.auth_ok for r in recorded] == [False, False, True, False]
        assert sim.request_count("happy-1") == 3
        assert recorded[2].headers["x-trace"] == "t1"
        for r in recorded:
            assert all(TOKEN not in v and "nope" not in v for v in r.headers.values())
            assert not any(k.lower() in ("authorization", "x-api-key") for k in r.headers)
        dump = c.get("/_sim/requests").text
        assert TOKEN not in dump


def test_auth_ok_is_none_without_token(sim: Simulator, client: httpx.Client) -> None:
    client.get("/jobs/happy-1", headers={"Authorization": "Bearer whatever"})
    (recorded,) = sim.requests("happy-1")
    assert recorded.auth_ok is None
    assert recorded.status == 200
    assert recorded.method == "GET"
    assert recorded.path == "/jobs/happy-1"


def test_submission_202_location_and_idempotency(sim: Simulator, client: httpx.Client) -> None:
    first = client.post("/jobs", json={"scenario": "flaky"}, headers={"Idempotency-Key": "k-1"})
    assert first.status_code == 202
    job_id = first.json()["job_id"]
    assert job_id == "flaky-sub1"
    assert first.headers["location"] == "/jobs/flaky-sub1"
    assert first.json()["status_url"] == f"{sim.url}/jobs/flaky-sub1"
    assert httpx.get(first.json()["status_url"]).status_code == 502

    again = client.post("/jobs", json={"scenario": "flaky"}, headers={"Idempotency-Key": "k-1"})
    assert again.status_code == 202
    assert again.json() == first.json()
    assert client.post("/jobs", json={"scenario": "happy"}, headers={"Idempotency-Key": "k-1"}).status_code == 409

    other = client.post("/jobs", json={}, headers={"Idempotency-Key": "k-2"})
    assert other.json()["job_id"] == "happy-sub2"
    assert client.post("/jobs").json()["job_id"] == "happy-sub3"
    assert client.post("/jobs", json={"scenario": "nope"}).status_code == 400
    # The idempotency key is a credential-like header name: never recorded.
    assert all("idempotency-key" not in {k.lower() for k in r.headers} for r in sim.requests())


def test_cancel(client: httpx.Client) -> None:
    assert client.get("/jobs/never-1").json()["state"] == "running"
    cancelled = client.post("/jobs/never-1/cancel")
    assert cancelled.status_code == 200
    assert cancelled.json()["state"] == "cancelled"
    assert states(client, "never-1", 2) == ["cancelled", "cancelled"]
    assert client.post("/jobs/nope/cancel").status_code == 404
    assert client.get("/jobs/never-1/cancel").status_code == 405


def test_scripting_over_http(client: httpx.Client) -> None:
    script: dict[str, Any] = {
        "job_id": "custom",
        "steps": [
            {"status": 503, "headers": {"Retry-After": "7"}, "body": {"error": "busy"}},
            {"body": {"state": "running"}, "times": 2},
            {"body_base64": base64.b64encode(b"\xff raw").decode()},
        ],
    }
    created = client.post("/_sim/jobs", json=script)
    assert created.status_code == 201
    first = client.get("/jobs/custom")
    assert (first.status_code, first.headers["retry-after"]) == (503, "7")
    assert states(client, "custom", 2) == ["running", "running"]
    for _ in range(2):
        assert client.get("/jobs/custom").content == b"\xff raw"
    listing = client.get("/_sim/requests", params={"job": "custom"}).json()
    assert [r["status"] for r in listing] == [503, 200, 200, 200, 200]
    assert all(isinstance(r["at"], float) and r["job_id"] == "custom" for r in listing)
    assert client.post("/_sim/jobs", json={"job_id": "x", "steps": [{"times": 0}]}).status_code == 400
    assert client.post("/_sim/jobs", json={"job_id": "x", "steps": [{"bogus": 1}]}).status_code == 400


def test_raw_bytes_body_is_sent_as_is(sim: Simulator, client: httpx.Client) -> None:
    garbage = client.get("/jobs/garbage")
    assert garbage.content == b"<html>not json</html>"
    assert garbage.headers["content-type"] == "text/html"
    assert client.get("/jobs/not_utf8").content == b'\xff\xfe{"state": "running"}'


def wait_for_state(client: httpx.Client, job_id: str, state: str, within: float) -> float:
    start = time.monotonic()
    deadline = start + within
    while time.monotonic() < deadline:
        if client.get(f"/jobs/{job_id}").json()["state"] == state:
            return time.monotonic() - start
        time.sleep(0.02)
    raise AssertionError(f"{job_id} did not reach {state} within {within}s")


def test_seconds_step_ends_on_time_not_on_count(sim: Simulator, client: httpx.Client) -> None:
    started = time.monotonic()
    sim.add_job("timed", [Step(body={"state": "running"}, seconds=0.2, times=1), Step(body={"state": "done"})])
    assert states(client, "timed", 3) == ["running", "running", "running"]
    wait_for_state(client, "timed", "done", within=30)  # a guard against a hang: the step ends after 0.2 s
    assert time.monotonic() - started >= 0.2


def test_time_scale_shrinks_seconds() -> None:
    with Simulator(time_scale=0.1) as sim, httpx.Client(base_url=sim.url) as c:
        started = time.monotonic()
        sim.add_job("timed", [Step(body={"state": "running"}, seconds=2.0), Step(body={"state": "done"})])
        wait_for_state(c, "timed", "done", within=30)  # a guard: scaled, the step ends after 0.2 s, not 2 s
        assert time.monotonic() - started >= 0.2


def test_close_gives_transport_error_and_is_recorded(sim: Simulator, client: httpx.Client) -> None:
    sim.add_job("drop", [Step(close=True), Step(body={"state": "running"})])
    with pytest.raises(httpx.TransportError):
        client.get("/jobs/drop")
    assert client.get("/jobs/drop").json() == {"state": "running"}
    assert [r.status for r in sim.requests("drop")] == [None, 200]
    with pytest.raises(httpx.TransportError):
        client.get("/jobs/reset")


def test_delay_lets_a_client_time_out(sim: Simulator) -> None:
    sim.add_job("lag", [Step(body={"state": "running"}, delay=0.3)])
    with httpx.Client(base_url=sim.url, timeout=0.05) as c, pytest.raises(httpx.ReadTimeout):
        c.get("/jobs/lag")
    # The provider answered (late): a lost response, not a failed job.
    assert [r.status for r in sim.requests("lag")] == [200]
    (timeout_step,) = SCENARIOS["timeout"][1]
    assert timeout_step.delay == 5.0


def test_stop_does_not_wait_for_a_delayed_answer() -> None:
    """The answer is 300 s away and the client would wait 600 s for it: the stop returning at all, and the client
    being told of it with an error rather than the answer, is the promise (no bound on how fast it happens)."""
    sim = Simulator()
    sim.start()
    sim.add_job("lag", [Step(body={"state": "running"}, delay=300.0)])
    errors: list[BaseException] = []
    answered: list[httpx.Response] = []

    def call() -> None:
        try:
            answered.append(httpx.get(f"{sim.url}/jobs/lag", timeout=600.0))
        except httpx.TransportError as exc:
            errors.append(exc)

    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    deadline = time.monotonic() + 60
    while sim.request_count("lag") == 0:
        assert time.monotonic() < deadline, "the request never reached the simulator"
        time.sleep(0.01)
    started = time.monotonic()
    sim.stop()
    caller.join(timeout=60)
    assert not caller.is_alive() and time.monotonic() - started < 60  # guards: the stop did not sit out the delay
    assert len(errors) == 1 and answered == []


def test_builtin_scenarios_answer(client: httpx.Client) -> None:
    expected_first = {
        "happy": 200,
        "unauthorized": 401,
        "forbidden": 403,
        "down": 500,
        "flaky": 502,
        "not_found_then_ok": 404,
        "redirect": 302,
        "teapot": 418,
        "rate_limited": 429,
    }
    for name, (description, steps) in SCENARIOS.items():
        assert description and steps
        if name in ("timeout", "reset"):
            continue
        response = client.get(f"/jobs/{name}-t")
        assert response.status_code == expected_first.get(name, response.status_code), name
    assert client.get("/jobs/redirect-t").headers["location"] == "http://127.0.0.2:9/elsewhere"
    assert len(client.get("/jobs/huge-t").content) > 5 * 1024 * 1024
    assert states(client, "bad_hint-u", 1) == ["running"]
    assert client.get("/jobs/failed-t").json()["error"] == {
        "code": "E_QUOTA",
        "message": "export quota exceeded",
    }
    assert "result_url" not in client.get("/jobs/no_result-t").json()
    assert client.get("/jobs/unknown_state-t").json()["state"] == "awaiting_review"


def test_serve_runs_until_sigterm() -> None:
    code = (
        "from pollwarden.simulator import serve\n"
        "serve('127.0.0.1', 0, token=None, time_scale=1.0, on_ready=lambda u: print(u, flush=True))\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        assert httpx.get(f"{url}/jobs/happy").json()["state"] == "queued"
        proc.terminate()
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_simulate_help_lists_every_scenario() -> None:
    """A person finds the scenarios where they look first, `--help`, not only after the server started."""
    proc = subprocess.run(
        [sys.executable, "-m", "pollwarden", "simulate", "--help"], capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 0, proc.stderr
    lines = [" ".join(line.split()) for line in proc.stdout.splitlines()]
    for name, (description, _) in SCENARIOS.items():
        assert f"{name} {description}" in lines, name
