"""What the broker refuses to start with, and the socket it serves (issue 22: `pollwarden broker`)."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from .users import Broker, Place, Users, broker_args


def _refused(users: Users, place: Place, *extra: str, user: str | None = None, **swap: str) -> str:
    argv = broker_args(users, place, *extra)
    for flag, value in swap.items():
        argv[argv.index(f"--{flag}") + 1] = value
    ran = users.run(user or users.service, "broker", *argv, timeout=60)
    assert ran.returncode == 2, (ran.stdout, ran.stderr)
    assert "the broker will not start" in ran.stderr or "error:" in ran.stderr
    assert not place.socket.exists()
    return ran.stderr


def test_a_home_others_can_read_is_refused_with_the_fix(users: Users, place: Place) -> None:
    os.chmod(place.home, 0o750)
    assert f"--home {place.home} is open to others (mode 0750): chmod 700 {place.home}" in _refused(users, place)


def test_a_secrets_file_others_can_read_is_refused(users: Users, place: Place) -> None:
    os.chmod(place.secrets, 0o640)
    assert f"chmod 600 {place.secrets}" in _refused(users, place)


def test_contracts_others_can_change_are_refused(users: Users, place: Place) -> None:
    os.chmod(place.contracts / "exports.toml", 0o666)
    assert "can be changed by others (mode 0666): chmod go-w" in _refused(users, place)


def test_one_user_on_both_lists_is_refused(users: Users, place: Place) -> None:
    said = _refused(users, place, approvers=f"{users.agent},{users.approver}")
    assert f"{users.agent} would be both an agent and an approver" in said


def test_an_unknown_name_is_refused(users: Users, place: Place) -> None:
    assert "--approvers: no group named 'no-such-group-pw'" in _refused(users, place, approvers="@no-such-group-pw")


def test_root_is_refused(users: Users, place: Place) -> None:
    assert "the broker must not run as root" in _refused(users, place, user="root")


def test_the_socket_is_the_brokers_group_only(users: Users, place: Place, start: Callable[..., Broker]) -> None:
    start()
    info = place.socket.stat()
    assert stat.S_IMODE(info.st_mode) == 0o660
    assert info.st_uid == users.uid(users.service)
    outsider = users.run("nobody", "decisions", "--connect", str(place.socket))
    assert outsider.returncode == 2
    assert "refused this user (permission denied)" in outsider.stderr, outsider.stderr
    # A second broker on the same socket is refused while the first serves it.
    second = users.run(users.service, "broker", *broker_args(users, place), timeout=60)
    assert second.returncode == 2 and "another broker is serving" in second.stderr, second.stderr


def test_an_absent_home_is_made_private(users: Users, place: Place, start: Callable[..., Broker]) -> None:
    os.rmdir(place.home)
    place.root.chmod(0o755)
    os.chown(place.root, users.uid(users.service), -1)  # the service manager's StateDirectory= parent, say
    start()
    assert stat.S_IMODE(place.home.stat().st_mode) == 0o700
    assert (place.home / "keys").is_dir()


@pytest.mark.parametrize("flag", ["--home", "--db"])
def test_a_person_cannot_point_the_broker_elsewhere(
    users: Users, place: Place, start: Callable[..., Broker], flag: str, tmp_path: Path
) -> None:
    start()
    ran = users.run(users.approver, "decisions", flag, "/tmp/elsewhere", "--connect", str(place.socket))
    assert ran.returncode == 2 and "do not go with --connect" in ran.stderr, ran.stderr


def test_a_socket_directory_others_can_change_is_refused(users: Users, place: Place) -> None:
    os.chmod(place.run, 0o777)
    assert f"its directory {place.run} can be changed by others (mode 0777" in _refused(users, place)
