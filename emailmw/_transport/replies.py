"""What an SMTP server's answer means, read by its codes: pure, no backend.

An answer is its reply code (RFC 5321) and its text, which most servers begin with an
enhanced status code (RFC 3463: ``class.subject.detail``, such as ``5.2.2``). The enhanced
code decides where there is one; the reply code's class (4xx temporary, 5xx permanent)
and, only where no enhanced code says anything, the provider's words decide the rest.

:func:`reply_kind` sorts an answer into one of four kinds:

``throttle``
    the *sender* sends too much: all sending waits (``421``; ``4.7.x``, Gmail's rate
    limits; ``x.4.5``, congestion and Gmail's daily quota; ``4.3.2``, Exchange's "thread
    limit exceeded"; without an enhanced code, words such as "rate limit", "try again
    later", "sending quota").
``recipient``
    it concerns the one recipient it answers (a RCPT, or a DATA answer for a transaction
    of one): its mailbox (``x.2.x``: full or over quota ``x.2.2``, disabled ``x.2.1``),
    its address (``x.1.x``), or one recipient too many for this transaction (``x.5.3``);
    the other recipients are not concerned. Temporary when :func:`recipient_may_retry`.
``temporary``
    any other 4xx: the same email may be accepted later.
``permanent``
    any other 5xx (``5.7.1`` "Too many invalid recipients" included: a refusal, not a
    rate).
"""

from __future__ import annotations

import re
from typing import Final, Literal

__all__ = ["ReplyKind", "enhanced_status", "recipient_may_retry", "reply_kind"]

ReplyKind = Literal["throttle", "recipient", "temporary", "permanent"]

_ENHANCED: Final = re.compile(r"^\s*(?:\d{3}[ -])?\s*([245])\.(\d{1,3})\.(\d{1,3})\b")
#: without an enhanced code: words that say the sender sends too much ...
_THROTTLE_WORDS: Final = re.compile(
    r"rate limit|too much mail|try again later|sending quota|throttl|too many (?:messages|"
    r"emails|mails|connections|sessions)|temporarily deferred|thread limit",
    re.I,
)
#: ... and words that say one recipient's mailbox cannot take it
_MAILBOX_WORDS: Final = re.compile(
    r"mailbox (?:is )?full|over (?:the )?quota|quota exceeded|exceeded (?:the )?(?:storage|"
    r"quota)|insufficient (?:system )?storage|too many recipients|user unknown|no such user",
    re.I,
)


def enhanced_status(text: str) -> tuple[int, int, int] | None:
    """The enhanced status code an answer's text begins with (after its reply code, if
    the text carries that too), or None."""
    found = _ENHANCED.match(text)
    if found is None:
        return None
    return int(found.group(1)), int(found.group(2)), int(found.group(3))


def reply_kind(code: int, text: str) -> ReplyKind:
    """What the answer ``code`` ``text`` means (see the module)."""
    if code == 421:
        return "throttle"  # (the server closes the connection: it serves no more now)
    status = enhanced_status(text)
    if status is not None:
        klass, subject, detail = status
        if (klass, subject) == (4, 7) or (subject, detail) == (4, 5) or status == (4, 3, 2):
            return "throttle"
        if subject in (1, 2) or (subject, detail) == (5, 3):
            return "recipient"
    elif 400 <= code < 600:
        if _THROTTLE_WORDS.search(text):
            return "throttle"
        if _MAILBOX_WORDS.search(text):
            return "recipient"
    return "permanent" if 500 <= code < 600 else "temporary"


def recipient_may_retry(code: int, text: str) -> bool:
    """Whether a recipient refused with this answer may take the email later: a 4xx
    (a mailbox full for now), or one recipient too many for one transaction (``x.5.3``:
    it goes in a transaction of its own)."""
    status = enhanced_status(text)
    if status is not None and status[1:] == (5, 3):
        return True
    if status is None and re.search(r"too many recipients", text, re.I):
        return True
    return 400 <= code < 500
