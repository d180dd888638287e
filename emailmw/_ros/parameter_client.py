"""rclpy's ``AsyncParameterClient``: another node's parameter services, each call a
:class:`~emailmw.task.Future` of the service's response, as in rclpy."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from .._core.futures import Future
from ..rcl_interfaces.msg import Parameter as ParameterMsg
from ..rcl_interfaces.srv import (
    DescribeParameters,
    GetParameters,
    GetParameterTypes,
    ListParameters,
    SetParameters,
    SetParametersAtomically,
)
from .callback_groups import CallbackGroup
from .node import Node
from .parameters import Parameter, parameter_dict_from_yaml_file

__all__ = ["AsyncParameterClient"]

Done = Callable[[Future[Any]], None] | None


class AsyncParameterClient:
    """The parameter services of node ``remote_node_name`` (a name relative to ``node``'s
    namespace, or fully qualified), through clients of ``node``: each method sends one
    request and returns the future of its response (``callback``: added to it as a done
    callback, run in the executor that spins ``node``). Thread-safe as the clients."""

    def __init__(
        self,
        node: Node,
        remote_node_name: str,
        qos_profile: Any = None,
        callback_group: CallbackGroup | None = None,
    ) -> None:
        del qos_profile  # (a service over email has no QoS to choose)
        self.remote_node_name = node.resolve(remote_node_name, "node name")
        self._node = node

        def client(kind: Any, service: str) -> Any:
            name = f"{self.remote_node_name.rstrip('/')}/{service}"
            return node.create_client(kind, name, callback_group=callback_group)

        self._list = client(ListParameters, "list_parameters")
        self._get = client(GetParameters, "get_parameters")
        self._set = client(SetParameters, "set_parameters")
        self._set_atomically = client(SetParametersAtomically, "set_parameters_atomically")
        self._describe = client(DescribeParameters, "describe_parameters")
        self._types = client(GetParameterTypes, "get_parameter_types")
        self._clients = (self._list, self._get, self._set, self._set_atomically,
                         self._describe, self._types)  # fmt: skip

    def services_are_ready(self) -> bool:
        """Whether the graph has a server of each of the remote node's services."""
        return all(c.service_is_ready() for c in self._clients)

    def wait_for_services(self, timeout_sec: float | None = None) -> bool:
        """Wait until :meth:`services_are_ready`, at most ``timeout_sec`` seconds in all
        (one deadline for the node's services, as rclpy's; None: without end)."""
        if timeout_sec is None:
            return all(c.wait_for_service(None) for c in self._clients)
        deadline = time.monotonic() + timeout_sec
        return all(c.wait_for_service(max(0.0, deadline - time.monotonic())) for c in self._clients)

    def list_parameters(
        self, prefixes: Sequence[str] | None = None, depth: int | None = None,
        callback: Done = None,
    ) -> Future[Any]:  # fmt: skip
        request = ListParameters.Request(prefixes=list(prefixes or []), depth=depth or 0)
        return _call(self._list, request, callback)

    def get_parameters(self, names: Sequence[str], callback: Done = None) -> Future[Any]:
        return _call(self._get, GetParameters.Request(names=list(names)), callback)

    def set_parameters(
        self, parameters: Sequence[Parameter[Any] | ParameterMsg], callback: Done = None
    ) -> Future[Any]:
        request = SetParameters.Request(parameters=_messages(parameters))
        return _call(self._set, request, callback)

    def set_parameters_atomically(
        self, parameters: Sequence[Parameter[Any] | ParameterMsg], callback: Done = None
    ) -> Future[Any]:
        request = SetParametersAtomically.Request(parameters=_messages(parameters))
        return _call(self._set_atomically, request, callback)

    def describe_parameters(self, names: Sequence[str], callback: Done = None) -> Future[Any]:
        return _call(self._describe, DescribeParameters.Request(names=list(names)), callback)

    def get_parameter_types(self, names: Sequence[str], callback: Done = None) -> Future[Any]:
        return _call(self._types, GetParameterTypes.Request(names=list(names)), callback)

    def delete_parameters(self, names: Sequence[str], callback: Done = None) -> Future[Any]:
        """Undeclare ``names`` (set each to NOT_SET, as rclpy does)."""
        return self.set_parameters([Parameter(name) for name in names], callback)

    def load_parameter_file(
        self, parameter_file: str, use_wildcard: bool = False, callback: Done = None
    ) -> Future[Any]:
        """Set on the remote node what a params file holds, as rclpy's: the parameters of
        every node's section (:func:`~emailmw.parameter.parameter_dict_from_yaml_file`;
        with ``use_wildcard`` the ``/**`` section too, under the others)."""
        values = parameter_dict_from_yaml_file(parameter_file, use_wildcard)
        return self.set_parameters(list(values.values()), callback)

    def load_parameter_file_atomically(
        self, parameter_file: str, use_wildcard: bool = False, callback: Done = None
    ) -> Future[Any]:
        """:meth:`load_parameter_file` in one atomic call."""
        values = parameter_dict_from_yaml_file(parameter_file, use_wildcard)
        return self.set_parameters_atomically(list(values.values()), callback)

    def destroy(self) -> None:
        """Destroy the clients (pending calls fail)."""
        for client in self._clients:
            self._node.destroy_client(client)


def _messages(parameters: Sequence[Parameter[Any] | ParameterMsg]) -> list[ParameterMsg]:
    return [p.to_parameter_msg() if isinstance(p, Parameter) else p for p in parameters]


def _call(client: Any, request: Any, callback: Done) -> Future[Any]:
    future: Future[Any] = client.call_async(request)
    if callback is not None:
        future.add_done_callback(callback)
    return future
