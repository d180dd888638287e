"""The sending side of security: a sender that signs (and encrypts) what it sends."""

from __future__ import annotations

from .._core.config import BatchPolicy
from .._core.types import Email
from .._transport.base import EmailSender, FailureCallback, SenderWrapper
from ._policy import Security

__all__ = ["SecureSender"]


class SecureSender(SenderWrapper):
    """Wraps a sender: every email goes out through :meth:`Security.outgoing` (completed,
    permission-checked, encrypted when configured, signed). Thread-safe as the sender it
    wraps; closing closes that sender."""

    def __init__(self, inner: EmailSender, security: Security) -> None:
        super().__init__(inner)
        self._security = security

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
