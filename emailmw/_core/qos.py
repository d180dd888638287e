"""QoS over email: profiles and the subscription-side delivery rules, as a pure state machine.

:class:`Delivery` takes ``(body, info)`` pairs in arrival order plus the current time and
says what to deliver and which events happened; it has no threads and no clock of its own,
so it is tested with explicit times. The executor drives it.

* history: ``keep_last`` keeps ``depth`` messages queued, ``keep_all`` keeps every one;
* durability: ``transient_local`` makes a new subscription start with the newest ``depth``
  messages of its topic read from the mailbox (the mailbox is the publisher's durable store:
  no publisher process needs to be alive, unlike DDS);
* lifespan: a message older than this (now - ``Source-Timestamp``) is dropped and counted;
* deadline: no message for this long raises a deadline-missed event, once per period;
* ordered: per publisher, messages are released in ``Publisher-Sequence-Number`` order; a
  gap that does not fill within ``gap_timeout`` is reported as lost and skipped; a
  sequence number already released is a duplicate and dropped.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Any, Generic, NamedTuple, TypeVar

from .errors import InvalidArgumentError, NotFoundError
from .types import MessageInfo

__all__ = [
    "DeadlineMissed",
    "Delivery",
    "DurabilityPolicy",
    "HistoryPolicy",
    "LivelinessPolicy",
    "MessageLost",
    "QoSPresetProfiles",
    "QoSProfile",
    "ReliabilityPolicy",
    "Step",
    "qos_profile_action_status_default",
    "qos_profile_parameter_events",
    "qos_profile_parameters",
    "qos_profile_sensor_data",
    "qos_profile_services_default",
    "qos_profile_system_default",
]


class _Policy(enum.IntEnum):
    """rclpy's QoS policy enums (their values too), with ``short_key``."""

    @property
    def short_key(self) -> str:
        return self.name.lower()

    @classmethod
    def get_from_short_key(cls, name: str) -> _Policy:
        return cls[name.upper()]


class HistoryPolicy(_Policy):
    SYSTEM_DEFAULT = 0
    KEEP_LAST = 1
    KEEP_ALL = 2
    UNKNOWN = 3


class ReliabilityPolicy(_Policy):
    """Email is always delivered reliably: ``BEST_EFFORT`` is accepted and changes
    nothing."""

    SYSTEM_DEFAULT = 0
    RELIABLE = 1
    BEST_EFFORT = 2
    UNKNOWN = 3
    BEST_AVAILABLE = 4


class DurabilityPolicy(_Policy):
    SYSTEM_DEFAULT = 0
    TRANSIENT_LOCAL = 1
    VOLATILE = 2
    UNKNOWN = 3
    BEST_AVAILABLE = 4


class LivelinessPolicy(_Policy):
    """Accepted for rclpy's signature; emailmw's graph expires nodes that stop
    announcing (three announce periods)."""

    SYSTEM_DEFAULT = 0
    AUTOMATIC = 1
    MANUAL_BY_TOPIC = 3
    UNKNOWN = 4
    BEST_AVAILABLE = 5


def _seconds(value: Any, name: str) -> float | None:
    """A time given as seconds or as a Duration (anything with ``nanoseconds``)."""
    if value is None:
        return None
    nanoseconds = getattr(value, "nanoseconds", None)
    if nanoseconds is not None and nanoseconds == 0:
        return None  # rclpy's "infinite" (Duration() is 0)
    seconds = nanoseconds / 1e9 if nanoseconds is not None else float(value)
    if seconds <= 0:
        raise InvalidArgumentError(f"{name} must be > 0 seconds, got {seconds}")
    return seconds


