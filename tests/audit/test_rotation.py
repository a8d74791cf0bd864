"""Key rotations and the lineage they make, driven directly: each head kept elsewhere must be signed by a key the
rotations link to the key of the newest head, in that key's time; a replaced key links to nothing."""

from __future__ import annotations

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from pollwarden.audit import (
    ALL_LOGS,
    GENESIS_HASH,
    Head,
    HeadFile,
    Problem,
    key_id_of,
    public_key_text,
    sign_head,
    verify,
)
from pollwarden.audit.rotation import Rotation, lineage, sign_rotation

AT = "2025-03-01T12:00:00.000Z"


def _about_the_heads(problems: tuple[Problem, ...]) -> list[Problem]:
    """The findings about heads, keys and witnesses (these heads name logs no test here writes records of)."""
    return [problem for problem in problems if problem.log_id == ALL_LOGS]


def _heads(keys: list[tuple[Ed25519PrivateKey, int]]) -> tuple[list[Head], list[Rotation]]:
    """Heads signed in turn by each key for its number of commits, a rotation after each key's last head."""
    heads: list[Head] = []
    rotations: list[Rotation] = []
    for index, (key, count) in enumerate(keys):
        for _ in range(count):
            counter = len(heads) + 1
            prev = heads[-1].head_hash if heads else GENESIS_HASH
            change = [(f"log-{counter}", 1, "f" * 64)]
            heads.append(
                sign_head(key, counter=counter, prev_hash=prev, changes=change, logs=counter, records=counter, at=AT,
                          vouches=[])
            )  # fmt: skip
        if index + 1 < len(keys):
            last = heads[-1]
            rotations.append(
                sign_rotation(key, keys[index + 1][0].public_key(), counter=last.counter, head_hash=last.head_hash,
                              at=AT)
            )  # fmt: skip
    return heads, rotations


def test_rotations_link_each_key_to_the_next_in_its_time() -> None:
    first, second, third = (Ed25519PrivateKey.generate() for _ in range(3))
    heads, rotations = _heads([(first, 2), (second, 3), (third, 1)])
    hashes = {head.counter: head.head_hash for head in heads}
    found = lineage(rotations, first.public_key(), hashes)
    assert found.problems == ()
    assert [(e.key_id, e.after, e.until) for e in found.epochs] == [
        (key_id_of(first.public_key()), 0, 2),
        (key_id_of(second.public_key()), 2, 5),
        (key_id_of(third.public_key()), 5, None),
    ]
    kept = [HeadFile(heads[1]), HeadFile(heads[4]), HeadFile(heads[5])]  # each key's last head, kept elsewhere
    report = verify([], [], third.public_key(), heads=heads, rotations=rotations, witnesses=kept)
    assert _about_the_heads(report.problems) == [] and report.witnesses == 3


def test_a_head_kept_elsewhere_by_a_key_no_rotation_leads_from_is_tampering() -> None:
    old, forger = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    genuine, _ = _heads([(old, 3)])
    resigned, _ = _heads([(forger, 2)])  # rolled back to head #2, the heads re-signed with a new key
    report = verify([], [], forger.public_key(), heads=resigned, witnesses=[HeadFile(genuine[2], source="w")])
    whats = [p.what for p in report.problems]
    assert not report.ok
    assert any(key_id_of(old.public_key()) in w and "no rotation leads" in w for w in whats), whats
    assert any(w.startswith("rollback: the head #3 kept in w") for w in whats), whats


def test_a_head_signed_by_a_key_after_it_was_rotated_away_is_a_finding() -> None:
    first, second = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    heads, rotations = _heads([(first, 2), (second, 2)])
    late = sign_head(first, counter=3, prev_hash=heads[1].head_hash, changes=[("log-3", 1, "f" * 64)], logs=3,
                     records=3, at=AT, vouches=[])  # fmt: skip
    report = verify([], [], second.public_key(), heads=heads, rotations=rotations, witnesses=[HeadFile(late)])
    assert any("which signs heads #1–#2 only" in p.what for p in report.problems), report.problems


def test_a_forged_or_misplaced_rotation_ends_the_lineage_with_a_finding() -> None:
    first, second, forger = (Ed25519PrivateKey.generate() for _ in range(3))
    heads, (rotation,) = _heads([(first, 2), (second, 1)])
    hashes = {head.counter: head.head_hash for head in heads}
    forged = Rotation(
        rotation.counter,
        rotation.head_hash,
        rotation.at,
        rotation.old_public,
        public_key_text(forger),
        rotation.signature,
    )
    assert "forged or altered" in lineage([forged], first.public_key(), hashes).problems[0]
    moved = sign_rotation(first, second.public_key(), counter=1, head_hash=heads[1].head_hash, at=AT)
    assert "holds" in lineage([moved], first.public_key(), hashes).problems[0]
    foreign = sign_rotation(forger, second.public_key(), counter=2, head_hash=heads[1].head_hash, at=AT)
    later = sign_rotation(second, forger.public_key(), counter=3, head_hash=heads[2].head_hash, at=AT)
    found = lineage([rotation, later], first.public_key(), hashes)
    assert found.problems == () and len(found.epochs) == 3
    assert "rotations were rewritten" in lineage([rotation, foreign], first.public_key(), hashes).problems[0]


def test_the_newest_head_is_the_rotations_own_signed_by_the_old_key() -> None:
    first, second = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    heads, _ = _heads([(first, 2)])
    rotation = sign_rotation(first, second.public_key(), counter=2, head_hash=heads[1].head_hash, at=AT)
    assert _about_the_heads(verify([], [], second.public_key(), heads=heads, rotations=[rotation]).problems) == []
    stale = verify([], [], first.public_key(), heads=heads, rotations=[rotation])
    assert any("rotation was not finished" in p.what for p in stale.problems)
