"""ROS 2's ``launch.events.process``: what event handlers receive about a process."""

from ..._launch.events import ProcessEvent, ProcessExited, ProcessIO, ProcessStarted

__all__ = ["ProcessEvent", "ProcessExited", "ProcessIO", "ProcessStarted"]
