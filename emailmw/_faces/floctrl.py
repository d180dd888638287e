"""The floctrl face (``docs/addressing.md``, "floctrl"): nodes and supernodes of
orchestras, publish/subscribe by topic, addresses ``/orch/node``, ``/orch``, ``/orch/*``,
``/*`` and ``/*/*``.

Each node and supernode is an endpoint (named by its path, ``/orch/node`` or ``/orch``)
on some hub; the route table maps those hubs to mail addresses. Every send is decided by
the core's :func:`~emailmw._core.addressing.node_step`,
:func:`~emailmw._core.addressing.supernode_step` and
:func:`~emailmw._core.addressing.supernode_publish`, which carry floctrl's rules: a sender
that matches the address gets its own copy, a supernode never sends back to the originator
(``Route-Orig``), and ``/*/*`` goes to each other supernode rewritten to ``/remote/*``.
Subscribers run one at a time on the participant's delivery thread.

A subscription may take a delivery mode (``docs/delivery-modes.md``): the participants of
one path in several processes, on one account, form a group for a topic (``stateless``:
each message to one of them; ``stateful``: to the first live one, in order), through the
group protocol every subscription uses.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

from .._core.addressing import Address, Envelope, Send, node_step, supernode_publish, supernode_step
from .._core.errors import InvalidArgumentError, RoutingError
from .._core.log import get_logger
from .._core.payloads import Message, read_message
from .._core.protocol import Route, RoutedRoute
from .._core.types import Email
from .._delivery.context import Context, resolve
from .._delivery.groups import GroupConsumer, GroupSettings, Head, check_group
from .._delivery.polling import NO_TICKET, Ticket
from .._delivery.routing import CallbackFailed, FaceEndpoint, Refused, Routed, forwarded_message_id

__all__ = ["Message", "Node", "Subscriber", "Supernode"]

_log = get_logger("floctrl")
FACE: Final = "floctrl"


class Subscriber(Protocol):
    def receive_message(self, msg: Message) -> None: ...


SubscriberLike = Subscriber | Callable[[Message], None]


@dataclass(frozen=True, slots=True)
class _Local:
    """A message to hand to the subscribers here: of its topic, or of a group's ``key``."""

    message: Message
    key: tuple[str, str] | None = None


@dataclass(frozen=True, slots=True)
class _Incoming:
    """A routed message that reached this participant, and what it does with it."""

    message: Message
    steps: list[Send]
    originator: str
    message_id: str | None
    envelope: Envelope


