"""The grants a received routed email needs of its signer, in each face's own vocabulary
(``docs/security.md``): pure functions over an envelope and a body, no I/O, thread-safe.

* **Stem**: ``stem.as`` on the cell it comes from (``/hub/cell``, ``Route-From``); unless
  it is a reply (``response``, ``error`` or ``msg_ack`` carrying a ``reply_id``: the cell
  that asked binds it to its request), ``stem.send`` on what it asks of the cell it goes
  to: ``/hub/cell/TYPE``, ``/hub/cell/cmd/CMD`` for a command.
* **YMP**: ``ymp.as`` on each message's ``sender.host`` (which must be the ``Route-From``
  hub: the signed envelope, not a header the mail server sets, says who speaks), and for
  a request ``ymp.send`` on ``/host/protocol/service/action``.
* **floctrl**: ``floctrl.as`` on the path it comes from (``/orch/node`` or ``/orch``),
  ``floctrl.to`` on the message's address, ``floctrl.topics`` on its topic.

A payload the face cannot read needs only the ``as`` grant here: the face refuses it.
"""

from __future__ import annotations

from .._core.addressing import Address, Envelope
from .._core.payloads import REPLY_TYPES, YmpRequest, read_message, read_stem, read_ymp_packet

__all__ = ["REPLY_TYPES", "grant_name", "routed_grants", "stem_send_name"]

Grant = tuple[str, str]


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


def routed_grants(envelope: Envelope, body: str, here: str) -> list[Grant] | str:
    """The grants the signer of a routed email needs (``here``: the receiving hub), or
    why the email contradicts itself (denied whoever signed it)."""
    sender = envelope.from_
    if envelope.face == "stem":
        needs: list[Grant] = [("stem.as", grant_name(sender.hub or here, sender.name))]
        stem = read_stem(body, envelope)
        if isinstance(stem, str) or (stem.type in REPLY_TYPES and stem.reply_id is not None):
            return needs
        needs.append(("stem.send", stem_send_name(envelope.to, here, stem.type, stem.cmd)))
        return needs
    if envelope.face == "ymp":
        found = read_ymp_packet(body)
        if isinstance(found, str):
            return [("ymp.as", sender.hub or here)]
        needs = []
        for message in found:
            if message.sender_host != (sender.hub or here):
                return (
                    f"YMP sender.host {message.sender_host!r} is not the hub it comes from "
                    f"(Route-From {sender})"
                )
            needs.append(("ymp.as", message.sender_host))
            if isinstance(message, YmpRequest):
                name = grant_name(message.host, message.protocol, message.service,
                                  message.action)  # fmt: skip
                needs.append(("ymp.send", name))
        return needs
    needs = [("floctrl.as", sender.name)]
    routed = read_message(body)
    if not isinstance(routed, str):
        needs += [("floctrl.to", routed.address), ("floctrl.topics", routed.topic)]
    return needs
