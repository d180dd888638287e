"""Identities and the keystore: Ed25519 signing keys and X25519 encryption keys on disk.

Layout (after SROS2's: private keys apart from the trusted public keys)::

    KEYSTORE/
      public/NAME.json     the trusted identities: NAME's two public keys (and an expiry)
      private/NAME.pem     NAME's two private keys (PKCS #8 PEM); private/ is 0700, files 0600
      permissions.yaml     optional: who may publish, subscribe, call and serve what

An identity is trusted while its file is in ``public/`` and not expired: removing the file
revokes it; the directory is read again when it changes (a receiver notices within one
email). Private keys are checked at load: a key file or directory that group or others may
read is refused, with the ``chmod`` that fixes it; so is a public key file, ``public/`` or
the keystore itself that group or others may *write* (they could plant a trusted identity):
the keystore is made 0700, ``public/`` 0755 with files 0644, whatever the umask. Keys are
made and used with the ``cryptography`` package only. Thread-safe.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import os
import re
import stat
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey

from .._core.errors import InvalidArgumentError, SecurityError

__all__ = [
    "NAME_RE",
    "Identity",
    "Keystore",
    "PublicIdentity",
    "b64",
    "check_identity_name",
    "raw_public",
]

#: what an identity may be called: it names a file and goes into a header unquoted
NAME_RE: Final = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
_RAW: Final = serialization.PublicFormat.Raw
_RAW_ENCODING: Final = serialization.Encoding.Raw


def check_identity_name(name: str) -> str:
    """``name`` unchanged, or :class:`SecurityError` when it is not an identity name."""
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise SecurityError(
            f"not an identity name: {name!r} (letters, digits, '_', '.', '-'; at most 64)"
        )
    return name


def b64(data: bytes) -> str:
    """``data`` in base64, as text."""
    return base64.b64encode(data).decode("ascii")


def raw_public(key: Ed25519PublicKey | X25519PublicKey) -> bytes:
    """A public key's 32 raw bytes (RFC 8032 / RFC 7748 encoding)."""
    return key.public_bytes(_RAW_ENCODING, _RAW)


@dataclass(frozen=True, slots=True)
class PublicIdentity:
    """A trusted identity: its name, public keys and expiry (seconds since the epoch, or
    None). Immutable."""

    name: str
    verify_key: Ed25519PublicKey = field(repr=False, compare=False)
    encrypt_key: X25519PublicKey = field(repr=False, compare=False)
    not_after: float | None = None
    fingerprint: str = ""

    def expired(self, now: float) -> bool:
        return self.not_after is not None and now > self.not_after

    def expiry_text(self) -> str:
        if self.not_after is None:
            return "never"
        return dt.datetime.fromtimestamp(self.not_after, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True, slots=True)
class Identity:
    """This process's identity: the private keys of one name. Its repr shows no key."""

    name: str
    signing_key: Ed25519PrivateKey = field(repr=False, compare=False)
    decrypt_key: X25519PrivateKey = field(repr=False, compare=False)

    @property
    def encrypt_public(self) -> bytes:
        return raw_public(self.decrypt_key.public_key())


def _writable(path: Path, st: os.stat_result) -> str:
    """Why ``path`` (its ``st``) cannot hold trust: group or others may write it; ''."""
    mode = stat.S_IMODE(st.st_mode)
    if not mode & 0o022:
        return ""
    fixed = mode & ~0o022
    return (
        f"{path} may be written by others (mode {mode:o}), who could plant a trusted "
        f"identity: run 'chmod {fixed:o} {path}'"
    )


def _fingerprint(verify_raw: bytes) -> str:
    return "SHA256:" + b64(hashlib.sha256(verify_raw).digest())[:43]


