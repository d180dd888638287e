"""A service server that blocks in wait_for_request(); adds two integers.

EMAILMW_CONFIG_FILE=email.yml python examples/service_server_wait.py --count 3
"""

from __future__ import annotations

import emailmw

from _common import parse_args


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], count=3, name="/add_two_ints")
    with emailmw.Context(args.config) as ctx:
        server = emailmw.ServiceServer(args.name, context=ctx)
        print("ready", flush=True)
        for _ in range(args.count):
            request = emailmw.wait_for_request(server, args.timeout)
            if request is None:
                raise SystemExit(f"no request within {args.timeout} s")
            a, b = (int(x) for x in request.content.split())
            server.send_response(request.id, str(a + b))
            print(f"{a} + {b} = {a + b}", flush=True)
        ctx.flush(args.timeout)


if __name__ == "__main__":
    main()
