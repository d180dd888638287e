"""A message larger than one email may be: sent as parts (``_packing.split_email``).

:class:`SplittingSender` wraps the context's sender (outside the signing one: each part
is signed on its own). The largest email is ``max-email-bytes`` when configured, else
what the server advertised in its SMTP ``SIZE`` once the sender has connected, else
:data:`DEFAULT_MAX_EMAIL_BYTES`. A part's body is cut so that, encoded as base64 and
encrypted (base64 again) with its headers, the part stays below it.

Parts go only to accounts whose readers said they read them. A message that needs parts
towards an account whose readers have not said so (offline now, or not heard from yet)
waits for them as its guarantee keeps it (:class:`Held`): in memory (``memory``: lost if
the process dies) or in the spool's ``held`` folder (``spool``: a process that starts with
the spool takes it over); it is split and sent once they say so. With ``server`` the
caller waits up to ``timeout`` and gets :class:`~emailmw.MessageTooLargeError`.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from .._core.config import NO_BATCH, BatchPolicy, Options
from .._core.errors import ClosedError, MessageTooLargeError, SendError
from .._core.log import get_logger
from .._core.packing import (
    BODY_ENCODING_HEADER,
    COMPRESS_WHEN_READ_HEADER,
    compress_body,
    split_email,
)
from .._core.types import Email, Headers
from .._core.wire import new_message_id, prepare_outgoing
from .base import EmailSender, FailureCallback, Readers, SenderWrapper

__all__ = ["DEFAULT_MAX_EMAIL_BYTES", "Held", "SplittingSender"]

_log = get_logger("split")
#: how often held messages look whether their readers said they read parts (each look
#: asks the readers again, at most every 10 s: ``Peers``)
_HELD_LOOK: Final = 2.0

#: the largest email when neither the configuration nor the server says (Postfix's default
#: message_size_limit is 10,240,000)
DEFAULT_MAX_EMAIL_BYTES: Final = 10_000_000
#: room for a part's headers (signature, metadata, MIME)
_HEADER_ROOM: Final = 64 * 1024
#: a body this small fits any server (no need to ask it)
_SURELY_FITS: Final = 256 * 1024


@dataclass(eq=False)
class _Waiting:
    """A message held until its readers read parts."""

    email: Email
    guarantee: str
    on_failure: FailureCallback | None
    path: Path | None  # its file in the spool's held folder (``spool``)
    size: int


def _email_json(email: Email) -> bytes:
    return json.dumps({
        "subject": email.subject, "body": email.body, "from": email.from_,
        "to": list(email.to), "cc": list(email.cc), "bcc": list(email.bcc),
        "reply_to": list(email.reply_to), "headers": list(email.headers.items()),
        "message_id": email.message_id, "in_reply_to": email.in_reply_to,
        "references": list(email.references),
    }).encode()  # fmt: skip


def _json_email(data: bytes) -> Email:
    d = json.loads(data)
    return Email(d["subject"], d["body"], d["from"], d["to"], d["cc"], d["bcc"],
                 reply_to=d["reply_to"], headers=[tuple(h) for h in d["headers"]],
                 message_id=d["message_id"], in_reply_to=d["in_reply_to"],
                 references=d["references"])  # fmt: skip


class Held:
    """Messages that need parts, waiting until every reader of their recipients said it
    reads parts; each is then split and sent (``release``) with the guarantee it was
    given. ``memory``: at most ``outbox-size`` messages and ``queue-bytes`` bytes (a full
    hold blocks the caller up to ``timeout``, then raises, as a full outbox does); lost if
    the process dies, reported to their owners when it closes. ``spool``: each written to
    the spool's ``held`` folder (fsync'ed) before :meth:`hold` returns, removed once its
    parts are in the outbox; a process that starts with the spool holds what a dead one
    left. Thread-safe."""

    def __init__(self, options: Options, readers: Readers,
                 release: Callable[[_Waiting], None]) -> None:  # fmt: skip
        self._options = options
        self._readers = readers
        self._release = release
        self._cond = threading.Condition()
        self._waiting: list[_Waiting] = []
        self._memory_bytes = 0
        self._closed = False
        self._directory: Path | None = None
        if options.spool is not None:
            self._directory = Path(options.spool) / "held"
            self._directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chmod(self._directory, 0o700)  # (bodies in clear: private)
            for stale in self._directory.glob(".*.tmp"):
                stale.unlink(missing_ok=True)
            for path in sorted(self._directory.glob("*.json")):
                try:
                    email = _json_email(path.read_bytes())
                except (OSError, ValueError, KeyError, TypeError) as exc:
                    _log.error("cannot read held message %s (%s): left there", path.name, exc)
                    continue
                self._waiting.append(_Waiting(email, "spool", None, path, len(email.body)))
            if self._waiting:
                _log.info("%d message(s) in parts left held in %s: sent once their readers "
                          "say they read parts", len(self._waiting), self._directory)  # fmt: skip
        self._thread = threading.Thread(target=self._run, name="emailmw-held", daemon=True)
        self._thread.start()

    def __len__(self) -> int:
        with self._cond:
            return len(self._waiting)

    def hold(self, email: Email, guarantee: str, on_failure: FailureCallback | None) -> None:
        size = len(email.body.encode())
        path = None
        with self._cond:
            if self._closed:
                raise ClosedError("the sender is closed")
            if guarantee == "memory":
                deadline = time.monotonic() + self._options.timeout
                while self._waiting and (
                    sum(1 for w in self._waiting if w.path is None) >= self._options.outbox_size
                    or self._memory_bytes + size > self._options.queue_bytes
                ):
                    left = deadline - time.monotonic()
                    if left <= 0 or self._closed:
                        raise SendError(
                            "messages held for their readers fill the memory "
                            "allowed (outbox-size, queue-bytes)",
                            temporary=True,
                        )
                    self._cond.wait(left)
                self._memory_bytes += size
        if guarantee == "spool":
            path = self._write(email)
        with self._cond:
            self._waiting.append(_Waiting(email, guarantee, on_failure, path, size))
            self._cond.notify_all()
        _log.info("holding message %s (%d bytes, in parts) for %s until a reader there says "
                  "it reads a message in parts (%s)", email.message_id, size,
                  ", ".join([*email.to, *email.cc, *email.bcc]),
                  "in the spool" if path is not None else "in memory")  # fmt: skip

    def _write(self, email: Email) -> Path:
        assert self._directory is not None
        name = f"{time.time_ns():020d}-{uuid.uuid4().hex[:8]}.json"
        path, tmp = self._directory / name, self._directory / f".{name}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(_email_json(email))
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
        dir_fd = os.open(self._directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        return path

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._closed:
                    return
                waiting = list(self._waiting)
            for item in waiting:
                recipients = [*item.email.to, *item.email.cc, *item.email.bcc]
                if not self._readers.accept(recipients, "parts"):
                    continue
                try:
                    self._release(item)
                except Exception as exc:  # noqa: BLE001 - kept, tried again at the next look
                    _log.warning("held message %s not sent yet: %s", item.email.message_id, exc)
                    continue
                self._forget(item)
            with self._cond:
                if not self._closed:
                    self._cond.wait(_HELD_LOOK)

    def _forget(self, item: _Waiting) -> None:
        if item.path is not None:
            with contextlib.suppress(FileNotFoundError):
                item.path.unlink()
        with self._cond:
            if item in self._waiting:
                self._waiting.remove(item)
                if item.path is None:
                    self._memory_bytes -= item.size
            self._cond.notify_all()

    def flush(self, timeout: float | None) -> bool:
        """Wait until nothing is held (up to ``timeout``): whether nothing is."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._waiting and not self._closed:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    break
                self._cond.wait(left)
            return not self._waiting

    def close(self) -> None:
        """Stop; what is held in memory is reported to its owner as not sent (a spool's
        stays for the next process)."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            lost = [w for w in self._waiting if w.path is None]
            self._cond.notify_all()
        self._thread.join(5)
        for item in lost:
            error = SendError(f"message {item.email.message_id} not sent: no reader of "
                              f"{', '.join(item.email.to)} said it reads a message in parts "
                              "before the sender closed", temporary=True)  # fmt: skip
            _log.warning("%s", error)
            if item.on_failure is not None:
                item.on_failure(item.email, error)


class SplittingSender(SenderWrapper):
    """Sends what fits as it is and a larger message as parts, each through ``inner``
    (the same guarantee and batch policy for every part). With ``readers``, only towards
    accounts whose readers all said they read parts (a C++ ``rmw_email`` peer does not):
    an account not heard of yet is asked, and waited for up to ``timeout``; then the
    message waits for its readers as its guarantee keeps it (``memory``, ``spool``:
    :class:`Held`), or the caller gets :class:`~emailmw.MessageTooLargeError`
    (``server``, and an account named in ``plain-readers``: one email could not carry it
    either). Thread-safe as ``inner``; closing closes it."""

    def __init__(
        self, inner: EmailSender, options: Options, readers: Readers | None = None
    ) -> None:
        super().__init__(inner)
        self._options = options
        self._readers = readers
        self._held: Held | None = None
        self._held_lock = threading.Lock()
        if readers is not None and options.spool is not None and (
            Path(options.spool) / "held").is_dir() and any(
            (Path(options.spool) / "held").glob("*.json")):  # fmt: skip
            self._holding()  # (what a dead process left held)

    def _holding(self) -> Held:
        with self._held_lock:
            if self._held is None:
                assert self._readers is not None
                self._held = Held(self._options, self._readers, self._release)
            return self._held

    def _release(self, item: _Waiting) -> None:
        """A held message's readers read parts now: it is sent (compressed first when it
        asked to be and they read zstd)."""
        self.send(item.email, guarantee=item.guarantee, on_failure=item.on_failure,
                  batch=NO_BATCH)  # fmt: skip

    def _send_parts(self, email: Email, guarantee: str | None,
                    on_failure: FailureCallback | None) -> None:  # fmt: skip
        chunk = self.chunk_bytes(self.learn_max_email_bytes(self._options.timeout))
        for part in split_email(email, chunk):
            # (never batched: a part fills an email, and a reader that claims mail, a group
            # member, claims each part of one message itself, to join them)
            self._inner.send(part, guarantee=guarantee, on_failure=on_failure, batch=NO_BATCH)

    def flush(self, timeout: float | None = None) -> bool:
        """``inner``'s flush, after what is held was sent (False: something still is)."""
        started = time.monotonic()
        held = self._held
        if held is not None and not held.flush(timeout):
            return False
        left = None if timeout is None else max(0.0, timeout - (time.monotonic() - started))
        return self._inner.flush(left)

    def close(self) -> None:
        held = self._held
        if held is not None:
            held.close()
        self._inner.close()

    def max_email_bytes(self) -> int | None:
        return self._options.max_email_bytes or self._inner.max_email_bytes()

    def learn_max_email_bytes(self, timeout: float) -> int | None:
        return self._options.max_email_bytes or self._inner.learn_max_email_bytes(timeout)

    def chunk_bytes(self, limit: int | None = None) -> int:
        """The most body bytes a part carries (below ``limit``, else what is known)."""
        limit = limit or self.max_email_bytes() or DEFAULT_MAX_EMAIL_BYTES
        # base64 (4/3), then encryption's base64 again (4/3): 9/16 of what is left
        return max(1024, (limit - _HEADER_ROOM) * 9 // 16)

    def send(
        self,
        email: Email,
        *,
        guarantee: str | None = None,
        on_failure: FailureCallback | None = None,
        batch: BatchPolicy | None = None,
    ) -> None:
        marked = email
        wanted = email.headers.get(COMPRESS_WHEN_READ_HEADER)
        if wanted is not None:  # (never on the wire)
            email = email.replace(headers=Headers(
                [(k, v) for k, v in email.headers.items()
                 if k.lower() != COMPRESS_WHEN_READ_HEADER.lower()]))  # fmt: skip
        if len(email.body) * 4 <= _SURELY_FITS:
            self._inner.send(email, guarantee=guarantee, on_failure=on_failure, batch=batch)
            return
        # (a large body: what the server takes, asked once when not known yet)
        chunk = self.chunk_bytes(self.learn_max_email_bytes(self._options.timeout))
        if len(email.body) * 4 <= chunk or len(email.body.encode()) <= chunk:
            self._inner.send(email, guarantee=guarantee, on_failure=on_failure, batch=batch)
            return
        size = len(email.body.encode())
        if size > self._options.max_message_size:
            raise MessageTooLargeError(
                f"body of {size} bytes exceeds max-message-size "
                f"({self._options.max_message_size}); raise it on both sides to send it"
            )
        email = prepare_outgoing(email, self.address)
        recipients = [*email.to, *email.cc, *email.bcc]
        message_id = email.message_id or new_message_id(self.address)
        email = email.with_message_id(message_id)
        kept = guarantee or self._options.send_guarantee
        if self._readers is not None and not self._readers.accept(
            recipients, "parts", wait=self._options.timeout
        ):
            plain = self._readers.refusing(recipients, "parts")
            if kept in ("memory", "spool") and not plain:
                self._holding().hold(marked.with_message_id(message_id), kept, on_failure)
                return
            raise MessageTooLargeError(
                f"body of {size} bytes is larger than one email to {', '.join(recipients)} "
                f"may be ({self.max_email_bytes() or DEFAULT_MAX_EMAIL_BYTES} bytes), and "
                + (f"{', '.join(plain)} is read by plain readers (plain-readers): send it "
                   "smaller" if plain else "no reader there said it reads a message in parts "
                   f"within {self._options.timeout:g} s: send it smaller, or with "
                   "send-guarantee memory or spool, which hold it until a reader says so")
                + " (docs/batching.md)"
            )  # fmt: skip
        if (
            wanted is not None
            and self._readers is not None
            and self._readers.accept(recipients, "zstd")
        ):  # (its readers said so meanwhile: compressed, it may fit one email)
            email = email.replace(
                body=compress_body(email.body),
                headers=Headers([*email.headers.items(), (BODY_ENCODING_HEADER, wanted)]),
            )
            if len(email.body.encode()) <= chunk:
                self._inner.send(email, guarantee=guarantee, on_failure=on_failure, batch=batch)
                return
        self._send_parts(email, guarantee, on_failure)
