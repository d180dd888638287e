"""Round trips of the ROS layer, shared by the intraprocess and email benchmarks: a typed
service call between two nodes, an action goal -> result, and setting a parameter (in the
node, and through its ``set_parameters`` service from another node). Both nodes are spun by
one single-threaded executor on a thread, as a ROS program would run them."""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import emailmw
from emailmw.action import ActionClient, ActionServer
from emailmw.example_interfaces.action import Fibonacci
from emailmw.example_interfaces.srv import AddTwoInts
from emailmw.executors import SingleThreadedExecutor
from emailmw.node import Node
from emailmw.parameter import Parameter
from emailmw.rcl_interfaces.srv import SetParameters


def _timed(n: int, call: Callable[[], Any], unit: float) -> list[float]:
    samples = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        call()
        samples.append((time.perf_counter_ns() - t0) / unit)
    return samples


def ros_round_trips(
    server_ctx: emailmw.Context, client_ctx: emailmw.Context, n: int, unit: float, warmup: int
) -> dict[str, float]:
    """p50 of each round trip (in ``unit`` nanoseconds: 1e3 for us, 1e6 for ms), the
    server's nodes on ``server_ctx``, the calling ones on ``client_ctx``."""
    server = Node("bench_server", context=server_ctx, announce_period=3600)
    server.create_service(AddTwoInts, "bench_add", lambda q, r: AddTwoInts.Response(sum=q.a + q.b))
    server.declare_parameter("gain", 1.0)

    def execute(goal_handle: Any) -> Any:
        goal_handle.succeed()
        return Fibonacci.Result(sequence=[0, 1])

    ActionServer(server, Fibonacci, "bench_fibonacci", execute)
    client_node = Node("bench_client", context=client_ctx, announce_period=3600)
    adder = client_node.create_client(AddTwoInts, "bench_add")
    actions = ActionClient(client_node, Fibonacci, "bench_fibonacci")
    setter = client_node.create_client(SetParameters, "/bench_server/set_parameters")
    executor = SingleThreadedExecutor()
    executor.add_node(server)
    executor.add_node(client_node)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    try:
        assert adder.wait_for_service(timeout_sec=60)
        assert actions.wait_for_server(timeout_sec=60)

        def service() -> None:
            adder.call(AddTwoInts.Request(a=1, b=2), timeout_sec=60)

        def action() -> None:
            handle = actions.send_goal_async(Fibonacci.Goal(order=1)).result(60)
            handle.get_result_async().result(60)

        def remote_parameter() -> None:
            request = SetParameters.Request(
                parameters=[Parameter("gain", value=2.0).to_parameter_msg()]
            )
            setter.call(request, timeout_sec=60)

        calls = {
            "node_service": service,
            "action": action,
            "parameter_set_remote": remote_parameter,
        }
        for call in calls.values():
            _timed(warmup, call, unit)
        samples: dict[str, list[float]] = {name: [] for name in calls}
        for _ in range(n):  # interleaved: each kind sees the same conditions
            for name, call in calls.items():
                samples[name] += _timed(1, call, unit)
        found = {name: statistics.median(values) for name, values in samples.items()}
        local = _timed(max(n, 200), lambda: server.set_parameters([Parameter("gain", value=3.0)]),
                       unit)  # fmt: skip
        found["parameter_set"] = statistics.median(local)
        return found
    finally:
        executor.shutdown()
        spinner.join(10)
        server.destroy_node()
        client_node.destroy_node()
