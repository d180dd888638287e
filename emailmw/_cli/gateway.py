"""``emailmw gateway GATEWAY_FILE``: relay routed messages between hubs
(``docs/addressing.md``)."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time

from .._core.signalsafe import set_on_signals
from .._faces.gateway import load_gateway
from .common import CommandError, Commands

__all__ = ["register"]


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
    with load_gateway(args.gateway_config) as gateway:
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
