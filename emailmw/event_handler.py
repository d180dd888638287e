"""rclpy's ``rclpy.event_handler``: publishers' and subscriptions' event callbacks and the
infos they get (``matched``, ``deadline``, ``message_lost`` and ``incompatible_type`` are
called over email; the rest are accepted: see ``docs/ros-users.md``)."""

from ._ros.events import (
    IncompatibleTypeInfo,
    PublisherEventCallbacks,
    QoSLivelinessChangedInfo,
    QoSLivelinessLostInfo,
    QoSOfferedDeadlineMissedInfo,
    QoSOfferedIncompatibleQoSInfo,
    QoSPublisherEventType,
    QoSPublisherMatchedInfo,
    QoSRequestedDeadlineMissedInfo,
    QoSRequestedIncompatibleQoSInfo,
    QoSSubscriptionEventType,
    QoSSubscriptionMatchedInfo,
    SubscriptionEventCallbacks,
    UnsupportedEventTypeError,
)

__all__ = [
    "IncompatibleTypeInfo",
    "PublisherEventCallbacks",
    "QoSLivelinessChangedInfo",
    "QoSLivelinessLostInfo",
    "QoSOfferedDeadlineMissedInfo",
    "QoSOfferedIncompatibleQoSInfo",
    "QoSPublisherEventType",
    "QoSPublisherMatchedInfo",
    "QoSRequestedDeadlineMissedInfo",
    "QoSRequestedIncompatibleQoSInfo",
    "QoSSubscriptionEventType",
    "QoSSubscriptionMatchedInfo",
    "SubscriptionEventCallbacks",
    "UnsupportedEventTypeError",
]
