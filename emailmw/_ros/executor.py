"""The executors (rclpy's shape, ``emailmw.executors``): they spin nodes and run their
callbacks. Work is taken in the spinning thread and run there (single-threaded) or on a
thread pool (multi-threaded), each callback inside its entity's callback group. A callback
that is a coroutine (``async def``) becomes a :class:`~emailmw.task.Task` the executor
steps whenever what it awaits is done.

Shutdown: :meth:`Executor.shutdown` makes ``spin`` return; when a context of its nodes
shuts down (``emailmw.shutdown()``, from any thread or a callback, or SIGINT) the executor
is woken at once and every ``spin*`` returns (rclpy raises
:class:`ExternalShutdownException` out of a wait the shutdown interrupted; emailmw
returns, so that a thread that spins ends cleanly and can be joined: code that catches the
exception works unchanged).
"""

from __future__ import annotations

import concurrent.futures
import os
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

from .._core.errors import (
    ClosedError,
    ExternalShutdownException,
    ShutdownException,
    StateError,
    TimeoutException,
)
from .._core.futures import Future, Task
from .._core.log import get_logger
from .._core.waitables import GuardCondition, wait_any
from .._delivery.context import Context, get_default_context
from .callback_groups import CallbackGroup
from .node import Executable, Node

__all__ = [
    "Executor",
    "ExternalShutdownException",
    "MultiThreadedExecutor",
    "SingleThreadedExecutor",
    "ShutdownException",
    "TimeoutException",
    "get_global_executor",
    "spin",
    "spin_once",
    "spin_until_future_complete",
]

_log = get_logger("node")


class _Item:
    """One callback to run, as a task: the group it runs in (None: none), its entity, and
    whether a thread steps it now."""

    __slots__ = ("entity", "group", "running", "task")

    def __init__(self, task: Task[Any], group: CallbackGroup | None, entity: Any) -> None:
        self.task = task
        self.group = group
        self.entity = entity
        self.running = False

    def ready(self) -> bool:
        return not self.running and self.task.ready()


