"""``emailmw bag record|play|info|export``: rosbag2 bags (MCAP) that ROS tools open,
recorded live, played back, or exported after the fact from a mail archive."""

from __future__ import annotations

import argparse
import importlib.util
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from .._core.signalsafe import set_on_signals
from .._delivery.context import Context
from .common import CommandError, Commands, resolve, verbs, with_account

__all__ = ["register"]


def register(commands: Commands, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser("bag", help="bags: record, play, info, export (rosbag2, MCAP)")
    add = verbs(parser, common)
    p = add("record", run=record, help="record topics into a bag")
    p.add_argument("topics", nargs="*", metavar="TOPIC")
    p.add_argument("-a", "--all", action="store_true", help="every topic (new ones too)")
    p.add_argument(
        "-o", "--output", type=Path, metavar="DIR",
        help="its directory (default: rosbag2_YYYY_MM_DD-HH_MM_SS, as ros2's)",
    )  # fmt: skip
    p.add_argument("-s", "--storage", default="mcap", choices=["mcap"])
    p.add_argument("--duration", type=float, metavar="S", help="stop after S seconds")
    p.add_argument("--count", type=int, metavar="N", help="stop after N messages")
    p = add("play", run=play, help="publish a bag's messages with their timing")
    p.add_argument("bag", type=Path, metavar="DIR")
    p.add_argument("-r", "--rate", type=float, default=1.0, help="speed (default 1)")
    p.add_argument("-l", "--loop", action="store_true", help="play again and again")
    p.add_argument("--topics", nargs="+", default=[], metavar="TOPIC")
    add("info", run=info, help="what a bag holds").add_argument("bag", type=Path, metavar="DIR")
    p = add("export", run=export, help="a bag of what a mail archive holds")
    p.add_argument("sources", nargs="+", metavar="SOURCE", help="Maildir, mbox or imap[s]:// URL")
    p.add_argument("-o", "--output", required=True, type=Path, metavar="DIR")
    p.add_argument("--include-internal", action="store_true", help="emailmw's own topics too")


def _need_extra() -> None:
    missing = [n for n in ("mcap", "rosbags", "numpy") if importlib.util.find_spec(n) is None]
    if missing:
        raise CommandError(
            f"bags need the bag extra, which is not installed (no module {missing[0]!r}): "
            "pip install 'emailmw[bag]'"
        )


def _stopping() -> threading.Event:
    """An event SIGINT and SIGTERM set (instead of interrupting the work)."""
    stop = threading.Event()
    set_on_signals(stop, (signal.SIGINT, signal.SIGTERM))
    return stop


def default_bag_name(now: float | None = None) -> Path:
    """ros2 bag record's default: ``rosbag2_YYYY_MM_DD-HH_MM_SS`` (local time), here."""
    return Path(time.strftime("rosbag2_%Y_%m_%d-%H_%M_%S", time.localtime(now)))


def record(args: argparse.Namespace) -> int:
    _need_extra()
    if not args.all and not args.topics:
        raise CommandError("name the topics to record, or record them all with -a")
    if args.output is None:
        args.output = default_bag_name()
    if args.output.exists():
        raise CommandError(f"-o {args.output}: exists already; give a new directory")
    return _record(args)


@with_account
def _record(context: Context, args: argparse.Namespace) -> int:
    from .._bag.bag import record as record_bag

    topics = [resolve(t) for t in args.topics]
    print(f"recording into {args.output} (Ctrl-C stops)", file=sys.stderr, flush=True)
    count = record_bag(
        context,
        args.output,
        topics,
        all_topics=args.all,
        stop=_stopping(),
        count=args.count,
        duration=args.duration,
        on_subscribed=lambda topic: print(
            f"Subscribed to topic '{topic}'", file=sys.stderr, flush=True
        ),
    )
    print(f"recorded {count} messages into {args.output}", file=sys.stderr)
    return 0


def play(args: argparse.Namespace) -> int:
    _need_extra()
    if not (args.bag / "metadata.yaml").is_file():
        raise CommandError(f"{args.bag}: not a bag (no metadata.yaml)")
    return _play(args)


@with_account
def _play(context: Context, args: argparse.Namespace) -> int:
    from .._bag.bag import play as play_bag

    sent = play_bag(
        context,
        args.bag,
        rate=args.rate,
        loop=args.loop,
        topics=[resolve(t) for t in args.topics],
        stop=_stopping(),
    )
    print(f"published {sent} messages", file=sys.stderr)
    return 0


def info(args: argparse.Namespace) -> int:
    _need_extra()
    from .._bag.bag import bag_info

    print(bag_info(args.bag).text())
    return 0


def _archive(sources: list[str], staging: Path, config: str | None) -> list[dict[str, Any]]:
    """The units of the archives, listed as ``emailmw analyze`` lists them."""
    from .._pipeline.landing import Source, list_units, maildirs

    listed = []
    for text in sources:
        if text.startswith(("imap://", "imaps://")):
            from .._pipeline.imap_source import stage_imap_folder

            staged = stage_imap_folder(text, staging, config=config, progress=lambda *_: None)
            listed.append(Source("maildir", staged, text))
            continue
        path = Path(text).expanduser()
        if not path.exists():
            raise CommandError(f"{text}: no such file or directory")
        if path.is_dir():
            if next(maildirs(path), None) is None:
                raise CommandError(f"{text}: no Maildir here (a directory with cur/ and new/)")
            listed.append(Source("maildir", path.resolve(), text))
        else:
            listed.append(Source("mbox", path.resolve(), text))
    units: list[dict[str, Any]] = list_units(listed).to_pylist()
    return units


def export(args: argparse.Namespace) -> int:
    _need_extra()
    if importlib.util.find_spec("pyarrow") is None:
        raise CommandError(
            "bag export reads archives as analyze does: pip install 'emailmw[spark]'"
        )
    if args.output.exists():
        raise CommandError(f"-o {args.output}: exists already; give a new directory")
    from .._bag.bag import export as export_bag

    staging = args.output.with_name(args.output.name + ".staging")
    written, left = export_bag(
        _archive(args.sources, staging, args.config),
        args.output,
        include_internal=args.include_internal,
    )
    print(
        f"exported {written} messages into {args.output} ({left} emails left out: not "
        "published messages, or not readable)",
        file=sys.stderr,
    )
    return 0
