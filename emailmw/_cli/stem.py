"""``emailmw stem send``: inject a Stem message, as Stem's ``stem_msg`` does
(``docs/addressing.md``)."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from typing import Any

from .._core.errors import RemoteError
from .._delivery.context import Context
from .._faces.stem import Cell
from .common import CommandError, Commands, verbs, with_account

__all__ = ["register"]


def register(commands: Commands, common: argparse.ArgumentParser) -> None:
    stem = commands.add_parser(
        "stem",
        parents=[common],
        help="Stem messages (docs/addressing.md)",
        description="Inject a Stem message, as Stem's stem_msg does.",
    )
    add = verbs(stem, common)
    send_ = add("send", run=send, help="send a cmd or data message")
    send_.add_argument("to", metavar="ADDRESS", help="cell, hub:cell or hub:cell:target")
    kind = send_.add_mutually_exclusive_group()
    kind.add_argument("--cmd", help="send a cmd message with this command")
    kind.add_argument("--type", default="data", help="the message type (default: data)")
    send_.add_argument("--data", default=None, help="the data, as JSON (else a string)")
    send_.add_argument("--from", dest="cell", default="stem_msg", help="this side's cell name")
    send_.add_argument("--ack", action="store_true", help="ask for a msg_ack")
    send_.add_argument("--wait", type=float, default=10.0, metavar="S",
                       help="seconds to wait for a cmd's response (0: do not wait)")  # fmt: skip


def send(args: argparse.Namespace) -> int:
    if args.type == "cmd" and not args.cmd:
        raise CommandError("give the command with --cmd NAME")
    data: Any = args.data
    if data is not None:
        with contextlib.suppress(ValueError):  # else a plain string
            data = json.loads(data)
    return _send(args, data)


@with_account
def _send(context: Context, args: argparse.Namespace, data: Any) -> int:
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
