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
from typing import Any

from ._types import MessageInfo

__all__ = [
    "DeadlineMissed",
    "Delivery",
    "DurabilityPolicy",
    "HistoryPolicy",
    "MessageLost",
    "QoSProfile",
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


Item = tuple[str, MessageInfo]
Event = MessageLost | DeadlineMissed


@dataclass
class _Stream:
    expected: int
    buffer: dict[int, Item] = field(default_factory=dict)
    gap_deadline_ns: int | None = None


class Delivery:
    """Delivery rules of one subscription. Not thread-safe: one executor drives it."""

    def __init__(self, qos: QoSProfile, now_ns: int) -> None:
        self.qos = qos
        self.expired = 0
        self.duplicates = 0
        self.lost = 0
        self.deadline_misses = 0
        self._streams: dict[int, _Stream] = {}
        self._last_ns = now_ns
        self._seen: set[tuple[int, int]] = set()  # for unordered de-duplication

    def offer(self, body: str, info: MessageInfo, now_ns: int) -> tuple[list[Item], list[Event]]:
        """A message arrived: what to deliver now, and what happened."""
        if self.qos.lifespan is not None and now_ns - info.source_timestamp > (
            self.qos.lifespan * 1e9
        ):
            self.expired += 1
            return [], []
        seq = info.sequence_number
        if seq is None:
            return self._delivered([(body, info)], now_ns), []
        gid = info.publisher_gid.value
        if not self.qos.ordered:
            if (gid, seq) in self._seen:
                self.duplicates += 1
                return [], []
            self._seen.add((gid, seq))
            if len(self._seen) > 4 * self.qos.depth + 1024:
                self._seen = set(list(self._seen)[-(2 * self.qos.depth + 512) :])
            return self._delivered([(body, info)], now_ns), []
        stream = self._streams.get(gid)
        if stream is None:
            stream = self._streams[gid] = _Stream(expected=seq)
        if seq < stream.expected or seq in stream.buffer:
            self.duplicates += 1
            return [], []
        stream.buffer[seq] = (body, info)
        out = self._release(stream)
        if stream.buffer and stream.gap_deadline_ns is None:
            stream.gap_deadline_ns = now_ns + int(self.qos.gap_timeout * 1e9)
        return self._delivered(out, now_ns), []

    def _release(self, stream: _Stream) -> list[Item]:
        out = []
        while stream.expected in stream.buffer:
            out.append(stream.buffer.pop(stream.expected))
            stream.expected += 1
        if not stream.buffer:
            stream.gap_deadline_ns = None
        return out

    def _delivered(self, items: list[Item], now_ns: int) -> list[Item]:
        if items:
            self._last_ns = now_ns
        return items

    def poll(self, now_ns: int) -> tuple[list[Item], list[Event]]:
        """Time passed: give up on gaps whose time is up, report missed deadlines."""
        out: list[Item] = []
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
