"""Shared set-ups of the face tests: hubs joined by gateways, on any transport.

``make(address, hub, routes)`` builds a context for a hub (intraprocess network or real
server); the topologies below only use that, so the same scenario runs on both."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import emailmw
from emailmw import floctrl, stem
from emailmw.testing._modes import wait_for

MakeHub = Callable[[str, str, dict[str, str]], emailmw.Context]


class Calls:
    """Thread-safe record of what delivery methods saw."""

    def __init__(self) -> None:
        self.items: list[Any] = []
        self._cond = threading.Condition()

    def add(self, item: Any) -> None:
        with self._cond:
            self.items.append(item)
            self._cond.notify_all()

    def wait(self, predicate: Callable[[list[Any]], bool], timeout: float = 15.0) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: predicate(self.items), timeout)


class Recording(stem.Cell):
    """A cell that records every delivery as (method, type, data, from)."""

    def __init__(self, name: str, calls: Calls, **kwargs: Any) -> None:
        self.calls = calls
        super().__init__(name, **kwargs)

    def msg_in(self, msg: stem.StemMessage) -> None:
        self.calls.add(("msg_in", str(self.address), msg.type, msg.data, str(msg.from_)))

    def foo_in(self, msg: stem.StemMessage) -> None:
        self.calls.add(("foo_in", str(self.address), msg.type, msg.data, str(msg.from_)))

    def echo_cmd(self, msg: stem.StemMessage) -> Any:
        self.calls.add(("echo_cmd", str(self.address), msg.type, msg.data, str(msg.from_)))
        return msg.data

    def fail_cmd(self, msg: stem.StemMessage) -> Any:
        raise RuntimeError("kaput")

    def response_in(self, msg: stem.StemMessage) -> None:
        self.calls.add(("response_in", str(self.address), msg.type, msg.data, msg.reply_id))

    def msg_ack_in(self, msg: stem.StemMessage) -> None:
        self.calls.add(("msg_ack_in", str(self.address), msg.type, msg.reply_id, str(msg.from_)))


def wait_until(condition: Callable[[], bool], timeout: float = 15.0) -> bool:
    """``condition`` holds within ``timeout`` seconds (the mode suite's deadline poll)."""
    return wait_for(condition, timeout)


# ------------------------------------------------------------------------------ floctrl

#: two orchestras, two nodes each: who can send (every node and supernode)
ORCHESTRAS = {"A": ["n1", "n2"], "B": ["m1", "m2"]}
PARTICIPANTS = ["/A", "/A/n1", "/A/n2", "/B", "/B/m1", "/B/m2"]
ADDRESS_FORMS = ["/A/n1", "/A/n2", "/B/m1", "/A", "/B", "/A/*", "/B/*", "/*", "/*/*"]


def hub_of(path: str) -> str:
    """Each floctrl participant is its own hub: ``/A/n1`` -> ``A_n1``, ``/A`` -> ``A``."""
    return path.strip("/").replace("/", "_")


@contextmanager
def floctrl_world(
    address_of: Callable[[str], str],
    make: MakeHub,
    route: Callable[[str, str], str] | None = None,
) -> Iterator[dict[str, floctrl.Node | floctrl.Supernode]]:
    """Every participant on its own hub (own mail address). ``route(from_hub, to_hub)``:
    the address that reaches ``to_hub`` from ``from_hub`` (default: its own address).
    Yields path -> participant."""
    contexts: list[emailmw.Context] = []
    made: dict[str, floctrl.Node | floctrl.Supernode] = {}
    try:
        for path in PARTICIPANTS:
            hub = hub_of(path)
            routes = {
                hub_of(p): (route or (lambda _, to: address_of(to)))(hub, hub_of(p))
                for p in PARTICIPANTS
                if p != path
            }
            context = make(address_of(hub), hub, routes)
            contexts.append(context)
            parts = path.split("/")
            if len(parts) == 2:
                orch = parts[1]
                made[path] = floctrl.Supernode(
                    orch,
                    nodes={n: hub_of(f"/{orch}/{n}") for n in ORCHESTRAS[orch]},
                    orchestras={o: hub_of(f"/{o}") for o in ORCHESTRAS},
                    context=context,
                )
            else:
                made[path] = floctrl.Node(
                    parts[1], parts[2], supernode_hub=parts[1], context=context
                )
        yield made
    finally:
        for context in contexts:
            context.shutdown()


@contextmanager
def worker_pool(
    make: MakeHub, orchestra_address: str, worker_address: str, members: int
) -> Iterator[tuple[floctrl.Supernode, list[floctrl.Node]]]:
    """An orchestra ``/orch``: its supernode on hub ``orch`` and the node ``/orch/worker``
    on hub ``worker``, run by ``members`` contexts of that one account (one process each, in
    a deployment). Yields the supernode and the nodes."""
    supernode = floctrl.Supernode(
        "orch",
        nodes={"worker": "worker"},
        orchestras={},
        context=make(orchestra_address, "orch", {"worker": worker_address}),
    )
    nodes = [
        floctrl.Node("orch", "worker", supernode_hub="orch",
                     context=make(worker_address, "worker", {"orch": orchestra_address}))
        for _ in range(members)
    ]  # fmt: skip
    yield supernode, nodes


@contextmanager
def ring_of_three(
    make: MakeHub,
    gateway_account: Callable[[str, str], emailmw.Context],
    hub_address: dict[str, str],
    gateway_address: Callable[[str, str], str],
) -> Iterator[tuple[dict[str, emailmw.Context], list[emailmw.Gateway]]]:
    """Hubs x, y, z; gateways xy, yz, zx, each with an account beside both of its hubs.
    Every hub's route to another goes through the gateway between them; a wrong route for
    hub ``lost`` goes round the ring. ``gateway_account(gateway, side)`` makes a
    gateway's account context on hub ``side``'s server, ``gateway_address`` names it."""
    pairs = [("x", "y"), ("y", "z"), ("z", "x")]
    hubs: dict[str, emailmw.Context] = {}
    gateways: list[emailmw.Gateway] = []
    contexts: list[emailmw.Context] = []
    try:
        for gw in pairs:
            name = "".join(gw)
            accounts = {side: gateway_account(name, side) for side in gw}
            contexts += accounts.values()
            routes = {side: (hub_address[side], side) for side in gw}
            # the misconfiguration: "lost" goes on to the next gateway of the ring
            routes["lost"] = (gateway_address(name, gw[1]), gw[1])
            gateways.append(emailmw.Gateway(accounts, routes))
        # each hub reaches the others through the gateway it shares with each
        for hub in ("x", "y", "z"):
            routes = {}
            for gw in pairs:
                if hub in gw:
                    other = gw[1] if gw[0] == hub else gw[0]
                    routes[other] = gateway_address("".join(gw), hub)
            routes["lost"] = routes[sorted(routes)[0]]
            hubs[hub] = make(hub_address[hub], hub, routes)
        for gateway in gateways:
            gateway.start()
        yield hubs, gateways
    finally:
        for context in hubs.values():
            context.shutdown()
        for gateway in gateways:
            gateway.close()
