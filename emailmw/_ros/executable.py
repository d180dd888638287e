"""What the executors run and what a node entity asks of its node: :class:`Executable`
(rclpy's ``Waitable``), :class:`NodeExecutor`, and :class:`NodeLike`, the part of a
:class:`~emailmw.node.Node` its entities use (they take it as that, below the node)."""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from .._core.errors import (
    ArgumentTypeError,
)
from .._core.log import get_logger
from .._core.ros_logging import RcutilsLogger
from .._core.waitables import Waitable
from .._delivery.context import Context
from .callback_groups import CallbackGroup

__all__ = ["Executable", "NodeExecutor", "NodeLike", "Work"]

_log = get_logger("node")
T = TypeVar("T")


class NodeExecutor(Protocol):
    """What a node asks of the executor it is in (``_executor.Executor`` is one)."""

    def wake(self) -> None: ...

    def remove_node(self, node: Any) -> None: ...


#: one callback ready to run, with its arguments bound (it may return a coroutine: the
#: executor then drives it)
Work = Callable[[], Any]


class Executable(abc.ABC):
    """What an executor runs: the node entities that have callbacks (subscriptions,
    services, timers, guard conditions, and any new kind: actions, parameter services),
    rclpy's ``Waitable``. The executor waits until one of :meth:`waitables` is ready or
    :meth:`due_in` has passed, then asks each executable whose :attr:`callback_group` can
    run a callback to :meth:`take` its work, and runs what it got (in that group).
    Implementations are thread-safe: ``take`` runs on the spinning thread, the work on
    it or on an executor's pool."""

    callback_group: CallbackGroup

    def waitables(self) -> Sequence[Waitable]:
        """What becomes ready when this has work (a core subscription, a guard)."""
        return ()

    def due_in(self, now: float) -> float | None:
        """Seconds (from monotonic ``now``) until time alone gives it work (a timer, a QoS
        deadline); None: never."""
        return None

    @abc.abstractmethod
    def take(self, now: float) -> list[Work]:
        """The work ready now, taken (quick; an empty list when there is none)."""


def _runnable(callback: Callable[..., Any], what: str) -> None:
    """Refuse what is not callable at all (an ``async def`` callback runs: the executor
    drives its coroutine)."""
    if not callable(callback):
        raise ArgumentTypeError(f"the {what} callback must be callable, got {callback!r}")


def _in_group(entity: Any, group: CallbackGroup | None, node: NodeLike) -> CallbackGroup:
    chosen = group if group is not None else node.default_callback_group
    chosen.add_entity(entity)
    return chosen


class NodeLike(Protocol):
    """What a node entity uses of its node (``Node`` is one)."""

    @property
    def context(self) -> Context: ...

    @property
    def executor(self) -> NodeExecutor | None: ...

    @property
    def default_callback_group(self) -> CallbackGroup: ...

    def count_subscribers(self, topic: str) -> int: ...

    def count_services(self, service: str) -> int: ...

    def get_logger(self) -> RcutilsLogger: ...
