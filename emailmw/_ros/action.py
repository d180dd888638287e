"""Actions over email (``emailmw.action``): rclpy's ``ActionServer`` and ``ActionClient``
on ROS's action protocol, built on the existing services and topics with ROS's names:
``<action>/_action/send_goal``, ``cancel_goal``, ``get_result`` (services) and
``<action>/_action/feedback``, ``status`` (topics), their types the action type's ``Impl``.

A server's goals go through ROS's states (accepted, executing, canceling, then
succeeded, canceled or aborted); an execute callback that ends without setting one aborts
the goal. A server publishes its goals' status on every change and, while any is active,
every ``status_period`` seconds. A client that hears nothing of an active goal for
``server_timeout`` seconds looks whether the server is gone: when no node of the graph
offers the action any more (its node left, or its announcements expired: killed), it
gives the goal the status ``STATUS_UNKNOWN``, completes its result future with that status
and logs why; while the server is still in the graph (paused, or starved of CPU) it says
so once and waits on (it looks again every ``server_timeout``): a result that comes late
is the goal's result, never lost. A server that does not know a goal (it was restarted)
answers its result at once with ``STATUS_UNKNOWN`` too. Callbacks run in the executor,
in the action's callback group; an execute callback may be ``async def``. Thread-safe.
"""

from __future__ import annotations

import enum
import functools
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Final, Generic, TypeVar

from .._core.errors import ArgumentTypeError, StateError, TypeMismatchError
from .._core.futures import Future, relay
from .._core.interfaces import HEADER_MESSAGE_TYPE, ActionType, deserialize, serialize, type_name
from .._core.log import get_logger
from .._core.types import RequestId
from .._core.waitables import Waitable
from .._delivery.entities import Publisher, ServiceClient, ServiceServer, Subscription
from .._delivery.graph import graph_of
from ..action_msgs.msg import GoalInfo, GoalStatus, GoalStatusArray
from ..action_msgs.srv import CancelGoal
from ..builtin_interfaces.msg import Time as TimeMsg
from ..unique_identifier_msgs.msg import UUID
from .callback_groups import CallbackGroup
from .executable import Executable, Work
from .node import Node

__all__ = [
    "ActionClient",
    "ActionServer",
    "CancelResponse",
    "ClientGoalHandle",
    "GoalResponse",
    "ServerGoalHandle",
    "default_cancel_callback",
    "default_goal_callback",
    "default_handle_accepted_callback",
    "get_action_names_and_types",
]

_log = get_logger("action")
_TERMINAL: Final = frozenset(
    {GoalStatus.STATUS_SUCCEEDED, GoalStatus.STATUS_CANCELED, GoalStatus.STATUS_ABORTED}
)
_ACTION_INFIX: Final = "/_action/"
#: how many ended goals' feedback callbacks a client keeps for feedback arriving late
ENDED_KEPT: Final = 64


class GoalResponse(enum.Enum):
    """What a server's goal callback answers."""

    REJECT = 1
    ACCEPT = 2


class CancelResponse(enum.Enum):
    """What a server's cancel callback answers."""

    REJECT = 1
    ACCEPT = 2


def default_goal_callback(goal_request: Any) -> GoalResponse:
    """Accept every goal."""
    return GoalResponse.ACCEPT


def default_cancel_callback(goal_handle: Any) -> CancelResponse:
    """Refuse every cancel request (rclpy's default)."""
    return CancelResponse.REJECT


def default_handle_accepted_callback(goal_handle: ServerGoalHandle) -> None:
    """Execute the goal at once."""
    goal_handle.execute()


def _key(goal_id: Any) -> bytes:
    return bytes(goal_id.uuid)


