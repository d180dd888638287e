"""rclpy's ``rclpy.serialization``: a message as ROS 2's CDR bytes and back
(``serialize_message``, ``deserialize_message``); needs the bag extra (rosbags)."""

from ._ros.serialization import deserialize_message, serialize_message

__all__ = ["deserialize_message", "serialize_message"]
