"""``python -m emailmw`` and the ``emailmw`` console script."""

import gc
import sys

from ._cli import main


def run() -> int:
    """:func:`~emailmw._cli.main` for a process that exits right after it.

    The objects left are frozen first (``gc.freeze``), so the interpreter's final
    collections skip them: after ``emailmw analyze`` (Spark, pandas, matplotlib loaded)
    they would only collect what the exit frees anyway.
    """
    code = main()
    gc.freeze()
    return code


if __name__ == "__main__":
    sys.exit(run())
