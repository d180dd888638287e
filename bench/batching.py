"""Batching benchmark: many messages per email against the server's one-email floor.

    python bench/batching.py [--seconds 20] [--rate R] [--linger-ms 20] [--json FILE]

Starts its own server (state /tmp/emailmw-benchbatch, free ports; needs root), implicit TLS
verified, as ``bench/email_latency.py``. In one run:

* the floor (``email_latency.floor_run``): stdlib smtplib on one connection, a raw IMAP
  reader polling with NOOP, one email per message: ``floor_p50_ms`` paced at 5 msg/s,
  ``floor_throughput_msgs_per_s`` for a burst of 1,000;
* batched (native transport, ``batch: {linger-ms, max-messages 500}``, the ``memory``
  guarantee): 100-byte messages published at ``--rate`` (default: 12x the floor's
  throughput) for ``--seconds``, by a publisher process, received by a subscriber in this
  one; ``batched_throughput_msgs_per_s`` (received over the time from the first publish to
  the last reception), ``batched_p50_ms`` and ``batched_p99_ms`` (publish -> received, by
  Source-Timestamp), ``lost`` (published and never received), ``emails`` (batch emails
  the server stored), ``server_cpu_ms_per_msg`` (Postfix and Dovecot CPU per message);
* ``large_message_ok`` and ``large_message_s``: a 50 MB message through a server whose
  ``message_size_limit`` is 10 MB (split into parts and reassembled).

* paced at 5 msg/s, batched and not, side by side (two 20 s rounds each, interleaved):
  ``paced_batched_p50_ms`` and ``paced_unbatched_p50_ms``;
* a stateless group of three member processes, ``--group-count`` messages unbatched and
  five times that batched, published as fast as one process can:
  ``group_throughput_msgs_per_s`` and ``group_batched_throughput_msgs_per_s``;
* ``large_receiver_peak_rss_mb`` (and ``_zstd``): the peak memory of a receiver process
  that gets one 50 MB message (half random, half repeated) through a 10 MB server, against
  its memory before (``large_receiver_baseline_mb``).

Targets (issues #39, #45): batched_throughput >= 10x floor_throughput; batched_p50 <=
linger + 2x floor_p50; paced_batched_p50 <= 1.1x paced_unbatched_p50;
group_batched_throughput >= 5x group_throughput; large_receiver_peak_rss <= baseline + 1.5x
the message; lost = 0 in every run; large_message_ok = 1. Prints a table, writes JSON,
exits 0.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import yaml
from email_latency import floor_run, pct, server_cpu_seconds

import emailmw
from emailmw.testing.mailserver import MailServer

PUBLISHER = """
import sys, time, emailmw
config, rate, seconds, size = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
topic = sys.argv[5] if len(sys.argv) > 5 else "/bench/batched"
with emailmw.Context(config) as ctx:
    pub = emailmw.Publisher(topic, context=ctx, guarantee="memory")
    if ctx.options.batch.enabled:
        ctx.wait_for_readers("batch", 60)  # (its readers said they read batches)
    print("ready", flush=True)
    sys.stdin.readline()
    start = time.monotonic()
    i = 0
    while True:
        due = start + i / rate
        if due - start >= seconds:
            break
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        pub.publish(f"{i:08d}".ljust(size, "x"))
        i += 1
    ctx.flush(120)
    print(i, flush=True)
