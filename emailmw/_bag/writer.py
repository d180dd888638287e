"""The bag recorder's writing process: ``python -m emailmw._bag.writer FD PATH`` (started by
:func:`emailmw._bag.bag.record`; ``FD`` its end of a socket pair)."""

from __future__ import annotations

import sys
from multiprocessing.connection import Connection

from .bag import run_writer


def main() -> None:
    fd, path = int(sys.argv[1]), sys.argv[2]
    run_writer(path, Connection(fd))


if __name__ == "__main__":
    main()