class _Participant(FaceEndpoint[_Local | _Incoming]):
    """What nodes and supernodes share: subscriptions, local delivery, sending."""

    face = FACE
    context: Context
    _groups = False  # whether its subscriptions may take a delivery mode

    def __init__(self, path: str, context: Context | None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._subscribers: dict[str, tuple[SubscriberLike, ...]] = {}
        # (topic, group) -> its subscribers here, and the group member that claims for them
        self._grouped: dict[tuple[str, str], tuple[SubscriberLike, ...]] = {}
        self._consumers: dict[tuple[str, str], GroupConsumer] = {}
        super().__init__(resolve(context), path)

    def __repr__(self) -> str:
        return f"<emailmw.floctrl.{type(self).__name__} {self.path}>"

    @property
    def orchestra(self) -> str:
        return self.path.split("/")[1]

    def subscribe_to(
        self,
        topic: str,
        subscriber: SubscriberLike,
        *,
        mode: str = "topic",
        group: str | None = None,
        group_settings: GroupSettings | None = None,
    ) -> None:
        """Hand ``subscriber`` (an object with ``receive_message``, or a callable) every
        message on ``topic`` delivered here.

        ``mode``/``group`` (``docs/delivery-modes.md``): with ``stateless`` or ``stateful``
        and a ``group`` name, the messages of ``topic`` that reach this path by mail are
        shared with the same path's participants in other processes on this account that
        subscribe to the topic in the same group: each goes to one of them (stateless), or
        to the first live one, in order (stateful). Raises ``ValueError`` for an unknown
        mode or a missing group name, :class:`~emailmw.ConfigError` where the account
        cannot hold a group."""
        check_group(mode, group)
        if group is not None and not self._groups:
            raise InvalidArgumentError(
                f"{self.path}: delivery modes are for nodes (a supernode passes its mail on)"
            )
        if group is None:
            with self._lock:
                self._subscribers[topic] = (*self._subscribers.get(topic, ()), subscriber)
            return
        key = (topic, group)
        with self._lock:
            self._grouped[key] = (*self._grouped.get(key, ()), subscriber)
            joined = key in self._consumers
        if joined:
            return
        try:
            consumer = GroupConsumer(
                self.context,
                mode,
                group,
                self._wants(topic),
                lambda email, route, ticket: self._push_grouped(key, email, route, ticket),
                settings=group_settings,
                notify=self._delivery.notify,
            )
        except BaseException:
            self.unsubscribe_from(topic, subscriber, group=group)
            raise
        with self._lock:
            self._consumers[key] = consumer

    def unsubscribe_from(
        self, topic: str, subscriber: SubscriberLike, *, group: str | None = None
    ) -> None:
        """Stop handing ``subscriber`` the messages of ``topic`` (of ``group``, for one
        that subscribed in a group: the last to leave ends this process's membership)."""
        consumer = None
        with self._lock:
            table: Any = self._subscribers if group is None else self._grouped
            key = topic if group is None else (topic, group)
            rest = tuple(s for s in table.get(key, ()) if s is not subscriber)
            if rest:
                table[key] = rest
            else:
                table.pop(key, None)
                if group is not None:
                    consumer = self._consumers.pop((topic, group), None)
        if consumer is not None:
            consumer.close()

    def _wants(self, topic: str) -> Callable[[Head], bool]:
        """Which inbox mail a group member of this path claims for ``topic``: floctrl mail
        to this path on this hub (its Subject names the topic)."""
        subject = f"floctrl {topic}"
        to = Address(self.path, self._router.hub).header()
        return lambda head: head.carries_only(subject) and head.route_to == to

    def _push_grouped(
        self, key: tuple[str, str], email: Email, route: Route, ticket: Ticket
    ) -> None:
        """What a group member claimed for ``key``: onto the delivery thread, to the
        group's subscribers here (a payload that is not floctrl's is refused and set
        aside)."""
        if not isinstance(route, RoutedRoute) or route.envelope.face != FACE:
            return
        msg = read_message(email.body)
        if isinstance(msg, str) or msg.topic != key[0]:
            why = msg if isinstance(msg, str) else f"topic {msg.topic!r}, not {key[0]!r}"
            self._refuse(email.message_id, route.envelope, f"bad floctrl message: {why}", ticket)
            return
        if route.info.redelivered:
            msg = dataclasses.replace(msg, redelivered=True)
        self._delivery.put(_Local(msg, key), ticket.hold())

    def _deliver(self, item: _Local | _Incoming) -> bool:
        if isinstance(item, _Local):
            self._hand_over(item)
            return True
        try:
            self._carry_out(item.message, item.steps, item.originator, item.message_id)
        except CallbackFailed:
            raise  # (a subscriber here failed on it: a nack, not a message that cannot go on)
        except Exception as exc:  # noqa: BLE001 - logged; the email stays
            self._router.drop(item.message_id, item.envelope, f"cannot send on: {exc}")
            return False
        return True

    def _hand_over(self, item: _Local) -> None:
        with self._lock:
            if item.key is None:
                subscribers = self._subscribers.get(item.message.topic, ())
            else:
                subscribers = self._grouped.get(item.key, ())
        self._call(subscribers, item.message)

    def _call(self, subscribers: tuple[SubscriberLike, ...], message: Message) -> None:
        """Every subscriber gets the message; one that raises stops none of the others,
        and the first failure is raised once all had it (the message was not processed: a
        negative acknowledgement, ``docs/reliability.md``)."""
        failed: Exception | None = None
        for subscriber in subscribers:
            receive: Callable[[Message], None] = (
                subscriber.receive_message if hasattr(subscriber, "receive_message") else subscriber
            )
            try:
                receive(message)
            except Exception as exc:  # noqa: BLE001 - one subscriber cannot stop the others
                _log.exception("%s: a subscriber of %r failed", self.path, message.topic)
                failed = failed or exc
        if failed is not None:
            summary = " ".join(f"{type(failed).__name__}: {failed}".split())[:200]
            raise CallbackFailed(summary) from failed

    def _steps(self, message: Message, originator: str, first: bool) -> list[Send] | str:
        raise NotImplementedError

    def publish(self, msg: Message) -> None:
        """Send ``msg`` by its address; raises :class:`~emailmw.RoutingError` for an
        address that is not a floctrl address."""
        self._check_open()
        steps = self._steps(msg, self.path, True)
        if isinstance(steps, str):
            raise RoutingError(steps)
        self._carry_out(msg, steps, self.path, None)

    def _carry_out(
        self, msg: Message, steps: list[Send], originator: str, message_id: str | None
    ) -> None:
        """Carry out ``steps``: a copy to each hub they name, and to the subscribers here
        (a message published here: queued for the delivery thread; one that came by mail:
        handed over now, on the delivery thread)."""
        for step in steps:
            if step.to is None:
                local = _Local(msg.with_address(step.address))
                if message_id is None:
                    self._delivery.put(local, NO_TICKET)
                else:
                    self._hand_over(local)
                continue
            hub = self._hub_of(step.to)
            if hub is None:
                reason = f"{self.path} knows no hub for {step.to}"
                if message_id is None:
                    raise RoutingError(reason)
                _log.warning("dropped floctrl message %s: %s", message_id, reason)
                continue
            to = Address(step.to, hub)
            envelope = Envelope(to, Address(self.path, self._router.hub), FACE,
                                orig=Address(originator, ""))  # fmt: skip
            body = msg.with_address(step.address).to_json()
            copy_id = None if message_id is None else forwarded_message_id(message_id, envelope)
            self._router.send(envelope, f"floctrl {msg.topic}", body, message_id=copy_id)

    def _hub_of(self, path: str) -> str | None:
        raise NotImplementedError

    def _accept(self, message: Routed) -> _Incoming | Refused:
        msg = read_message(message.body)
        originator = message.envelope.orig.name if message.envelope.orig else ""
        steps = msg if isinstance(msg, str) else self._steps(msg, originator, False)
        if isinstance(steps, str) or isinstance(msg, str):
            reason = steps if isinstance(steps, str) else str(msg)
            return Refused(f"bad floctrl message: {reason}")
        if message.info.redelivered:
            msg = dataclasses.replace(msg, redelivered=True)
        return _Incoming(msg, steps, originator, message.message_id, message.envelope)

    def _closed_hook(self) -> None:
        # the callback running ended first, so that what it processed is settled; what a
        # group member claimed and did not hand out passes to another member
        with self._lock:
            consumers, self._consumers = list(self._consumers.values()), {}
        for consumer in consumers:
            consumer.close()


class Node(_Participant):
    """Node ``/orchestra/name``; ``supernode_hub``: the hub its supernode is on
    (default: this context's hub). Thread-safe."""

    _groups = True

    def __init__(
        self,
        orchestra: str,
        name: str,
        *,
        supernode_hub: str | None = None,
        context: Context | None = None,
    ) -> None:
        _check_name(orchestra, "orchestra")
        _check_name(name, "node name")
        super().__init__(f"/{orchestra}/{name}", context)
        self.name = name
        self.supernode_hub = supernode_hub or self._router.hub

    def _steps(self, message: Message, originator: str, first: bool) -> list[Send] | str:
        if first:
            return node_step(self.orchestra, self.name, message.address)
        return [Send(None, message.address)]  # what reaches a node is delivered there

    def _hub_of(self, path: str) -> str | None:
        return self.supernode_hub if path == f"/{self.orchestra}" else None


class Supernode(_Participant):
    """The supernode ``/orchestra``: ``nodes`` maps each node name of its orchestra to the
    hub that node is on, ``orchestras`` each other orchestra to its supernode's hub."""

    def __init__(
        self,
        orchestra: str,
        *,
        nodes: Mapping[str, str],
        orchestras: Mapping[str, str],
        context: Context | None = None,
    ) -> None:
        _check_name(orchestra, "orchestra")
        for name in (*nodes, *orchestras):
            _check_name(name, "name")
        super().__init__(f"/{orchestra}", context)
        self.nodes = dict(nodes)
        self.orchestras = {o: h for o, h in orchestras.items() if o != orchestra}

    def _steps(self, message: Message, originator: str, first: bool) -> list[Send] | str:
        every = [self.orchestra, *self.orchestras]
        if first:
            return supernode_publish(self.orchestra, message.address, self.nodes, every)
        return supernode_step(self.orchestra, message.address, self.nodes, every, originator)

    def _hub_of(self, path: str) -> str | None:
        parts = path.split("/")
        if len(parts) == 3 and parts[1] == self.orchestra:
            return self.nodes.get(parts[2])
        if len(parts) == 2:
            return self.orchestras.get(parts[1])
        return None


def _check_name(value: str, what: str) -> None:
    if not value or "/" in value or value == "*" or not value.isprintable() or " " in value:
        raise RoutingError(f"{what} {value!r}: expected a name without '/', spaces or '*'")
