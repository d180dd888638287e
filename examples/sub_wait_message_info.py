"""Subscribe and print each message with its MessageInfo (publisher, sequence, latency).

EMAILMW_CONFIG_FILE=email.yml python examples/sub_wait_message_info.py --count 5
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
            got = emailmw.wait_for_message_with_info(sub, args.timeout)
            if got is None:
                raise SystemExit(f"no message within {args.timeout} s")
            message, info = got
            latency_ms = (info.received_timestamp - info.source_timestamp) / 1e6
            print(
                f"got: {message} (publisher {info.publisher_gid}, seq {info.sequence_number},"
                f" {latency_ms:.1f} ms after it was published)",
                flush=True,
            )


if __name__ == "__main__":
    main()
