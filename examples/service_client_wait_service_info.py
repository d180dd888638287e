"""A service client that prints each response's ServiceInfo (round trip included).

EMAILMW_CONFIG_FILE=email.yml python examples/service_client_wait_service_info.py
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
            sent = time.time_ns()
            seq = client.send_request(f"{i} {i + 1}")
            got = emailmw.wait_for_response_with_info(client, seq, args.timeout)
            if got is None:
                raise SystemExit(f"no response within {args.timeout} s")
            response, info = got
            rtt_ms = (info.received_timestamp - sent) / 1e6
            print(
                f"{i} + {i + 1} = {response} (request {info.sequence_number}, "
                f"round trip {rtt_ms:.1f} ms)",
                flush=True,
            )


if __name__ == "__main__":
    main()
