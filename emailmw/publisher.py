"""rclpy's ``rclpy.publisher``: :class:`Publisher`, the typed publisher
``Node.create_publisher`` returns (``emailmw.Publisher`` is the untyped one of the core
API)."""

from ._ros.node import NodePublisher as Publisher

__all__ = ["Publisher"]
