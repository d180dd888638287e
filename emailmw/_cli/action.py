"""``emailmw action list|info|send_goal``: ros2 action's verbs over email."""

from __future__ import annotations

import argparse
import time
from typing import Any

import yaml

from .._core.interfaces import ActionType, from_data, get_interface, to_data
from .._delivery.context import Context
from .._delivery.graph import Graph
from .._ros.action import ActionClient
from .._ros.node import Node
from ..action_msgs.msg import GoalStatus
from .common import CommandError, Commands, current_graph, resolve, verbs, with_account, yaml_values

__all__ = ["actions_of", "register"]

_INFIX = "/_action/"
_STATUS = {v: k.removeprefix("STATUS_") for k, v in vars(GoalStatus).items()
           if k.startswith("STATUS_")}  # fmt: skip


def register(commands: Commands, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser("action", help="actions: list, info, send_goal")
    add = verbs(parser, common)
    add("list", run=list_, help="actions in the graph").add_argument(
        "-t", "--show-types", action="store_true"
    )
    p = add("info", run=info, help="an action's servers and clients")
    p.add_argument("name")
    p.add_argument("-t", "--show-types", action="store_true")
    p = add("send_goal", run=send_goal, help="send a goal given as YAML; print the result")
    p.add_argument("name")
    p.add_argument("type")
    p.add_argument("goal", nargs="?", default="{}")
    p.add_argument("-f", "--feedback", action="store_true", help="print the feedback too")
    p.add_argument("--timeout", type=float, default=30.0, help="wait for a server (s)")


def actions_of(graph: Graph) -> dict[str, dict[str, Any]]:
    """Action name -> its type, servers and clients (by their send_goal services)."""
    found: dict[str, dict[str, Any]] = {}
    for node, record in graph.nodes.items():
        for kind, pairs in (("servers", record.services), ("clients", record.clients)):
            for service, type_name in pairs:
                if service.endswith(f"{_INFIX}send_goal") and type_name.endswith("_SendGoal"):
                    entry = found.setdefault(
                        service[: -len(f"{_INFIX}send_goal")],
                        {"type": type_name[: -len("_SendGoal")], "servers": [], "clients": []},
                    )
                    entry[kind].append(node)
    return found


@with_account
def list_(context: Context, args: argparse.Namespace) -> int:
    for name, entry in sorted(actions_of(current_graph(context)).items()):
        print(f"{name} [{entry['type']}]" if args.show_types else name)
    return 0


@with_account
def info(context: Context, args: argparse.Namespace) -> int:
    name = resolve(args.name, "action name")
    entry = actions_of(current_graph(context)).get(name)
    if entry is None:
        raise CommandError(f"no action {name!r} in the graph (see 'emailmw action list')")
    suffix = f" [{entry['type']}]" if args.show_types else ""
    print(f"Action: {name}")
    for title, key in (("Action clients", "clients"), ("Action servers", "servers")):
        print(f"{title}: {len(entry[key])}")
        for node in sorted(entry[key]):
            print(f"    {node}{suffix}")
    return 0


def _indented(data: Any) -> str:
    text = yaml.safe_dump(data, sort_keys=False).rstrip()
    return "\n".join(f"    {line}" for line in text.splitlines())


def send_goal(args: argparse.Namespace) -> int:
    try:
        kind = get_interface(args.type)
    except KeyError:
        raise CommandError(
            f"TYPE: unknown type {args.type!r} (see 'emailmw interface list')"
        ) from None
    if not isinstance(kind, ActionType):
        raise CommandError(
            f"TYPE: {args.type!r} is not an action type (example_interfaces/action/Fibonacci)"
        )
    from .._core.errors import TypeMismatchError

    try:
        goal = from_data(kind.Goal, yaml_values(args.goal, "GOAL"))
    except TypeMismatchError as exc:
        raise CommandError(f"GOAL: {exc}") from None
    return _send_goal(args, kind, goal)


@with_account
def _send_goal(context: Context, args: argparse.Namespace, kind: ActionType, goal: Any) -> int:
    node = Node(f"emailmw_cli_action_{int(time.time())}", context=context,
                start_parameter_services=False, announce_period=60)  # fmt: skip
    try:
        client = ActionClient(node, kind, resolve(args.name, "action name"))
        print("Waiting for an action server to become available...", flush=True)
        if not client.wait_for_server(timeout_sec=args.timeout):
            raise CommandError(
                f"no server of action {client.action_name!r} within {args.timeout:g} s "
                "(see 'emailmw action list')"
            )
        print(f"Sending goal:\n{_indented(to_data(goal))}\n", flush=True)

        def feedback(message: Any) -> None:
            print(f"Feedback:\n{_indented(to_data(message.feedback))}\n", flush=True)

        handle = client.send_goal_async(
            goal, feedback_callback=feedback if args.feedback else None
        ).result(60)
        if not handle.accepted:
            print("Goal was rejected.")
            return 1
        print(f"Goal accepted with ID: {bytes(handle.goal_id.uuid).hex()}\n", flush=True)
        result = handle.get_result_async()
        # feedback callbacks run in an executor: spin the node until the result came
        while not result.done():
            _spin_once(node)
        response = result.result()
        print(f"Result:\n{_indented(to_data(response.result))}\n")
        status = _STATUS.get(response.status, str(response.status))
        print(f"Goal finished with status: {status}")
        return 0 if response.status == GoalStatus.STATUS_SUCCEEDED else 1
    finally:
        node.destroy_node()


def _spin_once(node: Node) -> None:
    from .._ros.executor import spin_once

    spin_once(node, timeout_sec=0.1)
