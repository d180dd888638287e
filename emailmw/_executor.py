"""The executors (rclpy's shape): they spin nodes and run their callbacks. Messages and
requests are taken in the spinning thread and their callbacks run there (single-threaded)
or on a thread pool (multi-threaded)."""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable
from typing import Any

from ._exceptions import ClosedError
from ._future import Future
from ._log import get_logger
from ._node import Node, Work
from ._waitable import GuardCondition, wait_any

__all__ = [
    "Executor",
    "MultiThreadedExecutor",
    "SingleThreadedExecutor",
    "spin",
    "spin_once",
    "spin_until_future_complete",
]

_log = get_logger("node")


class Executor:
    """Runs the callbacks of its nodes. One thread spins at a time."""

    def __init__(self) -> None:
        self._nodes: list[Node] = []
        self._wake = GuardCondition()
        self._shutdown = False

    def add_node(self, node: Node) -> None:
        if node.executor is not None and node.executor is not self:
            raise RuntimeError(f"node {node.get_name()} is already in another executor")
        node.executor = self
        if node not in self._nodes:
            self._nodes.append(node)
        self.wake()

    def remove_node(self, node: Node) -> None:
        if node in self._nodes:
            self._nodes.remove(node)
        node.executor = None
        self.wake()

    def get_nodes(self) -> list[Node]:
        return list(self._nodes)

    def wake(self) -> None:
        """Make a blocked spin re-examine its nodes (thread-safe)."""
        self._wake.trigger()

    def shutdown(self) -> None:
        self._shutdown = True
        self.wake()

    def _dispatch(self, work: list[Work]) -> None:
        for item in work:
            item()

    def spin_once(self, timeout_sec: float | None = None) -> None:
        """Wait for work, up to ``timeout_sec`` (None: no limit), and run what is ready.

        Returns once it has run something, at the timeout, or after :meth:`shutdown`, as
        rclpy's does: a :meth:`wake` (a node added or removed, another thread's call) makes
        it look at its nodes again, not return.
        """
        self._spin_once(timeout_sec, lambda: self._shutdown)

    def _spin_once(self, timeout_sec: float | None, stop: Callable[[], bool]) -> None:
        deadline = None if timeout_sec is None else time.monotonic() + max(0.0, timeout_sec)
        while True:
            work = self._wait_for_work(deadline)
            if work:
                self._dispatch(work)
                return
            if stop() or (deadline is not None and time.monotonic() >= deadline):
                return

    def _wait_for_work(self, deadline: float | None) -> list[Work]:
        """Wait until an executable of its nodes has work, the deadline, or a wake; the
        work it took. The executor knows executables only by their public protocol
        (:class:`~emailmw.node.Executable`): a new kind plugs in without changing it."""
        executables = [e for n in list(self._nodes) for e in n.executables()]
        now = time.monotonic()
        wait = None if deadline is None else max(0.0, deadline - now)
        for executable in executables:
            due = executable.due_in(now)
            if due is not None:
                wait = max(0.0, due) if wait is None else min(wait, max(0.0, due))
        waitables = [w for e in executables for w in e.waitables()]
        if wait is None or wait > 0:
            wait_any([self._wake, *waitables], wait)
        self._wake._take()
        now = time.monotonic()
        work: list[Work] = []
        for executable in executables:
            work += executable.take(now)
        return work

    def spin(self) -> None:
        """Spin until :meth:`shutdown` or the nodes' context shuts down."""
        self._shutdown = False
        while not self._shutdown:
            try:
                self._spin_once(None, lambda: self._shutdown)
            except ClosedError:
                return

    def spin_until_future_complete(
        self, future: Future[Any], timeout_sec: float | None = None
    ) -> None:
        deadline = None if timeout_sec is None else time.monotonic() + timeout_sec
        future.add_done_callback(lambda _: self.wake())
        while not future.done():
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return
            self._spin_once(remaining, future.done)


class SingleThreadedExecutor(Executor):
    """Runs every callback in the spinning thread, one after the other."""


class MultiThreadedExecutor(Executor):
    """Takes messages in the spinning thread and runs callbacks on ``num_threads`` threads."""

    def __init__(self, num_threads: int | None = None) -> None:
        super().__init__()
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=num_threads or 4, thread_name_prefix="emailmw-executor"
        )

    def _dispatch(self, work: list[Work]) -> None:
        for item in work:
            self._pool.submit(self._run, item)

    @staticmethod
    def _run(item: Work) -> None:
        try:
            item()
        except Exception:  # noqa: BLE001 - one callback must not stop the others
            _log.exception("callback failed")

    def shutdown(self) -> None:
        super().shutdown()
        self._pool.shutdown(wait=True)


def _with_executor(node: Node, executor: Executor | None) -> tuple[Executor, bool]:
    if executor is not None:
        executor.add_node(node)
        return executor, False
    if isinstance(node.executor, Executor):
        return node.executor, False
    temporary = SingleThreadedExecutor()
    temporary.add_node(node)
    return temporary, True


def spin_once(
    node: Node, *, executor: Executor | None = None, timeout_sec: float | None = None
) -> None:
    used, temporary = _with_executor(node, executor)
    try:
        used.spin_once(timeout_sec)
    finally:
        if temporary:
            used.remove_node(node)


def spin(node: Node, executor: Executor | None = None) -> None:
    used, temporary = _with_executor(node, executor)
    try:
        used.spin()
    finally:
        if temporary:
            used.remove_node(node)


def spin_until_future_complete(
    node: Node,
    future: Future[Any],
    executor: Executor | None = None,
    timeout_sec: float | None = None,
) -> None:
    used, temporary = _with_executor(node, executor)
    try:
        used.spin_until_future_complete(future, timeout_sec)
    finally:
        if temporary:
            used.remove_node(node)
