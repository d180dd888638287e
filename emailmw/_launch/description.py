"""ROS 2's Python launch descriptions, for ``emailmw launch FILE.launch.py``: the names,
arguments and behaviour of ``launch`` and ``launch_ros`` that launch files use, evaluated
into the processes to start (:func:`evaluate`, no process started here).

Written for emailmw (ROS 2's ``launch`` is not on PyPI). A description is evaluated once,
in order, as ``ros2 launch`` visits it: launch configurations (``DeclareLaunchArgument``,
``SetLaunchConfiguration``, the command line's ``name:=value``), substitutions performed
when the action that holds them is visited, conditions (``IfCondition``,
``UnlessCondition``), scopes (``GroupAction``, ``IncludeLaunchDescription``: what is set
inside stays inside), pushed namespaces, environment variables and global parameters (for
the processes after them in their scope), ``TimerAction`` (its processes start after its
period). Event handlers (``RegisterEventHandler``, a process's ``on_exit``) are registered
with the scope they were visited in; when the launch service reports an event
(``_launch/events.py``: a process started, wrote a line, exited; a shutdown) the context
visits what they return in that scope (:meth:`LaunchContext.react`), which may start more
processes or ask for a shutdown (``EmitEvent(event=Shutdown())``, ``Shutdown``). Not
thread-safe (a description is evaluated by one thread, the launch's loop).
"""

from __future__ import annotations

import importlib.util
import math
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .._core.errors import EmailMWError
from .events import (
    Event,
    EventHandler,
    ExecutionComplete,
    OnProcessExit,
    ProcessExited,
)
from .events import Shutdown as ShutdownEvent

__all__ = [
    "Action",
    "LaunchContext",
    "LaunchDescription",
    "LaunchError",
    "LaunchProcess",
    "Substitution",
    "Words",
    "evaluate",
    "launch_context",
    "load_python_launch_file",
    "node_argv",
    "package_share",
    "parameter_text",
    "read_frontends_with",
]


class LaunchError(EmailMWError):
    """A launch file asks for something unknown or unsupported (one line, naming it)."""


@dataclass(frozen=True)
class LaunchProcess:
    """One process of a launch: its label (``talker-1``), argument vector, the environment
    variables it gets on top of the launch's, the seconds to wait before starting it, and
    for a node the package and executable (checked before anything starts)."""

    label: str
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    delay: float = 0.0
    node: tuple[str, str] | None = None
    #: the action that started it (what an event handler's ``target_action`` names)
    origin: Any = field(default=None, compare=False, repr=False)
    #: started again after ``respawn_delay`` s when it ends while the launch runs
    respawn: bool = False
    respawn_delay: float = 0.0
    respawn_max_retries: int = -1
    #: after a SIGINT, seconds before SIGTERM; after that, before SIGKILL
    sigterm_timeout: float = 5.0
    sigkill_timeout: float = 5.0


# ----------------------------------------------------------------------------- context


@dataclass
class _Scope:
    configurations: dict[str, str]
    environment: dict[str, str]
    namespace: str
    parameters: dict[str, Any]

    def copy(self) -> _Scope:
        return _Scope(dict(self.configurations), dict(self.environment), self.namespace,
                      dict(self.parameters))  # fmt: skip


@dataclass
class _Registered:
    """An event handler with the scope and file it was registered in."""

    handler: EventHandler
    scope: _Scope
    file: Path | None


