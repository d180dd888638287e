"""The transport contract: :class:`EmailSender` and :class:`EmailReceiver`.

A transport is a sender/receiver pair (with where the account's delivery-mode groups keep
their state: ``transport.Transport``, what a context is given). Implementations must pass
the conformance suite in :mod:`emailmw.testing` unchanged. Errors talking to a server are
raised as subclasses of :class:`~emailmw.TransportError`; backend exceptions are chained
as ``__cause__``.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal, Protocol

from .._core.closeable import Closeable
from .._core.config import BatchPolicy
from .._core.errors import ArgumentTypeError, SendError
from .._core.protocol import Unroutable, classify
from .._core.types import Email
from .._core.wire import make_reply

__all__ = [
    "CONTROL",
    "Claim",
    "ClaimState",
    "ControlMail",
    "Done",
    "EmailReceiver",
    "EmailSender",
    "FailureCallback",
    "IncomingEmail",
    "OUTCOMES",
    "Readers",
    "ReadersBatch",
    "SenderWrapper",
    "Settle",
    "take_all",
]

#: Told about an email the server refused after ``send()`` returned: (email, error).
FailureCallback = Callable[[Email, SendError], None]

#: Called once what settling asked for is done in the mailbox (a quarantine moved).
Done = Callable[[], None]

#: The outcomes a receiver is told of an email it handed out (:class:`Settle`).
OUTCOMES: Final = ("ack", "leave", "quarantine", "nack")


class Settle(Protocol):
    """What a receiver is told about an email it handed out: ``outcome`` is ``"ack"`` (done
    with; its on-receive action applies), ``"leave"`` (not emailmw's, or not this process's
    to handle: left where it is), ``"quarantine"`` (unusable: moved to the quarantine folder
    when one is configured) or ``"nack"`` (the application failed on it: a receiver that
    shares its mailbox offers it again, up to a limit; any other leaves it where it is);
    ``then``: what to call once that is done in the mailbox (None: nothing); ``reason``: why,
    in one line (a quarantine's or a nack's; logged by who decides, kept by receivers that
    report it)."""

    def __call__(self, outcome: str, then: Done | None, reason: str = "") -> None: ...


#: Whether a claimed email may go to the application now: ``"ready"``, ``"wait"`` (the
#: receiver must first confirm it still holds it: ask again once it says so) or ``"lost"``
#: (another receiver took it over: it must not be handed out, and is not to be settled).
ClaimState = Literal["ready", "wait", "lost"]


def _always() -> bool:
    return True


@dataclass(frozen=True, slots=True)
class ReadersBatch(BatchPolicy):
    """A batch policy whose batching is decided when the email leaves a sender's queue,
    not when it was queued: ``allowed()`` says then whether every reader of the email's
    recipients reads batches (quick: a look-up, no I/O, never sends; it may be called with
    the sender's lock held). So mail queued while its readers were not known (their server
    down, their records expired) goes batched once they answered, and mail queued while
    they read batches goes single once one of them withdrew. Emails to one envelope get
    one answer. A sender that does not batch ignores it, as any policy."""

    allowed: Callable[[], bool] = field(default=_always, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class ControlMail(BatchPolicy):
    """Never batched, and sent ahead of the data a sender has queued (after the control
    mail queued before it): what decides how the data goes (a reader's record, a probe)
    must not wait behind the data, least of all when a provider's budget paces it. A
    sender without a queue sends it as any email."""


#: the policy of control mail (:class:`ControlMail`)
CONTROL: Final = ControlMail(linger_ms=0, max_messages=1)


class Readers(Protocol):
    """What the readers of an account said they read (``emailmw._delivery.peers.Peers``, given to
    a sender by its context): the encodings a sender may use towards them."""

    def accept(self, recipients: Sequence[str], feature: str, *, wait: float = 0.0) -> bool:
        """Whether every reader of every account in ``recipients`` said it reads
        ``feature`` (``batch``, ``parts``, ``zstd``, ``encryption``); ``wait``: how long
        to wait for accounts not heard of yet to say."""

    def refusing(self, recipients: Sequence[str], feature: str) -> list[str]:
        """The accounts in ``recipients`` known never to read ``feature`` (read by peers
        that announce nothing, named in ``plain-readers``): waiting for them is useless."""


class Claim(Protocol):
    """What a receiver that shares its mailbox with others (a group member,
    ``docs/delivery-modes.md``) attaches to an email it hands out: the fence the email
    passes right before the application gets it. Thread-safe."""

    def state(self) -> ClaimState:
        """Quick (no I/O): whether :meth:`deliver` may succeed now."""

    def deliver(self) -> int | None:
        """Record in the store that the application gets the email now (before it does):
        its delivery count (1 the first time any application gets it), or None when it must
        not be handed out now (:meth:`state` then says why)."""


class IncomingEmail:
    """One email as a receiver hands it out, to be settled once it is done with.

    A receiver with a durable position (a ``state-file``) hands an email out again after a
    restart until it is settled; such an email comes with ``redelivered`` True (a group
    member's receiver also says how many members it was handed to: ``delivery_count``,
    ``docs/delivery-modes.md``). Settling is
    idempotent and thread-safe: the first of :meth:`ack`, :meth:`leave` and
    :meth:`quarantine` decides, later calls do nothing.

    ``claim``: set by a receiver that shares its mailbox with others; whoever hands the
    email to the application asks it first (:class:`Claim`). An email whose claim is lost
    is dropped from memory unsettled (:meth:`withdraw`).

    ``arrival_ns``: when the receiving mail server stored it (IMAP INTERNALDATE, ns since
    the epoch), None when the receiver cannot tell; security judges freshness by it.

    ``returned``: the email comes back to the receiver that handed it out before and
    never settled it: through its delivery group (taken over from a member, or offered
    again after a nack), or after a restart on the receiver's state file (it was pending).
    Its signature may have been accepted then (the replay guard's ``.seen`` file survives
    a restart too), so it is a repeat, never a replay, whether or not an application had
    it (``redelivered`` says whether one did).

    ``in_batch``: the email is one of the messages a batch email carries (``_packing``): it
    is emailmw's by construction, so what cannot be used of it is quarantined, never left.

    ``give``: what the receiver records when an application gets the email
    (:meth:`give`): a receiver with a durable position flags after a restart only what an
    application may have had.
    """

    __slots__ = (
        "_give", "_settle", "arrival_ns", "claim", "delivery_count", "email", "in_batch",
        "redelivered", "returned",
    )  # fmt: skip

    def __init__(
        self,
        email: Email,
        *,
        redelivered: bool = False,
        settle: Settle | None = None,
        delivery_count: int = 1,
        claim: Claim | None = None,
        arrival_ns: int | None = None,
        in_batch: bool = False,
        give: Callable[[], None] | None = None,
        returned: bool = False,
    ) -> None:
        self.email = email
        self.returned = returned
        self.in_batch = in_batch
        self._give = give
        self.arrival_ns = arrival_ns
        self.redelivered = redelivered
        self.delivery_count = delivery_count
        self.claim = claim
        self._settle = settle

    def __repr__(self) -> str:
        flag = " redelivered" if self.redelivered else ""
        return f"<IncomingEmail {self.email.message_id}{flag}>"

    def give(self) -> None:
        """An application gets the email now: the receiver records it first (with a state
        file, durably) so that a restart flags it as redelivered. Whoever hands the email
        to an application calls this right before; a consumer that cannot tell when its
        application takes it calls it when it queues the email. Idempotent, thread-safe."""
        give, self._give = self._give, None
        if give is not None:
            give()

    def _done(self, outcome: str, then: Done | None = None, reason: str = "") -> None:
        settle, self._settle = self._settle, None
        if settle is not None:
            if reason:
                settle(outcome, then, reason)
            else:  # (a receiver written before reasons: two arguments)
                settle(outcome, then)

    def ack(self) -> None:
        """The application is done with it: never handed out again; the receiver's
        ``on-receive`` action (keep, seen, delete, move) applies to it."""
        self._done("ack")

    def leave(self) -> None:
        """Not emailmw's to handle: never handed out again, and left as it is."""
        self._done("leave")

    def quarantine(self, then: Done | None = None, reason: str = "") -> None:
        """Unusable (broken metadata, a body its subscription cannot decode): never handed
        out again; moved to the ``quarantine`` folder when one is configured, else left as
        it is (never deleted). ``then`` is called once it is in the quarantine folder (a
        move that fails is tried again until it works; never called when no quarantine
        folder is configured, or the receiver keeps nothing)."""
        self._done("quarantine", then, reason)

    def nack(self, reason: str = "") -> None:
        """The application failed on it (its callback raised: ``reason``, one line). A
        receiver that shares its mailbox with others (a group member) offers it again, to
        another member where there is one, up to the group's ``max-deliveries``, then
        quarantines it; any other receiver leaves it where it is: never deleted, not handed
        out again by this process (``docs/reliability.md``)."""
        self._done("nack", None, reason)

    def withdraw(self) -> None:
        """Its claim is lost (another receiver took it over): forgotten here, unsettled."""
        self._settle = None


def take_all(incoming: Iterable[IncomingEmail]) -> list[Email]:
    """The emails of ``incoming``, settled as taken: emailmw's own are acknowledged (their
    on-receive action applies), any other mail is left alone."""
    emails = []
    for item in incoming:
        if isinstance(classify(item.email, 0), Unroutable):
            item.leave()
        else:
            item.ack()
        emails.append(item.email)
    return emails


class EmailSender(Closeable):
    """Sends emails. ``send`` and ``reply`` are thread-safe.

    A sender may queue an email and send it in the background (the native backend does);
    :meth:`flush` waits until everything sent so far was accepted by the server.
    """

    #: The address put in ``From:`` of emails this sender builds (replies).
    address: str = ""

    @abc.abstractmethod
    def send(
        self,
        email: Email,
        *,
        guarantee: str | None = None,
        on_failure: FailureCallback | None = None,
        batch: BatchPolicy | None = None,
    ) -> None:
        """Send ``email`` to its ``to``, ``cc`` and ``bcc`` recipients.

        ``guarantee`` (default: the configured ``send-guarantee``) says what holds when this
        returns: ``"server"``, the server accepted the email; ``"spool"``, it is written to
        the spool directory and a later process sends it if this one dies; ``"memory"``, it
        is queued. With ``spool`` and ``memory`` a later permanent refusal goes to
        ``on_failure(email, error)`` (on the sender's thread), else to the next
        :meth:`flush`. Transient failures are retried.

        ``batch`` (default: the configured ``batch``, off unless configured) lets a sender
        that batches carry the email with others to the same recipients in one batch email
        (``docs/batching.md``); a sender that does not batch ignores it.

        Raises :class:`~emailmw.ClosedError` after :meth:`close`,
        :class:`~emailmw.InvalidHeaderError` / :class:`~emailmw.MessageTooLargeError` for an
        email that cannot go on the wire, :class:`~emailmw.SendError` (or another
        :class:`~emailmw.TransportError`) when the server refuses it (``server``: also when
        it did not accept it within the configured ``timeout``).
        """

    def reply(
        self,
        original: Email,
        body: str,
        headers: Mapping[str, str] | Iterable[tuple[str, str]] = (),
    ) -> None:
        """Send ``body`` as a reply to ``original`` (In-Reply-To/References set, sent to its
        Reply-To, else its From). Raises what :meth:`send` raises."""
        self.send(make_reply(original, body, from_=self.address, headers=headers))

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every email sent so far was handed to the server; False on timeout."""
        return True

    def max_email_bytes(self) -> int | None:
        """The largest email the server takes, when this sender knows it (the SMTP
        ``SIZE`` it advertised); None otherwise."""
        return None

    def learn_max_email_bytes(self, timeout: float) -> int | None:
        """:meth:`max_email_bytes`, connecting first when the sender has not yet (to read
        the server's EHLO answer), waiting at most ``timeout`` seconds; None when the
        server says nothing (or cannot be reached now: a send will say why)."""
        return self.max_email_bytes()

    @abc.abstractmethod
    def close(self) -> None:
        """Release the connection. Idempotent. Emails already sent are flushed first."""


class SenderWrapper(EmailSender):
    """A sender that changes what ``inner`` sends and nothing else: everything but
    :meth:`send` goes to ``inner`` as it is (its ``address``, :meth:`flush`, the limits it
    knows, :meth:`close`). Thread-safe as ``inner``; closing closes it."""

    def __init__(self, inner: EmailSender) -> None:
        self._inner = inner
        self.address = inner.address

    def __repr__(self) -> str:
        return f"<{type(self).__name__} over {self._inner!r}>"

    def send(
        self,
        email: Email,
        *,
        guarantee: str | None = None,
        on_failure: FailureCallback | None = None,
        batch: BatchPolicy | None = None,
    ) -> None:
        self._inner.send(email, guarantee=guarantee, on_failure=on_failure, batch=batch)

    def flush(self, timeout: float | None = None) -> bool:
        return self._inner.flush(timeout)

    def max_email_bytes(self) -> int | None:
        return self._inner.max_email_bytes()

    def learn_max_email_bytes(self, timeout: float) -> int | None:
        return self._inner.learn_max_email_bytes(timeout)

    def close(self) -> None:
        self._inner.close()


class EmailReceiver(Closeable):
    """Receives new emails, in arrival order, each exactly once per process.

    Two ways to receive; a subclass implements at least one, the other follows:

    * :meth:`receive_incoming` hands out :class:`IncomingEmail` objects that the caller
      settles when done (the polling thread settles each once every entity that got it is
      done with it). A receiver with a durable position hands out again, after a restart,
      what was handed out but not settled, flagged ``redelivered``: nothing is lost
      between the mailbox and the application.
    * :meth:`receive` returns plain emails, settled as taken (:func:`take_all`).

    :meth:`receive`/:meth:`receive_incoming` are called from one thread at a time (the
    polling manager's); :meth:`wakeup`, :meth:`close` and settling may be called from any
    thread. Mail the receiver cannot parse is logged once and never returned: left in the
    mailbox, or moved to the ``quarantine`` folder if one is configured.
    """

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        declares_abstract = any(
            getattr(member, "__isabstractmethod__", False) for member in vars(cls).values()
        )
        if (
            not declares_abstract
            and cls.receive is EmailReceiver.receive
            and cls.receive_incoming is EmailReceiver.receive_incoming
        ):
            raise ArgumentTypeError(
                f"{cls.__name__} must implement receive() or receive_incoming()"
            )

    def receive(self, timeout: float | None = None) -> list[Email]:
        """Return the emails that arrived since the last call, waiting up to ``timeout``
        seconds (None: no limit) for at least one. Returns ``[]`` on timeout or after
        :meth:`wakeup`. Every returned email has a ``message_id``. What it returns counts
        as taken: it is never handed out again.

        Raises :class:`~emailmw.ClosedError` after :meth:`close` and
        :class:`~emailmw.ReceiveError` (or another :class:`~emailmw.TransportError`) when
        the server fails; the receiver stays usable and the next call retries.
        """
        return take_all(self.receive_incoming(timeout))

    def receive_incoming(self, timeout: float | None = None) -> list[IncomingEmail]:
        """:meth:`receive`, with each email to be settled by the caller (see the class
        docstring). The default wraps :meth:`receive`: settling changes nothing."""
        return [IncomingEmail(email) for email in self.receive(timeout)]

    def wakeup(self) -> None:
        """Make a :meth:`receive` blocked in another thread return soon. Thread-safe."""

    def disconnect(self) -> bool:
        """Give back the server session while nothing receives (a process that only
        sends holds none): the position is kept, and the next :meth:`receive` connects
        again and hands out everything that arrived meanwhile, as after a dropped
        connection. Does nothing while a receive or another command is under way (then
        False). True when no session is held now. Thread-safe. The default: nothing to
        give back."""
        return True

    def history(self, subject: str, limit: int) -> list[Email]:
        """The newest ``limit`` stored emails whose Subject is exactly ``subject``, oldest
        first, whether or not they were received before. Thread-safe; may use its own
        connection. The mailbox is the durable store behind ``transient_local``.

        Raises ``NotImplementedError`` for transports without a store.
        """
        raise NotImplementedError(f"{type(self).__name__} keeps no history")

    @abc.abstractmethod
    def close(self) -> None:
        """Release the connection and wake a blocked :meth:`receive`. Idempotent."""
