"""rclpy's service introspection (``rclpy.service_introspection``, Iron on): a service or
client configured with ``configure_introspection(clock, qos, state)`` publishes an event
on ``<service>/_service_event`` (``pkg/srv/Name_Event``) each time a request is sent or
received and a response sent or received: ``METADATA`` the event's info only (kind, time,
client GID, sequence number), ``CONTENTS`` with the request or response; ``OFF`` (the
default) nothing. ``emailmw service echo`` shows them, as ``ros2 service echo`` does.

Over email each event is an email: introspection is for looking closer, not for every
call of a busy service. An event that cannot be sent is logged, never the call's failure.
"""

from __future__ import annotations

import enum
import threading
from typing import Any

from .._core.interfaces import (
    HEADER_MESSAGE_TYPE,
    ServiceType,
    event_type,
    serialize,
    type_name,
)
from .._core.log import get_logger
from .._core.types import Gid
from .._delivery.context import Context
from .._delivery.entities import Publisher
from ..builtin_interfaces.msg import Time as TimeMsg
from ..service_msgs.msg import ServiceEventInfo

__all__ = ["Introspection", "ServiceIntrospectionState"]

_log = get_logger("node")


class ServiceIntrospectionState(enum.IntEnum):
    """rclpy's: what a service's or client's events carry."""

    OFF = 0
    METADATA = 1
    CONTENTS = 2


class Introspection:
    """The events of one service or client (see the module). Thread-safe."""

    def __init__(self, context: Context, service_name: str, srv_type: ServiceType) -> None:
        self._context = context
        self._topic = f"{service_name}/_service_event"
        self._srv_type = srv_type
        self._lock = threading.Lock()
        self._state = ServiceIntrospectionState.OFF
        self._clock: Any = None
        self._publisher: Publisher | None = None

    def configure(self, clock: Any, qos: Any, state: ServiceIntrospectionState | int) -> None:
        """rclpy's ``configure_introspection``: ``state`` from now on (``qos``: accepted,
        the events' delivery is the email's)."""
        del qos
        chosen = ServiceIntrospectionState(state)
        with self._lock:
            self._state, self._clock = chosen, clock
            if chosen is ServiceIntrospectionState.OFF:
                publisher, self._publisher = self._publisher, None
                if publisher is not None:
                    publisher.close()
            elif self._publisher is None:
                self._publisher = Publisher(self._topic, context=self._context)

    def event(
        self,
        kind: int,
        client_gid: Gid,
        sequence_number: int,
        request: Any = None,
        response: Any = None,
    ) -> None:
        """Publish one event (``kind``: ``ServiceEventInfo.REQUEST_SENT`` ...)."""
        with self._lock:
            state, publisher, clock = self._state, self._publisher, self._clock
        if state is ServiceIntrospectionState.OFF or publisher is None:
            return
        stamp = clock.now().to_msg() if clock is not None else TimeMsg()
        info = ServiceEventInfo(
            event_type=kind, stamp=stamp, client_gid=list(client_gid.value.to_bytes(16, "big")),
            sequence_number=sequence_number,
        )  # fmt: skip
        message = event_type(self._srv_type)(info=info)
        if state is ServiceIntrospectionState.CONTENTS:
            message.request = [request] if request is not None else []
            message.response = [response] if response is not None else []
        try:
            publisher.publish(serialize(message), {HEADER_MESSAGE_TYPE: type_name(message)})
        except Exception as exc:  # noqa: BLE001 - an event lost is not the call's failure
            _log.warning("service event on %s not sent: %s", self._topic, exc)

    def close(self) -> None:
        self.configure(None, None, ServiceIntrospectionState.OFF)
