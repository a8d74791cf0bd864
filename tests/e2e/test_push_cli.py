"""Woken by the provider (issue 27), end to end: `pollwarden hooks` receives a signed push from a loopback
provider, and a `pollwarden watch` in another process, asleep for ten minutes by its schedule, checks at once;
every bad push is refused and changes nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from pollwarden.simulator import Simulator, Step
from pollwarden.simulator.push import Pusher, forged, signed_push
from tests.conftest import run_cli, write_contract
from tests.loopback import post

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
PUSH = '\n[push]\nkind = "standard-webhooks"\nsecret_env = "EXPORTS_HOOK"\njob_id = "data.id"\n'


def signed(job_id: str, delivery: str, *, stamp: int | None = None) -> tuple[dict[str, str], bytes]:
    """A Standard Webhooks delivery as the provider sends it."""
    return signed_push(SECRET, job_id, delivery, stamp=stamp, event="export.done")


def _spawn(home: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "pollwarden", *args],
        env={**os.environ, "POLLWARDEN_HOME": str(home), "EXPORTS_HOOK": SECRET},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )


@pytest.fixture
def hooks(home: Path, db_args: tuple[str, ...]) -> Iterator[str]:
    """`pollwarden hooks --port 0` in its own process; its base URL, read from the line it prints."""
    proc = _spawn(home, "hooks", "--port", "0", *db_args)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "receiving provider pushes on " in line, proc.stderr.read() if proc.stderr else line
        yield line.split(" on ", 1)[1].split("/hooks/", 1)[0]
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=20)
        assert proc.returncode == 0, err
        assert SECRET not in out + err


def _wait_for_request(sim: Simulator, job_id: str, count: int) -> None:
    deadline = time.monotonic() + 120  # only against a hang: a loaded machine may take tens of seconds
    while sim.request_count(job_id) < count:
        assert time.monotonic() < deadline, f"the provider never saw request {count} for {job_id}"
        time.sleep(0.01)


def test_a_watch_in_another_process_is_woken_by_a_signed_push(
    sim: Simulator, home: Path, tmp_path: Path, hooks: str, db_args: tuple[str, ...]
) -> None:
    sim.add_job("exp-1", [Step(body={"state": "running"}), Step(body={"state": "succeeded", "result_url": "/r/1"})])
    contract = write_contract(tmp_path / "c.toml", sim.url, base_delay="10m", max_delay="10m", deadline="1h",
                              extra=PUSH)  # fmt: skip
    watch = _spawn(home, "watch", "--contract", str(contract), "--job", "exp-1", "--json", *db_args)
    try:
        _wait_for_request(sim, "exp-1", 1)  # asleep for ten minutes from here, but for the push
        bad_headers, body = signed("exp-1", "msg_forged")
        bad_headers["webhook-signature"] = forged(bad_headers["webhook-signature"])
        assert post(f"{hooks}/hooks/exports", bad_headers, body) == 401
        assert post(f"{hooks}/hooks/exports", *signed("exp-1", "msg_stale", stamp=int(time.time()) - 600)) == 401
        assert post(f"{hooks}/hooks/exports", *signed("exp-1", "msg_2Kx9")) == 202
        out, err = watch.communicate(timeout=60)
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.communicate()
    assert watch.returncode == 0, err
    final = json.loads(out.strip().splitlines()[-1])
    assert final["phase"] == "succeeded" and final["status_requests_used"] == 2
    assert sim.request_count("exp-1") == 2
    story = run_cli("story", final["operation"], *db_args, home=home).stdout
    assert "woken by provider push (delivery msg_2Kx9" in story
    assert "msg_forged" not in story and "msg_stale" not in story  # a refused delivery leaves no trace
    woke, checked = story.index("woken by provider push"), story.rindex("succeeded")
    assert woke < checked
    events = json.loads(run_cli("story", final["operation"], "--json", *db_args, home=home).stdout)
    assert [e["kind"] for e in events].count("woken_by_push") == 1
    # The same delivery again: answered alike, nothing changes.
    assert post(f"{hooks}/hooks/exports", *signed("exp-1", "msg_2Kx9")) == 202
    again = json.loads(run_cli("story", final["operation"], "--json", *db_args, home=home).stdout)
    assert len(again) == len(events)


def test_the_receiver_refuses_what_is_not_a_push(
    home: Path, hooks: str, tmp_path: Path, db_args: tuple[str, ...]
) -> None:
    contract = write_contract(tmp_path / "c.toml", "http://127.0.0.1:9", extra=PUSH)
    assert run_cli("contracts", "install", str(contract), "--by", "alice", *db_args, home=home).code == 0
    headers, body = signed("exp-1", "msg_big")
    assert post(f"{hooks}/hooks/nothing-here", headers, body) == 404
    assert post(f"{hooks}/hooks/exports", headers, b"x" * (256 * 1024 + 1)) == 413
    assert post(f"{hooks}/hooks/exports", *signed("no-such-job", "msg_x")) == 202  # as for a known job
    with urllib.request.urlopen(f"{hooks}/metrics", timeout=10) as answer:
        metrics = answer.read().decode()
    assert 'outcome="too_large"' in metrics and 'outcome="accepted"' in metrics


def _serving(proc: subprocess.Popen[str]) -> str:
    """The receiver's base URL, from the worker's `hooks_serving` log line."""
    assert proc.stderr is not None
    for line in proc.stderr:
        entry = json.loads(line)
        if entry.get("event") == "hooks_serving":
            return str(entry["url"]).split("/hooks/", 1)[0]
    raise AssertionError("the worker never said where it receives pushes")


def test_a_worker_is_woken_by_a_signed_push_to_its_hooks_port(
    sim: Simulator, home: Path, tmp_path: Path, db_args: tuple[str, ...]
) -> None:
    sim.add_job("exp-2", [Step(body={"state": "running"}), Step(body={"state": "succeeded", "result_url": "/r/2"})])
    contract = write_contract(tmp_path / "c.toml", sim.url, base_delay="10m", max_delay="10m", deadline="1h",
                              extra=PUSH)  # fmt: skip
    installed = run_cli("contracts", "install", str(contract), "--by", "operator", *db_args, home=home)
    assert installed.code == 0, installed.stderr
    enqueued = run_cli("enqueue", "--contract", str(contract), "--job", "exp-2", *db_args, home=home)
    assert enqueued.code == 0, enqueued.stderr
    worker = _spawn(home, "worker", "--processes", "1", "--hooks-port", "0", *db_args)
    try:
        url = _serving(worker)
        _wait_for_request(sim, "exp-2", 1)  # then nothing for ten minutes, but for the push
        assert post(f"{url}/hooks/exports", *signed("exp-2", "msg_worker")) == 202
        _wait_for_request(sim, "exp-2", 2)
    finally:
        worker.terminate()
        worker.communicate(timeout=30)
    assert sim.request_count("exp-2") == 2


@pytest.mark.parametrize("db_args", [()])
def test_a_storm_of_signed_pushes_costs_one_check_per_min_interval(
    sim: Simulator, home: Path, tmp_path: Path, hooks: str, db_args: tuple[str, ...]
) -> None:
    """1,000 signed pushes (each its own delivery) for one running job, while its watch waits: the provider sees
    at most one check per second of the storm, plus the first."""
    sim.add_job("exp-storm", [Step(body={"state": "running"})])
    contract = write_contract(tmp_path / "c.toml", sim.url, base_delay="10m", max_delay="10m", deadline="1h",
                              max_requests=100, extra=PUSH)  # fmt: skip
    watch = _spawn(home, "watch", "--contract", str(contract), "--job", "exp-storm", "--json")
    try:
        _wait_for_request(sim, "exp-storm", 1)
        began = time.monotonic()
        answers = {post(f"{hooks}/hooks/exports", *signed("exp-storm", f"msg_storm_{n}")) for n in range(1000)}
        _wait_for_request(sim, "exp-storm", 2)  # the storm woke a check at once
        lasted = time.monotonic() - began
        caused = sim.request_count("exp-storm") - 1
    finally:
        watch.terminate()
        watch.communicate(timeout=30)
    assert answers == {202}
    assert 1 <= caused <= int(lasted) + 2, (caused, lasted)


@pytest.mark.parametrize("db_args", [()])
def test_the_simulated_provider_pushes_at_the_jobs_end_and_the_worker_checks_at_once(
    home: Path, tmp_path: Path, db_args: tuple[str, ...]
) -> None:
    """The loopback provider itself announces the end (`Simulator(pusher=...)`), as OpenAI or Replicate would."""
    pusher = Pusher("http://127.0.0.1:9/unset", SECRET)
    with Simulator(pusher=pusher) as sim:
        contract = write_contract(tmp_path / "c.toml", sim.url, base_delay="10m", max_delay="10m", deadline="1h",
                                  extra=PUSH)  # fmt: skip
        assert run_cli("contracts", "install", str(contract), "--by", "operator", *db_args, home=home).code == 0
        worker = _spawn(home, "worker", "--processes", "1", "--hooks-port", "0", *db_args)
        try:
            pusher.url = f"{_serving(worker)}/hooks/exports"
            # Running for 5 s from now, then done: the first check sees it running, the push says it ended.
            sim.add_job("exp-6", [Step(body={"state": "running"}, seconds=5.0),
                                  Step(body={"state": "succeeded", "result_url": "/r/6"})])  # fmt: skip
            assert run_cli("enqueue", "--contract", str(contract), "--job", "exp-6", *db_args, home=home).code == 0
            _wait_for_request(sim, "exp-6", 2)
        finally:
            worker.terminate()
            worker.communicate(timeout=30)
        assert pusher.sent == {"exp-6": 202}
        assert sim.request_count("exp-6") == 2
    status = run_cli("status", "--json", *db_args, home=home)
    assert '"succeeded"' in status.stdout, status.stdout
