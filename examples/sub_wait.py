"""Subscribe to a topic and block in wait_for_message() until each message arrives.

EMAILMW_CONFIG_FILE=email.yml python examples/sub_wait.py --count 5 --name /chatter
"""

from __future__ import annotations

import emailmw

from _common import parse_args


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    with emailmw.Context(args.config) as ctx:
        sub = emailmw.Subscription(args.name, context=ctx)
        print("ready", flush=True)
        for _ in range(args.count):
            message = emailmw.wait_for_message(sub, args.timeout)
            if message is None:
                raise SystemExit(f"no message within {args.timeout} s")
            print(f"got: {message}", flush=True)


if __name__ == "__main__":
    main()