def _now_msg() -> Any:
    stamp = time.time_ns()
    return TimeMsg(sec=stamp // 1_000_000_000, nanosec=stamp % 1_000_000_000)


S = TypeVar("S")  # an action end's service entities
T = TypeVar("T")  # and its topic entities


def _names(node: Node, action_name: str) -> tuple[str, str]:
    name = node.resolve(action_name, "action name")
    return name, f"{name}/_action"


def _graph_entries(
    action_name: str, kind: str, services: str, topics: str
) -> dict[str, list[tuple[str, str]]]:
    """An action's three services and two topics, as the node announces them: a server's
    under ``services``/``topics`` = "services"/"publishers", a client's "clients"/
    "subscriptions"."""
    name = f"{action_name}/_action"
    return {
        services: [
            (f"{name}/send_goal", f"{kind}_SendGoal"),
            (f"{name}/cancel_goal", "action_msgs/srv/CancelGoal"),
            (f"{name}/get_result", f"{kind}_GetResult"),
        ],
        topics: [
            (f"{name}/feedback", f"{kind}_FeedbackMessage"),
            (f"{name}/status", "action_msgs/msg/GoalStatusArray"),
        ],
    }


class _ActionEnd(Executable, Generic[S, T]):
    """What an action server and an action client share: the action's type and name, a
    callback group, and the entities of its three services and two topics (``S``/``T``:
    servers and publishers on a server's side, clients and subscriptions on a client's)."""

    _send_goal: S
    _cancel_goal: S
    _get_result: S
    _feedback: T
    _status: T

    def _begin(
        self, node: Node, action_type: ActionType, action_name: str, group: CallbackGroup | None
    ) -> str:
        """The checks and names, before the end's own state: the entities' prefix."""
        if not isinstance(action_type, ActionType):
            raise ArgumentTypeError(f"an action type is expected, got {action_type!r}")
        self.action_type = action_type
        self._node = node
        self.action_name, prefix = _names(node, action_name)
        self.callback_group = group or node.default_callback_group
        self.callback_group.add_entity(self)
        return prefix

    def _end(self, prefix: str, service: Callable[..., S], topic: Callable[..., T]) -> None:
        """The entities, once the end's own state is there (mail may reach them at once),
        then the end joins its node."""
        context = self._node.context
        self._send_goal = service(f"{prefix}/send_goal", context=context)
        self._cancel_goal = service(f"{prefix}/cancel_goal", context=context)
        self._get_result = service(f"{prefix}/get_result", context=context)
        self._feedback = topic(f"{prefix}/feedback", context=context)
        self._status = topic(f"{prefix}/status", context=context)
        self._node.add_waitable(self)


# ----------------------------------------------------------------------------- server


class ServerGoalHandle:
    """One goal on a server (rclpy's): its request, id and status; what the execute
    callback reports through (:meth:`publish_feedback`, :meth:`succeed`, :meth:`abort`,
    :meth:`canceled`). Thread-safe."""

    def __init__(self, server: ActionServer, goal_info: Any, goal_request: Any) -> None:
        self._server = server
        self._goal_info = goal_info
        self._goal_request = goal_request
        self._status: int = GoalStatus.STATUS_ACCEPTED
        self._lock = threading.Lock()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ServerGoalHandle) and _key(other.goal_id) == _key(self.goal_id)

    def __hash__(self) -> int:
        return hash(_key(self.goal_id))

    def __repr__(self) -> str:
        return f"<ServerGoalHandle {_key(self.goal_id).hex()} status={self._status}>"

    @property
    def request(self) -> Any:
        return self._goal_request

    @property
    def goal_id(self) -> Any:
        return self._goal_info.goal_id

    @property
    def goal_info(self) -> Any:
        return self._goal_info

    @property
    def status(self) -> int:
        return self._status

    @property
    def is_active(self) -> bool:
        return self._status not in _TERMINAL

    @property
    def is_cancel_requested(self) -> bool:
        return bool(self._status == GoalStatus.STATUS_CANCELING)

    def _set(self, status: int, allowed: Sequence[int]) -> None:
        with self._lock:
            if self._status not in allowed:
                raise StateError(
                    f"goal {_key(self.goal_id).hex()}: status {self._status} cannot become {status}"
                )
            self._status = status
        self._server._changed(self)

    def execute(self, execute_callback: Callable[[ServerGoalHandle], Any] | None = None) -> None:
        """Start executing (the server's execute callback, or ``execute_callback``) in
        the executor."""
        if not self.is_cancel_requested:
            self._set(GoalStatus.STATUS_EXECUTING, (GoalStatus.STATUS_ACCEPTED,
                                                    GoalStatus.STATUS_EXECUTING))  # fmt: skip
        self._server._queue_execute(self, execute_callback)

    def publish_feedback(self, feedback: Any) -> None:
        kind = self._server.action_type
        if not isinstance(feedback, kind.Feedback):
            raise ArgumentTypeError(f"{kind.name} feedback expected, got {feedback!r}")
        message = kind.Impl.FeedbackMessage(goal_id=self.goal_id, feedback=feedback)
        self._server._feedback.publish(
            serialize(message), {HEADER_MESSAGE_TYPE: type_name(kind.Impl.FeedbackMessage)}
        )

    def succeed(self) -> None:
        self._set(GoalStatus.STATUS_SUCCEEDED, (GoalStatus.STATUS_EXECUTING,
                                                GoalStatus.STATUS_CANCELING))  # fmt: skip

    def abort(self) -> None:
        self._set(GoalStatus.STATUS_ABORTED, (GoalStatus.STATUS_ACCEPTED,
                                              GoalStatus.STATUS_EXECUTING,
                                              GoalStatus.STATUS_CANCELING))  # fmt: skip

    def canceled(self) -> None:
        self._set(GoalStatus.STATUS_CANCELED, (GoalStatus.STATUS_CANCELING,))

    def _cancel_requested(self) -> None:
        self._set(GoalStatus.STATUS_CANCELING, (GoalStatus.STATUS_ACCEPTED,
                                                GoalStatus.STATUS_EXECUTING))  # fmt: skip

    def destroy(self) -> None:
        pass


