"""The message types of ``service_msgs``, loaded from the interface files of
``emailmw/share/service_msgs/msg`` when this module is imported."""

from typing import Any

from .._core.interfaces import package

_types: Any = package("service_msgs").msg
ServiceEventInfo = _types.ServiceEventInfo

__all__ = [
    "ServiceEventInfo",
]
