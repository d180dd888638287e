"""Publish and subscribe on the intraprocess transport, with message info.

python examples/intraprocess_pub_sub.py
"""

from __future__ import annotations

import emailmw


def main() -> None:
    with emailmw.Context({"intraprocess": True}) as ctx:
        sub = emailmw.Subscription("/chatter", context=ctx)
        pub = emailmw.Publisher("/chatter", context=ctx)
        for i in range(3):
            pub.publish(f"data: Hello World: {i}")
        for _ in range(3):
            got = emailmw.wait_for_message_with_info(sub, timeout=5.0)
            if got is None:
                raise SystemExit("no message within 5 s")
            message, info = got
            latency_us = (info.received_timestamp - info.source_timestamp) / 1000
            print(
                f"got {message!r} from publisher {info.publisher_gid} "
                f"(seq {info.sequence_number}, {latency_us:.0f} us after publish)"
            )


if __name__ == "__main__":
    main()
