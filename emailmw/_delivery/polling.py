"""Layer 3: the polling manager, one thread that hands every new email to the handlers.

Guarantees:

* emails reach the handlers in the order the receiver returned them, one at a time, on the
  thread named ``emailmw-polling`` (handlers need no locking against each other);
* no email can stop the thread: each is classified once
  (:func:`emailmw._core.protocol.classify`, total by design, and guarded here too) and the route
  handed to every handler; mail that is not emailmw's is logged (INFO) and left where it is,
  emailmw mail with broken metadata is logged (WARNING) and quarantined; a handler that
  raises is logged with the email's Message-ID;
* with a :class:`~emailmw._security.Security` policy, each emailmw email is decided on
  (verified, checked for replay and grants, opened when encrypted) before anything else:
  what it refuses is logged (WARNING, with the reason) and quarantined, never delivered;
* an email whose Message-ID this thread handed out recently (the last
  :data:`RECENT_MESSAGE_IDS`) is a duplicate (a publisher's spool resending after a crash,
  a folder read again after a UIDVALIDITY change): logged and settled, not handed out again
  (a group member's thread does not filter: its store hands each claim out once);
* each email is settled once every entity it was handed to is done with it
  (:class:`Ticket`); an email no entity wanted is settled at once;
* a receiver error is retried with exponential backoff (0.1 s to 1 s; a refused login to
  30 s), and never spoken of per retry: its ``Health`` logs one ERROR when receiving starts
  failing or fails differently, one WARNING when it works again, and
  :attr:`PollingManager.error` holds the failure while it lasts (``Context.receive_error``);
* :meth:`PollingManager.stop` wakes the receiver and joins with a timeout.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any, Final

from .._core.errors import (
    AuthenticationError,
    ClosedError,
    ConnectionLimitError,
    EmailMWError,
    MalformedEmailError,
    StateError,
)
from .._core.health import Health
from .._core.log import RefusalLog, get_logger
from .._core.packing import (
    BODY_ENCODING_HEADER,
    PART_DIGEST_HEADER,
    PieceDigest,
    Reassembly,
    decompress_pieces,
    grow,
    join_parts,
    part_of,
)
from .._core.protocol import PublishRoute, Route, Unroutable, classify
from .._core.types import Email, Headers
from .._core.wire import DEFAULT_MAX_MESSAGE_SIZE
from .._security import Security, signer_key
from .._transport.base import Claim, ClaimState, Done, EmailReceiver, IncomingEmail

__all__ = [
    "NO_TICKET",
    "RECENT_MESSAGE_IDS",
    "Handler",
    "PollingManager",
    "RefusalLog",
    "Ticket",
]

_log = get_logger("polling")
_BACKOFF_MIN: Final = 0.1
_BACKOFF_MAX: Final = 1.0
#: a server that refuses another connection for the account: each try is a full login
_LIMIT_BACKOFF_MAX: Final = 30.0


def next_backoff(backoff: float, error: BaseException) -> tuple[float, float]:
    """How long to wait after a receiving failure, and the backoff after that: doubling
    from 0.1 s to 1 s; to 30 s while the server refuses another connection for the
    account (:class:`~emailmw.ConnectionLimitError`) or the login
    (:class:`~emailmw.AuthenticationError`, a secret that cannot be fetched too): no login
    storm, no provider locking the account."""
    slow = isinstance(error, ConnectionLimitError | AuthenticationError)
    cap = _LIMIT_BACKOFF_MAX if slow else _BACKOFF_MAX
    wait = min(backoff, cap)
    return wait, min(wait * 2, cap)


#: while parts wait for the rest, how often the polling thread looks at their time
_PART_CHECK_S: Final = 5.0
#: How many Message-IDs the polling thread remembers to drop duplicates.
RECENT_MESSAGE_IDS: Final = 10_000
_TICKET_LOCK: Final = threading.Lock()


class Ticket:
    """Who still holds one incoming email: every entity that queues it holds the ticket
    (:meth:`hold`) and lets go once the application is done with the email
    (:meth:`release`); when the last holder lets go the email is acknowledged to its
    receiver.

    An email a group member claimed passes its claim's fence right before the application
    gets it: the holder asks :meth:`state` (quick) and :meth:`hand_out` (records the
    delivery; the delivery count), and lets go of an email whose claim is lost with
    :meth:`withdraw` (nothing settled, nothing acknowledged).

    A holder that cannot use the email for what it is (a body its subscription cannot
    decode) rejects it (:meth:`reject`), one whose application failed on it nacks it (:meth:`nack`);
    once every holder let go, the strongest verdict settles it: a rejection quarantines it
    (never deleted), a nack hands it back to its receiver (``IncomingEmail.nack``), else it
    is acknowledged (or left, :meth:`leave_alone`). Neither a rejection nor a nack is
    acknowledged to its publisher. Thread-safe."""

    __slots__ = (
        "_count", "_done", "_held", "_holders", "_incoming", "_leave", "_reason", "_verdict",
        "_withdrawn",
    )  # fmt: skip

    def __init__(
        self, incoming: IncomingEmail | None, on_done: Callable[[int], None] | None = None
    ) -> None:
        self._incoming = incoming
        self._holders = 1  # the dispatch itself, until every handler has had the email
        self._leave = False
        self._held = False
        self._withdrawn = False
        self._verdict: str | None = None  # None, "nack" or "quarantine" (the strongest)
        self._reason = ""
        self._count = 1 if incoming is None else incoming.delivery_count
        # once an entity that held it is done (an acknowledgement), with the delivery count
        self._done = on_done

    @property
    def claimed(self) -> bool:
        """Whether the email is a group member's claim (fenced by :meth:`hand_out`)."""
        return self._incoming is not None and self._incoming.claim is not None

    def state(self) -> ClaimState:
        """Whether :meth:`hand_out` may succeed now (always ``"ready"`` without a claim)."""
        claim = None if self._incoming is None else self._incoming.claim
        return "ready" if claim is None else claim.state()

    def hand_out(self) -> int | None:
        """Right before the application gets the email: its delivery count, or None when
        it may not have it now (:meth:`state` says whether to wait or to withdraw). The
        receiver records that an application gets it (``IncomingEmail.give``)."""
        claim = None if self._incoming is None else self._incoming.claim
        if claim is None:
            if self._incoming is not None:
                self._incoming.give()
            return self._count
        count = claim.deliver()
        if count is not None:
            self._count = count
        return count

    def withdraw(self) -> None:
        """The holder lets go of an email whose claim is lost: nothing is settled or
        acknowledged (another member has it)."""
        self._withdrawn = True
        if self._incoming is not None:
            self._incoming.withdraw()
        self.release()

    def leave_alone(self) -> None:
        """A handler could not use the email (an addressing error): once released, it is
        left where it is rather than acknowledged (no ``on-receive`` action applies)."""
        self._leave = True

    def reject(self, reason: str) -> None:
        """This holder cannot use the email (``reason``, one line): once released by every
        holder it is quarantined, whatever the others did with it. Call before
        :meth:`release`."""
        with _TICKET_LOCK:
            self._verdict, self._reason = "quarantine", reason

    def nack(self, reason: str) -> None:
        """The application failed on the email (``reason``, one line): once released by
        every holder it goes back to its receiver as not processed (unless another holder
        rejected it). Call before :meth:`release`."""
        with _TICKET_LOCK:
            if self._verdict is None:
                self._verdict, self._reason = "nack", reason

    def hold(self, *, takes: bool = False) -> Ticket:
        """A holder queues the email. ``takes``: it calls :meth:`hand_out` when its
        application takes the email; any other holder counts as giving it to an
        application now (``IncomingEmail.give``)."""
        with _TICKET_LOCK:
            self._holders += 1
            self._held = True
        if not takes and self._incoming is not None:
            self._incoming.give()
        return self

    def release(self) -> None:
        with _TICKET_LOCK:
            self._holders -= 1
            done = self._holders == 0
            verdict, reason = self._verdict, self._reason
        if not done or self._withdrawn:
            return
        if self._held and not self._leave and verdict is None and self._done is not None:
            try:
                self._done(self._count)
            except Exception:  # noqa: BLE001 - the email is settled all the same
                _log.exception("acknowledging to the publisher failed")
        incoming = self._incoming
        if incoming is None:
            return
        if verdict == "quarantine":
            incoming.quarantine(reason=reason)
        elif verdict == "nack":
            incoming.nack(reason)
        elif self._leave:
            incoming.leave()
        else:
            incoming.ack()


