"""rclpy's ``rclpy.qos_event`` (its name before Iron): the same names as
:mod:`emailmw.event_handler`."""

from ._ros.events import *  # noqa: F403  (its __all__: rclpy's names)
from ._ros.events import __all__  # noqa: F401
