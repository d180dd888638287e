"""A service server and client on the intraprocess transport, with service info.

python examples/intraprocess_service.py
"""

from __future__ import annotations

import emailmw


def main() -> None:
    with emailmw.Context({"intraprocess": True}) as ctx:
        server = emailmw.ServiceServer("/add_two_ints", context=ctx)
        client = emailmw.ServiceClient("/add_two_ints", context=ctx)

        seq = client.send_request("a: 2\nb: 3")
        got = emailmw.wait_for_request_with_info(server, timeout=5.0)
        if got is None:
            raise SystemExit("no request within 5 s")
        request, info = got
        print(f"server got {request.content!r} from client {info.client_gid} (seq {seq})")
        values = dict(line.split(": ") for line in request.content.splitlines())
        server.send_response(request.id, f"sum: {int(values['a']) + int(values['b'])}")

        response = emailmw.wait_for_response_with_info(client, seq, timeout=5.0)
        if response is None:
            raise SystemExit("no response within 5 s")
        body, rinfo = response
        rtt_us = (rinfo.received_timestamp - rinfo.source_timestamp) / 1000
        print(f"client got {body!r} (response sent {rtt_us:.0f} us before it arrived)")

        # The callback form answers on the server's own thread.
        emailmw.ServiceServer("/echo", lambda r: r.upper(), context=ctx)
        echo = emailmw.ServiceClient("/echo", context=ctx)
        print("echo:", echo.call("hello", timeout=5.0))


if __name__ == "__main__":
    main()
