"""floctrl's vocabulary over emailmw's routing core (``docs/addressing.md``, "floctrl"):
nodes and supernodes of orchestras, ``subscribe_to``/``unsubscribe_from``/``publish``,
immutable messages."""

from ._core.payloads import Message
from ._faces.floctrl import Node, Subscriber, Supernode

__all__ = ["Message", "Node", "Subscriber", "Supernode"]
