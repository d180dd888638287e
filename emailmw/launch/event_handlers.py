"""ROS 2's ``launch.event_handlers``, by name: emailmw launch does not react to events
while processes run, so ``RegisterEventHandler`` with one of these is refused in one line
when the launch file is read."""

from typing import Any

__all__ = ["OnProcessExit", "OnProcessIO", "OnProcessStart", "OnShutdown"]


class _EventHandler:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args, self.kwargs = args, kwargs


class OnProcessExit(_EventHandler):
    pass


class OnProcessStart(_EventHandler):
    pass


class OnProcessIO(_EventHandler):
    pass


class OnShutdown(_EventHandler):
    pass