class Executor:
    """Runs the callbacks of its nodes. One thread spins at a time. ``context``: the
    context whose shutdown ends spinning (default: the contexts of its nodes).

    Each callback runs as a task inside its entity's callback group: it begins once the
    group lets it (work taken while the group is busy waits, in order) and holds the
    group until it ends (an ``async def`` callback: until its coroutine ends). An
    executable whose group is busy is not asked for more work meanwhile."""

    def __init__(self, *, context: Context | None = None) -> None:
        self._context = context
        self._nodes: list[Node] = []
        self._lock = threading.Lock()
        self._wake = GuardCondition()
        self._shutdown = False
        self._pending: list[_Item] = []  # taken; waiting for their group
        self._begun: list[_Item] = []  # begun, not ended (coroutines that await)
        self._hooked: set[int] = set()  # contexts that wake this executor at shutdown

    @property
    def context(self) -> Context:
        if self._context is not None:
            return self._context
        with self._lock:
            if self._nodes:
                return self._nodes[0].context
        return get_default_context()

    def _contexts(self) -> list[Context]:
        with self._lock:
            found = {id(n.context): n.context for n in self._nodes}
        if self._context is not None:
            found[id(self._context)] = self._context
        return list(found.values())

    def _ok(self) -> bool:
        return all(c.ok() for c in self._contexts())

    def add_node(self, node: Node) -> bool:
        if node.executor is not None and node.executor is not self:
            raise StateError(f"node {node.get_name()} is already in another executor")
        node.executor = self
        with self._lock:
            added = node not in self._nodes
            if added:
                self._nodes.append(node)
            hook = id(node.context) not in self._hooked
            self._hooked.add(id(node.context))
        if hook:
            node.context.on_shutdown(self.wake)
        self.wake()
        return added

    def remove_node(self, node: Node) -> None:
        with self._lock:
            if node in self._nodes:
                self._nodes.remove(node)
        node.executor = None
        self.wake()

    def get_nodes(self) -> list[Node]:
        with self._lock:
            return list(self._nodes)

    def wake(self) -> None:
        """Make a blocked spin look at its nodes again (thread-safe)."""
        self._wake.trigger()

    def create_task(self, callback: Callable[..., Any], *args: Any) -> Task[Any]:
        """Run ``callback(*args)`` (a coroutine function too) in this executor, when it
        spins; the task is a future of its result."""
        task: Task[Any] = Task(callback, args, wake=self.wake)
        with self._lock:
            self._begun.append(_Item(task, None, None))
        self.wake()
        return task

    def shutdown(self, timeout_sec: float | None = None) -> bool:
        """Stop spinning (``spin`` returns). True: the callbacks under way ended within
        ``timeout_sec``."""
        del timeout_sec
        self._shutdown = True
        self.wake()
        return True

    def _dispatch(self, items: list[_Item]) -> None:
        """Run the work one after the other, each once its group lets it begin."""
        for item in items:
            if self._begin(item):
                self._run(item)

    def _begin(self, item: _Item) -> bool:
        """Begin ``item`` in its group (a task that began already goes on): False when the
        group is busy (it stays pending)."""
        with self._lock:
            if item in self._begun:
                item.running = True
                return True
            if item.group is not None and not item.group.beginning_execution(item.entity):
                return False
            if item in self._pending:
                self._pending.remove(item)
            self._begun.append(item)
            item.running = True
            return True

    def _run(self, item: _Item) -> None:
        """One step of ``item``'s task; its group is let go once it ended (a callback's
        error ends it, raised to the spinning thread, as rclpy does)."""
        try:
            item.task()
        finally:
            item.running = False
            if item.task.done():
                if item.group is not None:
                    item.group.ending_execution(item.entity)
                with self._lock:
                    if item in self._begun:
                        self._begun.remove(item)
                self.wake()

    def spin_once(self, timeout_sec: float | None = None) -> None:
        """Wait for work, up to ``timeout_sec`` (None: no limit), and run what is ready.

        Returns once it has run something, at the timeout, after :meth:`shutdown`, or once
        a context of its nodes shuts down: a :meth:`wake` (a node added or removed, another
        thread's call) makes it look at its nodes again, not return.
        """
        self._spin_once(timeout_sec, lambda: self._shutdown)

    def _spin_once(self, timeout_sec: float | None, stop: Callable[[], bool]) -> None:
        deadline = None if timeout_sec is None else time.monotonic() + max(0.0, timeout_sec)
        while True:
            items = self._wait_for_work(deadline)
            if items:
                self._dispatch(items)
                return
            if stop() or not self._ok():
                return
            if deadline is not None and time.monotonic() >= deadline:
                return

    def _wait_for_work(self, deadline: float | None) -> list[_Item]:
        """Wait until an executable of its nodes has work, a callback can go on, the
        deadline, or a wake; what may run now, begun in its group. The executor knows
        executables only by their public protocol (:class:`~emailmw.node.Executable`): a
        new kind plugs in without changing it."""
        if not self._ok():
            return []
        with self._lock:
            busy = {id(i.entity) for i in self._pending}
            waiting = [*self._pending, *self._begun]
        executables = [
            e
            for n in self.get_nodes()
            for e in n.executables()
            if id(e) not in busy and e.callback_group.can_execute(e)
        ]
        now = time.monotonic()
        wait = None if deadline is None else max(0.0, deadline - now)
        for executable in executables:
            due = executable.due_in(now)
            if due is not None:
                wait = max(0.0, due) if wait is None else min(wait, max(0.0, due))
        if any(
            i.ready() and (i in self._begun or i.group is None or i.group.can_execute(i.entity))
            for i in waiting
        ):
            wait = 0.0
        if wait is None or wait > 0:
            wait_any([self._wake, *[w for e in executables for w in e.waitables()]], wait)
        self._wake._take()
        if not self._ok():
            return []
        return self._collect(executables, time.monotonic())

    def _collect(self, executables: list[Executable], now: float) -> list[_Item]:
        """What may go on or begin now, in order: tasks that can go on, work waiting for
        its group, and the work each executable (its group free, nothing of it waiting)
        has; the new work waits in :attr:`_pending` until :meth:`_begin`."""
        with self._lock:
            items = [i for i in self._begun if i.ready()]
            items += [i for i in self._pending if i.group is None or i.group.can_execute(i.entity)]
        for executable in executables:
            for callback in executable.take(now):
                item = _Item(Task(callback, wake=self.wake), executable.callback_group, executable)
                with self._lock:
                    self._pending.append(item)
                items.append(item)
        return items

    def spin(self) -> None:
        """Spin until :meth:`shutdown`, or until a context of its nodes shuts down."""
        self._shutdown = False
        while not self._shutdown and self._ok():
            try:
                self._spin_once(None, lambda: self._shutdown or not self._ok())
            except ClosedError:
                return

    def spin_until_future_complete(
        self, future: Future[Any], timeout_sec: float | None = None
    ) -> None:
        """Spin until ``future`` is done, at most ``timeout_sec`` seconds."""
        deadline = None if timeout_sec is None else time.monotonic() + timeout_sec
        future._when_done(lambda _: self.wake())
        while not future.done() and not self._shutdown and self._ok():
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return
            self._spin_once(remaining, future.done)

    def spin_once_until_future_complete(
        self, future: Future[Any], timeout_sec: float | None = None
    ) -> None:
        future._when_done(lambda _: self.wake())
        self._spin_once(timeout_sec, future.done)


