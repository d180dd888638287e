"""ROS 2's ``launch.events``, by name (``EmitEvent`` is refused in one line: see
:mod:`emailmw.launch.event_handlers`)."""

from typing import Any

__all__ = ["Shutdown"]


class Shutdown:
    def __init__(self, *, reason: str = "reason not given", **kwargs: Any) -> None:
        self.reason, self.kwargs = reason, kwargs
