"""Email benchmark against the local Postfix + Dovecot: emailmw versus the server's floor.

    python bench/email_latency.py [--messages 200] [--rate 5] [--burst 1000] [--json FILE]

Starts its own server (state /tmp/emailmw-benchmail, on ports free at start; needs root).
Everything goes over implicit TLS (smtps/imaps) with the certificate verified, for emailmw
and floor alike. All in one run:

* latency publish -> received in the subscriber, ``--messages`` at ``--rate`` msg/s, for the
  native transport and for curl (polling-period 20 ms): p50, p99;
* the floor, same pacing: stdlib smtplib on one open connection, and a raw IMAP reader that
  sends NOOP as fast as it can and FETCHes on EXISTS;
* throughput: ``--burst`` messages published as fast as possible, time until all received,
  native (with the default ``server`` guarantee, and with ``memory``) and floor;
* server CPU (Postfix + Dovecot processes) per delivered message during the native paced run;
* where the native paced run's time goes (``native_stage_ms``, medians): ``submit``
  (publish() until the server accepted the email), ``delivery`` (until Dovecot stored it:
  the microseconds of its Maildir file name), ``receive`` (until the subscriber had it:
  the receiver's wake-up, fetch, parse and hand-out);
* receiver CPU while nothing arrives for 10 s (native; includes its switch from NOOP
  polling to IDLE).

* the ROS layer (``_ros_layer.py``), two accounts: a typed service call between nodes, an
  action goal -> result, setting a parameter through the parameter service.

Targets (issue #3): native p50 <= 1.3x floor p50; native throughput >= 0.8x floor; idle
CPU <= 2 %; server CPU <= 15 ms per message; (issue #37) action round trip <= 3x a typed
service call's p50. Prints a table, writes JSON, exits 0.
"""

from __future__ import annotations

import argparse
import json
import re
import smtplib
import socket
import ssl
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path

import psutil
from _ros_layer import ros_round_trips

import emailmw
from emailmw.testing.mailserver import MailServer

SERVER_EXES = ("/usr/lib/postfix/", "/usr/lib/dovecot/", "/usr/sbin/dovecot")


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def server_cpu_seconds() -> float:
    total = 0.0
    for proc in psutil.process_iter(["exe", "cpu_times"]):
        exe = proc.info.get("exe") or ""
        times = proc.info.get("cpu_times")
        if times is not None and exe.startswith(SERVER_EXES):
            total += times.user + times.system
    return total


# ----------------------------------------------------------------------------- emailmw


def emailmw_run(
    server: MailServer,
    transport: str,
    count: int,
    rate: float | None,
    measure_idle: bool = False,
    poll_interval: float | None = None,
    guarantee: str = "server",
) -> dict[str, float]:
    sender, receiver = server.fresh_account(), server.fresh_account()
    extra: dict[str, object] = {"polling-period": 20_000_000} if transport == "curl" else {}
    if poll_interval is not None and transport == "native":
        extra["poll"] = {"interval": poll_interval}
    sub_ctx = emailmw.Context({"email": server.config(receiver, transport=transport, **extra)})
    pub_ctx = emailmw.Context(
        {
            "email": server.config(
                sender, to=receiver, transport=transport, **{"send-guarantee": guarantee}
            )
        }
    )
    sub = emailmw.Subscription("/bench", context=sub_ctx)
    pub = emailmw.Publisher("/bench", context=pub_ctx)
    sent: dict[int, int] = {}
    accepted: dict[int, int] = {}
    received_at: dict[int, int] = {}
    latencies: list[float] = []
    done = threading.Event()

    def listen() -> None:
        for _ in range(count):
            got = emailmw.wait_for_message_with_info(sub, 120)
            if got is None:
                break
            now = time.time_ns()
            seq = got[1].sequence_number
            assert seq is not None
            received_at[seq] = now
            latencies.append((now - sent[seq]) / 1e6)
        done.set()

    thread = threading.Thread(target=listen)
    thread.start()
    cpu0 = server_cpu_seconds()
    start = time.monotonic()
    for i in range(count):
        if rate:
            time.sleep(max(0.0, start + i / rate - time.monotonic()))
        sent[i] = time.time_ns()
        pub.publish(f"n: {i}")
        accepted[i] = time.time_ns()
    done.wait(600)
    elapsed = time.monotonic() - start
    server_cpu = server_cpu_seconds() - cpu0
    thread.join()
    stages = _stages(server, receiver, sent, accepted, received_at)
    result = {
        **stages,
        "received": len(latencies),
        "p50_ms": statistics.median(latencies),
        "p99_ms": pct(latencies, 99),
        "msgs_per_s": len(latencies) / elapsed,
        "server_cpu_ms_per_msg": 1000 * server_cpu / max(1, len(latencies)),
    }
    pub_ctx.shutdown()
    if measure_idle:
        cpu0, wall0 = time.process_time(), time.monotonic()
        time.sleep(10.0)  # nothing arrives: the receiver polls briefly, then IDLEs
        result["idle_cpu_percent"] = 100 * (time.process_time() - cpu0) / (time.monotonic() - wall0)
    sub_ctx.shutdown()
    return result


