"""The Stem face (``docs/addressing.md``, "Stem"): cells on hubs, messages with ``to``,
``from``, ``reply`` and ``orig`` addresses and a ``type``/``cmd``/``status``/``data``
content, delivered by Stem's three phases over the routing core.

A :class:`Cell` is registered on its context's hub. A message for it is delivered to
``<cmd>_cmd`` (type ``cmd``), else ``<type>_in``, else ``msg_in``; a cmd method's return
value (not None) goes back as a ``response`` to the message's ``reply`` address, else its
``from``; an exception as an ``error`` reply; ``ack_req`` sends a ``msg_ack`` to ``from``
once the method returned. Each cell's methods run one at a time on its own delivery thread.
Addressing errors and malformed messages are logged, counted on the router and left in the
mailbox; nothing a message holds can stop a cell.
"""

from __future__ import annotations

import secrets
import threading
from collections import OrderedDict
from typing import Any, Final

from .._core.addressing import Address, stem_methods
from .._core.errors import InvalidArgumentError, RemoteError, RoutingError
from .._core.futures import Future, Pending
from .._core.log import get_logger
from .._core.payloads import MSG_ID_WRAP, REPLY_TYPES, StemMessage
from .._core.payloads import read_stem as read_stem_body
from .._delivery.context import Context, resolve
from .._delivery.routing import FaceEndpoint, Refused, Routed, parse_address
from .._security import stem_send_name

__all__ = ["Cell", "StemMessage", "read_stem"]

_log = get_logger("stem")
FACE: Final = "stem"
#: messages a cell remembers having asked for a reply (a request, ``ack_req``)
_ASKED: Final = 10_000
_DELIMITERS: Final = ":/@-"


def read_stem(message: Routed) -> StemMessage | str:
    """A received routed message as a :class:`StemMessage`, or why it is not one."""
    return read_stem_body(message.body, message.envelope, message.info, message.message_id)


def _next_msg_id() -> int:
    """A fresh ``msg_id``: random (1 .. 2**31-1), so that no one can guess the id of a
    request to answer it in its place."""
    return 1 + secrets.randbelow(MSG_ID_WRAP - 1)


def _answers(reply_from: Address, asked: Address) -> bool:
    """Whether a reply from ``reply_from`` comes from where the message it answers went
    (``asked``: a cell, on a hub when it named one)."""
    return reply_from.name == asked.name and (not asked.hub or reply_from.hub == asked.hub)


