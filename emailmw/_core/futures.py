"""One future for everything that completes later, and one map of the ones still pending.

:class:`Future` is what every asynchronous call returns: a typed service call
(``Client.call_async``), a raw one (``ServiceClient.send_request_async``), an acknowledged
publish (``Publisher.publish(..., ack=True)``), a Stem command (``Cell.request``) and a YMP
request (``YmpHost.request``). It is rclpy's ``Future`` (``emailmw.task.Future``) with a
blocking :meth:`Future.result` that takes a timeout, as ``concurrent.futures`` has, and it is
awaitable: in an ``async def`` callback run by an executor, and in asyncio code.

:class:`Pending` holds the futures of requests awaiting their answer, by key, with what the
answer must match (the request's Message-ID, the address it went to): a service client,
a Stem cell and a YMP host each keep one.

At the bottom of the layers: imports only the exceptions and the logger.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Callable, Coroutine, Generator
from typing import Any, Generic, TypeVar

from .errors import ClosedError, EmailMWError, InvalidCallbackError, ServiceTimeoutError
from .log import get_logger

__all__ = ["Future", "Pending", "Task", "refuse_coroutine", "relay"]

_log = get_logger("future")
T = TypeVar("T")
K = TypeVar("K")
D = TypeVar("D")


def refuse_coroutine(callback: Callable[..., Any], what: str) -> None:
    """Raise :class:`~emailmw.InvalidCallbackError` for ``callback`` when it is a coroutine
    function: called where a plain function is, its body would never run."""
    if inspect.iscoroutinefunction(callback) or inspect.iscoroutinefunction(
        getattr(callback, "__call__", None)  # noqa: B004 - an object with an async __call__
    ):
        name = getattr(callback, "__qualname__", type(callback).__qualname__)
        raise InvalidCallbackError(
            f"{what} callback {name} is a coroutine function (async def); this callback "
            "is called as a plain function: make it a def"
        )


def relay(source: Future[Any], target: Future[T], convert: Callable[[Any], T]) -> None:
    """Once ``source`` is done, ``target`` is done the same way: cancelled, failed with its
    exception, or with ``convert(its result)`` (a typed response read from the raw one; an
    :class:`~emailmw.EmailMWError` ``convert`` raises fails ``target``). On the thread that
    completes ``source`` (``target``'s own callbacks go where its scheduler says)."""

    def done(finished: Future[Any]) -> None:
        failure = finished.exception()
        if finished.cancelled():
            target.cancel()
        elif failure is not None:
            target.set_exception(failure)
        else:
            try:
                value = convert(finished.result())
            except EmailMWError as exc:
                target.set_exception(exc)
                return
            target.set_result(value)

    source._when_done(done)


class Future(Generic[T]):
    """The result of an asynchronous call. Thread-safe.

    * :meth:`result` waits up to ``timeout`` seconds (None: no limit) and returns the
      result, raises the call's exception, or :class:`~emailmw.ServiceTimeoutError` (a
      ``TimeoutError``) when it is not done in time; after :meth:`cancel` it returns None,
      as rclpy's does.
    * :meth:`add_done_callback` runs ``callback(future)`` in the executor that spins the
      node the call belongs to, as rclpy does (``scheduler`` gives it; none: in the thread
      that completes the future, or at once in the caller's when it is done already); a
      callback that raises is logged and does not stop the others.
    * ``await future`` suspends an ``async def`` callback on an executor, or an asyncio
      task, until it is done, then gives the result.

    The first of :meth:`set_result`, :meth:`set_exception` and :meth:`cancel` decides;
    later ones do nothing. ``what`` names the call in the timeout's message.
    """

    __slots__ = (
        "_callbacks", "_cancelled", "_done", "_exception", "_lock", "_result", "_scheduler",
        "what",
    )  # fmt: skip

    def __init__(self, what: str = "", *, scheduler: Callable[[], Any] | None = None) -> None:
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._result: T | None = None
        self._exception: BaseException | None = None
        self._cancelled = False
        self._callbacks: list[tuple[Callable[[Future[T]], None], bool]] = []
        self._scheduler = scheduler
        self.what = what

    def __repr__(self) -> str:
        state = (
            "cancelled"
            if self._cancelled
            else "failed"
            if self._exception is not None
            else "done"
            if self.done()
            else "pending"
        )
        return f"<emailmw.Future {self.what or 'call'} {state}>"

    def done(self) -> bool:
        """Whether it has a result, an exception, or was cancelled."""
        return self._done.is_set()

    def cancelled(self) -> bool:
        return self._cancelled

    def result(self, timeout: float | None = None) -> T:
        """The result, waiting up to ``timeout`` seconds (None: until done); raises the
        call's exception if it failed, :class:`~emailmw.ServiceTimeoutError` on timeout."""
        if not self._done.wait(timeout):
            raise ServiceTimeoutError(
                f"{self.what or 'the call'} not done within {timeout:g} s"
                if timeout is not None
                else f"{self.what or 'the call'} not done"
            )
        if self._exception is not None:
            raise self._exception
        return self._result  # type: ignore[return-value]

    def exception(self) -> BaseException | None:
        """The exception the call failed with; None while pending or when it succeeded."""
        return self._exception

    def _finish(self, result: T | None, exception: BaseException | None, cancel: bool) -> bool:
        with self._lock:
            if self._done.is_set():
                return False
            self._result, self._exception, self._cancelled = result, exception, cancel
            self._done.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback, inline in callbacks:
            self._call(callback, inline)
        return True

    def _call(self, callback: Callable[[Future[T]], None], inline: bool) -> None:
        runner = None if inline or self._scheduler is None else self._scheduler()
        if runner is not None:
            runner.create_task(callback, self)
            return
        try:
            callback(self)
        except Exception:  # noqa: BLE001 - a user callback may raise anything
            _log.exception("a done callback of %r failed", self)

    def set_result(self, result: T) -> None:
        self._finish(result, None, False)

    def set_exception(self, exception: BaseException) -> None:
        self._finish(None, exception, False)

    def cancel(self) -> bool:
        """Cancel it unless it is done: True when this call cancelled it."""
        return self._finish(None, None, True)

    def add_done_callback(self, callback: Callable[[Future[T]], None]) -> None:
        refuse_coroutine(callback, "done")
        self._when_done(callback, inline=False)

    def _when_done(self, callback: Callable[[Future[T]], None], *, inline: bool = True) -> None:
        """``callback(self)`` once done; ``inline``: on the completing thread, whatever the
        scheduler (emailmw's own bookkeeping, never user code)."""
        with self._lock:
            if not self._done.is_set():
                self._callbacks.append((callback, inline))
                return
        self._call(callback, inline)

    def __await__(self) -> Generator[Any, None, T]:
        if not self.done():
            try:
                loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
            except RuntimeError:
                loop = None
            if loop is not None:  # asyncio: wait on one of its own futures
                waiter = loop.create_future()

                def wake(_: Future[T]) -> None:
                    loop.call_soon_threadsafe(
                        lambda: None if waiter.done() else waiter.set_result(None)
                    )

                self._when_done(wake)
                yield from waiter.__await__()
            while not self.done():
                yield self  # an executor's task resumes the coroutine once this is done
        return self.result()


class Task(Future[T]):
    """A callback run by an executor, that may be a coroutine (rclpy's ``Task``): each
    :meth:`__call__` runs it until it awaits a :class:`Future` that is not done, or ends;
    the task's own result is then the callback's. ``wake`` is called when it can go on
    (what it awaits is done): the executor looks at it again. Thread-safe: one step at
    a time."""

    __slots__ = ("_args", "_coro", "_handler", "_step", "_waiting", "_wake")

    def __init__(
        self,
        handler: Callable[..., Any] | Coroutine[Any, Any, T],
        args: tuple[Any, ...] = (),
        *,
        wake: Callable[[], None] | None = None,
        what: str = "",
    ) -> None:
        super().__init__(what or getattr(handler, "__qualname__", "a task"))
        self._handler: Callable[..., Any] | None = None
        self._coro: Coroutine[Any, Any, T] | None = None
        if inspect.iscoroutine(handler):
            self._coro = handler
        else:
            self._handler = handler  # type: ignore[assignment]
        self._args = args
        self._wake = wake
        self._waiting: Future[Any] | None = None
        self._step = threading.Lock()

    def ready(self) -> bool:
        """Whether a step would run now (not done, and not waiting on a future)."""
        waiting = self._waiting
        return not self.done() and (waiting is None or waiting.done())

    def executing(self) -> bool:
        """Whether it started and has not ended (it awaits something)."""
        return self._coro is not None and not self.done()

    def _resume(self, _: Future[Any]) -> None:
        if self._wake is not None:
            self._wake()

    def __call__(self) -> None:
        if not self._step.acquire(blocking=False):
            return  # another thread steps it
        try:
            if self.done():
                return
            if self._coro is None:
                assert self._handler is not None
                result = self._handler(*self._args)
                if not inspect.iscoroutine(result):
                    self.set_result(result)
                    return
                self._coro = result
            try:
                awaited = self._coro.send(None)
            except StopIteration as end:
                self.set_result(end.value)
                return
            self._waiting = awaited if isinstance(awaited, Future) else None
            if self._waiting is not None:
                self._waiting._when_done(self._resume)
            elif self._wake is not None:
                self._wake()  # a bare yield: go on at the next look
        except BaseException as exc:
            self.set_exception(exc)
            raise
        finally:
            self._step.release()


class Pending(Generic[K, T, D]):
    """The futures of requests awaiting their answer, by key, each with what its answer
    must match (``detail``: the request's Message-ID, where it went). A future leaves the
    map once done (answered, failed, cancelled). Thread-safe."""

    def __init__(self, what: str) -> None:
        self._what = what
        self._lock = threading.Lock()
        self._entries: dict[K, tuple[Future[T], D]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def add(self, key: K, detail: D, what: str = "") -> Future[T]:
        """A new pending future for ``key``; it leaves the map once done."""
        future: Future[T] = Future(what or self._what)
        with self._lock:
            self._entries[key] = (future, detail)
        future._when_done(lambda done: self._forget(key, done))
        return future

    def _forget(self, key: K, future: Future[T]) -> None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry[0] is future:
                del self._entries[key]

    def get(self, key: K) -> tuple[Future[T], D] | None:
        """The pending future of ``key`` with its detail, or None."""
        with self._lock:
            return self._entries.get(key)

    def discard(self, key: K) -> Future[T] | None:
        """Forget ``key`` (its future stays as it is): an answer to it is no longer taken."""
        with self._lock:
            entry = self._entries.pop(key, None)
        return None if entry is None else entry[0]

    def fail_all(self, what: str) -> None:
        """Fail every future still waiting with :class:`~emailmw.ClosedError`."""
        with self._lock:
            entries, self._entries = list(self._entries.values()), {}
        for future, _ in entries:
            future.set_exception(ClosedError(f"{what} closed"))