def _stages(
    server: MailServer,
    receiver: str,
    sent: dict[int, int],
    accepted: dict[int, int],
    received_at: dict[int, int],
) -> dict[str, float]:
    """Where a message's time goes, medians in ms: ``submit`` (publish() until the server
    accepted it: the ``server`` guarantee), ``delivery`` (accepted until Dovecot stored it:
    its Maildir file name's microseconds), ``receive`` (stored until the subscriber had it:
    the receiver's wake-up, fetch, parse and hand-out)."""
    stored: dict[int, int] = {}
    for path in server.maildir(receiver).glob("*/*"):
        found = re.match(r"(\d+)\.M(\d+)P", path.name)
        seq = re.search(rb"Publisher-Sequence-Number: (\d+)", path.read_bytes())
        if found and seq:
            stored[int(seq.group(1))] = int(found.group(1)) * 10**9 + int(found.group(2)) * 1000
    both = [s for s in sent if s in stored and s in received_at]
    if not both:
        return {}
    return {
        "stage_submit_ms": statistics.median((accepted[s] - sent[s]) / 1e6 for s in both),
        "stage_delivery_ms": statistics.median((stored[s] - accepted[s]) / 1e6 for s in both),
        "stage_receive_ms": statistics.median((received_at[s] - stored[s]) / 1e6 for s in both),
    }


# ----------------------------------------------------------------------------- floor


class RawImapReader:
    """The floor: NOOP as fast as possible, FETCH on EXISTS; about 60 lines of stdlib."""

    def __init__(self, server: MailServer, address: str) -> None:
        context = ssl.create_default_context(cafile=str(server.ca_file))
        raw = socket.create_connection((server.host, server.imaps_port))
        self.sock = context.wrap_socket(raw, server_hostname=server.host)
        self.buf = b""
        self.tag = 0
        self.readline()
        self.command(f'LOGIN "{address}" "{server.password}"')
        self.command("SELECT INBOX")
        self.next_uid = 1
        self.pending = False

    def readline(self) -> bytes:
        while b"\r\n" not in self.buf:
            self.buf += self.sock.recv(65536)
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line + b"\r\n"

    def read_exact(self, size: int) -> bytes:
        while len(self.buf) < size:
            self.buf += self.sock.recv(65536)
        data, self.buf = self.buf[:size], self.buf[size:]
        return data

    def command(self, text: str) -> list[bytes]:
        self.tag += 1
        tag = f"a{self.tag}".encode()
        self.sock.sendall(tag + b" " + text.encode() + b"\r\n")
        out = []
        while True:
            line = self.readline()
            literal = re.search(rb"\{(\d+)\}\r\n$", line)
            if literal:
                line += self.read_exact(int(literal.group(1)))
            if line.startswith(tag + b" "):
                return out
            out.append(line)

    def poll(self) -> list[bytes]:
        news = self.pending or any(b"EXISTS" in line for line in self.command("NOOP"))
        if not news:
            return []
        messages = []
        # an EXISTS may come with the FETCH answer itself: fetch again on the next poll
        self.pending = False
        for line in self.command(f"UID FETCH {self.next_uid}:* (UID BODY.PEEK[])"):
            if line.startswith(b"* ") and line.rstrip().endswith(b"EXISTS"):
                self.pending = True
            uid = re.search(rb"UID (\d+)", line)
            if uid and int(uid.group(1)) >= self.next_uid:
                self.next_uid = int(uid.group(1)) + 1
                messages.append(line)
        return messages


