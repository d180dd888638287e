"""The intraprocess transport: the sender hands emails straight to the receiver's queue.

For unit tests and embedded use. No serialization, but every email is checked as if it were
serialized (names, headers, size), so what works here works over real email.
"""

from __future__ import annotations

import functools
import itertools
import threading
from collections import deque
from email.utils import getaddresses
from typing import Protocol

from .._core.config import BatchPolicy
from .._core.errors import ClosedError, SendError
from .._core.log import RefusalLog, get_logger
from .._core.types import Email
from .._core.wire import DEFAULT_MAX_MESSAGE_SIZE, check
from .base import Done, EmailReceiver, EmailSender, FailureCallback, IncomingEmail
from .budget import ReceiveBudget
from .common import parse_fetched
from .group.memory import MemoryGroupStore, MemoryMailbox
from .transport import Transport

_log = get_logger("transport")

__all__ = [
    "IntraprocessNetwork",
    "IntraprocessReceiver",
    "IntraprocessSender",
    "intraprocess_pair",
    "intraprocess_transport",
]

_ids = itertools.count()
HISTORY_PER_SUBJECT = 1000


class IntraprocessReceiver(EmailReceiver):
    """Queue of emails handed over by :class:`IntraprocessSender` objects. Thread-safe.

    With a ``budget`` (a context's :class:`~.budget.ReceiveBudget`), :meth:`receive_incoming`
    hands out only what fits and keeps the rest queued here, as a server would keep it,
    until enough is settled."""

    def __init__(
        self,
        *,
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
        mailbox: MemoryMailbox | None = None,
        budget: ReceiveBudget | None = None,
    ) -> None:
        self._max_size = max_message_size
        self._budget = budget
        self._unusable_log = RefusalLog(logger=_log)
        #: the account's store, for group subscriptions (shared by the receivers of one
        #: address on an :class:`IntraprocessNetwork`)
        self.mailbox = mailbox if mailbox is not None else MemoryMailbox()
        self._cond = threading.Condition(threading.Lock())
        self._queue: deque[Email] = deque()
        self._closed = False
        self._woken = False
        # a reservation may be refused now: what is given back wakes the receiving thread
        # (only then: a release costs no lock while the budget has room)
        self._starved = False
        # what a mailbox would still hold: the newest emails of each subject
        self._stored: dict[str, deque[Email]] = {}
        if budget is not None:
            budget.add_listener(self._room_given_back)

    def _room_given_back(self) -> None:
        if self._starved:
            with self._cond:
                self._cond.notify_all()

    def _deliver(self, email: Email, *, store: bool = True) -> None:
        """Queue ``email``; ``store``: keep it in the mailbox's store too (its first
        receiver of several on one address does)."""
        if email.message_id is None:
            email = email.with_message_id(f"<{next(_ids)}.{id(self):x}@intraprocess.invalid>")
        if email.bcc:  # as on a real mail path, recipients never see Bcc
            email = email.replace(bcc=())
        with self._cond:
            if self._closed:
                raise ClosedError("intraprocess receiver is closed")
            self._queue.append(email)
            if store:
                self.mailbox.deliver(email)
            stored = self._stored.setdefault(email.subject, deque(maxlen=HISTORY_PER_SUBJECT))
            stored.append(email)
            self._cond.notify()

    def deliver_bytes(self, raw: bytes) -> bool:
        """Hand raw RFC 5322 bytes to this receiver as a mail server would: they go through
        the same parsing as mail fetched over IMAP. False (logged once) when they are not
        an email emailmw can read; they are then dropped, as there is no mailbox here to
        leave them in."""
        email = parse_fetched(
            raw, uid=next(_ids), where="intraprocess", max_size=self._max_size,
            log=self._unusable_log,
        )  # fmt: skip
        if email is None:
            return False
        self._deliver(email)
        return True

    def receive(self, timeout: float | None = None) -> list[Email]:
        with self._cond:
            if not self._queue and not self._woken and not self._closed:
                self._cond.wait(timeout)
            if self._closed:
                raise ClosedError("intraprocess receiver is closed")
            self._woken = False
            emails = list(self._queue)
            self._queue.clear()
        return emails

    def receive_incoming(self, timeout: float | None = None) -> list[IncomingEmail]:
        budget = self._budget
        if budget is None:
            return super().receive_incoming(timeout)
        with self._cond:
            out: list[IncomingEmail] = []
            for attempt in range(2):  # what fits now; else wait once, then what fits
                if self._closed:
                    raise ClosedError("intraprocess receiver is closed")
                if self._queue:
                    sizes = [_size(email) for email in itertools.islice(self._queue, 512)]
                    self._starved = True  # (set first: a release from now on wakes it)
                    fit = budget.reserve_run(sizes)
                    self._starved = fit < len(sizes)
                    for size in sizes[:fit]:
                        settle = functools.partial(_settled, budget, size)
                        out.append(IncomingEmail(self._queue.popleft(), settle=settle))
                if out or self._woken or attempt:
                    break
                self._cond.wait(timeout)
            self._woken = False
        return out

    def history(self, subject: str, limit: int) -> list[Email]:
        with self._cond:
            stored = list(self._stored.get(subject, ()))
        return stored[-limit:] if limit > 0 else []

    def wakeup(self) -> None:
        with self._cond:
            self._woken = True
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._queue.clear()
            self._cond.notify_all()
        if self._budget is not None:
            self._budget.remove_listener(self._room_given_back)


