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
        stem: {send: ["/robot1/arm/cmd/*"], as: ["/base/station"]}
        ymp: {send: ["/robot1/motion/arm/*"], as: [base]}
        floctrl: {as: ["/plant/line1"], to: ["/plant/*"], topics: [status]}
      gw:
        relay: ["/stem/far", "/ymp/**"]
        accounts: [gw@lab.example, gw@far.example]
      adder:
        serve: [/add_two_ints]
        accounts: [adder@lab.example]

``accounts`` names the mail accounts (addresses) the identity reads and answers from: a
client with ``only_recipients`` accepts a response only from an identity bound to the
account the request went to (:meth:`Permissions.answers_from`), and a relay's copy counts
only when the hop before it sent the message to one of the relay's accounts.

``relay`` names ``/FACE/HUB``: the routed mail (of that face, to that hub) the identity may
relay as a hub or gateway (every relay a message names in ``Route-Via`` needs it, and
accounts that the hop before it sent the message to, checked at every hop).

The faces have grants in their own vocabulary (``docs/security.md``): Stem ``send`` names
``/hub/cell/TYPE`` (``/hub/cell/cmd/CMD`` for a command) and ``as`` the cells
(``/hub/cell``) the identity may speak and answer as; YMP ``send`` names
``/host/protocol/service/action`` and ``as`` the hosts it may speak and answer as; floctrl
``as`` names the paths (``/orch/node``, ``/orch``) it may publish as, ``to`` the addresses
(``/orch/*``, ``/*/*``, ...) and ``topics`` the topics it may publish to.

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

from .._core.config import read_yaml
from .._core.errors import ConfigError
from .._core.faces import face, face_names
from ._keystore import NAME_RE

__all__ = [
    "ACTIONS",
    "INTERNAL_PREFIX",
    "Permissions",
    "load_permissions",
    "name_matches",
]

ACTIONS: Final = ("publish", "subscribe", "call", "serve", "relay")
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
        """True when ``identity`` may do ``action`` (publish, subscribe, call, serve, relay,
        or a face's ``stem.send`` ...) on ``name``."""
        if "." not in action and name.startswith(INTERNAL_PREFIX):
            return True
        patterns = self.grants.get(identity, {}).get(action, ())
        return any(name_matches(pattern, name) for pattern in patterns)

    def answers_from(self, identity: str, address: str) -> bool:
        """True when ``identity`` is bound to the account ``address`` (its ``accounts``,
        compared as bare lower-case addresses)."""
        return address.strip().lower() in {a.lower() for a in self.accounts_of(identity)}

    def accounts_of(self, identity: str) -> tuple[str, ...]:
        """The accounts ``identity`` is bound to (its ``accounts``, as written)."""
        return tuple(self.grants.get(identity, {}).get("accounts", ()))

    def bound_to(self, addresses: frozenset[str]) -> bool:
        """True when some identity is bound to one of ``addresses`` (bare, lower-case)."""
        return any(
            a.lower() in addresses for grants in self.grants.values()
            for a in grants.get("accounts", ())
        )  # fmt: skip

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
                if action in face_names():  # a face's grants: its verbs (``_core.faces``)
                    declared = face(action)
                    verbs = {} if patterns is None else patterns
                    if not isinstance(verbs, Mapping):
                        raise ConfigError(
                            f"expected a mapping with keys {', '.join(declared.verbs)}",
                            source=source, key=f"{key}.{action}",
                        )  # fmt: skip
                    for sub, listed_patterns in verbs.items():
                        if sub not in declared.verbs:
                            raise ConfigError(
                                f"unknown key (expected one of: {', '.join(declared.verbs)})",
                                source=source, key=f"{key}.{action}.{sub}",
                            )  # fmt: skip
                        name = f"{action}.{sub}"
                        grants[identity][name] = _patterns(
                            listed_patterns, source, f"{key}.{name}", plain=sub in declared.plain
                        )
                    continue
                if action == "accounts":
                    grants[identity][action] = _accounts(patterns, source, f"{key}.{action}")
                    continue
                if action not in ACTIONS:
                    expected = ", ".join((*ACTIONS, "accounts", *face_names()))
                    raise ConfigError(f"unknown action (expected one of: {expected})",
                                      source=source, key=f"{key}.{action}")  # fmt: skip
                grants[identity][action] = _patterns(patterns, source, f"{key}.{action}")
        return cls(grants, source)


def _listed(value: Any, source: str, key: str, what: str) -> list[Any]:
    """A permissions entry's list (None: empty; a single string counts as a list)."""
    items = [] if value is None else value
    if isinstance(items, str):
        items = [items]
    if not isinstance(items, list):
        raise ConfigError(f"expected a list of {what}", source=source, key=key)
    return items


def _patterns(patterns: Any, source: str, key: str, *, plain: bool = False) -> tuple[str, ...]:
    """One grant's list of patterns, validated (a single string counts as a list)."""
    items = _listed(patterns, source, key, "names")
    for index, pattern in enumerate(items):
        if (
            not isinstance(pattern, str)
            or not pattern
            or (not plain and not pattern.startswith("/"))
            or any(c in pattern for c in "\r\n\x00")
        ):
            what = "a name" if plain else "a name starting with '/'"
            raise ConfigError(f"expected {what}, got {pattern!r}", source=source,
                              key=f"{key}[{index}]")  # fmt: skip
    return tuple(items)


def _accounts(addresses: Any, source: str, key: str) -> tuple[str, ...]:
    """An identity's ``accounts``: bare addresses (``name@domain``)."""
    items = _listed(addresses, source, key, "addresses")
    for index, address in enumerate(items):
        if (
            not isinstance(address, str)
            or address.count("@") != 1
            or any(c in address for c in " <>\r\n\x00\t,")
        ):
            raise ConfigError(f"expected an address (name@domain), got {address!r}",
                              source=source, key=f"{key}[{index}]")  # fmt: skip
    return tuple(a.strip() for a in items)


def load_permissions(path: str | Path) -> Permissions:
    """Read and validate a permissions file."""
    return Permissions.from_mapping(read_yaml(Path(path)), str(path))