class _NoTicket(Ticket):
    """For emails that need no settling (handed over by tests and in-process tools)."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(None)

    def hold(self, *, takes: bool = False) -> Ticket:
        return self

    def release(self) -> None:
        pass

    def leave_alone(self) -> None:
        pass

    def reject(self, reason: str) -> None:
        pass

    def nack(self, reason: str) -> None:
        pass

    def withdraw(self) -> None:
        pass


NO_TICKET: Final[Ticket] = _NoTicket()

Handler = Callable[[Email, Route, Ticket], None]
#: sends the acknowledgement of a published email (and its delivery count)
Acknowledge = Callable[[Email, int], None]


def _described(email: Email) -> str:
    """An email as the security log lines name it (built only for a line that is logged)."""
    return f"email {email.message_id} (subject {email.subject[:80]!r}) from {email.from_[:80]}"


class PartFiles:
    """The bodies of parts waiting for the rest of their message, on disk (a private
    directory, 0700, each file 0600: they may hold bodies in clear), so that a large
    message costs the receiver its joined text, not its parts as well. Files are removed
    once their message is joined or given up, and the directory at :meth:`close`. Not
    thread-safe (the polling thread's)."""

    _PIECE: Final = 1 << 20

    def __init__(self) -> None:
        self._dir: Path | None = None

    def _path(self, message_id: str, origin: str, number: int) -> Path:
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix="emailmw-parts-"))  # (0700)
        key = hashlib.sha256(f"{message_id}\0{origin}".encode()).hexdigest()[:32]
        return self._dir / f"{key}.{number}"

    def put(self, message_id: str, origin: str, number: int, body: str) -> int:
        """Write part ``number``'s body; its size in bytes (UTF-8)."""
        path = self._path(message_id, origin, number)
        data = body.encode("utf-8", "surrogatepass")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        return len(data)

    def size(self, message_id: str, origin: str, numbers: range) -> int:
        return sum(self._path(message_id, origin, n).stat().st_size for n in numbers)

    def pieces(self, message_id: str, origin: str, numbers: range) -> Generator[str, None, None]:
        """The bodies of parts ``numbers`` in order, as text pieces of about a MiB (each
        file removed once read)."""
        decoder = _utf8_decoder()
        for number in numbers:
            path = self._path(message_id, origin, number)
            with open(path, "rb") as source:
                while chunk := source.read(self._PIECE):
                    yield decoder.decode(chunk)
            path.unlink(missing_ok=True)
        yield decoder.decode(b"", final=True)

    def drop(self, message_id: str, origin: str, numbers: range) -> None:
        for number in numbers:
            self._path(message_id, origin, number).unlink(missing_ok=True)

    def close(self) -> None:
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None


