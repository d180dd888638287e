"""rclpy's ``rclpy.event_handler``: the event callbacks of publishers and subscriptions and
the infos they are given (``emailmw.event_handler``).

Over email, these events happen:

* ``matched`` (subscriptions and publishers): the number of publishers (subscriptions) of
  the topic in the graph changed, as the announcements tell (``QoS*MatchedInfo``: total
  and current counts and their changes since the last call); looked at on each
  announcement read and every second;
* ``deadline`` and ``message_lost`` (subscriptions): as the QoS says (``qos.md``);
* ``incompatible_type`` (subscriptions): a message of another type came (it is
  quarantined); ``type_mismatch``, emailmw's, gets the error itself.

The others (liveliness, incompatible QoS) are accepted and never called: email has no
liveliness lease, and every QoS pair is compatible over it (``qos.md``).
"""

from __future__ import annotations

import dataclasses
import enum
import threading
from collections.abc import Callable, Sequence
from typing import Any

from .._core.waitables import GuardCondition, Waitable
from .callback_groups import CallbackGroup, MutuallyExclusiveCallbackGroup
from .executable import Executable, Work

# (rclpy's names: ``emailmw.event_handler`` and ``emailmw.qos_event`` give exactly these;
# MatchedEvents, the nodes', is imported by name)
__all__ = [
    "IncompatibleTypeInfo",
    "PublisherEventCallbacks",
    "QoSLivelinessChangedInfo",
    "QoSLivelinessLostInfo",
    "QoSOfferedDeadlineMissedInfo",
    "QoSOfferedIncompatibleQoSInfo",
    "QoSPublisherEventType",
    "QoSPublisherMatchedInfo",
    "QoSRequestedDeadlineMissedInfo",
    "QoSRequestedIncompatibleQoSInfo",
    "QoSSubscriptionEventType",
    "QoSSubscriptionMatchedInfo",
    "SubscriptionEventCallbacks",
    "UnsupportedEventTypeError",
]


class UnsupportedEventTypeError(Exception):
    """rclpy's: an event type the middleware does not support (never raised here: every
    callback is accepted, see the module)."""


class QoSSubscriptionEventType(enum.IntEnum):
    RCL_SUBSCRIPTION_REQUESTED_DEADLINE_MISSED = 0
    RCL_SUBSCRIPTION_LIVELINESS_CHANGED = 1
    RCL_SUBSCRIPTION_REQUESTED_INCOMPATIBLE_QOS = 2
    RCL_SUBSCRIPTION_MESSAGE_LOST = 3
    RCL_SUBSCRIPTION_INCOMPATIBLE_TYPE = 4
    RCL_SUBSCRIPTION_MATCHED = 5


class QoSPublisherEventType(enum.IntEnum):
    RCL_PUBLISHER_OFFERED_DEADLINE_MISSED = 0
    RCL_PUBLISHER_LIVELINESS_LOST = 1
    RCL_PUBLISHER_OFFERED_INCOMPATIBLE_QOS = 2
    RCL_PUBLISHER_INCOMPATIBLE_TYPE = 3
    RCL_PUBLISHER_MATCHED = 4


@dataclasses.dataclass
class _Counts:
    total_count: int = 0
    total_count_change: int = 0


@dataclasses.dataclass
class _Matched:
    total_count: int = 0
    total_count_change: int = 0
    current_count: int = 0
    current_count_change: int = 0


class QoSSubscriptionMatchedInfo(_Matched):
    """The publishers of a subscription's topic: how many there are and were."""


class QoSPublisherMatchedInfo(_Matched):
    """The subscriptions of a publisher's topic: how many there are and were."""


class QoSRequestedDeadlineMissedInfo(_Counts):
    pass


class QoSOfferedDeadlineMissedInfo(_Counts):
    pass


class QoSLivelinessLostInfo(_Counts):
    pass


class IncompatibleTypeInfo(_Counts):
    pass


@dataclasses.dataclass
class QoSLivelinessChangedInfo:
    alive_count: int = 0
    not_alive_count: int = 0
    alive_count_change: int = 0
    not_alive_count_change: int = 0


@dataclasses.dataclass
class QoSRequestedIncompatibleQoSInfo(_Counts):
    last_policy_kind: int = 0


@dataclasses.dataclass
class QoSOfferedIncompatibleQoSInfo(_Counts):
    last_policy_kind: int = 0


@dataclasses.dataclass
class SubscriptionEventCallbacks:
    """rclpy's callbacks for a subscription's events (see the module); they run in the
    executor. ``deadline`` and ``message_lost`` get emailmw's ``DeadlineMissed`` and
    ``MessageLost`` (their counts under rclpy's names too)."""

    deadline: Callable[[Any], Any] | None = None
    incompatible_qos: Callable[[Any], Any] | None = None
    liveliness: Callable[[Any], Any] | None = None
    message_lost: Callable[[Any], Any] | None = None
    incompatible_type: Callable[[IncompatibleTypeInfo], Any] | None = None
    matched: Callable[[QoSSubscriptionMatchedInfo], Any] | None = None
    #: emailmw's: the error of each message of another type (quarantined)
    type_mismatch: Callable[[Any], Any] | None = None
    use_default_callbacks: bool = True


@dataclasses.dataclass
class PublisherEventCallbacks:
    """rclpy's callbacks for a publisher's events: ``matched`` is called (see the module);
    the others are accepted."""

    deadline: Callable[[Any], Any] | None = None
    liveliness: Callable[[Any], Any] | None = None
    incompatible_qos: Callable[[Any], Any] | None = None
    incompatible_type: Callable[[Any], Any] | None = None
    matched: Callable[[QoSPublisherMatchedInfo], Any] | None = None
    use_default_callbacks: bool = True


class MatchedEvents(Executable):
    """Calls ``callback(info_type(...))`` in the executor when ``count()`` (the matched
    entities in the graph) changed. ``watch(listener)`` registers a listener called when
    the graph may have changed (the graph monitor's), ``unwatch`` removes it; the count is
    looked at then and every second. Thread-safe."""

    def __init__(
        self,
        count: Callable[[], int],
        callback: Callable[[Any], Any],
        info_type: type[QoSSubscriptionMatchedInfo] | type[QoSPublisherMatchedInfo],
        watch: Callable[[Callable[[], None]], None],
        unwatch: Callable[[Callable[[], None]], None],
        callback_group: CallbackGroup | None = None,
    ) -> None:
        self._count = count
        self.callback = callback
        self._info_type = info_type
        self.callback_group = callback_group or MutuallyExclusiveCallbackGroup()
        self._guard = GuardCondition()
        self._lock = threading.Lock()
        self._current = 0
        self._total = 0
        self._next = 0.0
        self._unwatch = unwatch
        watch(self._guard.trigger)

    def waitables(self) -> Sequence[Waitable]:
        return (self._guard,)

    def due_in(self, now: float) -> float | None:
        return max(0.0, self._next - now)

    def take(self, now: float) -> list[Work]:
        if self._guard.triggered:
            self._guard._take()
        elif now < self._next:
            return []
        self._next = now + 1.0
        current = self._count()
        with self._lock:
            change = current - self._current
            if not change:
                return []
            added = max(0, change)
            self._current = current
            self._total += added
            info = self._info_type(
                total_count=self._total, total_count_change=added,
                current_count=current, current_count_change=change,
            )  # fmt: skip
        return [lambda: self.callback(info)]

    def destroy(self) -> None:
        self._unwatch(self._guard.trigger)