"""


def batched_run(
    server: MailServer, rate: float, seconds: float, linger_ms: float | None, size: int
) -> dict[str, float]:
    """``linger_ms`` None: not batched (the same run, one email a message)."""
    sender, receiver = server.fresh_account(), server.fresh_account()
    extra: dict[str, object] = {}
    if linger_ms is not None:
        extra["batch"] = {"linger-ms": linger_ms, "max-messages": 500, "max-bytes": "4 MiB"}
    config = Path(f"/tmp/emailmw-benchbatch-pub-{sender}.yml")
    config.write_text(yaml.safe_dump({"email": server.config(sender, to=receiver, **extra)}))
    config.chmod(0o600)
    sub_ctx = emailmw.Context({"email": server.config(receiver)})
    sub = emailmw.Subscription("/bench/batched", context=sub_ctx)
    sub_ctx.start_receiving()
    publisher = subprocess.Popen(
        [sys.executable, "-c", PUBLISHER, str(config), str(rate), str(seconds), str(size)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert publisher.stdout is not None
    assert publisher.stdin is not None
    assert publisher.stdout.readline().strip() == "ready"
    latencies: list[float] = []
    seen: set[int] = set()
    expected: list[int] = []
    last = [0.0]

    def listen() -> None:
        while True:
            got = emailmw.wait_for_message_with_info(sub, 30)
            if got is None:
                if expected:
                    return
                continue
            seq = got[1].sequence_number
            assert seq is not None
            seen.add(seq)
            latencies.append((time.time_ns() - got[1].source_timestamp) / 1e6)
            last[0] = time.monotonic()
            if expected and len(seen) >= expected[0]:
                return

    thread = threading.Thread(target=listen)
    thread.start()
    cpu0 = server_cpu_seconds()
    start = time.monotonic()
    publisher.stdin.write("go\n")
    publisher.stdin.flush()
    published = int(publisher.stdout.readline())
    expected.append(published)
    thread.join(300)
    elapsed = last[0] - start
    server_cpu = server_cpu_seconds() - cpu0
    publisher.stdin.close()
    publisher.wait(30)
    maildir = server.maildir(receiver)
    stored = sum(1 for sub_dir in ("new", "cur") for _ in (maildir / sub_dir).iterdir())
    sub_ctx.shutdown()
    config.unlink()
    return {
        "rate_msgs_per_s": rate,
        "published": published,
        "received": len(seen),
        "lost": published - len(seen),
        "batched_throughput_msgs_per_s": len(seen) / elapsed,
        "batched_p50_ms": statistics.median(latencies),
        "batched_p99_ms": pct(latencies, 99),
        "emails": stored,
        "server_cpu_ms_per_msg": 1000 * server_cpu / max(1, len(seen)),
    }


MEMBER = """
import sys, emailmw
with emailmw.Context(sys.argv[1]) as ctx:
    sub = emailmw.Subscription("/bench/group", context=ctx, mode="stateless", group="bench")
    ctx.start_receiving()
    print("ready", flush=True)
    while True:
        got = emailmw.wait_for_message_with_info(sub, 5)
        if got is not None:
            print(got[1].sequence_number, flush=True)
