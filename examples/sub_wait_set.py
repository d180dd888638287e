"""Subscribe to two topics and wait on both with one WaitSet.

EMAILMW_CONFIG_FILE=email.yml python examples/sub_wait_set.py --count 5 --name /chatter
"""

from __future__ import annotations

import emailmw

from _common import parse_args


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    with emailmw.Context(args.config) as ctx:
        subs = [
            emailmw.Subscription(args.name, context=ctx),
            emailmw.Subscription(f"{args.name}/other", context=ctx),
        ]
        wait_set = emailmw.WaitSet(subs)
        print("ready", flush=True)
        got = 0
        while got < args.count:
            ready = wait_set.wait(args.timeout)
            if ready.timed_out:
                raise SystemExit(f"nothing within {args.timeout} s")
            for sub in ready.subscriptions:
                while (message := sub.get_message()) is not None:
                    print(f"got on {sub.topic}: {message}", flush=True)
                    got += 1


if __name__ == "__main__":
    main()