class LaunchContext:
    """What a description is evaluated in: the launch configurations, the environment
    variables set for processes, the pushed ROS namespace and global parameters, the
    launch file being read, the processes found so far, the event handlers registered,
    the event being handled (``locals``: ``event``) and a shutdown asked for."""

    def __init__(self, arguments: Mapping[str, str] | None = None) -> None:
        self._scope = _Scope(dict(arguments or {}), {}, "", {})
        self._scopes: list[_Scope] = []
        self.file: Path | None = None
        self.delay = 0.0
        self.processes: list[LaunchProcess] = []
        self.handlers: list[_Registered] = []
        self.locals: dict[str, Any] = {}
        self.shutdown: ShutdownEvent | None = None

    @property
    def launch_configurations(self) -> dict[str, str]:
        return self._scope.configurations

    @property
    def environment(self) -> dict[str, str]:
        """The variables set for the processes started from here on."""
        return self._scope.environment

    def push(self) -> None:
        """Open a scope: what is set in it is forgotten at :meth:`pop`."""
        self._scopes.append(self._scope)
        self._scope = self._scope.copy()

    def pop(self) -> None:
        self._scope = self._scopes.pop()

    @property
    def namespace(self) -> str:
        return self._scope.namespace

    def push_namespace(self, namespace: str) -> None:
        """``PushRosNamespace``: relative to the current one unless absolute."""
        namespace = namespace.strip()
        if not namespace:
            return
        if namespace.startswith("/"):
            self._scope.namespace = namespace.rstrip("/")
        else:
            self._scope.namespace = f"{self._scope.namespace}/{namespace.strip('/')}"

    @property
    def global_parameters(self) -> dict[str, Any]:
        return self._scope.parameters

    def add(self, label: str, argv: Sequence[str], node: tuple[str, str] | None = None,
            **options: Any) -> None:  # fmt: skip
        """A process to start (``options``: :class:`LaunchProcess`'s ``origin``,
        ``respawn``...)."""
        number = len(self.processes) + 1
        self.processes.append(LaunchProcess(f"{label}-{number}", tuple(argv),
                                            dict(self.environment), self.delay, node,
                                            **options))  # fmt: skip

    def register(self, handler: EventHandler) -> None:
        """``RegisterEventHandler``: ``handler`` reacts to events from now on, in this scope."""
        self.handlers.append(_Registered(handler, self._scope.copy(), self.file))

    def unregister(self, handler: EventHandler) -> None:
        self.handlers = [r for r in self.handlers if r.handler is not handler]

    def request_shutdown(self, event: ShutdownEvent) -> None:
        """Ask the launch to end (the first reason is kept)."""
        if self.shutdown is None:
            self.shutdown = event

    def react(self, event: Event) -> list[LaunchProcess]:
        """Visit what the handlers that match ``event`` return, each in the scope it was
        registered in, with ``event`` in :attr:`locals`: the processes this adds (their
        ``delay`` counts from now). A process's exit also completes its execution
        (``OnExecutionComplete``)."""
        before = len(self.processes)
        events = [event]
        if isinstance(event, ProcessExited):
            events.append(ExecutionComplete(
                returncode=event.returncode, action=event.action, name=event.name,
                cmd=event.cmd, cwd=event.cwd, env=event.env, pid=event.pid))  # fmt: skip
        for happened in events:
            for registered in list(self.handlers):
                if not registered.handler.matches(happened):
                    continue
                if registered.handler.handle_once:
                    self.unregister(registered.handler)
                self._scopes.append(self._scope)
                outer_file, outer_delay = self.file, self.delay
                self._scope, self.file, self.delay = registered.scope.copy(), registered.file, 0.0
                self.locals["event"] = happened
                try:
                    for entity in registered.handler.entities(happened, self):
                        _visit(self, entity)
                finally:
                    self._scope = self._scopes.pop()
                    self.file, self.delay = outer_file, outer_delay
                    self.locals.pop("event", None)
        return self.processes[before:]


# ------------------------------------------------------------------------ substitutions


class Substitution:
    """A value known when the action holding it is visited (``perform``)."""

    def perform(self, context: LaunchContext) -> str:
        raise NotImplementedError


SomeSubstitutions = str | Substitution | Iterable[str | Substitution]


def perform(context: LaunchContext, value: Any) -> str:
    """``value`` (a text, a substitution, or a list of them, joined) as text."""
    if isinstance(value, Substitution):
        return value.perform(context)
    if isinstance(value, (str, int, float, bool)):
        return str(value)
    if isinstance(value, os.PathLike):
        return str(os.fspath(value))
    if isinstance(value, Iterable):
        return "".join(perform(context, item) for item in value)
    raise LaunchError(f"expected a text or a substitution, got {value!r}")


