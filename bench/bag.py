"""Bag benchmark: recording live, exporting an archive, and what a message costs in a bag.

    python bench/bag.py [--messages 20000] [--archive 200000] [--json FILE]

(a) record_msgs_per_s: a std_msgs/msg/String of 1 kB published as fast as possible on one
    topic over the intraprocess transport while ``emailmw bag record``'s recorder
    (``_bag.bag.record``) writes it into an MCAP bag; messages recorded over the time from
    the first publish to the recorder's return (its writing process started before it
    subscribes, as the command's does), and, for scale, publish_only_msgs_per_s (the same
    publishing into a plain subscription that only takes): record_over_publish_only.
(b) export_msgs_per_s: the 200k-message Maildir of ``bench/pipeline.py`` (generated once,
    cached under /tmp/emailmw-bench-archives) exported into a bag as ``emailmw bag export``
    does (the landing's listing and reader, a worker process a core parsing and encoding,
    this one writing), warm page cache; export_one_process_msgs_per_s the same in one
    process; and the parts: read_parse_msgs_per_s (reading and parsing the emails alone)
    and write_msgs_per_s (the writer alone, on the parsed messages).
(c) bag_bytes_per_msg: the bag's bytes per message against the archive's raw mail bytes
    per message.

Targets (issue #38): record_msgs_per_s >= 20,000; export_msgs_per_s >= 50,000; (issue
#49) record_over_publish_only >= 0.8.
A benchmark, not a test: prints a table, writes JSON, exits 0 whatever the figures are.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

from pipeline import make_archive

import emailmw
from emailmw import std_msgs
from emailmw._bag.bag import BagWriter, export, record
from emailmw._core.protocol import PublishRoute, classify
from emailmw._core.wire import parse
from emailmw._pipeline.landing import Source, list_units, unit_emails


def bench_record(n: int, size: int, work: Path) -> dict[str, float]:
    payload = "x" * size
    results: dict[str, float] = {}
    with emailmw.Context() as ctx:
        node = emailmw.Node("bench_recorded", context=ctx, start_parameter_services=False)
        pub = node.create_publisher(std_msgs.msg.String, "/bench/bag", 10)
        message = std_msgs.msg.String(data=payload)
        # publishing alone, into a subscription that only takes
        sub = emailmw.Subscription("/bench/bag", context=ctx)
        start = time.perf_counter()
        for _ in range(n):
            pub.publish(message)
        taken = 0
        while taken < n:
            if sub.get_message() is None:
                emailmw.wait_for_message(sub, 10)
                taken += 1
                continue
            taken += 1
        results["publish_only_msgs_per_s"] = n / (time.perf_counter() - start)
        sub.close()
        # recording
        ready = threading.Event()
        counted: list[int] = []
        began: list[float] = []

        def publisher() -> None:
            ready.wait(10)
            began.append(time.perf_counter())
            for _ in range(n):
                pub.publish(message)

        thread = threading.Thread(target=publisher)
        thread.start()
        out = work / "recorded"
        counted.append(
            record(
                ctx, out, ["/bench/bag"], count=n, duration=120, on_subscribed=lambda _: ready.set()
            )
        )
        ended = time.perf_counter()
        thread.join()
    results["record_msgs_per_s"] = counted[0] / (ended - began[0])
    results["recorded"] = counted[0]
    results["record_bag_bytes_per_msg"] = _bag_bytes(out) / max(1, counted[0])
    return results


def _bag_bytes(bag: Path) -> int:
    return sum(p.stat().st_size for p in bag.iterdir())


def bench_export(count: int, work: Path) -> dict[str, float]:
    archive = make_archive(count, "maildir")
    listed = [Source("maildir", archive, str(archive))]

    def emails():  # type: ignore[no-untyped-def]
        for unit in list_units(listed).to_pylist():
            for _, _, delivered_ns, raw in unit_emails(unit):
                yield raw, delivered_ns

    raw_bytes = 0
    for raw, _ in emails():  # the archive into the page cache, and its size
        raw_bytes += len(raw)
    start = time.perf_counter()
    parsed = []
    for raw, delivered in emails():
        email = parse(raw)
        route = classify(email, delivered or 0)
        if isinstance(route, PublishRoute):
            parsed.append((route, email, delivered))
    read_parse_s = time.perf_counter() - start
    writer = BagWriter(work / "writer-only")
    start = time.perf_counter()
    for route, email, delivered in parsed:
        writer.write(route.topic, route.info.message_type, email.body, route.info, delivered)
    writer.close()
    write_s = time.perf_counter() - start
    units = list_units(listed).to_pylist()
    out = work / "exported"
    start = time.perf_counter()
    written, left = export(units, out)
    export_s = time.perf_counter() - start
    serial = work / "exported-serial"
    start = time.perf_counter()
    export(units, serial, workers=1)
    serial_s = time.perf_counter() - start
    return {
        "archive_messages": count,
        "exported": written,
        "left_out": left,
        "export_s": export_s,
        "export_msgs_per_s": written / export_s,
        "export_one_process_msgs_per_s": written / serial_s,
        "read_parse_msgs_per_s": len(parsed) / read_parse_s,
        "write_msgs_per_s": len(parsed) / write_s,
        "bag_bytes_per_msg": _bag_bytes(out) / max(1, written),
        "raw_mail_bytes_per_msg": raw_bytes / max(1, count),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=20_000, help="recorded live")
    parser.add_argument("--size", type=int, default=1000, help="bytes of each recorded one")
    parser.add_argument("--archive", type=int, default=200_000, help="messages exported")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="emailmw-bench-bag-"))
    try:
        results = {
            **bench_record(args.messages, args.size, work),
            **bench_export(args.archive, work),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    results["bag_over_raw"] = results["bag_bytes_per_msg"] / results["raw_mail_bytes_per_msg"]
    results["record_over_publish_only"] = (
        results["record_msgs_per_s"] / results["publish_only_msgs_per_s"]
    )
    rows = [
        ("record_msgs_per_s", ">= 20000"),
        ("publish_only_msgs_per_s", ""),
        ("record_over_publish_only", ">= 0.8"),
        ("record_bag_bytes_per_msg", ""),
        ("export_msgs_per_s", ">= 50000"),
        ("export_one_process_msgs_per_s", ""),
        ("read_parse_msgs_per_s", ""),
        ("write_msgs_per_s", ""),
        ("export_s", ""),
        ("bag_bytes_per_msg", ""),
        ("raw_mail_bytes_per_msg", ""),
        ("bag_over_raw", ""),
    ]
    print(f"{'figure':<28} {'value':>14}  target")
    for name, target in rows:
        value = results[name]
        print(f"{name:<28} {value:>14,.3f}  {target}" if value < 10 else
              f"{name:<28} {value:>14,.1f}  {target}")  # fmt: skip
    machine = {"python": sys.version.split()[0], "platform": platform.platform()}
    if args.json:
        args.json.write_text(json.dumps({"results": results, "machine": machine}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
