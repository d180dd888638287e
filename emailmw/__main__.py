"""``python -m emailmw`` and the ``emailmw`` console script."""

import sys

from ._cli import main


def run() -> int:
    """:func:`~emailmw._cli.main`, as the console script runs it."""
    return main()


if __name__ == "__main__":
    sys.exit(run())
