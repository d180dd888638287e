"""ROS 2's launch events and event handlers, as data: what happened to a process (it
started, wrote a line, exited), a shutdown asked for, and the handlers a description
registers for them (``RegisterEventHandler``, or an ``on_exit`` of a process).

A handler says which events it takes (:meth:`EventHandler.matches`) and what they start
(:meth:`EventHandler.entities`: actions, or what its callable returns); the description's
context visits those entities when the launch service reports the event
(``LaunchContext.react``). Events and handlers hold no state of the launch and are not
thread-safe (one thread, the launch's loop, uses them).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = [
    "Event",
    "EventHandler",
    "ExecutionComplete",
    "OnExecutionComplete",
    "OnProcessExit",
    "OnProcessIO",
    "OnProcessStart",
    "OnShutdown",
    "ProcessEvent",
    "ProcessExited",
    "ProcessIO",
    "ProcessStarted",
    "Shutdown",
    "entities_of",
]


class Event:
    """Something that happened while the launch ran."""

    name = "launch.events.Event"


class Shutdown(Event):
    """The launch is asked to end (``EmitEvent(event=Shutdown(reason=...))``, the
    ``Shutdown`` action, a process's ``on_exit``, or Ctrl-C): its processes are stopped."""

    name = "launch.events.Shutdown"

    def __init__(self, *, reason: str = "reason not given", due_to_sigint: bool = False,
                 **kwargs: Any) -> None:  # fmt: skip
        del kwargs
        self.reason, self.due_to_sigint = str(reason), due_to_sigint

    def __repr__(self) -> str:
        return f"Shutdown(reason={self.reason!r})"


class ProcessEvent(Event):
    """Something that happened to one process: the action that started it (``action``),
    its name (``talker-1``), command line, working directory, environment and pid."""

    name = "launch.events.process.ProcessEvent"

    def __init__(self, *, action: Any, name: str, cmd: Sequence[str], cwd: str | None = None,
                 env: Mapping[str, str] | None = None, pid: int) -> None:  # fmt: skip
        self.action, self.name, self.cmd = action, name, list(cmd)
        self.cwd, self.env, self.pid = cwd, dict(env or {}), pid

    @property
    def process_name(self) -> str:
        return self.name

    @property
    def execute_process_action(self) -> Any:
        return self.action


class ProcessStarted(ProcessEvent):
    name = "launch.events.process.ProcessStarted"


class ProcessExited(ProcessEvent):
    name = "launch.events.process.ProcessExited"

    def __init__(self, *, returncode: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.returncode = returncode


class ProcessIO(ProcessEvent):
    """A line a process wrote (``text``: its bytes, newline included; ``from_stdout`` or
    ``from_stderr`` as ``fd`` says)."""

    name = "launch.events.process.ProcessIO"

    def __init__(self, *, text: bytes, fd: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.text, self.fd = text, fd

    @property
    def from_stdout(self) -> bool:
        return self.fd == 1

    @property
    def from_stderr(self) -> bool:
        return self.fd == 2


class ExecutionComplete(ProcessEvent):
    """A process action's execution completed (its process ended)."""

    name = "launch.events.ExecutionComplete"

    def __init__(self, *, returncode: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.returncode = returncode


def entities_of(value: Any) -> list[Any]:
    """What a handler's actions or callable gave: none, one, or a list of them."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return list(value)
    return [value]


class EventHandler:
    """A handler: ``matches(event)``, then ``entities(event, context)`` to visit. With
    ``handle_once`` it is removed after its first event."""

    def __init__(self, *, handle_once: bool = False) -> None:
        self.handle_once = handle_once

    def matches(self, event: Event) -> bool:
        raise NotImplementedError

    def entities(self, event: Event, context: Any) -> list[Any]:
        raise NotImplementedError


def _call_or_list(value: Any, *args: Any) -> list[Any]:
    if callable(value) and not hasattr(value, "visit"):
        return entities_of(value(*args))
    return entities_of(value)


class _OnProcess(EventHandler):
    """A handler of one kind of process event, for one action (``target_action``: the
    action, or a predicate over actions), or for every process when it is None."""

    kind: type[ProcessEvent] = ProcessEvent

    def __init__(self, *, target_action: Any = None, handle_once: bool = False) -> None:
        super().__init__(handle_once=handle_once)
        self.target_action = target_action

    def matches(self, event: Event) -> bool:
        if not isinstance(event, self.kind):
            return False
        target = self.target_action
        if target is None:
            return True
        if callable(target) and not hasattr(target, "visit"):
            return bool(target(event.action))
        return event.action is target


class OnProcessStart(_OnProcess):
    kind = ProcessStarted

    def __init__(self, *, target_action: Any = None, on_start: Any, handle_once: bool = False,
                 **kwargs: Any) -> None:  # fmt: skip
        del kwargs
        super().__init__(target_action=target_action, handle_once=handle_once)
        self.on_start = on_start

    def entities(self, event: Event, context: Any) -> list[Any]:
        return _call_or_list(self.on_start, event, context)


class OnProcessExit(_OnProcess):
    kind = ProcessExited

    def __init__(self, *, target_action: Any = None, on_exit: Any, handle_once: bool = False,
                 **kwargs: Any) -> None:  # fmt: skip
        del kwargs
        super().__init__(target_action=target_action, handle_once=handle_once)
        self.on_exit = on_exit

    def entities(self, event: Event, context: Any) -> list[Any]:
        return _call_or_list(self.on_exit, event, context)


class OnExecutionComplete(_OnProcess):
    """For a process action (``ExecuteProcess``, ``Node``): when its process ended."""

    kind = ExecutionComplete

    def __init__(self, *, target_action: Any = None, on_completion: Any,
                 handle_once: bool = False, **kwargs: Any) -> None:  # fmt: skip
        del kwargs
        super().__init__(target_action=target_action, handle_once=handle_once)
        self.on_completion = on_completion

    def entities(self, event: Event, context: Any) -> list[Any]:
        return _call_or_list(self.on_completion, event, context)


class OnProcessIO(_OnProcess):
    """A line a process wrote: ``on_stdout`` or ``on_stderr(event)`` returns what to visit
    (``on_stdin`` is taken and never called: launch gives processes no input)."""

    kind = ProcessIO

    def __init__(self, *, target_action: Any = None,
                 on_stdin: Callable[[ProcessIO], Any] | None = None,
                 on_stdout: Callable[[ProcessIO], Any] | None = None,
                 on_stderr: Callable[[ProcessIO], Any] | None = None,
                 handle_once: bool = False, **kwargs: Any) -> None:  # fmt: skip
        del kwargs, on_stdin
        super().__init__(target_action=target_action, handle_once=handle_once)
        self.on_stdout, self.on_stderr = on_stdout, on_stderr

    def matches(self, event: Event) -> bool:
        if not super().matches(event):
            return False
        assert isinstance(event, ProcessIO)
        return (self.on_stdout if event.from_stdout else self.on_stderr) is not None

    def entities(self, event: Event, context: Any) -> list[Any]:
        assert isinstance(event, ProcessIO)
        call = self.on_stdout if event.from_stdout else self.on_stderr
        return entities_of(call(event)) if call is not None else []


class OnShutdown(EventHandler):
    """When the launch is asked to end (before its processes are stopped)."""

    def __init__(self, *, on_shutdown: Any, handle_once: bool = False, **kwargs: Any) -> None:
        del kwargs
        super().__init__(handle_once=handle_once)
        self.on_shutdown = on_shutdown

    def matches(self, event: Event) -> bool:
        return isinstance(event, Shutdown)

    def entities(self, event: Event, context: Any) -> list[Any]:
        return _call_or_list(self.on_shutdown, event, context)
