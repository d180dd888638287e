"""Publishers, subscriptions, service clients and service servers.

Every entity belongs to a context (``context=``, else the default one), has ``close()``
and is a context manager. Closing the context closes its entities. All methods are
thread-safe; entity state is fed by the polling thread through the handlers.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Self

from ._exceptions import ClosedError, ServiceTimeoutError, UnknownRequestError
from ._log import get_logger
from ._protocol import publish_email, request_email, response_email
from ._types import Email, Gid, MessageInfo, RequestId, ServiceInfo, ServiceRequest
from ._waitset import Waitable, wait_for_request_with_info, wait_for_response_with_info
from ._wire import validate_name

if TYPE_CHECKING:
    from ._context import Context

__all__ = ["Publisher", "ServiceClient", "ServiceServer", "Subscription"]

_log = get_logger("entities")


def _resolve(context: Context | None) -> Context:
    from ._context import resolve

    return resolve(context)


class _Entity:
    _closed: bool
    _context: Context

    def _setup(self, context: Context | None) -> Context:
        self._closed = False
        self._context = _resolve(context)
        self._context._track(self)
        return self._context

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"{self!r} is closed")

    def _unregister(self) -> None:
        """Remove the entity from its handler; runs once, on close."""

    def close(self) -> None:
        """Stop receiving and release the entity. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._unregister()
        self._context._untrack(self)
        if isinstance(self, Waitable):
            self._notify()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class Publisher(_Entity):
    """Publishes messages on a topic: each message is one email, Subject = topic.

    ``publish`` may be called from any thread; sequence numbers follow call order.
    """

    def __init__(self, topic: str, *, context: Context | None = None) -> None:
        self._topic = validate_name(topic, "topic")
        ctx = self._setup(context)
        self.gid = Gid.new()
        self._seq = itertools.count()
        self._recipients = ctx.options.recipients
        self._send = ctx.sender.send

    @property
    def topic(self) -> str:
        return self._topic

    def __repr__(self) -> str:
        return f"<Publisher {self._topic!r} gid={self.gid}>"

    def publish(self, message: str, headers: Mapping[str, str] | None = None) -> None:
        """Send ``message``; extra ``headers`` go into the email as they are.

        Raises :class:`~emailmw.ClosedError`, :class:`~emailmw.InvalidHeaderError`,
        :class:`~emailmw.MessageTooLargeError`, or a transport error from the sender.
        """
        if self._closed:
            raise ClosedError(f"{self!r} is closed")
        if not isinstance(message, str):
            raise TypeError(f"message must be a str, got {type(message).__name__}")
        self._send(
            publish_email(
                self._topic,
                message,
                recipients=self._recipients,
                gid=self.gid,
                sequence_number=next(self._seq),
                timestamp_ns=time.time_ns(),
                headers=headers,
            )
        )


class Subscription(_Entity, Waitable):
    """Receives the messages of a topic into a queue.

    ``depth=None`` keeps every message; ``depth=N`` keeps the newest N, dropping the oldest
    (counted in :attr:`dropped`, and logged once). Can be put in a :class:`WaitSet`.
    """

    def __init__(
        self, topic: str, depth: int | None = None, *, context: Context | None = None
    ) -> None:
        self._topic = validate_name(topic, "topic")
        if depth is not None and (not isinstance(depth, int) or depth < 1):
            raise ValueError(f"depth must be None or a positive int, got {depth!r}")
        Waitable.__init__(self)
        self._queue: deque[tuple[str, MessageInfo]] = deque(maxlen=depth)
        self.dropped = 0
        ctx = self._setup(context)
        ctx._subscription_handler.register(self._topic, self)

    @property
    def topic(self) -> str:
        return self._topic

    def __repr__(self) -> str:
        return f"<Subscription {self._topic!r}>"

    def _unregister(self) -> None:
        self._context._subscription_handler.unregister(self._topic, self)

    def _push_message(self, body: str, info: MessageInfo) -> None:
        queue = self._queue
        if queue.maxlen is not None and len(queue) == queue.maxlen:
            self.dropped += 1
            if self.dropped == 1:
                _log.warning("%r is full (depth %d): dropping the oldest", self, queue.maxlen)
        queue.append((body, info))
        self._notify()

    def _is_ready(self) -> bool:
        return bool(self._queue)

    def has_message(self) -> bool:
        return bool(self._queue)

    def get_message(self) -> str | None:
        """The oldest queued message, or None."""
        got = self.get_message_with_info()
        return None if got is None else got[0]

    def get_message_with_info(self) -> tuple[str, MessageInfo] | None:
        """The oldest queued message with its :class:`~emailmw.MessageInfo`, or None."""
        try:
            return self._queue.popleft()
        except IndexError:
            return None


