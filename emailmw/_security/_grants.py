"""The grants a received routed email needs of its signer, in each face's own vocabulary
(``docs/security.md``): each face's rules are declared with the face
(:mod:`emailmw._core.faces`); an unknown face needs what no signer has. Pure, no I/O,
thread-safe.
"""

from __future__ import annotations

from .._core.addressing import Envelope
from .._core.faces import Grant, face, grant_name, stem_send_name, unknown_face
from .._core.payloads import REPLY_TYPES

__all__ = [
    "REPLY_TYPES",
    "Grant",
    "grant_name",
    "relay_name",
    "routed_grants",
    "stem_send_name",
]


def routed_grants(envelope: Envelope, body: str, here: str) -> list[Grant] | str:
    """The grants the signer of a routed email needs (``here``: the receiving hub), or
    why the email contradicts itself or names no face (denied whoever signed it)."""
    unknown = unknown_face(envelope.face)
    if unknown is not None:
        return unknown
    return face(envelope.face).needs(envelope, body, here)


def relay_name(envelope: Envelope, here: str) -> str:
    """The ``relay`` grant's name for relaying a routed email: ``/FACE/HUB``, its face and
    the hub it goes to (an empty hub: ``here``)."""
    return grant_name(envelope.face, envelope.to.hub or here)
