"""The credential never appears in any output, file, log, event or error (R47, DESIGN 'Conventions')."""

from __future__ import annotations

from pathlib import Path

from pollwarden.simulator import Simulator
from tests.conftest import run_cli, write_contract

SECRET = "sk-live-7f3a9c1e-DO-NOT-LEAK-42"


def _all_bytes_under(path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file())


def test_secret_never_leaks(home: Path, tmp_path: Path) -> None:
    with Simulator(token=SECRET) as sim:
        contract = write_contract(tmp_path / "c.toml", sim.url, secret_env="PW_TOKEN")
        env = {"PW_TOKEN": SECRET}
        outputs = []
        for job in ("happy-1", "failed-1", "reset-1", "unknown_state-1"):
            ran = run_cli(
                "watch", "--contract", str(contract), "--job", job, "--operation", job, "--json", home=home, env=env
            )
            outputs += [ran.stdout, ran.stderr]
            outputs += [run_cli("story", job, home=home).stdout, run_cli("story", job, "--json", home=home).stdout]
        outputs.append(run_cli("status", "--json", home=home).stdout)
        assert all(r.auth_ok for r in sim.requests() if r.job_id == "happy-1")
    # a wrong credential: the provider says 401 and the error text must still not carry the value
    with Simulator(token="another") as sim2:
        contract2 = write_contract(tmp_path / "c2.toml", sim2.url, secret_env="PW_TOKEN")
        ran = run_cli("watch", "--contract", str(contract2), "--job", "happy-2", home=home, env={"PW_TOKEN": SECRET})
        assert ran.code == 4 and "authorization_denied" in ran.stdout
        outputs += [ran.stdout, ran.stderr]
    export = tmp_path / "export.jsonl"
    ran = run_cli("audit", "export", "--out", str(export), home=home)
    assert ran.code == 0, ran.stderr
    outputs += [ran.stdout, export.read_text(), run_cli("audit", "verify", "--json", home=home).stdout]
    outputs += [run_cli("why", job, "--json", home=home).stdout for job in ("happy-1", "failed-1")]
    for text in outputs:
        assert SECRET not in text
    assert SECRET.encode() not in _all_bytes_under(home)
