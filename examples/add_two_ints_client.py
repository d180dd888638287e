"""The classic add_two_ints client as an emailmw node: call_async and a future.

EMAILMW_CONFIG_FILE=email.yml python examples/add_two_ints_client.py --count 3
"""

from __future__ import annotations

import emailmw
from emailmw import example_interfaces

from _common import parse_args


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], count=3, name="add_two_ints")
    AddTwoInts = example_interfaces.srv.AddTwoInts
    with emailmw.Context(args.config) as ctx:
        node = emailmw.Node("add_two_ints_client", context=ctx)
        client = node.create_client(AddTwoInts, args.name)
        for i in range(args.count):
            future = client.call_async(AddTwoInts.Request(a=i, b=i + 1))
            emailmw.spin_until_future_complete(node, future, timeout_sec=args.timeout)
            if not future.done():
                raise SystemExit(f"no response within {args.timeout} s")
            print(f"Result of add_two_ints: {i} + {i + 1} = {future.result().sum}", flush=True)
        node.destroy_node()


if __name__ == "__main__":
    main()
