"""Key files for the audit log, kept in the home directory and never in the same file as the log.

Two independent keys: the AES key (reading) and the Ed25519 signing key (checkpoints). Losing the AES key
loses readability; the public half of the signing key is all a verifier needs.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, PublicFormat

from pollwarden.audit.checkpoint import key_id_of, load_public_key_text, public_key_text
from pollwarden.audit.crypto import KEY_BYTES, AuditKeyError
from pollwarden.core.bounded import TooLarge, read_bounded
from pollwarden.home.directory import KEYS_DIR, tighten_own_dir

__all__ = [
    "AUDIT_KEY_ENV",
    "SIGNING_KEY_ENV",
    "AuditKeys",
    "install_signing_key",
    "key_sources",
    "load_or_create_keys",
    "load_public_key",
    "read_public_key_file",
    "refuse_private_key",
    "stage_signing_key",
    "staged_signing_key",
    "write_private_key_file",
]

AUDIT_KEY_ENV = "POLLWARDEN_AUDIT_KEY"
SIGNING_KEY_ENV = "POLLWARDEN_SIGNING_KEY"
_AUDIT_FILE = "audit.key"
_SIGNING_FILE = "signing.key"
_PUBLIC_FILE = "signing.pub"
KEY_FILES = (_AUDIT_FILE, _SIGNING_FILE, _PUBLIC_FILE)


@dataclass(frozen=True)
class AuditKeys:
    """`cipher_key` / `signing_key` are None only when loaded without creating and the key is absent."""

    cipher_key: bytes | None
    signing_key: Ed25519PrivateKey | None
    public_key: Ed25519PublicKey

    def __repr__(self) -> str:
        # A dataclass repr would print the raw AES key.
        cipher = "<hidden>" if self.cipher_key else None
        signing = "<hidden>" if self.signing_key else None
        public = public_key_text(self.public_key)
        return f"AuditKeys(cipher_key={cipher}, signing_key={signing}, public_key={public})"


def _keys_dir(home: Path) -> Path:
    return Path(home) / KEYS_DIR


def _decode(text: str, expected: int, source: str, what: str) -> bytes:
    try:
        raw = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise AuditKeyError(
            f"{source} does not hold valid base64: expected {what} ({expected} bytes, base64-encoded); "
            "restore the right key (or, if nothing was written with it yet, remove it to get a new one)"
        ) from None
    if len(raw) != expected:
        raise AuditKeyError(
            f"{source} decodes to {len(raw)} bytes, expected {what} ({expected} bytes, base64-encoded); "
            "restore the right key"
        )
    return raw


def _read_key_file(path: Path) -> str:
    """Read a private key file, refusing one that other users could read (or a symlink to one)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        raise AuditKeyError(f"cannot read key file {path}: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise AuditKeyError(f"key file {path} is not a regular file")
        mode = stat.S_IMODE(info.st_mode)
        if mode & 0o077:
            raise AuditKeyError(
                f"key file {path} is readable or writable by group or others (mode {mode:04o}); "
                f"run `chmod 600 {path}` and check nobody else copied it"
            )
        with os.fdopen(fd, "r", encoding="ascii", errors="replace") as handle:
            fd = -1
            return handle.read()
    finally:
        if fd >= 0:
            os.close(fd)


def _create_exclusive(path: Path, content: bytes, mode: int) -> bool:
    """Write `content` to `path` only if `path` does not exist; True when this call created it.

    The content goes to a private temp file first, is fsynced, then hard-linked into place: the link fails
    if another process won the race, so two processes can never end up with different keys, and nobody
    ever reads a half-written key.
    """
    temp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        try:
            os.fchmod(fd, mode)  # the umask may have removed bits we want (0644 for the public key)
            os.write(fd, content)
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(temp, path)
        except FileExistsError:
            return False
        except OSError:
            # A filesystem without hard links: fall back to O_EXCL on the final name.
            try:
                final = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
            except FileExistsError:
                return False
            try:
                os.fchmod(final, mode)
                os.write(final, content)
                os.fsync(final)
            finally:
                os.close(final)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
    _fsync_dir(path.parent)
    return True


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _ensure_dir(directory: Path) -> None:
    if not directory.exists():
        try:
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise AuditKeyError(f"cannot create key directory {directory}: {exc.strerror}") from None
    elif not directory.is_dir():
        raise AuditKeyError(f"{directory} exists but is not a directory; move it away so keys can be stored")
    tighten_own_dir(directory, KEY_FILES)  # created under any umask, or left open by an older pollwarden


def _signing_from_raw(raw: bytes, source: str) -> Ed25519PrivateKey:
    try:
        return Ed25519PrivateKey.from_private_bytes(raw)
    except ValueError:
        raise AuditKeyError(f"{source} is not a valid Ed25519 private key; restore the right key") from None


def _private_text(key: Ed25519PrivateKey) -> bytes:
    raw = key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    return base64.b64encode(raw) + b"\n"


def _load_cipher_key(directory: Path, create: bool) -> bytes | None:
    env = os.environ.get(AUDIT_KEY_ENV)
    if env:
        return _decode(env, KEY_BYTES, f"environment variable {AUDIT_KEY_ENV}", "an AES-256 key")
    path = directory / _AUDIT_FILE
    if not path.exists() and create:
        _create_exclusive(path, base64.b64encode(os.urandom(KEY_BYTES)) + b"\n", 0o600)
    if not path.exists():
        return None
    return _decode(_read_key_file(path), KEY_BYTES, f"key file {path}", "an AES-256 key")


def _load_signing_key(directory: Path, create: bool) -> Ed25519PrivateKey | None:
    env = os.environ.get(SIGNING_KEY_ENV)
    if env:
        source = f"environment variable {SIGNING_KEY_ENV}"
        return _signing_from_raw(_decode(env, 32, source, "a raw Ed25519 private key"), source)
    path = directory / _SIGNING_FILE
    if not path.exists() and create:
        _create_exclusive(path, _private_text(Ed25519PrivateKey.generate()), 0o600)
    if not path.exists():
        return None
    source = f"key file {path}"
    return _signing_from_raw(_decode(_read_key_file(path), 32, source, "a raw Ed25519 private key"), source)


# A public key file is one short line; anything much longer is not one, and is not read whole.
_PUBLIC_FILE_LIMIT = 4096
_PUBLIC_FILE_SHAPE = (
    "a public key file holds one line, the 32-byte raw Ed25519 public key base64-encoded (as keys/signing.pub)"
)


def _read_public_file(path: Path) -> Ed25519PublicKey:
    try:
        data = read_bounded(path, _PUBLIC_FILE_LIMIT)
    except OSError as exc:
        raise AuditKeyError(f"cannot read public key file {path}: {exc.strerror}; {_PUBLIC_FILE_SHAPE}") from None
    except TooLarge:
        over = f"public key file {path} is over {_PUBLIC_FILE_LIMIT} bytes"
        raise AuditKeyError(f"{over}; {_PUBLIC_FILE_SHAPE}") from None
    return load_public_key_text(data.decode("ascii", errors="replace"), source=f"public key file {path}")


def read_public_key_file(path: Path) -> Ed25519PublicKey:
    """A public key given by hand (`audit verify --public-key`), in the format `signing.pub` is written.

    Every error names the file and what a key file looks like; a public key is no secret, but the file
    may be the wrong one, so its content is never echoed.
    """
    return _read_public_file(Path(path))


def refuse_private_key(key: Ed25519PublicKey, source: str, known_key_ids: Iterable[str]) -> None:
    """Refuse a "public" key whose 32 bytes are really the private key of a key seen here.

    signing.key and signing.pub have the same shape, so a private key given for the public one parses as a
    (wrong) public key; caught here, it is named as the mistake it is instead of reported as a foreign key.
    """
    raw = key.public_bytes(Encoding.Raw, PublicFormat.Raw)
    if key_id_of(Ed25519PrivateKey.from_private_bytes(raw).public_key()) in set(known_key_ids):
        raise AuditKeyError(
            f"{source} holds the private signing key, not the public key: pass keys/signing.pub instead, "
            "and keep the private key where only the writer can read it"
        )


def load_or_create_keys(home: Path, *, create: bool = True) -> AuditKeys:
    """Load both keys (environment first, then files), creating missing files unless `create` is False.

    With ``create=False`` a missing key is returned as None instead of being generated: a reader that
    silently made a fresh AES key would make every existing record unreadable to it. Environment keys
    are never written to disk.
    """
    directory = _keys_dir(home)
    if create:
        _ensure_dir(directory)
    cipher_key = _load_cipher_key(directory, create)
    signing_key = _load_signing_key(directory, create)
    public_path = directory / _PUBLIC_FILE
    if signing_key is not None:
        public_key = signing_key.public_key()
        if os.environ.get(SIGNING_KEY_ENV):
            return AuditKeys(cipher_key, signing_key, public_key)
        if not public_path.exists():
            if create:
                _create_exclusive(public_path, public_key_text(public_key).encode("ascii") + b"\n", 0o644)
        elif public_key_text(_read_public_file(public_path)) != public_key_text(public_key):
            raise AuditKeyError(
                f"public key file {public_path} does not match {directory / _SIGNING_FILE}; "
                "if signing.key is the right key, delete signing.pub and it will be rewritten"
            )
        return AuditKeys(cipher_key, signing_key, public_key)
    public = load_public_key(home)
    if public is None:
        raise AuditKeyError(
            f"no audit signing key in {directory} and {SIGNING_KEY_ENV} is not set; "
            "run a pollwarden command that writes to the log to create the keys, or set the variable"
        )
    return AuditKeys(cipher_key, None, public)


_STAGED_FILE = "signing.key.next"
"""A new signing key written before its rotation commits, and put in place after (`pollwarden audit rotate-key`)."""


def stage_signing_key(home: Path, key: Ed25519PrivateKey) -> None:
    """Write the key a rotation is about to link, beside the key in use: if the process dies once the rotation
    has committed, the key the store now expects is there to be put in place (`staged_signing_key`)."""
    directory = _keys_dir(home)
    _ensure_dir(directory)
    path = directory / _STAGED_FILE
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)  # a key staged by a rotation that never committed: no head names it
    if not _create_exclusive(path, _private_text(key), 0o600):
        raise AuditKeyError(f"{path} was written by another process meanwhile: is another rotation running?")


