"""What a context is given of its transport: :class:`Transport`, the sender, the receiver and
the account's store for delivery-mode groups (``docs/delivery-modes.md``), as
``factory.make_transport`` builds them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .base import EmailReceiver, EmailSender
from .group.model import GroupStore

__all__ = ["GroupStoreFactory", "Transport"]

#: a new connection to the group protocol's store of the account, for group ``name``
GroupStoreFactory = Callable[[str], GroupStore]


@dataclass(frozen=True, slots=True)
class Transport:
    """What a context needs of a transport: its sender, its receiver, and where the
    account's delivery-mode groups keep their state (``group_store(name)``: a new
    connection each call; None where the transport has no store for groups)."""

    sender: EmailSender
    receiver: EmailReceiver
    group_store: GroupStoreFactory | None = None

    def close(self) -> None:
        """Close the sender (flushing it) and the receiver."""
        try:
            self.sender.close()
        finally:
            self.receiver.close()
