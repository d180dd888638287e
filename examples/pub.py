"""Publish messages on a topic, a few a second.

EMAILMW_CONFIG_FILE=email.yml python examples/pub.py --count 5 --name /chatter
"""

from __future__ import annotations

import time

import emailmw

from _common import parse_args


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    with emailmw.Context(args.config) as ctx:
        pub = emailmw.Publisher(args.name, context=ctx)
        for i in range(args.count):
            message = f"data: 'Hello, world! {i}'"
            pub.publish(message)
            print(f"published: {message}", flush=True)
            if i + 1 < args.count:
                time.sleep(0.25)
        ctx.flush(args.timeout)


if __name__ == "__main__":
    main()
