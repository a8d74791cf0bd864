"""Item 11: text a provider or a person wrote reaches a terminal, a log or a page only through `shown`."""

from __future__ import annotations

import json
from pathlib import Path

from pollwarden.simulator import Simulator, Step
from tests.conftest import run_cli, write_contract

# Clears the screen, rings the bell, then forges a line a person would read before deciding.
EVIL = "\x1b[2J\x1b[H\x07running\r\nStopped because: nothing, all good \u202egnp.exe\x9b"
RAW = ("\x1b", "\x07", "\r", "\u202e", "\x9b")


def _clean(text: str) -> None:
    assert not [ch for ch in RAW if ch in text], repr(text)
    assert "Stopped because: nothing" not in text.splitlines()


def test_provider_text_is_escaped_on_every_command(sim: Simulator, tmp_path: Path, home: Path) -> None:
    sim.add_job("evil-1", [Step(body={"state": EVIL, "error": {"message": EVIL}})])
    contract = write_contract(tmp_path / "c.toml", sim.url)
    watched = run_cli("watch", "--contract", str(contract), "--job", "evil-1", "--operation", "op", home=home)
    assert watched.code == 4, watched.stderr
    assert "\\x1b[2J" in watched.stdout
    outputs = [watched.stdout, watched.stderr]
    commands: list[tuple[str, ...]] = [("status",), ("status", "op"), ("story", "op"), ("decisions",), ("why", "op")]
    for args in commands:
        ran = run_cli(*args, home=home)
        assert ran.code == 0, (args, ran.stderr)
        outputs += [ran.stdout, ran.stderr]
    for text in outputs:
        _clean(text)
    for args in (
        ("status", "op", "--json"),
        ("decisions", "--json"),
        ("story", "op", "--json"),
        ("why", "op", "--json"),
    ):
        ran = run_cli(*args, home=home)
        assert ran.code == 0, (args, ran.stderr)
        assert ran.stdout.isascii()  # ensure_ascii: no raw control, bidi or other code point reaches a terminal
        _clean(ran.stdout)
        assert "\\u001b[2J" in ran.stdout  # the JSON keeps the original, escaped the JSON way
        json.loads(ran.stdout)


def test_decide_refuses_control_characters_in_by_and_note(sim: Simulator, tmp_path: Path, home: Path) -> None:
    sim.add_job("odd-1", [Step(body={"state": "odd"})])
    contract = write_contract(tmp_path / "c.toml", sim.url)
    assert run_cli("watch", "--contract", str(contract), "--job", "odd-1", "--operation", "op", home=home).code == 4
    decision = json.loads(run_cli("decisions", "--json", home=home).stdout)[0]["decision_id"]
    for flags in (("--by", "alice\x1b[2J"), ("--by", "alice", "--note", "ok\r\nforged"), ("--by", "bob\u202e")):
        ran = run_cli("decide", decision, "--option", "1", *flags, home=home)
        assert ran.code == 2, (flags, ran.stdout, ran.stderr)
        assert "control character" in ran.stderr
        assert "Traceback" not in ran.stderr
    assert json.loads(run_cli("decisions", "--json", home=home).stdout)[0]["decision_id"] == decision  # still open
