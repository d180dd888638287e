"""rclpy's time types: :class:`Duration`, :class:`Time`, :class:`ClockType`, :class:`Clock`
(``emailmw.duration``, ``emailmw.time``, ``emailmw.clock``). Integer nanoseconds end to
end; immutable values, thread-safe.

A ``ROS_TIME`` clock reads the system clock, or, while ROS time is active (a node's
``use_sim_time`` parameter true: it follows ``/clock``), the time last set on it
(:meth:`ROSClock.set_ros_time_override`; zero until the first), as rclpy's.
"""

from __future__ import annotations

import enum
import threading
import time
from typing import Any, Final

from .._core.errors import ArgumentTypeError, InvalidArgumentError
from ..builtin_interfaces.msg import Duration as DurationMsg
from ..builtin_interfaces.msg import Time as TimeMsg

__all__ = ["Clock", "ClockType", "Duration", "JumpThreshold", "ROSClock", "Time"]

_NS: Final = 1_000_000_000


class ClockType(enum.IntEnum):
    """rclpy's clock types."""

    UNINITIALIZED = 0
    ROS_TIME = 1
    SYSTEM_TIME = 2
    STEADY_TIME = 3


class Duration:
    """A span of time in integer nanoseconds: ``Duration(seconds=1.5)``,
    ``Duration(seconds=1, nanoseconds=500_000_000)``."""

    __slots__ = ("_nanoseconds",)

    def __init__(self, *, seconds: float = 0, nanoseconds: int = 0) -> None:
        self._nanoseconds = int(seconds * _NS) + int(nanoseconds)

    @property
    def nanoseconds(self) -> int:
        return self._nanoseconds

    def __repr__(self) -> str:
        return f"Duration(nanoseconds={self._nanoseconds})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Duration) and other._nanoseconds == self._nanoseconds

    def __hash__(self) -> int:
        return hash(self._nanoseconds)

    def __lt__(self, other: Duration) -> bool:
        return self._nanoseconds < _other_ns(other, Duration)

    def __le__(self, other: Duration) -> bool:
        return self._nanoseconds <= _other_ns(other, Duration)

    def __gt__(self, other: Duration) -> bool:
        return self._nanoseconds > _other_ns(other, Duration)

    def __ge__(self, other: Duration) -> bool:
        return self._nanoseconds >= _other_ns(other, Duration)

    def __add__(self, other: Duration) -> Duration:
        return Duration(nanoseconds=self._nanoseconds + _other_ns(other, Duration))

    def __sub__(self, other: Duration) -> Duration:
        return Duration(nanoseconds=self._nanoseconds - _other_ns(other, Duration))

    def __mul__(self, factor: float) -> Duration:
        return Duration(nanoseconds=int(self._nanoseconds * factor))

    __rmul__ = __mul__

    def to_msg(self) -> Any:
        """A ``builtin_interfaces/msg/Duration``."""
        sec, nanosec = divmod(self._nanoseconds, _NS)
        return DurationMsg(sec=sec, nanosec=nanosec)

    @classmethod
    def from_msg(cls, msg: Any) -> Duration:
        return cls(seconds=msg.sec, nanoseconds=msg.nanosec)


def _other_ns(other: object, kind: type) -> int:
    if not isinstance(other, kind):
        raise ArgumentTypeError(f"expected a {kind.__name__}, got {type(other).__name__}")
    return int(other._nanoseconds)  # type: ignore[attr-defined]


class Time:
    """A point in time: integer nanoseconds since the epoch of its ``clock_type``."""

    __slots__ = ("_clock_type", "_nanoseconds")

    def __init__(
        self,
        *,
        seconds: float = 0,
        nanoseconds: int = 0,
        clock_type: ClockType = ClockType.SYSTEM_TIME,
    ) -> None:
        total = int(seconds * _NS) + int(nanoseconds)
        if total < 0:
            raise InvalidArgumentError("a Time cannot be negative")
        self._nanoseconds = total
        self._clock_type = ClockType(clock_type)

    @property
    def nanoseconds(self) -> int:
        return self._nanoseconds

    @property
    def clock_type(self) -> ClockType:
        return self._clock_type

    def seconds_nanoseconds(self) -> tuple[int, int]:
        sec, nanosec = divmod(self._nanoseconds, _NS)
        return sec, nanosec

    def __repr__(self) -> str:
        return f"Time(nanoseconds={self._nanoseconds}, clock_type={self._clock_type.name})"

    def _same(self, other: object) -> int:
        if not isinstance(other, Time):
            raise ArgumentTypeError(f"expected a Time, got {type(other).__name__}")
        if other._clock_type != self._clock_type:
            raise ArgumentTypeError("cannot compare times of different clock types")
        return other._nanoseconds

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Time)
            and other._clock_type == self._clock_type
            and other._nanoseconds == self._nanoseconds
        )

    def __hash__(self) -> int:
        return hash((self._nanoseconds, self._clock_type))

    def __lt__(self, other: Time) -> bool:
        return self._nanoseconds < self._same(other)

    def __le__(self, other: Time) -> bool:
        return self._nanoseconds <= self._same(other)

    def __gt__(self, other: Time) -> bool:
        return self._nanoseconds > self._same(other)

    def __ge__(self, other: Time) -> bool:
        return self._nanoseconds >= self._same(other)

    def __add__(self, other: Duration) -> Time:
        return Time(
            nanoseconds=self._nanoseconds + _other_ns(other, Duration),
            clock_type=self._clock_type,
        )

    __radd__ = __add__

    def __sub__(self, other: Time | Duration) -> Any:
        if isinstance(other, Time):
            return Duration(nanoseconds=self._nanoseconds - self._same(other))
        return Time(
            nanoseconds=self._nanoseconds - _other_ns(other, Duration),
            clock_type=self._clock_type,
        )

    def to_msg(self) -> Any:
        """A ``builtin_interfaces/msg/Time``."""
        sec, nanosec = self.seconds_nanoseconds()
        return TimeMsg(sec=sec, nanosec=nanosec)

    @classmethod
    def from_msg(cls, msg: Any, clock_type: ClockType = ClockType.ROS_TIME) -> Time:
        return cls(seconds=msg.sec, nanoseconds=msg.nanosec, clock_type=clock_type)


