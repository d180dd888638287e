"""Reliability benchmark against the local Postfix + Dovecot, for both transports.

    python bench/reliability.py [--messages 1000] [--rate 50] [--kills 5] [--json FILE]

Starts its own mail server on free ports (state /tmp/emailmw-benchrel; needs root). For each
transport (native, curl), in one run:

* **crash**: a subscriber process with a ``state-file`` (a node whose callback prints each
  message: at-least-once processing) is killed with SIGKILL at ``--kills`` random points of a
  ``--messages`` stream at ``--rate`` msg/s, and restarted at once each time:
  ``crash_lost`` (published, never processed), ``crash_redelivered`` (processed again, each
  flagged ``redelivered``), ``crash_silent_duplicates`` (processed again without the flag);
* **publisher crash**: a publisher process with the ``spool`` guarantee is killed mid-burst
  and restarted on the same spool: ``publisher_crash_lost`` (publish() returned, never
  received), ``publisher_crash_duplicates`` (received twice by the application);
* **server restarts**: a stream at ``--rate`` msg/s while Dovecot, then Postfix, is stopped
  for 2 s and started again: ``server_restart_lost``, and ``resume_s``, the time from
  Dovecot answering again to the first message published after that being received;
* **poison**: one email of each poison kind, then 100 legitimate messages at 20 msg/s:
  ``poison_delivered`` (of 100) and ``poison_p99_ms``, against ``baseline_p99_ms``, the same
  100 messages in an undisturbed run.

Targets (issue #21): every ``lost`` 0, no silent duplicate, ``poison_delivered`` 100 with
``poison_p99_ms`` <= 2x ``baseline_p99_ms``, ``resume_s`` <= 2 s. Prints a table, writes
JSON, exits 0.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import shutil
import smtplib
import ssl
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

import emailmw
from emailmw.testing.mailserver import MailServer

TOPIC = "/rel"
POISON = [
    b"Subject: /rel\r\nSource-Timestamp: 1\r\nPublisher-GID: 1\r\n"
    b"Content-Type: text/plain; charset=undefined\r\n\r\nabc\r\n",
    b"Subject: /rel\r\nSource-Timestamp: 1\r\nPublisher-GID: 1\r\n"
    b"Content-Type: text/plain; charset=punycode\r\n\r\nabc-9999999999\r\n",
    b"Subject: =?undefined?q?a?=\r\nSource-Timestamp: 1\r\nPublisher-GID: 1\r\n\r\nabc\r\n",
    b"Subject: /rel\r\nSource-Timestamp: 1\r\nPublisher-GID: 1\r\n"
    b"Content-Type: text/plain; charset=unicode_escape\r\n\r\n\\ud800\r\n",
    b"Subject: /rel\r\nSource-Timestamp: 1" + b"0" * 40 + b"\r\nPublisher-GID: 1\r\n\r\nabc\r\n",
]


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


# ----------------------------------------------------------------------------- peers


def peer_sub(config: str) -> None:
    """A node whose callback prints each message: the callback's return settles it."""
    with emailmw.Context(config) as ctx:
        node = emailmw.Node("rel_listener", context=ctx)

        def on_message(msg: Any, info: emailmw.MessageInfo) -> None:
            print(json.dumps({"body": msg.data, "redelivered": info.redelivered}), flush=True)

        node.create_subscription(
            emailmw.std_msgs.msg.String,
            TOPIC,
            on_message,
            emailmw.QoSProfile(history=emailmw.HistoryPolicy.KEEP_ALL),
        )
        print("ready", flush=True)
        emailmw.spin(node)


def peer_pub(config: str, count: int) -> None:
    with emailmw.Context(config) as ctx:
        pub = emailmw.Publisher(TOPIC, context=ctx, guarantee="spool")
        print(json.dumps({"gid": pub.gid.value}), flush=True)
        for i in range(count):
            pub.publish(f"n: {i}")
            print(json.dumps({"seq": i}), flush=True)
        print(json.dumps({"done": True}), flush=True)
        sys.stdin.read()  # stay (and let the outbox send) until stdin closes


