"""rclpy's ``rclpy.event_handler``: publishers' and subscriptions' event callbacks and the
infos they get (``matched``, ``deadline``, ``message_lost`` and ``incompatible_type`` are
called over email; the rest are accepted: see ``docs/ros-users.md``)."""

from ._ros.events import *  # noqa: F403  (its __all__: rclpy's names)
from ._ros.events import __all__  # noqa: F401
