"""The routed faces, each declared once (``docs/addressing.md``, ``docs/security.md``): its
name (the ``Route-Face`` header), the verbs of its permission grants (and which of them
name plain names rather than paths), and what a routed email of it needs granted of its
signer, read from its envelope and its payload by the face's own reader. Pure, no I/O.

Everything that tells faces apart reads this registry: the envelope check (an email whose
``Route-Face`` names no face here is refused with the reason), the grants (``_security``),
the permissions file's verbs, the faces' endpoints (``FaceEndpoint`` subclasses name a
registered face) and the command line. An unknown face is an error, never another face's
rules. A new face is one :func:`register_face` call (its endpoint class aside).

The rules of the three faces:

* **Stem**: ``stem.as`` on the cell it comes from (``/hub/cell``, ``Route-From``); unless
  it is a reply (``response``, ``error`` or ``msg_ack`` carrying a ``reply_id``: the cell
  that asked binds it to its request), ``stem.send`` on what it asks of the cell it goes
  to: ``/hub/cell/TYPE``, ``/hub/cell/cmd/CMD`` for a command.
* **YMP**: ``ymp.as`` on each message's ``sender.host`` (which must be the ``Route-From``
  hub: the signed envelope, not a header the mail server sets, says who speaks), and for
  a request ``ymp.send`` on ``/host/protocol/service/action``.
* **floctrl**: ``floctrl.as`` on the path it comes from (``/orch/node`` or ``/orch``),
  ``floctrl.to`` on the message's address, ``floctrl.topics`` on its topic.

A payload the face cannot read needs only the ``as`` grant: the face refuses it.
Registering happens at import; reading is thread-safe.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from .addressing import FACE_NAME, Address, Envelope
from .errors import InvalidArgumentError, RoutingError
from .payloads import REPLY_TYPES, YmpRequest, read_message, read_stem, read_ymp_packet

__all__ = [
    "Face",
    "Grant",
    "face",
    "face_names",
    "grant_name",
    "register_face",
    "stem_send_name",
    "unknown_face",
]

#: a grant: (``face.verb``, the name it is granted on)
Grant = tuple[str, str]
#: what a routed email of a face needs granted: (envelope, body, receiving hub) -> grants,
#: or why the email contradicts itself (denied whoever signed it)
Needs = Callable[[Envelope, str, str], "list[Grant] | str"]


@dataclass(frozen=True, slots=True)
class Face:
    """One routed face: ``name`` (``Route-Face``), its permission ``verbs`` (``stem:
    {send: [...], as: [...]}`` in a permissions file), the verbs whose patterns are
    ``plain`` names (no leading ``/``), and ``needs``: what an email of it needs granted."""

    name: str
    verbs: tuple[str, ...]
    needs: Needs
    plain: frozenset[str] = frozenset()


_FACES: dict[str, Face] = {}


def register_face(declared: Face) -> Face:
    """Add ``declared`` to the registry (once per name)."""
    if not FACE_NAME.fullmatch(declared.name):
        raise InvalidArgumentError(f"a face's name is a short lowercase word: {declared.name!r}")
    if declared.name in _FACES:
        raise InvalidArgumentError(f"face {declared.name!r} is registered already")
    if not declared.verbs or not declared.plain <= set(declared.verbs):
        raise InvalidArgumentError(f"face {declared.name!r}: plain verbs must be among its verbs")
    _FACES[declared.name] = declared
    return declared


def face_names() -> tuple[str, ...]:
    """The registered faces' names, sorted."""
    return tuple(sorted(_FACES))


def unknown_face(name: str) -> str | None:
    """Why ``name`` is no face (None when it is one)."""
    if name in _FACES:
        return None
    return f"Route-Face {name[:20]!r} is not one of {', '.join(face_names())}"


def face(name: str) -> Face:
    """The face ``name``; :class:`~emailmw.RoutingError` when there is none."""
    found = _FACES.get(name)
    if found is None:
        raise RoutingError(unknown_face(name) or name)
    return found


def grant_name(*parts: str) -> str:
    """``/a/b/c`` from parts, a ``/`` (and ``%``) inside a part escaped so that each part
    stays one name token for the wildcards."""
    return "".join("/" + p.replace("%", "%25").replace("/", "%2F") for p in parts)


def stem_send_name(to: Address, here: str, type_: str, cmd: str | None) -> str:
    """The ``stem.send`` name of a message of ``type_`` (``cmd``) to ``to`` (an empty hub
    is hub ``here``)."""
    hub = to.hub or here
    if type_ == "cmd" and cmd:
        return grant_name(hub, to.name, "cmd", cmd)
    return grant_name(hub, to.name, type_)


def _stem_needs(envelope: Envelope, body: str, here: str) -> list[Grant] | str:
    sender = envelope.from_
    needs: list[Grant] = [("stem.as", grant_name(sender.hub or here, sender.name))]
    stem = read_stem(body, envelope)
    if isinstance(stem, str) or (stem.type in REPLY_TYPES and stem.reply_id is not None):
        return needs
    needs.append(("stem.send", stem_send_name(envelope.to, here, stem.type, stem.cmd)))
    return needs


def _ymp_needs(envelope: Envelope, body: str, here: str) -> list[Grant] | str:
    sender = envelope.from_
    found = read_ymp_packet(body)
    if isinstance(found, str):
        return [("ymp.as", sender.hub or here)]
    needs: list[Grant] = []
    for message in found:
        if message.sender_host != (sender.hub or here):
            return (
                f"YMP sender.host {message.sender_host!r} is not the hub it comes from "
                f"(Route-From {sender})"
            )
        needs.append(("ymp.as", message.sender_host))
        if isinstance(message, YmpRequest):
            name = grant_name(message.host, message.protocol, message.service, message.action)
            needs.append(("ymp.send", name))
    return needs


def _floctrl_needs(envelope: Envelope, body: str, here: str) -> list[Grant] | str:
    needs: list[Grant] = [("floctrl.as", envelope.from_.name)]
    routed = read_message(body)
    if not isinstance(routed, str):
        needs += [("floctrl.to", routed.address), ("floctrl.topics", routed.topic)]
    return needs


STEM: Final = register_face(Face("stem", ("send", "as"), _stem_needs))
YMP: Final = register_face(Face("ymp", ("send", "as"), _ymp_needs, frozenset({"as"})))
FLOCTRL: Final = register_face(
    Face("floctrl", ("as", "to", "topics"), _floctrl_needs, frozenset({"topics"}))
)