@dataclass
class QoSProfile:
    """A subscription's (or publisher's) quality of service (rclpy's ``QoSProfile``).
    Times are seconds or :class:`~emailmw.duration.Duration` objects (0: no limit).
    emailmw adds ``ordered`` (release each publisher's messages in sequence order,
    reporting gaps after ``gap_timeout`` seconds)."""

    depth: int = 10
    history: HistoryPolicy = HistoryPolicy.KEEP_LAST
    durability: DurabilityPolicy = DurabilityPolicy.VOLATILE
    lifespan: float | None = None
    deadline: float | None = None
    ordered: bool = False
    gap_timeout: float = 1.0
    reliability: ReliabilityPolicy = ReliabilityPolicy.RELIABLE
    liveliness: LivelinessPolicy = LivelinessPolicy.SYSTEM_DEFAULT
    liveliness_lease_duration: float | None = None
    avoid_ros_namespace_conventions: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.history, int) and not isinstance(self.history, HistoryPolicy):
            self.history = HistoryPolicy(self.history)
        if self.history == HistoryPolicy.SYSTEM_DEFAULT:
            self.history = HistoryPolicy.KEEP_LAST
        if self.durability == DurabilityPolicy.SYSTEM_DEFAULT:
            self.durability = DurabilityPolicy.VOLATILE
        if self.depth < 1 and self.history == HistoryPolicy.KEEP_LAST:
            raise InvalidArgumentError(f"depth must be >= 1, got {self.depth}")
        self.lifespan = _seconds(self.lifespan, "lifespan")
        self.deadline = _seconds(self.deadline, "deadline")
        self.liveliness_lease_duration = _seconds(
            self.liveliness_lease_duration, "liveliness_lease_duration"
        )
        for name in ("lifespan", "deadline"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise InvalidArgumentError(f"{name} must be > 0 seconds, got {value}")
        if self.gap_timeout <= 0:
            raise InvalidArgumentError(f"gap_timeout must be > 0 seconds, got {self.gap_timeout}")

    @property
    def queue_depth(self) -> int | None:
        return None if self.history is HistoryPolicy.KEEP_ALL else self.depth


@dataclass(frozen=True)
class MessageLost:
    """Sequence numbers of one publisher that never came (within ``gap_timeout``)."""

    publisher_gid: int
    sequence_numbers: tuple[int, ...]
    total_lost: int


@dataclass(frozen=True)
class DeadlineMissed:
    """No message within the deadline period; ``total_count`` misses so far."""

    total_count: int


Event = MessageLost | DeadlineMissed
P = TypeVar("P")  # what travels with a message's info: its body (and whatever the caller adds)


class Step(NamedTuple, Generic[P]):
    """What :meth:`Delivery.offer` decided: what to deliver now (in order), what happened,
    and whether the offered message was dropped (expired or a duplicate)."""

    deliver: list[tuple[P, MessageInfo]]
    events: list[Event]
    dropped: bool = False


@dataclass
class _Stream(Generic[P]):
    expected: int
    buffer: dict[int, tuple[P, MessageInfo]] = field(default_factory=dict)
    gap_deadline_ns: int | None = None


class Delivery(Generic[P]):
    """Delivery rules of one subscription. Not thread-safe: one executor drives it.

    Messages are ``(payload, info)`` pairs; the payload (the body, or the body with what
    the caller needs to settle it) is passed through untouched.
    """

    def __init__(self, qos: QoSProfile, now_ns: int) -> None:
        self.qos = qos
        self.expired = 0
        self.duplicates = 0
        self.lost = 0
        self.deadline_misses = 0
        self._streams: dict[int, _Stream[P]] = {}
        self._last_ns = now_ns
        self._seen: set[tuple[int, int]] = set()  # for unordered de-duplication

    def offer(self, body: P, info: MessageInfo, now_ns: int) -> Step[P]:
        """A message arrived: what to deliver now, and what happened."""
        if self.qos.lifespan is not None and now_ns - info.source_timestamp > (
            self.qos.lifespan * 1e9
        ):
            self.expired += 1
            return Step([], [], dropped=True)
        seq = info.sequence_number
        if seq is None:
            return Step(self._delivered([(body, info)], now_ns), [])
        gid = info.publisher_gid.value
        if not self.qos.ordered:
            if (gid, seq) in self._seen:
                self.duplicates += 1
                return Step([], [], dropped=True)
            self._seen.add((gid, seq))
            if len(self._seen) > 4 * self.qos.depth + 1024:
                self._seen = set(list(self._seen)[-(2 * self.qos.depth + 512) :])
            return Step(self._delivered([(body, info)], now_ns), [])
        stream = self._streams.get(gid)
        if stream is None:
            stream = self._streams[gid] = _Stream(expected=seq)
        if seq < stream.expected or seq in stream.buffer:
            self.duplicates += 1
            return Step([], [], dropped=True)
        stream.buffer[seq] = (body, info)
        out = self._release(stream)
        if stream.buffer and stream.gap_deadline_ns is None:
            stream.gap_deadline_ns = now_ns + int(self.qos.gap_timeout * 1e9)
        return Step(self._delivered(out, now_ns), [])

    def _release(self, stream: _Stream[P]) -> list[tuple[P, MessageInfo]]:
        out = []
        while stream.expected in stream.buffer:
            out.append(stream.buffer.pop(stream.expected))
            stream.expected += 1
        if not stream.buffer:
            stream.gap_deadline_ns = None
        return out

    def _delivered(
        self, items: list[tuple[P, MessageInfo]], now_ns: int
    ) -> list[tuple[P, MessageInfo]]:
        if items:
            self._last_ns = now_ns
        return items

    def poll(self, now_ns: int) -> tuple[list[tuple[P, MessageInfo]], list[Event]]:
        """Time passed: give up on gaps whose time is up, report missed deadlines."""
        out: list[tuple[P, MessageInfo]] = []
        events: list[Event] = []
        for gid, stream in self._streams.items():
            if stream.gap_deadline_ns is not None and now_ns >= stream.gap_deadline_ns:
                first = min(stream.buffer)
                missing = tuple(range(stream.expected, first))
                self.lost += len(missing)
                events.append(MessageLost(gid, missing, self.lost))
                stream.expected = first
                stream.gap_deadline_ns = None
                out += self._release(stream)
                if stream.buffer:
                    stream.gap_deadline_ns = now_ns + int(self.qos.gap_timeout * 1e9)
        out = self._delivered(out, now_ns)
        if self.qos.deadline is not None and now_ns - self._last_ns >= self.qos.deadline * 1e9:
            self.deadline_misses += 1
            events.append(DeadlineMissed(self.deadline_misses))
            self._last_ns = now_ns
        return out, events

    def next_check_ns(self) -> int | None:
        """When :meth:`poll` next has something to do (ns since the epoch), or None."""
        times: list[Any] = [
            s.gap_deadline_ns for s in self._streams.values() if s.gap_deadline_ns is not None
        ]
        if self.qos.deadline is not None:
            times.append(self._last_ns + int(self.qos.deadline * 1e9))
        return min(times) if times else None


#: rclpy's presets, as emailmw has them
qos_profile_system_default = QoSProfile(depth=10)
qos_profile_sensor_data = QoSProfile(depth=5, reliability=ReliabilityPolicy.BEST_EFFORT)
qos_profile_services_default = QoSProfile(depth=10)
qos_profile_parameters = QoSProfile(depth=1000)
qos_profile_parameter_events = QoSProfile(depth=1000)
qos_profile_action_status_default = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)


