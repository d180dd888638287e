"""The action types of ``example_interfaces``, loaded from the interface files of
``emailmw/share/example_interfaces/action`` when this module is imported."""

from typing import Any

from .._core.interfaces import package

_types: Any = package("example_interfaces").action
Fibonacci = _types.Fibonacci

__all__ = [
    "Fibonacci",
]
