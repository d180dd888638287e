"""``emailmw service list|call``: ros2 service's verbs over email."""

from __future__ import annotations

import argparse
import time

import yaml

from .._context import Context
from .._graph import read_graph
from .._interfaces import ServiceType, deserialize, serialize
from .._node import Node
from .common import Commands, resolve, verbs, with_account, yaml_values
from .interface import service_type

__all__ = ["register"]


def register(commands: Commands, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser("service", help="services: list, call")
    add = verbs(parser, common)
    add("list", run=list_, help="services in the graph").add_argument(
        "-t", "--show-types", action="store_true"
    )
    p = add("call", run=call, help="call a service with a request given as YAML")
    p.add_argument("name")
    p.add_argument("type")
    p.add_argument("values", nargs="?", default="{}")
    p.add_argument("--timeout", type=float, default=60.0)


@with_account
def list_(context: Context, args: argparse.Namespace) -> int:
    table = read_graph(context.receiver).services()
    for name in sorted(table):
        print(f"{name} [{', '.join(sorted(table[name]))}]" if args.show_types else name)
    return 0


def call(args: argparse.Namespace) -> int:
    kind = service_type(args.type)  # mistakes in the arguments before connecting
    request = deserialize(kind.Request, yaml.safe_dump(yaml_values(args.values)))
    return _call(args, kind, request)


@with_account
def _call(context: Context, args: argparse.Namespace, kind: ServiceType, request: object) -> int:
    node = Node(f"emailmw_cli_call_{int(time.time())}", context=context, announce_period=60)
    client = node.create_client(kind, resolve(args.name, "service name"))
    print(f"requester: making request: {serialize(request).strip()}", flush=True)
    response = client.call(request, timeout_sec=args.timeout)
    print(f"response:\n{serialize(response).strip()}")
    node.destroy_node()
    return 0
