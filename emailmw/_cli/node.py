"""``emailmw node list|info``: ros2 node's verbs over email."""

from __future__ import annotations

import argparse

from .._context import Context
from .._graph import read_graph
from .common import CommandError, Commands, verbs, with_account

__all__ = ["register"]


def register(commands: Commands, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser("node", help="nodes: list, info")
    add = verbs(parser, common)
    add("list", run=list_, help="live nodes")
    add("info", run=info, help="a node's publishers, subscriptions, services").add_argument("name")


@with_account
def list_(context: Context, args: argparse.Namespace) -> int:
    for name in sorted(read_graph(context.receiver).nodes):
        print(name)
    return 0


@with_account
def info(context: Context, args: argparse.Namespace) -> int:
    graph = read_graph(context.receiver)
    node_name = args.name if args.name.startswith("/") else f"/{args.name}"
    record = graph.nodes.get(node_name)
    if record is None:
        raise CommandError(f"no node {node_name!r} in the graph (see 'emailmw node list')")
    print(record.name)
    for title, pairs in (
        ("Publishers", record.publishers),
        ("Subscribers", record.subscriptions),
        ("Service Servers", record.services),
        ("Service Clients", record.clients),
    ):
        print(f"  {title}:")
        for name, kind in sorted(pairs):
            print(f"    {name}: {kind}")
    return 0
