"""ROS 2's ``launch.launch_description_sources`` (and launch_xml's and launch_yaml's
sources): a launch file to include, Python, XML or YAML, by its path."""

from .._launch.description import (
    AnyLaunchDescriptionSource,
    FrontendLaunchDescriptionSource,
    PythonLaunchDescriptionSource,
    XMLLaunchDescriptionSource,
    YAMLLaunchDescriptionSource,
)

__all__ = [
    "AnyLaunchDescriptionSource",
    "FrontendLaunchDescriptionSource",
    "PythonLaunchDescriptionSource",
    "XMLLaunchDescriptionSource",
    "YAMLLaunchDescriptionSource",
]
