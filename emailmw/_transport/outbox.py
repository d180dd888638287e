"""Sending with a chosen guarantee: the outbox both SMTP transports share.

A transport provides a :class:`Submitter`: one SMTP connection that submits one
:class:`Submission` at a time, synchronously, and raises emailmw's errors. :class:`Outbox` is
the :class:`~emailmw.EmailSender` on top of it: every email goes through one FIFO and one
worker thread (so the server sees emails in the order they were sent, whatever their
guarantee), and ``send()`` returns

* ``server``: once the server accepted the email. Temporary failures (the server restarting,
  4xx answers, a dropped connection) are retried with backoff until ``timeout`` seconds
  have passed, then :class:`~emailmw.SendError` is raised; a permanent refusal (5xx) raises
  at once. Nothing is left behind: an email that raised was not accepted.
* ``spool``: once the email is written to the spool directory (fsync'ed, atomically
  renamed). The worker sends spooled files in order and deletes each once the server
  accepted it; a process that starts with the same spool sends what a dead one left,
  first. A file is sent again only when its process died between the server's acceptance
  and the deletion (one SMTP round trip): the copy has the same Message-ID, and emailmw
  receivers drop it. A permanently refused file moves to ``failed/`` beside the spool.
* ``memory``: once the email is queued (at most ``outbox-size``; a full queue blocks the
  caller up to ``timeout``, then raises). Lost if the process dies before it is sent.

With ``spool`` and ``memory``, transient failures are retried until the sender closes; a
permanent refusal goes to the ``on_failure`` callback given with the email (its owner),
else to the next :meth:`Outbox.flush`, never to another caller.
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import fcntl
import itertools
import json
import logging
import os
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from email.utils import parseaddr
from pathlib import Path
from typing import Final

from .._core.config import NO_BATCH, BatchPolicy, Options
from .._core.errors import (
    AuthenticationError,
    ClosedError,
    ConfigError,
    InvalidArgumentError,
    SendError,
    TransportError,
)
from .._core.health import Health
from .._core.log import get_logger
from .._core.packing import build_batch
from .._core.types import Email
from .._core.wire import (
    HEADER_PUBLISHER_GID,
    HEADER_PUBLISHER_SEQUENCE_NUMBER,
    HEADER_RESENT,
    build,
    envelope_recipients,
    new_message_id,
    prepare_outgoing,
    publisher_sequence,
)
from .base import ControlMail, EmailSender, FailureCallback, ReadersBatch
from .errors import refusals_said
from .ledger import SendLedger, ledger_path
from .quota import SendBudget
from .replies import recipient_may_retry

__all__ = ["Submission", "Outbox", "Spool", "Submitter"]

_log = get_logger("outbox")
_BACKOFF_MIN: Final = 0.1
_BACKOFF_MAX: Final = 2.0
_AUTH_BACKOFF_MAX: Final = 30.0
#: after a server's answer that the account sends too much (421, 4.7.x, 5.4.5): all sending
#: waits, from this long, doubling up to the maximum
#: how long sending goes without a hold of the budget before a pacing episode is over
#: (the next hold is said again: one line an episode, not one an email)
_PACING_OVER_S: Final = 60.0
_THROTTLE_MIN: Final = 1.0
_THROTTLE_MAX: Final = 300.0
#: what an attempt returns when the outbox closes before the email was sent (it stays in
#: the spool for the next process)
_LEFT: Final = TransportError("left for the next process")
#: a recipient refused for now (its mailbox full) is tried again after 5 s, doubling to
#: 10 minutes, while the outbox sends everything else
_DEFER_MIN: Final = 5.0
_DEFER_MAX: Final = 600.0


@dataclass(frozen=True, slots=True)
class _Deferred:
    """What :meth:`Outbox._attempts` says of an email accepted for every recipient but
    ``recipients``, which the server refused for now (a mailbox full, ``4.2.2``; one
    recipient too many for the transaction, ``x.5.3``): they are tried again later, the
    outbox meanwhile sending everything else. ``undelivered``: recipients refused for good
    (with the server's answers); ``error``: the latest refusal."""

    recipients: tuple[str, ...]
    undelivered: dict[str, tuple[int, str]]
    error: SendError


@dataclass(frozen=True, slots=True)
class Submission:
    """What one SMTP transaction sends: MAIL FROM, RCPT TO and the message bytes."""

    sender: str
    recipients: tuple[str, ...]
    raw: bytes
    message_id: str


class Submitter(abc.ABC):
    """One SMTP connection of a transport. Used by one thread at a time (the outbox's
    worker); connects on first use and after a failure."""

    server: str

    @abc.abstractmethod
    def submit(self, envelope: Submission) -> None:
        """One SMTP transaction; returns once the server accepted the message.

        Raises :class:`~emailmw.SendError` with ``temporary`` True (4xx, no answer) or False
        (5xx), :class:`~emailmw.ConnectError` when the server cannot be reached,
        :class:`~emailmw.AuthenticationError` or :class:`~emailmw.TLSError`.
        """

    @abc.abstractmethod
    def close(self) -> None:
        """Say goodbye to the server and release the connection. Idempotent."""

    #: the SMTP ``SIZE`` the server advertised, once connected (None: not said, not yet)
    size_limit: int | None = None

    def connect(self) -> None:  # noqa: B027 - optional
        """Connect (and read the server's EHLO answer) when not connected; raises as
        :meth:`submit` does."""


class Spool:
    """A directory of emails waiting to be sent, each one file, oldest name first.

    Held by one process at a time (an exclusive ``flock`` on ``.lock``, released by the
    kernel when the process dies). A file is ``<ns>-<n>-<id>.msg``: one JSON line with
    the envelope, then the message bytes. The directory is 0700 and its files 0600 (they
    hold bodies in clear); a ``.msg.tmp`` a crash left behind is removed at start.
    """

    def __init__(self, directory: str) -> None:
        self.directory = Path(directory)
        self.failed = self.directory / "failed"
        try:
            self.failed.mkdir(parents=True, exist_ok=True)
            for item in (self.directory, self.failed):
                os.chmod(item, 0o700)  # it holds message bodies in clear: private
            self._lock_fd = os.open(self.directory / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise ConfigError(f"cannot use the spool directory: {exc}", key="email.spool") from exc
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(self._lock_fd)
            raise ConfigError(
                f"spool directory {directory} is in use by another process", key="email.spool"
            ) from exc
        for stale in self.directory.glob(".*.msg.tmp"):  # a write cut short by a crash
            stale.unlink(missing_ok=True)
        self._names = itertools.count()

    def leftovers(self) -> list[Path]:
        """Files a previous process wrote and did not send, oldest first."""
        return sorted(self.directory.glob("*.msg"))

    def write(self, envelope: Submission) -> Path:
        head = json.dumps(
            {
                "from": envelope.sender,
                "to": list(envelope.recipients),
                "message_id": envelope.message_id,
            }
        ).encode()
        name = f"{time.time_ns():020d}-{next(self._names):08d}-{uuid.uuid4().hex[:8]}.msg"
        path = self.directory / name
        tmp = self.directory / f".{name}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(head + b"\n" + envelope.raw)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
        dir_fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)  # the rename itself survives a crash of the machine
        finally:
            os.close(dir_fd)
        return path

    @staticmethod
    def read(path: Path) -> Submission:
        data = path.read_bytes()
        head, _, raw = data.partition(b"\n")
        meta = json.loads(head)
        return Submission(meta["from"], tuple(meta["to"]), raw, meta["message_id"])

    def sent(self, path: Path) -> None:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()

    def refused(self, path: Path) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.replace(path, self.failed / path.name)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._lock_fd)


