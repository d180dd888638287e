"""A service client with the non-blocking API: send_request(), has_response(), get_response().

EMAILMW_CONFIG_FILE=email.yml python examples/service_client.py --count 3 --name /add
"""

from __future__ import annotations

import time

import emailmw

from _common import parse_args


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], count=3, name="/add_two_ints")
    with emailmw.Context(args.config) as ctx:
        client = emailmw.ServiceClient(args.name, context=ctx)
        for i in range(args.count):
            seq = client.send_request(f"{i} {i + 1}")
            deadline = time.monotonic() + args.timeout
            while not client.has_response(seq):
                if time.monotonic() > deadline:
                    raise SystemExit(f"no response within {args.timeout} s")
                time.sleep(0.05)
            print(f"{i} + {i + 1} = {client.get_response(seq)}", flush=True)


if __name__ == "__main__":
    main()
