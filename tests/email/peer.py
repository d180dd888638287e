"""A separate emailmw process for the multi-process tests.

    python -m tests.email.peer sub CONFIG TOPIC      # prints one JSON line per message
    python -m tests.email.peer server CONFIG SERVICE # answers "a b" with their sum

Prints ``ready`` once its context is up, then runs until killed or stdin closes.
"""

from __future__ import annotations

import hashlib
import json
import sys
import threading

import emailmw


def main() -> None:
    role, config, name = sys.argv[1:4]
    with emailmw.Context(config) as ctx:
        if role == "sub":
            sub = emailmw.Subscription(name, context=ctx)
            print("ready", flush=True)
            while True:
                got = emailmw.wait_for_message_with_info(sub, -1)
                assert got is not None
                body, info = got
                print(
                    json.dumps(
                        {
                            "body": body if len(body) <= 200 else None,
                            "sha256": hashlib.sha256(body.encode()).hexdigest(),
                            "length": len(body),
                            "gid": info.publisher_gid.value,
                            "seq": info.sequence_number,
                        }
                    ),
                    flush=True,
                )
        else:
            emailmw.ServiceServer(
                name, lambda request: str(sum(int(x) for x in request.split())), context=ctx
            )
            print("ready", flush=True)
            done = threading.Event()
            threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
            done.wait()


if __name__ == "__main__":
    main()
