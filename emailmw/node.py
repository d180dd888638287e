"""rclpy's ``rclpy.node``: the :class:`Node` and the protocol its entities share with the
executors (:class:`Executable`)."""

from ._ros.node import (
    Client,
    Executable,
    Node,
    NodeGuardCondition,
    NodePublisher,
    NodeSubscription,
    Rate,
    Service,
    SubscriptionEventCallbacks,
    Timer,
    TimerInfo,
)

__all__ = [
    "Client",
    "Executable",
    "Node",
    "NodeGuardCondition",
    "NodePublisher",
    "NodeSubscription",
    "Rate",
    "Service",
    "SubscriptionEventCallbacks",
    "Timer",
    "TimerInfo",
]
