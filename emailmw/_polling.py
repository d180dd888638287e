"""Layer 3: the polling manager, one thread that hands every new email to the handlers.

Guarantees:

* emails reach the handlers in the order the receiver returned them, one at a time, on the
  thread named ``emailmw-polling`` (handlers need no locking against each other);
* each email is classified once (:func:`emailmw._protocol.classify`) and the route handed to
  every handler; mail that is not emailmw's is logged (INFO, or WARNING when it looks like
  ours but its metadata is broken) and otherwise left alone;
* a handler that raises is logged with the email's Message-ID and never stops the thread;
* a receiver error is logged and retried with exponential backoff (0.1 s to 5 s);
* :meth:`PollingManager.stop` wakes the receiver and joins with a timeout.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Final

from ._exceptions import ClosedError
from ._log import get_logger
from ._protocol import Route, Unroutable, classify
from ._transport.base import EmailReceiver
from ._types import Email

__all__ = ["Handler", "PollingManager"]

Handler = Callable[[Email, Route], None]

_log = get_logger("polling")
_BACKOFF_MIN: Final = 0.1
_BACKOFF_MAX: Final = 5.0


class PollingManager:
    """Owns the polling thread. ``register_handler`` is thread-safe; start/stop are not
    meant to race with each other (the context calls them)."""

    def __init__(
        self,
        receiver: EmailReceiver,
        *,
        name: str = "emailmw-polling",
        receive_timeout: float | None = None,
    ) -> None:
        self._receiver = receiver
        self._name = name
        self._receive_timeout = receive_timeout
        self._handlers: tuple[Handler, ...] = ()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def register_handler(self, handler: Handler) -> None:
        with self._lock:
            self._handlers = (*self._handlers, handler)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("polling manager already started")
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> bool:
        """Stop the thread; True if it ended within ``timeout`` seconds."""
        self._stopping.set()
        self._receiver.wakeup()
        thread = self._thread
        if thread is None or thread is threading.current_thread():
            return True
        thread.join(timeout)
        if thread.is_alive():
            _log.warning("polling thread did not stop within %.1f s", timeout)
            return False
        return True

    def _run(self) -> None:
        backoff = _BACKOFF_MIN
        while not self._stopping.is_set():
            try:
                emails = self._receiver.receive(self._receive_timeout)
            except ClosedError:
                if not self._stopping.is_set():
                    _log.warning("receiver closed under the polling manager; stopping")
                break
            except Exception as exc:  # noqa: BLE001 - the thread must survive any error
                _log.warning("receiving failed (%s); retrying in %.1f s", exc, backoff)
                self._stopping.wait(backoff)
                backoff = min(backoff * 2, _BACKOFF_MAX)
                continue
            backoff = _BACKOFF_MIN
            for email in emails:
                self.dispatch(email)

    def dispatch(self, email: Email) -> None:
        """Classify ``email`` and hand it to every handler (the thread's loop body)."""
        route = classify(email, time.time_ns())
        if isinstance(route, Unroutable):
            level = 30 if route.malformed else 20  # WARNING / INFO
            _log.log(
                level,
                "left alone email %s (subject %r): %s",
                email.message_id,
                email.subject[:80],
                route.reason,
            )
            return
        for handler in self._handlers:
            try:
                handler(email, route)
            except Exception:  # noqa: BLE001 - a handler must never kill the thread
                _log.exception(
                    "handler %s failed on email %s (subject %r)",
                    getattr(handler, "__qualname__", handler),
                    email.message_id,
                    email.subject[:80],
                )
