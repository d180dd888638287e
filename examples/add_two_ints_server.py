"""The classic add_two_ints service as an emailmw node.

EMAILMW_CONFIG_FILE=email.yml python examples/add_two_ints_server.py --count 3
"""

from __future__ import annotations

from typing import Any

import emailmw
from emailmw import example_interfaces

from _common import parse_args


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], count=3, name="add_two_ints")
    with emailmw.Context(args.config) as ctx:
        node = emailmw.Node("add_two_ints_server", context=ctx)
        served = [0]

        def add(request: Any, response: Any) -> Any:
            response.sum = request.a + request.b
            print(f"Incoming request: a: {request.a} b: {request.b}", flush=True)
            served[0] += 1
            return response

        node.create_service(example_interfaces.srv.AddTwoInts, args.name, add)
        print("ready", flush=True)
        executor = emailmw.SingleThreadedExecutor()
        executor.add_node(node)
        while served[0] < args.count:
            executor.spin_once(args.timeout)
        ctx.flush(args.timeout)
        node.destroy_node()


if __name__ == "__main__":
    main()