def staged_signing_key(home: Path) -> Ed25519PrivateKey | None:
    """The key a rotation staged and did not put in place yet, or None."""
    path = _keys_dir(home) / _STAGED_FILE
    if not path.exists():
        return None
    source = f"key file {path}"
    return _signing_from_raw(_decode(_read_key_file(path), 32, source, "a raw Ed25519 private key"), source)


def install_signing_key(home: Path, key: Ed25519PrivateKey) -> None:
    """Put the staged key in place of the home's signing key, its public half beside it: each file replaced
    whole (renamed over the old one), the private key first."""
    directory = _keys_dir(home)
    staged = directory / _STAGED_FILE
    found = staged_signing_key(home)
    if found is None or public_key_text(found) != public_key_text(key):
        raise AuditKeyError(f"{staged} does not hold the key to install; nothing was changed")
    os.replace(staged, directory / _SIGNING_FILE)
    public = directory / f".{_PUBLIC_FILE}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    _create_exclusive(public, public_key_text(key).encode("ascii") + b"\n", 0o644)
    os.replace(public, directory / _PUBLIC_FILE)
    _fsync_dir(directory)


def write_private_key_file(path: Path, key: Ed25519PrivateKey) -> None:
    """A new signing key in a file of its own (`rotate-key --key-out`), mode 0600; an existing file is refused."""
    if not _create_exclusive(Path(path), _private_text(key), 0o600):
        raise AuditKeyError(f"{path} exists; give a new file for the new private key")


