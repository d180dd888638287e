"""rclpy's ``rclpy.qos_event`` (its name before Iron): the same names as
:mod:`emailmw.event_handler`."""

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
