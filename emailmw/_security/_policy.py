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
import itertools
import os
import threading
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final

from .._core.config import SecurityOptions
from .._core.errors import PermissionDeniedError, SecurityError, UndecryptableError
from .._core.log import get_logger
from .._core.protocol import (
    AckRoute,
    PublishRoute,
    RequestRoute,
    ResponseRoute,
    Route,
    RoutedRoute,
    classify,
)
from .._core.types import Email
from .._core.wire import prepare_outgoing
from ._encryption import decrypt, encrypt, is_encrypted
from ._grants import relay_name, routed_grants
from ._keystore import Identity, Keystore, PublicIdentity
from ._permissions import Permissions, load_permissions, name_matches
from ._signing import (
    ALWAYS_SIGNED,
    CUSTODY_HEADER,
    RECIPIENTS_HEADER,
    TRANSIT_HEADERS,
    VIA_HEADER,
    Hop,
    Origin,
    Signature,
    check_signature,
    read_custody,
    read_origin,
    read_signature,
    recipients_header,
    sign,
    sign_custody,
    sign_origin,
    signed_for,
    trusted_key,
    verify_custody,
    verify_origin,
)

__all__ = ["Decision", "ReplayGuard", "Security", "route_action", "signer_key"]

_log = get_logger("security")
_NS: Final = 1_000_000_000
_RECIPIENTS: Final = RECIPIENTS_HEADER.lower()
_VIA: Final = VIA_HEADER.lower()


