"""rclpy's ``rclpy.clock``: clocks (emailmw has no simulated time: ``ROS_TIME`` is the
system clock)."""

from ._ros.time import Clock, ClockType, JumpThreshold, ROSClock

__all__ = [
    "Clock",
    "ClockType",
    "JumpThreshold",
    "ROSClock",
]
