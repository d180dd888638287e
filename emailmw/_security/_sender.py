"""The sending side of security: a sender that signs (and encrypts) what it sends."""

from __future__ import annotations

from .._core.config import BatchPolicy
from .._core.types import Email
from .._transport.base import EmailSender, FailureCallback
from ._policy import Security

__all__ = ["SecureSender"]


class SecureSender(EmailSender):
    """Wraps a sender: every email goes out through :meth:`Security.outgoing` (completed,
    permission-checked, encrypted when configured, signed). Thread-safe as the sender it
    wraps; closing closes that sender."""

    def __init__(self, inner: EmailSender, security: Security) -> None:
        self._inner = inner
        self._security = security
        self.address = inner.address

    def __repr__(self) -> str:
        return f"<SecureSender {self._security!r} over {self._inner!r}>"

    def send(
        self,
        email: Email,
        *,
        guarantee: str | None = None,
        on_failure: FailureCallback | None = None,
        batch: BatchPolicy | None = None,
    ) -> None:
        self._inner.send(
            self._security.outgoing(email, self.address),
            guarantee=guarantee,
            on_failure=on_failure,
            batch=batch,
        )

    def flush(self, timeout: float | None = None) -> bool:
        return self._inner.flush(timeout)

    def max_email_bytes(self) -> int | None:
        return self._inner.max_email_bytes()

    def learn_max_email_bytes(self, timeout: float) -> int | None:
        return self._inner.learn_max_email_bytes(timeout)

    def close(self) -> None:
        self._inner.close()
