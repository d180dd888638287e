"""The classic ROS talker as an emailmw node: std_msgs/String on /chatter, twice a second.

EMAILMW_CONFIG_FILE=email.yml python examples/talker.py --count 10
"""

from __future__ import annotations

import emailmw
from emailmw import std_msgs

from _common import parse_args


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], count=10, name="chatter")
    with emailmw.Context(args.config) as ctx:
        node = emailmw.Node("talker", context=ctx)
        publisher = node.create_publisher(std_msgs.msg.String, args.name)
        sent = [0]

        def tick() -> None:
            msg = std_msgs.msg.String(data=f"Hello World: {sent[0]}")
            publisher.publish(msg)
            print(f"Publishing: '{msg.data}'", flush=True)
            sent[0] += 1

        node.create_timer(0.5, tick)
        executor = emailmw.SingleThreadedExecutor()
        executor.add_node(node)
        while sent[0] < args.count:
            executor.spin_once(args.timeout)
        ctx.flush(args.timeout)
        node.destroy_node()


if __name__ == "__main__":
    main()
