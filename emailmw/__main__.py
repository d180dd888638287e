"""``python -m emailmw`` and the ``emailmw`` console script."""

import sys


def run() -> int:
    """:func:`~emailmw._cli.main`, as the console script runs it; a Ctrl-C at any moment,
    start-up included, is one line (``emailmw: interrupted``, status 130)."""
    try:
        from ._cli import main

        return main()
    except KeyboardInterrupt:
        print("emailmw: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(run())
