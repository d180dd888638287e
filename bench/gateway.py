"""Gateway benchmark: one-way latency through one gateway between two mail servers against
the direct one-server path, and throughput through the gateway.

    python bench/gateway.py [--messages 200] [--rate 10] [--burst 500] [--rounds 3] [--json FILE]

All in one run, on this machine, native transport, Stem data messages (routed, 200 bytes
of data):

* ``direct_p50_ms``: a cell on hub ``src`` sends to a cell on hub ``dst``, both accounts
  of server B (one SMTP submission, one IMAP delivery);
* ``via_gateway_p50_ms``: the sender's hub is on server A; its route to ``dst`` is the
  account of an ``emailmw gateway`` process (its own process, as deployed) on A, which
  relays through its account on B;
* ``gateway_added_p50_ms`` = via - direct: what the gateway hop adds;
* ``gateway_msgs_per_s``: ``--burst`` messages sent at once through the gateway, from the
  first send to the last delivery.

``--messages`` at ``--rate`` msg/s per run, ``--rounds`` interleaved runs of each path
(medians of the runs' p50s). Target (issue #25): the gateway hop adds at most 1.5x the
direct path's p50. Starts its own two servers (state /tmp/emailmw-benchgw-a and -b, ports
free at start; needs root). Prints a table, writes JSON (``--json``), exits 0.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml

import emailmw
from emailmw import stem
from emailmw.testing.mailserver import MailServer

ROOT = Path(__file__).resolve().parents[1]
PAD = "x" * 160


class Sink(stem.Cell):
    """Records the one-way latency of every data message (its data holds the send time)."""

    def __init__(self, name: str, context: emailmw.Context, expected: int) -> None:
        self.latencies: list[float] = []
        self.expected = expected
        self.done = threading.Event()
        super().__init__(name, context=context)

    def data_in(self, msg: stem.StemMessage) -> None:
        self.latencies.append((time.time_ns() - msg.data["t"]) / 1e6)
        if len(self.latencies) >= self.expected:
            self.done.set()


def context(server: MailServer, address: str, hub: str, routes: dict[str, str]) -> emailmw.Context:
    return emailmw.Context(
        {"email": server.config(address, routing={"hub": hub, "routes": routes})}
    )


def run(
    src_ctx: emailmw.Context, dst_ctx: emailmw.Context, count: int, rate: float | None
) -> tuple[list[float], float]:
    """Send ``count`` messages src -> dst (paced at ``rate``, or at once); the latencies
    and the seconds from the first send to the last delivery."""
    sink = Sink("sink", dst_ctx, count)
    source = stem.Cell("source", context=src_ctx)
    start = time.monotonic()
    for i in range(count):
        if rate is not None:
            time.sleep(max(0.0, start + i / rate - time.monotonic()))
        source.send("dst:sink", data={"t": time.time_ns(), "i": i, "pad": PAD})
    if not sink.done.wait(600):
        raise SystemExit(f"only {len(sink.latencies)} of {count} messages arrived")
    elapsed = time.monotonic() - start
    sink.close()
    source.close()
    return sink.latencies, elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=200)
    parser.add_argument("--rate", type=float, default=10.0)
    parser.add_argument("--burst", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    a = MailServer(state_dir=Path("/tmp/emailmw-benchgw-a"), domain="example.test", pool_size=20)
    b = MailServer(state_dir=Path("/tmp/emailmw-benchgw-b"), domain="b.test", pool_size=20)
    work = Path(tempfile.mkdtemp(prefix="emailmw-benchgw-"))
    gateway: subprocess.Popen[bytes] | None = None
    contexts: list[emailmw.Context] = []
    a.start(fresh=True)
    b.start(fresh=True)
    try:
        src_a, gw_a = a.fresh_account(), a.fresh_account()
        src_b, dst_b, gw_b = b.fresh_account(), b.fresh_account(), b.fresh_account()
        config = work / "gateway.yml"
        config.write_text(yaml.safe_dump({
            "accounts": {"a": a.config(gw_a, routing={"hub": "gwa"}),
                         "b": b.config(gw_b, routing={"hub": "gwb"})},
            "routes": {"dst": {"to": dst_b, "via": "b"}, "src": {"to": src_a, "via": "a"}},
        }))  # fmt: skip
        err = (work / "gateway.err").open("wb")
        gateway = subprocess.Popen(
            [sys.executable, "-m", "emailmw", "gateway", str(config), "--report-every", "3600"],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while "relaying between" not in (work / "gateway.err").read_text():
            if time.monotonic() > deadline or gateway.poll() is not None:
                raise SystemExit((work / "gateway.err").read_text() or "the gateway did not start")
            time.sleep(0.05)
        dst = context(b, dst_b, "dst", {})
        direct_src = context(b, src_b, "src", {"dst": dst_b})
        via_src = context(a, src_a, "src", {"dst": gw_a})
        contexts += [dst, direct_src, via_src]
        runs: dict[str, list[float]] = {"direct": [], "via_gateway": []}
        received = {"direct": 0, "via_gateway": 0}
        for _ in range(args.rounds):
            for path, src in (("direct", direct_src), ("via_gateway", via_src)):
                latencies, _ = run(src, dst, args.messages, args.rate)
                runs[path].append(statistics.median(latencies))
                received[path] += len(latencies)
        _, burst_s = run(via_src, dst, args.burst, None)
    finally:
        for made in contexts:
            made.shutdown()
        if gateway is not None:
            gateway.terminate()
            gateway.wait(20)
        a.stop()
        b.stop()
    results: dict[str, Any] = {
        "direct_p50_ms": statistics.median(runs["direct"]),
        "via_gateway_p50_ms": statistics.median(runs["via_gateway"]),
        "gateway_msgs_per_s": args.burst / burst_s,
        "received_direct": received["direct"],
        "received_via_gateway": received["via_gateway"],
        "runs_p50_ms": runs,
        "messages_per_run": args.messages,
        "rate_msgs_per_s": args.rate,
        "burst": args.burst,
        "rounds": args.rounds,
    }
    results["gateway_added_p50_ms"] = results["via_gateway_p50_ms"] - results["direct_p50_ms"]
    results["added_over_direct"] = results["gateway_added_p50_ms"] / results["direct_p50_ms"]
    print(f"{'measure':28} {'value':>10}")
    for key in ("direct_p50_ms", "via_gateway_p50_ms", "gateway_added_p50_ms",
                "added_over_direct", "gateway_msgs_per_s"):  # fmt: skip
        print(f"{key:28} {results[key]:10.2f}")
    print(f"{'received (direct / via)':28} {received['direct']} / {received['via_gateway']}")
    met = results["added_over_direct"] <= 1.5
    print(f"\ntarget: the gateway hop adds <= 1.5x the direct p50: {'met' if met else 'NOT met'}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
