"""``emailmw param list|get|set|describe|dump|load|delete``: ros2 param's verbs, over the
parameter services every node offers (answered while the node is spun)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import yaml

from .._core.ros_args import read_params_file
from .._delivery.context import Context
from .._ros.node import Node
from .._ros.parameters import Parameter, parameter_value_to_python
from ..rcl_interfaces.srv import DescribeParameters, GetParameters, ListParameters, SetParameters
from .common import CommandError, Commands, current_graph, verbs, with_account, yaml_values

__all__ = ["register"]

_TYPE_NAMES = {
    Parameter.Type.BOOL: ("Boolean value is", "boolean"),
    Parameter.Type.INTEGER: ("Integer value is", "integer"),
    Parameter.Type.DOUBLE: ("Double value is", "double"),
    Parameter.Type.STRING: ("String value is", "string"),
    Parameter.Type.BYTE_ARRAY: ("Byte values are", "byte array"),
    Parameter.Type.BOOL_ARRAY: ("Boolean values are", "boolean array"),
    Parameter.Type.INTEGER_ARRAY: ("Integer values are", "integer array"),
    Parameter.Type.DOUBLE_ARRAY: ("Double values are", "double array"),
    Parameter.Type.STRING_ARRAY: ("String values are", "string array"),
}


def register(commands: Commands, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser("param", help="parameters of nodes: list, get, set, ...")
    add = verbs(parser, common)
    p = add("list", run=list_, help="the parameters of a node (of every node)")
    p.add_argument("node", nargs="?", metavar="NODE")
    p.add_argument("--param-type", action="store_true", help="show each one's type")
    p = add("get", run=get, help="a parameter's value")
    p.add_argument("node", metavar="NODE")
    p.add_argument("name", metavar="NAME")
    p = add("set", run=set_, help="set a parameter (its value as YAML)")
    p.add_argument("node", metavar="NODE")
    p.add_argument("name", metavar="NAME")
    p.add_argument("value", metavar="VALUE")
    p = add("describe", run=describe, help="a parameter's descriptor")
    p.add_argument("node", metavar="NODE")
    p.add_argument("names", nargs="+", metavar="NAME")
    p = add("dump", run=dump, help="a node's parameters as a params file")
    p.add_argument("node", metavar="NODE")
    p.add_argument("--output-dir", type=Path, metavar="DIR", help="write NODE.yaml there")
    p = add("load", run=load, help="set a node's parameters from a params file")
    p.add_argument("node", metavar="NODE")
    p.add_argument("file", type=Path, metavar="FILE")
    p = add("delete", run=delete, help="undeclare a parameter")
    p.add_argument("node", metavar="NODE")
    p.add_argument("name", metavar="NAME")


def _node_name(name: str) -> str:
    return name if name.startswith("/") else f"/{name}"


class _Remote:
    """The parameter services of node ``target``, called from a short-lived CLI node."""

    def __init__(self, context: Context, target: str, timeout: float = 10.0) -> None:
        self.target = _node_name(target)
        self.timeout = timeout
        self._node = Node(f"emailmw_cli_param_{int(time.time())}", context=context,
                          start_parameter_services=False, announce_period=60)  # fmt: skip

    def call(self, kind: Any, service: str, request: Any) -> Any:
        client = self._node.create_client(kind, f"{self.target}/{service}")
        if not client.wait_for_service(timeout_sec=self.timeout):
            raise CommandError(
                f"node {self.target!r} offers no {service} service (is it running, with "
                "parameter services? see 'emailmw node list')"
            )
        return client.call(request, timeout_sec=max(self.timeout, 30.0))

    def names(self) -> list[str]:
        return list(
            self.call(ListParameters, "list_parameters", ListParameters.Request()).result.names
        )

    def values(self, names: list[str]) -> list[Any]:
        return list(
            self.call(GetParameters, "get_parameters", GetParameters.Request(names=names)).values
        )

    def set(self, parameters: list[Parameter[Any]]) -> list[Any]:
        request = SetParameters.Request(parameters=[p.to_parameter_msg() for p in parameters])
        return list(self.call(SetParameters, "set_parameters", request).results)

    def set_one(self, parameter: Parameter[Any]) -> str | None:
        """Set (or delete) one parameter: None when it worked, else why not. One result
        a parameter set: more when the node's pre-set callbacks set more with it."""
        results = self.set([parameter])
        failed = next((r for r in results if not r.successful), None)
        if not results:
            return "no result"
        return None if failed is None else str(failed.reason)

    def close(self) -> None:
        self._node.destroy_node()


@with_account
def list_(context: Context, args: argparse.Namespace) -> int:
    if args.node is not None:
        targets = [_node_name(args.node)]
    else:
        graph = current_graph(context)
        targets = sorted(
            n for n, r in graph.nodes.items()
            if any(s == f"{n}/list_parameters" for s, _ in r.services)
        )  # fmt: skip
    for target in targets:
        remote = _Remote(context, target)
        try:
            names = remote.names()
            kinds = (
                [Parameter.Type(v.type) for v in remote.values(names)] if args.param_type else []
            )
        finally:
            remote.close()
        if args.node is None:
            print(f"{target}:")
        for index, name in enumerate(names):
            shown = f"  {name}"
            if kinds:
                shown += f" (type: {_TYPE_NAMES.get(kinds[index], ('', 'not set'))[1]})"
            print(shown)
    return 0


