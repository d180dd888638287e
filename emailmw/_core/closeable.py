"""The base of every resource emailmw hands out: ``close()`` and the context manager.

At the bottom of the layers (it imports nothing of emailmw), so that transports, entities,
faces and tools all share one ``__enter__``/``__exit__``.
"""

from __future__ import annotations

import abc
from types import TracebackType
from typing import Self

__all__ = ["Closeable"]


class Closeable(abc.ABC):
    """A resource with an idempotent :meth:`close`; ``with`` closes it on the way out."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release the resource. Idempotent; thread-safe where the subclass says so."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
