"""``emailmw interface list|show``: the message and service types emailmw knows."""

from __future__ import annotations

import argparse
from typing import Any

from .._core.interfaces import ServiceType, get_interface, interface_names
from .._core.interfaces import show as show_interface
from .common import CommandError, Commands, verbs

__all__ = ["message_type", "register", "service_type"]


def register(commands: Commands, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser("interface", help="message and service types")
    add = verbs(parser, common)
    add("list", run=list_, help="known types")
    add("show", run=show, help="the fields of a type").add_argument("type")


def list_(args: argparse.Namespace) -> int:
    for name in interface_names():
        print(name)
    return 0


def show(args: argparse.Namespace) -> int:
    """The definition as ros2 interface show prints it: ROS type names, comments, nested
    types expanded."""
    _interface(args.type, "TYPE")
    print(show_interface(args.type))
    return 0


def _interface(name: str, what: str) -> Any:
    try:
        return get_interface(name)
    except KeyError:
        raise CommandError(
            f"{what}: unknown type {name!r} (see 'emailmw interface list')"
        ) from None


def message_type(name: str) -> Any:
    """The message type ``name`` (``std_msgs/msg/String``); one line when it is not one."""
    kind = _interface(name, "TYPE")
    if isinstance(kind, ServiceType):
        raise CommandError(
            f"TYPE: {name!r} is a service type: a topic carries a message type such as "
            "std_msgs/msg/String (see 'emailmw interface list')"
        )
    return kind


def service_type(name: str) -> ServiceType:
    """The service type ``name``; one line when it is not one."""
    kind = _interface(name, "TYPE")
    if not isinstance(kind, ServiceType):
        raise CommandError(
            f"TYPE: {name!r} is not a service type (such as example_interfaces/srv/AddTwoInts)"
        )
    return kind
