"""The transport contract: :class:`EmailSender` and :class:`EmailReceiver`.

A transport is a sender/receiver pair. Implementations must pass the conformance suite in
:mod:`emailmw.testing` unchanged. Errors talking to a server are raised as subclasses of
:class:`~emailmw.TransportError`; backend exceptions are chained as ``__cause__``.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Self

from .._types import Email
from .._wire import make_reply

__all__ = ["EmailReceiver", "EmailSender"]


class EmailSender(abc.ABC):
    """Sends emails. ``send`` and ``reply`` are thread-safe.

    A sender may queue an email and send it in the background (the native backend does);
    :meth:`flush` waits until everything sent so far was accepted by the server.
    """

    #: The address put in ``From:`` of emails this sender builds (replies).
    address: str = ""

    @abc.abstractmethod
    def send(self, email: Email) -> None:
        """Send ``email`` to its ``to``, ``cc`` and ``bcc`` recipients.

        Raises :class:`~emailmw.ClosedError` after :meth:`close`,
        :class:`~emailmw.InvalidHeaderError` / :class:`~emailmw.MessageTooLargeError` for an
        email that cannot go on the wire, :class:`~emailmw.SendError` (or another
        :class:`~emailmw.TransportError`) when the server refuses it.
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

    @abc.abstractmethod
    def close(self) -> None:
        """Release the connection. Idempotent. Emails already sent are flushed first."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class EmailReceiver(abc.ABC):
    """Receives new emails, in arrival order, each exactly once.

    :meth:`receive` is called from one thread at a time (the polling manager's);
    :meth:`wakeup` and :meth:`close` may be called from any thread.
    Mail the receiver cannot parse is logged and left in the mailbox, never returned.
    """

    @abc.abstractmethod
    def receive(self, timeout: float | None = None) -> list[Email]:
        """Return the emails that arrived since the last call, waiting up to ``timeout``
        seconds (None: no limit) for at least one. Returns ``[]`` on timeout or after
        :meth:`wakeup`. Every returned email has a ``message_id``.

        Raises :class:`~emailmw.ClosedError` after :meth:`close` and
        :class:`~emailmw.ReceiveError` (or another :class:`~emailmw.TransportError`) when
        the server fails; the receiver stays usable and the next call retries.
        """

    def wakeup(self) -> None:  # noqa: B027 - optional hook, no-op by default
        """Make a :meth:`receive` blocked in another thread return soon. Thread-safe."""

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

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