class Keystore:
    """A keystore directory (see the module docstring). :meth:`create` makes one;
    constructing checks that ``path`` is one."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path).expanduser()
        if not (self.path / "public").is_dir() or not (self.path / "private").is_dir():
            raise SecurityError(
                f"{self.path} is not a keystore (no public/ and private/): "
                f"create one with 'emailmw security create-keystore {self.path}'"
            )
        self._lock = threading.Lock()
        self._trusted: dict[str, PublicIdentity] = {}
        self._stamp: tuple[int, int, int, int] | None = None
        #: why files in public/ were left out, as of the last reading
        self.problems: list[str] = []

    def __repr__(self) -> str:
        return f"<emailmw Keystore {str(self.path)!r}>"

    @classmethod
    def create(cls, path: str | os.PathLike[str]) -> Keystore:
        """Make an empty keystore at ``path`` (which may exist, empty or a keystore)."""
        root = Path(path).expanduser()
        root.mkdir(parents=True, exist_ok=True)
        (root / "public").mkdir(exist_ok=True)
        (root / "private").mkdir(exist_ok=True)
        for item, mode in ((root, 0o700), (root / "public", 0o755), (root / "private", 0o700)):
            os.chmod(item, mode)  # whatever the umask
        return cls(root)

    @property
    def permissions_file(self) -> Path | None:
        """``permissions.yaml`` of this keystore, when there is one."""
        path = self.path / "permissions.yaml"
        return path if path.is_file() else None

    def create_key(self, name: str, *, days: float | None = None) -> PublicIdentity:
        """A new identity ``name``: its private keys in ``private/``, its public keys
        trusted in ``public/``; ``days``: it expires that many days from now. Refuses a
        name that exists."""
        check_identity_name(name)
        private_path = self.path / "private" / f"{name}.pem"
        public_path = self.path / "public" / f"{name}.json"
        if private_path.exists() or public_path.exists():
            raise SecurityError(f"identity {name!r} exists in {self.path}: choose another name")
        signing, decrypt = Ed25519PrivateKey.generate(), X25519PrivateKey.generate()
        pem = b"".join(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
            for key in (signing, decrypt)
        )
        fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(pem)
        verify_raw = raw_public(signing.public_key())
        not_after = None if days is None else dt.datetime.now(dt.UTC).timestamp() + days * 86400
        record = {
            "name": name,
            "ed25519": b64(verify_raw),
            "x25519": b64(raw_public(decrypt.public_key())),
            "not-after": None if not_after is None else int(not_after),
        }
        tmp = public_path.with_name(f".{public_path.name}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            os.fchmod(out.fileno(), 0o644)  # whatever the umask
            out.write(json.dumps(record, indent=2) + "\n")
        os.replace(tmp, public_path)
        return self._read_public(public_path)

    def identity(self, name: str) -> Identity:
        """The private keys of ``name``; :class:`SecurityError` when missing, unreadable or
        readable by group or others."""
        check_identity_name(name)
        private_dir = self.path / "private"
        path = private_dir / f"{name}.pem"
        for item, mode in ((private_dir, "700"), (path, "600")):
            try:
                st = item.stat()
            except FileNotFoundError:
                raise SecurityError(
                    f"no private key of {name!r} in {self.path}: create it with "
                    f"'emailmw security create-key {self.path} {name}'"
                ) from None
            if stat.S_IMODE(st.st_mode) & 0o077:
                raise SecurityError(
                    f"{item} may be read by others (mode {stat.S_IMODE(st.st_mode):o}): "
                    f"run 'chmod {mode} {item}'"
                )
        blocks = path.read_bytes().split(b"-----END PRIVATE KEY-----")
        try:
            keys = [
                serialization.load_pem_private_key(block + b"-----END PRIVATE KEY-----", None)
                for block in blocks[:2]
            ]
        except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
            raise SecurityError(f"{path}: not an emailmw private key file ({exc})") from None
        signing, decrypt = keys
        if not isinstance(signing, Ed25519PrivateKey) or not isinstance(decrypt, X25519PrivateKey):
            raise SecurityError(f"{path}: expected an Ed25519 then an X25519 private key")
        return Identity(name, signing, decrypt)

    def _read_public(self, path: Path) -> PublicIdentity:
        try:
            record = json.loads(path.read_text())
            name = check_identity_name(record["name"])
            if name != path.stem:
                raise InvalidArgumentError(f"it names {name!r}")
            verify_raw = base64.b64decode(record["ed25519"], validate=True)
            verify_key = Ed25519PublicKey.from_public_bytes(verify_raw)
            encrypt_key = X25519PublicKey.from_public_bytes(
                base64.b64decode(record["x25519"], validate=True)
            )
            not_after = record.get("not-after")
            if not_after is not None and (
                isinstance(not_after, bool) or not isinstance(not_after, int | float)
            ):
                raise InvalidArgumentError("not-after is not a number")
        except (OSError, ValueError, KeyError, TypeError, SecurityError) as exc:
            raise SecurityError(f"{path}: not an emailmw public key file ({exc})") from None
        return PublicIdentity(name, verify_key, encrypt_key, not_after, _fingerprint(verify_raw))

    def trusted(self) -> dict[str, PublicIdentity]:
        """The trusted identities by name (expired ones included: callers check), read
        again when ``public/`` changed. A file that cannot be read, or that group or others
        may write, is left out, logged by the caller from :attr:`problems`; when the
        keystore or ``public/`` may be written by them, nothing is trusted."""
        public = self.path / "public"
        try:
            st = public.stat()
            root = self.path.stat()
        except OSError:
            return {}
        stamp = (st.st_mtime_ns, st.st_ino, st.st_mode, root.st_mode)
        with self._lock:
            if stamp == self._stamp:
                return self._trusted
            found: dict[str, PublicIdentity] = {}
            problems = [
                problem
                for item, mode in ((self.path, root), (public, st))
                if (problem := _writable(item, mode))
            ]
            for path in [] if problems else sorted(public.glob("*.json")):
                try:
                    problem = _writable(path, path.stat())
                    if problem:
                        problems.append(problem)
                        continue
                    found[path.stem] = self._read_public(path)
                except (SecurityError, OSError) as exc:
                    problems.append(str(exc))
            self._trusted, self._stamp, self.problems = found, stamp, problems
            return found

    def check(self) -> None:
        """Raise :class:`SecurityError` when group or others may write the keystore,
        ``public/`` or a public key file (with the ``chmod`` that fixes it)."""
        self.trusted()
        for problem in self.problems:
            if "may be written by others" in problem:
                raise SecurityError(problem)

    def list_keys(self) -> list[tuple[PublicIdentity, bool]]:
        """Every trusted identity and whether its private key is here too."""
        return [
            (public, (self.path / "private" / f"{name}.pem").exists())
            for name, public in sorted(self.trusted().items())
        ]
