"""Each face's payload: the JSON body of its routed mail, read strictly and written
(``docs/addressing.md``). Pure: no I/O, thread-safe. The faces (``_stem``, ``_ymp``,
``_floctrl``) read their mail with these, and so do the grants a routed email needs
(``_security/_grants``): one reader per face, in one place.

* **Stem**: :class:`StemMessage` (``to``, ``from``, ``reply`` and ``orig`` come from the
  envelope; ``type``/``cmd``/``status``/``data``/``ack_req``/``msg_id``/``reply_id`` from
  the body), :func:`read_stem`;
* **floctrl**: :class:`Message` (``timestamp``, ``address``, ``topic``, ``body``),
  :func:`read_message`;
* **YMP**: :class:`YmpRequest` and :class:`YmpAnswer`, validated strictly,
  :func:`read_ymp` and :func:`read_ymp_packet` (one message, or a packet).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any, Final

from .addressing import Address, Envelope
from .types import RoutedInfo

__all__ = [
    "MSG_ID_WRAP",
    "REPLY_TYPES",
    "Message",
    "StemMessage",
    "YmpAnswer",
    "YmpRequest",
    "is_msg_id",
    "read_message",
    "read_stem",
    "read_ymp",
    "read_ymp_packet",
]

# ----------------------------------------------------------------------------- Stem

#: ``msg_id`` and ``reply_id`` are below this
MSG_ID_WRAP: Final = 2**31
#: Stem message types that answer an earlier message (with its ``reply_id``)
REPLY_TYPES: Final = frozenset({"response", "error", "msg_ack"})
_KEYS: Final = frozenset({"type", "cmd", "status", "data", "ack_req", "msg_id", "reply_id"})


@dataclass(frozen=True, slots=True)
class StemMessage:
    """One Stem message. ``msg_id`` is set when it is sent (wrapping at 2**31);
    ``reply_id`` on a reply is the ``msg_id`` it answers; ``info`` on a received one."""

    to: Address
    from_: Address
    type: str = "data"
    cmd: str | None = None
    status: str | None = None
    data: Any = None
    ack_req: bool = False
    reply: Address | None = None
    orig: Address | None = None
    msg_id: int = 0
    reply_id: int | None = None
    info: RoutedInfo | None = field(default=None, compare=False)
    message_id: str | None = field(default=None, compare=False)

    @property
    def reply_to(self) -> Address:
        """Where replies go: ``reply``, else ``from``."""
        return self.reply or self.from_

    def body(self) -> str:
        content = {"type": self.type, "msg_id": self.msg_id}
        for key in ("cmd", "status", "data", "reply_id"):
            value = getattr(self, key)
            if value is not None:
                content[key] = value
        if self.ack_req:
            content["ack_req"] = True
        return json.dumps(content, ensure_ascii=False, separators=(",", ":"))

    def envelope(self) -> Envelope:
        return Envelope(self.to, self.from_, "stem", self.reply, self.orig)


def is_msg_id(value: object) -> bool:
    """Whether ``value`` can be a Stem ``msg_id`` (an int from 0 to 2**31-1)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < MSG_ID_WRAP


def read_stem(
    body: str,
    envelope: Envelope,
    info: RoutedInfo | None = None,
    message_id: str | None = None,
) -> StemMessage | str:
    """A routed Stem email's body (with its ``envelope``) as a :class:`StemMessage`, or why
    it is not one."""
    try:
        content = json.loads(body)
    except (ValueError, RecursionError) as exc:
        return f"not JSON: {exc}"
    if not isinstance(content, dict):
        return "a Stem message's content is a JSON object"
    extra = sorted(set(content) - _KEYS)
    if extra:
        return f"unexpected content key{'s' if len(extra) > 1 else ''}: {', '.join(extra)}"
    type_ = content.get("type")
    if not isinstance(type_, str) or not type_.isidentifier():
        return "type must be a non-empty string that can name a method (letters, _, digits)"
    cmd = content.get("cmd")
    if type_ == "cmd" and (not isinstance(cmd, str) or not cmd.isidentifier()):
        return "a cmd message needs cmd, a string that can name a method"
    status = content.get("status")
    if type_ == "status" and (not isinstance(status, str) or not status):
        return "a status message needs status, a non-empty string"
    if (cmd is not None and not isinstance(cmd, str)) or (
        status is not None and not isinstance(status, str)
    ):
        return "cmd and status must be strings"
    ack_req = content.get("ack_req", False)
    msg_id = content.get("msg_id", 0)
    reply_id = content.get("reply_id")
    if not isinstance(ack_req, bool):
        return "ack_req must be true or false"
    if not is_msg_id(msg_id) or not (reply_id is None or is_msg_id(reply_id)):
        return "msg_id and reply_id must be integers from 0 to 2**31-1"
    env = envelope
    return StemMessage(env.to, env.from_, type_, cmd, status, content.get("data"), ack_req,
                       env.reply, env.orig, msg_id, reply_id, info, message_id)  # fmt: skip


# ----------------------------------------------------------------------------- floctrl


