"""Delivery-mode benchmark: failover, redelivery and the stateless speed-up, over the local
mail server, default group settings, members in their own processes.

    python bench/delivery_modes.py [--trials 10] [--messages 300] [--json FILE]

All in one run, on this machine (native transport):

* ``failover_p50_s`` / ``failover_max_s``: two stateful members, messages published at
  20/s; SIGKILL of the active member -> the first message the standby processes
  (``--trials`` trials, a fresh account each);
* ``redelivery_p50_s``: a stateless member holds a claim (it takes nothing); two more
  members run; SIGKILL of the holder -> that message processed by another member;
* ``stateless_speedup_3``: ``--messages`` messages waiting in the mailbox, each taking
  20 ms to process: messages/s with three members over one (from the moment every member
  is in the group to the last message processed);
* ``lost``: messages published in all of the above and never processed; ``duplicates``:
  messages processed twice without being flagged (``delivery_count`` 1 both times);
  ``redeliveries``: flagged repeats (documented: a member killed after processing, before
  acknowledging).

Targets (issue #26): failover and redelivery p50 <= 3 s, stateless_speedup_3 >= 2.5,
lost = 0. Starts its own server (state /tmp/emailmw-benchmodes, ports free at start; needs
root). Prints a table, writes JSON (``--json``), exits 0.

``python bench/delivery_modes.py --member CONFIG MODE [--hold] [--work S]`` is one member
(used by the benchmark itself): one JSON line per processed message on stdout.
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
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

import emailmw
from emailmw._config import load_options
from emailmw._transport.group_imap import ImapGroupStore
from emailmw.testing.mailserver import MailServer

TOPIC = "/jobs"
GROUP = "bench"


def member(config: str, mode: str, hold: bool, work: float, start: str | None) -> None:
    """One group member: takes each message, works ``work`` seconds, prints, acknowledges
    (``hold``: takes nothing; ``start``: nothing before that file exists)."""
    with emailmw.Context(config) as ctx:
        sub = emailmw.Subscription(TOPIC, context=ctx, mode=mode, group=GROUP)
        print(json.dumps({"ready": True}), flush=True)
        while start is not None and not Path(start).exists():
            time.sleep(0.005)
        while True:
            if hold or not sub.has_message():
                time.sleep(0.005)
                continue
            taken = sub._take()
            if taken is None:
                continue
            _body, info, ticket = taken
            if work:
                time.sleep(work)
            line = {"seq": info.sequence_number, "count": info.delivery_count,
                    "member": sub.member, "t": time.time()}  # fmt: skip
            print(json.dumps(line), flush=True)
            ticket.release()


class Member:
    """A member process; its processed lines collected with the time they were seen."""

    def __init__(self, config: Path, mode: str, *options: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--member", str(config), mode, *options],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        self.lines: list[dict[str, Any]] = []
        self.ready = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        if not self.ready.wait(60):
            raise SystemExit("a member did not start")

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            line = json.loads(raw)
            if line.get("ready"):
                self.ready.set()
            else:
                line["seen"] = time.monotonic()
                self.lines.append(line)

    def kill(self) -> float:
        self.process.kill()
        killed = time.monotonic()
        self.process.wait(10)
        return killed

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


def wait(condition: Any, timeout: float = 120.0) -> None:
    end = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > end:
            raise SystemExit("timed out")
        time.sleep(0.01)


class Setup:
    """A fresh group account, its member config and a publisher."""

    def __init__(self, server: MailServer, work: Path) -> None:
        self.account = server.fresh_account()
        self.config = work / f"{self.account}.yml"
        self.config.write_text(yaml.safe_dump({"email": server.config(self.account)}))
        self.ctx = emailmw.Context(
            {"email": server.config(server.fresh_account(), to=self.account)}
        )
        self.publisher = emailmw.Publisher(TOPIC, context=self.ctx)
        self.published = 0
        self.members: list[Member] = []

    def publish(self, count: int, rate: float | None = None) -> None:
        start = time.monotonic()
        for i in range(count):
            if rate:
                time.sleep(max(0.0, start + i / rate - time.monotonic()))
            self.publisher.publish(f"job {self.published}")
            self.published += 1

    def member(self, mode: str, *options: str) -> Member:
        found = Member(self.config, mode, *options)
        self.members.append(found)
        return found

    def members_in_store(self) -> int:
        store = ImapGroupStore(load_options(self.config), GROUP)
        try:
            return len(store.members())
        finally:
            store.close()

    def held_by_records(self) -> int:
        store = ImapGroupStore(load_options(self.config), GROUP)
        try:
            return sum(len(store.claimed(r.member)) for r in store.members())
        finally:
            store.close()

    def tally(self) -> tuple[int, int, int]:
        """(lost, silent duplicates, flagged redeliveries) once everything is processed."""
        lines = [line for m in self.members for line in m.lines]
        seen = Counter(line["seq"] for line in lines)
        lost = self.published - len(seen)
        silent = flagged = 0
        for seq, n in seen.items():
            if n > 1:
                counts = [line["count"] for line in lines if line["seq"] == seq]
                flagged += sum(c > 1 for c in counts)
                silent += max(0, counts.count(1) - 1)
        return lost, silent, flagged

    def close(self) -> None:
        for found in self.members:
            found.stop()
        self.ctx.shutdown()


def failover_trial(server: MailServer, work: Path) -> tuple[float, tuple[int, int, int]]:
    setup = Setup(server, work)
    try:
        active = setup.member("stateful")
        wait(lambda: setup.members_in_store() == 1)
        standby = setup.member("stateful")
        feeder = threading.Thread(target=setup.publish, args=(60, 20.0))
        feeder.start()
        wait(lambda: len(active.lines) >= 10)
        killed = active.kill()
        wait(lambda: len(standby.lines) >= 1)
        took = standby.lines[0]["seen"] - killed
        feeder.join()
        wait(lambda: len({line["seq"] for m in setup.members for line in m.lines}) == 60)
        return took, setup.tally()
    finally:
        setup.close()


def redelivery_trial(server: MailServer, work: Path) -> tuple[float, tuple[int, int, int]]:
    setup = Setup(server, work)
    try:
        holder = setup.member("stateless", "--hold")
        wait(lambda: setup.members_in_store() == 1)
        setup.publish(1)
        wait(lambda: setup.held_by_records() == 1)  # the holder has claimed it
        others = [setup.member("stateless") for _ in range(2)]
        wait(lambda: setup.members_in_store() == 3)
        killed = holder.kill()
        wait(lambda: any(m.lines for m in others))
        took = min(m.lines[0]["seen"] for m in others if m.lines) - killed
        return took, setup.tally()
    finally:
        setup.close()


def throughput(
    server: MailServer, work: Path, members: int, count: int
) -> tuple[float, tuple[int, int, int]]:
    setup = Setup(server, work)
    go = work / f"go-{setup.account}"
    try:
        setup.publish(count)
        for _ in range(members):
            setup.member("stateless", "--work", "0.02", "--start", str(go))
        wait(lambda: setup.members_in_store() == members)
        began = time.time()
        go.touch()  # every member is in: from now on they process
        wait(lambda: len({line["seq"] for m in setup.members for line in m.lines}) == count, 300)
        lines = [line for m in setup.members for line in m.lines]
        return count / (max(line["t"] for line in lines) - began), setup.tally()
    finally:
        setup.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--messages", type=int, default=300)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--member", nargs=2, metavar=("CONFIG", "MODE"))
    parser.add_argument("--hold", action="store_true")
    parser.add_argument("--work", type=float, default=0.0)
    parser.add_argument("--start", help="(a member) wait for this file before taking")
    args = parser.parse_args()
    if args.member:
        member(args.member[0], args.member[1], args.hold, args.work, args.start)
        return 0

    server = MailServer(state_dir=Path("/tmp/emailmw-benchmodes"), pool_size=120)
    server.start(fresh=True)
    work = Path(tempfile.mkdtemp(prefix="emailmw-benchmodes-"))
    totals = Counter[str]()
    try:
        failovers, redeliveries = [], []
        for _ in range(args.trials):
            took, (lost, silent, flagged) = failover_trial(server, work)
            failovers.append(took)
            totals.update(lost=lost, duplicates=silent, redeliveries=flagged)
        for _ in range(args.trials):
            took, (lost, silent, flagged) = redelivery_trial(server, work)
            redeliveries.append(took)
            totals.update(lost=lost, duplicates=silent, redeliveries=flagged)
        one, tally1 = throughput(server, work, 1, args.messages)
        three, tally3 = throughput(server, work, 3, args.messages)
        for lost, silent, flagged in (tally1, tally3):
            totals.update(lost=lost, duplicates=silent, redeliveries=flagged)
    finally:
        server.stop()
    results: dict[str, Any] = {
        "failover_p50_s": statistics.median(failovers),
        "failover_max_s": max(failovers),
        "redelivery_p50_s": statistics.median(redeliveries),
        "redelivery_max_s": max(redeliveries),
        "stateless_msgs_per_s_1": one,
        "stateless_msgs_per_s_3": three,
        "stateless_speedup_3": three / one,
        "lost": totals["lost"],
        "duplicates": totals["duplicates"],
        "redeliveries": totals["redeliveries"],
        "failover_s": failovers,
        "redelivery_s": redeliveries,
        "trials": args.trials,
        "messages": args.messages,
        "work_ms": 20,
    }
    print(f"{'measure':26} {'value':>10}")
    for key in ("failover_p50_s", "failover_max_s", "redelivery_p50_s", "redelivery_max_s",
                "stateless_msgs_per_s_1", "stateless_msgs_per_s_3", "stateless_speedup_3",
                "lost", "duplicates", "redeliveries"):  # fmt: skip
        print(f"{key:26} {results[key]:10.2f}")
    met = (results["failover_p50_s"] <= 3 and results["redelivery_p50_s"] <= 3
           and results["stateless_speedup_3"] >= 2.5 and results["lost"] == 0)  # fmt: skip
    print(f"\ntargets (failover, redelivery p50 <= 3 s; speed-up >= 2.5; lost 0): "
          f"{'met' if met else 'NOT met'}")  # fmt: skip
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
