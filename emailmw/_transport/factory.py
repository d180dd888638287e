"""Builds the transport the options ask for: the one place a transport is chosen
(``intraprocess``, ``native``, ``curl``)."""

from __future__ import annotations

import functools

from .._core.config import Options
from .._core.errors import InvalidArgumentError
from .base import EmailReceiver, EmailSender
from .budget import ReceiveBudget
from .transport import Transport

__all__ = ["make_receiver", "make_transport"]


def make_transport(options: Options, budget: ReceiveBudget | None = None) -> Transport:
    """Connect a sender and a receiver; raises a :class:`~emailmw.TransportError` when the
    server cannot be reached, refuses the login or presents an untrusted certificate.
    ``intraprocess``: a connected in-process pair, of this context alone. ``budget``: the
    receive budget the receiver reserves from (none: unbounded)."""
    if options.transport == "intraprocess":
        from .intraprocess import intraprocess_transport

        return intraprocess_transport(
            options.recipients.from_, max_message_size=options.max_message_size, budget=budget
        )
    from .group.imap import ImapGroupStore

    stores = functools.partial(ImapGroupStore, options)
    sender: EmailSender
    if options.transport == "native":
        from .native import NativeSender

        sender = NativeSender(options)
    elif options.transport == "curl":
        from .curl import CurlSender

        sender = CurlSender(options)
    else:
        raise InvalidArgumentError(f"no such transport: {options.transport}")
    try:
        return Transport(sender, make_receiver(options, budget), stores)
    except BaseException:
        sender.close()
        raise


def make_receiver(options: Options, budget: ReceiveBudget | None = None) -> EmailReceiver:
    """The receiver of a mail transport alone (no sender: nothing is sent, no spool is
    taken), for a process that only reads the mailbox."""
    if options.transport == "native":
        from .native import NativeReceiver

        return NativeReceiver(options, budget)
    if options.transport == "curl":
        from .curl import CurlReceiver

        return CurlReceiver(options, budget)
    raise InvalidArgumentError(f"no receiver alone for transport {options.transport!r}")
