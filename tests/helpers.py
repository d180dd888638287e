"""Test helpers: wait on conditions with a deadline, never sleep-and-hope."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Recorder(Generic[T]):
    """Collects items from any thread; ``wait_for`` blocks until a predicate holds."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.items: list[T] = []

    def __call__(self, item: T) -> None:
        with self._cond:
            self.items.append(item)
            self._cond.notify_all()

    def wait_for(self, predicate: Callable[[list[T]], bool], timeout: float = 10.0) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: predicate(self.items), timeout)

    def wait_count(self, count: int, timeout: float = 10.0) -> list[T]:
        assert self.wait_for(lambda items: len(items) >= count, timeout), (
            f"got {len(self.items)} of {count} within {timeout} s: {self.items!r}"
        )
        return list(self.items)


def deadline_loop(timeout: float) -> Callable[[], bool]:
    """``while more(): ...`` runs until ``timeout`` seconds have passed."""
    end = time.monotonic() + timeout
    return lambda: time.monotonic() < end


def spin_until(executor: Any, condition: Callable[[], bool], timeout: float = 10.0) -> bool:
    """Spin ``executor`` until ``condition()`` holds, at most ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        executor.spin_once(remaining)
    return True


def round_trip(context: Any, timeout: float = 10.0) -> None:
    """Return once a message sent now has come back: everything the context sent earlier
    has gone through its mailbox by then (one sender, one receiver: FIFO)."""
    import uuid

    import emailmw

    topic = f"/probe/{uuid.uuid4().hex[:8]}"
    with emailmw.Subscription(topic, context=context) as probe:
        emailmw.Publisher(topic, context=context).publish("sync")
        assert emailmw.wait_for_message(probe, timeout) == "sync"


_HOLDER = """\
import sys, time
from emailmw._transport.connections import take_slot
limit = int(sys.argv[4])
slots = [take_slot(sys.argv[1], sys.argv[2], limit) for _ in range(int(sys.argv[3]))]
print("holding", flush=True)
time.sleep(600)
"""


@contextlib.contextmanager
def connections_held_elsewhere(
    username: str, server: str, count: int, limit: int
) -> Iterator[subprocess.Popen[str]]:
    """Another process holding ``count`` of the ``limit`` max-connections slots of
    ``username`` at ``server`` (the IMAP URL) until it is killed (``kill()`` it to give them
    back: the kernel does); killed at the end."""
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, username, server, str(count),
                               str(limit)], stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "holding"
        yield holder
    finally:
        holder.kill()
        holder.wait()
