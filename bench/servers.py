"""The same workloads on each IMAP server of the test matrix, side by side in one run:
Dovecot 2.3, Cyrus IMAP 3.6 and Courier-IMAP 5.0 (Debian 12's packages, each with its
defaults but the ports; Postfix delivering to each).

    python bench/servers.py [--messages 100] [--group-messages 100] [--json FILE]

For each server (native transport unless said):

* ``receive_p50_ms`` / ``receive_p99_ms``: ``--messages`` messages published at 5/s, publish
  -> received in the subscriber (native), and ``curl_p50_ms`` with curl (polling-period
  20 ms);
* ``group_msgs_per_s``: two stateless members of one group (default settings) processing
  ``--group-messages`` messages waiting in the inbox (from the first one processed to the
  last); ``group_lost`` / ``group_repeats``: never processed / processed twice;
* ``lock_round_ms``: a group's claim lock taken and released (the median of 20).

Starts its servers (state under /tmp, ports free at start; needs root; Cyrus and Courier
are unpacked from Debian's packages on first use). Prints a table, writes JSON, exits 0.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import time
import uuid
from pathlib import Path
from typing import Any

import emailmw
from emailmw._core.config import load_options
from emailmw._transport.group.imap import ImapGroupStore
from emailmw.testing.mailserver import IMAP_SERVERS, MailServer


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def receive(server: MailServer, transport: str, messages: int) -> list[float]:
    """Publish -> received latencies (ms), ``messages`` at 5/s."""
    sender, receiver = server.fresh_account(), server.fresh_account()
    extra = {"polling-period": 20_000_000} if transport == "curl" else {}
    rx = emailmw.Context({"email": server.config(receiver, transport=transport, **extra)})
    tx = emailmw.Context({"email": server.config(sender, to=receiver)})
    try:
        sub = emailmw.Subscription("/bench", context=rx)
        rx.start_receiving()
        pub = emailmw.Publisher("/bench", context=tx)
        sent: dict[str, float] = {}
        got: dict[str, float] = {}
        deadline = time.monotonic() + messages / 5 + 90
        for i in range(messages):
            sent[str(i)] = time.monotonic()
            pub.publish(str(i))
            end = time.monotonic() + 0.2
            while time.monotonic() < end:
                body = emailmw.wait_for_message(sub, max(0.0, end - time.monotonic()))
                if body is not None:
                    got[body] = time.monotonic()
        while len(got) < messages and time.monotonic() < deadline:
            body = emailmw.wait_for_message(sub, 1)
            if body is not None:
                got[body] = time.monotonic()
        return [1000 * (got[k] - sent[k]) for k in got]
    finally:
        tx.shutdown()
        rx.shutdown()


def group(server: MailServer, messages: int) -> dict[str, Any]:
    """Two stateless members (default settings) processing ``messages`` waiting."""
    account, sender = server.fresh_account(), server.fresh_account()
    tx = emailmw.Context({"email": server.config(sender, to=account)})
    members = [emailmw.Context({"email": server.config(account)}) for _ in range(2)]
    try:
        pub = emailmw.Publisher("/work", context=tx)
        for i in range(messages):
            pub.publish(str(i))
        tx.flush(60)
        subs = [emailmw.Subscription("/work", context=m, mode="stateless", group="crew")
                for m in members]  # fmt: skip
        processed: list[str] = []
        first = None
        deadline = time.monotonic() + 300
        while len(processed) < messages and time.monotonic() < deadline:
            for sub in subs:
                taken = sub.take_with_ticket()
                if taken is not None:
                    first = first or time.monotonic()
                    processed.append(taken[0])
                    taken[2].release()
            time.sleep(0.002)
        took = time.monotonic() - (first or time.monotonic())
        done = set(processed)
        return {
            "group_msgs_per_s": round(len(processed) / took, 1) if took else 0.0,
            "group_lost": messages - len(done & {str(i) for i in range(messages)}),
            "group_repeats": len(processed) - len(done),
        }
    finally:
        tx.shutdown()
        for m in members:
            m.shutdown()


def lock_round(server: MailServer, rounds: int = 20) -> float:
    """The median time (ms) to take and release a group's claim lock."""
    store = ImapGroupStore(load_options({"email": server.config(server.fresh_account())}), "b")
    try:
        store.join("m")
        (record,) = store.members()
        took = []
        for _ in range(rounds):
            start = time.perf_counter()
            assert store.try_lock(record)
            store.unlock(record)
            took.append(1000 * (time.perf_counter() - start))
        return statistics.median(took)
    finally:
        store.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=100)
    parser.add_argument("--group-messages", type=int, default=100)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results: dict[str, Any] = {"messages": args.messages, "group_messages": args.group_messages}
    for name in IMAP_SERVERS:
        state = Path(f"/tmp/emailmw-benchsrv-{uuid.uuid4().hex[:6]}")
        server = MailServer(state_dir=state, imap_server=name, pool_size=20)
        print(f"{name}: starting ...", flush=True)
        server.start(fresh=True)
        try:
            native = receive(server, "native", args.messages)
            curl = receive(server, "curl", args.messages)
            row: dict[str, Any] = {
                "receive_p50_ms": round(_quantile(native, 0.5), 1),
                "receive_p99_ms": round(_quantile(native, 0.99), 1),
                "received": len(native),
                "curl_p50_ms": round(_quantile(curl, 0.5), 1),
                "curl_received": len(curl),
                "lock_round_ms": round(lock_round(server), 1),
                **group(server, args.group_messages),
            }
        finally:
            server.stop()
            shutil.rmtree(state, ignore_errors=True)
        results[name] = row
    keys = ["receive_p50_ms", "receive_p99_ms", "curl_p50_ms", "lock_round_ms",
            "group_msgs_per_s", "group_lost", "group_repeats"]  # fmt: skip
    print(f"{'':>26}" + "".join(f"{n:>12}" for n in IMAP_SERVERS))
    for key in keys:
        print(f"{key:>26}" + "".join(f"{results[n][key]:>12}" for n in IMAP_SERVERS))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