class Peer:
    """A peer process of this script; its stdout lines collected as they come."""

    def __init__(self, *args: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--peer", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self.lines: list[str] = []
        self.cond = threading.Condition()
        assert self.process.stdout is not None
        out = self.process.stdout
        threading.Thread(target=self._read, args=(out,), daemon=True).start()

    def _read(self, out: Any) -> None:
        for line in out:
            with self.cond:
                self.lines.append(line.rstrip("\n"))
                self.cond.notify_all()

    def wait_for(self, predicate: Any, timeout: float) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: predicate(self.lines), timeout)

    def records(self) -> list[dict[str, Any]]:
        with self.cond:
            return [json.loads(line) for line in self.lines if line.startswith("{")]

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(10)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(10)


def write_config(path: Path, config: dict[str, Any]) -> str:
    path.write_text(yaml.safe_dump({"email": config}))
    return str(path)


def transport_extra(transport: str) -> dict[str, Any]:
    return {"polling-period": 20_000_000} if transport == "curl" else {}


# ----------------------------------------------------------------------------- scenarios


def crash_run(
    server: MailServer, transport: str, work: Path, count: int, rate: float, kills: int
) -> dict[str, Any]:
    sender, receiver = server.fresh_account(), server.fresh_account()
    config = write_config(
        work / f"crash-{transport}.yml",
        server.config(
            receiver,
            transport=transport,
            **{"state-file": str(work / f"crash-{transport}.json")},
            **transport_extra(transport),
        ),
    )
    incarnations = [Peer("sub", config)]
    assert incarnations[0].wait_for(lambda lines: "ready" in lines, 60), "subscriber not ready"
    duration = count / rate
    kill_at = sorted(random.uniform(0.1 * duration, 0.9 * duration) for _ in range(kills))
    with emailmw.Context({"email": server.config(sender, to=receiver)}) as ctx:
        node_pub = emailmw.Node("rel_talker", context=ctx).create_publisher(
            emailmw.std_msgs.msg.String, TOPIC
        )
        published: list[int] = []

        def stream() -> None:
            start = time.monotonic()
            for i in range(count):
                time.sleep(max(0.0, start + i / rate - time.monotonic()))
                node_pub.publish(emailmw.std_msgs.msg.String(data=str(i)))
                published.append(i)

        thread = threading.Thread(target=stream)
        start = time.monotonic()
        thread.start()
        for at in kill_at:
            time.sleep(max(0.0, start + at - time.monotonic()))
            incarnations[-1].kill()
            incarnations.append(Peer("sub", config))
            incarnations[-1].wait_for(lambda lines: "ready" in lines, 60)
        thread.join()

        def taken() -> list[int]:
            return [int(r["body"]) for p in incarnations for r in p.records()]

        deadline = time.monotonic() + 120
        while set(published) - set(taken()) and time.monotonic() < deadline:
            time.sleep(0.2)
    for peer in incarnations:
        peer.stop()
    records = [r for p in incarnations for r in p.records()]
    seen: set[int] = set()
    repeats = silent = 0
    for record in records:  # in processing order, incarnation by incarnation
        seq = int(record["body"])
        if seq in seen:
            repeats += 1
            silent += not record["redelivered"]
        seen.add(seq)
    return {
        "crash_published": len(published),
        "crash_lost": len(set(published) - seen),
        "crash_missing": sorted(set(published) - seen),
        "crash_redelivered": repeats,
        "crash_silent_duplicates": silent,
        "crash_kills": kills,
    }


