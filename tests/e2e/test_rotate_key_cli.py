"""`pollwarden audit rotate-key`: a new signing key linked to the old one by a rotation the old one signs, through
the real CLI on SQLite and PostgreSQL. A verifier follows the link from the key of every head kept elsewhere."""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

from pollwarden import events as ev
from pollwarden.audit import load_or_create_keys
from pollwarden.audit.keys import stage_signing_key
from pollwarden.simulator import Simulator
from pollwarden.store.base import StoreError
from tests.conftest import run_cli, write_contract
from tests.e2e.conftest import store_of
from tests.e2e.places import EXIT_TAMPERED, Place, _watch

pytestmark = pytest.mark.slow


def _key_id(place: Place) -> str:
    from pollwarden.audit import key_id_of

    return key_id_of(load_or_create_keys(place.home, create=False).public_key)


def _db(place: Place) -> str:
    return place.url or str(place.home / "pollwarden.db")


def test_a_rotated_key_verifies_with_the_witness_holding_heads_of_both_keys(
    fresh: Place, sim: Simulator, tmp_path: Path
) -> None:
    witness = tmp_path / "witness"
    witness.mkdir()
    contract = write_contract(tmp_path / "c.toml", sim.url)
    assert fresh.run("audit", "witness", str(witness))[0] == 0
    _watch(fresh, contract, "happy-1", "op-a")
    old = _key_id(fresh)
    kept_pub = tmp_path / "old-signing.pub"
    shutil.copy(fresh.home / "keys" / "signing.pub", kept_pub)
    code, out, err = fresh.run("audit", "rotate-key", "--by", "alice")
    assert code == 0 and "rotated the signing key" in out, err
    new = _key_id(fresh)
    assert new != old and old in out and new in out
    assert not (fresh.home / "keys" / "signing.key.next").exists()
    _watch(fresh, contract, "happy-2", "op-b")
    assert sorted(p.name for p in witness.iterdir()) == sorted(
        [f"pollwarden-head-{old}.json", f"pollwarden-head-{new}.json"]
    )
    code, report = fresh.verify()
    assert code == 0 and report["witnesses"] == 3, report  # the home's head file and both witness files
    # A copy of the old public key kept elsewhere still pins the store: the rotation it signed leads on.
    assert fresh.verify("--public-key", str(kept_pub))[0] == 0
    out_file = tmp_path / "export.jsonl"
    assert fresh.run("audit", "export", "--out", str(out_file))[0] == 0
    assert any(json.loads(line)["type"] == "rotation" for line in out_file.read_text().splitlines()[1:])
    empty = tmp_path / "elsewhere"
    empty.mkdir()
    ran = run_cli("audit", "verify", "--file", str(out_file), "--public-key", str(kept_pub), home=empty)
    assert ran.code == 0, ran.stdout + ran.stderr
    ran = run_cli("audit", "verify", "--json", "--file", str(out_file), "--witness", str(witness), home=empty)
    assert ran.code == 0 and json.loads(ran.stdout)["witnesses"] == 3, ran.stdout + ran.stderr  # with the .checkpoint
    story = fresh.run("story", "@audit/keys")
    assert story[0] == 0 and "signing key rotated by alice" in story[1], story


def test_a_process_still_holding_the_old_key_is_refused(fresh: Place, sim: Simulator, tmp_path: Path) -> None:
    contract = write_contract(tmp_path / "c.toml", sim.url)
    _watch(fresh, contract, "happy-1", "op-a")
    stale = store_of(_db(fresh), fresh.home)  # opened with the old key, as a running worker holds it
    try:
        assert fresh.run("audit", "rotate-key", "--by", "alice")[0] == 0
        with pytest.raises(StoreError, match="rotated"):
            stale.append("op-a", ev.Paced.prepared({}), stale.db_now())
    finally:
        stale.close()
    code, report = fresh.verify()
    assert code == 0, report["problems"]


def test_a_rotation_cut_short_before_the_new_key_was_in_place_is_finished_by_running_again(
    fresh: Place, sim: Simulator, tmp_path: Path
) -> None:
    contract = write_contract(tmp_path / "c.toml", sim.url)
    _watch(fresh, contract, "happy-1", "op-a")
    new_key = Ed25519PrivateKey.generate()
    stage_signing_key(fresh.home, new_key)
    store = store_of(_db(fresh), fresh.home)
    try:
        store.rotate_signing_key(new_key, by="alice", at=store.db_now())  # committed; the process died here
    finally:
        store.close()
    code, report = fresh.verify()
    assert code == EXIT_TAMPERED and "rotate-key` again" in json.dumps(report["problems"]), report
    code, out, err = fresh.run("audit", "rotate-key", "--by", "alice")
    assert code == 0 and "finished an interrupted rotation" in out, out + err
    _watch(fresh, contract, "happy-2", "op-b")
    assert fresh.verify()[0] == 0


def test_a_key_from_the_environment_is_rotated_into_a_file_of_its_own(fresh: Place, tmp_path: Path) -> None:
    key = Ed25519PrivateKey.generate()
    raw = base64.b64encode(key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())).decode()
    fresh.env = {"POLLWARDEN_SIGNING_KEY": raw}
    assert fresh.run("audit", "witness", str(tmp_path))[0] == 0  # a first head, by the key of the environment
    code, _, err = fresh.run("audit", "rotate-key", "--by", "alice")
    assert code == 2 and "--key-out" in err, err
    out = tmp_path / "new.key"
    code, text, err = fresh.run("audit", "rotate-key", "--by", "alice", "--key-out", str(out))
    assert code == 0, err
    assert raw not in text + err and out.read_text().strip() not in text + err  # no key is ever printed
    assert oct(out.stat().st_mode & 0o777) == "0o600"
    fresh.env = {"POLLWARDEN_SIGNING_KEY": out.read_text().strip()}
    assert fresh.run("audit", "witness", "--clear")[0] == 0  # a head by the new key
    assert fresh.verify()[0] == 0
