"""``emailmw service list|type|find|call|echo``: ros2 service's verbs over email."""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from typing import Any

import yaml

from .._core.errors import ServiceTimeoutError, TypeMismatchError
from .._core.interfaces import ServiceType, deserialize, event_type, serialize
from .._core.names import is_hidden
from .._delivery.context import Context
from .._ros.node import Node
from . import topic
from .common import CommandError, Commands, current_graph, resolve, verbs, with_account, yaml_values
from .interface import service_type
from .topic import add_qos_options

__all__ = ["register"]


def register(commands: Commands, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser("service", help="services: list, type, find, call")
    add = verbs(parser, common)
    p = add("list", run=list_, help="services in the graph")
    p.add_argument("-t", "--show-types", action="store_true")
    p.add_argument(
        "--include-hidden-services", action="store_true", help="those with a token starting _"
    )
    add("type", run=type_, help="the type of a service").add_argument("name")
    add("find", run=find, help="the services of a type").add_argument("type")
    p = add("call", run=call, help="call a service with a request given as YAML")
    p.add_argument("name")
    p.add_argument("type")
    p.add_argument("values", nargs="?", default="{}")
    p.add_argument("--timeout", type=float, default=60.0)
    p = add("echo", run=echo, help="print a service's events (its introspection)")
    p.add_argument("name")
    p.add_argument("--once", action="store_true", help="exit after the first event")
    p.add_argument("--no-arr", action="store_true", help="arrays as their type and length")
    p.add_argument("--no-str", action="store_true", help="strings as their length")
    add_qos_options(p)


@with_account
def list_(context: Context, args: argparse.Namespace) -> int:
    table = current_graph(context).services()
    for name in sorted(n for n in table if args.include_hidden_services or not is_hidden(n)):
        print(f"{name} [{', '.join(sorted(table[name]))}]" if args.show_types else name)
    return 0


@with_account
def type_(context: Context, args: argparse.Namespace) -> int:
    name = resolve(args.name, "service name")
    kinds = current_graph(context).services().get(name)
    if kinds is None:
        raise CommandError(f"no service {name!r} in the graph (see 'emailmw service list')")
    for kind in sorted(kinds):
        print(kind)
    return 0


@with_account
def find(context: Context, args: argparse.Namespace) -> int:
    for name, kinds in sorted(current_graph(context).services().items()):
        if args.type in kinds:
            print(name)
    return 0


@with_account
def echo(context: Context, args: argparse.Namespace) -> int:
    """ros2's ``service echo``: the events a service and its clients publish once their
    introspection is on (``configure_introspection``), each as YAML."""
    name = resolve(args.name, "service name")
    for kind in current_graph(context).services().get(name, ()):
        with contextlib.suppress(Exception):  # (its events read as their type where known)
            event_type(service_type(kind))
    events = argparse.Namespace(**vars(args))
    events.name = f"{name}/_service_event"
    events.field, events.csv, events.filter_expr = None, False, None
    verb: Any = topic.echo
    return int(verb.__wrapped__(context, events))


def call(args: argparse.Namespace) -> int:
    kind = service_type(args.type)  # mistakes in the arguments before connecting
    try:
        request = deserialize(kind.Request, yaml.safe_dump(yaml_values(args.values)))
    except TypeMismatchError as exc:
        raise CommandError(f"VALUES: {exc}") from None
    return _call(args, kind, request)


@with_account
def _call(context: Context, args: argparse.Namespace, kind: ServiceType, request: object) -> int:
    node = Node(f"emailmw_cli_call_{int(time.time())}", context=context, announce_period=60,
                start_parameter_services=False)  # fmt: skip
    name = resolve(args.name, "service name")
    client = node.create_client(kind, name)
    if not client.wait_for_service(timeout_sec=min(args.timeout, 0.5)):
        # a server that does not announce itself (the C++ rmw_email) may still answer
        print("waiting for service to become available...", file=sys.stderr, flush=True)
    print(f"requester: making request: {serialize(request).strip()}", flush=True)
    try:
        response = client.call(request, timeout_sec=args.timeout)
    except ServiceTimeoutError:
        raise CommandError(
            f"no answer from service {name!r} within {args.timeout:g} s: is its server "
            "running? (see 'emailmw service list'; --timeout S waits longer)"
        ) from None
    print(f"response:\n{serialize(response).strip()}")
    node.destroy_node()
    return 0
