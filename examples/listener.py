"""The classic ROS listener as an emailmw node: prints what /chatter says.

EMAILMW_CONFIG_FILE=email.yml python examples/listener.py --count 10
"""

from __future__ import annotations

import emailmw
from emailmw import std_msgs

from _common import parse_args


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], count=10, name="chatter")
    with emailmw.Context(args.config) as ctx:
        node = emailmw.Node("listener", context=ctx)
        heard = [0]

        def callback(msg: std_msgs.msg.String) -> None:
            print(f"I heard: '{msg.data}'", flush=True)
            heard[0] += 1

        node.create_subscription(std_msgs.msg.String, args.name, callback)
        print("ready", flush=True)
        executor = emailmw.SingleThreadedExecutor()
        executor.add_node(node)
        while heard[0] < args.count:
            executor.spin_once(args.timeout)
        node.destroy_node()


if __name__ == "__main__":
    main()
