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
* ``depth_limited_lost``: three stateless members with depth 2, 100 messages: messages
  never processed (a full queue is back-pressure, never a drop);
* ``pause_resume_unflagged_repeats``: three stateless members holding claims; one is
  stopped (SIGSTOP) for 8 s while the others take its claims over, then resumed (SIGCONT);
  copies an application got after the first one with ``delivery_count`` 1;
* ``lock_holder_failover_s``: two stateful members; the active one dies (SIGKILL) holding
  the group's claim lock -> the standby's first message;
* ``byte_flood_rss_mb``: 60 messages of 8 MiB to a receiver nobody takes from (default
  ``queue-bytes``, 256 MiB): its memory growth until the bound is reached and then until
  everything is taken (``byte_flood_lost``: not received in the end);
* ``squeezed_*`` (#56): the same stateless group (three members, ``--squeeze-messages``
  waiting, 0.5 s of work each, default settings), one member SIGKILLed after 20 are
  processed, run twice side by side: on the quiet machine, then beside ``--hogs`` busy
  processes (``emailmw.testing.squeeze``): ``squeezed_lost`` (never processed),
  ``squeezed_unflagged_repeats``, ``squeezed_max_wait_s`` (the longest time no message was
  processed while some waited and a member was alive), ``squeezed_throughput_ratio``
  (messages/s squeezed over quiet);
* ``simulator_steps_per_s``: the group protocol's deterministic simulator
  (``tests/test_group_simulation.py``), 3 members stepped on a fake clock, 40 seeds;
* ``lost``: messages published in all of the above and never processed; ``duplicates``:
  messages processed twice without being flagged (``delivery_count`` 1 both times);
  ``redeliveries``: flagged repeats (documented: a member killed after processing, before
  acknowledging).

Targets (issues #26, #34, #56): failover and redelivery p50 <= 3 s (goal: failover <= 1
s), stateless_speedup_3 >= 2.5, lost = 0, depth_limited_lost = 0,
pause_resume_unflagged_repeats = 0, lock_holder_failover_s <= 2.5,
byte_flood_rss_mb <= 256 + 64, squeezed_lost = 0, squeezed_max_wait_s <= 60. Starts its
own server (state /tmp/emailmw-benchmodes, ports
free at start; needs root). Prints a table, writes JSON (``--json``), exits 0.

``python bench/delivery_modes.py --member CONFIG MODE [--hold] [--work S] [--depth N]
[--die-holding-lock N]`` is one member (used by the benchmark itself): one JSON line per
processed message on stdout (``got``: when its application got it).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
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
from emailmw._core.config import load_options
from emailmw._transport.group.imap import ImapGroupStore
from emailmw.testing.mailserver import MailServer

TOPIC = "/jobs"
GROUP = "bench"


def member(
    config: str,
    mode: str,
    hold: bool,
    work: float,
    start: str | None,
    depth: int | None = None,
    die_after: int = 0,
) -> None:
    """One group member: takes each message, works ``work`` seconds, prints, acknowledges
    (``hold``: takes nothing; ``start``: nothing before that file exists; ``die_after``:
    after that many messages it takes the group's claim lock and dies holding it)."""
    with emailmw.Context(config) as ctx:
        sub = emailmw.Subscription(TOPIC, depth, context=ctx, mode=mode, group=GROUP)
        print(json.dumps({"ready": True}), flush=True)
        while start is not None and not Path(start).exists():
            time.sleep(0.005)
        done = 0
        while True:
            if hold or not sub.has_message():
                time.sleep(0.005)
                continue
            taken = sub.take_with_ticket()
            if taken is None:
                continue
            _body, info, ticket = taken
            got = time.time()
            if work:
                time.sleep(work)
            line = {"seq": info.sequence_number, "count": info.delivery_count,
                    "member": sub.member, "t": time.time(), "got": got}  # fmt: skip
            print(json.dumps(line), flush=True)
            ticket.release()
            done += 1
            if die_after and done == die_after:
                store = ImapGroupStore(load_options(config), GROUP)
                record = next(r for r in store.members() if r.member == sub.member)
                while not store.try_lock(record):
                    time.sleep(0.001)
                print(json.dumps({"dies": time.time()}), flush=True)
                os.kill(os.getpid(), signal.SIGKILL)


#: the member processes started, to say what one that failed printed (see ``wait``)
MEMBERS: list[Member] = []


