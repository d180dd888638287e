"""The security policy of one context: what it signs and encrypts, what it delivers.

:meth:`Security.incoming` is the decision for one received email, as a state machine fed
the email, its route and the time (the replay guard is its state): verify the signature
against the trusted keys, check the replay window and the seen set, check the sender's
grant, then open an encrypted body. ``verify`` decides what the outcome means:

* ``off``: nothing is checked (encrypted bodies are still opened, or refused);
* ``permissive``: everything is checked, logged and counted, and delivered;
* ``enforce``: only mail with a valid signature of a trusted, unexpired identity that
  holds the grant, inside the replay window and not seen before, is delivered; the rest is
  quarantined (moved to the quarantine folder, never deleted), the reason logged.

Statuses (also the pipeline's ``security`` column): ``verified``, ``unsigned``, ``invalid``
(a signature that does not verify, or a malformed one), ``untrusted`` (an unknown, removed
or expired identity), ``replayed`` (seen before, or outside the window), ``denied`` (no
grant), ``undecryptable``. Thread-safe: the polling thread calls :meth:`incoming`, any
thread :meth:`outgoing` and :meth:`check_local`.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final

from .._config import SecurityOptions
from .._exceptions import PermissionDeniedError, SecurityError, UndecryptableError
from .._log import get_logger
from .._protocol import PublishRoute, RequestRoute, ResponseRoute, Route, classify
from .._transport.common import prepare_outgoing
from .._types import Email
from ._encryption import decrypt, encrypt, is_encrypted
from ._keystore import Identity, Keystore, PublicIdentity
from ._permissions import Permissions, load_permissions, name_matches
from ._signing import (
    ALWAYS_SIGNED,
    TRANSIT_HEADERS,
    Signature,
    read_signature,
    sign,
    verify,
)

__all__ = ["Decision", "ReplayGuard", "Security", "route_action"]

_log = get_logger("security")
_NS: Final = 1_000_000_000


def route_action(route: Route) -> tuple[str, str] | None:
    """The grant a received email needs of its sender: (action, name); None for mail that
    is not emailmw's."""
    if isinstance(route, PublishRoute):
        return "publish", route.topic
    if isinstance(route, RequestRoute):
        return "call", route.service
    if isinstance(route, ResponseRoute):
        return "serve", route.service
    return None


