"""How long batched messages wait after their reader's server comes back (#57, the fleet's
missed target): a reproduction, over one local server.

    python bench/outage_wait.py [--outage 70] [--after 120] [--json FILE]

A talker publishes ``/chatter`` at 2 Hz with batching on under ``emails-per-minute: 30``
to a listener on the same server; after 60 s the server's IMAP (Dovecot) stops for
``--outage`` seconds, then runs again; the talker goes on for ``--after`` seconds and the
listener drains. Prints ``lost``, ``first_after_up_s`` (the first message received after
Dovecot answers again) and ``max_wait_after_up_s`` (the longest a message waited, counted
from when it was sent or from Dovecot's return, whichever is later). Needs root.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import threading
import time
from pathlib import Path

import emailmw
from emailmw.testing.mailserver import MailServer


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--outage", type=float, default=70.0)
    parser.add_argument("--after", type=float, default=120.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    state = Path(tempfile.mkdtemp(prefix="emailmw-outage-", dir="/tmp"))
    server = MailServer(state_dir=state, domain="outage.test", pool_size=5)
    server.start(fresh=True)
    sent: dict[int, float] = {}
    got: dict[int, float] = {}
    try:
        talker_box, listener_box = server.fresh_account(), server.fresh_account()
        listener = emailmw.Context({"email": server.config(listener_box)})
        sub = emailmw.Subscription("/chatter", context=listener)

        def consume() -> None:
            while True:
                taken = sub.take_with_ticket() if sub.has_message() else None
                if taken is None:
                    time.sleep(0.01)
                    continue
                body, _info, ticket = taken
                got[int(str(body).split()[1])] = time.time()
                ticket.release()

        threading.Thread(target=consume, daemon=True).start()
        talker = emailmw.Context({"email": server.config(
            talker_box, to=listener_box, limits={"emails-per-minute": 30})})  # fmt: skip
        publisher = emailmw.Publisher(
            "/chatter", context=talker, guarantee="memory",
            batch=emailmw.BatchPolicy(linger_ms=50, max_messages=100),
        )  # fmt: skip

        def publish_until(end: float) -> None:
            while time.time() < end:
                sent[len(sent)] = time.time()
                publisher.publish(f"chatter {len(sent) - 1}")
                time.sleep(0.5)

        publish_until(time.time() + 60)
        down = time.time()
        server.stop_dovecot()
        publish_until(down + args.outage)
        server.start_dovecot()
        up = time.time()
        publish_until(up + args.after)
        deadline = time.time() + 600
        while time.time() < deadline and len(got) < len(sent):
            time.sleep(1)
        after = [got[i] - max(sent[i], up) for i in got if got[i] > up]
        first = min((got[i] for i in got if got[i] > up), default=up)
        results = {
            "lost": len(sent) - len(got),
            "first_after_up_s": round(first - up, 2),
            "max_wait_after_up_s": round(max(after, default=0.0), 1),
            "outage_s": args.outage,
        }
        talker.shutdown()
        listener.shutdown()
    finally:
        server.stop()
        shutil.rmtree(state, ignore_errors=True)
    for key, value in results.items():
        print(f"{key:24} {value}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