def signer_key(identity: str, message_id: str) -> str:
    """What "seen before" is keyed on for signed mail: the signer with the Message-ID
    (first wins per signer, so that nobody can take a Message-ID another identity will
    sign). :meth:`ReplayGuard.check` reads it back for its reason."""
    return f"{identity} {message_id}"


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

    An email is a replay when its Source-Timestamp is further than ``window`` from when
    it arrived (the receiving server's INTERNALDATE: a receiver that was down for longer
    than the window still takes what arrived meanwhile; either way: clocks differ) or its
    Message-ID was accepted before. With a ``path``
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
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            os.fchmod(out.fileno(), 0o600)  # it names what was received: private
            out.write("".join(f"{t} {m}\n" for m, t in self._seen.items()))
        os.replace(tmp, path)
        if self._fd is not None:
            os.close(self._fd)
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def check(self, message_id: str | None, source_ns: int, arrival_ns: int) -> str | None:
        """Why the email (sent at ``source_ns``, arrived at ``arrival_ns``) is a replay, or
        None."""
        age = arrival_ns - source_ns
        if abs(age) > self.window_ns:
            when = "old" if age > 0 else "in the future"
            return (
                f"Source-Timestamp {abs(age) / _NS:.0f} s {when} when it arrived, outside "
                f"the {self.window_ns / _NS:.0f} s replay window"
            )
        if message_id is None:
            return "signed email without a Message-ID"
        with self._lock:
            if message_id in self._seen:
                signer, _, bare = message_id.partition(" ")  # (a signer_key: signer, ID)
                if bare:
                    return f"Message-ID {bare} (signed by {signer}) was accepted before"
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

    def __init__(
        self,
        options: SecurityOptions,
        *,
        state_file: str | None = None,
        hub: str = "",
        accounts: tuple[str, ...] = (),
    ) -> None:
        self.mode = options.verify
        #: the hub routed mail arrives at (an empty hub in an address means this one)
        self.hub = hub
        #: the mail accounts this context receives for: signed mail must be signed for one
        #: of them (empty: not checked, as in-process)
        self.accounts = accounts
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
        self._servers = options.servers
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
            self.keystore.check()  # refuses a keystore others may write to
            for problem in self.keystore.problems:
                _log.warning("keystore: %s (left out of the trusted keys)", problem)

    def __repr__(self) -> str:
        who = self.identity.name if self.identity else None
        return f"<emailmw Security verify={self.mode} identity={who!r}>"

    def close(self) -> None:
        self.replay.close()

    # ------------------------------------------------------------------ sending side

    def allows(self, identity: str | None, action: str, name: str) -> bool:
        """Whether ``identity`` may do ``action`` on ``name`` (True without a permissions
        file; False for no identity when there is one)."""
        if self.permissions is None:
            return True
        return identity is not None and self.permissions.allows(identity, action, name)

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

    def servers_for(self, service: str) -> tuple[str, ...] | None:
        """The identities whose responses a client of ``service`` accepts, as configured
        (``security.servers``); None: any identity with the serve grant."""
        for pattern, names in self._servers:
            if name_matches(pattern, service):
                return names
        return None

    def _needs(self, email: Email, route: Route) -> list[tuple[str, str]] | str:
        """The grants the signer of ``email`` needs (a reason when it contradicts itself)."""
        if isinstance(route, RoutedRoute):
            return routed_grants(route.envelope, email.body, self.hub)
        if isinstance(route, AckRoute):
            return [("subscribe", route.topic)]
        action = route_action(route)
        return [] if action is None else [action]

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
        this context has an identity: for whom (``Emailmw-Recipients``), and for a routed
        message it originates also as its originator (``Emailmw-Origin``); a relayed copy
        keeps its originator's and names this identity in ``Route-Via``."""
        email = prepare_outgoing(email, from_)
        route = classify(email, 0)
        relayed = isinstance(route, RoutedRoute) and route.envelope.hops > 0
        if relayed:  # a relay acts for the originator, whose grants are checked; it needs
            assert isinstance(route, RoutedRoute)  # the relay grant (where it knows the hub)
            if route.envelope.to.hub:
                self.check_local("relay", relay_name(route.envelope, self.hub))
        else:
            needs = self._needs(email, route)
            if isinstance(needs, str):
                raise PermissionDeniedError(f"cannot send {email.subject!r}: {needs}")
            for action, name in needs:
                self.check_local(action, name)
        signer = self.identity.name if self.identity is not None else ""
        if isinstance(route, (PublishRoute, RequestRoute, ResponseRoute)) and not is_encrypted(
            email
        ):
            recipients = self._recipients(email.subject)
            if recipients is not None:
                email = encrypt(email, recipients, signer)
        if self.identity is not None:
            headers = [(k, v) for k, v in email.headers.items() if k.lower() != _RECIPIENTS]
            headers.append((RECIPIENTS_HEADER, recipients_header(email)))
            if relayed:
                via = [v for v in email.headers.get(VIA_HEADER, "").split(",") if v.strip()]
                headers = [(k, v) for k, v in headers if k.lower() != _VIA]
                headers.append((VIA_HEADER, ", ".join([*(v.strip() for v in via), signer])))
            email = email.replace(headers=headers)
            if isinstance(route, RoutedRoute):  # the originator signs what no relay changes,
                if not relayed:  # and every hop whom it sent its copy to (Route-Custody)
                    email = sign_origin(email, self.identity)
                origin = read_origin(email)
                origin_id = origin.message_id if isinstance(origin, Origin) else ""
                email = sign_custody(email, self.identity, origin_id or email.message_id or "")
            email = sign(email, self.identity)
        return email

    # ---------------------------------------------------------------- receiving side

    def _count(self, status: str) -> None:
        with self._counts_lock:
            self.counts[status] += 1

    def refused_later(self, count: int, status: str) -> None:
        """``count`` emails counted ``verified`` (each part of a message: its signature
        held) are refused after all, as ``status``: a message of parts whose joined body is
        not the one its ``Part-Digest`` names. (Was: counted verified, and quarantined.)"""
        with self._counts_lock:
            self.counts["verified"] -= min(count, self.counts["verified"])
            self.counts[status] += count

    def quarantined(self) -> None:
        """One refused email is in the quarantine folder now (counted once it is: a move
        that fails is tried again, and counted when it works)."""
        with self._counts_lock:
            self.counts["quarantined"] += 1

    def _trusted(self) -> Mapping[str, PublicIdentity]:
        return self.keystore.trusted() if self.keystore is not None else {}

    def _verify(
        self, email: Email, route: Route, now_ns: int, arrival_ns: int, redelivered: bool
    ) -> tuple[str, str, _Verified | None]:
        """(status, reason, who signed it once the signatures verified)."""
        checked = check_signature(email, self._trusted(), now_ns)
        if checked.signature is None:
            return checked.status, checked.reason, None
        who = self._custody(email, route, checked.signature, now_ns)
        if isinstance(who, tuple):
            return (*who, None)
        if self.accounts:
            listed = signed_for(email, self.accounts)
            if not listed:
                whom = ", ".join(self.accounts)
                return (
                    "replayed",
                    f"signed for other recipients, not for {whom}"
                    if listed is False
                    else f"signed without {RECIPIENTS_HEADER} (whom it is for)",
                    who,
                )
        info = getattr(route, "info", None)
        source_ns = info.source_timestamp if info is not None else 0
        key = who.replay_key
        if not (redelivered and key and self.replay.seen(key)):
            replayed = self.replay.check(key, source_ns, arrival_ns)
            if replayed is not None:
                return "replayed", replayed, who
        needs = self._needs(email, route)
        if isinstance(needs, str):
            return "denied", needs, who
        if self.permissions is not None:
            for action, name in needs:
                if not self.permissions.allows(who.identity, action, name):
                    return (
                        "denied",
                        f"identity {who.identity!r} has no grant to {action} {name!r}",
                        who,
                    )
            if who.via:  # every relay it passed needs the relay grant, checked at every hop
                assert isinstance(route, RoutedRoute)
                relaying = relay_name(route.envelope, self.hub)
                for relay in who.via:
                    if not self.permissions.allows(relay, "relay", relaying):
                        return (
                            "denied",
                            f"relay {relay!r} (Route-Via) has no grant to relay {relaying!r}",
                            who,
                        )
                unbound = self._custody_holds(who.custody)
                if unbound is not None:
                    return "denied", unbound, who
        return "verified", "", who

    def _custody_holds(self, hops: tuple[Hop, ...]) -> str | None:
        """Why the chain ``hops`` was not passed from hand to hand (None when it was): each
        relay must be bound (``accounts``) to an account the hop before it sent its copy
        to, so an identity never sent the copy cannot relay it, however granted."""
        assert self.permissions is not None
        for before, relay in itertools.pairwise(hops):
            accounts = self.permissions.accounts_of(relay.identity)
            if not accounts:
                return (
                    f"relay {relay.identity!r} is bound to no account: add its accounts "
                    f"(identities.{relay.identity}.accounts) to {self.permissions.source}"
                )
            if not any(before.sent_to(a) for a in accounts):
                return (
                    f"relay {relay.identity!r} was not sent this message: {before.identity!r} "
                    f"sent it to none of its accounts ({CUSTODY_HEADER})"
                )
        return None

    def _custody(
        self, email: Email, route: Route, signature: Signature, now_ns: int
    ) -> _Verified | tuple[str, str]:
        """Who originated ``email`` (its hop ``signature`` verified): for a routed message,
        its originator's signature verified and its relays checked against ``Route-Via``;
        else the signer. A (status, reason) when the chain does not hold."""
        origin = read_origin(email) if isinstance(route, RoutedRoute) else None
        if origin is None:
            if isinstance(route, RoutedRoute) and route.envelope.hops > 0:
                return "invalid", "relayed without its originator's signature (Emailmw-Origin)"
            return _Verified(signature.identity, email.message_id, ())
        if isinstance(origin, str):
            return "invalid", origin
        assert isinstance(route, RoutedRoute)
        public = trusted_key(self._trusted(), origin.identity, now_ns)
        if isinstance(public, str):
            return "untrusted", f"originator: {public}"
        if not verify_origin(email, origin, public.verify_key):
            return "invalid", f"originator signature of {origin.identity!r} does not verify"
        via = tuple(v.strip() for v in email.headers.get(VIA_HEADER, "").split(",") if v.strip())
        if len(via) != route.envelope.hops:
            return "invalid", f"Route-Via names {len(via)} relays, Route-Hops {route.envelope.hops}"
        last = via[-1] if via else origin.identity
        if last != signature.identity:
            return (
                "invalid",
                f"signed by {signature.identity!r}, but the last hop is {last!r} (Route-Via)",
            )
        hops = read_custody(email)
        if hops is None:
            if via:
                return "invalid", f"relayed without its chain of custody ({CUSTODY_HEADER})"
            hops = ()
        if isinstance(hops, str):
            return "invalid", hops
        if hops:
            if [h.identity for h in hops] != [origin.identity, *via]:
                return "invalid", f"{CUSTODY_HEADER} names other hops than Route-Via"
            if hops[0].message_id != origin.message_id or hops[-1].message_id != (
                email.message_id or ""
            ):
                return "invalid", f"{CUSTODY_HEADER} is another message's"
            broken = verify_custody(hops, origin.message_id, self._trusted(), now_ns)
            if broken is not None:
                return broken
        return _Verified(origin.identity, origin.message_id, via, hops)

    def incoming(
        self,
        email: Email,
        route: Route,
        *,
        redelivered: bool = False,
        now_ns: int | None = None,
        arrival_ns: int | None = None,
    ) -> Decision:
        """The decision for one received emailmw email (``route`` is its classification;
        ``arrival_ns``: when the mail server stored it, the time freshness is judged at;
        None: now)."""
        now = time.time_ns() if now_ns is None else now_ns
        arrival = now if arrival_ns is None else arrival_ns
        status, reason = "unchecked", ""
        signer = ""
        if self.mode != "off":
            status, reason, who = self._verify(email, route, now, arrival, redelivered)
            deliver = status == "verified" or self.mode == "permissive"
            if not deliver:
                self._count(status)
                return Decision(False, status, reason, email, route)
            if status == "verified":
                assert who is not None
                key = who.replay_key
                assert key is not None  # the replay check refuses mail without a Message-ID
                info = route.info  # type: ignore[union-attr]  # verified: an emailmw email
                self.replay.accept(key, info.source_timestamp, now)
                signature = read_signature(email)
                assert isinstance(signature, Signature)
                email = _signed_part(email, signature)
                route = _with_identity(route, who)
                signer = signature.identity
            self._count(status)
        if is_encrypted(email):
            if not signer:
                claimed = read_signature(email)
                signer = claimed.identity if isinstance(claimed, Signature) else ""
            try:
                email = decrypt(email, self.identity, signer)
            except UndecryptableError as exc:
                self._count("undecryptable")
                return Decision(False, "undecryptable", str(exc), email, route)
        return Decision(True, status, reason, email, route)

    def trusts(self, email: Email, now_ns: int | None = None) -> bool:
        """Whether state read from the mailbox rather than received (a reader record in
        the history, ``_peers``) may be believed: in ``enforce``, only when its signature
        verifies against a trusted identity (no replay check: the newest record wins);
        otherwise always."""
        if self.mode != "enforce":
            return True
        now = time.time_ns() if now_ns is None else now_ns
        return check_signature(email, self._trusted(), now).status == "verified"

    @property
    def can_decrypt(self) -> bool:
        """Whether this context has a key to open encrypted bodies with."""
        return self.identity is not None

    def tell_unsigned(self, email: Email) -> bool:
        """True the first time unsigned mail from this From address is delivered (to log
        it once)."""
        with self._counts_lock:
            if email.from_ in self._told_unsigned:
                return False
            self._told_unsigned.add(email.from_)
            return True