class ServiceClient(_Entity, Waitable):
    """Sends requests to a service and collects the responses by sequence number.

    Sequence numbers start at 0 per client. A response that arrives twice is delivered once.
    """

    def __init__(self, service_name: str, *, context: Context | None = None) -> None:
        self._service = validate_name(service_name, "service name")
        Waitable.__init__(self)
        self.gid = Gid.new()
        self._seq = itertools.count()
        self._lock = threading.Lock()
        self._responses: dict[int, tuple[str, ServiceInfo]] = {}
        self._abandoned: set[int] = set()
        # set by typed clients: takes a response (returns True) before it is stored
        self._response_hook: Callable[[str, ServiceInfo], bool] | None = None
        ctx = self._setup(context)
        self._recipients = ctx.options.recipients
        ctx._service_handler.register_client(self.gid.value, self)

    @property
    def service_name(self) -> str:
        return self._service

    def __repr__(self) -> str:
        return f"<ServiceClient {self._service!r} gid={self.gid}>"

    def _unregister(self) -> None:
        self._context._service_handler.unregister_client(self.gid.value, self)

    def _push_response(self, body: str, info: ServiceInfo) -> None:
        hook = self._response_hook
        if hook is not None and hook(body, info):
            return
        with self._lock:
            if info.sequence_number in self._abandoned:
                self._abandoned.discard(info.sequence_number)
                return
            self._responses[info.sequence_number] = (body, info)
        self._notify()

    def _is_ready(self) -> bool:
        return bool(self._responses)

    def send_request(self, request: str) -> int:
        """Send ``request``; returns its sequence number for :meth:`get_response`."""
        self._check_open()
        if not isinstance(request, str):
            raise TypeError(f"request must be a str, got {type(request).__name__}")
        seq = next(self._seq)
        self._context.sender.send(
            request_email(
                self._service,
                request,
                recipients=self._recipients,
                client_gid=self.gid,
                sequence_number=seq,
                timestamp_ns=time.time_ns(),
            )
        )
        return seq

    def has_response(self, sequence_number: int | None = None) -> bool:
        """Any response waiting (no argument), or the one to ``sequence_number``."""
        if sequence_number is None:
            return bool(self._responses)
        return sequence_number in self._responses

    def get_response(self, sequence_number: int) -> str | None:
        """Take the response to ``sequence_number``; None if it has not arrived."""
        got = self.get_response_with_info(sequence_number)
        return None if got is None else got[0]

    def get_response_with_info(self, sequence_number: int) -> tuple[str, ServiceInfo] | None:
        """Take the response with its :class:`~emailmw.ServiceInfo`; None if not arrived."""
        with self._lock:
            return self._responses.pop(sequence_number, None)

    def call(self, request: str, timeout: float | None = None) -> str:
        """Send ``request`` and block for its response (``timeout`` None: no limit).

        Raises :class:`~emailmw.ServiceTimeoutError` on timeout; a response that arrives
        later is discarded.
        """
        seq = self.send_request(request)
        got = wait_for_response_with_info(self, seq, -1 if timeout is None else timeout)
        if got is None:
            with self._lock:
                if self._responses.pop(seq, None) is None:
                    self._abandoned.add(seq)
            raise ServiceTimeoutError(
                f"no response from service {self._service!r} within {timeout} s (request {seq})"
            )
        return got[0]