@with_account
def get(context: Context, args: argparse.Namespace) -> int:
    remote = _Remote(context, args.node)
    try:
        (value,) = remote.values([args.name])
    finally:
        remote.close()
    kind = Parameter.Type(value.type)
    if kind == Parameter.Type.NOT_SET:
        print("Parameter not set.")
        return 1
    python = parameter_value_to_python(value)
    print(f"{_TYPE_NAMES[kind][0]}: {python}")
    return 0


def _parameter(name: str, value: Any) -> Parameter[Any]:
    try:
        return Parameter(name, value=value)
    except (TypeError, ValueError) as exc:
        raise CommandError(f"VALUE: {exc}") from None


def set_(args: argparse.Namespace) -> int:
    value = yaml_values(args.value, "VALUE") if args.value.strip() else ""
    return _set(args, _parameter(args.name, value))


@with_account
def _set(context: Context, args: argparse.Namespace, parameter: Parameter[Any]) -> int:
    remote = _Remote(context, args.node)
    try:
        failed = remote.set_one(parameter)
    finally:
        remote.close()
    if failed is None:
        print("Set parameter successful")
        return 0
    print(f"Set parameter failed: {failed}")
    return 1


@with_account
def describe(context: Context, args: argparse.Namespace) -> int:
    remote = _Remote(context, args.node)
    try:
        request = DescribeParameters.Request(names=args.names)
        descriptors = remote.call(DescribeParameters, "describe_parameters", request).descriptors
    finally:
        remote.close()
    for descriptor in descriptors:
        kind = Parameter.Type(descriptor.type)
        print(f"Parameter name: {descriptor.name}")
        print(f"  Type: {_TYPE_NAMES.get(kind, ('', 'not set'))[1]}")
        if descriptor.description:
            print(f"  Description: {descriptor.description}")
        print("  Constraints:")
        if descriptor.read_only:
            print("    Read only: true")
        if descriptor.dynamic_typing:
            print("    Dynamic typing: true")
        if descriptor.additional_constraints:
            print(f"    {descriptor.additional_constraints}")
        for limits in (*descriptor.integer_range, *descriptor.floating_point_range):
            print(f"    Min value: {limits.from_value}")
            print(f"    Max value: {limits.to_value}")
            if limits.step:
                print(f"    Step: {limits.step}")
    return 0


def _nested(values: dict[str, Any]) -> dict[str, Any]:
    """``a.b: 1`` as ``{a: {b: 1}}`` (a params file's layout)."""
    out: dict[str, Any] = {}
    for name, value in sorted(values.items()):
        parts = name.split(".")
        here = out
        for part in parts[:-1]:
            here = here.setdefault(part, {})
        here[parts[-1]] = value
    return out


@with_account
def dump(context: Context, args: argparse.Namespace) -> int:
    remote = _Remote(context, args.node)
    try:
        names = remote.names()
        values = [parameter_value_to_python(v) for v in remote.values(names)]
    finally:
        remote.close()
    params = {n: v for n, v in zip(names, values, strict=True) if v is not None}
    text = yaml.safe_dump({remote.target: {"ros__parameters": _nested(params)}}, sort_keys=False)
    if args.output_dir is not None:
        path = args.output_dir / f"{remote.target.strip('/').replace('/', '__')}.yaml"
        path.write_text(text)
        print(f"Saving to:  {path}")
    else:
        print(text, end="")
    return 0


@with_account
def load(context: Context, args: argparse.Namespace) -> int:
    target = _node_name(args.node)
    values = read_params_file(args.file, target.rpartition("/")[2], target)
    if not values:
        raise CommandError(f"{args.file}: no parameters for {target} in it")
    remote = _Remote(context, target)
    try:
        parameters = [_parameter(n, v) for n, v in values.items()]
        results = remote.set(parameters)
    finally:
        remote.close()
    failed = 0
    # (the node's pre-set callbacks may set more than was asked: those results follow)
    for parameter, result in zip(parameters, results, strict=False):
        if result.successful:
            print(f"Set parameter {parameter.name} successful")
        else:
            failed += 1
            print(f"Set parameter {parameter.name} failed: {result.reason}")
    return 1 if failed else 0


@with_account
def delete(context: Context, args: argparse.Namespace) -> int:
    remote = _Remote(context, args.node)
    try:
        failed = remote.set_one(Parameter(args.name, Parameter.Type.NOT_SET, None))
    finally:
        remote.close()
    if failed is None:
        print("Deleted parameter successfully")
        return 0
    print(f"Deleting parameter failed: {failed}")
    return 1