class Cell(FaceEndpoint[StemMessage]):
    """A Stem cell named ``name`` (and ``target``) on its context's hub. Subclass it and
    define delivery methods taking a :class:`StemMessage`: ``<cmd>_cmd`` for commands
    (return a value to answer), ``<type>_in`` for other types, ``msg_in`` for the rest.

    Creating it registers it and starts receiving; :meth:`close` (or the context's
    shutdown) unregisters it. Sending is thread-safe. Raises
    :class:`~emailmw.RoutingError` for a name that cannot be an address part.
    """

    face = FACE
    context: Context

    def __init__(self, name: str, *, target: str = "", context: Context | None = None) -> None:
        ctx = resolve(context)
        address = Address.make(name, ctx.router.hub, target)
        if isinstance(address, str):
            raise RoutingError(address)
        if address.hub == "*" or address.name == "*":
            raise RoutingError("a cell's name and hub cannot be the wildcard '*'")
        if any(c in _DELIMITERS for c in name + target):
            raise RoutingError(
                f"cell {name!r} (target {target!r}): Stem addresses use : / @ - between "
                "their parts, so a cell name or target cannot hold them"
            )
        self.address = address
        self._lock = threading.RLock()  # request() holds it around send()
        self._pending: Pending[int, Any, None] = Pending(f"a command of cell {address}")
        # msg_id -> where it went, for each message that asked for a reply
        self._asked: OrderedDict[int, Address] = OrderedDict()
        super().__init__(ctx, name, target)

    def __repr__(self) -> str:
        return f"<emailmw.stem.Cell {self.address}>"

    # ---------------------------------------------------------------- sending

    def send(
        self,
        to: str | Address,
        *,
        type: str = "data",
        cmd: str | None = None,
        status: str | None = None,
        data: Any = None,
        ack_req: bool = False,
        reply: str | Address | None = None,
        reply_id: int | None = None,
        orig: str | Address | None = None,
    ) -> StemMessage:
        """Send a message from this cell to ``to`` (``cell``, ``hub:cell``,
        ``hub:cell:target``; delimiters ``:`` ``/`` ``@`` ``-``); returns it with its
        ``msg_id``. ``data`` must be JSON-serializable. Raises
        :class:`~emailmw.RoutingError` for a bad address or one with no route."""
        self._check_open()
        if type == "cmd" and not (cmd and cmd.isidentifier()):
            raise InvalidArgumentError("a cmd message needs cmd=, a name such as 'status'")
        message = StemMessage(
            parse_address(to),
            self.address,
            type,
            cmd,
            status,
            data,
            ack_req,
            parse_address(reply) if reply is not None else None,
            parse_address(orig) if orig is not None else None,
            _next_msg_id(),
            reply_id,
        )
        body = message.body()  # raises TypeError for data JSON cannot hold
        subject = f"{type} {cmd}" if cmd else type
        if ack_req or type == "cmd":
            with self._lock:
                self._asked[message.msg_id] = message.to
                while len(self._asked) > _ASKED:
                    self._asked.popitem(last=False)
        self._router.send(message.envelope(), f"stem {subject} to {message.to}", body)
        return message

    def request(self, to: str | Address, cmd: str, data: Any = None) -> Future[Any]:
        """Send command ``cmd`` and return a future of the answer's data: the ``response``
        to it, or :class:`~emailmw.RemoteError` for an ``error`` reply. The response is
        matched by ``reply_id`` and not delivered to a method."""
        with self._lock:  # its response is not looked for before its future exists
            message = self.send(to, type="cmd", cmd=cmd, data=data)
            return self._pending.add(message.msg_id, None, f"command {cmd!r} to {message.to}")

    def reply_to(self, message: StemMessage, *, type: str = "response", data: Any = None) -> None:
        """Send a reply to ``message`` (to its ``reply``, else ``from``)."""
        self.send(message.reply_to, type=type, data=data, reply_id=message.msg_id)

    # ---------------------------------------------------------------- receiving

    def _accept(self, message: Routed) -> StemMessage | Refused:
        stem = read_stem(message)
        return Refused(f"bad Stem message: {stem}") if isinstance(stem, str) else stem

    def _deliver(self, message: StemMessage) -> bool:
        if message.reply_id is not None and message.type in REPLY_TYPES:
            with self._lock:
                asked = self._asked.get(message.reply_id)
                bound = asked is not None and _answers(message.from_, asked)
                pending = self._pending.get(message.reply_id) if bound else None
            if pending is not None and message.type != "msg_ack":
                future = pending[0]
                if message.type == "error":
                    future.set_exception(RemoteError(f"{message.from_}: {message.data}"))
                else:
                    future.set_result(message.data)
                return True
            if not bound and not self._may_send(message):
                self._router.drop(
                    message.message_id,
                    message.envelope(),
                    f"{message.type} from {message.from_} answers nothing {self.address} "
                    "sent there, and its sender has no grant to send it",
                )
                return True  # refused: not for the application (logged, counted)
        first, default = stem_methods(message.type, message.cmd)
        method = getattr(self, first, None) or getattr(self, default, None)
        if not callable(method):
            self._router.drop(
                message.message_id,
                message.envelope(),
                f"cell {self.address} has neither {first} nor {default}",
            )
            return False
        try:
            result = method(message)
        except Exception as exc:  # noqa: BLE001 - the error goes back as a reply
            _log.warning(
                "%s.%s raised %s: %s", self.address, method.__name__, type(exc).__name__, exc
            )
            if message.type == "cmd":
                self._answer(message, "error", f"{type(exc).__name__}: {exc}")
        else:
            if message.type == "cmd" and result is not None:
                self._answer(message, "response", result)
        if message.ack_req:
            self._answer(message, "msg_ack", None, to=message.from_)
        return True

    def _may_send(self, message: StemMessage) -> bool:
        """Whether the verified sender of ``message`` holds the ``stem.send`` grant for it
        (always, without a permissions file): what a reply that answers nothing needs."""
        identity = message.info.identity if message.info is not None else None
        name = stem_send_name(message.to, self._router.hub, message.type, message.cmd)
        return self._allows(identity, "stem.send", name)

    def _answer(
        self, message: StemMessage, type_: str, data: Any, to: Address | None = None
    ) -> None:
        try:
            self.send(to or message.reply_to, type=type_, data=data, reply_id=message.msg_id)
        except Exception as exc:  # noqa: BLE001 - logged: the delivery thread goes on
            _log.warning(
                "%s: cannot send %s to %s: %s", self.address, type_, to or message.reply_to, exc
            )

    def close(self) -> None:
        """Unregister the cell and stop its delivery thread (after the queued messages).
        Pending requests fail with :class:`~emailmw.ClosedError`. Idempotent."""
        super().close()

    def _closed_hook(self) -> None:
        self._pending.fail_all(f"cell {self.address}")