class ServiceServer(_Entity, Waitable):
    """Receives the requests of a service and sends responses as replies.

    Without ``callback``, take requests with :meth:`get_request` (or a wait set) and answer
    with :meth:`send_response`. With ``callback``, a thread of the server's own calls
    ``callback(request)`` for each request and sends its return value as the response
    (None: no response); an exception in the callback is logged and no response is sent.
    """

    def __init__(
        self,
        service_name: str,
        callback: Callable[[str], str | None] | None = None,
        *,
        context: Context | None = None,
    ) -> None:
        self._service = validate_name(service_name, "service name")
        Waitable.__init__(self)
        self._lock = threading.Lock()
        self._queue: deque[tuple[ServiceRequest, ServiceInfo]] = deque()
        self._pending: dict[RequestId, Email] = {}
        self._callback = callback
        ctx = self._setup(context)
        self._from = ctx.options.recipients.from_
        ctx._service_handler.register_server(self._service, self)
        self._worker: threading.Thread | None = None
        if callback is not None:
            self._worker = threading.Thread(
                target=self._serve, name=f"emailmw-server-{self._service[:40]}", daemon=True
            )
            self._worker.start()

    @property
    def service_name(self) -> str:
        return self._service

    def __repr__(self) -> str:
        return f"<ServiceServer {self._service!r}>"

    def _unregister(self) -> None:
        self._context._service_handler.unregister_server(self._service, self)

    def close(self) -> None:
        super().close()
        worker = self._worker
        if worker is not None and worker is not threading.current_thread():
            worker.join(5.0)

    def _push_request(self, email: Email, info: ServiceInfo) -> None:
        request_id = RequestId(info.client_gid, info.sequence_number)
        with self._lock:
            if request_id in self._pending:
                _log.info("dropped duplicate request %s (%s)", email.message_id, request_id)
                return
            self._pending[request_id] = email
            self._queue.append((ServiceRequest(request_id, email.body), info))
        self._notify()

    def _is_ready(self) -> bool:
        return bool(self._queue)

    def has_request(self) -> bool:
        return bool(self._queue)

    def get_request(self) -> ServiceRequest | None:
        """The oldest request not yet taken, or None."""
        got = self.get_request_with_info()
        return None if got is None else got[0]

    def get_request_with_info(self) -> tuple[ServiceRequest, ServiceInfo] | None:
        """The oldest request with its :class:`~emailmw.ServiceInfo`, or None."""
        try:
            return self._queue.popleft()
        except IndexError:
            return None

    def send_response(self, request_id: RequestId, response: str) -> None:
        """Reply to the request ``request_id`` with ``response``.

        Raises :class:`~emailmw.UnknownRequestError` for a request this server did not hand
        out or already answered.
        """
        self._check_open()
        if not isinstance(response, str):
            raise TypeError(f"response must be a str, got {type(response).__name__}")
        with self._lock:
            request = self._pending.pop(request_id, None)
        if request is None:
            raise UnknownRequestError(f"no pending request {request_id} on {self!r}")
        self._context.sender.send(
            response_email(request, response, from_=self._from, timestamp_ns=time.time_ns())
        )

    def _discard(self, request_id: RequestId) -> None:
        with self._lock:
            self._pending.pop(request_id, None)

    def _serve(self) -> None:
        assert self._callback is not None
        while True:
            try:
                got = wait_for_request_with_info(self, -1)
            except ClosedError:
                return
            if got is None:
                continue
            request, _info = got
            try:
                result = self._callback(request.content)
            except Exception:  # noqa: BLE001 - a user callback may raise anything
                _log.exception("callback of %r failed on request %s", self, request.id)
                self._discard(request.id)
                continue
            if result is None:
                self._discard(request.id)
                continue
            try:
                self.send_response(request.id, result)
            except ClosedError:
                return
            except Exception:  # noqa: BLE001 - logged; the server keeps serving
                _log.exception("sending the response to %s failed", request.id)
