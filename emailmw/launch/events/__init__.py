"""ROS 2's ``launch.events``: ``Shutdown`` (``EmitEvent(event=Shutdown(reason=...))`` ends
the launch) and the process events (``launch.events.process``) handlers receive."""

from ..._launch.events import Event, ExecutionComplete, Shutdown
from . import process

__all__ = ["Event", "ExecutionComplete", "Shutdown", "process"]
