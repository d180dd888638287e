"""Permissions: which identity may publish, subscribe, call and serve which names.

A YAML file in the spirit of SROS2's permissions (grants per identity, default deny)::

    identities:
      talker:
        publish: [/chatter]
        subscribe: []
      robot1:
        publish: ["/robot1/**"]
        subscribe: ["/cmd/*", /chatter]
        call: [/add_two_ints]
        serve: ["/robot1/*"]

Patterns are ROS names with wildcards: ``*`` stands for one name token (no ``/``), ``**``
for any number of tokens, ``/**`` at the end for the name and everything under it. An
identity that is not in the file may do nothing; an action an identity does not list is
denied. emailmw's own topics (``/_emailmw/...``, the graph) are always allowed. Pure: no
I/O but :func:`load_permissions`; thread-safe (immutable).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from .._config import read_yaml
from .._exceptions import ConfigError
from ._keystore import NAME_RE

__all__ = ["ACTIONS", "INTERNAL_PREFIX", "Permissions", "load_permissions", "name_matches"]

ACTIONS: Final = ("publish", "subscribe", "call", "serve")
INTERNAL_PREFIX: Final = "/_emailmw/"


@functools.lru_cache(maxsize=1024)
def _pattern(pattern: str) -> re.Pattern[str]:
    out: list[str] = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("/**", i) and i + 3 == len(pattern):
            out.append("(?:/.*)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out))


def name_matches(pattern: str, name: str) -> bool:
    """True when ROS name ``name`` matches ``pattern`` (``*``: one token, ``**``: any)."""
    return _pattern(pattern).fullmatch(name) is not None


@dataclass(frozen=True, slots=True)
class Permissions:
    """Grants by identity: ``{identity: {action: (pattern, ...)}}``; ``source`` names the
    file. Immutable."""

    grants: Mapping[str, Mapping[str, tuple[str, ...]]]
    source: str = "<dict>"

    def allows(self, identity: str, action: str, name: str) -> bool:
        """True when ``identity`` may do ``action`` (publish, subscribe, call, serve) on
        ``name``."""
        if name.startswith(INTERNAL_PREFIX):
            return True
        patterns = self.grants.get(identity, {}).get(action, ())
        return any(name_matches(pattern, name) for pattern in patterns)

    @classmethod
    def from_mapping(cls, data: Any, source: str = "<dict>") -> Permissions:
        """Validate a parsed permissions document; :class:`ConfigError` naming file and key."""
        if not isinstance(data, Mapping) or set(data) != {"identities"}:
            raise ConfigError("expected a mapping with one key, 'identities'", source=source)
        identities = data["identities"]
        if not isinstance(identities, Mapping):
            raise ConfigError("expected a mapping of identity names", source=source,
                              key="identities")  # fmt: skip
        grants: dict[str, dict[str, tuple[str, ...]]] = {}
        for identity, listed in identities.items():
            key = f"identities.{identity}"
            if not isinstance(identity, str) or not NAME_RE.fullmatch(identity):
                raise ConfigError("not an identity name", source=source, key=key)
            actions = {} if listed is None else listed
            if not isinstance(actions, Mapping):
                raise ConfigError(f"expected a mapping with keys {', '.join(ACTIONS)}",
                                  source=source, key=key)  # fmt: skip
            grants[identity] = {}
            for action, patterns in actions.items():
                if action not in ACTIONS:
                    raise ConfigError(f"unknown action (expected one of: {', '.join(ACTIONS)})",
                                      source=source, key=f"{key}.{action}")  # fmt: skip
                items = [] if patterns is None else patterns
                if isinstance(items, str):
                    items = [items]
                if not isinstance(items, list):
                    raise ConfigError("expected a list of names", source=source,
                                      key=f"{key}.{action}")  # fmt: skip
                for index, pattern in enumerate(items):
                    if (
                        not isinstance(pattern, str)
                        or not pattern.startswith("/")
                        or any(c in pattern for c in "\r\n\x00")
                    ):
                        raise ConfigError(
                            f"expected a ROS name starting with '/', got {pattern!r}",
                            source=source, key=f"{key}.{action}[{index}]",
                        )  # fmt: skip
                grants[identity][action] = tuple(items)
        return cls(grants, source)


def load_permissions(path: str | Path) -> Permissions:
    """Read and validate a permissions file."""
    return Permissions.from_mapping(read_yaml(Path(path)), str(path))
