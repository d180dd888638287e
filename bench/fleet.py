"""Fleet soak (#57): a small fleet on three federated sites, every feature on, faults on a
schedule, optionally under a CPU squeeze, and what it lost.

    python bench/fleet.py [--minutes 20] [--squeeze [N]] [--json FILE]

Three sites that mail each other as providers do (``emailmw.testing.mailserver.federate``):
``a`` (Postfix + Dovecot, every node logging in with OAuth2), ``b`` (Postfix + Cyrus) and
``c`` (Postfix + Courier-IMAP); every context signs and verifies in ``enforce`` with a
permissions file. Twelve processes, each its own Python:

* ``talker`` (a): ``/chatter`` at 2 Hz to ``listener`` (b), batching on, under
  ``emails-per-minute: 30``; ``/jobs`` every 1.5 s to a stateless group (c) and ``/tasks``
  every 2 s to a stateful group (c);
* ``listener`` (b), with a ``state-file``; ``sl1``, ``sl2`` (stateless) and ``sf1``, ``sf2``
  (stateful), group members on c, 0.2-0.8 s of work a message;
* ``server`` (b): a node with a service, an action and a parameter; ``client`` (a): calls
  the service every 4 s, sends a goal every 12 s and sets the parameter every 15 s, each
  waiting as long as it takes (no timeout counts as a loss);
* ``station`` (a, Stem hub ``lab``) asks ``far:arm`` (``cell``, c) for its status every 5 s
  through two gateways, ``gw1`` (a <-> b) and ``gw2`` (b <-> c): ``emailmw gateway``
  processes, so every command crosses the middle server twice.

Faults, as fractions of the run: a stateless member SIGKILLed (0.15, restarted 10 s
later), the listener SIGKILLed and restarted on its state file (0.25), the server (action
server) SIGSTOPped for 15 s (0.35), the middle server b stopped for 60 s (0.5), gateway
gw2 SIGKILLed and restarted (0.65), the active stateful member SIGKILLed (0.75, restarted).
Then publishing stops and the fleet drains (up to ``--drain`` seconds).

Prints and writes (``--json``): ``lost`` (a message, call, goal, parameter set or Stem
command never processed or answered), ``silent_repeats`` (a message processed again
without being flagged ``redelivered`` or ``delivery_count`` > 1), ``flagged_repeats``,
``max_wait_alive_s`` (the longest a message or call waited, not counting the time its
consumer or a server on its path was down, stopped or being restarted), ``hangs``
(processes that did not end within 60 s of SIGINT at the end, or printed nothing for 120
s while running), ``dropped`` (the gateways' drops), the deliveries each site's Postfix
logged, and the p50 latency of
``/chatter`` across sites against a topic on one site (``/local``, a -> a) and of a Stem
command through two gateways. Needs root (it starts its own servers; state under /tmp).

``python bench/fleet.py --role ROLE SPEC.json`` is one process of the fleet (the benchmark
starts them): JSON lines on stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import yaml

_PRINTING = threading.Lock()
PERMISSIONS = {
    "talker": {"publish": ["/chatter", "/jobs", "/tasks", "/local"]},
    "listener": {"subscribe": ["/chatter"]},
    "member": {"subscribe": ["/jobs", "/tasks"]},
    "server": {"serve": ["/add_two_ints", "/fibonacci/_action/*", "/server_node/*"],
               "publish": ["/fibonacci/_action/*"]},
    "client": {"call": ["/add_two_ints", "/fibonacci/_action/*", "/server_node/*"],
               "subscribe": ["/fibonacci/_action/*", "/local"], "serve": ["/client_node/*"]},
    "station": {"stem": {"send": ["/far/arm/cmd/status"], "as": ["/lab/station"]}},
    "cell": {"stem": {"as": ["/far/arm"]}},
    "gw": {"relay": ["/stem/**"]},
}  # fmt: skip


class Abandoned(Exception):
    """The run ended while a call waited for its answer."""


def settled(future: Any, stop: threading.Event) -> Any:
    """``future``'s result, however long it takes, unless the run ends first."""
    while not future.done():
        if stop.wait(0.05):
            raise Abandoned
    return future.result()