class Member:
    """A member process; its processed lines collected with the time they were seen."""

    def __init__(self, config: Path, mode: str, *options: str) -> None:
        self.errors = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--member", str(config), mode, *options],
            stdout=subprocess.PIPE, stderr=self.errors, text=True,
        )  # fmt: skip
        self.lines: list[dict[str, Any]] = []
        self.died: float | None = None
        self.killed = False
        self.ready = threading.Event()
        MEMBERS.append(self)
        threading.Thread(target=self._read, daemon=True).start()
        if not self.ready.wait(60):
            raise SystemExit(f"a member did not start: {self.said()}")

    def said(self) -> str:
        """The end of what it printed on stderr."""
        self.errors.seek(0)
        return self.errors.read()[-1500:]

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            line = json.loads(raw)
            if line.get("ready"):
                self.ready.set()
            elif "dies" in line:
                self.died = line["dies"]
            else:
                line["seen"] = time.monotonic()
                self.lines.append(line)

    def kill(self) -> float:
        self.killed = True
        self.process.kill()
        killed = time.monotonic()
        self.process.wait(10)
        return killed

    def pause(self) -> None:
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.process.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        self.killed = True
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        self.errors.close()


def wait(condition: Any, timeout: float = 120.0) -> None:
    """Until ``condition()``; a member that ended on its own ends the benchmark with what
    it said (it once failed on a renamed method, and every trial waited out its timeout)."""
    end = time.monotonic() + timeout
    while not condition():
        for found in MEMBERS:
            code = found.process.poll()  # (-9: one that dies holding the lock kills itself)
            if not found.killed and code is not None and code != -signal.SIGKILL:
                raise SystemExit(f"a member ended ({code}): {found.said()}")
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

    def unflagged_repeats(self) -> int:
        """Copies an application got after the first with ``delivery_count`` 1."""
        by_seq: dict[int, list[dict[str, Any]]] = {}
        for line in (line for m in self.members for line in m.lines):
            by_seq.setdefault(line["seq"], []).append(line)
        return sum(
            sum(c["count"] == 1 for c in sorted(copies, key=lambda c: c["got"])[1:])
            for copies in by_seq.values()
        )

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


def processed(setup: Setup) -> int:
    return len({line["seq"] for m in setup.members for line in m.lines})


def depth_limited_trial(server: MailServer, work: Path) -> tuple[int, tuple[int, int, int]]:
    setup = Setup(server, work)
    try:
        for _ in range(3):
            setup.member("stateless", "--depth", "2", "--work", "0.005")
        wait(lambda: setup.members_in_store() == 3)
        setup.publish(100)
        wait(lambda: processed(setup) == 100)
        return 100 - processed(setup), setup.tally()
    finally:
        setup.close()


def pause_trial(server: MailServer, work: Path) -> tuple[int, tuple[int, int, int]]:
    setup = Setup(server, work)
    try:
        paused = setup.member("stateless", "--work", "0.05")
        for _ in range(2):
            setup.member("stateless", "--work", "0.02")
        wait(lambda: setup.members_in_store() == 3)
        setup.publish(60, 40.0)
        wait(lambda: len(paused.lines) >= 3)
        paused.pause()
        time.sleep(8.0)  # the measured case: stopped 8 s, several expiries
        paused.resume()
        setup.publish(30, 40.0)
        name = paused.lines[-1]["member"]
        wait(lambda: processed(setup) == 90)
        # it joined again under a new name and took work: whatever it held came out first
        end = time.monotonic() + 20
        while time.monotonic() < end and all(x["member"] == name for x in paused.lines):
            time.sleep(0.05)
        return setup.unflagged_repeats(), setup.tally()
    finally:
        setup.close()


def lock_holder_trial(server: MailServer, work: Path) -> tuple[float, tuple[int, int, int]]:
    setup = Setup(server, work)
    try:
        active = setup.member("stateful", "--die-holding-lock", "10")
        wait(lambda: setup.members_in_store() == 1)
        standby = setup.member("stateful")
        feeder = threading.Thread(target=setup.publish, args=(60, 20.0))
        feeder.start()
        wait(lambda: active.died is not None)
        wait(lambda: len(standby.lines) >= 1)
        assert active.died is not None
        took = standby.lines[0]["got"] - active.died
        feeder.join()
        wait(lambda: processed(setup) == 60)
        return took, setup.tally()
    finally:
        setup.close()


