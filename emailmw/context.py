"""rclpy's ``rclpy.context``: :class:`Context`, what ``init`` makes and every node and
entity belongs to (here: a transport, its receiving thread and its routing tables)."""

from ._delivery.context import Context

__all__ = ["Context"]
