"""Builds the sender/receiver pair the options ask for: the one place a transport is
chosen (``intraprocess``, ``native``, ``curl``)."""

from __future__ import annotations

from .._config import Options
from .base import EmailReceiver, EmailSender
from .budget import ReceiveBudget

__all__ = ["make_transport"]


def make_transport(
    options: Options, budget: ReceiveBudget | None = None
) -> tuple[EmailSender, EmailReceiver]:
    """Connect a sender and a receiver; raises a :class:`~emailmw.TransportError` when the
    server cannot be reached, refuses the login or presents an untrusted certificate.
    ``intraprocess``: a connected in-process pair, of this context alone. ``budget``: the
    receive budget the receiver reserves from (none: unbounded)."""
    if options.transport == "intraprocess":
        from .intraprocess import intraprocess_pair

        return intraprocess_pair(
            options.recipients.from_, max_message_size=options.max_message_size, budget=budget
        )
    if options.transport == "native":
        from .native import NativeReceiver, NativeSender

        sender: EmailSender = NativeSender(options)
        try:
            return sender, NativeReceiver(options, budget)
        except BaseException:
            sender.close()
            raise
    if options.transport == "curl":
        from .curl import CurlReceiver, CurlSender

        sender = CurlSender(options)
        try:
            return sender, CurlReceiver(options, budget)
        except BaseException:
            sender.close()
            raise
    raise ValueError(f"no such transport: {options.transport}")
