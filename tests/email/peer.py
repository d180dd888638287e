"""A separate emailmw process for the multi-process tests.

    python -m tests.email.peer sub CONFIG TOPIC [--take-every S] [--mode M --group G]
                                              [--depth N] [--hold] [--node]
                                              [--die-holding-lock N]
        prints one JSON line per message it takes (waiting S seconds before each take;
        ``t``: when its application got it), then acknowledges it (``--hold``: never: it
        stays on the first message it takes); ``--node``: through
        ``Node.create_subscription`` (depth: the QoS depth); a group member also prints
        {"joined": NAME} each time it joins its group under a new name; after N messages,
        ``--die-holding-lock`` takes the group's claim lock and kills itself (SIGKILL);
        with ``--node``, ``--raise-every N``: every Nth callback raises (printing
        {"raised": seq} instead of the message), ``--raise-on TEXT``: a callback raises on
        each message whose body contains TEXT, ``--setup-delay S``: S seconds between
        making the node and its subscription
    python -m tests.email.peer server CONFIG SERVICE
        answers "a b" with their sum
    python -m tests.email.peer pub CONFIG TOPIC --count N [--guarantee G] [--rate R]
                                              [--size BYTES]
        publishes "n: i" for i < N (R per second; 0: as fast as it can; padded to BYTES),
        printing {"seq": i} once publish() returned for it, then {"done": true}

Prints ``ready`` once its context is up, then runs until killed or stdin closes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import sys
import threading
import time
from typing import Any

import emailmw
import emailmw._delivery.polling
from emailmw._core.waitables import wait_until


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=["sub", "server", "pub"])
    parser.add_argument("config")
    parser.add_argument("name")
    parser.add_argument("--take-every", type=float, default=0.0)
    parser.add_argument("--count", type=int, default=0)
    parser.add_argument("--rate", type=float, default=0.0)
    parser.add_argument("--guarantee", default=None)
    parser.add_argument("--mode", default="topic")
    parser.add_argument("--group", default=None)
    parser.add_argument("--depth", type=int, default=None)
    parser.add_argument("--hold", action="store_true")
    parser.add_argument("--node", action="store_true")
    parser.add_argument("--size", type=int, default=0)
    parser.add_argument("--die-holding-lock", type=int, default=0)
    parser.add_argument("--raise-every", type=int, default=0)
    parser.add_argument("--raise-on", default=None)
    parser.add_argument("--setup-delay", type=float, default=0.0)
    args = parser.parse_args()
    with emailmw.Context(args.config) as ctx:
        if args.role == "sub" and args.node:
            _node_sub(ctx, args)
        elif args.role == "sub":
            sub = emailmw.Subscription(
                args.name, args.depth, context=ctx, mode=args.mode, group=args.group
            )
            _say("ready")
            _report_joins(lambda: sub.member)
            done = 0
            while True:
                # wait for a message without taking it, then take it after a pause: the
                # messages behind it sit handed out but not taken
                wait_until(sub, sub.has_message)
                if args.take_every:
                    time.sleep(args.take_every)
                if args.mode == "topic":
                    got = sub.get_message_with_info()  # taken, so settled, here
                    assert got is not None
                    (body, info), ticket = got, emailmw._delivery.polling.NO_TICKET
                else:  # a group member acknowledges once its line is printed
                    taken = sub.take_with_ticket()
                    if taken is None:  # (its member must first confirm its claims)
                        continue
                    body, info, ticket = taken
                _print(body, info, sub.member)
                if args.hold:
                    threading.Event().wait()  # the application is stuck on it
                ticket.release()
                done += 1
                if done == args.die_holding_lock:
                    _die_holding_the_lock(args.config, args.group, sub.member)
        elif args.role == "pub":
            pub = emailmw.Publisher(args.name, context=ctx, guarantee=args.guarantee)
            _say("ready")
            start = time.monotonic()
            for i in range(args.count):
                if args.rate:
                    time.sleep(max(0.0, start + i / args.rate - time.monotonic()))
                text = f"n: {i}"
                pub.publish(text + "\n" + "x" * (args.size - len(text) - 1) if args.size else text)
                _say(json.dumps({"seq": i, "gid": pub.gid.value}))
            _say(json.dumps({"done": True}))
            sys.stdin.read()  # stay (and let the outbox send) until stdin closes
        else:
            emailmw.ServiceServer(
                args.name, lambda request: str(sum(int(x) for x in request.split())), context=ctx
            )
            _say("ready")
            done = threading.Event()
            threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
            done.wait()


_PRINTING = threading.Lock()


def _say(line: str) -> None:
    """One whole line on stdout (threads print too)."""
    with _PRINTING:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def _die_holding_the_lock(config: str, group: str, member: str | None) -> None:
    """Take the group's claim lock as ``member`` (on a connection of its own), and die."""
    from emailmw._core.config import load_options
    from emailmw._transport.group.imap import ImapGroupStore

    store = ImapGroupStore(load_options(config), group)
    record = next(r for r in store.members() if r.member == member)
    while not store.try_lock(record):
        time.sleep(0.001)
    _say(json.dumps({"dies": member}))
    os.kill(os.getpid(), signal.SIGKILL)


def _report_joins(member: Any) -> None:
    """Print {"joined": NAME} whenever the group member joins under a new name."""

    def watch() -> None:
        seen = None
        while True:
            name = member()
            if name is not None and name != seen:
                _say(json.dumps({"joined": name}))
                seen = name
            time.sleep(0.01)

    threading.Thread(target=watch, daemon=True).start()


def _print(body: str, info: emailmw.MessageInfo, member: str | None) -> None:
    _say(
        json.dumps(
            {
                "t": time.monotonic(),
                "body": body if len(body) <= 200 else None,
                "sha256": hashlib.sha256(body.encode()).hexdigest(),
                "length": len(body),
                "gid": info.publisher_gid.value,
                "seq": info.sequence_number,
                "redelivered": info.redelivered,
                "identity": info.identity,
                "delivery_count": info.delivery_count,
                "member": member,
            }
        )
    )


def _node_sub(ctx: emailmw.Context, args: argparse.Namespace) -> None:
    """The ``sub`` role through the ROS layer: a node's subscription, its callback run by
    spinning (taking ``--take-every`` seconds each)."""
    from emailmw import std_msgs

    node = emailmw.Node("peer", context=ctx)
    time.sleep(args.setup_delay)  # (a program's own set-up between its node and its entities)
    subscription: list[Any] = []
    calls = [0]

    def callback(msg: Any, info: emailmw.MessageInfo) -> None:
        if args.take_every:
            time.sleep(args.take_every)
        calls[0] += 1
        failing = args.raise_every and calls[0] % args.raise_every == 0
        if failing or (args.raise_on is not None and args.raise_on in msg.data):
            _say(json.dumps({"raised": info.sequence_number,
                             "delivery_count": info.delivery_count}))  # fmt: skip
            raise RuntimeError(f"failed on message {info.sequence_number}")
        _print(msg.data, info, subscription[0]._core.member)
        if args.hold:
            threading.Event().wait()  # the application is stuck on it

    subscription.append(
        node.create_subscription(
            std_msgs.msg.String,
            args.name,
            callback,
            args.depth or 10,
            mode=args.mode,
            group=args.group,
        )
    )
    _say("ready")
    _report_joins(lambda: subscription[0]._core.member)
    while ctx.ok():
        try:
            emailmw.spin(node)
        except RuntimeError as exc:  # a callback that raised (as rclpy, out of spin)
            if "failed on message" not in str(exc):
                raise


if __name__ == "__main__":
    main()
