"""A node's timers and rates (rclpy's :class:`Timer`, :class:`TimerInfo`, :class:`Rate`)."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from .._core.errors import (
    InvalidArgumentError,
    ROSInterruptException,
)
from .._core.log import get_logger
from .._delivery.context import Context
from .callback_groups import CallbackGroup, MutuallyExclusiveCallbackGroup
from .executable import Executable, Work
from .time import Clock, ClockType, Time

__all__ = ["Rate", "Timer", "TimerInfo"]

_log = get_logger("node")
T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class TimerInfo:
    """What a timer callback that takes one argument is given (rclpy's ``TimerInfo``)."""

    expected_call_time: Time
    actual_call_time: Time


class Timer(Executable):
    """Calls ``callback`` every ``period`` seconds while its node is spun (rclpy's
    ``Timer``): a callback that fell behind skips the missed periods rather than
    bursting. A callback taking one argument gets a :class:`TimerInfo`."""

    def __init__(
        self,
        period: float,
        callback: Callable[..., Any] | None,
        callback_group: CallbackGroup | None = None,
        clock: Clock | None = None,
        *,
        autostart: bool = True,
    ) -> None:
        if period <= 0:
            raise InvalidArgumentError(f"timer period must be > 0, got {period}")
        self.timer_period_ns = int(period * 1e9)
        self.callback = callback
        self.clock = clock if clock is not None else Clock(clock_type=ClockType.STEADY_TIME)
        self._with_info = callback is not None and _takes_one(callback)
        if callback_group is not None:
            callback_group.add_entity(self)
        self.callback_group = callback_group or MutuallyExclusiveCallbackGroup()
        self._lock = threading.Lock()
        self._next = time.monotonic() + period
        self._last = time.monotonic()
        self._cancelled = not autostart
        self._sim_next: int | None = None  # the next call in simulated time (ns), while on

    def _attach(self, group: CallbackGroup) -> None:
        group.add_entity(self)
        self.callback_group = group

    @property
    def timer_period_sec(self) -> float:
        return self.timer_period_ns / 1e9

    @timer_period_sec.setter
    def timer_period_sec(self, period: float) -> None:
        self.timer_period_ns = int(period * 1e9)

    def cancel(self) -> None:
        self._cancelled = True

    def is_canceled(self) -> bool:
        return self._cancelled

    def reset(self) -> None:
        """Start (again) from now: the next call one period away."""
        with self._lock:
            self._cancelled = False
            self._next = time.monotonic() + self.timer_period_ns / 1e9

    def is_ready(self) -> bool:
        return not self._cancelled and self._next <= time.monotonic()

    def time_until_next_call(self) -> int | None:
        """Nanoseconds until the next call; None when cancelled."""
        if self._cancelled:
            return None
        return max(0, int((self._next - time.monotonic()) * 1e9))

    def time_since_last_call(self) -> int:
        return int((time.monotonic() - self._last) * 1e9)

    def _sim_now(self) -> int | None:
        """The clock's simulated time (ns) while it follows ``/clock``, else None."""
        if getattr(self.clock, "ros_time_is_active", False):
            return int(self.clock.now().nanoseconds)
        return None

    def due_in(self, now: float) -> float | None:
        if self._cancelled:
            return None
        sim = self._sim_now()
        if sim is None:
            self._sim_next = None
            return self._next - now
        with self._lock:
            if self._sim_next is None and sim > 0:  # (zero: no /clock yet)
                self._sim_next = sim + self.timer_period_ns
            # simulated time moves when /clock says: looked at again soon
            return 0.0 if self._sim_next is not None and sim >= self._sim_next else 0.05

    def _take_simulated(self, now: float, sim: int) -> list[Work]:
        """As :meth:`take`, on the clock's simulated time (``use_sim_time``), as rclpy's
        timers run: a period of simulated time between calls."""
        with self._lock:
            if self._cancelled or self.callback is None:
                return []
            if self._sim_next is None:  # counting starts at the first simulated time
                if sim > 0:
                    self._sim_next = sim + self.timer_period_ns
                return []
            if sim < self._sim_next:
                return []
            expected = self._sim_next
            self._sim_next += self.timer_period_ns
            if self._sim_next <= sim:  # fell behind: skip missed periods
                self._sim_next = sim + self.timer_period_ns
            self._last = now
        callback = self.callback
        if not self._with_info:
            return [callback]
        kind = ClockType.ROS_TIME
        info = TimerInfo(Time(nanoseconds=expected, clock_type=kind),
                         Time(nanoseconds=sim, clock_type=kind))  # fmt: skip
        return [functools.partial(callback, info)]

    def take(self, now: float) -> list[Work]:
        sim = self._sim_now()
        if sim is not None:
            return self._take_simulated(now, sim)
        with self._lock:
            if self._cancelled or self._next > now or self.callback is None:
                return []
            expected = self._next
            self._fire(now)
        callback = self.callback
        if not self._with_info:
            return [callback]
        wall = time.time_ns()
        info = TimerInfo(
            Time(nanoseconds=max(0, wall - int((now - expected) * 1e9))),
            Time(nanoseconds=wall),
        )
        return [functools.partial(callback, info)]

    def _fire(self, now: float) -> None:
        period = self.timer_period_ns / 1e9
        self._last = now
        self._next += period
        if self._next <= now:  # fell behind: skip missed periods instead of bursting
            self._next = now + period

    def destroy(self) -> None:
        self.cancel()


def _takes_one(callback: Callable[..., Any]) -> bool:
    """True when ``callback`` takes one required positional argument."""
    try:
        parameters = inspect.signature(callback).parameters.values()
    except (TypeError, ValueError):
        return False
    required = [
        p
        for p in parameters
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
    ]
    return len(required) == 1


class Rate:
    """Sleeps to keep a loop at ``frequency`` Hz (rclpy's ``Rate``, from
    :meth:`Node.create_rate`): each :meth:`sleep` returns at the next period's start, or
    at once when the loop fell behind. On a ``clock`` that follows simulated time
    (``use_sim_time``: the node's clock, which ``create_rate`` gives it, as rclpy's) the
    periods are of ``/clock``'s time, counted from the first simulated time it reads: a
    sleep lasts as long as simulated time takes to move a period on. Raises
    :class:`~emailmw.exceptions.ROSInterruptException` from :meth:`sleep` once the context
    shuts down. Works whether the node is spun or not."""

    def __init__(self, frequency: float, context: Context, clock: Clock | None = None) -> None:
        if not frequency > 0:
            raise InvalidArgumentError(f"a rate's frequency must be > 0 Hz, got {frequency}")
        self._period = 1.0 / frequency
        self._period_ns = round(1e9 / frequency)
        self._context = context
        self._clock = clock
        self._next = time.monotonic() + self._period
        self._sim_next: int | None = None  # the next period's start in simulated time (ns)
        self._simulated()  # (counting starts now, when simulated time runs already)
        self._destroyed = False

    def _simulated(self) -> int | None:
        """The clock's simulated time (ns) while it follows ``/clock`` (zero: none came
        yet), else None; the first nonzero one starts the counting."""
        clock = self._clock
        if clock is None or not getattr(clock, "ros_time_is_active", False):
            return None
        now = int(clock.now().nanoseconds)
        if self._sim_next is None and now > 0:
            self._sim_next = now + self._period_ns
        return now

    def sleep(self) -> None:
        if self._destroyed:
            raise ROSInterruptException()
        if self._simulated() is not None:
            self._sleep_simulated()
            return
        while True:
            if not self._context.ok():
                raise ROSInterruptException()
            left = self._next - time.monotonic()
            if left <= 0:
                break
            self._context.wait_for_shutdown(left)
        now = time.monotonic()
        self._next += self._period
        if self._next <= now:
            self._next = now + self._period

    def _sleep_simulated(self) -> None:
        clock = self._clock
        assert clock is not None
        while self._sim_next is None:  # (no /clock yet: the first one starts the count)
            if not self._context.ok():
                raise ROSInterruptException()
            self._context.wait_for_shutdown(0.05)
            if self._simulated() is None:  # (simulated time was switched off meanwhile)
                return
        due = Time(nanoseconds=self._sim_next, clock_type=clock.clock_type)
        if not clock.sleep_until(due, self._context):
            raise ROSInterruptException()
        now = int(clock.now().nanoseconds)
        self._sim_next += self._period_ns
        if self._sim_next <= now:  # fell behind: the next period from now
            self._sim_next = now + self._period_ns

    def destroy(self) -> None:
        self._destroyed = True