@dataclass(frozen=True, slots=True)
class _Verified:
    """Who an email is from once its signatures verified: its originator's identity and
    Message-ID (the signer's own for mail that was not relayed), and the relays."""

    identity: str
    message_id: str | None
    via: tuple[str, ...]
    custody: tuple[Hop, ...] = ()

    @property
    def replay_key(self) -> str | None:
        """What the replay guard keeps: first wins per signer (its identity and the
        Message-ID), so that nobody can take a Message-ID another identity will sign."""
        return None if self.message_id is None else signer_key(self.identity, self.message_id)


def _with_identity(route: Route, who: _Verified) -> Route:
    """``route`` with the verified identity in its info (an acknowledgement's subscriber
    is that identity, not what its header says)."""
    if isinstance(route, AckRoute):
        info = replace(route.info, identity=who.identity, subscriber=who.identity)
        return replace(route, info=info)
    if isinstance(route, RoutedRoute):
        return replace(route, info=replace(route.info, identity=who.identity, via=who.via))
    if isinstance(route, (PublishRoute, RequestRoute, ResponseRoute)):
        return replace(route, info=replace(route.info, identity=who.identity))  # type: ignore[arg-type]
    return route


def _signed_part(email: Email, signature: Signature) -> Email:
    """``email`` without application headers its ``signature`` does not cover (added on
    the way: they must not reach the application as if signed)."""
    keep = {*ALWAYS_SIGNED, *signature.extra, *TRANSIT_HEADERS}
    headers = [(k, v) for k, v in email.headers.items() if k.lower() in keep]
    if len(headers) == len(email.headers):
        return email
    return email.replace(headers=headers)