def _utf8_decoder() -> Any:
    import codecs

    return codecs.getincrementaldecoder("utf-8")("surrogatepass")


def _route_of_joined(email: Email, first: Route, parts: list[IncomingEmail]) -> Route:
    """The route of a message joined from parts: classified again (its Message-ID is the
    original's), with the identity the parts were verified as."""
    route = classify(email, time.time_ns(), redelivered=any(p.redelivered for p in parts))
    identity = getattr(getattr(first, "info", None), "identity", None)
    info = getattr(route, "info", None)
    if identity is not None and info is not None and hasattr(info, "identity"):
        route = dataclasses.replace(route, info=dataclasses.replace(info, identity=identity))
    return route


def _joined(email: Email, parts: list[IncomingEmail]) -> IncomingEmail:
    """One IncomingEmail for a message joined from ``parts``: settling it settles each
    part the same way (``then`` once the last one's is done), and handing it to an
    application records that for each part (with a state file: a restart flags it; was:
    recorded for none, so a message of parts an application had came again unflagged)."""

    def settle(outcome: str, then: Done | None, reason: str = "") -> None:
        for index, part in enumerate(parts):
            last = index == len(parts) - 1
            if outcome == "ack":
                part.ack()
            elif outcome == "quarantine":
                part.quarantine(then if last else None, reason)
            elif outcome == "nack":
                part.nack(reason)
            else:
                part.leave()

    def give() -> None:  # (an application gets it: each part's receiver records it)
        for part in parts:
            part.give()

    claims = [p.claim for p in parts if p.claim is not None]
    return IncomingEmail(
        email,
        redelivered=any(p.redelivered for p in parts),
        settle=settle,
        give=give,
        delivery_count=max(p.delivery_count for p in parts),
        claim=_JoinedClaim(claims) if claims else None,
        arrival_ns=max((p.arrival_ns or 0 for p in parts), default=None) or None,
        returned=any(p.returned for p in parts),
    )


