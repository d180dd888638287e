"""ROS 2's ``launch.event_handlers``, for ``RegisterEventHandler``: ``OnProcessStart``
(``on_start``), ``OnProcessExit`` (``on_exit``), ``OnProcessIO`` (``on_stdout``,
``on_stderr``), ``OnExecutionComplete`` (``on_completion``: a process action's process
ended) and ``OnShutdown`` (``on_shutdown``); each takes actions, or a callable returning
them, and ``target_action`` (an action, or a predicate over actions) where it names one."""

from .._launch.events import (
    EventHandler,
    OnExecutionComplete,
    OnProcessExit,
    OnProcessIO,
    OnProcessStart,
    OnShutdown,
)

__all__ = [
    "EventHandler",
    "OnExecutionComplete",
    "OnProcessExit",
    "OnProcessIO",
    "OnProcessStart",
    "OnShutdown",
]