def floor_run(server: MailServer, count: int, rate: float | None) -> dict[str, float]:
    sender, receiver = server.fresh_account(), server.fresh_account()
    reader = RawImapReader(server, receiver)
    smtp = smtplib.SMTP_SSL(
        server.host,
        server.smtps_port,
        context=ssl.create_default_context(cafile=str(server.ca_file)),
    )
    smtp.login(sender, server.password)
    run = uuid.uuid4().hex[:8]
    sent: dict[int, int] = {}
    latencies: list[float] = []
    done = threading.Event()

    def listen() -> None:
        deadline = time.monotonic() + 600
        while len(latencies) < count and time.monotonic() < deadline:
            for message in reader.poll():
                now = time.time_ns()
                found = re.search(rb"Subject: floor " + run.encode() + rb" (\d+)", message)
                if found:
                    latencies.append((now - sent[int(found.group(1))]) / 1e6)
        done.set()

    thread = threading.Thread(target=listen)
    thread.start()
    start = time.monotonic()
    for i in range(count):
        if rate:
            time.sleep(max(0.0, start + i / rate - time.monotonic()))
        sent[i] = time.time_ns()
        smtp.sendmail(
            sender,
            [receiver],
            f"From: {sender}\r\nTo: {receiver}\r\nSubject: floor {run} {i}\r\n\r\nn: {i}\r\n",
        )
    done.wait(600)
    elapsed = time.monotonic() - start
    thread.join()
    smtp.quit()
    return {
        "received": len(latencies),
        "p50_ms": statistics.median(latencies),
        "p99_ms": pct(latencies, 99),
        "msgs_per_s": len(latencies) / elapsed,
    }


