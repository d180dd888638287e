"""What the group member's delivery record costs with its read-back (#62): the fence that
holds whatever a member's clock says, over the local mail server.

    python bench/group_fence.py [--deliveries 200] [--json FILE]

A group store (one IMAP connection, as a member's second one) holds ``--deliveries`` claims;
each is marked delivered twice, side by side in one run, alternating: ``store_only_ms``, the
record as it was (``UID STORE +FLAGS.SILENT``), and ``with_read_back_ms``, the record as a
member makes it now (the STORE, a NOOP, a ``UID FETCH`` of the claim's flags). Each is the
median and p90 of its round trips on loopback; ``added_ms`` the difference of the medians
(on a real provider, two round trips more per message an application takes). Starts its
own server (state /tmp/emailmw-benchfence, ports free at start; needs root). Prints a
table, writes JSON (``--json``), exits 0.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from emailmw._core.config import load_options
from emailmw._transport.group.imap import ImapGroupStore
from emailmw.testing.mailserver import MailServer


def _store_only(store: ImapGroupStore, member: str, uid: int, delivered: int) -> None:
    """The delivery record before the read-back: the STORE alone."""

    def work(client: Any) -> None:
        store._view(client, store._claims(member))
        client.add_flags([uid], [f"Delivery{delivered}"], silent=True)

    store._run("recording a delivery", work)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--deliveries", type=int, default=200)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    server = MailServer(state_dir=Path("/tmp/emailmw-benchfence"))
    server.start()
    try:
        options = load_options({"email": server.config(server.fresh_account())})
        store = ImapGroupStore(options, "bench")
        for i in range(args.deliveries):
            store.offer(f"Subject: /t\r\nSource-Timestamp: {i + 1}\r\n\r\nm{i}\r\n".encode(), 0)
        store.claim(store.inbox(), "a")
        uids = sorted(store.holding("a"))
        times: dict[str, list[float]] = {"store_only": [], "with_read_back": []}
        for n, uid in enumerate(uids):
            order = ("store_only", "with_read_back") if n % 2 else ("with_read_back", "store_only")
            for variant in order:
                started = time.perf_counter()
                if variant == "store_only":
                    _store_only(store, "a", uid, 1)
                else:
                    assert store.mark("a", uid, 2)
                times[variant].append((time.perf_counter() - started) * 1000)
        store.close()
    finally:
        server.stop()
    result: dict[str, Any] = {"deliveries": len(uids)}
    for variant, values in times.items():
        result[f"{variant}_ms"] = round(statistics.median(values), 3)
        result[f"{variant}_p90_ms"] = round(statistics.quantiles(values, n=10)[-1], 3)
    result["added_ms"] = round(result["with_read_back_ms"] - result["store_only_ms"], 3)
    print(f"{'figure':<24}{'value':>10}")
    for key, value in result.items():
        print(f"{key:<24}{value:>10}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
