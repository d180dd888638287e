"""Addresses, envelopes and routing decisions: the core under the Stem, YMP and floctrl
faces (``docs/addressing.md``). Pure functions and immutable values, no I/O; thread-safe.

* :class:`Address` (``hub:name:target``) and :class:`Envelope` (the ``Route-*`` headers);
* :func:`decide`: one hub's decision for one message (deliver, forward, drop), Stem's three
  lookup rules plus the loop guards;
* :func:`node_step`, :func:`supernode_step`, :func:`floctrl_recipients`: floctrl's
  orchestra/supernode delivery rules.

Each face's payload (Stem's, floctrl's, YMP's strict JSON envelope) is read in
``_payloads``.

Every reader returns the value or a reason (a ``str``), never raises on bad input: what a
receiver cannot route is logged with that reason and left in the mailbox.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Final
from urllib.parse import quote, unquote

__all__ = [
    "DEFAULT_ROUTE",
    "HOP_LIMIT",
    "Address",
    "Deliver",
    "Drop",
    "FACE_NAME",
    "Envelope",
    "Forward",
    "Send",
    "decide",
    "floctrl_recipients",
    "node_step",
    "read_envelope",
    "stem_methods",
    "supernode_publish",
    "supernode_step",
]

#: the route a message takes when its hub is not named and its endpoint is not here
DEFAULT_ROUTE: Final = "DEFAULT"
#: gateways a message may pass; one more and it is dropped (a loop in the route tables)
HOP_LIMIT: Final = 8
WILDCARD: Final = "*"
_STEM_DELIMITERS: Final = ":/@-"
_PART_RE: Final = re.compile(r"[^\s\x00-\x1f\x7f]+")
_HEADERS: Final = {
    "to": "Route-To",
    "from": "Route-From",
    "reply": "Route-Reply",
    "orig": "Route-Orig",
}
#: what a face's name looks like (which faces there are: ``faces``)
FACE_NAME: Final = re.compile(r"[a-z][a-z0-9_-]{0,19}")


def _part(value: str, what: str) -> str | None:
    """Why ``value`` cannot be an address part, or None."""
    if not _PART_RE.fullmatch(value):
        return f"{what} {value!r} is empty or holds white space or control characters"
    if not value.isascii() and any("\ud800" <= c <= "\udfff" for c in value):
        return f"{what} {value!r} is not valid Unicode (lone surrogate)"
    if WILDCARD in value and value != WILDCARD:
        return f"{what} {value!r}: '*' stands only as a whole part"
    return None


@dataclass(frozen=True, slots=True)
class Address:
    """``hub:name:target``: ``name`` is required; an empty ``hub`` means this hub (else
    the default route), an empty ``target`` none. ``*`` as ``hub`` or ``name`` is a
    wildcard (floctrl's multicast)."""

    name: str
    hub: str = ""
    target: str = ""

    @classmethod
    def make(cls, name: str, hub: str = "", target: str = "") -> Address | str:
        """The address, or why those parts make none."""
        for value, what in ((name, "name"), (hub, "hub"), (target, "target")):
            if value or what == "name":
                reason = _part(value, what)
                if reason is not None:
                    return reason
        if target == WILDCARD:
            return "target '*': wildcards stand only for hubs and names"
        return cls(name, hub, target)

    @classmethod
    def parse_stem(cls, text: str) -> Address | str:
        """Stem's address string: ``cell``, ``hub:cell`` or ``hub:cell:target``, the
        delimiter any of ``:`` ``/`` ``@`` ``-`` (one kind per address)."""
        used = {c for c in text if c in _STEM_DELIMITERS}
        if len(used) > 1:
            return f"address {text!r} mixes delimiters {''.join(sorted(used))}"
        parts = text.split(used.pop()) if used else [text]
        if len(parts) > 3:
            return f"address {text!r} has more than hub, cell and target"
        if len(parts) == 1:
            return cls.make(parts[0])
        if len(parts) == 2:
            return cls.make(parts[1], parts[0])
        return cls.make(parts[1], parts[0], parts[2])

    def header(self) -> str:
        """The ``Route-*`` header form: always three parts, ``:`` and ``%`` escaped."""
        return ":".join(quote(p, safe="/@-*") for p in (self.hub, self.name, self.target))

    @classmethod
    def from_header(cls, value: str) -> Address | str:
        parts = value.strip().split(":")
        if len(parts) != 3:
            return f"not an address (hub:name:target): {value[:80]!r}"
        hub, name, target = (unquote(p) for p in parts)
        return cls.make(name, hub, target)

    def __str__(self) -> str:
        """Stem's form: ``cell``, ``hub:cell``, ``hub:cell:target`` (``:cell:target``)."""
        if self.target:
            return f"{self.hub}:{self.name}:{self.target}"
        return f"{self.hub}:{self.name}" if self.hub else self.name


@dataclass(frozen=True, slots=True)
class Envelope:
    """The routing fields of one message (``Route-*`` headers). ``orig`` is the first
    sender and never changes; ``hops`` counts the gateways passed."""

    to: Address
    from_: Address
    face: str
    reply: Address | None = None
    orig: Address | None = None
    hops: int = 0

    def headers(self) -> list[tuple[str, str]]:
        items = [(_HEADERS["to"], self.to.header()), (_HEADERS["from"], self.from_.header())]
        if self.reply is not None:
            items.append((_HEADERS["reply"], self.reply.header()))
        items.append((_HEADERS["orig"], (self.orig or self.from_).header()))
        items += [("Route-Hops", str(self.hops)), ("Route-Face", self.face)]
        return items

    @property
    def answer_to(self) -> Address:
        """Where answers go: ``reply``, else ``from``."""
        return self.reply or self.from_

    def forwarded(self, to: Address | None = None) -> Envelope:
        """This envelope one gateway further (``to`` rewritten when given)."""
        return replace(self, to=to or self.to, orig=self.orig or self.from_, hops=self.hops + 1)


def read_envelope(headers: Mapping[str, str]) -> Envelope | str | None:
    """The envelope of an email's headers; None when it has no ``Route-To`` (not a routed
    message); a reason when it is broken."""
    if headers.get(_HEADERS["to"]) is None:
        return None
    found: dict[str, Address | None] = {}
    for key, name in _HEADERS.items():
        value = headers.get(name)
        if value is None:
            if key in ("to", "from"):
                return f"no {name} header"
            found[key] = None
            continue
        address = Address.from_header(value)
        if isinstance(address, str):
            return f"{name}: {address}"
        found[key] = address
    hops_text = headers.get("Route-Hops", "0").strip()
    if not hops_text.isdigit() or not hops_text.isascii() or len(hops_text) > 4:
        return f"Route-Hops is not a small integer: {hops_text[:20]!r}"
    face = headers.get("Route-Face", "").strip()
    if not FACE_NAME.fullmatch(face):
        return f"Route-Face {face[:20]!r} is not a face's name"
    to, from_ = found["to"], found["from"]
    assert to is not None
    assert from_ is not None
    return Envelope(to, from_, face, found["reply"], found["orig"], int(hops_text))


# ----------------------------------------------------------------------------- decisions


@dataclass(frozen=True, slots=True)
class Deliver:
    """Hand the message to the local endpoint ``(name, target)`` (``target`` '' when the
    endpoint was found without the message's target)."""

    name: str
    target: str


@dataclass(frozen=True, slots=True)
class Forward:
    """Send the message on, one hop further, to the mail address ``next_hop``."""

    next_hop: str
    envelope: Envelope


@dataclass(frozen=True, slots=True)
class Drop:
    """An addressing error: logged with ``reason``, the email left where it is."""

    reason: str


def decide(
    envelope: Envelope,
    here: str,
    has_endpoint: Callable[[str, str], bool],
    routes: Mapping[str, str],
    *,
    via_gateway: bool = False,
    hop_limit: int = HOP_LIMIT,
) -> Deliver | Forward | Drop:
    """Hub ``here``'s decision for one message (``docs/addressing.md``): Stem's three
    phases plus the loop guards. ``routes`` maps hub names (and ``DEFAULT``) to next-hop
    mail addresses; ``via_gateway``: the message came through one (it is never sent to the
    default route again)."""
    to = envelope.to
    if envelope.hops >= hop_limit:
        return Drop(f"hop limit: {envelope.hops} gateways passed (a routing loop?)")
    if to.hub and to.hub != here:
        next_hop = routes.get(to.hub)
        if next_hop is None:
            return Drop(f"no route to hub {to.hub!r}")
        return Forward(next_hop, envelope.forwarded())
    if has_endpoint(to.name, to.target):
        return Deliver(to.name, to.target)
    if to.target and has_endpoint(to.name, ""):
        return Deliver(to.name, "")
    if not to.hub and not via_gateway and DEFAULT_ROUTE in routes:
        return Forward(routes[DEFAULT_ROUTE], envelope.forwarded())
    return Drop(f"no endpoint {to.name!r}" + (f" (target {to.target!r})" if to.target else "")
                + f" on hub {here!r}")  # fmt: skip


def stem_methods(type_: str, cmd: str | None) -> tuple[str, str]:
    """The delivery methods Stem tries, in order: ``<cmd>_cmd`` for a ``cmd`` message,
    else ``<type>_in``; then ``msg_in``."""
    return (f"{cmd}_cmd" if type_ == "cmd" else f"{type_}_in"), "msg_in"


# ----------------------------------------------------------------------------- floctrl


@dataclass(frozen=True, slots=True)
class Send:
    """One floctrl step's output: deliver here (``to`` None) or send to the node or
    supernode ``to`` (``/orch/node``, ``/orch``) with ``address``."""

    to: str | None
    address: str


def _split(address: str) -> tuple[str, str | None] | str:
    parts = address.split("/")
    if not address.startswith("/") or len(parts) not in (2, 3) or not all(parts[1:]):
        return f"not a floctrl address (/orch, /orch/node, /*, /*/*, /orch/*): {address!r}"
    orch, node = parts[1], (parts[2] if len(parts) == 3 else None)
    if orch == WILDCARD and node not in (None, WILDCARD):
        return f"not a floctrl address: {address!r} ('/*/' takes only '*')"
    return orch, node


def node_step(orch: str, node: str, address: str) -> list[Send] | str:
    """What node ``/orch/node`` does with a message it publishes to ``address``: deliver
    to itself what it matches (``/orch/node``, ``/*/*``, ``/orch/*``), forward to its
    supernode everything that reaches anyone else."""
    split = _split(address)
    if isinstance(split, str):
        return split
    to_orch, to_node = split
    if (to_orch, to_node) == (orch, node):
        return [Send(None, address)]
    out: list[Send] = []
    if to_node == WILDCARD and to_orch in (WILDCARD, orch):
        out.append(Send(None, address))
    out.append(Send(f"/{orch}", address))
    return out


def supernode_step(
    orch: str, address: str, nodes: Iterable[str], orchestras: Iterable[str], originator: str
) -> list[Send] | str:
    """What the supernode of ``orch`` does with a message for ``address`` (from one of its
    nodes, from another supernode, or its own when ``originator`` is ``/orch``). ``nodes``:
    its orchestra's nodes; ``orchestras``: every orchestra. Never sends a copy back to the
    originator; ``/*/*`` goes to each other supernode rewritten to ``/remote/*``."""
    split = _split(address)
    if isinstance(split, str):
        return split
    to_orch, to_node = split
    me = f"/{orch}"
    if to_orch == WILDCARD and to_node is None:  # /*: every supernode
        out = [] if originator == me else [Send(None, address)]
        if _from_here(originator, orch):
            out += [Send(f"/{o}", f"/{o}") for o in orchestras if o != orch]
        return out
    if to_orch == WILDCARD:  # /*/*: the other orchestras, rewritten, and this one
        out = [Send(f"/{o}", f"/{o}/*") for o in orchestras if o != orch]
        return out + _local_fanout(orch, nodes, originator)
    if to_orch != orch:
        return [Send(f"/{to_orch}", address)]
    if to_node is None:
        return [Send(None, address)]  # /orch: the supernode itself
    if to_node == WILDCARD:
        return _local_fanout(orch, nodes, originator)
    return [Send(f"/{orch}/{to_node}", address)]


def supernode_publish(
    orch: str, address: str, nodes: Iterable[str], orchestras: Iterable[str]
) -> list[Send] | str:
    """What the supernode of ``orch`` does with a message it publishes itself: a copy for
    itself when it matches ``address`` (``/orch``, ``/*``, ``/*/*``, ``/orch/*``), then
    :func:`supernode_step` as the originator."""
    split = _split(address)
    if isinstance(split, str):
        return split
    to_orch, to_node = split
    steps = supernode_step(orch, address, nodes, orchestras, f"/{orch}")
    assert not isinstance(steps, str)  # the address was checked above
    matches = (to_orch == orch and to_node in (None, WILDCARD)) or to_orch == WILDCARD
    own = matches and not any(send.to is None for send in steps)
    return ([Send(None, address)] if own else []) + steps


def _from_here(originator: str, orch: str) -> bool:
    return originator == f"/{orch}" or originator.startswith(f"/{orch}/")


def _local_fanout(orch: str, nodes: Iterable[str], originator: str) -> list[Send]:
    """``/orch/*`` at its supernode: each node but the originator, and a copy for the
    supernode unless it is the originator."""
    address = f"/{orch}/*"
    out = [Send(f"/{orch}/{n}", address) for n in nodes if f"/{orch}/{n}" != originator]
    if originator != f"/{orch}":
        out.append(Send(None, address))
    return out


def floctrl_recipients(
    orchestras: Mapping[str, Iterable[str]], sender: str, address: str
) -> Counter[str] | str:
    """Who receives a message ``sender`` (``/orch/node`` or a supernode ``/orch``)
    publishes to ``address``, and how many copies each, by running the node and supernode
    steps to the end. ``orchestras``: orchestra -> its nodes. A reason for a bad address."""
    members = {o: list(n) for o, n in orchestras.items()}
    received: Counter[str] = Counter()
    queue: list[tuple[str, str]] = [(sender, address)]  # (who acts, address)
    first = True
    steps = 0
    while queue:
        steps += 1
        if steps > 10_000:
            return "floctrl routing did not end (a loop)"
        who, addr = queue.pop(0)
        parts = who.split("/")
        if len(parts) == 3:  # a node
            orch, node = parts[1], parts[2]
            if first:
                out: list[Send] | str = node_step(orch, node, addr)
            else:
                out = [Send(None, addr)]  # a node given a message delivers it
        else:
            orch = parts[1]
            nodes = members.get(orch, [])
            if first:
                out = supernode_publish(orch, addr, nodes, members)
            else:
                out = supernode_step(orch, addr, nodes, members, sender)
        first = False
        if isinstance(out, str):
            return out
        for send in out:
            if send.to is None:
                received[who] += 1
            else:
                queue.append((send.to, send.address))
    return received
