"""rclpy's ``rclpy.wait_for_message``: ``wait_for_message(msg_type, node, topic, *,
qos_profile=1, time_to_wait=-1)`` returns ``(True, msg)`` or ``(False, None)``.

``emailmw.wait_for_message`` is also the core API's function (the next message of an
untyped :class:`~emailmw.Subscription`). Once this module is imported, Python binds the
package's attribute of that name to the module; the module is callable, as that function,
so that ``emailmw.wait_for_message(subscription, timeout)`` keeps working either way.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from ._delivery.waitset import wait_for_message as _untyped
from ._ros.wait_for_message import wait_for_message

__all__ = ["wait_for_message"]


class _CallableModule(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _untyped(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
