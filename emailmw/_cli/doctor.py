"""``emailmw doctor [--report]``: ros2 doctor's idea for a mail account (``_doctor``)."""

from __future__ import annotations

import argparse

from .._doctor import doctor as _doctor
from .common import Commands

__all__ = ["register"]


def register(commands: Commands, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser(
        "doctor",
        parents=[common],
        help="check the configuration, servers, TLS, login, clock, keys and graph",
        description=(
            "Check what emailmw needs: the configuration, the SMTP and IMAP servers (name, "
            "port, TLS certificate, login), the account's folders and quota, this machine's "
            "clock against the server's, the keystore and permissions file, QoS in the "
            "graph and the spool. One line a check: PASS, WARN or FAIL with what to do. "
            "Exit status 1 when a check failed."
        ),
    )
    parser.add_argument(
        "--report", action="store_true", help="print a block to paste in a bug report (no secrets)"
    )
    parser.add_argument("--include-warnings", action="store_true", help="exit 1 on warnings too")
    parser.set_defaults(run=doctor)


def doctor(args: argparse.Namespace) -> int:
    checks, options = _doctor.run(getattr(args, "config", None))
    if args.report:
        print(_doctor.report(checks, options))
    else:
        for check in checks:
            print(check.line(), flush=True)
        print(_doctor.summary(checks))
    statuses = {check.status for check in checks}
    failing = {_doctor.Status.FAIL} | ({_doctor.Status.WARN} if args.include_warnings else set())
    return 1 if statuses & failing else 0