class ActionServer(_ActionEnd[ServiceServer, Publisher]):
    """An action server (rclpy's ``ActionServer``) of ``action_type`` on ``action_name``,
    run by the executor that spins ``node``. ``execute_callback(goal_handle) -> Result``;
    ``goal_callback(goal) -> GoalResponse`` (default: accept), ``cancel_callback(handle)
    -> CancelResponse`` (default: refuse), ``handle_accepted_callback(handle)`` (default:
    execute it). A result is kept ``result_timeout`` seconds after its goal ended. Goal
    status goes out ``status_delay`` seconds after a change at the latest (the changes of
    that while in one status array), and every ``status_period`` seconds while a goal is
    active."""

    def __init__(
        self,
        node: Node,
        action_type: ActionType,
        action_name: str,
        execute_callback: Callable[[ServerGoalHandle], Any],
        *,
        callback_group: CallbackGroup | None = None,
        goal_callback: Callable[[Any], GoalResponse] = default_goal_callback,
        handle_accepted_callback: Callable[[ServerGoalHandle], Any] = (
            default_handle_accepted_callback
        ),
        cancel_callback: Callable[[ServerGoalHandle], CancelResponse] = default_cancel_callback,
        goal_service_qos_profile: Any = None,
        result_service_qos_profile: Any = None,
        cancel_service_qos_profile: Any = None,
        feedback_pub_qos_profile: Any = None,
        status_pub_qos_profile: Any = None,
        result_timeout: float = 10.0,
        status_period: float = 1.0,
        status_delay: float = 0.02,
    ) -> None:
        del goal_service_qos_profile, result_service_qos_profile, cancel_service_qos_profile
        del feedback_pub_qos_profile, status_pub_qos_profile
        prefix = self._begin(node, action_type, action_name, callback_group)
        self._execute_callback = execute_callback
        self._goal_callback = goal_callback
        self._handle_accepted = handle_accepted_callback
        self._cancel_callback = cancel_callback
        self._result_timeout = result_timeout
        self._status_period = status_period
        self._lock = threading.RLock()
        self._goals: dict[bytes, ServerGoalHandle] = {}
        self._results: dict[bytes, tuple[int, Any, float]] = {}  # status, result, ended at
        self._waiting: dict[bytes, list[RequestId]] = {}  # get_result requests to answer
        self._to_execute: list[tuple[ServerGoalHandle, Callable[..., Any] | None]] = []
        self._next_status = time.monotonic()
        # a change of status is published this long after it at the latest (the changes
        # of a quick goal go in one status array, not one each)
        self._status_delay = status_delay
        self._status_at: float | None = None  # when the changes so far go out
        self._status_changed: set[bytes] = set()
        self._end(prefix, ServiceServer, Publisher)

    def graph_entries(self) -> dict[str, list[tuple[str, str]]]:
        """What the node announces of this server: its services and topics."""
        return _graph_entries(self.action_name, self.action_type.name, "services", "publishers")

    # ------------------------------------------------------------------ executable

    def waitables(self) -> Sequence[Waitable]:
        return (self._send_goal, self._cancel_goal, self._get_result)

    def due_in(self, now: float) -> float | None:
        with self._lock:
            if self._to_execute:
                return 0.0
            when = [self._status_at] if self._status_at is not None else []
            if any(h.is_active for h in self._goals.values()):
                when.append(self._next_status)
        return max(0.0, min(when) - now) if when else None

    def take(self, now: float) -> list[Work]:
        work: list[Work] = []
        for server, handler in (
            (self._send_goal, self._on_send_goal),
            (self._cancel_goal, self._on_cancel),
            (self._get_result, self._on_get_result),
        ):
            got = server.get_request_with_info()
            if got is not None:
                work.append(functools.partial(handler, got[0].id, got[0].content))
        with self._lock:
            executing, self._to_execute = self._to_execute, []
            publish = (self._status_at is not None and now >= self._status_at) or (
                now >= self._next_status and any(h.is_active for h in self._goals.values())
            )
            if publish:
                self._status_at = None
                self._next_status = now + self._status_period
        work += [functools.partial(self._execute, h, c) for h, c in executing]
        if publish:  # after the goals run: their changes of this round in one status
            work.append(self._publish_status)
        return work

    # ------------------------------------------------------------------ protocol

    def _on_send_goal(self, request_id: RequestId, content: str) -> None:
        kind = self.action_type.Impl.SendGoalService
        try:
            request = deserialize(kind.Request, content)
        except TypeMismatchError as exc:
            _log.warning("%s: a goal that does not fit %s: %s", self.action_name, kind.name, exc)
            self._send_goal._discard(request_id)
            return
        info = GoalInfo(goal_id=request.goal_id, stamp=_now_msg())
        response = self._goal_callback(request.goal)
        accepted = response == GoalResponse.ACCEPT
        handle = None
        if accepted:
            handle = ServerGoalHandle(self, info, request.goal)
            with self._lock:
                self._goals[_key(info.goal_id)] = handle
        answer = kind.Response(accepted=accepted, stamp=info.stamp)
        self._send_goal.send_response(request_id, serialize(answer))
        if handle is not None:
            self._changed(handle)
            self._handle_accepted(handle)

    def _queue_execute(self, handle: ServerGoalHandle, callback: Callable[..., Any] | None) -> None:
        with self._lock:
            self._to_execute.append((handle, callback))
        self._wake()

    def _execute(self, handle: ServerGoalHandle, callback: Callable[..., Any] | None) -> Any:
        run = callback or self._execute_callback
        result = run(handle)
        if hasattr(result, "__await__") and not isinstance(result, self.action_type.Result):
            return self._finish_later(handle, result)
        self._finished(handle, result)
        return None

    async def _finish_later(self, handle: ServerGoalHandle, pending: Any) -> None:
        try:
            result = await pending
        except BaseException:
            self._finished(handle, None)
            raise
        self._finished(handle, result)

    def _finished(self, handle: ServerGoalHandle, result: Any) -> None:
        if handle.is_active:
            _log.warning(
                "%s: goal %s ended without a status: aborted",
                self.action_name,
                _key(handle.goal_id).hex(),
            )
            handle.abort()
        if not isinstance(result, self.action_type.Result):
            if result is not None:
                _log.warning("%s: the execute callback returned %r, not a Result",
                             self.action_name, result)  # fmt: skip
            result = self.action_type.Result()
        key = _key(handle.goal_id)
        with self._lock:
            self._results[key] = (handle.status, result, time.monotonic())
            waiting = self._waiting.pop(key, [])
        for request_id in waiting:
            self._answer_result(request_id, handle.status, result)

    def _answer_result(self, request_id: RequestId, status: int, result: Any) -> None:
        kind = self.action_type.Impl.GetResultService
        self._get_result.send_response(
            request_id, serialize(kind.Response(status=status, result=result))
        )

    def _on_get_result(self, request_id: RequestId, content: str) -> None:
        kind = self.action_type.Impl.GetResultService
        try:
            request = deserialize(kind.Request, content)
        except TypeMismatchError as exc:
            _log.warning("%s: a result request that does not fit: %s", self.action_name, exc)
            self._get_result._discard(request_id)
            return
        key = _key(request.goal_id)
        self._forget_old()
        with self._lock:
            done = self._results.get(key)
            known = key in self._goals
            if done is None and known:
                self._waiting.setdefault(key, []).append(request_id)
                return
        if done is not None:
            self._answer_result(request_id, done[0], done[1])
        else:  # a goal this server does not know (it was restarted)
            self._answer_result(request_id, GoalStatus.STATUS_UNKNOWN, self.action_type.Result())

    def _on_cancel(self, request_id: RequestId, content: str) -> None:
        try:
            request = deserialize(CancelGoal.Request, content)
        except TypeMismatchError as exc:
            _log.warning("%s: a cancel request that does not fit: %s", self.action_name, exc)
            self._cancel_goal._discard(request_id)
            return
        wanted = request.goal_info
        every = not any(wanted.goal_id.uuid)
        before = wanted.stamp.sec * 1_000_000_000 + wanted.stamp.nanosec
        with self._lock:
            handles = [
                h
                for k, h in self._goals.items()
                if (every and not before)
                or k == _key(wanted.goal_id)
                or (before and _stamp_ns(h.goal_info.stamp) <= before)
            ]
        response = CancelGoal.Response()
        if not handles:
            response.return_code = CancelGoal.Response.ERROR_UNKNOWN_GOAL_ID
        for handle in handles:
            if not handle.is_active:
                response.return_code = CancelGoal.Response.ERROR_GOAL_TERMINATED
                continue
            if self._cancel_callback(handle) == CancelResponse.ACCEPT:
                if not handle.is_cancel_requested:
                    handle._cancel_requested()
                response.goals_canceling.append(handle.goal_info)
        if handles and not response.goals_canceling and not response.return_code:
            response.return_code = CancelGoal.Response.ERROR_REJECTED
        if response.goals_canceling:
            response.return_code = CancelGoal.Response.ERROR_NONE
        self._cancel_goal.send_response(request_id, serialize(response))

    def _forget_old(self) -> None:
        now = time.monotonic()
        with self._lock:
            for key, (_, _, ended) in list(self._results.items()):
                if now - ended > self._result_timeout:
                    del self._results[key]
                    self._goals.pop(key, None)

    def _changed(self, handle: ServerGoalHandle) -> None:
        with self._lock:
            if self._status_at is None:
                self._status_at = time.monotonic() + self._status_delay
            self._status_changed.add(_key(handle.goal_id))
        self._wake()

    def _wake(self) -> None:
        executor = self._node.executor
        if executor is not None:
            executor.wake()

    def _publish_status(self) -> None:
        """The status of the active goals and of those whose status changed since the last
        one (a goal's end is said once, and is in its result too: the array stays as small
        as what is going on)."""
        with self._lock:
            changed, self._status_changed = self._status_changed, set()
            statuses = [
                GoalStatus(goal_info=h.goal_info, status=h.status)
                for k, h in self._goals.items()
                if h.is_active or k in changed
            ]
        self._status.publish(
            serialize(GoalStatusArray(status_list=statuses)),
            {HEADER_MESSAGE_TYPE: type_name(GoalStatusArray)},
        )

    def destroy(self) -> None:
        self._node.remove_waitable(self)
        for entity in (self._send_goal, self._cancel_goal, self._get_result, self._feedback,
                       self._status):  # fmt: skip
            entity.close()


