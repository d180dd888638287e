"""A CPU squeeze: busy processes beside a command, as a shared robot computer's other work
takes the cores from the processes that matter (``make soak``, and a test run that checks
that nothing depends on a quiet machine).

    python -m emailmw.testing.squeeze [--hogs N] -- COMMAND [ARG ...]

Runs ``COMMAND`` with ``N`` (default: the number of cores) processes that spin on the CPU
at the same priority beside it, and ends them when it ends (also when this process is
interrupted); exits with the command's status.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence

__all__ = ["main", "squeezed"]

_SPIN = "while True: pass"


@contextlib.contextmanager
def squeezed(hogs: int) -> Iterator[None]:
    """``hogs`` processes spinning on the CPU while the block runs."""
    started = [
        subprocess.Popen([sys.executable, "-c", _SPIN], stdin=subprocess.DEVNULL)
        for _ in range(hogs)
    ]
    try:
        yield
    finally:
        for process in started:
            process.kill()
        for process in started:
            process.wait()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m emailmw.testing.squeeze",
        description="run a command beside processes that keep the CPU busy",
    )
    parser.add_argument("--hogs", type=int, default=os.cpu_count() or 2, metavar="N",
                        help="busy processes (default: one per core)")  # fmt: skip
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARG ...]")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("name the command to run after --")
    if args.hogs < 0:
        parser.error("--hogs is 0 or more")
    print(f"[squeeze] {args.hogs} busy process(es) beside: {' '.join(command)}",
          file=sys.stderr, flush=True)  # fmt: skip
    with squeezed(args.hogs):
        child = subprocess.Popen(command)
        try:
            return child.wait()
        except KeyboardInterrupt:
            child.send_signal(signal.SIGINT)
            return child.wait()


if __name__ == "__main__":
    sys.exit(main())
