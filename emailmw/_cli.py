"""The ``emailmw`` command line. Errors are one line on standard error with a non-zero exit
status (2 for usage errors), never a traceback unless ``--debug``."""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ._exceptions import ConfigError, EmailMWError
from ._ros_cli import add_ros_commands, run_ros_command
from ._route_cli import add_route_commands, run_route_command

__all__ = ["main"]


def _conf(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


_CONFIG_HELP = "email.yml (default: EMAILMW_CONFIG_FILE, EMAIL_CONFIG_FILE, ./email.yml, ~/...)"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="emailmw", description="emailmw command line")
    parser.add_argument("--version", action="version", version=f"emailmw {_version()}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    parser.add_argument("--config", help=_CONFIG_HELP)
    # the same options after a command's verb (SUPPRESS: absent there, the one before stands)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", default=argparse.SUPPRESS, help=_CONFIG_HELP)
    common.add_argument(
        "--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks"
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    analyze = commands.add_parser(
        "analyze",
        parents=[common],
        help="traffic analytics of mail archives (Spark)",
        description="Read mail archives (Maildir, mbox, imap[s]:// folder, or an earlier "
        "output directory) and write Parquet tables and report.html to --out.",
    )
    analyze.add_argument("sources", nargs="+", metavar="SOURCE")
    analyze.add_argument("--out", required=True, type=Path, metavar="DIR")
    analyze.add_argument("--master", default="local[*]", help="Spark master URL")
    analyze.add_argument("--since", metavar="T", help="ISO 8601 or epoch seconds")
    analyze.add_argument("--until", metavar="T", help="ISO 8601 or epoch seconds")
    analyze.add_argument("--topic", metavar="GLOB", help="only topics matching GLOB")
    analyze.add_argument(
        "--include-internal",
        action="store_true",
        help="keep emailmw's own topics (/_emailmw/..., the graph) in the tables",
    )
    analyze.add_argument(
        "--conf",
        type=_conf,
        action="append",
        default=[],
        metavar="K=V",
        help="Spark configuration (repeatable)",
    )
    analyze.add_argument(
        "--keystore",
        metavar="DIR",
        default=os.environ.get("EMAILMW_SECURITY_KEYSTORE") or None,
        help="verify signed mail against this keystore (default: EMAILMW_SECURITY_KEYSTORE)",
    )
    analyze.add_argument("--no-report", action="store_true", help="tables only")
    _add_security_commands(commands, common)
    add_route_commands(commands, common)
    add_ros_commands(commands, [common])
    return parser


def _add_security_commands(commands: Any, common: argparse.ArgumentParser) -> None:
    security = commands.add_parser(
        "security",
        parents=[common],
        help="keystores and identities (docs/security.md)",
        description="Create and inspect keystores of Ed25519/X25519 identities. A context "
        "uses one through the security: section or EMAILMW_SECURITY_KEYSTORE and "
        "EMAILMW_SECURITY_IDENTITY.",
    )
    verbs = security.add_subparsers(dest="verb", required=True, metavar="VERB")
    create = verbs.add_parser("create-keystore", help="make an empty keystore in DIR")
    create.add_argument("keystore", metavar="DIR")
    key = verbs.add_parser("create-key", help="make identity NAME in the keystore DIR")
    key.add_argument("keystore", metavar="DIR")
    key.add_argument("name", metavar="NAME")
    key.add_argument("--days", type=float, help="the key expires after this many days")
    listing = verbs.add_parser("list-keys", help="the trusted identities of the keystore DIR")
    listing.add_argument("keystore", metavar="DIR")


def _security(args: argparse.Namespace) -> int:
    from ._security import Keystore

    if args.verb == "create-keystore":
        store = Keystore.create(args.keystore)
        print(f"keystore {store.path}: public/ (trusted keys), private/ (mode 700)")
    elif args.verb == "create-key":
        public = Keystore(args.keystore).create_key(args.name, days=args.days)
        print(f"{public.name} {public.fingerprint} expires {public.expiry_text()}")
    else:
        store = Keystore(args.keystore)
        for public, has_private in store.list_keys():
            private = "private key here" if has_private else "public key only"
            print(f"{public.name}\t{public.fingerprint}\texpires {public.expiry_text()}\t{private}")
        for problem in store.problems:
            print(f"emailmw: warning: {problem}", file=sys.stderr)
    return 0


def _version() -> str:
    from . import __version__

    return __version__


def _analyze(args: argparse.Namespace) -> int:
    try:
        from ._pipeline.analyze import AnalyzeRequest, analyze, parse_time

        # what the spark extra installs, and Spark's Arrow path needs on driver and executors
        wanted = ("pyspark", "pyarrow", "pandas", "numpy", "matplotlib", "bokeh")
        missing = next((name for name in wanted if importlib.util.find_spec(name) is None), None)
    except ImportError as exc:
        missing = exc.name or str(exc)
    if missing:
        raise ConfigError(
            f"analyze needs the spark extra, which is not installed (no module {missing!r}): "
            "pip install 'emailmw[spark]'",
            source="analyze",
        )

    if args.keystore is not None:
        from ._security import Keystore

        Keystore(args.keystore)  # one line now, not in a worker, if it is not one
    request = AnalyzeRequest(
        sources=args.sources,
        out=args.out,
        master=args.master,
        since_ns=parse_time(args.since) if args.since else None,
        until_ns=parse_time(args.until) if args.until else None,
        topic_glob=args.topic,
        include_internal=args.include_internal,
        conf=dict(args.conf),
        config=args.config,
        report=not args.no_report,
        release_spark=True,
        keystore=args.keystore,
    )
    try:
        summary = analyze(request)
    finally:
        from ._pipeline.jvm import stop_session

        stop_session()
    unmeasured = summary["latency_measured"] < summary["publish"] or (
        summary["round_trips_measured"] < summary["answered"]
    )
    coarse = (
        " (the others' delivery times are known only to the second: the report gives bounds)"
        if unmeasured
        else ""
    )
    print(
        f"{summary['publish']} messages, {summary['request']} requests, "
        f"{summary['response']} responses; {summary['foreign']} foreign and "
        f"{summary['malformed']} malformed emails left out\n"
        f"service calls: {summary['calls']} ({summary['answered']} answered, "
        f"{summary['duplicate_responses']} duplicate responses)\n"
        f"latency measurable for {summary['latency_measured']} of {summary['publish']} "
        f"messages, round trip for {summary['round_trips_measured']} of "
        f"{summary['answered']} answered calls{coarse}\n"
        f"publishers: {summary['publishers']} streams, {summary['lost']} lost, "
        f"{summary['duplicated']} duplicated, {summary['out_of_order']} out of order\n"
        f"signatures: {summary['verified']} verified, {summary['signed']} signed but not "
        f"verified (no --keystore), {summary['unsigned']} unsigned, {summary['invalid']} "
        f"invalid, {summary['untrusted']} untrusted, {summary['replayed']} replayed copies; "
        f"{summary['quarantined']} emails in quarantine folders\n"
        f"tables and report in {args.out} ({summary['seconds']} s)"
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "analyze":
            return _analyze(args)
        if args.command == "security":
            return _security(args)
        if args.command in ("gateway", "stem"):
            return run_route_command(args)
        return run_ros_command(args)
    except KeyboardInterrupt:
        print("emailmw: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader left (``emailmw topic echo ... | head``): end quietly, as cat does;
        # stdout goes to /dev/null so the interpreter's final flush cannot fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (EmailMWError, OSError, ImportError, KeyError) as exc:
        if args.debug:
            raise
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"emailmw: error: {message}", file=sys.stderr)
        return 1
