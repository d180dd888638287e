"""IMAP sessions each kind of emailmw process holds on its account, as the server counts
them (``doveadm who``), and whether the mix of #58 runs on one account at Dovecot's
default limit (10 sessions per user and address).

    python bench/connections.py [--json bench/results/connections.json]

Starts its own Postfix + Dovecot (state /tmp/emailmw-benchconn, on free ports; needs
root), with Dovecot's default ``mail_max_userip_connections`` (10). Each kind runs as a
process of its own on a fresh account; ``held`` is the most sessions the server counted
for the account over 3 s once the process settled (10 s after it started: past the 5 s
after which a context that receives nothing gives its session back), ``peak`` the most
from its start. Kinds: ``publisher`` (a context and a publisher, no node), ``talker``
(a ROS node with a publisher on a timer, spinning: a node receives for its parameter
services), ``subscriber`` (a node with a subscription), ``stateless_member`` and
``stateful_member`` (a node whose subscription is in a delivery group), ``gateway``
(``emailmw gateway`` with one of its two accounts here), ``daemon`` (``emailmw daemon``),
``cli_via_daemon`` (``emailmw topic list`` while the daemon runs: the sessions it adds)
and ``cli_alone`` (the same with ``EMAILMW_NO_DAEMON=1``).

The mix, on one account: three stateless members (of ``/mix``), two subscribers (of
``/news``), a publisher of both, a gateway, the daemon and three command-line calls
through it, started in that order. Keys ``mix_sessions`` (the most the server counted),
``mix_received`` (messages each subscriber got, of ``mix_published`` on each topic),
``mix_processed`` (of the members, together), ``mix_members_working`` (members that
processed any), ``mix_cli_ok`` (calls that exited 0) and ``mix_waiting`` (processes that
said they wait for a connection: made all the same, they start once one is free). Prints
a table, writes JSON, exits 0.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

import emailmw
from emailmw.testing.mailserver import MailServer

ROOT = Path(__file__).resolve().parent.parent
KINDS = ("publisher", "talker", "subscriber", "stateless_member", "stateful_member",
         "gateway", "daemon", "cli_via_daemon", "cli_alone")  # fmt: skip
SETTLE_S = 10.0


# ----------------------------------------------------------------------------- roles


def role(kind: str, config: str) -> None:
    """One process of ``kind`` (run by the bench as ``--role KIND --config FILE``):
    prints ``got BODY`` for each message it receives, until SIGTERM."""
    from emailmw.std_msgs.msg import String

    with emailmw.Context(config) as context:
        if kind == "publisher":
            # (the group's topic and the subscribers', a std_msgs/String's body each)
            pubs = [emailmw.Publisher(topic, context=context) for topic in ("/mix", "/news")]
            i = 0
            while context.ok():
                for pub in pubs:
                    pub.publish(f"data: m{i}")
                print(f"sent m{i}", flush=True)
                i += 1
                time.sleep(0.5)
        node = emailmw.Node(f"bench_{kind}_{os.getpid()}", context=context)
        if kind == "talker":
            talk = node.create_publisher(String, "/chatter", 10)
            node.create_timer(0.5, lambda: talk.publish(String(data="hi")))
        else:
            group: dict[str, Any] = {}
            topic = "/news"
            if kind.endswith("_member"):
                group = {"mode": kind.removesuffix("_member"), "group": "crew"}
                topic = "/mix"

            def got(message: String) -> None:
                print(f"got {message.data}", flush=True)

            node.create_subscription(String, topic, got, 10, **group)
        executor = emailmw.executors.SingleThreadedExecutor(context=context)
        executor.add_node(node)
        executor.spin()


# ----------------------------------------------------------------------------- the bench


def watch(server: MailServer, address: str, seconds: float) -> int:
    """The most sessions counted for ``address`` over ``seconds``."""
    most, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        most = max(most, server.sessions(address))
        time.sleep(0.1)
    return most


def write(path: Path, data: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data))
    path.chmod(0o600)
    return path


def gateway_file(server: MailServer, work: Path, account: str) -> Path:
    """A gateway between ``account`` (hub gwa) and a fresh account (hub gwb)."""
    other, far = server.fresh_account(), server.fresh_account()
    return write(work / "gateway.yml", {
        "accounts": {"a": server.config(account, routing={"hub": "gwa"}),
                     "b": server.config(other, routing={"hub": "gwb"})},
        "routes": {"lab": {"to": account, "via": "a"}, "far": {"to": far, "via": "b"}},
    })  # fmt: skip


def command(config: Path, *args: str) -> list[str]:
    """``python -m emailmw --config CONFIG ARGS...``"""
    return [sys.executable, "-m", "emailmw", "--config", str(config), *args]


def command_env(*, alone: bool = False) -> dict[str, str]:
    """A command's environment: through the daemon, or without it (``alone``)."""
    env = {k: v for k, v in os.environ.items() if k != "EMAILMW_NO_DAEMON"}
    if alone:
        env["EMAILMW_NO_DAEMON"] = "1"
    return env


