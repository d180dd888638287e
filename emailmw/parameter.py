"""rclpy's ``rclpy.parameter``: :class:`Parameter` and its helpers."""

from ._ros.parameters import Parameter, parameter_dict_from_yaml_file, parameter_value_to_python

__all__ = [
    "Parameter",
    "parameter_dict_from_yaml_file",
    "parameter_value_to_python",
]