def byte_flood(
    server: MailServer, work: Path, count: int = 60, size: int = 8 << 20
) -> dict[str, Any]:
    """``count`` messages of ``size`` bytes to a receiver in this process nobody takes
    from, published by another process; this process's memory growth."""
    import psutil

    receiver, sender = server.fresh_account(), server.fresh_account()
    config = work / f"{sender}.yml"
    limits = {"max-message-size": 2 * size}
    config.write_text(yaml.safe_dump({"email": {**server.config(sender, to=receiver), **limits}}))
    ctx = emailmw.Context({"email": {**server.config(receiver), **limits}})
    try:
        sub = emailmw.Subscription("/flood", context=ctx)
        sub.has_message()
        process = psutil.Process()
        baseline = peak = process.memory_info().rss
        code = (
            "import emailmw, sys\n"
            f"with emailmw.Context({str(config)!r}) as c:\n"
            "    p = emailmw.Publisher('/flood', context=c)\n"
            f"    for i in range({count}): p.publish(f'{{i:04d}}' + 'x' * {size - 4})\n"
        )
        publisher = subprocess.Popen([sys.executable, "-c", code])
        while publisher.poll() is None or ctx.budget.refused == 0:
            peak = max(peak, process.memory_info().rss)
            time.sleep(0.01)
        at_bound = peak
        got: set[str] = set()
        end = time.monotonic() + 300
        while len(got) < count and time.monotonic() < end:
            message = emailmw.wait_for_message(sub, 1)
            if message is not None:
                got.add(message[:4])
            peak = max(peak, process.memory_info().rss)
        return {
            "byte_flood_rss_mb": (peak - baseline) / 2**20,
            "byte_flood_rss_at_bound_mb": (at_bound - baseline) / 2**20,
            "byte_flood_bound_mb": ctx.options.queue_bytes / 2**20,
            "byte_flood_lost": count - len(got),
        }
    finally:
        ctx.shutdown()


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


def squeezed_trial(
    server: MailServer, work: Path, count: int, hogs: int
) -> tuple[dict[str, float], tuple[int, int, int], int]:
    """Three stateless members (0.5 s of work a message), ``count`` messages waiting, one
    member SIGKILLed after 20 are processed, beside ``hogs`` busy processes: messages/s,
    the longest time nothing was processed while messages waited, and the tally."""
    from emailmw.testing.squeeze import squeezed

    setup = Setup(server, work)
    go = work / f"go-{setup.account}"
    try:
        setup.publish(count)
        with squeezed(hogs):
            members = [setup.member("stateless", "--work", "0.5", "--start", str(go))
                       for _ in range(3)]  # fmt: skip
            wait(lambda: setup.members_in_store() == 3, 300)
            began = time.time()
            go.touch()
            wait(lambda: processed(setup) >= 20, 600)
            members[0].kill()
            wait(lambda: processed(setup) == count, 1800)
        lines = sorted(line["t"] for m in setup.members for line in m.lines)
        gaps = [b - a for a, b in zip([began, *lines], lines, strict=False)]
        found = {"msgs_per_s": count / (lines[-1] - began), "max_wait_s": max(gaps)}
        return found, setup.tally(), setup.unflagged_repeats()
    finally:
        setup.close()