"""


def group_run(server: MailServer, count: int, batched: bool) -> dict[str, float]:
    """``count`` messages published as fast as one process can to a stateless group of
    three member processes: messages processed per second, from the first publish to the
    last processing; ``lost``."""
    sender, group = server.fresh_account(), server.fresh_account()
    member_config = Path(f"/tmp/emailmw-benchbatch-member-{group}.yml")
    member_config.write_text(yaml.safe_dump({"email": server.config(group)}))
    member_config.chmod(0o600)
    members = [
        subprocess.Popen([sys.executable, "-c", MEMBER, str(member_config)],
                         stdout=subprocess.PIPE, text=True)
        for _ in range(3)
    ]  # fmt: skip
    seen: set[int] = set()
    lock = threading.Lock()
    done = threading.Event()
    last = [0.0]

    def read(member: subprocess.Popen[str]) -> None:
        assert member.stdout is not None
        for line in member.stdout:
            if line.strip().isdigit():
                with lock:
                    seen.add(int(line))
                    last[0] = time.monotonic()
                    if len(seen) >= count:
                        done.set()

    for member in members:
        assert member.stdout is not None
        assert member.stdout.readline().strip() == "ready"
        threading.Thread(target=read, args=(member,), daemon=True).start()
    extra: dict[str, object] = {}
    if batched:
        extra["batch"] = {"linger-ms": 20, "max-messages": 100}
    config = Path(f"/tmp/emailmw-benchbatch-gpub-{sender}.yml")
    config.write_text(yaml.safe_dump({"email": server.config(sender, to=group, **extra)}))
    config.chmod(0o600)
    publisher = subprocess.Popen(
        [sys.executable, "-c", PUBLISHER, str(config), "1e9", str(count / 1e9), "20",
         "/bench/group"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert publisher.stdout is not None
    assert publisher.stdin is not None
    assert publisher.stdout.readline().strip() == "ready"
    start = time.monotonic()
    publisher.stdin.write("go\n")
    publisher.stdin.flush()
    done.wait(600)
    elapsed = last[0] - start
    publisher.stdin.close()
    publisher.wait(60)
    for member in members:
        member.kill()
    for path in (config, member_config):
        path.unlink()
    return {"throughput_msgs_per_s": min(len(seen), count) / elapsed,
            "lost": count - min(len(seen), count)}  # fmt: skip


def large_run(size_mb: int) -> dict[str, float]:
    """A ``size_mb`` MB message (random hex: it does not compress) through a server of its
    own whose Postfix takes at most 10 MB (as Postfix's default)."""
    import hashlib
    import os
    import shutil

    state = Path("/tmp/emailmw-benchsize")
    server = MailServer(state_dir=state, message_size_limit=10_240_000, pool_size=4)
    server.start(fresh=True)
    try:
        sender, receiver = server.fresh_account(), server.fresh_account()
        big = {"max-message-size": f"{2 * size_mb} MiB"}
        body = os.urandom(size_mb * 500_000).hex()
        with (
            emailmw.Context({"email": server.config(receiver, **big)}) as sub_ctx,
            emailmw.Context({"email": server.config(sender, to=receiver, **big)}) as pub_ctx,
        ):
            sub = emailmw.Subscription("/bench/large", context=sub_ctx)
            sub_ctx.start_receiving()
            start = time.monotonic()
            emailmw.Publisher("/bench/large", context=pub_ctx).publish(body)
            got = emailmw.wait_for_message(sub, 600)
            elapsed = time.monotonic() - start
        ok = (
            got is not None
            and hashlib.sha256(got.encode()).digest() == hashlib.sha256(body.encode()).digest()
        )
        maildir = server.maildir(receiver)
        emails = sum(1 for d in ("new", "cur") for _ in (maildir / d).iterdir())
    finally:
        server.stop()
        shutil.rmtree(state, ignore_errors=True)
    return {
        "large_message_mb": size_mb,
        "large_message_ok": 1 if ok else 0,
        "large_message_s": elapsed,
        "large_message_emails": emails,
    }


RECEIVER = """
import gc, hashlib, sys, emailmw
config = sys.argv[1]
def rss_mb(field="VmRSS"):
    # (VmHWM, not ru_maxrss: that one counts the bench's own memory, forked before exec)
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith(field)) / 1000
with emailmw.Context(config) as ctx:
    sub = emailmw.Subscription("/bench/large", context=ctx)
    ctx.start_receiving()
    gc.collect()
    print("ready", rss_mb(), flush=True)
    got = emailmw.wait_for_message(sub, 600)
    digest = hashlib.sha256()
    for i in range(0, len(got or ""), 1 << 20):
        digest.update(got[i : i + (1 << 20)].encode())
    print("got", digest.hexdigest(), rss_mb("VmHWM"), flush=True)
"""


def large_rss_run(server: MailServer, size_mb: int, compress: bool) -> dict[str, float]:
    """A ``size_mb`` MB message received by a process of its own: its peak RSS over its
    RSS before the message came (``receiver_baseline_mb``), in MB."""
    import hashlib
    import os

    sender, receiver = server.fresh_account(), server.fresh_account()
    big = {"max-message-size": f"{2 * size_mb} MiB"}
    config = Path(f"/tmp/emailmw-benchbatch-large-{receiver}.yml")
    config.write_text(yaml.safe_dump({"email": server.config(receiver, **big)}))
    config.chmod(0o600)
    reader = subprocess.Popen(
        [sys.executable, "-c", RECEIVER, str(config)], stdout=subprocess.PIPE, text=True
    )
    assert reader.stdout is not None
    baseline = float(reader.stdout.readline().split()[1])
    # half random (does not compress), half repeated (compresses): a camera frame's mix
    body = os.urandom(size_mb * 250_000).hex() + "0123456789abcdef" * (size_mb * 31_250)
    with emailmw.Context({"email": server.config(sender, to=receiver, **big)}) as pub_ctx:
        if compress:
            pub_ctx.wait_for_readers("zstd", 30)
        pub = emailmw.Publisher("/bench/large", context=pub_ctx,
                                compress="zstd" if compress else None)  # fmt: skip
        start = time.monotonic()
        pub.publish(body)
        _, digest, peak = reader.stdout.readline().split()
        elapsed = time.monotonic() - start
    reader.wait(60)
    ok = digest == hashlib.sha256(body.encode()).hexdigest()
    return {
        "ok": 1 if ok else 0,
        "seconds": elapsed,
        "receiver_baseline_mb": baseline,
        "receiver_peak_rss_mb": float(peak),
        "extra_mb": float(peak) - baseline,
        "ratio": (float(peak) - baseline) / size_mb,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rate", type=float, default=None, help="default: 12x the floor")
    parser.add_argument("--linger-ms", type=float, default=20.0)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--paced-seconds", type=float, default=20.0)
    parser.add_argument("--group-count", type=int, default=400,
                        help="messages for the unbatched group (5x that batched)")  # fmt: skip
    parser.add_argument("--large-mb", type=int, default=50, help="0: skip the large message")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    server = MailServer(state_dir=Path("/tmp/emailmw-benchbatch"), pool_size=40)
    server.start(fresh=True)
    try:
        print("floor: 200 messages at 5 msg/s, then a burst of 1000 ...", flush=True)
        floor = floor_run(server, 200, 5.0)
        floor_burst = floor_run(server, 1000, None)
        rate = args.rate or 12 * floor_burst["msgs_per_s"]
        print(f"batched: {rate:.0f} msg/s for {args.seconds:g} s ...", flush=True)
        batched = batched_run(server, rate, args.seconds, args.linger_ms, args.size)
        # paced at 5 msg/s, batched and not, side by side (two rounds each, interleaved)
        paced: dict[str, list[float]] = {"batched": [], "unbatched": []}
        lost = batched["lost"]
        for _ in range(2):
            for kind, linger in (("unbatched", None), ("batched", args.linger_ms)):
                print(f"paced {kind}: 5 msg/s for {args.paced_seconds:g} s ...", flush=True)
                run = batched_run(server, 5.0, args.paced_seconds, linger, args.size)
                paced[kind].append(run["batched_p50_ms"])
                lost += run["lost"]
        groups = {}
        for kind, count in (("unbatched", args.group_count), ("batched", 5 * args.group_count)):
            print(f"stateless group of 3, {kind}: {count} messages ...", flush=True)
            groups[kind] = group_run(server, count, kind == "batched")
            lost += groups[kind]["lost"]
    finally:
        server.stop()
    results: dict[str, float] = {
        "floor_p50_ms": floor["p50_ms"],
        "floor_throughput_msgs_per_s": floor_burst["msgs_per_s"],
        "linger_ms": args.linger_ms,
        **batched,
        "paced_unbatched_p50_ms": statistics.median(paced["unbatched"]),
        "paced_batched_p50_ms": statistics.median(paced["batched"]),
        "group_throughput_msgs_per_s": groups["unbatched"]["throughput_msgs_per_s"],
        "group_batched_throughput_msgs_per_s": groups["batched"]["throughput_msgs_per_s"],
    }
    if args.large_mb:
        print(f"a {args.large_mb} MB message through a 10 MB server ...", flush=True)
        results.update(large_run(args.large_mb))
        large_server = MailServer(state_dir=Path("/tmp/emailmw-benchsize"),
                                  message_size_limit=10_240_000, pool_size=8)  # fmt: skip
        large_server.start(fresh=True)
        try:
            for compress in (False, True):
                print(f"its receiver's memory{' (zstd)' if compress else ''} ...", flush=True)
                found = large_rss_run(large_server, args.large_mb, compress)
                suffix = "_zstd" if compress else ""
                results[f"large_receiver_baseline_mb{suffix}"] = found["receiver_baseline_mb"]
                results[f"large_receiver_peak_rss_mb{suffix}"] = found["receiver_peak_rss_mb"]
                results["large_message_ok"] = min(results.get("large_message_ok", 1), found["ok"])
        finally:
            large_server.stop()
    results["lost"] = lost
    r = results
    rows = [
        ("floor_throughput_msgs_per_s", r["floor_throughput_msgs_per_s"], ""),
        ("floor_p50_ms", r["floor_p50_ms"], ""),
        ("rate_msgs_per_s", r["rate_msgs_per_s"], ""),
        ("batched_throughput_msgs_per_s", r["batched_throughput_msgs_per_s"],
         f">= {10 * r['floor_throughput_msgs_per_s']:.0f} (10x floor)"),
        ("batched_p50_ms", r["batched_p50_ms"],
         f"<= {r['linger_ms'] + 2 * r['floor_p50_ms']:.1f} (linger + 2x floor p50)"),
        ("batched_p99_ms", r["batched_p99_ms"], ""),
        ("paced_unbatched_p50_ms", r["paced_unbatched_p50_ms"], ""),
        ("paced_batched_p50_ms", r["paced_batched_p50_ms"],
         f"<= {1.1 * r['paced_unbatched_p50_ms']:.1f} (1.1x unbatched, 5 msg/s)"),
        ("group_throughput_msgs_per_s", r["group_throughput_msgs_per_s"], ""),
        ("group_batched_throughput_msgs_per_s", r["group_batched_throughput_msgs_per_s"],
         f">= {5 * r['group_throughput_msgs_per_s']:.0f} (5x unbatched group)"),
        ("lost", r["lost"], "0 (every run)"),
        ("emails", r["emails"], ""),
        ("server_cpu_ms_per_msg", r["server_cpu_ms_per_msg"], ""),
    ]  # fmt: skip
    if "large_message_ok" in r:
        rows += [
            ("large_message_ok", r["large_message_ok"], "1"),
            ("large_message_s", r["large_message_s"], ""),
            ("large_message_emails", r["large_message_emails"], ""),
        ]
        for suffix in ("", "_zstd"):
            base = r[f"large_receiver_baseline_mb{suffix}"]
            rows += [
                (f"large_receiver_baseline_mb{suffix}", base, ""),
                (f"large_receiver_peak_rss_mb{suffix}", r[f"large_receiver_peak_rss_mb{suffix}"],
                 f"<= {base + 1.5 * args.large_mb:.0f} (baseline + 1.5x the message)"),
            ]  # fmt: skip
    print(f"{'figure':<40} {'value':>12}  target")
    for name, value, target in rows:
        print(f"{name:<40} {value:>12,.2f}  {target}")
    machine = {"python": sys.version.split()[0], "platform": platform.platform()}
    if args.json:
        args.json.write_text(json.dumps({"results": results, "machine": machine}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
