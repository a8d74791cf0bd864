"""The broker's parts that need no OS users: the lists, the secrets file, a person's words, the unit it prints."""

from __future__ import annotations

import grp
import os
import pwd
import socket
from pathlib import Path

import pytest

from pollwarden.cli.brokered import Refused, parse
from pollwarden.isolation.checks import read_secrets, secrets_problems
from pollwarden.isolation.peers import Peer, Who, WhoError, peer_of, role_of
from pollwarden.isolation.systemd import systemd_unit
from tests.conftest import run_cli

ME = pwd.getpwuid(os.getuid()).pw_name
MY_GROUP = grp.getgrgid(os.getgid()).gr_name


def test_the_kernel_names_the_peer_of_a_socket() -> None:
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with left, right:
        peer = peer_of(left)
    assert (peer.uid, peer.gid, peer.pid, peer.user) == (os.getuid(), os.getgid(), os.getpid(), ME)


def test_who_lists_take_users_and_groups_and_refuse_unknown_names() -> None:
    who = Who.parse("--agents", f" {ME}, @{MY_GROUP} ,")
    assert who.users == {ME} and who.groups == {MY_GROUP}
    assert who.includes(os.getuid())
    assert Who.parse("--agents", f"@{MY_GROUP}").includes(os.getuid())  # by primary group alone
    for text, said in (
        ("", "name at least one user or @group"),
        ("no-such-user-pw", "no user named 'no-such-user-pw'"),
        ("@no-such-group-pw", "no group named 'no-such-group-pw'"),
    ):
        with pytest.raises(WhoError, match=said):
            Who.parse("--agents", text)


def test_a_user_on_both_lists_or_on_neither_has_no_role() -> None:
    me = Peer(uid=os.getuid(), gid=os.getgid(), pid=1, user=ME)
    mine, other = Who.parse("--x", ME), Who.parse("--x", "nobody")
    assert role_of(me, mine, other) == "agent"
    assert role_of(me, other, mine) == "approver"
    assert role_of(me, mine, mine) is None
    assert role_of(me, other, other) is None


def test_a_secrets_file_is_read_without_ever_showing_a_value(tmp_path: Path) -> None:
    path = tmp_path / "secrets"
    path.write_text(
        "# comment\n\nEXPORTS_TOKEN=abc=def\nexport QUOTED='q v'\n9BAD=leaky-value\nnot a line leaky-two\n",
        encoding="utf-8",
    )
    path.chmod(0o600)
    values, problems = read_secrets(path)
    assert values == {"EXPORTS_TOKEN": "abc=def", "QUOTED": "q v"}
    assert [p.split(": ", 1)[1] for p in problems] == [
        "line 5 is not KEY=VALUE (a name of letters, digits and _)",
        "line 6 is not KEY=VALUE (a name of letters, digits and _)",
    ]
    assert "leaky" not in " ".join(problems)
    assert secrets_problems(path, os.getuid()) == []
    path.chmod(0o644)
    assert secrets_problems(path, os.getuid()) == [f"--secrets {path} is open to others (mode 0644): chmod 600 {path}"]


def test_a_persons_words_are_run_as_themselves() -> None:
    args = parse(["decide", "d1", "--option", "1", "--connect", "/s"], "alice")
    assert (args.by, args.connect, args.option) == ("alice", None, 1)
    assert parse(["approve-call", "c1", "--by", "alice"], "alice").by == "alice"
    assert parse(["approve-session", "s1", "--b", "alice"], "alice").by == "alice"  # an abbreviation too
    with pytest.raises(Refused, match="--by 'mallory' is not you"):
        parse(["decide", "d1", "--option", "1", "--by", "mallory"], "alice")
    with pytest.raises(Refused, match="--by 'mallory' is not you"):
        parse(["approve-call", "c1", "--by=mallory"], "alice")
    for words in (["status", "--home", "/x"], ["decisions", "--db", "/x.db"], ["decide", "d", "--ho", "/x"]):
        with pytest.raises(Refused, match="--home and --db do not go with --connect"):
            parse(words, "alice")


def test_a_person_without_a_broker_is_told_which_socket_is_missing(tmp_path: Path) -> None:
    ran = run_cli("decisions", "--connect", str(tmp_path / "none.sock"), home=tmp_path / "home")
    assert ran.code == 2
    assert f"no broker socket at {tmp_path / 'none.sock'} (is `pollwarden broker` running" in ran.stderr
    assert not (tmp_path / "home").exists()  # nothing was opened, nothing made


def test_the_broker_needs_its_lists_and_the_shim_needs_no_contracts(tmp_path: Path) -> None:
    ran = run_cli("broker", "--socket", str(tmp_path / "s"), home=tmp_path / "home")
    assert ran.code == 2 and "the broker needs --contracts, --agents, --approvers" in ran.stderr, ran.stderr
    both = run_cli("mcp", "--connect", str(tmp_path / "s"), "--contracts", str(tmp_path), home=tmp_path / "h")
    assert both.code == 2 and "give --connect alone" in both.stderr, both.stderr
    neither = run_cli("mcp", home=tmp_path / "h")
    assert neither.code == 2 and "give --contracts DIR" in neither.stderr


def test_the_systemd_unit_runs_the_broker_as_its_own_user() -> None:
    unit = systemd_unit(
        executable="/usr/bin/pollwarden", contracts=None, agents="bot", approvers="@ops", console_port=None
    )
    for line in (
        "User=pollwarden",
        "StateDirectory=pollwarden",
        "RuntimeDirectory=pollwarden",
        "LoadCredential=secrets:/etc/pollwarden/secrets",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
    ):
        assert line in unit.splitlines()
    assert "EnvironmentFile=" in unit
    assert (
        "ExecStart=/usr/bin/pollwarden broker --home ${STATE_DIRECTORY} --contracts /etc/pollwarden/contracts"
        " --socket ${RUNTIME_DIRECTORY}/broker.sock --agents bot --approvers @ops --secrets"
        " ${CREDENTIALS_DIRECTORY}/secrets"
    ) in unit
    printed = run_cli("broker", "--print-systemd-unit", "--agents", "bot", "--approvers", "@ops", home=Path("/x"))
    assert printed.code == 0 and "User=pollwarden" in printed.stdout
