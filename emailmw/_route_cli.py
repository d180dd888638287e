"""``emailmw gateway CONFIG`` and ``emailmw stem send``: the routing core's commands."""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import threading
import time
from typing import Any

from ._config import load_options
from ._context import Context
from ._exceptions import ConfigError, RemoteError

__all__ = ["add_route_commands", "run_route_command"]


def add_route_commands(commands: Any, common: argparse.ArgumentParser) -> None:
    gateway = commands.add_parser(
        "gateway",
        parents=[common],
        help="relay routed messages between hubs (docs/addressing.md)",
        description="Hold an account on each hub of CONFIG and relay Stem, YMP and floctrl "
        "messages between them by its routes. Prints one JSON line of what it relayed "
        "and dropped (and why) every --report-every seconds and at the end.",
    )
    gateway.add_argument("gateway_config", metavar="CONFIG", help="the gateway's YAML file")
    gateway.add_argument("--report-every", type=float, default=60.0, metavar="S")
    gateway.add_argument(
        "--for",
        dest="duration",
        type=float,
        metavar="S",
        help="stop after S seconds (default: until SIGINT or SIGTERM)",
    )
    stem = commands.add_parser(
        "stem",
        parents=[common],
        help="Stem messages (docs/addressing.md)",
        description="Inject a Stem message, as Stem's stem_msg does.",
    )
    verbs = stem.add_subparsers(dest="verb", required=True, metavar="VERB")
    send = verbs.add_parser("send", parents=[common], help="send a cmd or data message")
    send.add_argument("to", metavar="ADDRESS", help="cell, hub:cell or hub:cell:target")
    kind = send.add_mutually_exclusive_group()
    kind.add_argument("--cmd", help="send a cmd message with this command")
    kind.add_argument("--type", default="data", help="the message type (default: data)")
    send.add_argument("--data", default=None, help="the data, as JSON (else a string)")
    send.add_argument("--from", dest="cell", default="stem_msg", help="this side's cell name")
    send.add_argument("--ack", action="store_true", help="ask for a msg_ack")
    send.add_argument("--wait", type=float, default=10.0, metavar="S",
                      help="seconds to wait for a cmd's response (0: do not wait)")  # fmt: skip


def run_route_command(args: argparse.Namespace) -> int:
    if args.command == "gateway":
        return _gateway(args)
    return _stem_send(args)


def _gateway(args: argparse.Namespace) -> int:
    from ._gateway import load_gateway

    if args.report_every <= 0:
        raise ConfigError("--report-every must be above 0", source="emailmw gateway")
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
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


def _stem_send(args: argparse.Namespace) -> int:
    from ._stem import Cell

    options = load_options(args.config)
    if options.intraprocess:
        raise ConfigError(
            "no mail account configured: give one with --config FILE or EMAILMW_CONFIG_FILE",
            source=args.config or "emailmw",
        )
    if args.type == "cmd" and not args.cmd:
        raise ConfigError("give the command with --cmd NAME", source="emailmw stem send")
    data: Any = args.data
    if data is not None:
        with contextlib.suppress(ValueError):  # else a plain string
            data = json.loads(data)
    with Context(options) as context:
        cell = Cell(args.cell, context=context)
        if args.cmd and args.wait > 0:
            future = cell.request(args.to, args.cmd, data)
            try:
                answer = future.result(args.wait)
            except TimeoutError:
                print(f"emailmw: no response within {args.wait:g} s", file=sys.stderr)
                return 1
            except RemoteError as exc:
                print(f"emailmw: error reply: {exc}", file=sys.stderr)
                return 1
            print(json.dumps(answer, ensure_ascii=False))
            return 0
        if args.cmd:
            sent = cell.send(args.to, type="cmd", cmd=args.cmd, data=data, ack_req=args.ack)
        else:
            sent = cell.send(args.to, type=args.type, data=data, ack_req=args.ack)
        context.flush(args.wait or None)
        print(f"sent {sent.type} message {sent.msg_id} to {sent.to}", file=sys.stderr)
    return 0
