"""rclpy's ``rclpy.parameter_client``: :class:`AsyncParameterClient`, another node's
parameters through its parameter services."""

from ._ros.parameter_client import AsyncParameterClient

__all__ = ["AsyncParameterClient"]