@dataclass(frozen=True, slots=True)
class Message:
    """An immutable floctrl message: ``timestamp`` (ms since the epoch, unless a topic
    says otherwise), ``address``, ``topic`` and ``body`` (plain strings). A message a
    subscriber is handed may have reached one before (``redelivered``: a group member that
    died held it, or its callback raised, or its sender sent it again after a crash): not
    part of the message itself (never sent, not compared)."""

    timestamp: int
    address: str
    topic: str
    body: str
    redelivered: bool = field(default=False, compare=False)

    def with_address(self, address: str) -> Message:
        return replace(self, address=address)

    def with_body(self, body: str) -> Message:
        return replace(self, body=body)

    def with_topic(self, topic: str) -> Message:
        return replace(self, topic=topic)

    def to_json(self) -> str:
        return json.dumps(
            {"timestamp": self.timestamp, "address": self.address, "topic": self.topic,
             "body": self.body},
            ensure_ascii=False,
        )  # fmt: skip


def read_message(text: str) -> Message | str:
    """A floctrl message from its JSON body, or why it is not one."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        return f"not JSON: {exc}"
    if not isinstance(data, dict) or set(data) != {"timestamp", "address", "topic", "body"}:
        return "a floctrl message is an object with exactly timestamp, address, topic, body"
    timestamp = data["timestamp"]
    if not isinstance(timestamp, int) or isinstance(timestamp, bool):
        return "timestamp must be an integer"
    if not all(isinstance(data[k], str) for k in ("address", "topic", "body")):
        return "address, topic and body must be strings"
    return Message(timestamp, data["address"], data["topic"], data["body"])


# ----------------------------------------------------------------------------- YMP


@dataclass(frozen=True, slots=True)
class YmpRequest:
    """A validated YMP request (``docs/addressing.md``)."""

    sender_host: str
    sender_protocol: str
    sender_service: str
    id: str
    host: str
    protocol: str
    service: str
    action: str
    payload: dict[str, Any]


@dataclass(frozen=True, slots=True)
class YmpAnswer:
    """A validated YMP answer: routed to the caller of ``reply_to`` on ``host``."""

    sender_host: str
    sender_protocol: str
    sender_service: str
    id: str
    reply_to: str
    host: str
    protocol: str
    service: str
    action: str | None
    payload: dict[str, Any]


_YMP_STRINGS: Final = ("id", "host", "protocol", "service")
_SENDER: Final = frozenset({"host", "protocol", "service"})


def read_ymp(data: Any) -> YmpRequest | YmpAnswer | str:
    """One YMP message (parsed JSON), validated strictly: every MUST property present
    with its type, no other property. An answer (with ``reply-to``) may omit ``action``:
    the spec's property list marks it MUST, its own answer example has none, and answers
    are routed by ``host`` and ``reply-to`` alone."""
    if not isinstance(data, dict):
        return f"a YMP message is a JSON object, not {type(data).__name__}"
    answer = "reply-to" in data
    allowed = {"sender", *_YMP_STRINGS, "action", "payload"} | ({"reply-to"} if answer else set())
    extra = sorted(set(data) - allowed)
    if extra:
        return f"unexpected propert{'ies' if len(extra) > 1 else 'y'}: {', '.join(extra)}"
    required = ["sender", *_YMP_STRINGS, "payload"] + ([] if answer else ["action"])
    missing = [name for name in required if name not in data]
    if missing:
        return f"missing MUST propert{'ies' if len(missing) > 1 else 'y'}: {', '.join(missing)}"
    sender = data["sender"]
    if not isinstance(sender, dict) or set(sender) != _SENDER:
        return "sender must be an object with exactly host, protocol and service"
    for where, obj, names in (("sender.", sender, sorted(_SENDER)), ("", data, _YMP_STRINGS)):
        for name in names:
            if not isinstance(obj[name], str) or not obj[name]:
                return f"{where}{name} must be a non-empty string"
    for name in ("action", "reply-to"):
        if name in data and (not isinstance(data[name], str) or not data[name]):
            return f"{name} must be a non-empty string"
    if not isinstance(data["payload"], dict):
        return "payload must be an object"
    head = (sender["host"], sender["protocol"], sender["service"], data["id"])
    if answer:
        return YmpAnswer(*head, data["reply-to"], data["host"], data["protocol"],
                         data["service"], data.get("action"), data["payload"])  # fmt: skip
    return YmpRequest(*head, data["host"], data["protocol"], data["service"], data["action"],
                      data["payload"])  # fmt: skip


def read_ymp_packet(text: str) -> list[YmpRequest | YmpAnswer] | str:
    """A YMP email body: one message, or a packet ``{"messages": [...]}``; every message
    valid, else the reason (naming the message's index in a packet)."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        return f"not JSON: {exc}"
    if isinstance(data, dict) and set(data) == {"messages"}:
        if not isinstance(data["messages"], list) or not data["messages"]:
            return "a packet's messages must be a non-empty list"
        found: list[YmpRequest | YmpAnswer] = []
        for index, item in enumerate(data["messages"]):
            message = read_ymp(item)
            if isinstance(message, str):
                return f"messages[{index}]: {message}"
            found.append(message)
        return found
    message = read_ymp(data)
    return message if isinstance(message, str) else [message]
