"""A message larger than one email may be: sent as parts (``_packing.split_email``).

:class:`SplittingSender` wraps the context's sender (outside the signing one: each part
is signed on its own). The largest email is ``max-email-bytes`` when configured, else
what the server advertised in its SMTP ``SIZE`` once the sender has connected, else
:data:`DEFAULT_MAX_EMAIL_BYTES`. A part's body is cut so that, encoded as base64 and
encrypted (base64 again) with its headers, the part stays below it.
"""

from __future__ import annotations

from typing import Final

from .._core.config import NO_BATCH, BatchPolicy, Options
from .._core.errors import MessageTooLargeError
from .._core.packing import split_email
from .._core.types import Email
from .._core.wire import new_message_id, prepare_outgoing
from .base import EmailSender, FailureCallback, Readers, SenderWrapper

__all__ = ["DEFAULT_MAX_EMAIL_BYTES", "SplittingSender"]

#: the largest email when neither the configuration nor the server says (Postfix's default
#: message_size_limit is 10,240,000)
DEFAULT_MAX_EMAIL_BYTES: Final = 10_000_000
#: room for a part's headers (signature, metadata, MIME)
_HEADER_ROOM: Final = 64 * 1024
#: a body this small fits any server (no need to ask it)
_SURELY_FITS: Final = 256 * 1024


class SplittingSender(SenderWrapper):
    """Sends what fits as it is and a larger message as parts, each through ``inner``
    (the same guarantee and batch policy for every part). With ``readers``, only towards
    accounts whose readers all said they read parts (a C++ ``rmw_email`` peer does not):
    an account not heard of yet is asked, and waited for up to ``timeout``; one whose
    readers do not read parts gets :class:`~emailmw.MessageTooLargeError` (one email could
    not carry it either). Thread-safe as ``inner``; closing closes it."""

    def __init__(
        self, inner: EmailSender, options: Options, readers: Readers | None = None
    ) -> None:
        super().__init__(inner)
        self._options = options
        self._readers = readers

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
        if self._readers is not None and not self._readers.accept(
            recipients, "parts", wait=self._options.timeout
        ):
            raise MessageTooLargeError(
                f"body of {size} bytes is larger than one email to {', '.join(recipients)} "
                f"may be ({self.max_email_bytes() or DEFAULT_MAX_EMAIL_BYTES} bytes), and "
                "not every reader there said it reads a message in parts: send it smaller "
                "(docs/batching.md)"
            )
        if email.message_id is None:
            email = email.with_message_id(new_message_id(self.address))
        for part in split_email(email, chunk):
            # (never batched: a part fills an email, and a reader that claims mail, a group
            # member, claims each part of one message itself, to join them)
            self._inner.send(part, guarantee=guarantee, on_failure=on_failure, batch=NO_BATCH)
