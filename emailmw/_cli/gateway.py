"""``emailmw gateway GATEWAY_FILE``: relay routed messages between hubs
(``docs/addressing.md``)."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time

from .._core.errors import ConnectError
from .._core.signalsafe import set_on_signals
from .._faces.gateway import Gateway, load_gateway
from .common import CommandError, Commands

__all__ = ["register"]

#: seconds between tries to open the accounts while a server does not answer: first, most
_RETRY_FIRST = 1.0
_RETRY_MAX = 30.0


def register(commands: Commands, common: argparse.ArgumentParser) -> None:
    gateway = commands.add_parser(
        "gateway",
        parents=[common],
        help="relay routed messages between hubs (docs/addressing.md)",
        description="Hold an account on each hub of GATEWAY_FILE and relay Stem, YMP and "
        "floctrl messages between them by its routes. Prints one JSON line of what it "
        "relayed and dropped (and why) every --report-every seconds and at the end. "
        "(--config is not read: each account is in GATEWAY_FILE.)",
    )
    gateway.add_argument("gateway_config", metavar="GATEWAY_FILE", help="the gateway's YAML file")
    gateway.add_argument("--report-every", type=float, default=60.0, metavar="S")
    gateway.add_argument(
        "--for",
        dest="duration",
        type=float,
        metavar="S",
        help="stop after S seconds (default: until SIGINT or SIGTERM)",
    )
    gateway.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.report_every <= 0:
        raise CommandError("--report-every must be above 0")
    stop = threading.Event()
    set_on_signals(stop, (signal.SIGINT, signal.SIGTERM))
    opened = _open(args.gateway_config, stop)
    if opened is None:
        return 0
    with opened as gateway:
        gateway.start()
        hubs = ", ".join(f"{n} ({c.router.hub})" for n, c in gateway.accounts.items())
        print(f"emailmw gateway: relaying between {hubs}", file=sys.stderr, flush=True)
        end = None if args.duration is None else time.monotonic() + args.duration
        while not stop.is_set():
            wait = args.report_every
            if end is not None:
                wait = min(wait, end - time.monotonic())
                if wait <= 0:
                    break
            if not stop.wait(wait):
                print(json.dumps(gateway.report()), flush=True)
        print(json.dumps({**gateway.report(), "final": True}), flush=True)
    return 0


def _open(path: str, stop: threading.Event) -> Gateway | None:
    """The gateway of ``path``, its accounts opened; while a server cannot be reached or
    the account has no connection free (a temporary failure: a server restarting, the
    account's other sessions), tried again with backoff, said once, until it opens or a
    signal stops it (None). A gateway is a daemon: it waits for its servers, never exits
    because one is down. Mistakes (configuration, password, certificate) raise."""
    delay = _RETRY_FIRST
    said = False
    while True:
        try:
            return load_gateway(path)
        except ConnectError as exc:
            if not said:
                print(f"emailmw gateway: {exc}; trying again until it answers", file=sys.stderr,
                      flush=True)  # fmt: skip
                said = True
        if stop.wait(delay):
            return None
        delay = min(delay * 2, _RETRY_MAX)
