"""rclpy's ``rclpy.subscription``: :class:`Subscription`, the typed subscription
``Node.create_subscription`` returns (``emailmw.Subscription`` is the untyped one of the
core API)."""

from ._ros.node import NodeSubscription as Subscription

__all__ = ["Subscription"]
