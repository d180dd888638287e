"""ROS 2's ``launch_ros.substitutions``."""

from .._launch.description import FindPackagePrefix, FindPackageShare

__all__ = ["FindPackagePrefix", "FindPackageShare"]
