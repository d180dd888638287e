"""rclpy's ``rclpy.exceptions``, under emailmw's one exception tree
(:class:`~emailmw.EmailMWError`)."""

from ._core.errors import ContextNotInitializedError as NotInitializedException
from ._core.errors import (
    ExternalShutdownException,
    InvalidParameterException,
    InvalidParameterTypeException,
    InvalidParameterValueException,
    ParameterAlreadyDeclaredException,
    ParameterException,
    ParameterImmutableException,
    ParameterNotDeclaredException,
    ParameterUninitializedException,
    ROSInterruptException,
)
from ._core.errors import InvalidNameError as NameValidationException

__all__ = [
    "ExternalShutdownException",
    "InvalidParameterException",
    "InvalidParameterTypeException",
    "InvalidParameterValueException",
    "NameValidationException",
    "NotInitializedException",
    "ParameterAlreadyDeclaredException",
    "ParameterException",
    "ParameterImmutableException",
    "ParameterNotDeclaredException",
    "ParameterUninitializedException",
    "ROSInterruptException",
]