@dataclass(eq=False)
class _Item:
    guarantee: str
    envelope: Submission | None  # None: read from ``path`` when its turn comes
    email: Email | None
    on_failure: FailureCallback | None
    path: Path | None = None
    deadline: float | None = None  # server: give up then
    batch: BatchPolicy = NO_BATCH
    queued_at: float = 0.0
    idle: bool = False  # queued while the outbox had nothing in hand or queued
    email_limit: int = 10_000_000  # the largest email the server takes (a batch's too)
    done: threading.Event = field(default_factory=threading.Event)
    error: TransportError | None = None
    cancelled: bool = False
    #: a deferred email (some recipients refused for now): not sent again before then
    not_before: float = 0.0
    deferrals: int = 0
    #: recipients the server refused for good, with its answers (reported when it is done)
    undelivered: dict[str, tuple[int, str]] = field(default_factory=dict)

    def due(self, now: float) -> bool:
        return self.not_before <= now

    def batches_now(self) -> bool:
        """Whether this item batches, asked when it leaves the queue (its readers may
        have answered, or withdrawn, since it was queued: :class:`ReadersBatch`)."""
        if not self.batch.enabled or self.envelope is None:
            return False
        allowed = self.batch.allowed if isinstance(self.batch, ReadersBatch) else None
        try:
            return allowed is None or allowed()
        except Exception:  # noqa: BLE001 - a failing look-up must not stop the worker
            _log.exception("asking whether the readers of %s read batches failed (a bug)",
                           ", ".join(self.envelope.recipients))  # fmt: skip
            return False

    def joins(self, head: _Item, count: int, size: int) -> bool:
        """Whether this item may go in ``head``'s batch, which has ``count`` emails of
        ``size`` bytes: both batch, to the same envelope, of the same Subject and route
        (``Route-To``: a batch carries one subject's messages, so that a reader claims it
        whole, ``docs/batching.md``), within the head's limits. (Whether the envelope's
        readers read batches now was asked of the head: one answer per envelope.)"""
        mine, theirs = self.envelope, head.envelope
        return (
            mine is not None
            and theirs is not None
            and self.batch.enabled
            and mine.sender == theirs.sender
            and mine.recipients == theirs.recipients
            and _batch_key(self.email) == _batch_key(head.email)
            and count < head.batch.max_messages
            and size + len(mine.raw) <= min(head.batch.max_bytes, head.email_limit)
        )

    def same_stream(self, head: _Item) -> bool:
        """Whether this item goes to ``head``'s envelope with its Subject and route: a
        batch never takes an email ahead of one of its own stream."""
        mine, theirs = self.envelope, head.envelope
        return (
            mine is None
            or theirs is None
            or (
                mine.sender == theirs.sender
                and mine.recipients == theirs.recipients
                and _batch_key(self.email) == _batch_key(head.email)
            )
        )


