"""Stem's vocabulary over emailmw's routing core (``docs/addressing.md``, "Stem").

>>> from emailmw import stem
>>> class Status(stem.Cell):
...     def status_cmd(self, msg):
...         return "all well"
"""

from ._addressing import Address
from ._payloads import StemMessage
from ._stem import Cell

__all__ = ["Address", "Cell", "StemMessage"]
