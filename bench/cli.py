"""How quick the command line is, with and without the graph daemon (issue #49).

    python bench/cli.py [--runs 10] [--json FILE]

Starts its own server (state /tmp/emailmw-benchcli, on free ports; needs root) and a
talker in this process: a node ``/talker`` with a parameter ``x``, a publisher on
``/chatter`` and an ``AddTwoInts`` service. Then, side by side in one run, the median
wall time of each command over ``--runs`` runs, as a user types it (a new Python process
each time):

* ``topic_list_s``, ``topic_info_s`` (``topic info -v /chatter``), ``param_get_s``
  (``param get /talker x``), ``service_call_s``: with the daemon running;
* the same with ``_nodaemon`` appended (``--no-daemon``: log in, read the mailbox);
* ``import_s``: ``python -c 'import emailmw'``; ``python_s``: ``python -c pass`` (the
  floor every command pays).

Targets (#49): with the daemon, list/info/get <= 0.4 s; ``import emailmw`` <= 0.25 s.
Prints a table, writes JSON, exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import yaml

import emailmw
from emailmw import example_interfaces, std_msgs
from emailmw.executors import SingleThreadedExecutor
from emailmw.testing.mailserver import MailServer

COMMANDS = {
    "topic_list_s": ("topic", "list"),
    "topic_info_s": ("topic", "info", "-v", "/chatter"),
    "param_get_s": ("param", "get", "/talker", "x"),
    "service_call_s": ("service", "call", "/add_two_ints",
                       "example_interfaces/srv/AddTwoInts", "{a: 2, b: 3}"),
}  # fmt: skip


def timed(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    took = time.perf_counter() - start
    if done.returncode:
        raise SystemExit(f"{' '.join(argv)} failed: {done.stderr.strip()}")
    return took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--json", type=Path, default=Path("bench/results/cli.json"))
    args = parser.parse_args()
    state = Path("/tmp/emailmw-benchcli")
    server = MailServer(state_dir=state)
    server.start(fresh=True)
    config = state / "email.yml"
    config.write_text(yaml.safe_dump({"email": server.config(server.address("alice"))}))
    os.chmod(config, 0o600)
    ctx = emailmw.Context(str(config))
    node = emailmw.Node("talker", context=ctx, announce_period=60)
    node.declare_parameter("x", 3)
    node.create_publisher(std_msgs.msg.String, "/chatter", 10)

    def add(request: Any, response: Any) -> Any:
        response.sum = request.a + request.b
        return response

    node.create_service(example_interfaces.srv.AddTwoInts, "/add_two_ints", add)
    executor = SingleThreadedExecutor(context=ctx)
    executor.add_node(node)
    threading.Thread(target=executor.spin, daemon=True).start()
    env = {k: v for k, v in os.environ.items() if k != "EMAILMW_NO_DAEMON"}
    cli = [sys.executable, "-m", "emailmw", "--config", str(config)]
    result: dict[str, Any] = {"runs": args.runs}
    try:
        time.sleep(1.0)  # (the node's first announcement)
        subprocess.run([*cli, "daemon", "start"], env=env, check=True, capture_output=True)
        for key, verb in COMMANDS.items():
            result[f"{key.removesuffix('_s')}_nodaemon_s"] = statistics.median(
                timed([*cli, "--no-daemon", *verb], env) for _ in range(args.runs)
            )
            result[key] = statistics.median(timed([*cli, *verb], env) for _ in range(args.runs))
        result["import_s"] = statistics.median(
            timed([sys.executable, "-c", "import emailmw"], env) for _ in range(args.runs)
        )
        result["python_s"] = statistics.median(
            timed([sys.executable, "-c", "pass"], env) for _ in range(args.runs)
        )
    finally:
        subprocess.run([*cli, "daemon", "stop"], env=env, check=False, capture_output=True)
        executor.shutdown()
        ctx.shutdown()
        server.stop()
        shutil.rmtree(state, ignore_errors=True)
    print(f"{'command':<34} {'daemon':>8} {'no daemon':>10}")
    for key, verb in COMMANDS.items():
        plain = result[f"{key.removesuffix('_s')}_nodaemon_s"]
        print(f"{' '.join(verb[:3]):<34} {result[key]:>7.3f}s {plain:>9.3f}s")
    label = "python -c 'import emailmw'"
    print(f"{label:<34} {result['import_s']:>7.3f}s")
    print(f"{'python -c pass':<34} {result['python_s']:>7.3f}s")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