def _stamp_ns(stamp: Any) -> int:
    return int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)


# ----------------------------------------------------------------------------- client


class ClientGoalHandle:
    """A goal sent by a client (rclpy's): accepted or not, its status as the server last
    said it, its result and cancelling."""

    def __init__(self, client: ActionClient, goal_id: Any, goal_response: Any) -> None:
        self._client = client
        self._goal_id = goal_id
        self._goal_response = goal_response
        self._status = (
            GoalStatus.STATUS_ACCEPTED if goal_response.accepted else (GoalStatus.STATUS_UNKNOWN)
        )
        self._result: Future[Any] | None = None
        self._lock = threading.Lock()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ClientGoalHandle) and _key(other.goal_id) == _key(self.goal_id)

    def __hash__(self) -> int:
        return hash(_key(self.goal_id))

    def __repr__(self) -> str:
        return (
            f"ClientGoalHandle <id={list(self.goal_id.uuid)}, accepted={self.accepted}, "
            f"status={self.status}>"
        )

    @property
    def goal_id(self) -> Any:
        return self._goal_id

    @property
    def stamp(self) -> Any:
        return self._goal_response.stamp

    @property
    def accepted(self) -> bool:
        return bool(self._goal_response.accepted)

    @property
    def status(self) -> int:
        return int(self._status)

    def get_result_async(self) -> Future[Any]:
        """A future of the result response (``.status``, ``.result``); asked of the server
        once, the same future after."""
        with self._lock:
            if self._result is None:
                self._result = self._client._get_result_async(self)
            return self._result

    def update_status(self, status: int) -> None:
        """The goal's status as its server (or the client, when the server is lost) says
        it now (the client's call)."""
        self._status = status

    def lost(self, response: Any) -> None:
        """The server went silent: the status is unknown, and a result asked for and not
        come is ``response`` (the client's call)."""
        self._status = GoalStatus.STATUS_UNKNOWN
        with self._lock:
            result = self._result
        if result is not None and not result.done():
            result.set_result(response)

    def get_result(self) -> Any:
        return self.get_result_async().result()

    def cancel_goal_async(self) -> Future[Any]:
        """A future of the ``action_msgs/srv/CancelGoal`` response."""
        return self._client._cancel_goal_async(self)

    def cancel_goal(self) -> Any:
        return self.cancel_goal_async().result()