def ros_email(server: MailServer, calls: int) -> dict[str, float]:
    """The ROS layer's round trips over the server: the serving nodes on one account, the
    calling node on another, each context a process's (as two programs would be)."""
    serve_at, call_at = server.fresh_account(), server.fresh_account()
    # each sends to both mailboxes: the graph, requests and responses reach everyone
    to = [serve_at, call_at]
    with (
        emailmw.Context({"email": server.config(serve_at, to=to)}) as server_ctx,
        emailmw.Context({"email": server.config(call_at, to=to)}) as client_ctx,
    ):
        return ros_round_trips(server_ctx, client_ctx, calls, 1e6, warmup=3)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=200)
    parser.add_argument("--rate", type=float, default=5.0)
    parser.add_argument("--burst", type=int, default=1000)
    parser.add_argument(
        "--poll-interval",
        type=float,
        default=None,
        help="native poll.interval (default: emailmw's default)",
    )
    parser.add_argument("--ros-calls", type=int, default=40, help="typed calls, goals")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    interval = args.poll_interval or emailmw.Options().poll.interval

    server = MailServer(state_dir=Path("/tmp/emailmw-benchmail"), pool_size=20)
    server.start(fresh=True)
    try:
        print(f"paced runs: {args.messages} messages at {args.rate} msg/s ...", flush=True)
        floor = floor_run(server, args.messages, args.rate)
        native = emailmw_run(
            server, "native", args.messages, args.rate, measure_idle=True, poll_interval=interval
        )
        curl = emailmw_run(server, "curl", args.messages, args.rate)
        print(f"bursts: {args.burst} messages as fast as possible ...", flush=True)
        floor_burst = floor_run(server, args.burst, None)
        native_burst = emailmw_run(server, "native", args.burst, None, poll_interval=interval)
        memory_burst = emailmw_run(
            server, "native", args.burst, None, poll_interval=interval, guarantee="memory"
        )
        print(f"ROS layer: {args.ros_calls} calls of each kind ...", flush=True)
        ros = ros_email(server, args.ros_calls)
    finally:
        server.stop()

    results = {
        "messages": args.messages,
        "rate_msgs_per_s": args.rate,
        "native_poll_interval_s": interval,
        "native_p50_ms": round(native["p50_ms"], 2),
        "native_stage_ms": {
            k.removeprefix("stage_").removesuffix("_ms"): round(v, 2)
            for k, v in native.items()
            if k.startswith("stage_")
        },
        "native_p99_ms": round(native["p99_ms"], 2),
        "curl_p50_ms": round(curl["p50_ms"], 2),
        "curl_p99_ms": round(curl["p99_ms"], 2),
        "floor_p50_ms": round(floor["p50_ms"], 2),
        "floor_p99_ms": round(floor["p99_ms"], 2),
        "native_throughput_msgs_per_s": round(native_burst["msgs_per_s"], 1),
        "native_memory_throughput_msgs_per_s": round(memory_burst["msgs_per_s"], 1),
        "floor_throughput_msgs_per_s": round(floor_burst["msgs_per_s"], 1),
        "server_cpu_ms_per_msg": round(native["server_cpu_ms_per_msg"], 2),
        "idle_cpu_percent": round(native["idle_cpu_percent"], 3),
        "node_service_p50_ms": round(ros["node_service"], 2),
        "action_round_trip_ms": round(ros["action"], 2),
        "parameter_set_remote_ms": round(ros["parameter_set_remote"], 2),
        "received": {
            "native": native["received"],
            "curl": curl["received"],
            "floor": floor["received"],
            "native_burst": native_burst["received"],
            "native_memory_burst": memory_burst["received"],
            "floor_burst": floor_burst["received"],
        },
    }
    r = results
    tput_ratio = r["native_throughput_msgs_per_s"] / r["floor_throughput_msgs_per_s"]
    rows = [
        (
            "native latency p50",
            f"{r['native_p50_ms']} ms",
            f"<= 1.3x floor ({r['native_p50_ms'] / r['floor_p50_ms']:.2f}x)",
            r["native_p50_ms"] <= 1.3 * r["floor_p50_ms"],
        ),
        ("native latency p99", f"{r['native_p99_ms']} ms", "-", True),
        (
            "native stages p50 (ms)",
            " / ".join(f"{k} {v}" for k, v in r["native_stage_ms"].items()),
            "submit / delivery / receive",
            True,
        ),
        ("curl latency p50 / p99", f"{r['curl_p50_ms']} / {r['curl_p99_ms']} ms", "-", True),
        ("floor latency p50 / p99", f"{r['floor_p50_ms']} / {r['floor_p99_ms']} ms", "-", True),
        (
            "native throughput",
            f"{r['native_throughput_msgs_per_s']} msg/s",
            f">= 0.8x floor ({tput_ratio:.2f}x)",
            r["native_throughput_msgs_per_s"] >= 0.8 * r["floor_throughput_msgs_per_s"],
        ),
        (
            "native throughput, memory",
            f"{r['native_memory_throughput_msgs_per_s']} msg/s",
            "-",
            True,
        ),
        ("floor throughput", f"{r['floor_throughput_msgs_per_s']} msg/s", "-", True),
        (
            "server CPU per message",
            f"{r['server_cpu_ms_per_msg']} ms",
            "<= 15 ms",
            r["server_cpu_ms_per_msg"] <= 15,
        ),
        ("typed service call p50", f"{r['node_service_p50_ms']} ms", "-", True),
        (
            "action goal -> result p50",
            f"{r['action_round_trip_ms']} ms",
            f"<= 3x service ({r['action_round_trip_ms'] / r['node_service_p50_ms']:.2f}x)",
            r["action_round_trip_ms"] <= 3 * r["node_service_p50_ms"],
        ),
        ("parameter set (service) p50", f"{r['parameter_set_remote_ms']} ms", "-", True),
        (
            "receiver CPU, 10 s idle",
            f"{r['idle_cpu_percent']} %",
            "<= 2 %",
            r["idle_cpu_percent"] <= 2,
        ),
    ]
    print(f"{'figure':<28}{'value':>24}  {'target':<28}ok")
    for name, value, target, ok in rows:
        print(f"{name:<28}{value:>24}  {target:<28}{'yes' if ok else 'NO'}")
    print(f"received: {results['received']}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
