"""Print new emails as the raw receiver gets them (every email, emailmw's or not).

EMAILMW_CONFIG_FILE=email.yml python examples/receive.py --count 1
"""

from __future__ import annotations

import time

import emailmw

from _common import parse_args


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], count=1)
    sender, receiver = emailmw.open_transport(args.config)
    sender.close()
    if isinstance(receiver, emailmw.IntraprocessReceiver):
        raise SystemExit("receive.py needs a real mail account (set EMAILMW_CONFIG_FILE)")
    print("ready", flush=True)  # from here on, new mail is received
    got = 0
    deadline = time.monotonic() + args.timeout
    with receiver:
        while got < args.count and time.monotonic() < deadline:
            for email in receiver.receive(1.0):
                got += 1
                print(f"from {email.from_}: {email.subject!r}\n{email.body}\n")
    if got < args.count:
        raise SystemExit(f"received {got} of {args.count} within {args.timeout} s")


if __name__ == "__main__":
    main()