def publisher_crash_run(
    server: MailServer, transport: str, work: Path, count: int
) -> dict[str, Any]:
    sender, receiver = server.fresh_account(), server.fresh_account()
    spool = work / f"spool-{transport}"
    shutil.rmtree(spool, ignore_errors=True)
    config = write_config(
        work / f"pub-{transport}.yml",
        server.config(sender, to=receiver, transport=transport, spool=str(spool)),
    )
    received: dict[int, int] = {}
    with emailmw.Context({"email": server.config(receiver)}) as ctx:
        sub = emailmw.Subscription(TOPIC, context=ctx)
        first = Peer("pub", config, str(count))
        kill_after = random.randint(count // 5, count * 3 // 5)
        first.wait_for(lambda lines: sum('"seq"' in x for x in lines) >= kill_after, 120)
        first.kill()
        records = first.records()
        gid = next(r["gid"] for r in records if "gid" in r)
        returned = {r["seq"] for r in records if "seq" in r}
        second = Peer("pub", config, "0")  # sends what the first left in the spool
        deadline = time.monotonic() + 120
        while not returned <= set(received) and time.monotonic() < deadline:
            got = emailmw.wait_for_message_with_info(sub, 1)
            if got is not None and got[1].publisher_gid.value == gid:
                seq = got[1].sequence_number
                assert seq is not None
                received[seq] = received.get(seq, 0) + 1
        second.stop()
    return {
        "publisher_crash_returned": len(returned),
        "publisher_crash_lost": len(returned - set(received)),
        "publisher_crash_duplicates": sum(n - 1 for n in received.values()),
        "publisher_crash_spool_left": len(list(spool.glob("*.msg"))),
    }


@contextlib.contextmanager
def pub_sub(
    server: MailServer, transport: str
) -> Iterator[tuple[emailmw.Subscription, emailmw.Publisher, str]]:
    """A subscription on ``transport`` and a (native) publisher to it, each in a context of
    its own, on fresh accounts; and the subscriber's address."""
    sender, receiver = server.fresh_account(), server.fresh_account()
    sub_config = server.config(receiver, transport=transport, **transport_extra(transport))
    with (
        emailmw.Context({"email": sub_config}) as sub_ctx,
        emailmw.Context({"email": server.config(sender, to=receiver)}) as pub_ctx,
    ):
        sub = emailmw.Subscription(TOPIC, context=sub_ctx)
        yield sub, emailmw.Publisher(TOPIC, context=pub_ctx), receiver


def restart_run(server: MailServer, transport: str, rate: float) -> dict[str, Any]:
    with pub_sub(server, transport) as (sub, pub, _):
        sent_at: dict[int, float] = {}
        received_at: dict[int, float] = {}
        streaming, listening = threading.Event(), threading.Event()

        def listen() -> None:
            while not listening.is_set():
                got = emailmw.wait_for_message_with_info(sub, 0.2)
                if got is not None and got[1].sequence_number is not None:
                    received_at.setdefault(got[1].sequence_number, time.monotonic())

        def stream() -> None:
            i = 0
            start = time.monotonic()
            while not streaming.is_set():
                time.sleep(max(0.0, start + i / rate - time.monotonic()))
                sent_at[i] = time.monotonic()
                pub.publish(str(i))  # the server guarantee: retried while Postfix is down
                i += 1

        listener = threading.Thread(target=listen)
        streamer = threading.Thread(target=stream)
        listener.start()
        streamer.start()
        time.sleep(3)
        server.stop_dovecot()
        time.sleep(2)
        server.start_dovecot()
        back = time.monotonic()
        time.sleep(5)
        server.stop_postfix()
        time.sleep(2)
        server.start_postfix()
        time.sleep(3)
        streaming.set()
        streamer.join()
        deadline = time.monotonic() + 90  # mail deferred while Dovecot was down: queue runs
        while set(sent_at) - set(received_at) and time.monotonic() < deadline:
            time.sleep(0.2)
        listening.set()
        listener.join()
    after = [received_at[s] for s, t in sent_at.items() if t >= back and s in received_at]
    return {
        "server_restart_published": len(sent_at),
        "server_restart_lost": len(set(sent_at) - set(received_at)),
        "resume_s": (min(after) - back) if after else None,
    }


def inject(server: MailServer, to: str, raw: bytes) -> None:
    context = ssl.create_default_context(cafile=str(server.ca_file))
    with smtplib.SMTP_SSL(server.host, server.smtps_port, context=context) as smtp:
        smtp.login(server.address("alice"), server.password)
        smtp.sendmail(server.address("alice"), [to], raw)


def latency_run(server: MailServer, transport: str, poison: bool) -> dict[str, Any]:
    with pub_sub(server, transport) as (sub, pub, receiver):
        if poison:
            for raw in POISON:
                inject(server, receiver, raw)
        latencies: list[float] = []
        sent: dict[int, int] = {}

        def listen() -> None:
            deadline = time.monotonic() + 60
            while len(latencies) < 100 and time.monotonic() < deadline:
                got = emailmw.wait_for_message_with_info(sub, 1)
                if got is not None and got[1].sequence_number in sent:
                    latencies.append((time.time_ns() - sent[got[1].sequence_number]) / 1e6)

        thread = threading.Thread(target=listen)
        thread.start()
        start = time.monotonic()
        for i in range(100):
            time.sleep(max(0.0, start + i / 20 - time.monotonic()))
            sent[i] = time.time_ns()
            pub.publish(str(i))
        thread.join()
    return {
        "delivered": len(latencies),
        "p50_ms": statistics.median(latencies) if latencies else None,
        "p99_ms": pct(latencies, 99) if latencies else None,
    }


# ----------------------------------------------------------------------------- main


def run_transport(
    server: MailServer, transport: str, work: Path, args: argparse.Namespace
) -> dict[str, Any]:
    result: dict[str, Any] = {}
    print(f"[{transport}] crash: {args.kills} SIGKILLs in {args.messages} msgs", flush=True)
    result |= crash_run(server, transport, work, args.messages, args.rate, args.kills)
    print(f"[{transport}] publisher crash with the spool", flush=True)
    result |= publisher_crash_run(server, transport, work, args.messages)
    print(f"[{transport}] Dovecot and Postfix restarts mid-stream", flush=True)
    result |= restart_run(server, transport, args.rate)
    print(f"[{transport}] poison, then 100 legitimate messages", flush=True)
    baseline = latency_run(server, transport, poison=False)
    poisoned = latency_run(server, transport, poison=True)
    result |= {
        "baseline_p99_ms": baseline["p99_ms"],
        "baseline_p50_ms": baseline["p50_ms"],
        "poison_delivered": poisoned["delivered"],
        "poison_p99_ms": poisoned["p99_ms"],
        "poison_p50_ms": poisoned["p50_ms"],
    }
    return result


def fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--peer":
        role, config = sys.argv[2], sys.argv[3]
        if role == "sub":
            peer_sub(config)
        else:
            peer_pub(config, int(sys.argv[4]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=50.0)
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--transports", default="native,curl")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    random.seed(args.seed)
    state = Path("/tmp/emailmw-benchrel")
    work = state / "work"
    server = MailServer(state_dir=state)
    server.start(fresh=True)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    results: dict[str, Any] = {}
    started = time.monotonic()
    try:
        for transport in args.transports.split(","):
            results[transport] = run_transport(server, transport, work, args)
    finally:
        server.stop()
    rows = [
        ("crash_lost", "0"),
        ("crash_redelivered", "-"),
        ("crash_silent_duplicates", "0"),
        ("publisher_crash_lost", "0"),
        ("publisher_crash_duplicates", "-"),
        ("server_restart_lost", "0"),
        ("resume_s", "<= 2"),
        ("poison_delivered", "100"),
        ("poison_p99_ms", "<= 2x baseline"),
        ("baseline_p99_ms", "-"),
    ]
    names = list(results)
    print()
    print(f"| figure | {' | '.join(names)} | target |")
    print(f"|---|{'---|' * len(names)}---|")
    for key, target in rows:
        values = " | ".join(fmt(results[name].get(key)) for name in names)
        print(f"| {key} | {values} | {target} |")
    met = all(
        r["crash_lost"] == 0
        and r["crash_silent_duplicates"] == 0
        and r["publisher_crash_lost"] == 0
        and r["server_restart_lost"] == 0
        and r["resume_s"] is not None
        and r["resume_s"] <= 2.0
        and r["poison_delivered"] == 100
        and r["poison_p99_ms"] <= 2 * r["baseline_p99_ms"]
        for r in results.values()
    )
    print(f"\ntargets {'met' if met else 'NOT met'}; {time.monotonic() - started:.0f} s")
    if args.json:
        payload = {
            "machine": {
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
                "platform": platform.platform(),
            },
            "settings": {"messages": args.messages, "rate": args.rate, "kills": args.kills},
            "results": results,
            "targets_met": met,
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(payload, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
