"""Stem's vocabulary over emailmw's routing core (``docs/addressing.md``, "Stem").

>>> from emailmw import stem
>>> class Status(stem.Cell):
...     def status_cmd(self, msg):
...         return "all well"
"""

from ._core.addressing import Address
from ._core.payloads import StemMessage
from ._faces.stem import Cell

__all__ = ["Address", "Cell", "StemMessage"]
