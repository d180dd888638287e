"""Gateways: one process with an account on each of several hubs (other accounts, other
mail servers) that relays routed messages between them (``docs/addressing.md``).

Each account is a :class:`~emailmw.Context` whose router shares one route table: hub name
(or ``DEFAULT``) -> the mail address that reaches it and the account (``via``) whose
server sends there. What arrives in any account for another hub goes one hop further;
what is for no known hub, loops (hop limit) or repeats a Message-ID already relayed is
dropped, logged with its reason and left in the mailbox. Optionally it is an orchestra's
floctrl supernode too. :meth:`Gateway.report` says what was relayed and dropped, and why.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from .._core.closeable import Closeable
from .._core.config import load_options, read_yaml
from .._core.errors import ConfigError
from .._delivery.context import Context
from .._delivery.routing import Hop
from .floctrl import Supernode

__all__ = ["Gateway", "load_gateway"]

_KEYS: Final = frozenset({"accounts", "routes", "supernode"})
_SUPERNODE_KEYS: Final = frozenset({"account", "orchestra", "nodes", "orchestras"})


class Gateway(Closeable):
    """Relays between the hubs of ``accounts`` (name -> context) by ``routes`` (hub ->
    ``(mail address, account name)``). Owns the contexts: :meth:`close` shuts them down.
    Thread-safe."""

    def __init__(
        self, accounts: Mapping[str, Context], routes: Mapping[str, tuple[str, str]]
    ) -> None:
        self.accounts = dict(accounts)
        for hub, (_address, via) in routes.items():
            if via not in self.accounts:
                raise ConfigError(f"route {hub!r}: via {via!r} is not one of the accounts")
        table = {
            hub: Hop(address, self.accounts[via].router.outlet)
            for hub, (address, via) in routes.items()
        }
        for context in self.accounts.values():
            context.router.set_routes(table)
        self.supernode: Supernode | None = None

    def start(self) -> None:
        for context in self.accounts.values():
            context.start_receiving()

    def report(self) -> dict[str, Any]:
        """Relayed, delivered and dropped counts (with reasons) per account, and totals."""
        totals: Counter[str] = Counter()
        reasons: Counter[str] = Counter()
        accounts: dict[str, Any] = {}
        for name, context in self.accounts.items():
            router = context.router
            accounts[name] = {"hub": router.hub, **router.counts, "drops": dict(router.drops)}
            totals.update(router.counts)
            reasons.update(router.drops)
        return {
            "relayed": totals["relayed"],
            "delivered": totals["delivered"],
            "dropped": totals["dropped"],
            "drop_reasons": dict(reasons),
            "accounts": accounts,
        }

    def close(self) -> None:
        if self.supernode is not None:
            self.supernode.close()
        for context in self.accounts.values():
            context.shutdown()


def load_gateway(path: str | os.PathLike[str]) -> Gateway:
    """A gateway from its YAML file::

        accounts:            # name -> an email configuration (a mapping, or a file)
          a: {user: {...}, recipients: {to: gw@a.test}, routing: {hub: gw-a}}
          b: config-b.yml
        routes:              # hub -> the address that reaches it, and the account to use
          lab-a: {to: lab@a.test, via: a}
          lab-b: {to: lab@b.test, via: b}
        supernode:           # optional: this gateway is floctrl orchestra A's supernode
          {account: a, orchestra: A, nodes: {n1: hub-n1}, orchestras: {B: lab-b}}

    Raises :class:`~emailmw.ConfigError` naming the file and key of a mistake."""
    source = str(path)
    data = read_yaml(Path(path))
    if not isinstance(data, Mapping) or "accounts" not in data:
        raise ConfigError("expected a mapping with 'accounts' and 'routes'", source=source)
    unknown = sorted(str(k) for k in data if k not in _KEYS)
    if unknown:
        raise ConfigError(f"unknown key (expected one of: {', '.join(sorted(_KEYS))})",
                          source=source, key=unknown[0])  # fmt: skip
    accounts_data = data["accounts"]
    if not isinstance(accounts_data, Mapping) or len(accounts_data) < 2:
        raise ConfigError("expected two or more accounts", source=source, key="accounts")
    routes = _read_routes(data.get("routes"), source)
    for hub, (_, via) in routes.items():
        if via not in accounts_data:
            raise ConfigError(f"via {via!r} is not one of the accounts", source=source,
                              key=f"routes.{hub}")  # fmt: skip
    base = Path(path).parent
    contexts: dict[str, Context] = {}
    try:
        for name, account in accounts_data.items():
            if isinstance(account, str):
                options = load_options(base / account)
            elif isinstance(account, Mapping):
                try:
                    options = load_options({"email": dict(account)})
                except ConfigError as exc:  # (named in the gateway's file, not "<dict>")
                    if exc.source != "<dict>":
                        raise
                    inner = exc.key.removeprefix("email.") if exc.key else ""
                    key = f"accounts.{name}" + (f".{inner}" if inner else "")
                    raise ConfigError(exc.message, source=source, key=key) from None
            else:
                raise ConfigError(
                    "expected an email configuration (a mapping) or a file name",
                    source=source,
                    key=f"accounts.{name}",
                )
            contexts[str(name)] = Context(options)
        gateway = Gateway(contexts, routes)
        supernode = data.get("supernode")
        if supernode is not None:
            gateway.supernode = _supernode(supernode, contexts, source)
    except BaseException:
        for context in contexts.values():
            context.shutdown()
        raise
    return gateway


def _read_routes(raw: object, source: str) -> dict[str, tuple[str, str]]:
    if not isinstance(raw, Mapping) or not raw:
        raise ConfigError("expected hub: {to: ADDRESS, via: ACCOUNT}", source=source, key="routes")
    routes: dict[str, tuple[str, str]] = {}
    for hub, entry in raw.items():
        if (
            not isinstance(entry, Mapping)
            or set(entry) != {"to", "via"}
            or not all(isinstance(entry[k], str) and entry[k] for k in ("to", "via"))
        ):
            raise ConfigError(
                "expected {to: ADDRESS, via: ACCOUNT}", source=source, key=f"routes.{hub}"
            )
        routes[str(hub)] = (entry["to"], entry["via"])
    return routes


def _supernode(raw: object, contexts: Mapping[str, Context], source: str) -> Supernode:
    if not isinstance(raw, Mapping) or set(raw) - _SUPERNODE_KEYS:
        raise ConfigError(
            f"expected a mapping of {', '.join(sorted(_SUPERNODE_KEYS))}",
            source=source,
            key="supernode",
        )
    account = raw.get("account")
    if account not in contexts:
        raise ConfigError("expected one of the accounts", source=source, key="supernode.account")
    nodes, orchestras = raw.get("nodes") or {}, raw.get("orchestras") or {}
    if not isinstance(nodes, Mapping) or not isinstance(orchestras, Mapping):
        raise ConfigError("nodes and orchestras map names to hubs", source=source,
                          key="supernode")  # fmt: skip
    return Supernode(
        str(raw.get("orchestra")),
        nodes={str(k): str(v) for k, v in nodes.items()},
        orchestras={str(k): str(v) for k, v in orchestras.items()},
        context=contexts[str(account)],
    )
