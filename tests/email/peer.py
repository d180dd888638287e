"""A separate emailmw process for the multi-process tests.

    python -m tests.email.peer sub CONFIG TOPIC [--take-every S] [--mode M --group G]
        prints one JSON line per message it takes (waiting S seconds before each take),
        then acknowledges it
    python -m tests.email.peer server CONFIG SERVICE
        answers "a b" with their sum
    python -m tests.email.peer pub CONFIG TOPIC --count N [--guarantee G] [--rate R]
        publishes "n: i" for i < N (R per second; 0: as fast as it can), printing
        {"seq": i} once publish() returned for it, then {"done": true}

Prints ``ready`` once its context is up, then runs until killed or stdin closes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import threading
import time

import emailmw
import emailmw._polling
from emailmw._waitable import wait_until


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
    args = parser.parse_args()
    with emailmw.Context(args.config) as ctx:
        if args.role == "sub":
            sub = emailmw.Subscription(args.name, context=ctx, mode=args.mode, group=args.group)
            print("ready", flush=True)
            while True:
                # wait for a message without taking it, then take it after a pause: the
                # messages behind it sit handed out but not taken
                wait_until(sub, sub.has_message)
                if args.take_every:
                    time.sleep(args.take_every)
                if args.mode == "topic":
                    got = sub.get_message_with_info()  # taken, so settled, here
                    assert got is not None
                    (body, info), ticket = got, emailmw._polling.NO_TICKET
                else:  # a group member acknowledges once its line is printed
                    taken = sub._take()
                    assert taken is not None
                    body, info, ticket = taken
                print(
                    json.dumps(
                        {
                            "body": body if len(body) <= 200 else None,
                            "sha256": hashlib.sha256(body.encode()).hexdigest(),
                            "length": len(body),
                            "gid": info.publisher_gid.value,
                            "seq": info.sequence_number,
                            "redelivered": info.redelivered,
                            "identity": info.identity,
                            "delivery_count": info.delivery_count,
                            "member": sub.member,
                        }
                    ),
                    flush=True,
                )
                ticket.release()
        elif args.role == "pub":
            pub = emailmw.Publisher(args.name, context=ctx, guarantee=args.guarantee)
            print("ready", flush=True)
            start = time.monotonic()
            for i in range(args.count):
                if args.rate:
                    time.sleep(max(0.0, start + i / args.rate - time.monotonic()))
                pub.publish(f"n: {i}")
                print(json.dumps({"seq": i, "gid": pub.gid.value}), flush=True)
            print(json.dumps({"done": True}), flush=True)
            sys.stdin.read()  # stay (and let the outbox send) until stdin closes
        else:
            emailmw.ServiceServer(
                args.name, lambda request: str(sum(int(x) for x in request.split())), context=ctx
            )
            print("ready", flush=True)
            done = threading.Event()
            threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
            done.wait()


if __name__ == "__main__":
    main()