class QoSPresetProfiles:
    """rclpy's preset profiles by name (``SENSOR_DATA``, ..., ``get_from_short_key``)."""

    SYSTEM_DEFAULT = qos_profile_system_default
    SENSOR_DATA = qos_profile_sensor_data
    SERVICES_DEFAULT = qos_profile_services_default
    PARAMETERS = qos_profile_parameters
    PARAMETER_EVENTS = qos_profile_parameter_events
    ACTION_STATUS_DEFAULT = qos_profile_action_status_default
    _NAMES = (
        "system_default", "sensor_data", "services_default", "parameters",
        "parameter_events", "action_status_default",
    )  # fmt: skip

    @classmethod
    def get_from_short_key(cls, name: str) -> QoSProfile:
        """The preset called ``name`` (``sensor_data``); ``KeyError`` names the choices."""
        if name.lower() not in cls._NAMES:
            raise NotFoundError(f"no QoS preset {name!r} (one of {', '.join(cls._NAMES)})")
        profile: QoSProfile = getattr(cls, name.upper())
        return dataclasses.replace(profile)

    @classmethod
    def short_keys(cls) -> list[str]:
        return list(cls._NAMES)


class QoSCompatibility(enum.IntEnum):
    """rclpy's ``QoSCompatibility``: whether a publisher reaches a subscription."""

    OK = 0
    WARNING = 1
    ERROR = 2


def qos_check_compatible(
    publisher_qos: QoSProfile, subscription_qos: QoSProfile
) -> tuple[QoSCompatibility, str]:
    """rclpy's ``qos_check_compatible``: ERROR (with rmw's reason) when a subscription
    asks for more than the publisher offers, as ROS 2 decides it: best effort offered and
    reliable asked, volatile offered and transient local asked, a publisher's deadline
    longer than the subscription's. emailmw delivers the message over email either way;
    ``emailmw doctor`` reports the pairs as ``ros2 doctor`` does, since they would not talk
    on a DDS middleware."""
    reasons = []
    if (
        publisher_qos.reliability == ReliabilityPolicy.BEST_EFFORT
        and subscription_qos.reliability == ReliabilityPolicy.RELIABLE
    ):
        reasons.append("ERROR: Best effort publisher and reliable subscription;")
    if (
        publisher_qos.durability == DurabilityPolicy.VOLATILE
        and subscription_qos.durability == DurabilityPolicy.TRANSIENT_LOCAL
    ):
        reasons.append("ERROR: Volatile publisher and transient local subscription;")
    if subscription_qos.deadline is not None and (
        publisher_qos.deadline is None or publisher_qos.deadline > subscription_qos.deadline
    ):
        reasons.append("ERROR: Subscription deadline is less than publisher deadline;")
    if reasons:
        return QoSCompatibility.ERROR, "".join(reasons)
    return QoSCompatibility.OK, ""
