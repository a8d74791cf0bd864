"""A witness that holds (issue 23), on SQLite and PostgreSQL, through the real CLI.

The attack of the issue: roll back the database and the home's head file together, make a new signing key and
re-sign every head with it. `audit verify` looked the witness file up by the home's key id, so it found none and
said "intact", with the witness configured and with POLLWARDEN_AUDIT_WITNESS set; deleting the home's witness
setting silenced it too.
"""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

from pollwarden.audit import Head, key_id_of, public_key_text, read_kept_file, write_head_file
from pollwarden.audit.heads import _signed_message
from pollwarden.simulator import Simulator
from tests.conftest import run_cli
from tests.e2e.places import EXIT_TAMPERED, Place, _roll_back
from tests.e2e.test_vouched_rows_cli import _rows
from tests.loopback import Answer, Seen, serving

pytestmark = pytest.mark.slow

HEAD_COLUMNS = "counter, prev_hash, changes, logs, records, at, head_hash, key_id, signature, vouches"


def _resigned(head: Head, key: Ed25519PrivateKey) -> Head:
    """The same head (its hash covers no key) signed by another key, as a forger with a new key makes it."""
    key_id = key_id_of(key.public_key())
    return head._replace(key_id=key_id, signature=key.sign(_signed_message(head.head_hash, key_id)).hex())


def _new_key_and_resign(place: Place) -> str:
    """Replace the home's signing key with a new one and re-sign every head, the home's head file too."""
    key = Ed25519PrivateKey.generate()
    raw = key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    keys = place.home / "keys"
    (keys / "signing.key").write_text(base64.b64encode(raw).decode() + "\n")
    (keys / "signing.pub").write_text(public_key_text(key.public_key()) + "\n")
    for row in _rows(place, f"SELECT {HEAD_COLUMNS} FROM audit_heads ORDER BY counter"):
        head = _resigned(Head.from_row(row), key)
        place.execute(
            "UPDATE audit_heads SET key_id = ?, signature = ? WHERE counter = ?",
            head.key_id,
            head.signature,
            head.counter,
        )
    kept_path = place.home / "audit-head.checkpoint"
    kept = read_kept_file(kept_path)
    assert not isinstance(kept, type(None)) and hasattr(kept, "head")
    write_head_file(kept_path, _resigned(kept.head, key), kept.logs)  # type: ignore[union-attr]
    return key_id_of(key.public_key())


def _witness(place: Place, tmp_path: Path) -> Path:
    witness = tmp_path / "witness"
    witness.mkdir()
    code, _, err = place.run("audit", "witness", str(witness))
    assert code == 0, err
    return witness


def _problems_text(report: dict[str, object]) -> str:
    return json.dumps(report["problems"])


def test_a_rollback_re_signed_with_a_new_key_is_caught_by_the_configured_witness(
    fresh: Place, sim: Simulator, tmp_path: Path
) -> None:
    witness = _witness(fresh, tmp_path)
    _roll_back(fresh, sim, tmp_path)
    new_key = _new_key_and_resign(fresh)
    code, report = fresh.verify()
    assert code == EXIT_TAMPERED, report
    text = _problems_text(report)
    assert "rollback" in text and new_key in text and "rotation" in text, text
    assert str(witness) in json.dumps(report)


def test_the_same_attack_is_caught_with_the_witness_given_by_the_environment(
    fresh: Place, sim: Simulator, tmp_path: Path
) -> None:
    witness = tmp_path / "witness"
    witness.mkdir()
    fresh.env = {"POLLWARDEN_AUDIT_WITNESS": str(witness)}
    _roll_back(fresh, sim, tmp_path)
    _new_key_and_resign(fresh)
    code, report = fresh.verify()
    assert code == EXIT_TAMPERED, report
    assert "rollback" in _problems_text(report)


def test_deleting_the_homes_witness_setting_is_reported_and_the_witness_still_checked(
    fresh: Place, sim: Simulator, tmp_path: Path
) -> None:
    witness = _witness(fresh, tmp_path)
    _roll_back(fresh, sim, tmp_path)
    (fresh.home / "audit-witness").unlink()
    code, report = fresh.verify()
    assert code == EXIT_TAMPERED, report
    text = _problems_text(report)
    assert "setting is gone" in text and str(witness) in text and "rollback" in text, text


def test_verify_is_told_the_witness_with_a_flag(fresh: Place, sim: Simulator, tmp_path: Path) -> None:
    witness = _witness(fresh, tmp_path)
    _roll_back(fresh, sim, tmp_path)
    _new_key_and_resign(fresh)
    fresh.execute("DELETE FROM audit_settings")
    (fresh.home / "audit-witness").unlink()
    code, report = fresh.verify("--witness", str(witness))
    assert code == EXIT_TAMPERED, report
    assert "rollback" in _problems_text(report)


# -- a witness URL, read back with GET ----------------------------------------------------------------------


class _WitnessService:
    """A witness as a small service would be: it keeps the newest head each key posted, and answers GET with them."""

    def __init__(self) -> None:
        self.kept: dict[str, bytes] = {}
        self.down = False

    def post(self, seen: Seen) -> Answer:
        head = json.loads(seen.body)["head"]
        kept = self.kept.get(head["key_id"])
        if kept is None or json.loads(kept)["head"]["counter"] < head["counter"]:
            self.kept[head["key_id"]] = seen.body
        return Answer(204)

    def get(self, seen: Seen) -> Answer:
        if self.down:
            return Answer(503, b"{}")
        return Answer(200, b"[" + b",".join(self.kept.values()) + b"]", {"Content-Type": "application/json"})


def test_a_witness_url_is_read_back_and_holds_against_a_new_key(fresh: Place, sim: Simulator, tmp_path: Path) -> None:
    service = _WitnessService()
    with serving({("POST", "/heads"): service.post, ("GET", "/heads"): service.get}) as witness:
        url = f"{witness.url}/heads"
        assert fresh.run("audit", "witness", url)[0] == 0
        _roll_back(fresh, sim, tmp_path)
        assert service.kept, "the witness was sent no head"
        _new_key_and_resign(fresh)
        code, report = fresh.verify()
        assert code == EXIT_TAMPERED and "rollback" in _problems_text(report), report
        assert url in str(report["trusted_checkpoint"])
        service.down = True
        code, report = fresh.verify()
        assert code == EXIT_TAMPERED and "cannot be read (it answered HTTP 503)" in _problems_text(report), report


def test_a_witness_directory_that_is_gone_is_a_failure_not_silence(fresh: Place, tmp_path: Path) -> None:
    witness = _witness(fresh, tmp_path)
    shutil.rmtree(witness)
    code, report = fresh.verify()
    assert code == EXIT_TAMPERED and f"the witness at {witness} cannot be read" in _problems_text(report), report
    code, _, err = fresh.run("audit", "verify", "--witness", "relative/dir")
    assert code == 2 and "absolute path" in err, err


def test_heads_of_another_store_in_the_witness_location_are_reported(
    fresh: Place, sim: Simulator, tmp_path: Path
) -> None:
    witness = _witness(fresh, tmp_path)
    other = tmp_path / "other-home"
    other.mkdir()
    assert run_cli("audit", "witness", str(witness), home=other).code == 0  # a second store, the same directory
    code, report = fresh.verify()
    assert code == EXIT_TAMPERED and "give each store a witness location of its own" in _problems_text(report)
