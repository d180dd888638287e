"""A delivery-mode group member's own receiving (``docs/delivery-modes.md``), above the
polling layer: a :class:`~emailmw._transport.group.receiver.GroupReceiver` on new
connections of the account, and a polling thread of its own that hands what it claimed to
a polling handler (a subscription handler, a floctrl node's), with the usual
classification, security decisions and tickets.

The protocol itself (``plan``, ``Liveness``, ``Lease``), its store contract and its stores
live under the transport contract, in ``_transport/group``. What a member needs of its
context comes through :class:`GroupHost`, which a :class:`~emailmw.Context` is: this layer
imports nothing above it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from .._core.config import Options
from .._core.errors import ConfigError, ConnectionLimitError
from .._core.log import RefusalLog, get_logger
from .._core.types import Email
from .._security import Security
from .._transport.budget import ReceiveBudget
from .._transport.common import unpack_logged
from .._transport.connections import spare
from .._transport.group import MODES, GroupSettings, GroupStore, Head, check_group
from .._transport.group.receiver import GroupReceiver, Wants
from .polling import Acknowledge, Handler, PollingManager

__all__ = [
    "MODES",
    "GroupConsumer",
    "GroupHost",
    "GroupSettings",
    "Head",
    "check_group",
]


class GroupHost(Protocol):
    """What a group member needs of the context it belongs to."""

    @property
    def options(self) -> Options: ...

    @property
    def budget(self) -> ReceiveBudget: ...

    @property
    def security(self) -> Security: ...

    def group_store(self, group: str) -> GroupStore:
        """A new connection to the account's group store (:class:`~emailmw.ConfigError`
        where the transport has none)."""

    def acknowledge(self, email: Email, delivery_count: int, *, member: str | None) -> None:
        """Send the acknowledgement ``email`` asked for: its ``member`` processed it."""

    @property
    def peer_observer(self) -> Handler | None:
        """A polling handler that tells senders what this member reads (``_peers``)."""

    def claims(self, wants: Wants, *, add: bool = True) -> None:
        """This member claims what ``wants`` says yes to (``add``), or no longer does: the
        host's own receiving leaves that mail to it."""


class GroupConsumer:
    """A group member's own receiving: a ``GroupReceiver`` on two new connections of the
    host's account (``host.group_store``; one, settling on the receiving thread, where the
    account's ``max-connections`` has no room for the second) and a polling thread that
    hands what it claimed to ``handler``. Joins the group at once; :meth:`close` stops it
    (its claims pass to another member once its record expires).

    ``wants`` selects the inbox messages this member claims; ``capacity`` and ``notify`` as
    the receiver's ``capacity`` and ``on_change``."""

    def __init__(
        self,
        host: GroupHost,
        mode: str,
        group: str,
        wants: Wants,
        handler: Handler,
        *,
        settings: GroupSettings | None = None,
        capacity: int | None = None,
        notify: Callable[[], None] | None = None,
    ) -> None:
        options = host.options
        if options.on_receive != "keep":
            raise ConfigError(
                f"a {mode} group reads the account's inbox with the others: on-receive must "
                f"be keep (it is {options.on_receive!r}); the group moves what it processed "
                "to its done folder itself",
                source=options.source,
                key="email.on-receive",
            )
        unusable = RefusalLog(logger=get_logger("groups"))
        store = host.group_store(group)
        if not store.connected:
            get_logger("groups").warning(
                "group %s: %s; this member joins once a connection is free", group,
                store.refusal,
            )  # fmt: skip
        settle_store: GroupStore | None = None
        if store.connected and spare(options):  # (none free: settles on the one it gets)
            try:
                settle_store = host.group_store(group)
            except ConnectionLimitError:
                pass  # (another entity took the last slot meanwhile)
            except BaseException:
                store.close()
                raise
            if settle_store is not None and not settle_store.connected:
                settle_store.close()  # (another process holds the last one: none to wait for)
                settle_store = None
        if settle_store is None:
            get_logger("groups").info(
                "a member of group %s settles on its receiving connection: the account's "
                "max-connections has no room for a second", group,
            )  # fmt: skip
        self.receiver = GroupReceiver(
            store,
            settle_store=settle_store,
            mode=mode,
            group=group,
            wants=wants,
            unpack=lambda raw, uid: unpack_logged(
                raw,
                uid=uid,
                where=f"group {group}",
                max_size=options.max_message_size,
                log=unusable,
            ),
            settings=settings,
            quarantine=options.quarantine,
            capacity=capacity,
            budget=host.budget,
            on_change=notify,
        )
        acknowledge: Acknowledge = lambda email, count: host.acknowledge(  # noqa: E731
            email, count, member=self.receiver.member
        )
        # no Message-ID duplicate filter: the group hands each claim out once, and a claim
        # taken back from this process's own earlier membership must not count as a copy
        self._polling = PollingManager(
            self.receiver,
            name=f"emailmw-group-{group}",
            security=host.security,
            acknowledge=acknowledge,
            drop_duplicates=False,
        )
        self._polling.register_handler(handler)
        self._host, self._wants = host, wants
        host.claims(wants)
        observer = host.peer_observer
        if observer is not None:
            self._polling.register_handler(observer)
        self._polling.start()

    @property
    def member(self) -> str:
        return self.receiver.member

    def close(self, timeout: float = 5.0) -> None:
        self._host.claims(self._wants, add=False)
        self._polling.stop(timeout)
        self.receiver.close()
