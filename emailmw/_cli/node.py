"""``emailmw node list|info``: ros2 node's verbs over email."""

from __future__ import annotations

import argparse

from .._core.names import is_hidden
from .._delivery.context import Context
from .common import CommandError, Commands, current_graph, verbs, with_account

__all__ = ["register"]


def register(commands: Commands, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser("node", help="nodes: list, info")
    add = verbs(parser, common)
    add("list", run=list_, help="live nodes").add_argument(
        "-a", "--all", action="store_true", help="hidden nodes too (a name starting _)"
    )
    add("info", run=info, help="a node's publishers, subscriptions, services").add_argument("name")


@with_account
def list_(context: Context, args: argparse.Namespace) -> int:
    for name in sorted(n for n in current_graph(context).nodes if args.all or not is_hidden(n)):
        print(name)
    return 0


@with_account
def info(context: Context, args: argparse.Namespace) -> int:
    graph = current_graph(context)
    node_name = args.name if args.name.startswith("/") else f"/{args.name}"
    record = graph.nodes.get(node_name)
    if record is None:
        raise CommandError(f"no node {node_name!r} in the graph (see 'emailmw node list')")
    print(record.name)

    def plain(pairs: tuple[tuple[str, str], ...]) -> list[tuple[str, str]]:
        return sorted((n, k) for n, k in pairs if "/_action/" not in n)

    def actions(pairs: tuple[tuple[str, str], ...]) -> list[tuple[str, str]]:
        suffix = "/_action/send_goal"
        return sorted((n[: -len(suffix)], k[: -len("_SendGoal")]) for n, k in pairs
                      if n.endswith(suffix))  # fmt: skip

    for title, pairs in (
        ("Subscribers", plain(record.subscriptions)),
        ("Publishers", plain(record.publishers)),
        ("Service Servers", plain(record.services)),
        ("Service Clients", plain(record.clients)),
        ("Action Servers", actions(record.services)),
        ("Action Clients", actions(record.clients)),
    ):
        print(f"  {title}:")
        for name, kind in pairs:
            print(f"    {name}: {kind}")
    if any(s == f"{node_name}/list_parameters" for s, _ in record.services):
        print("  Parameters:")
        for name in _parameters(context, node_name):
            print(f"    {name}")
    return 0


def _parameters(context: Context, node_name: str) -> list[str]:
    """The node's parameter names, when it answers within a few seconds (it is spun)."""
    from .._ros.node import Node
    from ..rcl_interfaces.srv import ListParameters

    asking = Node("emailmw_cli_node_info", context=context, start_parameter_services=False,
                  announce_period=60)  # fmt: skip
    try:
        client = asking.create_client(ListParameters, f"{node_name}/list_parameters")
        future = client.call_async(ListParameters.Request())
        try:
            return list(future.result(5.0).result.names)
        except TimeoutError:
            return ["(the node did not answer within 5 s: is it spun?)"]
    finally:
        asking.destroy_node()