class Run:
    """The processes of one measurement, ended (SIGTERM, then SIGKILL) at exit."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.procs: list[tuple[subprocess.Popen[bytes], Path]] = []

    def start(self, *args: str, env: dict[str, str] | None = None) -> Path:
        out = self.work / f"p{len(self.procs)}.out"
        with out.open("wb") as stream:
            proc = subprocess.Popen(args, cwd=ROOT, stdout=stream, stderr=subprocess.STDOUT,
                                    env={**os.environ, **(env or {})})  # fmt: skip
        self.procs.append((proc, out))
        return out

    def role(self, kind: str, config: Path) -> Path:
        level = os.environ.get("BENCH_ROLE_LOG", "info")  # (the roles' log level)
        return self.start(sys.executable, __file__, "--role", kind, "--config", str(config),
                          env={"EMAILMW_LOG_LEVEL": level})  # fmt: skip

    def cli(self, config: Path, *args: str) -> int:
        done = subprocess.run(command(config, *args), cwd=ROOT, capture_output=True,
                              timeout=180, env=command_env(), check=False)  # fmt: skip
        return done.returncode

    def end(self) -> None:
        for proc, _ in self.procs:
            proc.terminate()
        for proc, _ in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@contextlib.contextmanager
def run(work: Path) -> Iterator[Run]:
    work.mkdir(parents=True, exist_ok=True)
    done = Run(work)
    try:
        yield done
    finally:
        done.end()


def measure(server: MailServer, kind: str, work: Path) -> dict[str, int]:
    account = server.fresh_account()
    config = write(work / "email.yml", {"email": server.config(account, to=account)})
    with run(work) as procs:
        if kind == "gateway":
            gateway = gateway_file(server, work, account)
            procs.start(sys.executable, "-m", "emailmw", "gateway", str(gateway))
        elif kind in ("daemon", "cli_via_daemon"):
            assert procs.cli(config, "daemon", "start") == 0
        elif kind != "cli_alone":
            procs.role(kind, config)
        if kind.startswith("cli"):
            time.sleep(SETTLE_S)
            base = watch(server, account, 1.0)
            peak = base
            # (the command runs while the server is watched)
            proc = subprocess.Popen(command(config, "topic", "list"), cwd=ROOT,
                                    env=command_env(alone=kind == "cli_alone"),
                                    stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)  # fmt: skip
            while proc.poll() is None:
                peak = max(peak, server.sessions(account))
                time.sleep(0.05)
            if kind == "cli_via_daemon":
                procs.cli(config, "daemon", "stop")
            return {"held": peak - base, "peak": peak - base, "exit": proc.returncode}
        peak = watch(server, account, SETTLE_S)
        held = watch(server, account, 3.0)
        if kind == "daemon":
            procs.cli(config, "daemon", "stop")
        return {"held": held, "peak": max(peak, held)}


def mix(server: MailServer, work: Path) -> dict[str, Any]:
    account = server.fresh_account()
    config = write(work / "email.yml", {"email": server.config(account, to=account)})
    gateway = gateway_file(server, work, account)
    with run(work) as procs:
        members = [procs.role("stateless_member", config) for _ in range(3)]
        subscribers = [procs.role("subscriber", config) for _ in range(2)]
        procs.start(sys.executable, "-m", "emailmw", "gateway", str(gateway))
        cli_ok = int(procs.cli(config, "daemon", "start") == 0)
        time.sleep(SETTLE_S)
        publisher = procs.role("publisher", config)
        most = 0
        for _ in range(3):
            most = max(most, server.sessions(account))
            cli_ok += int(procs.cli(config, "topic", "list") == 0)
        end = time.monotonic() + 40
        while time.monotonic() < end:
            most = max(most, server.sessions(account))
            time.sleep(0.2)
        lines = publisher.read_text().splitlines()
        published = sum(1 for line in lines if line.startswith("sent "))
        procs.procs[-1][0].terminate()  # (the publisher first: what it sent is counted)
        time.sleep(20)  # what was sent reaches the others
        procs.cli(config, "daemon", "stop")
    outs = [path.read_text(errors="replace") for path in (*members, *subscribers)]
    got = [sum(1 for line in out.splitlines() if line.startswith("got ")) for out in outs]
    said = [path.read_text(errors="replace") for _, path in procs.procs]
    waiting = sum(1 for out in said if "once a connection is free" in out)
    return {
        "mix_sessions": most,
        "mix_published": published,
        "mix_received": got[3:],
        "mix_processed": sum(got[:3]),
        "mix_members_working": sum(1 for n in got[:3] if n > 0),
        "mix_cli_ok": cli_ok,
        "mix_cli_calls": 4,
        "mix_waiting": waiting,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, default=Path("bench/results/connections.json"))
    parser.add_argument("--role", choices=KINDS, help=argparse.SUPPRESS)
    parser.add_argument("--config", help=argparse.SUPPRESS)
    parser.add_argument("--kinds", nargs="*", default=list(KINDS))
    parser.add_argument("--no-mix", action="store_true")
    args = parser.parse_args()
    if args.role is not None:
        with contextlib.suppress(KeyboardInterrupt):
            role(args.role, args.config)
        return 0
    state = Path("/tmp/emailmw-benchconn")
    work = Path(tempfile.mkdtemp(prefix="emailmw-benchconn-"))  # (each process's output)
    server = MailServer(state_dir=state / "server", max_userip_connections=10)
    server.start(fresh=True)
    result: dict[str, Any] = {"commit": subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
        check=False).stdout.strip(), "dovecot_limit": 10}  # fmt: skip
    try:
        for kind in args.kinds:
            found = measure(server, kind, work / kind)
            result[kind] = found
            print(f"{kind:18} held {found['held']:2}  peak {found['peak']:2}", flush=True)
        if not args.no_mix:
            result.update(mix(server, work / "mix"))
            print(json.dumps({k: v for k, v in result.items() if k.startswith("mix")}))
    finally:
        server.stop()
        shutil.rmtree(state, ignore_errors=True)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.json}; each process's output under {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
