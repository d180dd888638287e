"""floctrl's vocabulary over emailmw's routing core (``docs/addressing.md``, "floctrl"):
nodes and supernodes of orchestras, ``subscribe_to``/``unsubscribe_from``/``publish``,
immutable messages."""

from ._floctrl import Node, Subscriber, Supernode
from ._payloads import Message

__all__ = ["Message", "Node", "Subscriber", "Supernode"]
