"""A service client that blocks in wait_for_response() (or simply: client.call()).

EMAILMW_CONFIG_FILE=email.yml python examples/service_client_wait.py --count 3
"""

from __future__ import annotations

import emailmw

from _common import parse_args


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], count=3, name="/add_two_ints")
    with emailmw.Context(args.config) as ctx:
        client = emailmw.ServiceClient(args.name, context=ctx)
        for i in range(args.count):
            seq = client.send_request(f"{i} {i + 1}")
            response = emailmw.wait_for_response(client, seq, args.timeout)
            if response is None:
                raise SystemExit(f"no response within {args.timeout} s")
            print(f"{i} + {i + 1} = {response}", flush=True)


if __name__ == "__main__":
    main()