class SingleThreadedExecutor(Executor):
    """Runs every callback in the spinning thread, one after the other."""


class MultiThreadedExecutor(Executor):
    """Takes work in the spinning thread and runs callbacks on ``num_threads`` threads
    (default: the CPUs this process may use), each inside its callback group: a node's
    default group is mutually exclusive, so its callbacks run in parallel only when put
    in a :class:`~emailmw.callback_groups.ReentrantCallbackGroup` (or different groups).
    A callback that raises is logged."""

    def __init__(self, num_threads: int | None = None, *, context: Context | None = None) -> None:
        super().__init__(context=context)
        if num_threads is None:
            num_threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 2
        if num_threads == 1:
            warnings.warn(
                "MultiThreadedExecutor is used with a single thread: use the "
                "SingleThreadedExecutor instead",
                stacklevel=2,
            )
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=num_threads, thread_name_prefix="emailmw-executor"
        )
        self._pool_lock = threading.Lock()
        self._pool_closed = False

    def _dispatch(self, items: list[_Item]) -> None:
        with self._pool_lock:
            if self._pool_closed:
                return
            for item in items:
                if self._begin(item):
                    self._pool.submit(self._run_logged, item)

    def _run_logged(self, item: _Item) -> None:
        try:
            self._run(item)
        except Exception:  # noqa: BLE001 - one callback must not stop the others
            _log.exception("callback failed")
        finally:
            self.wake()

    def shutdown(self, timeout_sec: float | None = None) -> bool:
        super().shutdown(timeout_sec)
        with self._pool_lock:
            self._pool_closed = True
        self._pool.shutdown(wait=True)
        return True


_global_lock = threading.Lock()
_global: SingleThreadedExecutor | None = None


def get_global_executor() -> Executor:
    """The executor ``spin*`` use when given none (rclpy's): one per process, so that an
    async callback begun in one ``spin_once`` goes on in the next."""
    global _global
    with _global_lock:
        if _global is None:
            _global = SingleThreadedExecutor()
        return _global


def _with_executor(node: Node, executor: Executor | None) -> tuple[Executor, bool]:
    """The executor to spin ``node`` with, and whether ``node`` is to be taken out of it
    afterwards (it was added for this spin)."""
    if executor is None and isinstance(node.executor, Executor):
        return node.executor, False
    used = executor if executor is not None else get_global_executor()
    added = used.add_node(node)
    return used, added and executor is None


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
    """Run ``node``'s callbacks until its context shuts down (rclpy's ``rclpy.spin``), from
    any thread or a callback: then it returns (within a second). Ctrl-C raises
    ``KeyboardInterrupt`` out of it, the context shutting down."""
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
