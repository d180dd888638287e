"""rclpy's ``rclpy.serialization`` (public as ``emailmw.serialization``; raw subscriptions
and ``publish(bytes)`` use it too): a message as CDR bytes, what ROS 2 puts on the wire and
in bags, and back; byte for byte what rclpy gives for the same message (tested against
rosbags' own ROS 2 type store). Needs the bag extra (``pip install 'emailmw[bag]'``):
a :class:`~emailmw.ConfigError` says so."""

from __future__ import annotations

import functools
import importlib.util
from typing import TYPE_CHECKING, Any, TypeVar

from .._core.errors import ConfigError
from .._core.interfaces import from_data, to_data, type_name

if TYPE_CHECKING:
    from .._core.cdr import BagTypes

__all__ = ["cdr_types", "deserialize_message", "serialize_message"]

T = TypeVar("T")


@functools.cache
def cdr_types() -> BagTypes:
    """The CDR type store (once); a :class:`~emailmw.ConfigError` without the bag extra."""
    if importlib.util.find_spec("rosbags") is None:
        raise ConfigError(
            "CDR serialization needs the bag extra (rosbags): pip install 'emailmw[bag]'",
            source="emailmw.serialization",
        )
    from .._core.cdr import BagTypes

    return BagTypes()


def serialize_message(message: Any) -> bytes:
    """``message`` (an instance of an emailmw message type) as CDR bytes."""
    return cdr_types().to_cdr(type_name(message), to_data(message))


def deserialize_message(serialized_message: bytes, message_type: type[T]) -> T:
    """The message of type ``message_type`` that ``serialized_message`` (CDR) holds."""
    data = cdr_types().from_cdr(type_name(message_type), serialized_message)
    return from_data(message_type, data)
