"""Subscribe to a topic with the non-blocking API: has_message() / get_message().

For blocking waits see sub_wait.py; this one checks ten times a second.

    EMAILMW_CONFIG_FILE=email.yml python examples/sub.py --count 5 --name /chatter
"""

from __future__ import annotations

import time

import emailmw

from _common import parse_args


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    with emailmw.Context(args.config) as ctx:
        sub = emailmw.Subscription(args.name, context=ctx)
        print("ready", flush=True)
        got, deadline = 0, time.monotonic() + args.timeout * args.count
        while got < args.count:
            if sub.has_message():
                print(f"got: {sub.get_message()}", flush=True)
                got += 1
            elif time.monotonic() > deadline:
                raise SystemExit(f"got {got} of {args.count} messages")
            else:
                time.sleep(0.1)


if __name__ == "__main__":
    main()