def key_sources(home: Path) -> list[object]:
    """What `load_or_create_keys(home)` would read, as values that change when the keys do: the two environment
    variables and each key file's identity (inode, size, modification time; None while it is missing). One who
    keeps keys loaded compares these before reusing them. Holds the variables' values: hash it, do not keep it."""
    directory = _keys_dir(home)
    found: list[object] = [os.environ.get(AUDIT_KEY_ENV), os.environ.get(SIGNING_KEY_ENV)]
    for name in KEY_FILES:
        try:
            st = os.stat(directory / name)
        except OSError:
            found.append(None)
        else:
            found.append((st.st_ino, st.st_size, st.st_mtime_ns))
    return found


def load_public_key(home: Path) -> Ed25519PublicKey | None:
    """The verification key for this home, without needing (or creating) any secret file.

    Order: POLLWARDEN_SIGNING_KEY (its public half), keys/signing.pub, keys/signing.key (its public half).
    """
    env = os.environ.get(SIGNING_KEY_ENV)
    if env:
        source = f"environment variable {SIGNING_KEY_ENV}"
        return _signing_from_raw(_decode(env, 32, source, "a raw Ed25519 private key"), source).public_key()
    directory = _keys_dir(home)
    public_path = directory / _PUBLIC_FILE
    if public_path.exists():
        return _read_public_file(public_path)
    private_path = directory / _SIGNING_FILE
    if private_path.exists():
        source = f"key file {private_path}"
        raw = _decode(_read_key_file(private_path), 32, source, "a raw Ed25519 private key")
        return _signing_from_raw(raw, source).public_key()
    return None