def _size(email: Email) -> int:
    """What an email holds in memory, near enough: its body, and its headers at 64 bytes
    each (emailmw's own headers are short; counting each would cost every message a walk)."""
    return len(email.body) + 64 * len(email.headers) + 256


def _settled(
    budget: ReceiveBudget, size: int, outcome: str, then: Done | None, reason: str = ""
) -> None:
    del outcome, then, reason  # nothing to do in a mailbox that keeps nothing
    budget.release(size)


class _Destination(Protocol):
    def _deliver(self, email: Email) -> None: ...


class IntraprocessSender(EmailSender):
    """Hands each email to one :class:`IntraprocessReceiver`, or to the mailboxes of its
    recipients on an :class:`IntraprocessNetwork`. Thread-safe."""

    def __init__(
        self,
        receiver: _Destination,
        address: str = "emailmw@intraprocess.invalid",
        *,
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
    ) -> None:
        self._receiver = receiver
        self._max_size = max_message_size
        self._closed = False
        self.address = address

    def send(
        self,
        email: Email,
        *,
        guarantee: str | None = None,
        on_failure: FailureCallback | None = None,
        batch: BatchPolicy | None = None,
    ) -> None:
        """Hand ``email`` to the receiver now: every guarantee holds when this returns (no
        batching: in process, one message costs no more than many)."""
        del guarantee, on_failure, batch  # delivered in-process at once, or refused here
        if self._closed:
            raise ClosedError("intraprocess sender is closed")
        check(email, max_size=self._max_size)
        self._receiver._deliver(email)

    def close(self) -> None:
        self._closed = True


def intraprocess_pair(
    address: str = "emailmw@intraprocess.invalid",
    *,
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
    budget: ReceiveBudget | None = None,
) -> tuple[IntraprocessSender, IntraprocessReceiver]:
    """A connected sender and receiver: what the sender sends, the receiver receives
    (``budget``: see :class:`IntraprocessReceiver`)."""
    receiver = IntraprocessReceiver(max_message_size=max_message_size, budget=budget)
    return IntraprocessSender(receiver, address, max_message_size=max_message_size), receiver


def _transport(sender: IntraprocessSender, receiver: IntraprocessReceiver) -> Transport:
    return Transport(sender, receiver, functools.partial(MemoryGroupStore, receiver.mailbox))


def intraprocess_transport(
    address: str = "emailmw@intraprocess.invalid",
    *,
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
    budget: ReceiveBudget | None = None,
) -> Transport:
    """:func:`intraprocess_pair` as a :class:`~.transport.Transport`, whose groups keep their
    state in the receiver's mailbox."""
    return _transport(*intraprocess_pair(address, max_message_size=max_message_size, budget=budget))


class IntraprocessNetwork:
    """In-process mail between several addresses, for tests and embedded use of routed
    messages (``docs/addressing.md``): each address has a mailbox, and a sender of the
    network hands an email to the mailbox of each of its recipients (To, Cc, Bcc), as a
    mail server would. An unknown recipient is refused at once with
    :class:`~emailmw.SendError`. Thread-safe.

    :meth:`transport` gives an address's transport; ``emailmw.IntraprocessNetwork`` (the
    context layer's) adds ``context(address)``, a :class:`~emailmw.Context` on it.
    """

    def __init__(self, *, max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE) -> None:
        self._max_size = max_message_size
        self._lock = threading.Lock()
        self._mailboxes: dict[str, MemoryMailbox] = {}
        self._receivers: dict[str, list[IntraprocessReceiver]] = {}

    def pair(self, address: str) -> tuple[IntraprocessSender, IntraprocessReceiver]:
        """A sender from ``address`` and a receiver of its mailbox: several receivers of
        one address each get every email (as several IMAP sessions of one account see
        it) and share its store (for group subscriptions)."""
        key = address.lower()
        with self._lock:
            mailbox = self._mailboxes.setdefault(key, MemoryMailbox())
            receiver = IntraprocessReceiver(max_message_size=self._max_size, mailbox=mailbox)
            self._receivers.setdefault(key, []).append(receiver)
        sender = IntraprocessSender(self, address, max_message_size=self._max_size)
        return sender, receiver

    def transport(self, address: str) -> Transport:
        """:meth:`pair` as a :class:`~.transport.Transport`: its groups keep their state in
        the address's mailbox, shared by every receiver of that address."""
        return _transport(*self.pair(address))

    def _deliver(self, email: Email) -> None:
        if email.message_id is None:
            email = email.with_message_id(f"<{next(_ids)}.{id(self):x}@intraprocess.invalid>")
        found = getaddresses([*email.to, *email.cc, *email.bcc])
        with self._lock:
            boxes = [(a, list(self._receivers.get(a.lower(), ()))) for _, a in found]
        unknown = [a for a, receivers in boxes if not receivers]
        if unknown:
            raise SendError(f"no mailbox for {', '.join(unknown)} on this intraprocess network")
        for address, receivers in boxes:
            delivered = False
            for receiver in receivers:
                try:
                    receiver._deliver(email, store=not delivered)
                    delivered = True
                except ClosedError:
                    with self._lock:
                        self._receivers[address.lower()].remove(receiver)
            if not delivered:
                raise SendError(f"the mailbox of {address} is closed")
