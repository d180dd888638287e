"""A service server with the non-blocking API: has_request() / get_request().

Adds two integers: the request is "a b", the response their sum.

    EMAILMW_CONFIG_FILE=email.yml python examples/service_server.py --count 3 --name /add
"""

from __future__ import annotations

import time

import emailmw

from _common import parse_args


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], count=3, name="/add_two_ints")
    with emailmw.Context(args.config) as ctx:
        server = emailmw.ServiceServer(args.name, context=ctx)
        print("ready", flush=True)
        served, deadline = 0, time.monotonic() + args.timeout * args.count
        while served < args.count:
            request = server.get_request() if server.has_request() else None
            if request is None:
                if time.monotonic() > deadline:
                    raise SystemExit(f"served {served} of {args.count}")
                time.sleep(0.1)
                continue
            a, b = (int(x) for x in request.content.split())
            server.send_response(request.id, str(a + b))
            print(f"{a} + {b} = {a + b}", flush=True)
            served += 1
        ctx.flush(args.timeout)


if __name__ == "__main__":
    main()