class ReplayGuard:
    """The Message-IDs of accepted signed mail, kept for the replay window.

    An email is a replay when its Source-Timestamp is further than ``window`` from now
    (either way: clocks differ) or its Message-ID was accepted before. With a ``path``
    (the state file's name plus ``.seen``) every acceptance is appended to the file before
    the email is delivered (a write, no fsync: it survives the process being killed, not
    the machine losing power) and a restarted process reads it back, so a restart does not
    reopen the window. Entries older than twice the window are dropped from memory and the
    file as it goes (every 4096 acceptances) and when the file is read. Thread-safe.
    """

    def __init__(self, window_s: float, path: str | Path | None = None) -> None:
        self.window_ns = int(window_s * _NS)
        self._path = Path(path) if path is not None else None
        self._lock = threading.Lock()
        self._seen: dict[str, int] = {}
        self._fd: int | None = None
        if self._path is not None:
            self._load(self._path)

    def _load(self, path: Path) -> None:
        horizon = time.time_ns() - 2 * self.window_ns
        try:
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        except FileNotFoundError:
            lines = []
        for line in lines:
            stamp, _, message_id = line.partition(" ")
            if stamp.isdigit() and message_id and int(stamp) >= horizon:
                self._seen[message_id] = int(stamp)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._rewrite(path)

    def _rewrite(self, path: Path) -> None:
        """Replace the file with what is in memory (atomically) and append to it from now."""
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text("".join(f"{t} {m}\n" for m, t in self._seen.items()), encoding="utf-8")
        os.replace(tmp, path)
        if self._fd is not None:
            os.close(self._fd)
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def check(self, message_id: str | None, source_ns: int, now_ns: int) -> str | None:
        """Why the email is a replay, or None."""
        age = now_ns - source_ns
        if abs(age) > self.window_ns:
            when = "old" if age > 0 else "in the future"
            return (
                f"Source-Timestamp {abs(age) / _NS:.0f} s {when}, outside the "
                f"{self.window_ns / _NS:.0f} s replay window"
            )
        if message_id is None:
            return "signed email without a Message-ID"
        with self._lock:
            if message_id in self._seen:
                return f"Message-ID {message_id} was accepted before"
        return None

    def accept(self, message_id: str, source_ns: int, now_ns: int) -> None:
        with self._lock:
            self._seen[message_id] = source_ns
            if self._fd is not None:
                os.write(self._fd, f"{source_ns} {message_id}\n".encode())
            if len(self._seen) % 4096 == 0:  # forget what the window refuses anyway
                horizon = now_ns - 2 * self.window_ns
                kept = {m: t for m, t in self._seen.items() if t >= horizon}
                if len(kept) < len(self._seen):
                    self._seen = kept
                    if self._path is not None:
                        self._rewrite(self._path)

    def seen(self, message_id: str) -> bool:
        with self._lock:
            return message_id in self._seen

    def close(self) -> None:
        with self._lock:
            fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.fsync(fd)
            os.close(fd)


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do with one received email: deliver ``email`` along ``route`` (both may
    differ from what came in: an opened body, the verified identity in the info), or
    quarantine it. ``status`` as in the module docstring, ``reason`` for the log."""

    deliver: bool
    status: str
    reason: str
    email: Email
    route: Route


class Security:
    """One context's keys, trust, permissions and replay guard (module docstring).

    ``state_file``: the receiver's state file; the seen set is kept next to it. Raises
    :class:`SecurityError` / :class:`~emailmw.ConfigError` for an unusable keystore,
    identity or permissions file.
    """

    def __init__(self, options: SecurityOptions, *, state_file: str | None = None) -> None:
        self.mode = options.verify
        self.keystore = Keystore(options.keystore) if options.keystore else None
        self.identity: Identity | None = None
        if options.identity is not None:
            if self.keystore is None:
                raise SecurityError("security.identity needs security.keystore")
            self.identity = self.keystore.identity(options.identity)
        permissions_file = options.permissions or (
            self.keystore.permissions_file if self.keystore is not None else None
        )
        self.permissions: Permissions | None = (
            load_permissions(permissions_file) if permissions_file else None
        )
        self._encrypt = options.encrypt
        checking = self.keystore is not None and self.mode != "off"
        self.replay = ReplayGuard(
            options.replay_window, f"{state_file}.seen" if state_file and checking else None
        )
        #: whether :meth:`outgoing` changes anything (else the context sends directly)
        self.transforms_outgoing = bool(
            self.identity is not None or self._encrypt or self.permissions is not None
        )
        if checking and not state_file:
            _log.info(
                "replay protection keeps its seen set in memory only (no state-file): a "
                "restart accepts again, for up to %.0f s, mail it accepted before",
                options.replay_window,
            )
        self.counts: Counter[str] = Counter()
        self._counts_lock = threading.Lock()
        self._told_unsigned: set[str] = set()
        if self.keystore is not None:
            self.keystore.trusted()
            for problem in self.keystore.problems:
                _log.warning("keystore: %s (left out of the trusted keys)", problem)

    def __repr__(self) -> str:
        who = self.identity.name if self.identity else None
        return f"<emailmw Security verify={self.mode} identity={who!r}>"

    def close(self) -> None:
        self.replay.close()

    # ------------------------------------------------------------------ sending side

    def check_local(self, action: str, name: str) -> None:
        """Raise :class:`PermissionDeniedError` when this context's identity may not do
        ``action`` on ``name`` (no permissions file, or no identity: everything may)."""
        if self.permissions is None or self.identity is None:
            return
        if not self.permissions.allows(self.identity.name, action, name):
            raise PermissionDeniedError(
                f"identity {self.identity.name!r} may not {action} {name!r}: add it to "
                f"identities.{self.identity.name}.{action} in {self.permissions.source}"
            )

    def _recipients(self, name: str) -> list[PublicIdentity] | None:
        for pattern, names in self._encrypt:
            if name_matches(pattern, name):
                assert self.keystore is not None  # config: encrypt needs a keystore
                trusted = self.keystore.trusted()
                missing = [n for n in names if n not in trusted]
                if missing:
                    raise SecurityError(
                        f"cannot encrypt {name!r} to {', '.join(missing)}: no such public key "
                        f"in {self.keystore.path / 'public'}"
                    )
                return [trusted[n] for n in names]
        return None

    def outgoing(self, email: Email, from_: str) -> Email:
        """``email`` as it goes out: completed (From, Message-ID, Date), checked against
        the permissions, its body encrypted when its name is configured so, signed when
        this context has an identity."""
        email = prepare_outgoing(email, from_)
        action = route_action(classify(email, 0))
        if action is not None:
            self.check_local(*action)
            recipients = None if is_encrypted(email) else self._recipients(email.subject)
            if recipients is not None:
                email = encrypt(email, recipients)
        if self.identity is not None:
            email = sign(email, self.identity)
        return email

    # ---------------------------------------------------------------- receiving side

    def _count(self, status: str) -> None:
        with self._counts_lock:
            self.counts[status] += 1

    def quarantined(self) -> None:
        """One refused email is in the quarantine folder now (counted once it is: a move
        that fails is tried again, and counted when it works)."""
        with self._counts_lock:
            self.counts["quarantined"] += 1

    def _verify(
        self, email: Email, route: Route, now_ns: int, redelivered: bool
    ) -> tuple[str, str, Signature | None]:
        """(status, reason, the signature once it verified)."""
        signature = read_signature(email)
        if signature is None:
            return "unsigned", "no signature", None
        if isinstance(signature, str):
            return "invalid", signature, None
        trusted = self.keystore.trusted() if self.keystore is not None else {}
        public = trusted.get(signature.identity)
        if public is None:
            return "untrusted", f"identity {signature.identity!r} is not trusted", None
        if public.expired(now_ns / _NS):
            return (
                "untrusted",
                f"the key of {signature.identity!r} expired at {public.expiry_text()}",
                None,
            )
        if not verify(email, signature, public.verify_key):
            return "invalid", f"signature of {signature.identity!r} does not verify", None
        info = getattr(route, "info", None)
        source_ns = info.source_timestamp if info is not None else 0
        if not (redelivered and email.message_id and self.replay.seen(email.message_id)):
            replayed = self.replay.check(email.message_id, source_ns, now_ns)
            if replayed is not None:
                return "replayed", replayed, signature
        action = route_action(route)
        if (
            action is not None
            and self.permissions is not None
            and not self.permissions.allows(signature.identity, *action)
        ):
            return (
                "denied",
                f"identity {signature.identity!r} has no grant to {action[0]} {action[1]!r}",
                signature,
            )
        return "verified", "", signature

    def incoming(
        self, email: Email, route: Route, *, redelivered: bool = False, now_ns: int | None = None
    ) -> Decision:
        """The decision for one received emailmw email (``route`` is its classification)."""
        now = time.time_ns() if now_ns is None else now_ns
        status, reason = "unchecked", ""
        if self.mode != "off":
            status, reason, signature = self._verify(email, route, now, redelivered)
            deliver = status == "verified" or self.mode == "permissive"
            if not deliver:
                self._count(status)
                return Decision(False, status, reason, email, route)
            if status == "verified":
                assert email.message_id is not None
                assert signature is not None
                info = route.info  # type: ignore[union-attr]  # verified: a routed email
                self.replay.accept(email.message_id, info.source_timestamp, now)
                email = _signed_part(email, signature)
                route = replace(route, info=replace(info, identity=signature.identity))  # type: ignore[arg-type]
            self._count(status)
        if is_encrypted(email):
            try:
                email = decrypt(email, self.identity)
            except UndecryptableError as exc:
                self._count("undecryptable")
                return Decision(False, "undecryptable", str(exc), email, route)
        return Decision(True, status, reason, email, route)

    def tell_unsigned(self, email: Email) -> bool:
        """True the first time unsigned mail from this From address is delivered (to log
        it once)."""
        with self._counts_lock:
            if email.from_ in self._told_unsigned:
                return False
            self._told_unsigned.add(email.from_)
            return True


def _signed_part(email: Email, signature: Signature) -> Email:
    """``email`` without application headers its ``signature`` does not cover (added on
    the way: they must not reach the application as if signed)."""
    keep = {*ALWAYS_SIGNED, *signature.extra, *TRANSIT_HEADERS}
    headers = [(k, v) for k, v in email.headers.items() if k.lower() in keep]
    if len(headers) == len(email.headers):
        return email
    return email.replace(headers=headers)
