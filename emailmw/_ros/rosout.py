"""A node's ``/rosout`` (rclpy's ``enable_rosout``, on by default): each line its logger
(and its children) writes is published as ``rcl_interfaces/msg/Log`` on ``/rosout``, while
someone reads ``/rosout`` (a subscription of it in the graph: ``emailmw topic echo
/rosout``). Over email each line is an email: with no reader, nothing is sent (DDS sends
nothing to no reader either).

The node's graph monitor is made in the background when the node is (it reads the graph
topic's history once): lines logged before it knows of a reader are not sent. Sending
never blocks the logging call (the ``memory`` guarantee) and never raises into it.
Thread-safe.
"""

from __future__ import annotations

import threading

from .._core.interfaces import HEADER_MESSAGE_TYPE, serialize, type_name
from .._core.log import get_logger
from .._core.ros_logging import LogRecord, add_sink, remove_sink
from .._delivery.context import Context
from .._delivery.entities import Publisher
from .._delivery.graph import GraphMonitor, graph_of
from ..builtin_interfaces.msg import Time as TimeMsg
from ..rcl_interfaces.msg import Log

__all__ = ["ROSOUT", "Rosout"]

ROSOUT = "/rosout"
_log = get_logger("node")


class Rosout:
    """The ``/rosout`` of the node whose logger is ``logger_name`` (see the module)."""

    def __init__(self, context: Context, logger_name: str) -> None:
        self._context = context
        self._name = logger_name
        self._lock = threading.Lock()
        self._monitor: GraphMonitor | None = None
        self._read = False  # someone reads /rosout
        self._publisher: Publisher | None = None
        self._closed = False
        add_sink(self._sink)
        threading.Thread(target=self._watch, name="emailmw-rosout", daemon=True).start()

    def _watch(self) -> None:
        try:
            monitor = graph_of(self._context)
        except Exception:  # noqa: BLE001 - a context shut down meanwhile: no /rosout
            return
        with self._lock:
            if self._closed:
                return
            self._monitor = monitor
        monitor.add_listener(self._recheck)
        self._recheck()

    def _recheck(self) -> None:
        monitor = self._monitor
        if monitor is None:
            return
        graph = monitor.peek()  # (on the monitor's thread: starts no receiving)
        self._read = any(t == ROSOUT for n in graph.nodes.values() for t, _ in n.subscriptions)

    def _sink(self, record: LogRecord) -> None:
        if not self._read or self._closed:
            return
        if record.name != self._name and not record.name.startswith(self._name + "."):
            return
        try:
            with self._lock:
                if self._publisher is None:
                    self._publisher = Publisher(ROSOUT, context=self._context, guarantee="memory")
                publisher = self._publisher
            stamp = TimeMsg(sec=record.stamp_ns // 1_000_000_000,
                            nanosec=record.stamp_ns % 1_000_000_000)  # fmt: skip
            message = Log(
                stamp=stamp, level=int(record.severity), name=record.name, msg=record.message,
                file=record.file, function=record.function, line=record.line,
            )  # fmt: skip
            publisher.publish(serialize(message), {HEADER_MESSAGE_TYPE: type_name(message)})
        except Exception as exc:  # noqa: BLE001 - a log line lost is not the caller's failure
            _log.debug("/rosout line not sent: %s", exc)

    def close(self) -> None:
        remove_sink(self._sink)
        with self._lock:
            self._closed = True
            monitor, self._monitor = self._monitor, None
            publisher, self._publisher = self._publisher, None
        if monitor is not None:
            monitor.remove_listener(self._recheck)
        if publisher is not None:
            publisher.close()
