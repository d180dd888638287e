"""One process of a matrix combination (``tests/email/test_matrix.py``).

    python -m tests.email.matrix_peer pub SPEC.json [--from I] [--run R]
        publishes messages I.. (SPEC["count"] in all): a ROS publisher of
        std_msgs/String on /matrix (path "direct"), or a floctrl supernode to /A/sub
        (path "gateway"); prints {"i": i} once publish() returned for each, then
        {"done": true}, and stays until stdin closes (its outbox sends meanwhile). R (0 if
        not given) tells this process's messages from an earlier one's: a process started
        after one was killed publishes again the message whose publish() had returned
        there but whose line was not printed yet (the application cannot know), and that
        is a second message, not a repeat
    python -m tests.email.matrix_peer sub SPEC.json
        a subscriber of that (a delivery group's member when SPEC["mode"] says so) that
        prints {"i", "run", "redelivered", "count", "hwm"} for each message it processes and
        {"raised": i} when its callback raises (SPEC["raise_every"]: on the first delivery
        of every Nth message); "hwm": its peak resident memory so far, in MB

Prints ``ready`` once its context is up. Bodies are "m<i>.<R>" padded to SPEC["size"] bytes.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
from typing import Any

import yaml

import emailmw
from emailmw import floctrl, std_msgs

_PRINTING = threading.Lock()


def _say(data: Any) -> None:
    with _PRINTING:
        sys.stdout.write((data if isinstance(data, str) else json.dumps(data)) + "\n")
        sys.stdout.flush()


def _hwm_mb() -> float:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM")) / 1000


def body_of(i: int, size: int, run: int = 0) -> str:
    text = f"m{i}.{run}"
    return text if size <= len(text) else text + "\n" + "x" * (size - len(text) - 1)


def index_of(body: str) -> tuple[int, int]:
    """(i, R) of a body made by :func:`body_of`."""
    i, run = body.split("\n", 1)[0][1:].split(".")
    return int(i), int(run)


def publish(spec: dict[str, Any], start: int, run: int) -> None:
    with emailmw.Context(spec["config"]) as ctx:
        for feature in spec.get("wait_for", ()):
            if not ctx.wait_for_readers(feature, 60):
                print(f"readers never said they read {feature}", file=sys.stderr)
        guarantee = spec.get("guarantee")
        if spec["path"] == "gateway":
            supernode = floctrl.Supernode("A", nodes={"sub": "bsub"}, orchestras={}, context=ctx)
            send = lambda i: supernode.publish(  # noqa: E731
                floctrl.Message(i, "/A/sub", "work", body_of(i, spec["size"], run))
            )
        else:
            pub = emailmw.Publisher("/matrix", context=ctx, guarantee=guarantee,
                                    compress="zstd" if spec.get("compress") else None)  # fmt: skip
            send = lambda i: pub.publish(  # noqa: E731
                yaml.safe_dump({"data": body_of(i, spec["size"], run)}, width=1 << 30),
                {"Message-Type": "std_msgs/msg/String", "Matrix-Index": str(i)},
            )
        _say("ready")
        for i in range(start, spec["count"]):
            send(i)
            _say({"i": i})
        _say({"done": True})
        sys.stdin.read()


def subscribe(spec: dict[str, Any]) -> None:
    # (on stderr, for a failure's report: what the group members did, who held what)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("emailmw.groups").setLevel(logging.INFO)
    raise_every = spec.get("raise_every", 0)
    with emailmw.Context(spec["config"]) as ctx:
        settings = emailmw.GroupSettings(**spec.get("group_settings", {}))
        mode, group = spec.get("mode", "topic"), spec.get("group")

        def process(body: str, redelivered: bool, count: int) -> None:
            i, run = index_of(body)
            if raise_every and i % raise_every == raise_every - 1 and count == 1:
                _say({"raised": i})
                raise RuntimeError(f"failed on message {i}")
            _say({"i": i, "run": run, "redelivered": redelivered, "count": count,
                  "hwm": _hwm_mb()})  # fmt: skip

        if spec["path"] == "gateway":
            node = floctrl.Node("A", "sub", supernode_hub="a", context=ctx)

            def on_message(msg: floctrl.Message) -> None:
                process(msg.body, msg.redelivered, 2 if msg.redelivered else 1)

            node.subscribe_to("work", on_message, mode=mode, group=group,
                              group_settings=settings)  # fmt: skip
            _say("ready")
            threading.Event().wait()
        node_ = emailmw.Node("listener", context=ctx)

        def callback(msg: Any, info: emailmw.MessageInfo) -> None:
            process(msg.data, info.redelivered, info.delivery_count)

        node_.create_subscription(std_msgs.msg.String, "/matrix", callback, 100, mode=mode,
                                  group=group, group_settings=settings)  # fmt: skip
        _say("ready")
        executor = emailmw.executors.SingleThreadedExecutor(context=ctx)
        executor.add_node(node_)
        while ctx.ok():
            try:
                executor.spin()
            except RuntimeError as exc:  # a callback that raised (rclpy: out of spin)
                if "failed on message" not in str(exc):
                    raise


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=["pub", "sub"])
    parser.add_argument("spec")
    parser.add_argument("--from", dest="start", type=int, default=0)
    parser.add_argument("--run", type=int, default=0)
    args = parser.parse_args()
    with open(args.spec) as source:
        spec = json.load(source)
    if args.role == "pub":
        publish(spec, args.start, args.run)
    else:
        subscribe(spec)


if __name__ == "__main__":
    main()