class ActionClient(_ActionEnd[ServiceClient, Subscription]):
    """An action client (rclpy's ``ActionClient``) of ``action_type`` on ``action_name``.
    Its feedback callbacks run in the executor that spins ``node``; its futures complete
    as the answers arrive, spun or not. ``server_timeout``: how long an active goal may
    go without a status from its server before the client looks whether the server is
    gone (no longer in the graph: then the goal is lost)."""

    def __init__(
        self,
        node: Node,
        action_type: ActionType,
        action_name: str,
        *,
        callback_group: CallbackGroup | None = None,
        goal_service_qos_profile: Any = None,
        result_service_qos_profile: Any = None,
        cancel_service_qos_profile: Any = None,
        feedback_sub_qos_profile: Any = None,
        status_sub_qos_profile: Any = None,
        server_timeout: float = 5.0,
    ) -> None:
        del goal_service_qos_profile, result_service_qos_profile, cancel_service_qos_profile
        del feedback_sub_qos_profile, status_sub_qos_profile
        prefix = self._begin(node, action_type, action_name, callback_group)
        self._server_timeout = server_timeout
        self._lock = threading.Lock()
        self._handles: dict[bytes, ClientGoalHandle] = {}
        self._feedback_callbacks: dict[bytes, Callable[[Any], Any]] = {}
        self._heard: dict[bytes, float] = {}  # active goal -> when its server last spoke
        self._quiet: set[bytes] = set()  # active goals silent past server_timeout (said)
        # goals whose result came, oldest first: their feedback callbacks stay for the last
        # ENDED_KEPT of them (mail between servers can overtake: feedback published before
        # the result may arrive after it, and is still the goal's)
        self._ended: dict[bytes, None] = {}
        self._end(prefix, ServiceClient, Subscription)

    def graph_entries(self) -> dict[str, list[tuple[str, str]]]:
        """What the node announces of this client: its service clients and subscriptions."""
        return _graph_entries(self.action_name, self.action_type.name, "clients", "subscriptions")

    # ------------------------------------------------------------------ executable

    def waitables(self) -> Sequence[Waitable]:
        return (self._feedback, self._status)

    def due_in(self, now: float) -> float | None:
        with self._lock:
            heard = list(self._heard.values())
        return max(0.0, min(heard) + self._server_timeout - now) if heard else None

    def take(self, now: float) -> list[Work]:
        work: list[Work] = []
        got = self._status.get_message_with_info()
        if got is not None:
            self._on_status(got[0], now)
        got = self._feedback.get_message_with_info()
        if got is not None:
            work += self._on_feedback(got[0])
        self._check_lost(now)
        return work

    def _on_status(self, body: str, now: float) -> None:
        try:
            statuses = deserialize(GoalStatusArray, body)
        except TypeMismatchError as exc:
            _log.warning("%s: a status that does not fit: %s", self.action_name, exc)
            return
        for status in statuses.status_list:
            key = _key(status.goal_info.goal_id)
            with self._lock:
                handle = self._handles.get(key)
                if handle is None:
                    continue
                handle.update_status(status.status)
                if key in self._quiet:
                    self._quiet.discard(key)
                    _log.info("%s: goal %s: its server answers again", self.action_name,
                              key.hex())  # fmt: skip
                if status.status in _TERMINAL:
                    self._heard.pop(key, None)
                elif key in self._heard:
                    self._heard[key] = now

    def _on_feedback(self, body: str) -> list[Work]:
        kind = self.action_type.Impl.FeedbackMessage
        try:
            message = deserialize(kind, body)
        except TypeMismatchError as exc:
            _log.warning("%s: feedback that does not fit: %s", self.action_name, exc)
            return []
        key = _key(message.goal_id)
        with self._lock:
            callback = self._feedback_callbacks.get(key)
            if key in self._heard:
                self._heard[key] = time.monotonic()
        return [] if callback is None else [lambda: callback(message)]

    def _check_lost(self, now: float) -> None:
        """Goals silent for ``server_timeout``: lost when their server is gone from the
        graph, else waited for (looked at again one ``server_timeout`` later)."""
        with self._lock:
            silent = [k for k, heard in self._heard.items() if now - heard > self._server_timeout]
        if not silent:
            return
        name = f"{self.action_name}/_action/send_goal"
        graph = graph_of(self._node.context).peek()
        gone = not any(s == name for n in graph.nodes.values() for s, _ in n.services)
        for key in silent:
            with self._lock:
                if gone:
                    self._heard.pop(key, None)
                    self._quiet.discard(key)
                    first = False
                else:
                    self._heard[key] = now
                    first = key not in self._quiet
                    self._quiet.add(key)
            if first:
                self._node.get_logger().warn(
                    f"action server {self.action_name}: no status of goal {key.hex()} for "
                    f"{self._server_timeout:g} s, but it is still in the graph (busy or "
                    "paused?): its result is awaited"
                )
            if not gone:
                continue
            self._node.get_logger().warn(
                f"action server {self.action_name} lost: no status of goal "
                f"{key.hex()} for {self._server_timeout:g} s and no server of it in the "
                "graph (status unknown)"
            )
            unknown = GoalStatus.STATUS_UNKNOWN
            self._handles[key].lost(self.action_type.Impl.GetResultService.Response(status=unknown))

    # ------------------------------------------------------------------ calls

    def _executor(self) -> Any:
        """Where the done callbacks of this client's futures run (rclpy's way)."""
        return self._node.executor

    def server_is_ready(self) -> bool:
        """Whether the graph has a server of this action now."""
        name = f"{self.action_name}/_action/send_goal"
        graph = graph_of(self._node.context).graph()
        return any(s == name for n in graph.nodes.values() for s, _ in n.services)

    def wait_for_server(self, timeout_sec: float | None = None) -> bool:
        """Block until the graph has a server of this action, at most ``timeout_sec``
        seconds (None: no limit); whether it has."""
        name = f"{self.action_name}/_action/send_goal"
        return graph_of(self._node.context).wait_for(
            lambda graph: any(s == name for n in graph.nodes.values() for s, _ in n.services),
            timeout_sec,
        )

    def send_goal_async(
        self,
        goal: Any,
        feedback_callback: Callable[[Any], Any] | None = None,
        goal_uuid: Any = None,
    ) -> Future[ClientGoalHandle]:
        """Send ``goal``; the future completes with its :class:`ClientGoalHandle` once the
        server answered (``accepted`` says whether it took it). ``feedback_callback``
        gets each ``FeedbackMessage`` of the goal, in the executor, also one that arrives
        after the goal's result (mail can overtake mail; kept for the last
        64 goals that ended)."""
        kind = self.action_type
        if not isinstance(goal, kind.Goal):
            raise ArgumentTypeError(f"{kind.name} goal expected, got {goal!r}")
        goal_id = goal_uuid or UUID(uuid=list(secrets.token_bytes(16)))
        key = _key(goal_id)
        if feedback_callback is not None:
            with self._lock:
                self._feedback_callbacks[key] = feedback_callback
        request = kind.Impl.SendGoalService.Request(goal_id=goal_id, goal=goal)
        sent = self._send_goal.send_request_async(serialize(request))
        future: Future[ClientGoalHandle] = Future(
            f"the goal sent to {self.action_name}", scheduler=self._executor
        )

        def answered(done: Future[tuple[str, Any]]) -> None:
            failure = done.exception()
            if done.cancelled() or failure is not None:
                with self._lock:
                    self._feedback_callbacks.pop(key, None)
                if failure is not None:
                    future.set_exception(failure)
                else:
                    future.cancel()
                return
            try:
                response = deserialize(kind.Impl.SendGoalService.Response, done.result()[0])
            except TypeMismatchError as exc:
                future.set_exception(exc)
                return
            handle = ClientGoalHandle(self, goal_id, response)
            with self._lock:
                if handle.accepted:
                    self._handles[key] = handle
                    self._heard[key] = time.monotonic()
                else:
                    self._feedback_callbacks.pop(key, None)
            future.set_result(handle)

        sent._when_done(answered)
        return future

    def send_goal(self, goal: Any, **kwargs: Any) -> Any:
        """Send ``goal`` and block for its result response (``.status``, ``.result``);
        None when the server did not accept it."""
        handle = self.send_goal_async(goal, **kwargs).result()
        if not handle.accepted:
            return None
        return handle.get_result_async().result()

    def _get_result_async(self, handle: ClientGoalHandle) -> Future[Any]:
        """A new future of ``handle``'s result (the handle keeps it: asked once)."""
        kind = self.action_type.Impl.GetResultService
        future: Future[Any] = Future(
            f"the result of a goal of {self.action_name}", scheduler=self._executor
        )
        sent = self._get_result.send_request_async(serialize(kind.Request(goal_id=handle.goal_id)))
        key = _key(handle.goal_id)

        def ended(raw: tuple[str, Any]) -> Any:
            response = deserialize(kind.Response, raw[0])
            handle.update_status(response.status)
            with self._lock:
                self._heard.pop(key, None)
                self._ended[key] = None
                while len(self._ended) > ENDED_KEPT:
                    oldest = next(iter(self._ended))
                    del self._ended[oldest]
                    self._feedback_callbacks.pop(oldest, None)
            executor = self._node.executor
            if executor is not None:
                executor.wake()
            return response

        relay(sent, future, ended)
        return future

    def _cancel_goal_async(self, handle: ClientGoalHandle) -> Future[Any]:
        request = CancelGoal.Request(goal_info=GoalInfo(goal_id=handle.goal_id))
        sent = self._cancel_goal.send_request_async(serialize(request))
        future: Future[Any] = Future(
            f"cancelling a goal of {self.action_name}", scheduler=self._executor
        )

        relay(sent, future, lambda raw: deserialize(CancelGoal.Response, raw[0]))
        return future

    def destroy(self) -> None:
        self._node.remove_waitable(self)
        for entity in (self._send_goal, self._cancel_goal, self._get_result, self._feedback,
                       self._status):  # fmt: skip
            entity.close()


def get_action_names_and_types(node: Node) -> list[tuple[str, list[str]]]:
    """The actions in the graph (by their ``send_goal`` services), with their types."""
    found: dict[str, set[str]] = {}
    for record in graph_of(node.context).graph().nodes.values():
        for service, kind in record.services:
            if service.endswith(f"{_ACTION_INFIX}send_goal") and kind.endswith("_SendGoal"):
                found.setdefault(service[: -len(f"{_ACTION_INFIX}send_goal")], set()).add(
                    kind[: -len("_SendGoal")]
                )
    return sorted((name, sorted(kinds)) for name, kinds in found.items())