def simulator_speed(seeds: int = 40) -> float:
    """Steps per second of the group simulator (3 members a step, ~2,400 steps a seed)."""
    import logging

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests import test_group_simulation as simulation

    logging.disable(logging.CRITICAL)
    steps = 0
    original = simulation.App.step

    def counted(app: Any, now: float) -> None:
        nonlocal steps
        steps += 1
        original(app, now)

    simulation.App.step = counted  # type: ignore[method-assign]
    began = time.perf_counter()
    try:
        for seed in range(seeds):
            simulation.simulate(seed, "stateless")
    finally:
        simulation.App.step = original  # type: ignore[method-assign]
        logging.disable(logging.NOTSET)
    return steps / (time.perf_counter() - began)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--messages", type=int, default=300)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--squeeze-messages", type=int, default=150)
    parser.add_argument("--hogs", type=int, default=2 * (os.cpu_count() or 2))
    parser.add_argument("--member", nargs=2, metavar=("CONFIG", "MODE"))
    parser.add_argument("--hold", action="store_true")
    parser.add_argument("--work", type=float, default=0.0)
    parser.add_argument("--start", help="(a member) wait for this file before taking")
    parser.add_argument("--depth", type=int, default=None)
    parser.add_argument("--die-holding-lock", type=int, default=0)
    args = parser.parse_args()
    if args.member:
        member(args.member[0], args.member[1], args.hold, args.work, args.start, args.depth,
               args.die_holding_lock)  # fmt: skip
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
        depth_lost, tally = depth_limited_trial(server, work)
        totals.update(lost=tally[0], duplicates=tally[1], redeliveries=tally[2])
        unflagged, tally = pause_trial(server, work)
        totals.update(lost=tally[0], redeliveries=tally[2])
        lock_failovers = []
        for _ in range(max(1, args.trials // 2)):
            took, tally = lock_holder_trial(server, work)
            lock_failovers.append(took)
            totals.update(lost=tally[0], duplicates=tally[1], redeliveries=tally[2])
        flood = byte_flood(server, work)
        quiet, tally_q, repeats_q = squeezed_trial(server, work, args.squeeze_messages, 0)
        squeeze, tally_s, repeats_s = squeezed_trial(server, work, args.squeeze_messages, args.hogs)
        totals.update(lost=tally_q[0], duplicates=tally_q[1], redeliveries=tally_q[2])
    finally:
        server.stop()
    steps_per_s = simulator_speed()
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
        "depth_limited_lost": depth_lost,
        "pause_resume_unflagged_repeats": unflagged,
        "lock_holder_failover_s": max(lock_failovers),
        "lock_holder_failover_p50_s": statistics.median(lock_failovers),
        **flood,
        "quiet_max_wait_s": quiet["max_wait_s"],
        "squeezed_lost": tally_s[0],
        "squeezed_unflagged_repeats": repeats_s,
        "quiet_unflagged_repeats": repeats_q,
        "squeezed_max_wait_s": squeeze["max_wait_s"],
        "squeezed_throughput_ratio": squeeze["msgs_per_s"] / quiet["msgs_per_s"],
        "squeezed_msgs_per_s": squeeze["msgs_per_s"],
        "quiet_msgs_per_s": quiet["msgs_per_s"],
        "hogs": args.hogs,
        "squeeze_messages": args.squeeze_messages,
        "simulator_steps_per_s": steps_per_s,
        "failover_s": failovers,
        "redelivery_s": redeliveries,
        "lock_holder_failover_all_s": lock_failovers,
        "trials": args.trials,
        "messages": args.messages,
        "work_ms": 20,
    }
    print(f"{'measure':26} {'value':>10}")
    for key in ("failover_p50_s", "failover_max_s", "redelivery_p50_s", "redelivery_max_s",
                "stateless_msgs_per_s_1", "stateless_msgs_per_s_3", "stateless_speedup_3",
                "lost", "duplicates", "redeliveries", "depth_limited_lost",
                "pause_resume_unflagged_repeats", "lock_holder_failover_p50_s",
                "lock_holder_failover_s", "byte_flood_rss_at_bound_mb", "byte_flood_rss_mb",
                "byte_flood_lost", "quiet_msgs_per_s", "quiet_max_wait_s",
                "squeezed_msgs_per_s", "squeezed_throughput_ratio", "squeezed_max_wait_s",
                "squeezed_lost", "squeezed_unflagged_repeats",
                "simulator_steps_per_s"):  # fmt: skip
        print(f"{key:32} {results[key]:10.2f}")
    met = (results["failover_p50_s"] <= 3 and results["redelivery_p50_s"] <= 3
           and results["stateless_speedup_3"] >= 2.5 and results["lost"] == 0
           and depth_lost == 0 and unflagged == 0 and results["lock_holder_failover_s"] <= 2.5
           and results["byte_flood_rss_mb"] <= results["byte_flood_bound_mb"] + 64
           and results["byte_flood_lost"] == 0 and results["squeezed_lost"] == 0
           and results["squeezed_max_wait_s"] <= 60)  # fmt: skip
    print(f"\ntargets (failover, redelivery p50 <= 3 s; speed-up >= 2.5; lost 0; depth-limited "
          f"lost 0; unflagged repeats 0; lock-holder failover <= 2.5 s; flood <= bound + 64 "
          f"MiB; squeezed: lost 0, max wait <= 60 s): {'met' if met else 'NOT met'}; "
          "failover p50 goal <= 1 s: "
          f"{'met' if results['failover_p50_s'] <= 1 else 'not met'}")  # fmt: skip
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