def _batch_key(email: Email | None) -> tuple[str, str] | None:
    """What messages of one batch share besides the envelope: Subject and Route-To."""
    if email is None:
        return None
    return email.subject, email.headers.get("Route-To", "")


def _shared_headers(emails: list[Email]) -> list[tuple[str, str]]:
    """What a batch email says of its messages in its own header, for a reader that
    claims it by its header alone (a group member, ``docs/delivery-modes.md``): its first
    message's Source-Timestamp (send order), the Route-To they share, and when they are
    one publisher's consecutive messages, its Publisher-GID and first
    Publisher-Sequence-Number (a stateful group waits for a batch sent before it)."""
    out = []
    stamp = emails[0].headers.get("Source-Timestamp") if emails else None
    if stamp is not None:
        out.append(("Source-Timestamp", stamp))
    streams = [publisher_sequence(email.headers.get(HEADER_PUBLISHER_GID),
                                  email.headers.get(HEADER_PUBLISHER_SEQUENCE_NUMBER))
               for email in emails]  # fmt: skip
    if (
        streams
        and (gid := streams[0][0])
        and all(stream == (gid, streams[0][1] + n) for n, stream in enumerate(streams))
    ):
        out += [(HEADER_PUBLISHER_GID, gid), (HEADER_PUBLISHER_SEQUENCE_NUMBER, str(streams[0][1]))]
    routes = {email.headers.get("Route-To") for email in emails}
    if len(routes) == 1 and (route := routes.pop()) is not None:
        out.append(("Route-To", route))
    return out