def say(data: Any) -> None:
    with _PRINTING:
        sys.stdout.write(json.dumps(data) + "\n")
        sys.stdout.flush()


# ------------------------------------------------------------------ the roles


def _context(spec: dict[str, Any], name: str = "email") -> Any:
    import emailmw

    return emailmw.Context({"email": spec[name]})


def role_talker(spec: dict[str, Any], quiet: threading.Event, stop: threading.Event) -> None:
    import emailmw

    contexts = {name: _context(spec, name) for name in ("chatter", "jobs", "tasks", "local")}
    batch = emailmw.BatchPolicy(linger_ms=50, max_messages=100)
    chatter = emailmw.Publisher("/chatter", context=contexts["chatter"], guarantee="memory",
                                batch=batch)  # fmt: skip
    jobs = emailmw.Publisher("/jobs", context=contexts["jobs"], guarantee="memory")
    tasks = emailmw.Publisher("/tasks", context=contexts["tasks"], guarantee="memory")
    local = emailmw.Publisher("/local", context=contexts["local"], guarantee="memory")
    say({"ready": True})
    start = time.monotonic()
    tick = 0
    while not quiet.is_set():
        now = time.time()
        chatter.publish(f"chatter {tick} {now}")
        say({"sent": "chatter", "i": tick, "t": now})
        if tick % 4 == 0:
            local.publish(f"local {tick // 4} {now}")
            say({"sent": "local", "i": tick // 4, "t": now})
        if tick % 3 == 0:
            jobs.publish(f"jobs {tick // 3} {now}")
            say({"sent": "jobs", "i": tick // 3, "t": now})
        if tick % 4 == 1:
            tasks.publish(f"tasks {tick // 4} {now}")
            say({"sent": "tasks", "i": tick // 4, "t": now})
        tick += 1
        quiet.wait(max(0.0, start + tick * 0.5 - time.monotonic()))
    for context in contexts.values():  # (what is queued goes out first)
        context.shutdown()
    say({"done": True})
    stop.wait()


def _consume(sub: Any, stream: str, work: tuple[float, float], stop: threading.Event) -> None:
    while not stop.is_set():
        if not sub.has_message():
            time.sleep(0.01)
            continue
        taken = sub.take_with_ticket()
        if taken is None:
            continue
        body, info, ticket = taken
        _, index, sent = str(body).split()
        if work[1]:
            time.sleep(random.uniform(*work))
        say({"got": stream, "i": int(index), "sent": float(sent), "t": time.time(),
             "redelivered": bool(info.redelivered), "count": info.delivery_count})  # fmt: skip
        ticket.release()


def role_listener(spec: dict[str, Any], quiet: threading.Event, stop: threading.Event) -> None:
    import emailmw

    ctx = _context(spec)
    sub = emailmw.Subscription("/chatter", context=ctx)
    say({"ready": True})
    _consume(sub, "chatter", (0.0, 0.0), stop)


def role_member(spec: dict[str, Any], quiet: threading.Event, stop: threading.Event) -> None:
    import emailmw

    ctx = _context(spec)
    topic, mode = spec["topic"], spec["mode"]
    sub = emailmw.Subscription(topic, context=ctx, mode=mode, group=topic.strip("/"))
    say({"ready": True})
    _consume(sub, topic.strip("/"), (0.2, 0.8), stop)


def role_server(spec: dict[str, Any], quiet: threading.Event, stop: threading.Event) -> None:
    import emailmw
    from emailmw.action import ActionServer, GoalResponse
    from emailmw.callback_groups import ReentrantCallbackGroup
    from emailmw.example_interfaces.action import Fibonacci
    from emailmw.example_interfaces.srv import AddTwoInts
    from emailmw.executors import MultiThreadedExecutor

    node = emailmw.Node("server_node", context=_context(spec))

    def add(request: Any, response: Any) -> Any:
        response.sum = request.a + request.b
        return response

    def fibonacci(goal_handle: Any) -> Any:
        sequence = [0, 1]
        for _ in range(1, goal_handle.request.order):
            sequence.append(sequence[-1] + sequence[-2])
            goal_handle.publish_feedback(Fibonacci.Feedback(sequence=list(sequence)))
        goal_handle.succeed()
        return Fibonacci.Result(sequence=sequence)

    node.create_service(AddTwoInts, "/add_two_ints", add)
    ActionServer(node, Fibonacci, "fibonacci", fibonacci,
                 goal_callback=lambda goal: GoalResponse.ACCEPT,
                 callback_group=ReentrantCallbackGroup())  # fmt: skip
    node.declare_parameter("speed", 0)
    executor = MultiThreadedExecutor(num_threads=4)
    executor.add_node(node)
    threading.Thread(target=executor.spin, daemon=True).start()
    say({"ready": True})
    stop.wait()
    executor.shutdown()


def role_client(spec: dict[str, Any], quiet: threading.Event, stop: threading.Event) -> None:
    import emailmw
    from emailmw.action import ActionClient
    from emailmw.action_msgs.msg import GoalStatus
    from emailmw.example_interfaces.action import Fibonacci
    from emailmw.example_interfaces.srv import AddTwoInts
    from emailmw.executors import MultiThreadedExecutor
    from emailmw.parameter import Parameter
    from emailmw.parameter_client import AsyncParameterClient

    ctx = _context(spec)
    node = emailmw.Node("client_node", context=ctx)
    local = emailmw.Subscription("/local", context=ctx)
    executor = MultiThreadedExecutor(num_threads=6)
    executor.add_node(node)
    threading.Thread(target=executor.spin, daemon=True).start()
    client = node.create_client(AddTwoInts, "/add_two_ints")
    actions = ActionClient(node, Fibonacci, "fibonacci")
    parameters = AsyncParameterClient(node, "/server_node")
    client.wait_for_service(timeout_sec=600)
    actions.wait_for_server(timeout_sec=600)
    parameters.wait_for_services(600)
    say({"ready": True})

    def every(period: float, kind: str, call: Any) -> None:
        i = 0
        while not quiet.wait(period if i else 0.1):
            sent = time.time()
            say({"sent": kind, "i": i, "t": sent})
            try:
                ok = call(i)
            except Exception as exc:  # noqa: BLE001 - a failed call is counted, not fatal
                say({"failed": kind, "i": i, "error": str(exc)[:300]})
            else:
                say({"got": kind, "i": i, "sent": sent, "t": time.time(), "ok": ok,
                     "redelivered": False, "count": 1})  # fmt: skip
            i += 1

    def call(i: int) -> bool:
        answer = settled(client.call_async(AddTwoInts.Request(a=i, b=1)), stop)
        return bool(answer.sum == i + 1)

    def goal(i: int) -> bool:
        handle = settled(actions.send_goal_async(Fibonacci.Goal(order=4)), stop)
        result = settled(handle.get_result_async(), stop)
        return bool(result.status == GoalStatus.STATUS_SUCCEEDED)

    def parameter(i: int) -> bool:
        answer = settled(parameters.set_parameters([Parameter("speed", value=i)]), stop)
        return bool(answer.results[0].successful)

    callers = [threading.Thread(target=every, args=(period, kind, fn), daemon=True)
               for period, kind, fn in ((4.0, "service", call), (12.0, "action", goal),
                                        (15.0, "parameter", parameter))]  # fmt: skip
    for caller in callers:
        caller.start()
    _consume(local, "local", (0.0, 0.0), stop)
    for caller in callers:  # (a call in flight is answered first)
        caller.join()
    executor.shutdown()


def role_station(spec: dict[str, Any], quiet: threading.Event, stop: threading.Event) -> None:
    from emailmw import stem

    station = stem.Cell("station", context=_context(spec))
    say({"ready": True})
    i = 0
    while not quiet.wait(5.0 if i else 0.1):
        sent = time.time()
        say({"sent": "stem", "i": i, "t": sent})
        try:
            answer = settled(station.request("far:arm", "status"), stop)
        except Exception as exc:  # noqa: BLE001
            say({"failed": "stem", "i": i, "error": str(exc)[:300]})
        else:
            say({"got": "stem", "i": i, "sent": sent, "t": time.time(), "ok": answer == "fine",
                 "redelivered": False, "count": 1})  # fmt: skip
        i += 1


def role_cell(spec: dict[str, Any], quiet: threading.Event, stop: threading.Event) -> None:
    from emailmw import stem

    class Arm(stem.Cell):
        def status_cmd(self, msg: Any) -> str:
            return "fine"

    Arm("arm", context=_context(spec))
    say({"ready": True})
    stop.wait()


ROLES = {"talker": role_talker, "listener": role_listener, "member": role_member,
         "server": role_server, "client": role_client, "station": role_station,
         "cell": role_cell}  # fmt: skip


def run_role(role: str, spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    # emailmw's warnings and its groups' decisions (a lock broken, claims taken) go to the
    # role's .err file, dated: what a silent repeat or a stall is traced with
    logging.basicConfig(format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("emailmw").setLevel(logging.INFO)
    quiet, stop = threading.Event(), threading.Event()  # (SIGUSR1: send no more; SIGINT: end)
    signal.signal(signal.SIGUSR1, lambda *_: quiet.set())
    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, lambda *_: (quiet.set(), stop.set()))
    threading.Thread(target=_alive, args=(stop,), daemon=True).start()
    ROLES[role](spec, quiet, stop)
    return 0


def _alive(stop: threading.Event) -> None:
    while not stop.wait(5.0):
        say({"alive": time.time()})


# ------------------------------------------------------------------ the driver


class Process:
    """One process of the fleet: its lines collected (with when they were seen)."""

    def __init__(self, name: str, argv: list[str], logs: Path, announces: bool = True) -> None:
        self.name, self.argv, self.logs, self.announces = name, argv, logs, announces
        self.lines: list[dict[str, Any]] = []
        self.down: list[list[float]] = []  # [from, to] while killed, stopped or restarting
        self.last_seen = time.time()
        self.ready = threading.Event()
        self.silent_max = 0.0
        self.stopped = False
        self.start()

    def start(self) -> None:
        self.ready.clear()
        err = (self.logs / f"{self.name}.err").open("a")
        self.process = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=err,
                                        stdin=subprocess.DEVNULL, text=True)  # fmt: skip
        err.close()
        threading.Thread(target=self._read, args=(self.process,), daemon=True).start()
        if not self.announces:  # (an emailmw gateway prints its reports, no ready line)
            self.ready.set()

    def _read(self, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        out = (self.logs / f"{self.name}.out").open("a")
        for raw in process.stdout:
            out.write(raw)
            out.flush()
            try:
                line = json.loads(raw)
            except ValueError:
                continue
            now = time.time()
            if not self.stopped:
                self.silent_max = max(self.silent_max, now - self.last_seen)
            self.last_seen = now
            if line.get("ready"):
                self.ready.set()
            elif "alive" not in line:
                self.lines.append(line)

    def said(self) -> str:
        return (self.logs / f"{self.name}.err").read_text()[-2000:]

    def kill(self) -> None:
        self.down.append([time.time(), float("inf")])
        self.process.kill()
        self.process.wait(30)

    def restart(self) -> None:
        self.start()
        self.wait_ready()
        self.down[-1][1] = time.time()
        self.last_seen = time.time()

    def pause(self, seconds: float) -> None:
        self.stopped = True
        self.down.append([time.time(), float("inf")])
        self.process.send_signal(signal.SIGSTOP)
        time.sleep(seconds)
        self.process.send_signal(signal.SIGCONT)
        self.down[-1][1] = time.time()
        self.last_seen = time.time()
        self.stopped = False

    def wait_ready(self, timeout: float = 600.0) -> None:
        if not self.ready.wait(timeout):
            raise SystemExit(f"{self.name} did not start: {self.said()}")


def _overlap(windows: list[list[float]], start: float, end: float) -> float:
    return sum(max(0.0, min(end, b) - max(start, a)) for a, b in windows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--role")
    parser.add_argument("spec", nargs="?")
    parser.add_argument("--minutes", type=float, default=20.0)
    parser.add_argument("--squeeze", type=int, nargs="?", const=os.cpu_count() or 2, default=0)
    parser.add_argument("--drain", type=float, default=600.0)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--no-faults", action="store_true", help="the fleet alone (a baseline)")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when a target is missed (make soak)")  # fmt: skip
    args = parser.parse_args()
    if args.role:
        return run_role(args.role, args.spec)
    from emailmw.testing.squeeze import squeezed

    with squeezed(args.squeeze):
        results = fleet(args.minutes * 60, args.drain, not args.no_faults)
    results["squeeze_hogs"] = args.squeeze
    results["minutes"] = args.minutes
    for key, value in results.items():
        if not isinstance(value, dict):
            print(f"{key:28} {value}")
    print(json.dumps({k: v for k, v in results.items() if isinstance(v, dict)}, indent=1))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    missed = [key for key, ok in (
        ("lost", results["lost"] == 0), ("silent_repeats", results["silent_repeats"] == 0),
        ("max_wait_alive_s", results["max_wait_alive_s"] <= 60), ("hangs", results["hangs"] == 0),
        ("dropped", results["dropped"] == 0)) if not ok]  # fmt: skip
    if missed:
        print(f"targets missed: {', '.join(missed)}")
    return 1 if missed and args.check else 0


def fleet(duration: float, drain: float, faults: bool = True) -> dict[str, Any]:
    from emailmw import Keystore
    from emailmw.testing.mailserver import MailServer, federate

    work = Path(tempfile.mkdtemp(prefix="emailmw-fleet-", dir="/tmp"))
    work.chmod(0o711)  # (the servers' own users pass through to their state; nobody lists it)
    logs = work / "logs"
    logs.mkdir()
    sites = {
        "a": MailServer(state_dir=work / "a", domain="site-a.test", pool_size=40),
        "b": MailServer(state_dir=work / "b", domain="site-b.test", pool_size=40,
                        imap_server="cyrus"),
        "c": MailServer(state_dir=work / "c", domain="site-c.test", pool_size=40,
                        imap_server="courier"),
    }  # fmt: skip
    processes: dict[str, Process] = {}
    try:
        for server in sites.values():
            server.start(fresh=True)
        federate(*sites.values())
        a, b, c = sites["a"], sites["b"], sites["c"]
        box = {name: server.fresh_account() for name, server in (
            ("talker", a), ("client", a), ("station", a), ("gwa", a),
            ("listener", b), ("server", b), ("gwb1", b), ("gwb2", b),
            ("sl", c), ("sf", c), ("cell", c), ("gwc", c))}  # fmt: skip
        keystore = Keystore.create(work / "keystore")
        for name in PERMISSIONS:
            keystore.create_key(name)
        grants = {**PERMISSIONS, "gw": {**PERMISSIONS["gw"], "accounts": [
            box["gwa"], box["gwb1"], box["gwb2"], box["gwc"]]}}  # fmt: skip
        (keystore.path / "permissions.yaml").write_text(yaml.safe_dump({"identities": grants}))
        site_of = {name: "a" if name in ("talker", "client", "station", "gwa") else
                   "b" if name in ("listener", "server", "gwb1", "gwb2") else "c"
                   for name in box}  # fmt: skip

        def config(name: str, identity: str, **more: Any) -> dict[str, Any]:
            server = sites[site_of[name]]
            auth = {"auth": "oauth2"} if site_of[name] == "a" else {}
            security = {"keystore": str(keystore.path), "identity": identity,
                        "verify": "enforce"}  # fmt: skip
            return server.config(box[name], security=security, **auth, **more)

        def spec(name: str, **configs: Any) -> str:
            path = work / f"{name}.json"
            path.touch(0o600)  # (passwords and token commands)
            path.write_text(json.dumps(configs))
            return str(path)

        me = [sys.executable, str(Path(__file__).resolve())]

        def role(name: str, kind: str, path: str) -> Process:
            processes[name] = Process(name, [*me, "--role", kind, path], logs)
            return processes[name]

        state = work / "state"
        state.mkdir()
        for name in ("sl1", "sl2"):
            role(name, "member", spec(name, email=config("sl", "member"),
                                      topic="/jobs", mode="stateless"))  # fmt: skip
        for name in ("sf1", "sf2"):
            role(name, "member", spec(name, email=config("sf", "member"),
                                      topic="/tasks", mode="stateful"))  # fmt: skip
        role("listener", "listener", spec("listener", email=config(
            "listener", "listener", **{"state-file": str(state / "listener.json")})))  # fmt: skip
        role("server", "server", spec("server", email=config("server", "server",
                                                             to=box["client"])))  # fmt: skip
        role("cell", "cell", spec("cell", email=config(
            "cell", "cell", routing={"hub": "far", "routes": {"lab": box["gwc"]}})))  # fmt: skip
        for name, (left, right), routes in (
            ("gw1", ("gwa", "gwb1"), {"lab": (box["station"], "a"), "far": (box["gwb2"], "b")}),
            ("gw2", ("gwb2", "gwc"), {"lab": (box["gwb1"], "b"), "far": (box["cell"], "c")}),
        ):
            accounts = {site_of[end]: config(end, "gw", routing={"hub": f"{name}-{end}"},
                                             **{"state-file": str(state / f"{name}-{end}.json")})
                        for end in (left, right)}  # fmt: skip
            table = {hub: {"to": to, "via": via} for hub, (to, via) in routes.items()}
            path = work / f"{name}.yml"
            path.touch(0o600)
            path.write_text(yaml.safe_dump({"accounts": accounts, "routes": table}))
            emailmw_cli = str(Path(sys.executable).with_name("emailmw"))
            processes[name] = Process(name, [emailmw_cli, "gateway", str(path)], logs, False)
        for found in list(processes.values()):
            found.wait_ready()
        role("client", "client", spec("client", email=config("client", "client",
                                                             to=box["server"])))  # fmt: skip
        lab = {"hub": "lab", "routes": {"far": box["gwa"]}}
        role("station", "station", spec("station", email=config("station", "station",
                                                                routing=lab)))  # fmt: skip
        # (the talker last, once the client reads /local: a subscription gets what comes
        # after it is made, as in ROS; was: /local's first message could come before it)
        processes["client"].wait_ready()
        limits = {"emails-per-minute": 30}
        role("talker", "talker", spec(
            "talker", chatter=config("talker", "talker", to=box["listener"], limits=limits),
            jobs=config("talker", "talker", to=box["sl"]),
            tasks=config("talker", "talker", to=box["sf"]),
            local=config("talker", "talker", to=box["client"])))  # fmt: skip
        for name in ("client", "station", "talker"):
            processes[name].wait_ready()
        started = time.time()
        outages: list[list[float]] = []

        def at(fraction: float) -> bool:
            """Wait for this fault's time (each starts 20 s after the last ended at least:
            faults never overlap); False when faults are off."""
            time.sleep(max(0.0, started + fraction * duration - time.time()))
            return faults

        def outage() -> None:
            outages.append([time.time(), float("inf")])
            b.stop()
            time.sleep(60)
            b.start(fresh=False)
            outages[-1][1] = time.time()

        def active() -> str:
            return max(("sf1", "sf2"), key=lambda n: (
                processes[n].lines[-1]["t"] if processes[n].lines else 0))  # fmt: skip

        done: list[dict[str, Any]] = []
        for fraction, fault in (
            (0.15, lambda: (processes["sl1"].kill(), time.sleep(10), processes["sl1"].restart())),
            (0.25, lambda: (processes["listener"].kill(), time.sleep(10),
                            processes["listener"].restart())),
            (0.35, lambda: processes["server"].pause(15)),
            (0.5, outage),
            (0.65, lambda: (processes["gw2"].kill(), time.sleep(5), processes["gw2"].restart())),
            (0.75, lambda: (name := active(), processes[name].kill(), time.sleep(10),
                            processes[name].restart())),
        ):  # fmt: skip
            if at(fraction):
                began = time.time()
                fault()
                ended_fault = time.time()
                done.append({"at_s": round(began - started), "for_s": round(ended_fault - began)})
                time.sleep(20)
        at(1.0)
        ended = time.time()
        for name in ("talker", "client", "station"):  # no more sending; what is sent goes on
            processes[name].process.send_signal(signal.SIGUSR1)
        deadline = time.time() + drain
        while time.time() < deadline and _missing(processes):
            time.sleep(2)
        drained = time.time() - ended
        hung: list[str] = []
        # (ended before the SIGINT: a crash, or a sender done with its last call)
        exited = sorted(n for n, p in processes.items() if p.process.poll() is not None)
        for found in processes.values():
            if found.process.poll() is None:
                found.process.send_signal(signal.SIGINT)
        for name, found in processes.items():
            try:
                found.process.wait(60)
            except subprocess.TimeoutExpired:
                hung.append(name)
                found.process.kill()
        silent = sorted(n for n, p in processes.items() if p.silent_max > 120)
        results = _account(processes, outages, started, ended)
        results["faults"] = dict(zip(FAULTS, done, strict=False))
        results.update(
            hangs=len(hung) + len(silent),
            hung=hung,
            silent=silent,
            exited_early=exited,
            drain_s=round(drained, 1),
        )
        results["emails_delivered_per_site"] = {
            name: _delivered(server) for name, server in sites.items()}  # fmt: skip
        return results
    finally:
        for found in processes.values():
            with contextlib.suppress(Exception):
                found.process.kill()
        for server in sites.values():
            with contextlib.suppress(Exception):
                server.stop()
        keep = os.environ.get("EMAILMW_FLEET_KEEP")
        if not keep:
            shutil.rmtree(work, ignore_errors=True)


#: the faults, in the order the run makes them
FAULTS = (
    "stateless member SIGKILL, restarted",
    "listener SIGKILL, restarted on its state file",
    "server (action server) SIGSTOP 15 s",
    "middle server b stopped 60 s",
    "gateway gw2 SIGKILL, restarted",
    "active stateful member SIGKILL, restarted",
)

#: each stream: who sends it, who prints its arrival, the processes whose being down (killed,
#: stopped, restarting) a message of it may wait out, and whether it crosses the middle
#: server b (a group's members are not there: a message waits for the group, which lives)
STREAMS = {
    "chatter": (("talker",), ("listener",), ("listener",), True),
    "local": (("talker",), ("client",), (), False),
    "jobs": (("talker",), ("sl1", "sl2"), (), False),
    "tasks": (("talker",), ("sf1", "sf2"), (), False),
    "service": (("client",), ("client",), ("server",), True),
    "action": (("client",), ("client",), ("server",), True),
    "parameter": (("client",), ("client",), ("server",), True),
    "stem": (("station",), ("station",), ("cell", "gw1", "gw2"), True),
}


def _lines(
    processes: dict[str, Process], names: tuple[str, ...], kind: str, stream: str
) -> list[dict[str, Any]]:
    """The ``kind`` lines (``sent``, ``got``, ``failed``) of ``stream`` that the processes
    ``names`` printed."""
    return [{**line, "by": n} for n in names for line in processes[n].lines
            if line.get(kind) == stream]  # fmt: skip


def _missing(processes: dict[str, Process]) -> bool:
    """Whether something sent has not been processed or answered yet."""
    return any(
        {line["i"] for line in _lines(processes, senders, "sent", stream)}
        - {line["i"] for line in _lines(processes, receivers, "got", stream)}
        for stream, (senders, receivers, _, _) in STREAMS.items()
    )


def _account(
    processes: dict[str, Process], outages: list[list[float]], started: float, ended: float
) -> dict[str, Any]:
    lost: dict[str, int] = {}
    silent_repeats = flagged = 0
    repeats: list[dict[str, Any]] = []
    waits: list[float] = []
    longest: dict[str, float] = {}
    latency: dict[str, list[float]] = defaultdict(list)
    failed: Counter[str] = Counter()
    for stream, (senders, receivers, consumers, crosses) in STREAMS.items():
        sent = {line["i"] for line in _lines(processes, senders, "sent", stream)}
        got: dict[int, list[dict[str, Any]]] = defaultdict(list)
        for line in _lines(processes, receivers, "got", stream):
            got[line["i"]].append(line)
        failures = len(_lines(processes, receivers, "failed", stream))
        if failures:
            failed[stream] = failures
        lost[stream] = len(sent - set(got))
        down = [w for c in consumers for w in processes[c].down]
        down += outages if crosses else []
        for copies in got.values():
            # (one copy may come unflagged, the first an application took: the others must
            # say they are repeats; which one finished first does not matter)
            unflagged = sum(1 for c in copies if not c["redelivered"] and c["count"] == 1)
            silent_repeats += max(0, unflagged - 1)
            if unflagged > 1:  # (which, by whom and when: to find why)
                repeats.append({"stream": stream, "i": copies[0]["i"],
                                "by": [(c.get("by", ""), round(c["t"] - started, 1))
                                       for c in copies]})  # fmt: skip
            flagged += len(copies) - unflagged
            copies.sort(key=lambda line: line["t"])
            first = copies[0]
            waited_down = _overlap(down, first["sent"], first["t"])
            wait = first["t"] - first["sent"] - waited_down
            waits.append(wait)
            longest[stream] = round(max(longest.get(stream, 0.0), wait), 1)
            if stream in ("chatter", "local", "stem") and not waited_down:
                latency[stream].append(first["t"] - first["sent"])
    reports = [line for g in ("gw1", "gw2") for line in processes[g].lines if "dropped" in line]
    dropped = sum(
        max((line["dropped"] for line in processes[g].lines if "dropped" in line), default=0)
        for g in ("gw1", "gw2")
    )
    return {
        "lost": sum(lost.values()),
        "lost_by_stream": lost,
        "silent_repeats": silent_repeats,
        "silent_repeated": repeats,
        "flagged_repeats": flagged,
        "failed_calls": dict(failed),
        "max_wait_alive_s": round(max(waits, default=0.0), 1),
        "max_wait_alive_by_stream_s": longest,
        "processed": len(waits),
        "dropped": dropped,
        "gateway_reports": len(reports),
        "chatter_p50_s": _p50(latency["chatter"]),
        "local_p50_s": _p50(latency["local"]),
        "stem_round_trip_p50_s": _p50(latency["stem"]),
        "talker_chatter_messages": len(_lines(processes, ("talker",), "sent", "chatter")),
        "run_s": round(ended - started, 1),
    }


def _p50(values: list[float]) -> float | None:
    return round(statistics.median(values), 2) if values else None


def _delivered(server: Any) -> int:
    """How many deliveries this site's Postfix logged (status=sent)."""
    count = 0
    for path in Path(server.state_dir).rglob("maillog"):
        with contextlib.suppress(OSError):
            count += len(re.findall(rb"status=sent", path.read_bytes()))
    return count


if __name__ == "__main__":
    sys.exit(main())
