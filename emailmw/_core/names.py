"""ROS 2 names: validation and resolution of node names, namespaces, topics and services.

Rules (as rcl's): a node name is ``[A-Za-z_][A-Za-z0-9_]*``; a namespace is ``/`` or absolute
tokens; a topic or service name is made of tokens of ``[A-Za-z0-9_]`` that do not start with
a digit, separated by single ``/``, with no trailing ``/``; it is absolute (``/a``), relative
(``a``, resolved against the namespace) or private (``~`` or ``~/a``, resolved against the
node's own name). ``{node}`` and ``{ns}`` substitutions are expanded.
"""

from __future__ import annotations

import re
from typing import Final

from .errors import InvalidNameError

__all__ = ["is_hidden", "resolve_name", "validate_namespace", "validate_node_name"]

_NODE_RE: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TOKEN_RE: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def validate_node_name(name: str) -> str:
    if not isinstance(name, str) or not _NODE_RE.fullmatch(name):
        raise InvalidNameError(
            f"invalid node name {name!r}: letters, digits and '_', not starting with a digit"
        )
    return name


def _check_tokens(name: str, what: str) -> None:
    body = name.lstrip("/")
    if not body:
        return
    for token in body.split("/"):
        if not _TOKEN_RE.fullmatch(token):
            raise InvalidNameError(
                f"invalid {what} {name!r}: token {token!r} must be letters, digits and '_', "
                "not starting with a digit (no empty tokens, no trailing '/')"
            )


def validate_namespace(namespace: str) -> str:
    """``""``/``"x"`` become absolute; returns the normalized namespace."""
    if not isinstance(namespace, str):
        raise InvalidNameError(f"namespace must be a str, got {type(namespace).__name__}")
    ns = namespace if namespace.startswith("/") else f"/{namespace}"
    if len(ns) > 1 and ns.endswith("/"):
        raise InvalidNameError(f"invalid namespace {namespace!r}: no trailing '/'")
    _check_tokens(ns, "namespace")
    return ns


def resolve_name(name: str, node: str, namespace: str, what: str = "topic name") -> str:
    """The fully qualified name of ``name`` for a node ``node`` in ``namespace``."""
    if not isinstance(name, str) or not name:
        raise InvalidNameError(f"{what} must be a non-empty str")
    expanded = name.replace("{node}", node).replace("{ns}", namespace.strip("/"))
    if expanded == "~":
        expanded = f"{namespace.rstrip('/')}/{node}"
    elif expanded.startswith("~/"):
        expanded = f"{namespace.rstrip('/')}/{node}/{expanded[2:]}"
    elif "~" in expanded:
        raise InvalidNameError(f"invalid {what} {name!r}: '~' only as '~' or a '~/' prefix")
    elif not expanded.startswith("/"):
        expanded = f"{namespace.rstrip('/')}/{expanded}"
    if expanded != "/" and expanded.endswith("/"):
        raise InvalidNameError(f"invalid {what} {name!r}: no trailing '/'")
    _check_tokens(expanded, what)
    return expanded


def is_hidden(name: str) -> bool:
    """ROS's hidden names: a topic, service or node with a token starting with ``_``
    (``/fibonacci/_action/status``, ``/_emailmw/graph``), left out of ``list`` verbs unless
    asked for."""
    return any(token.startswith("_") for token in name.split("/"))
