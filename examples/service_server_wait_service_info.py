"""A service server that prints each request's ServiceInfo; adds two integers.

EMAILMW_CONFIG_FILE=email.yml python examples/service_server_wait_service_info.py
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
            got = emailmw.wait_for_request_with_info(server, args.timeout)
            if got is None:
                raise SystemExit(f"no request within {args.timeout} s")
            request, info = got
            a, b = (int(x) for x in request.content.split())
            server.send_response(request.id, str(a + b))
            delay_ms = (info.received_timestamp - info.source_timestamp) / 1e6
            print(
                f"{a} + {b} = {a + b} (client {info.client_gid}, request "
                f"{info.sequence_number}, {delay_ms:.1f} ms in transit)",
                flush=True,
            )
        ctx.flush(args.timeout)


if __name__ == "__main__":
    main()