class Outbox(EmailSender):
    """An :class:`~emailmw.EmailSender` over a :class:`Submitter` (see the module
    docstring). Thread-safe."""

    def __init__(self, submitter: Submitter, options: Options) -> None:
        self._submitter = submitter
        self._options = options
        self.address = options.recipients.from_
        self._server = submitter.server
        self._cond = threading.Condition()
        self._queue: deque[_Item] = deque()
        self._in_memory = 0  # memory-guarantee items queued or in flight
        self._busy: list[_Item] = []  # the email (or batch) the worker has in hand
        self._failures: list[str] = []
        self._closed = False
        self._stopping = threading.Event()
        self._probe_wanted = False  # someone waits to know the server's SIZE
        self._probed = threading.Event()
        self._budget = SendBudget(options.limits)
        self._ledger = self._open_ledger(options)
        self._held_by = ""  # what holds sending now (logged once per episode)
        self._held_at = 0.0  # (when it last held: an episode ends after _PACING_OVER_S)
        self._throttle = _THROTTLE_MIN
        self._day_warned = 0.0
        self._health = Health("sending", "retrying; a refused login every 30 s or less")
        self._deferred = 0  # queued emails deferred for some recipients (see _defer)
        self._spool: Spool | None = None
        if options.spool is not None:
            self._spool = Spool(options.spool)
            leftovers = self._spool.leftovers()
            if leftovers:
                _log.info("sending %d email(s) left in spool %s", len(leftovers), options.spool)
            for path in leftovers:
                self._queue.append(_Item("spool", None, None, None, path))
        self._worker = threading.Thread(target=self._work, name="emailmw-outbox", daemon=True)
        self._worker.start()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._server}>"

    # -- the caller's side -------------------------------------------------------------------

    def send(
        self,
        email: Email,
        *,
        guarantee: str | None = None,
        on_failure: FailureCallback | None = None,
        batch: BatchPolicy | None = None,
    ) -> None:
        if self._closed:
            raise ClosedError(f"{self!r} is closed")
        guarantee = guarantee or self._options.send_guarantee
        batch = batch or self._options.batch
        email = prepare_outgoing(email, self.address)
        raw = build(email, max_size=self._options.max_message_size)
        recipients = envelope_recipients(email)
        if not recipients:
            raise SendError("the email has no recipients", server=self._server)
        assert email.message_id is not None
        envelope = Submission(
            self._envelope_sender(email), tuple(recipients), raw, email.message_id
        )
        if guarantee == "server":
            item = _Item("server", envelope, email, None, batch=batch)
            item.deadline = time.monotonic() + self._options.timeout
            self._enqueue(item)
            self._wait_done(item)
            if item.error is not None:
                raise item.error
            return
        if guarantee == "spool":
            if self._spool is None:
                raise ConfigError("the spool guarantee needs a spool directory", key="email.spool")
            path = self._spool.write(envelope)  # (fsync'ed: before any batch is built)
            self._enqueue(_Item("spool", envelope, email, on_failure, path, batch=batch))
            return
        if guarantee != "memory":
            raise InvalidArgumentError(
                f"guarantee must be memory, spool or server, got {guarantee!r}"
            )
        with self._cond:
            if not self._cond.wait_for(
                lambda: self._in_memory < self._options.outbox_size or self._closed,
                self._options.timeout,
            ):
                raise SendError(
                    f"outbox full ({self._options.outbox_size} emails) for "
                    f"{self._options.timeout} s: the server does not keep up",
                    server=self._server,
                )
            self._in_memory += 1
        self._enqueue(_Item("memory", envelope, email, on_failure, batch=batch))

    def _envelope_sender(self, email: Email) -> str:
        return parseaddr(email.from_)[1] or self.address

    def _enqueue(self, item: _Item) -> None:
        item.email_limit = (
            self._options.max_email_bytes or self._submitter.size_limit or item.email_limit
        ) - 65536  # (room for the batch email's own header and delimiters)
        with self._cond:
            if self._closed:
                raise ClosedError(f"{self!r} is closed")
            item.queued_at = time.monotonic()
            item.idle = not self._queue and not self._busy
            if isinstance(item.batch, ControlMail):  # (ahead of data, after earlier control)
                self._put_back([item])
            else:
                self._queue.append(item)
            self._cond.notify_all()

    def _wait_done(self, item: _Item) -> None:
        """Wait for a ``server`` item; past its deadline (plus the time one attempt may
        take) it is cancelled: a later attempt would be an email its caller gave up on."""
        assert item.deadline is not None
        if item.done.wait(max(0.0, item.deadline - time.monotonic()) + self._options.timeout):
            return
        item.cancelled = True
        if not item.done.wait(self._options.timeout):
            item.error = SendError(  # (temporary: trying later may succeed)
                f"not accepted within {self._options.timeout} s",
                server=self._server,
                temporary=True,
            )

    def max_email_bytes(self) -> int | None:
        return self._submitter.size_limit

    def learn_max_email_bytes(self, timeout: float) -> int | None:
        """Asks the worker to connect (it alone uses the connection) when the server's
        SIZE is not known yet, and waits for it at most ``timeout``."""
        if self._submitter.size_limit is not None:
            return self._submitter.size_limit
        with self._cond:
            self._probe_wanted = True
            self._probed.clear()
            self._cond.notify_all()
        self._probed.wait(timeout)
        return self._submitter.size_limit

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until everything sent so far was accepted or refused; False on timeout.
        Raises :class:`SendError` for refusals nobody else was told of since the last
        flush."""
        with self._cond:
            done = self._cond.wait_for(lambda: not self._queue and not self._busy, timeout)
            failures, self._failures = self._failures, []
        if failures:
            raise SendError(
                f"{len(failures)} email(s) refused: " + "; ".join(failures[:5]), server=self._server
            )
        return done

    def close(self) -> None:
        """Send what is queued (up to ``timeout``), then stop. Spooled emails not sent by
        then stay in the spool for the next process; emails only in memory are lost, and
        logged."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(SendError):
            self.flush(self._options.timeout)
        with self._cond:
            waiting = [*self._queue, *self._busy]
            unsent = sum(1 for item in waiting if item.guarantee != "spool")
            spooled = len(waiting) - unsent
        if unsent:
            _log.warning("closing %s with %d unsent email(s) in memory: lost", self, unsent)
        if spooled:
            _log.info("closing %s: %d email(s) stay in the spool", self, spooled)
        self._stopping.set()
        with self._cond:
            self._cond.notify_all()
        self._worker.join(self._options.timeout + 5)
        self._submitter.close()
        if self._spool is not None:
            self._spool.close()

    # -- the worker's side --------------------------------------------------------------------

    def _due_in(self) -> float | None:
        """Seconds until a queued email is due (0: one is), None when none is queued (call
        with the lock)."""
        if not self._queue:
            return None
        if not self._deferred:  # (the usual case, in O(1): every queued email is due)
            return 0.0
        now = time.monotonic()
        return max(0.0, min(item.not_before for item in self._queue) - now)

    def _work(self) -> None:
        while True:
            with self._cond:
                while not (self._due_in() == 0 or self._probe_wanted or self._stopping.is_set()):
                    self._cond.wait(self._due_in())  # (a deferred email: until it is due)
                if self._stopping.is_set():
                    return
                probe, self._probe_wanted = self._probe_wanted, False
                run = self._busy = self._take_run() if self._due_in() == 0 else []
            if probe:
                self._probe()
            if not run:
                continue
            try:
                if len(run) == 1:
                    self._deliver(run[0])
                else:
                    self._deliver_batch(run)
            except Exception:  # noqa: BLE001 - the worker must outlive any one email
                _log.exception("sending %s failed unexpectedly", run[0].envelope or run[0].path)
                for item in run:
                    if not item.done.is_set():
                        self._finish(item, SendError("failed unexpectedly", server=self._server))
            with self._cond:
                self._busy = []
                self._in_memory -= sum(1 for item in run if item.guarantee == "memory")
                self._cond.notify_all()

    def _probe(self) -> None:
        """Connect, to learn what the server takes (its SIZE), for a sender that asked."""
        try:
            self._submitter.connect()
        except TransportError as exc:  # (a send says why; the size stays unknown)
            _log.debug("connecting to %s to learn its SIZE failed: %s", self._server, exc)
        finally:
            self._probed.set()

    def _take_run(self) -> list[_Item]:
        """The next email, and when it batches, the queued emails that join it (same
        envelope, Subject and route; in the order they were sent).

        Like TCP's Nagle algorithm and Kafka's in-flight batching, a batch costs latency
        only when there is traffic to share it: an email queued while the outbox was idle
        goes at once (with whatever joined it meanwhile); one queued while a submission
        was in flight waits, with the lock released, for more to join until its
        ``linger`` is over or the batch is full. While the provider's budget (``limits``)
        says to wait, the batch keeps growing (up to its ``max-messages`` and
        ``max-bytes``): fewer, larger emails. Called with the lock held."""
        now = time.monotonic()
        if self._deferred:
            first = next(n for n, item in enumerate(self._queue) if item.due(now))
            head = self._queue[first]
            del self._queue[first]
            if head.deferrals:
                self._deferred -= 1
        else:
            head = self._queue.popleft()
        run = self._busy = [head]
        batching = head.batches_now()
        size = len(head.envelope.raw) if head.envelope is not None else 0
        until = head.queued_at + head.batch.linger_ms / 1000
        scanned = 0  # queued items looked at (those that do not join stay in place)
        while True:
            while batching and scanned < len(self._queue) and len(run) < head.batch.max_messages:
                follower = self._queue[scanned]
                if follower.deferrals or not follower.joins(head, len(run), size):
                    if follower.same_stream(head):
                        break  # (never ahead of an email of its own stream)
                    scanned += 1
                    continue
                del self._queue[scanned]
                run.append(follower)
                assert follower.envelope is not None
                size += len(follower.envelope.raw)
            if self._stopping.is_set():
                return run
            # the provider's budget (limits:): wait, and let the batch grow meanwhile
            hold = 0.0
            if self._budget.active:
                self._read_ledger()  # (what other processes sent as the account meanwhile)
                hold = self._budget.delay(time.monotonic())
            if hold > 0:
                self._note_hold()
                self._cond.wait(hold)
                # (asked again: the readers may have answered, or withdrawn, meanwhile)
                if batching != head.batches_now():
                    batching = not batching
                    if not batching:  # (what joined goes back, in order, to go alone)
                        self._put_back(run[1:])
                        del run[1:]
                        size = len(head.envelope.raw) if head.envelope is not None else 0
                    scanned = 0
                continue
            if self._held_by and time.monotonic() - self._held_at > _PACING_OVER_S:
                self._held_by = ""  # (the episode is over: the next hold is said again)
            full = len(run) >= head.batch.max_messages
            remaining = until - time.monotonic()
            if not batching or head.idle or full or remaining <= 0 or self._closed:
                return run
            self._cond.wait(remaining)

    def _put_back(self, items: list[_Item]) -> None:
        """Queue ``items``, in order, ahead of the data and after the control mail queued
        (control mail, and what a batch gave back; call with the lock)."""
        at = 0
        while at < len(self._queue) and isinstance(self._queue[at].batch, ControlMail):
            at += 1
        for offset, item in enumerate(items):
            self._queue.insert(at + offset, item)

    def _open_ledger(self, options: Options) -> SendLedger | None:
        """The account's sending ledger, shared with the machine's other processes sending
        as it (``ledger``), when the budget counts; read up to now."""
        if not self._budget.active or options.user is None:
            return None
        path = ledger_path(options.user.username, options.user.smtp.url)
        try:
            ledger = SendLedger(path, now=time.time())
        except OSError as exc:
            _log.warning(
                "%s: sending ledger %s unusable (%s): this process's budget counts only what "
                "it sends itself", self, path, exc,
            )  # fmt: skip
            return None
        self._read_ledger(ledger)
        return ledger

    def _read_ledger(self, ledger: SendLedger | None = None) -> None:
        """Count in the budget what the ledger says went since it was read last (this
        process's emails and the others')."""
        ledger = ledger or self._ledger
        if ledger is None:
            return
        try:
            times = ledger.read_new()
        except OSError as exc:
            self._ledger_failed(exc)
            return
        offset = time.time() - time.monotonic()
        for when in times:
            self._budget.spent(when - offset)

    def _spent(self) -> None:
        """One email (one SMTP transaction) went now."""
        if self._ledger is None:
            self._budget.spent(time.monotonic())
            return
        try:
            self._ledger.record(time.time())
        except OSError as exc:
            self._ledger_failed(exc)
            self._budget.spent(time.monotonic())
            return
        self._read_ledger()

    def _ledger_failed(self, exc: OSError) -> None:
        assert self._ledger is not None
        _log.warning(
            "%s: sending ledger %s failed (%s): this process's budget counts only what it "
            "sends itself from now on", self, self._ledger.path, exc,
        )  # fmt: skip
        self._ledger = None

    def _note_hold(self) -> None:
        """One log line when the budget starts holding sending (not one per email)."""
        now = time.monotonic()
        self._held_at = now
        holder = self._budget.holder(now)
        which = holder.partition(" (")[0]  # (the limit, not how much of it is used)
        if which != self._held_by:
            self._held_by = which
            _log.info("%s: sending paced by %s; batches gather what waits", self, holder)
        left = self._budget.day_left_s(now)
        if left is not None and left < 3600 and now - self._day_warned > 3600:
            self._day_warned = now
            _log.warning(
                "%s: at the current rate the day's sending budget (emails-per-day) runs out in "
                "%.0f min; then sending waits for the oldest of the day to age out",
                self, left / 60,
            )  # fmt: skip

    def _deliver_batch(self, run: list[_Item]) -> None:
        """Send ``run`` as one batch email; each of its emails is accepted or refused with
        it. A permanent refusal of the batch puts its emails back, each to go alone (and
        meet its own fate): one email the server will not take does not sink the others."""
        live = [item for item in run if not item.cancelled]
        for item in run:
            if item.cancelled:
                self._finish(item, SendError("cancelled by its caller", server=self._server))
        if not live:
            return
        first = live[0].envelope
        assert first is not None
        raws = [item.envelope.raw for item in live if item.envelope is not None]
        emails = [item.email for item in live if item.email is not None]
        envelope = Submission(
            first.sender,
            first.recipients,
            build_batch(raws, from_=first.sender, to=first.recipients,
                        message_id=(mid := new_message_id(first.sender)),
                        timestamp_ns=time.time_ns(),
                        subjects=[email.subject for email in emails],
                        headers=_shared_headers(emails)),
            mid,
        )  # fmt: skip
        deadlines = [item.deadline for item in live if item.deadline is not None]
        error = self._attempts(
            envelope,
            deadline=min(deadlines, default=None),
            server=any(item.guarantee == "server" for item in live),
            memory_only=all(item.guarantee == "memory" for item in live),
            given_up=lambda: all(item.cancelled for item in live),
        )
        if error is _LEFT:
            return  # closing: spooled emails stay for the next process
        if isinstance(error, _Deferred):
            for item in live:
                assert item.envelope is not None  # (a batch is made of emails in memory)
                self._defer(item, error, item.envelope)
            return
        if (
            isinstance(error, SendError)
            and not error.temporary
            and not error.recipients  # (accepted for the others: never sent them again)
            and not self._stopping.is_set()
        ):
            _log.warning("batch of %d refused (%s): sending them one by one", len(live), error)
            for item in live:
                item.batch = NO_BATCH
            with self._cond:
                self._queue.extendleft(reversed(live))
                self._in_memory += sum(1 for item in live if item.guarantee == "memory")
            return
        for item in live:
            self._finish(item, error)

    def _deliver(self, item: _Item) -> None:
        envelope = item.envelope
        if envelope is None:
            assert item.path is not None
            assert self._spool is not None
            try:
                envelope = self._spool.read(item.path)
            except (OSError, ValueError, KeyError) as exc:
                _log.error("spool file %s unreadable (%s): moved to failed/", item.path, exc)
                self._spool.refused(item.path)
                return
            # a process that died may have had it accepted already: a second copy is
            # marked, so that its receiver flags it redelivered (never a silent repeat)
            envelope = dataclasses.replace(
                envelope, raw=f"{HEADER_RESENT}: spool\r\n".encode() + envelope.raw
            )
        error = self._attempts(
            envelope,
            deadline=item.deadline,
            server=item.guarantee == "server",
            memory_only=item.guarantee == "memory",
            given_up=lambda: item.cancelled,
        )
        if error is _LEFT:
            return  # closing: a spooled email stays for the next process
        if isinstance(error, _Deferred):
            self._defer(item, error, envelope)
            return
        self._finish(item, error)

    def _defer(self, item: _Item, deferred: _Deferred, envelope: Submission) -> None:
        """``item`` (sent as ``envelope``: a spool's leftover is read from its file) was
        accepted for all but ``deferred.recipients`` (refused for now): it goes back to the
        queue for those alone, due after a wait that doubles each time (the outbox sends
        everything else meanwhile: a full mailbox holds nothing up). Past a ``server``
        item's deadline it is refused, temporary. A spooled item's file is rewritten for
        those recipients first (a crash in between repeats, flagged); closing, it stays in
        the spool for those recipients alone."""
        item.undelivered.update(deferred.undelivered)
        wait = min(_DEFER_MIN * 2**item.deferrals, _DEFER_MAX)
        item.deferrals += 1
        item.envelope = dataclasses.replace(envelope, recipients=deferred.recipients)
        if item.path is not None and self._spool is not None:
            old, item.path = item.path, self._spool.write(item.envelope)
            self._spool.sent(old)
        if self._stopping.is_set():  # (closing: a spooled one stays, for those alone)
            if item.path is None:
                self._finish(item, deferred.error)
            return
        if item.deadline is not None and time.monotonic() + wait > item.deadline:
            self._finish(item, SendError(
                f"not accepted within {self._options.timeout} s: {deferred.error}",
                server=self._server, temporary=True, recipients=deferred.error.recipients,
            ))  # fmt: skip
            return
        _log.warning(
            "%s: %s refused for now, accepted for the others: %s; trying them again in "
            "%.0f s (everything else is sent meanwhile)",
            self, ", ".join(deferred.recipients), deferred.error, wait,
        )  # fmt: skip
        with self._cond:
            item.not_before = time.monotonic() + wait
            self._deferred += 1
            self._queue.append(item)
            if item.guarantee == "memory":
                self._in_memory += 1  # (the worker counts it out once this run is done)
            self._cond.notify_all()

    def _attempts(
        self,
        envelope: Submission,
        *,
        deadline: float | None,
        server: bool,
        memory_only: bool,
        given_up: Callable[[], bool],
    ) -> TransportError | _Deferred | None:
        """Submit ``envelope`` until it is accepted (None), refused for good, past
        ``deadline`` or given up (the error), or the outbox closes (:data:`_LEFT`).

        With ``limits.recipients-per-email``, the recipients go in several transactions of
        the same bytes (the same Message-ID); one accepted is not sent again when another
        is retried. Each transaction counts against the budget. A throttling answer (421,
        4.7.x, x.4.5, 4.3.2: the sender's rate) holds all sending, from 1 s doubling to
        300 s, without losing it. A recipient refused while others were accepted is never
        sent to again with them: refused for good (a 5xx: its mailbox full, its address
        unknown), it is reported when the email is done; refused for now (a 4xx, one
        recipient too many) the email is :class:`_Deferred` for it."""
        most = self._options.limits.recipients_per_email or len(envelope.recipients)
        chunks = [
            dataclasses.replace(envelope, recipients=envelope.recipients[i : i + most])
            for i in range(0, len(envelope.recipients), most)
        ]
        backoff = _BACKOFF_MIN
        later: list[str] = []  # recipients refused for now
        undelivered: dict[str, tuple[int, str]] = {}  # refused for good
        refusal: SendError | None = None
        while True:
            if given_up():
                return SendError("cancelled by its caller", server=self._server)
            try:
                while chunks:
                    self._submitter.submit(chunks[0])
                    self._spent()
                    self._throttle = _THROTTLE_MIN
                    chunks.pop(0)
            except SendError as exc:
                if exc.recipients and chunks:  # each refused recipient on its own
                    chunk, refusal = chunks.pop(0), exc
                    refused = {r: a for r, a in exc.recipients.items() if r in chunk.recipients}
                    if len(refused) < len(chunk.recipients):
                        self._spent()  # (accepted for the others: a transaction made)
                    retry = [r for r in chunk.recipients
                             if r in refused and recipient_may_retry(*refused[r])]  # fmt: skip
                    undelivered.update({r: a for r, a in refused.items() if r not in retry})
                    if retry and exc.throttled:  # (the sender's rate: held, below)
                        chunks.insert(0, dataclasses.replace(chunk, recipients=tuple(retry)))
                    else:
                        later += retry
                        continue
                elif not exc.temporary:
                    return exc
                error: TransportError = exc
                if exc.throttled:
                    self._budget.throttled(time.monotonic(), self._throttle)
                    limits = self._options.limits
                    unpaced = limits.emails_per_minute is None and limits.emails_per_day is None
                    _log.warning(
                        "%s: the server throttles sending (%s): holding all sending %.0f s%s",
                        self, exc, self._throttle,
                        "; set email.limits (emails-per-minute, emails-per-day) to what the "
                        "provider allows, or a provider: profile, so that sending is paced "
                        "instead of throttled (docs/providers.md)" if unpaced else "",
                    )  # fmt: skip
                    wait = self._throttle
                    self._throttle = min(self._throttle * 2, _THROTTLE_MAX)
                    if deadline is not None and time.monotonic() + wait > deadline:
                        return SendError(
                            f"not accepted within {self._options.timeout} s: {error}",
                            server=self._server,
                            temporary=True,
                        )
                    if self._stopping.wait(wait):
                        return _LEFT
                    continue
            except AuthenticationError as exc:
                if server:
                    return exc
                error = exc
            except TransportError as exc:
                error = exc
            else:
                self._sent_again()
                if later:
                    assert refusal is not None
                    return _Deferred(tuple(later), undelivered, refusal)
                if undelivered:
                    return _undelivered(envelope, undelivered, self._server)
                return None
            if deadline is not None and time.monotonic() + backoff > deadline:
                return SendError(
                    f"not accepted within {self._options.timeout} s: {error}",
                    server=self._server,
                    temporary=True,
                )
            if self._closed and memory_only and backoff >= _BACKOFF_MAX:
                return SendError(f"not sent before close: {error}", server=None)
            if self._stopping.is_set():
                return _LEFT
            said = self._health.failed(error, time.monotonic())
            if said is not None:  # (a change of state: once, and once when it works again)
                _log.log(logging.ERROR if said[0] == "error" else logging.WARNING, "%s: %s",
                         self, said[1])  # fmt: skip
            else:
                _log.debug(
                    "sending %s failed (%s); retrying in %.1f s", envelope.message_id, error,
                    backoff,
                )  # fmt: skip
            self._stopping.wait(backoff)
            # (a login refused, or a secret that cannot be fetched: no login every 2 s)
            cap = _AUTH_BACKOFF_MAX if isinstance(error, AuthenticationError) else _BACKOFF_MAX
            backoff = min(backoff * 2, cap)

    def _sent_again(self) -> None:
        """A submission went through: said once when sending had been failing."""
        said = self._health.succeeded(time.monotonic())
        if said is not None:
            _log.warning("%s: %s", self, said[1])

    def _finish(self, item: _Item, error: TransportError | None) -> None:
        if error is None and item.undelivered and item.envelope is not None:
            error = _undelivered(item.envelope, item.undelivered, self._server)
        if item.path is not None and self._spool is not None:
            if error is None:
                self._spool.sent(item.path)
            else:
                self._spool.refused(item.path)
        item.error = error
        item.done.set()
        if error is None or item.guarantee == "server":
            return
        if item.email is None:  # left in the spool by a process that is gone: no owner
            _log.error(
                "%s: spooled %s not delivered (moved to failed/): %s", self, item.path, error
            )
            return
        if item.on_failure is not None:
            failure = error if isinstance(error, SendError) else SendError(str(error))
            if failure is not error:
                failure.__cause__ = error
            try:
                item.on_failure(item.email, failure)
            except Exception:  # noqa: BLE001 - the owner's callback must not stop the worker
                _log.exception("the failure callback for %s failed", item.email.message_id)
            return
        _log.error("%s: %s not delivered: %s", self._server, item.email.message_id, error)
        with self._cond:
            self._failures.append(f"{item.email.message_id}: {error}")


def _undelivered(
    envelope: Submission, refused: dict[str, tuple[int, str]], server: str
) -> SendError:
    """The permanent :class:`SendError` of an email the server accepted for all but
    ``refused``, in its words."""
    return SendError(
        f"{envelope.message_id} not delivered to {refusals_said(refused)} (accepted for the "
        "others)",
        server=server,
        recipients=refused,
    )
