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

import enum
from dataclasses import dataclass, field
from typing import Any, Generic, NamedTuple, TypeVar

from ._types import MessageInfo

__all__ = [
    "DeadlineMissed",
    "Delivery",
    "DurabilityPolicy",
    "HistoryPolicy",
    "MessageLost",
    "QoSProfile",
    "Step",
]


class HistoryPolicy(enum.Enum):
    KEEP_LAST = "keep_last"
    KEEP_ALL = "keep_all"


class DurabilityPolicy(enum.Enum):
    VOLATILE = "volatile"
    TRANSIENT_LOCAL = "transient_local"


@dataclass(frozen=True)
class QoSProfile:
    """A subscription's (or publisher's) quality of service; times in seconds."""

    depth: int = 10
    history: HistoryPolicy = HistoryPolicy.KEEP_LAST
    durability: DurabilityPolicy = DurabilityPolicy.VOLATILE
    lifespan: float | None = None
    deadline: float | None = None
    ordered: bool = False
    gap_timeout: float = 1.0

    def __post_init__(self) -> None:
        if self.depth < 1:
            raise ValueError(f"depth must be >= 1, got {self.depth}")
        for name in ("lifespan", "deadline"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be > 0 seconds, got {value}")
        if self.gap_timeout <= 0:
            raise ValueError(f"gap_timeout must be > 0 seconds, got {self.gap_timeout}")

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
