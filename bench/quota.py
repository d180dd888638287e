"""A provider's budget against the local Postfix + Dovecot (issue #48).

    python bench/quota.py [--minutes 10] [--rate 10] [--per-minute 20] [--json FILE]

Starts its own server (state /tmp/emailmw-benchquota, on free ports; needs root). Three runs,
one after the other in this process, each a topic published at ``--rate`` Hz for
``--minutes`` under ``limits: {emails-per-minute: --per-minute}`` (a Workspace day's 2,000
scaled to minutes: 20), batching allowed by the reader, ``send-guarantee: memory``:

* ``password``: a password login;
* ``dropped``: a password login, the server dropping the IMAP sessions every 45 s;
* ``oauth2``: XOAUTH2 with a ``token-command`` whose tokens live 60 s, the sessions dropped
  every 45 s as in ``dropped`` (so that logins happen, each with a fresh token).

Keys: ``emails_sent`` (emails the receiving account got; <= ``emails_budget``, the limit
times the minutes plus its burst), ``lost`` (messages published and never received: 0),
``p50_ms`` / ``p99_ms`` (publish -> received), and ``oauth2_*`` the same for the third
run, ``dropped_*`` for the run between (what dropped sessions cost, OAuth2 aside). Prints
a table, writes JSON, exits 0.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any

import emailmw
from emailmw.testing.mailserver import MailServer


def pct(samples: list[float], q: float) -> float:
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def run(
    server: MailServer, auth: str, minutes: float, rate: float, per_minute: int, *, kick: bool
) -> dict[str, Any]:
    sender, receiver = server.fresh_account(), server.fresh_account()
    extra: dict[str, Any] = {"auth": auth, "token_lifetime": 60} if auth != "password" else {}
    listener = emailmw.Context({"email": server.config(receiver, **extra)})
    talker = emailmw.Context({"email": server.config(
        sender, to=receiver, limits={"emails-per-minute": per_minute},
        batch={"linger-ms": 5, "max-messages": 1000}, **extra)})  # fmt: skip
    received: dict[int, float] = {}
    sent_at: dict[int, float] = {}
    stop = threading.Event()
    threads: list[threading.Thread] = []

    def receive(sub: emailmw.Subscription) -> None:
        while not stop.is_set():
            found = emailmw.wait_for_message(sub, 0.5)
            if found is not None:
                received.setdefault(int(found), time.monotonic())

    def kick() -> None:
        while not stop.wait(45):
            server.kick(receiver)
            server.kick(sender)

    try:
        sub = emailmw.Subscription("/paced", context=listener)
        listener.start_receiving()
        assert talker.wait_for_readers("batch", 60)
        threads.append(threading.Thread(target=receive, args=(sub,), daemon=True))
        if kick:
            threads.append(threading.Thread(target=kick, daemon=True))
        for t in threads:
            t.start()
        pub = emailmw.Publisher("/paced", context=talker, guarantee="memory")
        start = time.monotonic()
        count = int(minutes * 60 * rate)
        for i in range(count):
            time.sleep(max(0.0, start + i / rate - time.monotonic()))
            sent_at[i] = time.monotonic()
            pub.publish(str(i))
        talker.flush(600)
        deadline = time.monotonic() + 120
        while len(received) < count and time.monotonic() < deadline:
            time.sleep(0.2)
        stop.set()
        maildir = server.maildir(receiver)
        emails = sum(1 for d in ("new", "cur") for _ in (maildir / d).glob("*"))
        # (the reader's graph announcements are mail too: only the talker's count)
        announcements = sum(
            1 for d in ("new", "cur") for f in (maildir / d).glob("*")
            if b"/paced" not in f.read_bytes()[:4096]
        )  # fmt: skip
        latencies = [(received[i] - sent_at[i]) * 1000 for i in received if i in sent_at]
        return {
            "emails_sent": emails - announcements,
            "emails_budget": int(per_minute * minutes + max(1, per_minute // 10)),
            "messages": count,
            "lost": count - len(received),
            "p50_ms": round(pct(latencies, 50), 1),
            "p99_ms": round(pct(latencies, 99), 1),
        }
    finally:
        stop.set()
        for t in threads:
            t.join(5)
        talker.shutdown()
        listener.shutdown()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=10.0)
    parser.add_argument("--per-minute", type=int, default=20)
    parser.add_argument("--json", type=Path, default=Path("bench/results/quota.json"))
    args = parser.parse_args()
    state = Path("/tmp/emailmw-benchquota")
    server = MailServer(state_dir=state, pool_size=10)
    server.start(fresh=True)
    try:
        common = (args.minutes, args.rate, args.per_minute)
        password = run(server, "password", *common, kick=False)
        kicked = run(server, "password", *common, kick=True)
        oauth2 = run(server, "oauth2", *common, kick=True)
    finally:
        server.stop()
        shutil.rmtree(state, ignore_errors=True)
    result = {**password, **{f"oauth2_{k}": v for k, v in oauth2.items()},
              **{f"dropped_{k}": v for k, v in kicked.items()}}  # fmt: skip
    result.update(minutes=args.minutes, rate_hz=args.rate, per_minute=args.per_minute)
    print(f"{args.rate:g} Hz for {args.minutes:g} min under emails-per-minute {args.per_minute}")
    heads = ("messages", "emails", "budget", "lost", "p50 ms", "p99 ms")
    print(f"{'run':10} " + " ".join(f"{h:>9}" for h in heads))
    runs = (("password", password), ("dropped", kicked), ("oauth2", oauth2))
    for name, r in runs:
        cells = ("messages", "emails_sent", "emails_budget", "lost", "p50_ms", "p99_ms")
        print(f"{name:10} " + " ".join(f"{r[c]!s:>9}" for c in cells))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