class Words(Substitution):
    """Several arguments written as one text (an XML ``args`` or ``cmd``): split as a
    shell splits words where a list of arguments is expected."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def perform(self, context: LaunchContext) -> str:
        return "" if self.inner is None else perform(context, self.inner)


def _arguments(context: LaunchContext, items: Iterable[Any]) -> list[str]:
    """A list of arguments, each a text or substitution (:class:`Words`: several)."""
    out: list[str] = []
    for item in items:
        if isinstance(item, Words):
            out += shlex.split(item.perform(context))
        else:
            out.append(perform(context, item))
    return out


class TextSubstitution(Substitution):
    def __init__(self, *, text: str) -> None:
        self.text = text

    def perform(self, context: LaunchContext) -> str:
        return self.text


class LaunchConfiguration(Substitution):
    """The launch configuration ``variable_name`` (an argument declared or given on the
    command line), else ``default``."""

    def __init__(self, variable_name: SomeSubstitutions, *, default: Any = None) -> None:
        self.variable_name, self.default = variable_name, default

    def perform(self, context: LaunchContext) -> str:
        name = perform(context, self.variable_name)
        found = context.launch_configurations.get(name)
        if found is not None:
            return found
        if self.default is not None:
            return perform(context, self.default)
        raise LaunchError(f"launch configuration {name!r} is not set: declare it "
                          f"(DeclareLaunchArgument) or give {name}:=VALUE")  # fmt: skip


class EnvironmentVariable(Substitution):
    def __init__(self, name: SomeSubstitutions, *, default_value: Any = None) -> None:
        self.name, self.default_value = name, default_value

    def perform(self, context: LaunchContext) -> str:
        name = perform(context, self.name)
        value = context.environment.get(name, os.environ.get(name))
        if value is not None:
            return value
        if self.default_value is not None:
            return perform(context, self.default_value)
        raise LaunchError(f"environment variable {name} is not set")


class PathJoinSubstitution(Substitution):
    def __init__(self, substitutions: Iterable[Any]) -> None:
        self.substitutions = list(substitutions)

    def perform(self, context: LaunchContext) -> str:
        return os.path.join(*(perform(context, item) for item in self.substitutions))


class PythonExpression(Substitution):
    """The text of a Python expression's value (``math`` in scope, as ROS 2's)."""

    def __init__(self, expression: Any) -> None:
        self.expression = expression

    def perform(self, context: LaunchContext) -> str:
        text = perform(context, self.expression)
        try:
            value = eval(text, {"math": math, **vars(math)})  # noqa: S307 - as ROS 2's
        except Exception as exc:  # noqa: BLE001 - the user's expression: one line
            raise LaunchError(f"PythonExpression {text!r}: {type(exc).__name__}: {exc}") from None
        return str(value)


class FindExecutable(Substitution):
    """The path of a program on ``PATH``."""

    def __init__(self, *, name: SomeSubstitutions) -> None:
        self.name = name

    def perform(self, context: LaunchContext) -> str:
        name = perform(context, self.name)
        found = shutil.which(name, path=context.environment.get("PATH"))
        if found is None:
            raise LaunchError(f"FindExecutable: no {name} on PATH")
        return found


class Command(Substitution):
    """What a command prints (``xacro robot.urdf.xacro``: a robot description), run when
    the action holding it is visited; its failure is one line."""

    def __init__(self, command: Any, *, on_stderr: str = "fail") -> None:
        self.command, self.on_stderr = command, on_stderr

    def perform(self, context: LaunchContext) -> str:
        text = perform(context, self.command)
        try:
            done = subprocess.run(shlex.split(text), capture_output=True, text=True,
                                  timeout=300, check=False,
                                  env={**os.environ, **context.environment})  # fmt: skip
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise LaunchError(f"Command {text!r}: {exc}") from None
        if done.returncode != 0 or (done.stderr.strip() and self.on_stderr == "fail"):
            said = (done.stderr.strip() or f"exit status {done.returncode}").splitlines()[-1]
            raise LaunchError(f"Command {text!r} failed: {said}")
        return done.stdout


class ThisLaunchFileDir(Substitution):
    def perform(self, context: LaunchContext) -> str:
        if context.file is None:
            raise LaunchError("ThisLaunchFileDir outside a launch file")
        return str(context.file.parent)


class ThisLaunchFile(Substitution):
    def perform(self, context: LaunchContext) -> str:
        if context.file is None:
            raise LaunchError("ThisLaunchFile outside a launch file")
        return str(context.file)


class LocalSubstitution(Substitution):
    """What the event being handled holds: ``LocalSubstitution('event.reason')``,
    ``'event.returncode'``, ``'event.text'``..."""

    def __init__(self, expression: str, description: str | None = None) -> None:
        del description
        self.expression = expression

    def perform(self, context: LaunchContext) -> str:
        first, *rest = self.expression.split(".")
        if first not in context.locals:
            raise LaunchError(f"LocalSubstitution({self.expression!r}): no {first!r} here "
                              "(it is set while an event handler runs)")  # fmt: skip
        value = context.locals[first]
        for attribute in rest:
            if not hasattr(value, attribute):
                raise LaunchError(f"LocalSubstitution({self.expression!r}): "
                                  f"{type(value).__name__} has no {attribute!r}")  # fmt: skip
            value = getattr(value, attribute)
        if isinstance(value, bytes):
            return value.decode(errors="replace")
        return str(value)


def package_share(package: str) -> Path:
    """A package's share directory as the ament index has it: ``share/PACKAGE`` under
    this Python's prefix or under each ``AMENT_PREFIX_PATH`` entry."""
    prefixes = [sys.prefix, *filter(None, os.environ.get("AMENT_PREFIX_PATH", "").split(":"))]
    for prefix in prefixes:
        candidate = Path(prefix) / "share" / package
        if candidate.is_dir():
            return candidate
    raise LaunchError(
        f"package {package!r} has no share directory (looked in share/{package} under "
        f"{', '.join(prefixes)}): install it, or add its prefix to AMENT_PREFIX_PATH"
    )