class _JoinedClaim:
    """The fence of a message joined from parts a group member claimed: it passes when
    every part's does (each part's delivery recorded in the store), its delivery count the
    highest of theirs."""

    __slots__ = ("_claims",)

    def __init__(self, claims: list[Claim]) -> None:
        self._claims = claims

    def state(self) -> ClaimState:
        states = {claim.state() for claim in self._claims}
        return "lost" if "lost" in states else "wait" if "wait" in states else "ready"

    def deliver(self) -> int | None:
        counts = [claim.deliver() for claim in self._claims]
        if any(count is None for count in counts):
            return None
        return max(count for count in counts if count is not None)


class PollingManager:
    """Owns the polling thread. ``register_handler`` is thread-safe; start/stop are not
    meant to race with each other (the context calls them)."""

    def __init__(
        self,
        receiver: EmailReceiver,
        *,
        name: str = "emailmw-polling",
        receive_timeout: float | None = None,
        security: Security | None = None,
        acknowledge: Acknowledge | None = None,
        drop_duplicates: bool = True,
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
        part_timeout: float = 600.0,
        passes: Callable[[Route], bool] | None = None,
        others: Callable[[Email], bool] | None = None,
    ) -> None:
        self._receiver = receiver
        self._max_size = max_message_size
        #: messages sent as parts, waiting for the rest (``_packing``)
        self._reassembly: Reassembly[tuple[Email, Route, IncomingEmail]] = Reassembly(part_timeout)
        self._part_files = PartFiles()
        # routes whose parts are not joined here (a relay forwards them as they came)
        self._passes = passes
        # mail another consumer of this context claims (its delivery groups'): left alone
        # here, before any decision (the group's own polling thread decides on it)
        self._others = others
        self._told_missing: set[str] = set()
        self._drop_duplicates = drop_duplicates
        self._security = security
        self._acknowledge = acknowledge
        self._name = name
        self._receive_timeout = receive_timeout
        self._handlers: tuple[Handler, ...] = ()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._recent: OrderedDict[str, None] = OrderedDict()
        #: emails dropped as duplicates of one handed out before (by Message-ID)
        self.duplicates = 0
        self._health = Health(
            "receiving", "retrying every second or less; a refused login every 30 s or less"
        )
        self._health_changed = threading.Condition()
        self._refusals = RefusalLog()

    @property
    def error(self) -> Exception | None:
        """The failure receiving is in now (retried all along); None while it works."""
        return self._health.error

    def wait_for_error(self, timeout: float | None = None) -> Exception | None:
        """Block until receiving fails (at most ``timeout`` seconds; None: no limit); the
        failure, or None at the timeout. Returns at once while it is failing."""
        with self._health_changed:
            self._health_changed.wait_for(lambda: self._health.error is not None, timeout)
            return self._health.error

    def _report(self, change: tuple[str, str] | None) -> None:
        if change is None:
            return
        level, line = change
        (_log.error if level == "error" else _log.warning)("%s", line)
        with self._health_changed:
            self._health_changed.notify_all()

    def register_handler(self, handler: Handler) -> None:
        with self._lock:
            self._handlers = (*self._handlers, handler)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        if self._thread is not None:
            raise StateError("polling manager already started")
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> bool:
        """Stop the thread; True if it ended within ``timeout`` seconds."""
        self._stopping.set()
        self._receiver.wakeup()
        thread = self._thread
        if thread is None or thread is threading.current_thread():
            return True
        thread.join(timeout)
        if thread.is_alive():
            _log.warning("polling thread did not stop within %.1f s", timeout)
            return False
        return True

    def _run(self) -> None:
        backoff = _BACKOFF_MIN
        while not self._stopping.is_set():
            # while failing, wait at most a second: a receiver that works again returns
            # (empty-handed) and says so, rather than waiting in IDLE for the next email
            timeout = _BACKOFF_MAX if self._health.attempts else self._receive_timeout
            if len(self._reassembly):  # come back to give up on parts that do not come
                timeout = min(timeout or _PART_CHECK_S, _PART_CHECK_S)
            try:
                incoming = self._receiver.receive_incoming(timeout)
            except ClosedError:
                if not self._stopping.is_set():
                    _log.warning("receiver closed under the polling manager; stopping")
                break
            except Exception as exc:  # noqa: BLE001 - the thread must survive any error
                self._report(self._health.failed(exc, time.monotonic()))
                wait, backoff = next_backoff(backoff, exc)
                _log.debug("receiving failed (%s); retrying in %.1f s", exc, wait)
                self._stopping.wait(wait)
                continue
            if self._health.attempts:
                self._report(self._health.succeeded(time.monotonic()))
            backoff = _BACKOFF_MIN
            for item in incoming:
                self.dispatch(item)
            self._give_up_parts(time.monotonic())
            self._refusals.flush(time.monotonic())
        self._refusals.flush(time.monotonic(), all_=True)
        self._part_files.close()

    def dispatch(self, incoming: IncomingEmail) -> None:
        """Classify one email and hand it to every handler (the thread's loop body).
        Never raises."""
        email = incoming.email
        try:
            route = classify(
                email,
                time.time_ns(),
                redelivered=incoming.redelivered,
                delivery_count=incoming.delivery_count,
            )
        except Exception:  # noqa: BLE001 - classify is total; this is the last guard
            _log.exception("classifying email %s failed (a bug in emailmw)", email.message_id)
            incoming.quarantine()
            return
        if self._others is not None and not isinstance(route, Unroutable) and self._others(email):
            incoming.leave()
            return
        if isinstance(route, Unroutable):
            if route.malformed or incoming.in_batch:  # (a batch carries emailmw's only)
                _log.warning(
                    "malformed email %s (subject %r) not delivered: %s",
                    email.message_id,
                    email.subject[:80],
                    route.reason,
                )
                incoming.quarantine()
            else:
                _log.info(
                    "left alone email %s (subject %r): %s",
                    email.message_id,
                    email.subject[:80],
                    route.reason,
                )
                incoming.leave()
            return
        if self._security is not None:
            try:
                # (what came back through its group may have been accepted here before:
                # a repeat, never a replay, whether or not an application had it)
                decision = self._security.incoming(
                    email,
                    route,
                    redelivered=incoming.redelivered or incoming.returned,
                    arrival_ns=incoming.arrival_ns,
                )
            except Exception:  # noqa: BLE001 - the decision is total; this is the last guard
                _log.exception("deciding on email %s failed (a bug in emailmw)", email.message_id)
                incoming.quarantine()
                return
            if not decision.deliver:
                self._refusals.refused(
                    decision.status,
                    f"quarantined {_described(email)}: {decision.status}: {decision.reason}",
                    decision.reason,
                    time.monotonic(),
                )
                incoming.quarantine(self._security.quarantined)  # counted once moved
                return
            if decision.status not in ("verified", "unsigned", "unchecked"):
                _log.warning(
                    "delivered %s as verify is permissive: %s: %s",
                    _described(email),
                    decision.status,
                    decision.reason,
                )
            elif decision.status == "unsigned" and self._security.tell_unsigned(email):
                _log.info(
                    "delivering unsigned mail from %s (verify is permissive; enforce would "
                    "quarantine it); said once per sender",
                    email.from_[:80],
                )
            email, route = decision.email, decision.route
            del decision  # (a large part's body: held by one name only, see _unpacked)
        if self._drop_duplicates and self._seen_before(email.message_id, route):
            self.duplicates += 1
            _log.info("dropped email %s: a copy was handed out already", email.message_id)
            incoming.ack()
            return
        held = [email]
        del email  # (a large part's body is written to disk and let go before the join)
        whole = self._unpacked(held, route, incoming)
        if whole is None:
            return
        email, route, incoming = whole
        ticket = Ticket(incoming, self._on_done(email, route))
        for handler in self._handlers:
            try:
                handler(email, route, ticket)
            except Exception:  # noqa: BLE001 - a handler must never kill the thread
                _log.exception(
                    "handler %s failed on email %s (subject %r)",
                    getattr(handler, "__qualname__", handler),
                    email.message_id,
                    email.subject[:80],
                )
        ticket.release()

    def _unpacked(
        self, held: list[Email], route: Route, incoming: IncomingEmail
    ) -> tuple[Email, Route, IncomingEmail] | None:
        """The message an email carries (``held``: the email, its only reference: taken
        out of it): itself; for a part, once all parts are here, the message joined
        (settling it settles every part), None meanwhile; its body decompressed
        (``Body-Encoding``). None, the email settled, when it cannot be had."""
        email = held.pop()
        try:
            part = part_of(email)
        except MalformedEmailError as exc:
            _log.warning("malformed part %s not delivered: %s", email.message_id, exc)
            incoming.quarantine()
            return None
        if part is not None and self._passes is not None and self._passes(route):
            return email, route, incoming  # (relayed on as it came: joined where it goes)
        if part is not None:
            info = getattr(route, "info", None)
            origin = getattr(info, "identity", None) or email.from_
            stripped = email.replace(body="")  # (its body waits on disk)
            verdict, items = self._reassembly.offer(
                part, origin, (stripped, route, incoming), time.monotonic()
            )
            if verdict == "duplicate":
                stale = self._reassembly.held(part, origin)
                claim = None if stale is None else stale[2].claim
                if claim is None or claim.state() != "lost":
                    incoming.ack()  # a copy of a part held already
                    return None
                # the part came again (a group member gave it back, or another took it
                # over, and it is this member's again): the new copy replaces the lost one
                assert stale is not None
                stale[2].withdraw()
                self._reassembly.replace(part, origin, (stripped, route, incoming))
                verdict = "held"
            if verdict == "refused":
                _log.warning(
                    "part %s says %d parts, others of %s said otherwise: not delivered",
                    email.message_id, part.total, part.message_id,
                )  # fmt: skip
                incoming.quarantine()
                return None
            files, numbers = self._part_files, range(1, part.total + 1)
            try:
                files.put(part.message_id, origin, part.number, email.body)
            except OSError as exc:  # (a full disk: left for another process, or later)
                _log.error("part %s could not be kept on disk (%s): left where it is",
                           email.message_id, exc)  # fmt: skip
                incoming.leave()
                return None
            incoming.email = stripped
            del email
            if verdict == "held":
                return None
            parts = [item[2] for item in items]
            joined = join_parts([item[0] for item in items])
            if files.size(part.message_id, origin, numbers) > self._max_size:
                files.drop(part.message_id, origin, numbers)
                _log.warning("message %s of %d parts is larger than max-message-size: not "
                             "delivered", joined.message_id, len(parts))  # fmt: skip
                for each in parts:
                    each.quarantine()
                return None
            route = _route_of_joined(joined, items[0][1], parts)
            pieces = files.pieces(part.message_id, origin, numbers)
            digest = PieceDigest(items[0][0].headers.get(PART_DIGEST_HEADER))
            encoding = joined.headers.get(BODY_ENCODING_HEADER)
            mismatch = False
            try:
                if encoding is None:
                    body = grow(digest.feed(pieces))
                else:
                    body = decompress_pieces(digest.feed(pieces), encoding, self._max_size)
                if not digest.matches():  # parts of the signer's other message, or altered
                    mismatch = True
                    raise MalformedEmailError(
                        f"its {len(parts)} parts do not make the body their Part-Digest names"
                    )
                self._reassembly.joined(part.message_id, origin)
                if encoding is None:
                    return joined.replace(body=body), route, _joined(joined, parts)
            except (MalformedEmailError, UnicodeDecodeError) as exc:
                _log.warning("message %s not delivered: %s", joined.message_id, exc)
                security = self._security
                signed = getattr(info, "identity", None) is not None
                if security is not None and signed and mismatch:
                    security.refused_later(len(parts), "part-digest")
                for each in parts:
                    each.quarantine(security.quarantined if security is not None else None)
                return None
            except EmailMWError as exc:  # a package this process lacks: another may read it
                self._missing(encoding or "", joined, exc)
                for each in parts:
                    each.leave()
                return None
            finally:
                pieces.close()
                files.drop(part.message_id, origin, numbers)
            headers = Headers(
                [(k, v) for k, v in joined.headers.items() if k.lower() != "body-encoding"]
            )
            return joined.replace(body=body, headers=headers), route, _joined(joined, parts)
        encoding = email.headers.get(BODY_ENCODING_HEADER)
        if encoding is None:
            return email, route, incoming
        try:
            body = decompress_pieces(_slices(email.body), encoding, self._max_size)
        except MalformedEmailError as exc:
            _log.warning("message %s not delivered: %s", email.message_id, exc)
            incoming.quarantine()
            return None
        except EmailMWError as exc:  # a package this process lacks: another may read it
            self._missing(encoding, email, exc)
            incoming.leave()
            return None
        headers = Headers(
            [(k, v) for k, v in email.headers.items() if k.lower() != "body-encoding"]
        )
        return email.replace(body=body, headers=headers), route, incoming

    def _missing(self, encoding: str, email: Email, exc: Exception) -> None:
        if encoding not in self._told_missing:
            self._told_missing.add(encoding)
            _log.error("left message %s where it is: %s", email.message_id, exc)

    def _give_up_parts(self, now: float) -> None:
        """Messages whose parts did not all come within ``part-timeout``: said, and their
        parts left where they are (never deleted; a restart with a state file does not
        hand them out again, the mailbox keeps them)."""
        for message_id, total, numbers, items, foreign in self._reassembly.expired(now):
            gone = all(
                incoming.claim is not None and incoming.claim.state() == "lost"
                for _, _, incoming in items
            )
            if gone:  # (a group member's parts, now another member's: it joins them)
                _log.debug("parts %s of message %s went to another member of the group",
                           ",".join(map(str, numbers)), message_id)  # fmt: skip
            elif foreign:  # (was: left in the mailbox like a message missing a part)
                self._refuse_foreign(message_id, total, numbers, items)
                continue
            else:
                _log.warning(
                    "message %s incomplete after part-timeout: parts %s of %d came; they "
                    "are left in the mailbox", message_id, ",".join(map(str, numbers)), total,
                )  # fmt: skip
            for email, route, incoming in items:
                info = getattr(route, "info", None)
                origin = getattr(info, "identity", None) or email.from_
                self._part_files.drop(message_id, origin, range(1, total + 1))
                incoming.leave()

    def _refuse_foreign(
        self,
        message_id: str,
        total: int,
        numbers: list[int],
        items: list[tuple[Email, Route, IncomingEmail]],
    ) -> None:
        """Parts of ``message_id`` from a signer whose message it is not (another signer's
        message of that ID was joined whole), incomplete at ``part-timeout``: quarantined."""
        origin = items[0][0].from_
        info = getattr(items[0][1], "info", None)
        signer = getattr(info, "identity", None)
        _log.warning(
            "parts %s of %d of message %s from %s never completed, and another signer's "
            "message of that Message-ID came whole: quarantined",
            ",".join(map(str, numbers)), total, message_id, signer or origin,
        )  # fmt: skip
        security = self._security
        if security is not None and signer is not None:
            security.refused_later(len(items), "foreign-part")
        for _, _, incoming in items:
            self._part_files.drop(message_id, signer or origin, range(1, total + 1))
            incoming.quarantine(security.quarantined if security is not None else None)

    def _on_done(self, email: Email, route: Route) -> Callable[[int], None] | None:
        """What settling ``email`` must also do: acknowledge it to its publisher when it
        asked (``Ack-Request``), with the delivery count it was handed out with."""
        acknowledge = self._acknowledge
        if acknowledge is None or not isinstance(route, PublishRoute):
            return None
        if email.headers.item("ack-request") is None:
            return None
        return lambda count: acknowledge(email, count)

    def _seen_before(self, message_id: str | None, route: Route) -> bool:
        """Whether a copy of this email was handed out already: the same Message-ID from
        the same verified signer (first wins per signer: nobody takes another's ID)."""
        if message_id is None:
            return False
        signer = getattr(getattr(route, "info", None), "identity", None)
        if signer:
            message_id = signer_key(signer, message_id)
        recent = self._recent
        if message_id in recent:
            return True
        recent[message_id] = None
        if len(recent) > RECENT_MESSAGE_IDS:
            recent.popitem(last=False)
        return False


def _slices(text: str, size: int = 1 << 20) -> Iterator[str]:
    """``text`` in pieces of ``size`` characters."""
    for start in range(0, len(text), size):
        yield text[start : start + size]
