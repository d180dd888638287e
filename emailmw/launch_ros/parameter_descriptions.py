"""ROS 2's ``launch_ros.parameter_descriptions``."""

from .._launch.description import ParameterFile

__all__ = ["ParameterFile"]