class FindPackageShare(Substitution):
    def __init__(self, package: SomeSubstitutions) -> None:
        self.package = package

    def perform(self, context: LaunchContext) -> str:
        return str(package_share(perform(context, self.package)))


class FindPackagePrefix(Substitution):
    def __init__(self, package: SomeSubstitutions) -> None:
        self.package = package

    def perform(self, context: LaunchContext) -> str:
        return str(package_share(perform(context, self.package)).parent.parent)


# --------------------------------------------------------------------------- conditions


def _truth(text: str, what: str) -> bool:
    value = text.strip().lower()
    if value in ("true", "1"):
        return True
    if value in ("false", "0"):
        return False
    raise LaunchError(f"{what}: expected true, false, 1 or 0, got {text!r}")


class Condition:
    def evaluate(self, context: LaunchContext) -> bool:
        raise NotImplementedError


class IfCondition(Condition):
    def __init__(self, predicate_expression: Any) -> None:
        self.predicate = predicate_expression

    def evaluate(self, context: LaunchContext) -> bool:
        return _truth(perform(context, self.predicate), "IfCondition")


class UnlessCondition(Condition):
    def __init__(self, predicate_expression: Any) -> None:
        self.predicate = predicate_expression

    def evaluate(self, context: LaunchContext) -> bool:
        return not _truth(perform(context, self.predicate), "UnlessCondition")


class LaunchConfigurationEquals(Condition):
    def __init__(self, launch_configuration_name: str, expected_value: Any) -> None:
        self.name, self.expected = launch_configuration_name, expected_value

    def evaluate(self, context: LaunchContext) -> bool:
        return context.launch_configurations.get(self.name) == perform(context, self.expected)


class LaunchConfigurationNotEquals(LaunchConfigurationEquals):
    def evaluate(self, context: LaunchContext) -> bool:
        return not super().evaluate(context)


# ------------------------------------------------------------------------------ actions


class Action:
    """One entity of a description; ``condition``: visited only when it holds."""

    def __init__(self, *, condition: Condition | None = None) -> None:
        self.condition = condition

    def visit(self, context: LaunchContext) -> None:
        if self.condition is None or self.condition.evaluate(context):
            self.execute(context)

    def execute(self, context: LaunchContext) -> None:
        raise NotImplementedError


class LaunchDescription:
    """The entities of a launch, in order (``generate_launch_description`` returns one)."""

    def __init__(self, initial_entities: Iterable[Any] | None = None, *,
                 deprecated_reason: str | None = None) -> None:  # fmt: skip
        del deprecated_reason
        self.entities: list[Any] = list(initial_entities or [])

    def add_action(self, action: Any) -> None:
        self.entities.append(action)

    add_entity = add_action

    @property
    def describe_sub_entities(self) -> list[Any]:
        return list(self.entities)

    def visit(self, context: LaunchContext) -> None:
        for entity in self.entities:
            _visit(context, entity)


def _visit(context: LaunchContext, entity: Any) -> None:
    if isinstance(entity, (Action, LaunchDescription)):
        entity.visit(context)
        return
    raise LaunchError(
        f"{type(entity).__module__}.{type(entity).__name__} is not supported by emailmw "
        "launch (docs/ros-users.md lists what is)"
    )


class DeclareLaunchArgument(Action):
    def __init__(self, name: str, *, default_value: Any = None, description: str = "",
                 choices: Sequence[str] | None = None, **kwargs: Any) -> None:  # fmt: skip
        super().__init__(**kwargs)
        self.name, self.default_value = name, default_value
        self.description, self.choices = description, choices

    def execute(self, context: LaunchContext) -> None:
        configurations = context.launch_configurations
        if self.name not in configurations:
            if self.default_value is None:
                raise LaunchError(f"argument {self.name!r} has no default: give "
                                  f"{self.name}:=VALUE")  # fmt: skip
            configurations[self.name] = perform(context, self.default_value)
        value = configurations[self.name]
        if self.choices is not None and value not in self.choices:
            raise LaunchError(f"argument {self.name}:={value}: expected one of "
                              f"{', '.join(self.choices)}")  # fmt: skip