class JumpThreshold:
    """rclpy's time jump threshold (emailmw's clocks never jump: kept for the signature)."""

    def __init__(
        self,
        *,
        min_forward: Duration | None = None,
        min_backward: Duration | None = None,
        on_clock_change: bool = True,
    ) -> None:
        self.min_forward = min_forward
        self.min_backward = min_backward
        self.on_clock_change = on_clock_change


class Clock:
    """A clock of ``clock_type``: :meth:`now`, and sleeping that ends early, returning
    False, once the context shuts down (``context``: anything with ``ok()``; the default:
    none). Thread-safe."""

    def __init__(self, *, clock_type: ClockType = ClockType.SYSTEM_TIME) -> None:
        if clock_type == ClockType.UNINITIALIZED:
            raise InvalidArgumentError("a clock needs a clock type")
        self._clock_type = ClockType(clock_type)
        self._wake = threading.Event()

    @property
    def clock_type(self) -> ClockType:
        return self._clock_type

    def __repr__(self) -> str:
        return f"Clock(clock_type={self._clock_type.name})"

    def now(self) -> Time:
        if self._clock_type == ClockType.STEADY_TIME:
            return Time(nanoseconds=time.monotonic_ns(), clock_type=self._clock_type)
        return Time(nanoseconds=time.time_ns(), clock_type=self._clock_type)

    def _longest_nap(self) -> float:
        """Seconds a sleep waits at most before it reads the clock again."""
        return 1.0

    def sleep_until(self, until: Time, context: Any = None) -> bool:
        """Sleep until this clock reads ``until``; False when ``context`` shut down first."""
        if until.clock_type != self._clock_type:
            raise InvalidArgumentError("until has another clock type than this clock")
        while True:
            if context is not None and not context.ok():
                return False
            left = until.nanoseconds - self.now().nanoseconds
            if left <= 0:
                return True
            nap = min(left / _NS, self._longest_nap())
            waiter = getattr(context, "wait_for_shutdown", None)
            if waiter is not None:
                waiter(nap)
            else:
                self._wake.wait(nap)

    def sleep_for(self, rel_time: Duration, context: Any = None) -> bool:
        """Sleep ``rel_time``; False when ``context`` shut down first."""
        return self.sleep_until(self.now() + rel_time, context)


class ROSClock(Clock):
    """rclpy's ``ROSClock``: ``ROS_TIME``, the system clock, or while ROS time is active
    (simulated time, ``/clock``) the time last set by :meth:`set_ros_time_override` (zero
    before any). Thread-safe."""

    def __init__(self) -> None:
        super().__init__(clock_type=ClockType.ROS_TIME)
        self._active = False
        self._override_ns = 0

    @property
    def ros_time_is_active(self) -> bool:
        return self._active

    def _set_ros_time_is_active(self, enabled: bool) -> None:
        """Follow the override (True) or the system clock (False), as rclpy's."""
        self._active = bool(enabled)

    def set_ros_time_override(self, time: Time) -> None:
        """The time this clock reads while ROS time is active."""
        if not isinstance(time, Time):
            raise ArgumentTypeError(f"expected a Time, got {type(time).__name__}")
        self._override_ns = time.nanoseconds

    def now(self) -> Time:
        if self._active:
            return Time(nanoseconds=self._override_ns, clock_type=ClockType.ROS_TIME)
        return super().now()

    def _longest_nap(self) -> float:
        return 0.05 if self._active else 1.0  # (simulated time moves when /clock says)
