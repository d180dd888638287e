"""floctrl's vocabulary over emailmw's routing core (``docs/addressing.md``, "floctrl"):
nodes and supernodes of orchestras, ``subscribe_to``/``unsubscribe_from``/``publish``,
immutable messages."""

from ._floctrl import Message, Node, Subscriber, Supernode

__all__ = ["Message", "Node", "Subscriber", "Supernode"]