class _Setter(Action):
    """Sets ``name`` to ``value`` (both performed) in the mapping of the scope
    :meth:`target` names."""

    def __init__(self, name: Any, value: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.name, self.value = name, value

    def target(self, context: LaunchContext) -> dict[str, str]:
        raise NotImplementedError

    def execute(self, context: LaunchContext) -> None:
        self.target(context)[perform(context, self.name)] = perform(context, self.value)


class SetLaunchConfiguration(_Setter):
    def target(self, context: LaunchContext) -> dict[str, str]:
        return context.launch_configurations


class SetEnvironmentVariable(_Setter):
    """A variable the processes started after it in its scope get."""

    def target(self, context: LaunchContext) -> dict[str, str]:
        return context.environment


class LogInfo(Action):
    def __init__(self, *, msg: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.msg = msg

    def execute(self, context: LaunchContext) -> None:
        print(f"[INFO] [launch.user]: {perform(context, self.msg)}", flush=True)


class GroupAction(Action):
    """Its actions, in a scope of their own unless ``scoped=False``; ``launch_configurations``
    set first."""

    def __init__(self, actions: Iterable[Any], *, scoped: bool = True, forwarding: bool = True,
                 launch_configurations: Mapping[Any, Any] | None = None,
                 **kwargs: Any) -> None:  # fmt: skip
        super().__init__(**kwargs)
        self.actions, self.scoped = list(actions), scoped
        self.forwarding = forwarding
        self.launch_configurations = dict(launch_configurations or {})

    def execute(self, context: LaunchContext) -> None:
        if self.scoped:
            context.push()
        try:
            if not self.forwarding:
                context.launch_configurations.clear()
            for name, value in self.launch_configurations.items():
                context.launch_configurations[perform(context, name)] = perform(context, value)
            for action in self.actions:
                _visit(context, action)
        finally:
            if self.scoped:
                context.pop()


class TimerAction(Action):
    """Its actions' processes start ``period`` seconds after the launch started."""

    def __init__(self, *, period: Any, actions: Iterable[Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.period, self.actions = period, list(actions)

    def execute(self, context: LaunchContext) -> None:
        try:
            period = float(perform(context, self.period))
        except ValueError:
            raise LaunchError(f"TimerAction: period is not a number: {self.period!r}") from None
        before = context.delay
        context.delay = before + period
        try:
            for action in self.actions:
                _visit(context, action)
        finally:
            context.delay = before


class OpaqueFunction(Action):
    """``function(context, *args, **kwargs)``, and the actions it returns."""

    def __init__(self, *, function: Callable[..., Any], args: Sequence[Any] | None = None,
                 kwargs: Mapping[str, Any] | None = None, **more: Any) -> None:  # fmt: skip
        super().__init__(**more)
        self.function, self.args, self.kwargs = function, list(args or []), dict(kwargs or {})

    def execute(self, context: LaunchContext) -> None:
        for action in self.function(context, *self.args, **self.kwargs) or []:
            _visit(context, action)


class _ProcessAction(Action):
    """What ``ExecuteProcess`` and ``Node`` share: ``on_exit`` (actions, or a callable of
    the exit event and the context, run when the process ends: ``Shutdown()`` ends the
    launch), ``respawn`` (start it again ``respawn_delay`` s after it ended, at most
    ``respawn_max_retries`` times, -1: always, unless the launch is ending),
    ``sigterm_timeout`` and ``sigkill_timeout`` (how long a stopped process gets after
    SIGINT and after SIGTERM). ``output``, ``emulate_tty``, ``log_cmd``: every line goes
    to the screen, prefixed, as ``output='screen'``."""

    def __init__(self, *, on_exit: Any = None, respawn: Any = False, respawn_delay: Any = None,
                 respawn_max_retries: int = -1, sigterm_timeout: Any = 5,
                 sigkill_timeout: Any = 5, output: Any = "log", emulate_tty: Any = False,
                 log_cmd: Any = False, cached_output: Any = False,
                 **kwargs: Any) -> None:  # fmt: skip
        del output, emulate_tty, log_cmd, cached_output
        super().__init__(**kwargs)
        self.respawn, self.respawn_delay = respawn, respawn_delay
        self.respawn_max_retries = respawn_max_retries
        self.sigterm_timeout, self.sigkill_timeout = sigterm_timeout, sigkill_timeout
        self.on_exit_handler = (
            OnProcessExit(target_action=self, on_exit=on_exit) if on_exit is not None else None
        )

    def _add(self, context: LaunchContext, label: str, argv: Sequence[str],
             node: tuple[str, str] | None = None) -> None:  # fmt: skip
        handler = self.on_exit_handler
        if handler is not None and all(r.handler is not handler for r in context.handlers):
            context.register(handler)
        respawn = self.respawn
        if not isinstance(respawn, bool):
            respawn = _truth(perform(context, respawn), "respawn")
        context.add(label, argv, node, origin=self, respawn=respawn,
                    respawn_delay=_seconds(context, self.respawn_delay, "respawn_delay", 0.0),
                    respawn_max_retries=int(self.respawn_max_retries),
                    sigterm_timeout=_seconds(context, self.sigterm_timeout, "sigterm_timeout", 5),
                    sigkill_timeout=_seconds(context, self.sigkill_timeout, "sigkill_timeout",
                                             5))  # fmt: skip


def _seconds(context: LaunchContext, value: Any, what: str, default: float) -> float:
    if value is None:
        return default
    try:
        seconds = float(value if isinstance(value, (int, float)) else perform(context, value))
    except ValueError:
        raise LaunchError(f"{what}: not a number of seconds: {value!r}") from None
    if seconds < 0:
        raise LaunchError(f"{what}: {seconds:g} is negative")
    return seconds


class ExecuteProcess(_ProcessAction):
    def __init__(self, *, cmd: Iterable[Any], name: Any = None, cwd: Any = None,
                 additional_env: Mapping[Any, Any] | None = None, shell: bool = False,
                 **kwargs: Any) -> None:  # fmt: skip
        super().__init__(**kwargs)
        self.cmd, self.name, self.cwd, self.shell = list(cmd), name, cwd, shell
        self.additional_env = dict(additional_env or {})

    def execute(self, context: LaunchContext) -> None:
        argv = _arguments(context, self.cmd)
        if not argv or not argv[0]:
            raise LaunchError("ExecuteProcess: cmd is empty")
        if self.shell:
            argv = ["/bin/sh", "-c", " ".join(argv)]
        if self.cwd is not None:
            directory = perform(context, self.cwd)
            argv = [sys.executable, "-c", "import os, sys; os.chdir(sys.argv[1]); "
                    "os.execvp(sys.argv[2], sys.argv[2:])", directory, *argv]  # fmt: skip
        context.push()
        try:
            for key, value in self.additional_env.items():
                context.environment[perform(context, key)] = perform(context, value)
            name = perform(context, self.name) if self.name is not None else None
            self._add(context, name or Path(argv[0] if not self.shell else "sh").name, argv)
        finally:
            context.pop()


class Shutdown(Action):
    """Ends the launch: every process is asked to stop (SIGINT, then SIGTERM and SIGKILL
    after their timeouts)."""

    def __init__(self, *, reason: Any = "reason not given", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.reason = reason

    def execute(self, context: LaunchContext) -> None:
        context.request_shutdown(ShutdownEvent(reason=perform(context, self.reason)))


class RegisterEventHandler(Action):
    """``event_handler`` (``launch.event_handlers``) reacts to events from here on, in the
    scope it was visited in."""

    def __init__(self, event_handler: EventHandler, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not isinstance(event_handler, EventHandler):
            raise LaunchError(f"RegisterEventHandler: {type(event_handler).__name__} is not "
                              "an event handler of emailmw.launch.event_handlers")  # fmt: skip
        self.event_handler = event_handler

    @property
    def handler(self) -> EventHandler:
        return self.event_handler

    def execute(self, context: LaunchContext) -> None:
        context.register(self.event_handler)


class UnregisterEventHandler(RegisterEventHandler):
    def execute(self, context: LaunchContext) -> None:
        context.unregister(self.event_handler)


class EmitEvent(Action):
    """``EmitEvent(event=Shutdown(...))`` ends the launch; other events are not supported
    (one line naming them)."""

    def __init__(self, *, event: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.event = event

    def execute(self, context: LaunchContext) -> None:
        if isinstance(self.event, ShutdownEvent):
            context.request_shutdown(self.event)
            return
        kind = type(self.event)
        raise LaunchError(f"EmitEvent of {kind.__module__}.{kind.__name__} is not supported by "
                          "emailmw launch (Shutdown is)")  # fmt: skip


# ------------------------------------------------------------------ includes, launch_ros


class LaunchDescriptionSource:
    """A launch file to include: Python (``.launch.py``), XML or YAML, by its path."""

    def __init__(self, launch_file_path: Any) -> None:
        self.launch_file_path = launch_file_path

    def description(self, path: Path) -> LaunchDescription:
        if path.suffix == ".py":
            return load_python_launch_file(path)
        if _frontend is None:
            raise LaunchError(f"{path}: XML and YAML launch files are not readable here")
        return _frontend(path)


#: reads an XML or YAML launch file (``frontend.frontend_description``, which registers
#: itself with :func:`read_frontends_with`: the layer above, passed down)
_frontend: Callable[[Path], LaunchDescription] | None = None


def read_frontends_with(reader: Callable[[Path], LaunchDescription]) -> None:
    """How an included XML or YAML launch file is read."""
    global _frontend
    _frontend = reader


PythonLaunchDescriptionSource = LaunchDescriptionSource
AnyLaunchDescriptionSource = LaunchDescriptionSource
FrontendLaunchDescriptionSource = LaunchDescriptionSource
XMLLaunchDescriptionSource = LaunchDescriptionSource
YAMLLaunchDescriptionSource = LaunchDescriptionSource


class IncludeLaunchDescription(Action):
    """Another launch file, in a scope of its own, with ``launch_arguments`` set first."""

    def __init__(self, launch_description_source: Any, *,
                 launch_arguments: Iterable[tuple[Any, Any]] | Mapping[Any, Any] | None = None,
                 **kwargs: Any) -> None:  # fmt: skip
        super().__init__(**kwargs)
        self.source = launch_description_source
        items = launch_arguments.items() if isinstance(launch_arguments, Mapping) else (
            launch_arguments or [])  # fmt: skip
        self.launch_arguments = list(items)

    def execute(self, context: LaunchContext) -> None:
        if isinstance(self.source, LaunchDescription):
            description, path = self.source, context.file
        else:
            source = self.source
            if not isinstance(source, LaunchDescriptionSource):
                source = LaunchDescriptionSource(source)
            path = Path(perform(context, source.launch_file_path))
            if context.file is not None and not path.is_absolute():
                path = context.file.parent / path
            description = source.description(path)
        values = [(perform(context, k), perform(context, v)) for k, v in self.launch_arguments]
        outer = context.file
        context.push()
        try:
            context.file = path
            context.launch_configurations.update(values)
            description.visit(context)
        finally:
            context.pop()
            context.file = outer


def parameter_text(value: Any) -> str:
    """A parameter value as ``-p name:=value`` takes it (YAML)."""
    if isinstance(value, str):
        return value
    dumped: str = yaml.safe_dump(value, default_flow_style=True, width=1 << 30)
    return dumped.removesuffix("\n...\n").strip()


def _flat(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, Mapping):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def node_argv(
    package: str,
    executable: str,
    *,
    name: str | None = None,
    namespace: str | None = None,
    parameters: Sequence[tuple[str, Any]] = (),
    params_files: Sequence[str] = (),
    remappings: Sequence[tuple[str, str]] = (),
    arguments: Sequence[str] = (),
    ros_arguments: Sequence[str] = (),
) -> tuple[str, ...]:
    """The argument vector that runs a node: ``emailmw run package executable`` with its
    arguments and ``--ros-args`` for the name, namespace, parameters and remappings."""
    ros: list[str] = []
    if name:
        ros += ["-r", f"__node:={name}"]
    if namespace:
        ros += ["-r", f"__ns:=/{namespace.strip('/')}"]
    for path in params_files:
        ros += ["--params-file", path]
    for key, value in parameters:
        ros += ["-p", f"{key}:={parameter_text(value)}"]
    for source, target in remappings:
        ros += ["-r", f"{source}:={target}"]
    ros += list(ros_arguments)
    return (sys.executable, "-m", "emailmw", "run", package, executable, *arguments,
            *(["--ros-args", *ros] if ros else []))  # fmt: skip


class Node(_ProcessAction):
    """``launch_ros``'s ``Node``: ``emailmw run package executable`` with its name,
    namespace (under the pushed one), parameters (mappings, files, and the global ones set
    before it), remappings and arguments."""

    def __init__(self, *, executable: Any = None, package: Any = None, name: Any = None,
                 namespace: Any = None, exec_name: Any = None,
                 parameters: Iterable[Any] | None = None,
                 remappings: Iterable[tuple[Any, Any]] | None = None,
                 ros_arguments: Iterable[Any] | None = None,
                 arguments: Iterable[Any] | None = None, output: Any = "log",
                 additional_env: Mapping[Any, Any] | None = None,
                 node_executable: Any = None, node_name: Any = None,
                 node_namespace: Any = None, **kwargs: Any) -> None:  # fmt: skip
        super().__init__(output=output, **kwargs)
        self.executable = executable if executable is not None else node_executable
        self.package, self.exec_name = package, exec_name
        self.name = name if name is not None else node_name
        self.namespace = namespace if namespace is not None else node_namespace
        self.parameters = list(parameters or [])
        self.remappings = list(remappings or [])
        self.ros_arguments = list(ros_arguments or [])
        self.arguments = list(arguments or [])
        self.additional_env = dict(additional_env or {})

    def execute(self, context: LaunchContext) -> None:
        if self.package is None or self.executable is None:
            raise LaunchError("Node: needs package and executable")
        package = perform(context, self.package)
        executable = perform(context, self.executable)
        name = perform(context, self.name) if self.name is not None else None
        namespace = perform(context, self.namespace) if self.namespace is not None else ""
        if not namespace.startswith("/"):
            namespace = f"{context.namespace}/{namespace.strip('/')}".rstrip("/")
        values = list(context.global_parameters.items())
        files: list[str] = []
        for item in self.parameters:
            if isinstance(item, Mapping):
                flat = _flat({perform(context, k): v for k, v in item.items()})
                values += [(key, _value(context, value)) for key, value in flat.items()]
            else:
                files.append(perform(context, getattr(item, "param_file", item)))
        remappings = [(perform(context, s), perform(context, t)) for s, t in self.remappings]
        argv = node_argv(
            package, executable, name=name, namespace=namespace, parameters=values,
            params_files=files, remappings=remappings,
            arguments=_arguments(context, self.arguments),
            ros_arguments=_arguments(context, self.ros_arguments),
        )  # fmt: skip
        label = perform(context, self.exec_name) if self.exec_name is not None else None
        context.push()
        try:
            for key, value in self.additional_env.items():
                context.environment[perform(context, key)] = perform(context, value)
            self._add(context, label or name or executable, argv, (package, executable))
        finally:
            context.pop()


def _value(context: LaunchContext, value: Any) -> Any:
    """A parameter value of a mapping: substitutions performed (then read as YAML, as
    launch_ros does), lists item by item, anything else as it is."""
    if isinstance(value, Substitution) or (
        isinstance(value, list) and value and all(isinstance(v, Substitution) for v in value)
    ):
        return yaml.safe_load(perform(context, value))
    if isinstance(value, (list, tuple)):
        return [_value(context, v) for v in value]
    return value


class ParameterFile:
    """``launch_ros``'s ``ParameterFile``: a params file given to a node."""

    def __init__(self, param_file: Any, allow_substs: bool = False) -> None:
        del allow_substs
        self.param_file = param_file


class PushRosNamespace(Action):
    def __init__(self, namespace: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.namespace = namespace

    def execute(self, context: LaunchContext) -> None:
        context.push_namespace(perform(context, self.namespace))


PushROSNamespace = PushRosNamespace


class SetParameter(Action):
    """A parameter every node started after it in its scope gets."""

    def __init__(self, name: Any, value: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.name, self.value = name, value

    def execute(self, context: LaunchContext) -> None:
        context.global_parameters[perform(context, self.name)] = _value(context, self.value)


# ------------------------------------------------------------------------------- files


def load_python_launch_file(path: Path) -> LaunchDescription:
    """The description a Python launch file's ``generate_launch_description()`` returns;
    a :class:`LaunchError` in one line for a file that cannot be read or run."""
    name = f"emailmw_launch_file_{abs(hash(str(path)))}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None or not path.is_file():
        raise LaunchError(f"{path}: no such launch file")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
        generate = getattr(module, "generate_launch_description", None)
        if generate is None:
            raise LaunchError(f"{path}: has no generate_launch_description()")
        description = generate()
    except (LaunchError, KeyboardInterrupt):
        raise
    except ImportError as exc:
        missing = getattr(exc, "name", None) or str(exc)
        ros = str(missing).split(".")[0] in ("launch", "launch_ros", "rclpy")
        hint = (" (rename launch, launch_ros and rclpy to emailmw.launch, "
                "emailmw.launch_ros and emailmw: docs/ros-users.md)") if ros else ""  # fmt: skip
        raise LaunchError(f"{path}: cannot import {missing}{hint}") from None
    except Exception as exc:  # noqa: BLE001 - the user's file: where, in one line
        where = _line_of(exc, path)
        raise LaunchError(f"{path}{where}: {type(exc).__name__}: {exc}") from None
    if not isinstance(description, LaunchDescription):
        raise LaunchError(f"{path}: generate_launch_description() returned "
                          f"{type(description).__name__}, not a LaunchDescription")  # fmt: skip
    return description


def _line_of(exc: BaseException, path: Path) -> str:
    trace = exc.__traceback__
    line = None
    while trace is not None:
        if Path(trace.tb_frame.f_code.co_filename) == path:
            line = trace.tb_lineno
        trace = trace.tb_next
    return f": line {line}" if line is not None else ""


def evaluate(description: LaunchDescription, arguments: Mapping[str, str],
             file: Path | None = None) -> list[LaunchProcess]:  # fmt: skip
    """The processes ``description`` starts, with the command line's ``arguments``."""
    return launch_context(description, arguments, file).processes


def launch_context(description: LaunchDescription, arguments: Mapping[str, str],
                   file: Path | None = None) -> LaunchContext:  # fmt: skip
    """``description`` visited with the command line's ``arguments``: the context holding
    the processes it starts at once and the event handlers it registered."""
    context = LaunchContext(arguments)
    context.file = file
    description.visit(context)
    return context
