"""rclpy's callback groups (``emailmw.callback_groups``): which callbacks of a node an
executor may run at the same time. A :class:`MutuallyExclusiveCallbackGroup` (a node's
default) runs one of its callbacks at a time; a :class:`ReentrantCallbackGroup` runs any
number at once. Only a :class:`~emailmw.executors.MultiThreadedExecutor` runs callbacks
in parallel; a single-threaded one runs them one after the other anyway. Thread-safe.
"""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["CallbackGroup", "MutuallyExclusiveCallbackGroup", "ReentrantCallbackGroup"]


class CallbackGroup:
    """The base: a group says whether another of its callbacks may start now."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.entities: list[Any] = []

    def add_entity(self, entity: Any) -> None:
        with self._lock:
            self.entities.append(entity)

    def has_entity(self, entity: Any) -> bool:
        with self._lock:
            return any(e is entity for e in self.entities)

    def can_execute(self, entity: Any) -> bool:
        """Whether a callback of ``entity`` could start now."""
        raise NotImplementedError

    def beginning_execution(self, entity: Any) -> bool:
        """Claim the group for a callback of ``entity``: False when it may not start now."""
        raise NotImplementedError

    def ending_execution(self, entity: Any) -> None:
        """The callback :meth:`beginning_execution` let start has ended."""
        raise NotImplementedError


class ReentrantCallbackGroup(CallbackGroup):
    """Any number of its callbacks may run at once."""

    def can_execute(self, entity: Any) -> bool:
        return True

    def beginning_execution(self, entity: Any) -> bool:
        return True

    def ending_execution(self, entity: Any) -> None:
        pass


class MutuallyExclusiveCallbackGroup(CallbackGroup):
    """One of its callbacks at a time."""

    def __init__(self) -> None:
        super().__init__()
        self._running = False

    def can_execute(self, entity: Any) -> bool:
        return not self._running

    def beginning_execution(self, entity: Any) -> bool:
        with self._lock:
            if self._running:
                return False
            self._running = True
            return True

    def ending_execution(self, entity: Any) -> None:
        with self._lock:
            self._running = False
